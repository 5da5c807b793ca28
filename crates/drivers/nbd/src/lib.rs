//! NBD over tokio: the client endpoint and the server front end.
//!
//! The protocol itself lives in `wanblk-nbd-proto` (sans-I/O); this crate
//! is its I/O boundary: it owns the sockets, the tasks and the timeouts.
//!
//! - [`NbdConnector`] / [`NbdSession`]: the client. A session implements
//!   [`wanblk_blockdev::Endpoint`]; the connector implements
//!   [`wanblk_blockdev::Connector`] so the session pool can open N parallel
//!   sessions to one export.
//! - [`NbdServer`]: serves any `Arc<dyn Endpoint>` over TCP or a Unix
//!   socket (the embedded target behind `wanblk target`).
//! - [`NbdUri`]: `nbd://host[:port]/export` and
//!   `nbd+unix:///export?socket=PATH` (TLS URIs are refused).

mod client;
mod io;
mod server;
mod uri;

pub use client::{NbdConnector, NbdOptions, NbdSession};
pub use server::{NbdServer, ServeOptions, nbd_error};
pub use uri::{DEFAULT_PORT, NbdUri, Transport, UriError};
pub use wanblk_nbd_proto::Negotiated;
