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
//! - [`NbdUri`] parses `nbd://host[:port]/export`,
//!   `nbd+unix:///export?socket=PATH` and their TLS forms `nbds://`,
//!   `nbds+unix://` with libnbd's `tls-*` query parameters.
//! - TLS (rustls): [`ClientTls`] / [`ServerTls`] load certificates in
//!   libnbd's and nbdkit's directory layouts (`tls.rs`); every connection
//!   is one `Stream` (TCP, Unix, or TLS over either, `stream.rs`), upgraded
//!   in place after NBD_OPT_STARTTLS, so neither the client nor the server
//!   has a TLS branch of its own.

mod client;
mod io;
mod server;
mod stream;
mod tls;
mod uri;

pub use client::{ConfigError, NbdConnector, NbdOptions, NbdSession};
pub use server::{NbdServer, ServeOptions, nbd_error};
pub use tls::{ClientTls, ServerTls, TlsClientOptions, TlsError, TlsServerOptions};
pub use uri::{DEFAULT_PORT, NbdUri, Transport, UriError, UriTls};
pub use wanblk_nbd_proto::Negotiated;
