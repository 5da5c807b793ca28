//! Our server handles many requests per connection concurrently and replies
//! out of order; shutdown with idle clients connected is clean.

mod common;

use async_trait::async_trait;
use bytes::Bytes;
use common::*;
use std::sync::Arc;
use wanblk_blockdev::local::{Fill, MemoryEndpoint};
use wanblk_blockdev::{Capabilities, Endpoint, ErrorKind, Result};
use wanblk_nbd::ServeOptions;

/// Memory whose reads at offset 0 wait until the test lets them go, and
/// say when they arrived.
struct HeldAtZero {
    mem: MemoryEndpoint,
    arrived: tokio::sync::Notify,
    release: tokio::sync::Semaphore,
}

#[async_trait]
impl Endpoint for HeldAtZero {
    fn name(&self) -> &str {
        "held"
    }
    fn size(&self) -> u64 {
        self.mem.size()
    }
    fn capabilities(&self) -> Capabilities {
        self.mem.capabilities()
    }
    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        if offset == 0 {
            self.arrived.notify_one();
            let _ = self.release.acquire().await;
        }
        self.mem.read(offset, len).await
    }
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<()> {
        self.mem.write(offset, data, fua).await
    }
    async fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<()> {
        self.mem.write_zeroes(offset, len, may_trim).await
    }
    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.mem.trim(offset, len).await
    }
    async fn flush(&self) -> Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn replies_come_back_out_of_order() {
    let backend = Arc::new(HeldAtZero {
        mem: MemoryEndpoint::new("m", 1 << 20, Fill::Zero),
        arrived: tokio::sync::Notify::new(),
        release: tokio::sync::Semaphore::new(0),
    });
    let srv = TestServer::start(backend.clone(), ServeOptions::default()).await;
    let s = Arc::new(connect(&srv.uri).await);
    let held = {
        let s = s.clone();
        tokio::spawn(async move { s.read(0, 4096).await })
    };
    within(10, backend.arrived.notified()).await;
    // A later request on the same connection completes while the first is
    // held (behind it, it would never complete: the read at 0 waits for
    // the test).
    within(10, s.read(4096, 4096)).await.unwrap();
    assert!(!held.is_finished(), "the held read answered before it was released");
    backend.release.add_permits(1);
    within(10, held).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_small_payload_budget_still_serves_large_requests() {
    let srv = TestServer::memory(
        16 << 20,
        ServeOptions { max_in_flight_bytes: 1, max_in_flight: 2, ..Default::default() },
    )
    .await;
    let s = Arc::new(connect(&srv.uri).await);
    let tasks: Vec<_> = (0..8u64)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                let d = pattern(1 << 20, i);
                s.write(i << 20, d.clone(), false).await.unwrap();
                assert_eq!(s.read(i << 20, 1 << 20).await.unwrap(), d);
            })
        })
        .collect();
    for t in tasks {
        within(30, t).await.unwrap();
    }
}

#[tokio::test]
async fn shutdown_with_an_idle_client_connected_is_clean() {
    let srv = TestServer::memory(1 << 20, ServeOptions::default()).await;
    let s = connect(&srv.uri).await;
    s.read(0, 512).await.unwrap();
    within(10, srv.stop()).await;
    let e = within(10, s.read(0, 512)).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Io(_)), "{e}");
}
