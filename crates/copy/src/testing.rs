//! The crate's unit tests' store: memory behind the [`Endpoint`] trait,
//! with an optional misbehaviour on writes and an optional preferred read
//! size (as a session pool has).

use bytes::Bytes;
use wanblk_blockdev::local::MemoryEndpoint;
use wanblk_blockdev::{Capabilities, Endpoint, Result};

/// What a misbehaving test destination does to writes.
pub(crate) enum Fault {
    /// Changes one byte of every write that covers this offset.
    Corrupt(u64),
    /// Writes at or past this offset never finish.
    StallFrom(u64),
}

/// A memory store with an optional [`Fault`] and preferred read size.
pub(crate) struct TestStore {
    pub(crate) inner: MemoryEndpoint,
    pub(crate) fault: Option<Fault>,
    pub(crate) prefer: Option<u32>,
}

impl TestStore {
    /// `inner` with writes that misbehave as `fault` says.
    pub(crate) fn faulty(inner: MemoryEndpoint, fault: Fault) -> Self {
        TestStore { inner, fault: Some(fault), prefer: None }
    }

    /// `inner` preferring reads of `prefer` bytes.
    pub(crate) fn preferring(inner: MemoryEndpoint, prefer: u32) -> Self {
        TestStore { inner, fault: None, prefer: Some(prefer) }
    }
}

#[async_trait::async_trait]
impl Endpoint for TestStore {
    fn name(&self) -> &str {
        "test store"
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn preferred_read_bytes(&self) -> Option<u32> {
        self.prefer
    }
    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        self.inner.read(offset, len).await
    }
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<()> {
        match self.fault {
            Some(Fault::Corrupt(bad)) if (offset..offset + data.len() as u64).contains(&bad) => {
                let mut v = data.to_vec();
                v[(bad - offset) as usize] ^= 0x20;
                self.inner.write(offset, Bytes::from(v), fua).await
            }
            Some(Fault::StallFrom(from)) if offset >= from => std::future::pending().await,
            _ => self.inner.write(offset, data, fua).await,
        }
    }
    async fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<()> {
        self.inner.write_zeroes(offset, len, may_trim).await
    }
    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.trim(offset, len).await
    }
    async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }
}
