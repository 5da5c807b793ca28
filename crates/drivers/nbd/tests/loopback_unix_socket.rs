//! nbd+unix:// to our server on a Unix socket.

mod common;

use std::sync::Arc;

use common::*;
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::local::{Fill, MemoryEndpoint};
use wanblk_nbd::{NbdServer, ServeOptions};

#[tokio::test]
async fn serves_and_connects_over_a_unix_socket() {
    let dir = wanblk_testkit::tempdir();
    let path = dir.path().join("nbd.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let server = NbdServer::new(
        Arc::new(MemoryEndpoint::new("mem", 16 << 20, Fill::Zero)),
        ServeOptions { export_name: "u".into(), ..Default::default() },
    );
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .serve_unix(listener, async {
                let _ = rx.await;
            })
            .await
    });
    let uri = format!("nbd+unix:///u?socket={}", path.display());
    let s = connect(&uri).await;
    assert!(s.tcp_info().is_empty(), "no TCP under a Unix socket");
    within(30, exercise(&s)).await;
    s.close().await.unwrap();
    tx.send(()).unwrap();
    within(10, task).await.unwrap().unwrap();
}

#[tokio::test]
async fn tcp_sessions_report_tcp_info() {
    let srv = TestServer::memory(1 << 20, ServeOptions::default()).await;
    let s = connect(&srv.uri).await;
    let info = s.tcp_info();
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].state, 1, "ESTABLISHED");
}
