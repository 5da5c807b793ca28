//! Work pulling: a slow session takes fewer chunks instead of holding a
//! fixed stripe, and changing the active count moves work between sessions.

mod common;

use std::time::Duration;
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::pool::{Pool, PoolConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_session_carries_less() {
    let slow = common::Behaviour { delay: Some(Duration::from_millis(50)), ..Default::default() };
    let c = common::TestConnector::new(32 << 20, vec![slow]);
    let cfg =
        PoolConfig { initial_sessions: 4, max_request_bytes: 64 << 10, max_depth: 1, ..Default::default() };
    let pool = Pool::open(c, cfg).await.unwrap();
    pool.read(0, 16 << 20).await.unwrap();
    let per: Vec<u64> = pool.snapshot().sessions.iter().map(|s| s.completed_bytes).collect();
    // Session 0 sleeps 50 ms per chunk; the three fast ones share the rest.
    assert!(per[0] * 4 < per[1] + per[2] + per[3], "slow session carried too much: {per:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deactivated_sessions_idle_and_reactivation_reuses_them() {
    // Every request takes a little time, so every active worker gets work
    // (with instant requests a few fast workers could drain the queue).
    let slow = common::Behaviour { delay: Some(Duration::from_millis(2)), ..Default::default() };
    let c = common::TestConnector::new(32 << 20, vec![slow; 8]);
    let cfg =
        PoolConfig { initial_sessions: 4, max_request_bytes: 64 << 10, max_depth: 2, ..Default::default() };
    let pool = Pool::open(c.clone(), cfg).await.unwrap();
    pool.set_active(2).unwrap();
    let bytes = |p: &Pool| p.snapshot().sessions.iter().map(|s| s.completed_bytes).collect::<Vec<_>>();
    let before = bytes(&pool);
    pool.read(0, 8 << 20).await.unwrap();
    let after = bytes(&pool);
    assert_eq!(before[2], after[2], "idle session 2 took work");
    assert_eq!(before[3], after[3], "idle session 3 took work");
    assert!(after[0] > 0 && after[1] > 0);
    // Growing again reuses the idle sessions: nothing new is opened.
    pool.set_active(4).unwrap();
    pool.read(0, 8 << 20).await.unwrap();
    assert_eq!(c.opened.load(std::sync::atomic::Ordering::SeqCst), 4);
    assert!(bytes(&pool)[3] > 0);
    // Growing past the open sessions opens more, lazily.
    pool.set_active(6).unwrap();
    tokio::time::timeout(Duration::from_secs(5), async {
        while pool.snapshot().open() < 6 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("pool opened the extra sessions");
    assert_eq!(pool.snapshot().active, 6);
    // More than the pool may open is refused, and changes nothing.
    assert!(pool.set_active(65).is_err());
    assert!(pool.set_active(0).is_err());
    assert_eq!(pool.snapshot().active, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_status_and_flush_do_not_wait_behind_a_stalled_session() {
    // Sessions 0 and 1 stall for 5 s per request; block status and flush
    // go to the side session and answer at once.
    let stall = common::Behaviour { delay: Some(Duration::from_secs(5)), ..Default::default() };
    let c = common::TestConnector::new(32 << 20, vec![stall, stall]);
    let cfg =
        PoolConfig { initial_sessions: 2, max_request_bytes: 1 << 20, max_depth: 2, ..Default::default() };
    let pool = std::sync::Arc::new(Pool::open(c.clone(), cfg).await.unwrap());
    let busy = {
        let p = pool.clone();
        tokio::spawn(async move { p.read(0, 4 << 20).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t0 = std::time::Instant::now();
    let map = pool.block_status(0, 32 << 20).await.unwrap();
    pool.flush().await.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2), "block status and flush waited {:?}", t0.elapsed());
    assert_eq!(map.iter().map(|e| e.length).sum::<u64>(), 32 << 20);
    assert_eq!(c.opened.load(std::sync::atomic::Ordering::SeqCst), 3, "one extra session: the side session");
    busy.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_hedges_a_straggler() {
    // Session 0 stalls for 10 s; once session 1 runs out of work it runs a
    // copy of the stalled chunk, and the read completes long before 10 s.
    // Session 1 takes 100 ms per request, so each session takes one chunk.
    let stall = common::Behaviour { delay: Some(Duration::from_secs(10)), ..Default::default() };
    let quick = common::Behaviour { delay: Some(Duration::from_millis(100)), ..Default::default() };
    let c = common::TestConnector::new(8 << 20, vec![stall, quick]);
    c.store.write(0, common::data(0, 2 << 20, 4), false).await.unwrap();
    let cfg =
        PoolConfig { initial_sessions: 2, max_request_bytes: 1 << 20, max_depth: 1, ..Default::default() };
    let pool = Pool::open(c, cfg).await.unwrap();
    let t0 = std::time::Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(5), pool.read(0, 2 << 20)).await;
    common::assert_data(&r.expect("the stalled chunk was not hedged").unwrap(), 0, 4);
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    let st = pool.snapshot();
    assert_eq!((st.hedged, st.hedges_won), (1, 1), "{st:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_not_hedged_unless_asked() {
    // Session 0 takes 3 s per request, session 1 300 ms: each takes one chunk.
    let stall = common::Behaviour { delay: Some(Duration::from_secs(3)), ..Default::default() };
    let quick = common::Behaviour { delay: Some(Duration::from_millis(300)), ..Default::default() };
    let c = common::TestConnector::new(8 << 20, vec![stall, quick]);
    let cfg =
        PoolConfig { initial_sessions: 2, max_request_bytes: 1 << 20, max_depth: 1, ..Default::default() };
    let pool = Pool::open(c, cfg).await.unwrap();
    let t0 = std::time::Instant::now();
    pool.write(0, common::data(0, 2 << 20, 1), false).await.unwrap();
    assert!(t0.elapsed() >= Duration::from_secs(3), "the stalled write was waited for");
    assert_eq!(pool.snapshot().hedged, 0);
    let c = common::TestConnector::new(8 << 20, vec![stall, quick]);
    let cfg = PoolConfig { hedge: wanblk_blockdev::pool::Hedge::ReadsAndWrites, ..cfg };
    let pool = Pool::open(c.clone(), cfg).await.unwrap();
    let data = common::data(0, 2 << 20, 2);
    let t0 = std::time::Instant::now();
    pool.write(0, data.clone(), false).await.unwrap();
    assert!(t0.elapsed() < Duration::from_millis(2900), "{:?}", t0.elapsed());
    assert_eq!(pool.snapshot().hedges_won, 1, "{:?}", pool.snapshot());
    common::assert_data(&pool.read(0, 2 << 20).await.unwrap(), 0, 2);
    common::assert_data(&c.store.read(0, 2 << 20).await.unwrap(), 0, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deactivated_sessions_report_draining_until_their_requests_finish() {
    // 300 ms per request, 2 in flight per session: after set_active(1) the
    // second session still has its requests out for a while.
    let slow = common::Behaviour { delay: Some(Duration::from_millis(300)), ..Default::default() };
    let c = common::TestConnector::new(32 << 20, vec![slow; 2]);
    let cfg =
        PoolConfig { initial_sessions: 2, max_request_bytes: 1 << 20, max_depth: 2, ..Default::default() };
    let pool = std::sync::Arc::new(Pool::open(c, cfg).await.unwrap());
    assert_eq!(pool.snapshot().draining(), 0);
    let busy = {
        let p = pool.clone();
        tokio::spawn(async move { p.read(0, 16 << 20).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    pool.set_active(1).unwrap();
    assert_eq!(pool.snapshot().draining(), 1, "session 1 still has requests in flight");
    tokio::time::timeout(Duration::from_secs(5), async {
        while pool.snapshot().draining() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the deactivated session drained");
    busy.await.unwrap().unwrap();
    assert_eq!(pool.snapshot().draining(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smaller_request_size_and_depth_bound_what_a_session_holds() {
    let slow = common::Behaviour { delay: Some(Duration::from_millis(5)), ..Default::default() };
    let c = common::TestConnector::new(32 << 20, vec![slow; 2]);
    let cfg =
        PoolConfig { initial_sessions: 2, max_request_bytes: 1 << 20, max_depth: 4, ..Default::default() };
    let pool = Pool::open(c.clone(), cfg).await.unwrap();
    let data = common::data(0, 8 << 20, 7);
    pool.write(0, data.clone(), false).await.unwrap();
    assert_eq!(c.largest_request.load(std::sync::atomic::Ordering::SeqCst), 1 << 20);
    assert_eq!(c.peak_per_session.load(std::sync::atomic::Ordering::SeqCst), 4);
    // Requests of 256 KiB, 2 in flight per session: callers' 1 MiB reads
    // are cut and put back together, and nothing is lost.
    pool.set_request_bytes(256 << 10).unwrap();
    pool.set_depth(2).unwrap();
    assert_eq!(pool.capacity_bytes(), 1 << 20, "2 sessions x 2 x 256 KiB");
    c.largest_request.store(0, std::sync::atomic::Ordering::SeqCst);
    c.peak_per_session.store(0, std::sync::atomic::Ordering::SeqCst);
    let reads = (0..8u64).map(|i| pool.read(i << 20, 1 << 20));
    let parts = futures::future::try_join_all(reads).await.unwrap();
    common::assert_data(&parts.concat(), 0, 7);
    assert_eq!(c.largest_request.load(std::sync::atomic::Ordering::SeqCst), 256 << 10);
    assert!(c.peak_per_session.load(std::sync::atomic::Ordering::SeqCst) <= 2);
    // Out-of-range values are refused and change nothing: above the
    // largest request or depth, zero, or not a multiple of the block size.
    assert!(pool.set_request_bytes((1 << 20) + 512).is_err());
    assert!(pool.set_request_bytes(0).is_err());
    assert!(pool.set_depth(5).is_err());
    assert!(pool.set_depth(0).is_err());
    assert_eq!((pool.request_bytes(), pool.snapshot().depth), (256 << 10, 2));
    pool.set_request_bytes(1 << 20).unwrap();
    pool.set_depth(4).unwrap();
}
