//! A test connector whose sessions share one memory store, with optional
//! per-session delay and failure injection.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use wanblk_blockdev::local::{Fill, MemoryEndpoint};
use wanblk_blockdev::{Capabilities, Connector, Endpoint, EndpointError, Extent, Result};

/// How the n-th opened session behaves.
#[derive(Clone, Copy, Default)]
pub struct Behaviour {
    pub delay: Option<Duration>,
    /// Fail with an I/O error (connection dropped) after this many requests.
    pub fail_after: Option<usize>,
}

pub struct TestConnector {
    pub store: Arc<MemoryEndpoint>,
    pub behaviours: Vec<Behaviour>,
    pub opened: AtomicUsize,
    pub multi_conn: bool,
    pub refuse_after: Option<usize>,
    /// Largest read or write any session was asked for.
    pub largest_request: Arc<AtomicUsize>,
    /// Most requests one session had running at once.
    pub peak_per_session: Arc<AtomicUsize>,
}

impl TestConnector {
    pub fn new(size: u64, behaviours: Vec<Behaviour>) -> Arc<Self> {
        Arc::new(TestConnector {
            store: Arc::new(MemoryEndpoint::new("mem", size, Fill::Zero)),
            behaviours,
            opened: AtomicUsize::new(0),
            multi_conn: true,
            refuse_after: None,
            largest_request: Arc::new(AtomicUsize::new(0)),
            peak_per_session: Arc::new(AtomicUsize::new(0)),
        })
    }
}

pub struct TestSession {
    store: Arc<MemoryEndpoint>,
    b: Behaviour,
    requests: AtomicUsize,
    multi_conn: bool,
    running: AtomicUsize,
    largest_request: Arc<AtomicUsize>,
    peak_per_session: Arc<AtomicUsize>,
}

#[async_trait]
impl Connector for TestConnector {
    fn name(&self) -> &str {
        "test://store"
    }
    async fn connect(&self) -> Result<Arc<dyn Endpoint>> {
        let n = self.opened.fetch_add(1, Ordering::SeqCst);
        if self.refuse_after.is_some_and(|r| n >= r) {
            return Err(EndpointError::io("test://store", None, "connection refused"));
        }
        let b = self.behaviours.get(n).copied().unwrap_or_default();
        Ok(Arc::new(TestSession {
            store: Arc::clone(&self.store),
            b,
            requests: AtomicUsize::new(0),
            multi_conn: self.multi_conn,
            running: AtomicUsize::new(0),
            largest_request: Arc::clone(&self.largest_request),
            peak_per_session: Arc::clone(&self.peak_per_session),
        }))
    }
}

impl TestSession {
    async fn gate(&self, offset: u64) -> Result<()> {
        let n = self.requests.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak_per_session.fetch_max(now, Ordering::SeqCst);
        if let Some(d) = self.b.delay {
            tokio::time::sleep(d).await;
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        if self.b.fail_after.is_some_and(|f| n >= f) {
            return Err(EndpointError::io("test://store", Some(offset), "connection reset by peer"));
        }
        Ok(())
    }
}

#[async_trait]
impl Endpoint for TestSession {
    fn name(&self) -> &str {
        "test://store"
    }
    fn size(&self) -> u64 {
        self.store.size()
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities { can_multi_conn: self.multi_conn, ..self.store.capabilities() }
    }
    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        self.largest_request.fetch_max(len as usize, Ordering::SeqCst);
        self.gate(offset).await?;
        self.store.read(offset, len).await
    }
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<()> {
        self.largest_request.fetch_max(data.len(), Ordering::SeqCst);
        self.gate(offset).await?;
        self.store.write(offset, data, fua).await
    }
    async fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<()> {
        self.gate(offset).await?;
        self.store.write_zeroes(offset, len, may_trim).await
    }
    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.store.trim(offset, len).await
    }
    async fn flush(&self) -> Result<()> {
        self.store.flush().await
    }
    async fn block_status(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        self.store.block_status(offset, len).await
    }
}

/// The bytes a test writes at `offset`: every 512-byte block carries its
/// own offset and `seed` (see `wanblk_testkit::data`), so a chunk that
/// lands one block off, at another chunk's place, or a chunk of another
/// write, reads back different.
pub fn data(offset: u64, len: usize, seed: u64) -> Bytes {
    wanblk_testkit::block_data(offset, len, seed)
}

/// Checks that `got` is what [`data`] wrote at `offset` with `seed`.
///
/// # Panics
/// With the first block that differs and what it holds instead (e.g. the
/// block of another offset: misplaced data).
pub fn assert_data(got: &[u8], offset: u64, seed: u64) {
    if let Err(e) = wanblk_testkit::check_blocks(got, offset, seed) {
        panic!("data read back at {offset}..{} is wrong: {e}", offset + got.len() as u64);
    }
}
