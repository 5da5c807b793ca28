//! Our server handles many requests per connection concurrently and replies
//! out of order; shutdown with idle clients connected is clean.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use common::*;
use wanblk_blockdev::local::{Fill, MemoryEndpoint};
use wanblk_blockdev::{Capabilities, Endpoint, ErrorKind, Result};
use wanblk_nbd::ServeOptions;

/// Memory whose reads at offset 0 take a second.
struct SlowAtZero(MemoryEndpoint);

#[async_trait]
impl Endpoint for SlowAtZero {
    fn name(&self) -> &str {
        "slow"
    }
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        if offset == 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        self.0.read(offset, len).await
    }
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<()> {
        self.0.write(offset, data, fua).await
    }
    async fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<()> {
        self.0.write_zeroes(offset, len, may_trim).await
    }
    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.0.trim(offset, len).await
    }
    async fn flush(&self) -> Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn replies_come_back_out_of_order() {
    let srv = TestServer::start(
        Arc::new(SlowAtZero(MemoryEndpoint::new("m", 1 << 20, Fill::Zero))),
        ServeOptions::default(),
    )
    .await;
    let s = Arc::new(connect(&srv.uri).await);
    let slow = {
        let s = s.clone();
        tokio::spawn(async move { s.read(0, 4096).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // A later request on the same connection completes while the first waits.
    let t = std::time::Instant::now();
    within(5, s.read(4096, 4096)).await.unwrap();
    assert!(t.elapsed() < Duration::from_millis(500), "not blocked behind the slow read");
    assert!(!slow.is_finished());
    within(5, slow).await.unwrap().unwrap();
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
