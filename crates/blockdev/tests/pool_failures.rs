//! A dropped connection does not lose data: its chunk moves to another
//! session and a replacement opens. When nothing can serve, every request
//! fails with an error naming the store and the offset, and nothing hangs.

mod common;

use std::time::Duration;
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::pool::{Pool, PoolConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_session_is_replaced_and_no_data_is_lost() {
    // Every request takes a little time, so both sessions get work (with
    // instant requests the first session could drain the queue alone and
    // the flaky one never reach its fourth request: 1 run in 8 did).
    let slow = Some(Duration::from_millis(1));
    let flaky = common::Behaviour { fail_after: Some(3), delay: slow };
    let steady = common::Behaviour { delay: slow, ..Default::default() };
    let c = common::TestConnector::new(16 << 20, vec![steady, flaky]);
    let cfg =
        PoolConfig { initial_sessions: 2, max_request_bytes: 64 << 10, max_depth: 2, ..Default::default() };
    let pool = Pool::open(c.clone(), cfg).await.unwrap();
    let data = common::data(0, 8 << 20, 9);
    pool.write(0, data.clone(), false).await.unwrap();
    common::assert_data(&pool.read(0, data.len() as u32).await.unwrap(), 0, 9);
    // What the store holds, read directly (not through the pool's retries).
    common::assert_data(&c.store.read(0, 8 << 20).await.unwrap(), 0, 9);
    assert_eq!(pool.snapshot().failed(), 1);
    assert!(pool.notes().iter().any(|n| n.contains("session 1 failed")), "{:?}", pool.notes());
    assert!(c.opened.load(std::sync::atomic::Ordering::SeqCst) >= 3, "no replacement opened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_connection_fails_requests_fail_with_offset() {
    let dead = common::Behaviour { fail_after: Some(0), ..Default::default() };
    let mut c = common::TestConnector::new(16 << 20, vec![dead; 8]);
    std::sync::Arc::get_mut(&mut c).unwrap().refuse_after = Some(3);
    let cfg = PoolConfig {
        initial_sessions: 2,
        max_request_bytes: 64 << 10,
        max_reconnects: 4,
        ..Default::default()
    };
    let pool = Pool::open(c, cfg).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), pool.read(1 << 20, 1 << 20)).await;
    let e = r.expect("request must not hang").unwrap_err();
    assert!(e.to_string().contains("test://store"), "{e}");
    assert!(e.offset.is_some(), "{e}");
}
