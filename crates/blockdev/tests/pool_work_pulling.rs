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
    let cfg = PoolConfig { initial_sessions: 4, request_size: 64 << 10, depth: 1, ..Default::default() };
    let pool = Pool::open(c, cfg).await.unwrap();
    pool.read(0, 16 << 20).await.unwrap();
    let per: Vec<u64> = pool.session_completed_bytes().into_iter().map(|(_, b)| b).collect();
    // Session 0 sleeps 50 ms per chunk; the three fast ones share the rest.
    assert!(per[0] * 4 < per[1] + per[2] + per[3], "slow session carried too much: {per:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deactivated_sessions_idle_and_reactivation_reuses_them() {
    // Every request takes a little time, so every active worker gets work
    // (with instant requests a few fast workers could drain the queue).
    let slow = common::Behaviour { delay: Some(Duration::from_millis(2)), ..Default::default() };
    let c = common::TestConnector::new(32 << 20, vec![slow; 8]);
    let cfg = PoolConfig { initial_sessions: 4, request_size: 64 << 10, depth: 2, ..Default::default() };
    let pool = Pool::open(c.clone(), cfg).await.unwrap();
    assert_eq!(pool.set_active(2), 2);
    let before = pool.session_completed_bytes();
    pool.read(0, 8 << 20).await.unwrap();
    let after = pool.session_completed_bytes();
    assert_eq!(before[2], after[2], "idle session 2 took work");
    assert_eq!(before[3], after[3], "idle session 3 took work");
    assert!(after[0].1 > 0 && after[1].1 > 0);
    // Growing again reuses the idle sessions: nothing new is opened.
    pool.set_active(4);
    pool.read(0, 8 << 20).await.unwrap();
    assert_eq!(c.opened.load(std::sync::atomic::Ordering::SeqCst), 4);
    assert!(pool.session_completed_bytes()[3].1 > 0);
    // Growing past the open sessions opens more, lazily.
    pool.set_active(6);
    tokio::time::timeout(Duration::from_secs(5), async {
        while pool.stats().open < 6 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("pool opened the extra sessions");
    assert_eq!(pool.stats().active, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_requests_do_not_wait_behind_a_stalled_session() {
    // Sessions 0 and 1 stall for 5 s per request; block status and flush
    // go to a separate control session and answer at once.
    let stall = common::Behaviour { delay: Some(Duration::from_secs(5)), ..Default::default() };
    let c = common::TestConnector::new(32 << 20, vec![stall, stall]);
    let cfg = PoolConfig { initial_sessions: 2, request_size: 1 << 20, depth: 2, ..Default::default() };
    let pool = std::sync::Arc::new(Pool::open(c.clone(), cfg).await.unwrap());
    let busy = {
        let p = pool.clone();
        tokio::spawn(async move { p.read(0, 4 << 20).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t0 = std::time::Instant::now();
    let map = pool.block_status(0, 32 << 20).await.unwrap();
    pool.flush().await.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2), "control requests waited {:?}", t0.elapsed());
    assert_eq!(map.iter().map(|e| e.length).sum::<u64>(), 32 << 20);
    assert_eq!(c.opened.load(std::sync::atomic::Ordering::SeqCst), 3, "one extra, control, session");
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
    let cfg = PoolConfig { initial_sessions: 2, request_size: 1 << 20, depth: 1, ..Default::default() };
    let pool = Pool::open(c, cfg).await.unwrap();
    let t0 = std::time::Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(5), pool.read(0, 2 << 20)).await;
    assert!(r.is_ok(), "the stalled chunk was not hedged");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    let st = pool.stats();
    assert_eq!((st.hedged, st.hedges_won), (1, 1), "{st:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_not_hedged_unless_asked() {
    // Session 0 takes 3 s per request, session 1 300 ms: each takes one chunk.
    let stall = common::Behaviour { delay: Some(Duration::from_secs(3)), ..Default::default() };
    let quick = common::Behaviour { delay: Some(Duration::from_millis(300)), ..Default::default() };
    let c = common::TestConnector::new(8 << 20, vec![stall, quick]);
    let cfg = PoolConfig { initial_sessions: 2, request_size: 1 << 20, depth: 1, ..Default::default() };
    let pool = Pool::open(c, cfg).await.unwrap();
    let t0 = std::time::Instant::now();
    pool.write(0, common::pattern(2 << 20, 1), false).await.unwrap();
    assert!(t0.elapsed() >= Duration::from_secs(3), "the stalled write was waited for");
    assert_eq!(pool.stats().hedged, 0);
    let c = common::TestConnector::new(8 << 20, vec![stall, quick]);
    let cfg = PoolConfig { hedge: wanblk_blockdev::pool::Hedge::ReadsAndWrites, ..cfg };
    let pool = Pool::open(c, cfg).await.unwrap();
    let data = common::pattern(2 << 20, 2);
    let t0 = std::time::Instant::now();
    pool.write(0, data.clone(), false).await.unwrap();
    assert!(t0.elapsed() < Duration::from_millis(2900), "{:?}", t0.elapsed());
    assert_eq!(pool.stats().hedges_won, 1, "{:?}", pool.stats());
    assert!(pool.read(0, 2 << 20).await.unwrap() == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deactivated_sessions_report_draining_until_their_requests_finish() {
    // 300 ms per request, 2 in flight per session: after set_active(1) the
    // second session still has its requests out for a while.
    let slow = common::Behaviour { delay: Some(Duration::from_millis(300)), ..Default::default() };
    let c = common::TestConnector::new(32 << 20, vec![slow; 2]);
    let cfg = PoolConfig { initial_sessions: 2, request_size: 1 << 20, depth: 2, ..Default::default() };
    let pool = std::sync::Arc::new(Pool::open(c, cfg).await.unwrap());
    assert_eq!(pool.draining(), 0);
    let busy = {
        let p = pool.clone();
        tokio::spawn(async move { p.read(0, 16 << 20).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    pool.set_active(1);
    assert_eq!(pool.draining(), 1, "session 1 still has requests in flight");
    tokio::time::timeout(Duration::from_secs(5), async {
        while pool.draining() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the deactivated session drained");
    busy.await.unwrap().unwrap();
    assert_eq!(pool.draining(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smaller_split_and_depth_bound_what_a_session_holds() {
    let slow = common::Behaviour { delay: Some(Duration::from_millis(5)), ..Default::default() };
    let c = common::TestConnector::new(32 << 20, vec![slow; 2]);
    let cfg = PoolConfig { initial_sessions: 2, request_size: 1 << 20, depth: 4, ..Default::default() };
    let pool = Pool::open(c.clone(), cfg).await.unwrap();
    let data = common::pattern(8 << 20, 7);
    pool.write(0, data.clone(), false).await.unwrap();
    assert_eq!(c.largest_request.load(std::sync::atomic::Ordering::SeqCst), 1 << 20);
    assert_eq!(c.peak_per_session.load(std::sync::atomic::Ordering::SeqCst), 4);
    // Requests of 256 KiB, 2 in flight per session: callers' 1 MiB reads
    // are cut and put back together, and nothing is lost.
    assert_eq!(pool.set_split(256 << 10), 256 << 10);
    assert_eq!(pool.set_depth(2), 2);
    assert_eq!(pool.slots(), 1, "2 sessions x 2 x 256 KiB is one 1 MiB piece");
    c.largest_request.store(0, std::sync::atomic::Ordering::SeqCst);
    c.peak_per_session.store(0, std::sync::atomic::Ordering::SeqCst);
    let reads = (0..8u64).map(|i| pool.read(i << 20, 1 << 20));
    let parts = futures::future::try_join_all(reads).await.unwrap();
    assert!(parts.concat() == data[..], "data came back changed");
    assert_eq!(c.largest_request.load(std::sync::atomic::Ordering::SeqCst), 256 << 10);
    assert!(c.peak_per_session.load(std::sync::atomic::Ordering::SeqCst) <= 2);
    // Out-of-range values are clamped: at most the request size and the
    // configured depth, at least one block and one slot.
    assert_eq!(pool.set_split(u32::MAX), 1 << 20);
    assert_eq!(pool.set_depth(100), 4);
    assert_eq!(pool.set_depth(0), 1);
    assert!(pool.set_split(1) >= 1);
}
