//! Our client against nbdkit's memory plugin.

mod common;

use std::sync::Arc;

use common::*;
use wanblk_blockdev::Endpoint;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_against_nbdkit_memory() {
    let dir = wanblk_testkit::tempdir();
    let (_peer, uri) = nbdkit(dir.path(), &["memory", "size=64M"]);
    let s = connect(&uri).await;
    assert_eq!(s.size(), 64 << 20);
    let caps = s.capabilities();
    assert!(s.negotiated().structured_replies, "nbdkit supports structured replies");
    assert!(caps.can_block_status && caps.can_trim && caps.can_zero && caps.can_flush);
    assert!(caps.can_multi_conn, "nbdkit memory advertises multi-conn");
    within(60, exercise(&s)).await;
    // The memory plugin reports unwritten areas as holes.
    let ext = s.block_status(32 << 20, 1 << 20).await.unwrap();
    assert!(ext[0].hole && ext[0].zero, "{ext:?}");
    within(10, s.close()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_requests_in_flight_against_nbdkit_over_tcp() {
    let (_peer, uri) = nbdkit_tcp(&["memory", "size=64M"]);
    let s: Arc<dyn Endpoint> = Arc::new(connect(&uri).await);
    assert_eq!(s.tcp_info().len(), 1);
    let tasks: Vec<_> = (0..64u64)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                let data = pattern(256 << 10, i);
                s.write(i << 20, data.clone(), false).await.unwrap();
                assert_eq!(s.read(i << 20, 256 << 10).await.unwrap(), data);
            })
        })
        .collect();
    within(60, async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    s.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_conn_flag_follows_the_server() {
    let dir = wanblk_testkit::tempdir();
    let (_peer, uri) =
        nbdkit(dir.path(), &["--filter=multi-conn", "memory", "size=1M", "multi-conn-mode=disable"]);
    let s = connect(&uri).await;
    assert!(!s.capabilities().can_multi_conn);
    s.close().await.unwrap();
}
