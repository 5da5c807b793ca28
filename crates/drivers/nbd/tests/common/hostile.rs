//! Hostile servers: a real handshake, then a test-written script on the raw
//! socket. Shared with the command-level tests through testkit.
// Not every test binary that includes `common` uses them.
#![allow(unused_imports)]

pub use wanblk_testkit::nbd_hostile::*;
