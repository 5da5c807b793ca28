//! The pool splits large requests into chunks over several sessions and
//! reassembles them byte for byte.

mod common;

use std::sync::atomic::Ordering;
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::pool::{Pool, PoolConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_requests_round_trip_over_four_sessions() {
    let c = common::TestConnector::new(64 << 20, vec![]);
    let cfg =
        PoolConfig { initial_sessions: 4, max_request_bytes: 256 << 10, max_depth: 2, ..Default::default() };
    let pool = Pool::open(c.clone(), cfg).await.unwrap();
    assert_eq!(c.opened.load(Ordering::SeqCst), 4);
    let data = common::data(12345, 10 << 20, 3);
    pool.write(12345, data.clone(), false).await.unwrap();
    let back = pool.read(12345, data.len() as u32).await.unwrap();
    common::assert_data(&back, 12345, 3);
    let per_session: Vec<u64> = pool.snapshot().sessions.iter().map(|s| s.completed_bytes).collect();
    assert_eq!(per_session.len(), 4);
    assert!(per_session.iter().filter(|b| **b > 0).count() >= 2, "{per_session:?}");
    assert_eq!(per_session.iter().sum::<u64>(), pool.completed_bytes());
    assert_eq!(pool.completed_bytes(), 2 * data.len() as u64);
    pool.write_zeroes(0, 64 << 20, true).await.unwrap();
    assert_eq!(pool.read(12345, 16).await.unwrap(), vec![0u8; 16]);
    pool.flush().await.unwrap();
    pool.close().await.unwrap();
}

#[tokio::test]
async fn out_of_range_is_refused_with_the_offset() {
    let c = common::TestConnector::new(1 << 20, vec![]);
    let pool = Pool::open(c, PoolConfig::default()).await.unwrap();
    let e = pool.read((1 << 20) - 10, 20).await.unwrap_err();
    assert_eq!(e.offset, Some((1 << 20) - 10));
    assert!(e.to_string().contains("test://store"), "{e}");
}

#[tokio::test]
async fn without_multi_conn_the_pool_keeps_one_session_and_says_so() {
    let mut c = common::TestConnector::new(1 << 20, vec![]);
    std::sync::Arc::get_mut(&mut c).unwrap().multi_conn = false;
    let pool = Pool::open(c.clone(), PoolConfig { initial_sessions: 4, ..Default::default() }).await.unwrap();
    assert_eq!(c.opened.load(Ordering::SeqCst), 1);
    assert_eq!(pool.max_sessions(), 1);
    assert!(pool.notes().iter().any(|n| n.contains("CAN_MULTI_CONN")), "{:?}", pool.notes());
}

#[tokio::test]
async fn a_rate_cap_is_split_over_the_active_sessions_again_when_n_changes() {
    let c = common::TestConnector::new(1 << 20, vec![]);
    let pool = Pool::open(c.clone(), PoolConfig { initial_sessions: 4, ..Default::default() }).await.unwrap();
    assert!(c.pacing().iter().all(Option::is_none), "no cap, no pacing: {:?}", c.pacing());
    // Each session is paced at twice its share, at most the whole cap.
    pool.set_rate_cap(Some(1_000_000));
    assert_eq!(c.pacing(), vec![Some(500_000); 4]);
    pool.set_active(2).unwrap();
    assert_eq!(c.pacing(), vec![Some(1_000_000); 4]);
    pool.set_active(4).unwrap();
    assert_eq!(c.pacing(), vec![Some(500_000); 4]);
    pool.set_rate_cap(Some(4_000_000));
    assert_eq!(c.pacing(), vec![Some(2_000_000); 4]);
    pool.set_rate_cap(None);
    assert_eq!(c.pacing(), vec![None; 4]);
    pool.close().await.unwrap();
}
