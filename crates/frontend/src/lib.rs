//! The block device front end applications and file systems use: a block
//! cache with read-ahead of sequential streams and write-back of coalesced
//! writes, in front of any [`Endpoint`] (a session pool, usually, so the
//! prefetch and the write-back are carried over its N tuned sessions).
//!
//! ```text
//!   clients (NBD server of `wanblk serve`, FUSE file of `wanblk mount`)
//!        |  read / write / flush / FUA, small and one at a time
//!        v
//!   FrontEnd (driver.rs, tokio) -- an Endpoint
//!        |  now, completions in; fetch and send orders out
//!        v
//!   Engine (engine.rs, sans-I/O): layers, runs, streams (readahead.rs)
//!        |
//!        v  large reads ahead, coalesced writes, many in flight
//!   inner Endpoint (the session pool)
//! ```
//!
//! I/O boundary: [`Engine`] and the stream detector do no I/O and read no
//! clock; [`FrontEnd`] owns the tasks, the clock and the inner endpoint.
//!
//! [`Endpoint`]: wanblk_blockdev::Endpoint

#![forbid(unsafe_code)]

mod driver;
pub mod engine;
pub mod fuse;
mod ranges;
mod readahead;

pub use driver::FrontEnd;
pub use engine::{Config, Engine, Stats};
