//! nbdcopy with 4 connections into and out of our server: sha256 equal.

mod common;

use std::process::Command;

use common::*;
use wanblk_blockdev::Endpoint;
use wanblk_nbd::ServeOptions;
use wanblk_testkit::{random_file, require_tool, run, sha256_file};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbdcopy_in_and_out_with_four_connections() {
    require_tool("nbdcopy", "libnbd-bin");
    let dir = wanblk_testkit::tempdir();
    let src = dir.path().join("src.img");
    let back = dir.path().join("back.img");
    let sum = random_file(&src, 64 << 20, 11).unwrap();
    let srv =
        TestServer::memory(64 << 20, ServeOptions { export_name: "m".into(), ..Default::default() }).await;
    let uri = srv.uri.clone();
    let (s, b) = (src.clone(), back.clone());
    // Each run kills its nbdcopy by PID if it hangs (testkit::RUN_TIMEOUT).
    tokio::task::spawn_blocking(move || {
        run(Command::new("nbdcopy").args(["--connections", "4", "--flush"]).arg(&s).arg(&uri));
        run(Command::new("nbdcopy").args(["--connections", "4"]).arg(&uri).arg(&b));
    })
    .await
    .unwrap();
    assert_eq!(sha256_file(&back).unwrap(), sum);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbdcopy_out_of_a_sparse_export_with_hole_chunks() {
    require_tool("nbdcopy", "libnbd-bin");
    let dir = wanblk_testkit::tempdir();
    let back = dir.path().join("back.img");
    let srv = TestServer::memory(
        32 << 20,
        ServeOptions { export_name: "m".into(), sparse_reads: true, ..Default::default() },
    )
    .await;
    let s = connect(&srv.uri).await;
    let data = pattern(3 << 20, 4);
    s.write(8 << 20, data.clone(), false).await.unwrap();
    s.close().await.unwrap();
    let (uri, b) = (srv.uri.clone(), back.clone());
    tokio::task::spawn_blocking(move || run(Command::new("nbdcopy").arg(&uri).arg(&b))).await.unwrap();
    let f = std::fs::read(&back).unwrap();
    assert_eq!(f.len(), 32 << 20);
    assert!(f[..8 << 20].iter().all(|b| *b == 0));
    assert_eq!(&f[8 << 20..11 << 20], &data[..]);
    assert!(f[11 << 20..].iter().all(|b| *b == 0));
}
