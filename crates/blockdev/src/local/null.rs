//! `null:`: a sink that discards writes and reads as zeroes.

use async_trait::async_trait;
use bytes::Bytes;

use super::check_range;
use crate::endpoint::{Capabilities, Endpoint, Extent, Result};

/// Discards everything written; reads as zeroes; everything is a hole.
#[derive(Debug)]
pub struct NullEndpoint {
    size: u64,
}

impl NullEndpoint {
    /// A sink of `size` bytes.
    pub fn new(size: u64) -> Self {
        NullEndpoint { size }
    }
}

#[async_trait]
impl Endpoint for NullEndpoint {
    fn name(&self) -> &str {
        "null:"
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::everything()
    }
    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        check_range("null:", self.size, offset, len.into())?;
        Ok(Bytes::from(vec![0u8; len as usize]))
    }
    async fn write(&self, offset: u64, data: Bytes, _fua: bool) -> Result<()> {
        check_range("null:", self.size, offset, data.len() as u64)
    }
    async fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool) -> Result<()> {
        check_range("null:", self.size, offset, len)
    }
    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        check_range("null:", self.size, offset, len)
    }
    async fn flush(&self) -> Result<()> {
        Ok(())
    }
    async fn block_status(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        check_range("null:", self.size, offset, len)?;
        Ok(vec![Extent { offset, length: len, hole: true, zero: true }])
    }
}
