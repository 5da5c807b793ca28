//! Many requests from many tasks in flight on one session, replies out of order.

mod common;

use std::sync::Arc;

use common::*;
use wanblk_blockdev::Endpoint;
use wanblk_nbd::ServeOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_concurrent_requests_complete() {
    let srv =
        TestServer::memory(64 << 20, ServeOptions { export_name: "m".into(), ..Default::default() }).await;
    let s: Arc<dyn Endpoint> = Arc::new(connect(&srv.uri).await);
    let mut tasks = Vec::new();
    for i in 0..256u64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let len = 4096 + (i as usize % 7) * 8192;
            let off = i * (256 << 10);
            let data = pattern(len, i);
            s.write(off, data.clone(), false).await.unwrap();
            assert_eq!(s.read(off, len as u32).await.unwrap(), data, "request {i}");
        }));
    }
    within(60, async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    s.close().await.unwrap();
}

#[tokio::test]
async fn several_sessions_see_one_image() {
    let srv =
        TestServer::memory(8 << 20, ServeOptions { export_name: "m".into(), ..Default::default() }).await;
    let a = connect(&srv.uri).await;
    let b = connect(&srv.uri).await;
    assert!(a.capabilities().can_multi_conn);
    let data = pattern(65536, 9);
    a.write(0, data.clone(), true).await.unwrap();
    assert_eq!(b.read(0, 65536).await.unwrap(), data);
}
