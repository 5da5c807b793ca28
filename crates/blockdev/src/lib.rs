//! The block device layer: one [`Endpoint`] trait for every store, and the
//! parallel session pool that cuts block I/O into requests and carries them
//! over N sessions to the same store.
//!
//! I/O boundary: this crate does no protocol work itself; it drives
//! endpoints (NBD, iSCSI, local files) through the trait and measures the
//! goodput of completed requests.

pub mod endpoint;
pub mod local;
pub mod pool;

pub use endpoint::{
    BlockSizes, Capabilities, Connector, Endpoint, EndpointError, ErrorKind, Extent, Result, SendBacklog,
    TcpInfo,
};
