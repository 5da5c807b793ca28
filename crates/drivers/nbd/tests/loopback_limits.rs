//! Local refusals: above the negotiated maximum, beyond the end, read-only,
//! after close. Each is an `ErrorKind::Config` naming the endpoint and offset.

mod common;

use bytes::Bytes;
use common::*;
use wanblk_blockdev::{Endpoint, ErrorKind};
use wanblk_nbd::{NbdOptions, ServeOptions};

#[tokio::test]
async fn requests_above_the_maximum_payload_are_refused_locally() {
    let srv =
        TestServer::memory(64 << 20, ServeOptions { export_name: "m".into(), ..Default::default() }).await;
    let s = connect_with(&srv.uri, NbdOptions { max_payload: 1 << 20, ..Default::default() }).await;
    assert_eq!(s.capabilities().block_sizes.maximum, 1 << 20);
    let e = s.read(4096, (1 << 20) + 1).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Config(_)), "{e}");
    assert_eq!(e.offset, Some(4096));
    assert_eq!(e.endpoint, srv.uri);
    let e = s.write(0, Bytes::from(vec![0; (1 << 20) + 1]), false).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Config(_)), "{e}");
    // The session is still fine.
    s.read(0, 1 << 20).await.unwrap();
}

#[tokio::test]
async fn requests_beyond_the_end_are_refused_locally() {
    let srv =
        TestServer::memory(1 << 20, ServeOptions { export_name: "m".into(), ..Default::default() }).await;
    let s = connect(&srv.uri).await;
    let e = s.read((1 << 20) - 10, 11).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Config(_)) && e.offset == Some((1 << 20) - 10), "{e}");
    assert!(e.to_string().contains("beyond the export"), "{e}");
}

#[tokio::test]
async fn read_only_exports_refuse_writes() {
    let srv = TestServer::memory(
        1 << 20,
        ServeOptions { export_name: "m".into(), read_only: true, ..Default::default() },
    )
    .await;
    let s = connect(&srv.uri).await;
    assert!(s.capabilities().read_only);
    let e = s.write(0, Bytes::from_static(b"x"), false).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Config(_)) && e.to_string().contains("read-only"), "{e}");
    s.read(0, 4096).await.unwrap();
}

#[tokio::test]
async fn close_waits_for_requests_then_refuses_new_ones() {
    let srv =
        TestServer::memory(16 << 20, ServeOptions { export_name: "m".into(), ..Default::default() }).await;
    let s = std::sync::Arc::new(connect(&srv.uri).await);
    let reads: Vec<_> = (0..16u64)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move { s.read(i << 20, 1 << 20).await })
        })
        .collect();
    tokio::task::yield_now().await;
    within(10, s.close()).await.unwrap();
    for r in reads {
        // Requests sent before close complete; ones not yet sent are refused.
        if let Err(e) = r.await.unwrap() {
            assert!(e.to_string().contains("closed"), "{e}");
        }
    }
    let e = s.read(0, 1).await.unwrap_err();
    assert!(e.to_string().contains("session is closed"), "{e}");
    // A connection error, so a pool sends the request on another session.
    assert!(e.is_connection(), "{e:?}");
    within(10, s.close()).await.unwrap();
    srv.stop().await;
}

#[tokio::test]
async fn unknown_export_is_a_clear_error() {
    let srv =
        TestServer::memory(1 << 20, ServeOptions { export_name: "m".into(), ..Default::default() }).await;
    let uri = srv.uri.replace("/m", "/nope");
    let e = wanblk_nbd::NbdConnector::new(&uri, NbdOptions::default()).unwrap().open().await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Config(_)), "{e}");
    assert!(e.to_string().contains("no such export"), "{e}");
}

#[tokio::test]
async fn connection_refused_names_the_endpoint() {
    let port = wanblk_testkit::free_port();
    let uri = format!("nbd://127.0.0.1:{port}/x");
    let e = wanblk_nbd::NbdConnector::new(&uri, NbdOptions::default()).unwrap().open().await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Io(_)), "{e}");
    assert!(e.to_string().starts_with(&uri), "{e}");
}
