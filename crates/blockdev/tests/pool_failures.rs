//! A dropped connection does not lose data: its request moves to another
//! session and a replacement opens. When nothing can serve, every request
//! fails with an error naming the store and the offset, and nothing hangs.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Behaviour, Gate, TestConnector, assert_data, data, within};
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::pool::{Pool, PoolConfig, RetryPolicy};

/// Session 0 is steady but holds its requests until session 1 (which
/// drops its connection on its fourth request) has failed, so the failure
/// happens whatever the scheduling (with both free, session 0 could carry
/// everything before session 1 reached its fourth request: 1 run in 8 did).
fn steady_and_flaky() -> (Arc<TestConnector>, Arc<Gate>) {
    let steady = Gate::new();
    let flaky = Behaviour { fail_after: Some(3), ..Default::default() };
    (TestConnector::new(16 << 20, vec![Behaviour::gated(&steady), flaky]), steady)
}

fn cfg() -> PoolConfig {
    PoolConfig { initial_sessions: 2, max_request_bytes: 64 << 10, max_depth: 2, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_session_is_replaced_and_no_data_is_lost() {
    let (c, steady) = steady_and_flaky();
    let pool = Arc::new(Pool::open(c.clone(), cfg()).await.unwrap());
    let write = tokio::spawn({
        let p = Arc::clone(&pool);
        async move { p.write(0, data(0, 8 << 20, 9), false).await }
    });
    c.wait_for("session 1 drops its connection", |c| c.failures() >= 1).await;
    steady.open();
    within("the write", write).await.unwrap().unwrap();
    assert_data(&within("the read", pool.read(0, 8 << 20)).await.unwrap(), 0, 9);
    // What the store holds, read directly (not through the pool's retries).
    assert_data(&c.store.read(0, 8 << 20).await.unwrap(), 0, 9);
    assert_eq!(pool.snapshot().failed(), 1);
    assert!(pool.notes().iter().any(|n| n.contains("session 1 failed")), "{:?}", pool.notes());
    assert!(c.opened.load(std::sync::atomic::Ordering::SeqCst) >= 3, "no replacement opened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_on_a_dropped_session_is_retried_at_the_same_place() {
    let (c, steady) = steady_and_flaky();
    c.store.write(0, data(0, 8 << 20, 10), false).await.unwrap();
    let pool = Arc::new(Pool::open(c.clone(), cfg()).await.unwrap());
    let read = tokio::spawn({
        let p = Arc::clone(&pool);
        async move { p.read(0, 8 << 20).await }
    });
    c.wait_for("session 1 drops its connection", |c| c.failures() >= 1).await;
    steady.open();
    assert_data(&within("the read", read).await.unwrap().unwrap(), 0, 10);
    assert_eq!(pool.snapshot().failed(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_connection_fails_requests_fail_with_offset() {
    let dead = Behaviour { fail_after: Some(0), ..Default::default() };
    let mut c = TestConnector::new(16 << 20, vec![dead; 8]);
    Arc::get_mut(&mut c).unwrap().refuse_after = Some(3);
    let cfg = PoolConfig {
        initial_sessions: 2,
        max_request_bytes: 64 << 10,
        retry: RetryPolicy {
            retry_for: Duration::from_millis(500),
            backoff_min: Duration::from_millis(10),
            ..RetryPolicy::default()
        },
        ..Default::default()
    };
    let pool = Pool::open(c, cfg).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), pool.read(1 << 20, 1 << 20)).await;
    let e = r.expect("request must not hang").unwrap_err();
    assert!(e.to_string().contains("test://store"), "{e}");
    assert!(e.offset.is_some(), "{e}");
}
