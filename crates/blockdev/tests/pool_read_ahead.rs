//! Read-ahead waits behind demand: with one session and one slot busy, a
//! demand read queued after many read-ahead requests is served first.

mod common;

use std::sync::Arc;
use std::time::Duration;

use wanblk_blockdev::Endpoint;
use wanblk_blockdev::pool::{Pool, PoolConfig};

#[tokio::test]
async fn a_demand_read_overtakes_queued_read_ahead() {
    let c = common::TestConnector::new(
        64 << 20,
        vec![common::Behaviour { delay: Some(Duration::from_millis(10)), ..Default::default() }],
    );
    let cfg = PoolConfig { initial_sessions: 1, max_sessions: 1, max_depth: 1, ..Default::default() };
    let pool = Arc::new(Pool::open(c, cfg).await.unwrap());
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..20u64 {
        let (p, o) = (Arc::clone(&pool), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            p.read_ahead(i << 20, 4096).await.unwrap();
            o.lock().unwrap().push(format!("ahead {i}"));
        }));
        tokio::task::yield_now().await;
    }
    let (p, o) = (Arc::clone(&pool), Arc::clone(&order));
    tasks.push(tokio::spawn(async move {
        p.read(50 << 20, 4096).await.unwrap();
        o.lock().unwrap().push("demand".to_string());
    }));
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap();
    let at = order.iter().position(|s| s == "demand").unwrap();
    // The slot was busy with the first read-ahead (perhaps the second) when
    // the demand read came; it goes next, not 20th.
    assert!(at <= 2, "demand read served at position {at}: {order:?}");
    assert_eq!(order.len(), 21);
}
