//! Our client against our server (memory backend): every command round-trips.

mod common;

use common::*;
use wanblk_blockdev::Endpoint;
use wanblk_nbd::ServeOptions;

#[tokio::test]
async fn every_command_round_trips_through_our_server() {
    let srv =
        TestServer::memory(64 << 20, ServeOptions { export_name: "mem".into(), ..Default::default() }).await;
    let s = connect(&srv.uri).await;
    let caps = s.capabilities();
    assert_eq!(s.size(), 64 << 20);
    assert!(caps.can_multi_conn && caps.can_block_status && caps.can_trim && caps.can_zero && caps.can_fua);
    assert!(s.negotiated().structured_replies);
    assert_eq!(s.name(), srv.uri);
    within(30, exercise(&s)).await;
    // Unwritten space is reported as a hole; the written MiB as data.
    let ext = s.block_status(0, 64 << 20).await.unwrap();
    assert!(ext[0].hole && ext[0].zero && ext[0].offset == 0);
    assert!(ext.iter().any(|e| !e.hole), "{ext:?}");
    within(10, s.close()).await.unwrap();
    srv.stop().await;
}

#[tokio::test]
async fn sparse_reads_send_holes_and_read_back_zeroes() {
    let srv = TestServer::memory(
        8 << 20,
        ServeOptions { export_name: "mem".into(), sparse_reads: true, ..Default::default() },
    )
    .await;
    let s = connect(&srv.uri).await;
    let data = pattern(65536, 3);
    s.write(65536, data.clone(), false).await.unwrap();
    let back = s.read(0, 4 << 20).await.unwrap();
    assert!(back[..65536].iter().all(|b| *b == 0));
    assert_eq!(&back[65536..131072], &data[..]);
    assert!(back[131072..].iter().all(|b| *b == 0));
    s.close().await.unwrap();
}

#[tokio::test]
async fn simple_replies_when_structured_replies_are_off() {
    let srv = TestServer::memory(
        8 << 20,
        ServeOptions { export_name: "mem".into(), structured_replies: false, ..Default::default() },
    )
    .await;
    let s = connect(&srv.uri).await;
    assert!(!s.negotiated().structured_replies);
    assert!(!s.capabilities().can_block_status);
    within(30, exercise(&s)).await;
    // Without base:allocation everything is one data extent.
    let ext = s.block_status(0, 8 << 20).await.unwrap();
    assert_eq!(ext.len(), 1);
    assert!(!ext[0].hole);
}

#[tokio::test]
async fn client_option_disables_structured_replies() {
    let srv =
        TestServer::memory(8 << 20, ServeOptions { export_name: "mem".into(), ..Default::default() }).await;
    let s =
        connect_with(&srv.uri, wanblk_nbd::NbdOptions { structured_replies: false, ..Default::default() })
            .await;
    assert!(!s.negotiated().structured_replies);
    within(30, exercise(&s)).await;
}

#[tokio::test]
async fn handshake_without_option_pipelining() {
    let srv =
        TestServer::memory(8 << 20, ServeOptions { export_name: "mem".into(), ..Default::default() }).await;
    let s = connect_with(&srv.uri, wanblk_nbd::NbdOptions { pipeline_options: false, ..Default::default() })
        .await;
    assert!(s.negotiated().structured_replies && s.capabilities().can_block_status);
    within(30, exercise(&s)).await;
}
