//! Endpoints that need no network: a file or block device, memory, the
//! `null:` sink, and a pipe (standard output) as a destination. They serve
//! concurrent requests directly (positioned I/O; the pipe puts them in
//! order).

mod file;
mod memory;
mod null;
mod pipe;

pub use file::FileEndpoint;
pub use memory::{Fill, MemoryEndpoint};
pub use null::NullEndpoint;
pub use pipe::PipeSink;

use crate::endpoint::{EndpointError, Result};

/// Checks that `[offset, offset+len)` lies inside a store of `size` bytes.
pub(crate) fn check_range(name: &str, size: u64, offset: u64, len: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(EndpointError::config(
            name,
            Some(offset),
            format!("request of {len} bytes is beyond the end of the store ({size} bytes)"),
        )),
    }
}
