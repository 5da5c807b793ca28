//! qemu-img convert into our server and compare against it.

mod common;

use std::process::Command;

use common::*;
use wanblk_blockdev::Endpoint;
use wanblk_nbd::ServeOptions;
use wanblk_testkit::{RUN_TIMEOUT, random_file, require_tool, run, run_with_timeout};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_img_convert_and_compare() {
    require_tool("qemu-img", "qemu-utils");
    let dir = wanblk_testkit::tempdir();
    let src = dir.path().join("src.img");
    random_file(&src, 32 << 20, 5).unwrap();
    let srv =
        TestServer::memory(32 << 20, ServeOptions { export_name: "disk".into(), ..Default::default() }).await;
    let uri = srv.uri.clone();
    let s = src.clone();
    // Each run kills its qemu-img by PID if it hangs (testkit::RUN_TIMEOUT).
    tokio::task::spawn_blocking(move || {
        run(Command::new("qemu-img").args(["convert", "-n", "-f", "raw", "-O", "raw"]).arg(&s).arg(&uri));
        run(Command::new("qemu-img").args(["compare", "-f", "raw", "-F", "raw"]).arg(&s).arg(&uri));
    })
    .await
    .unwrap();
    // And a difference is noticed.
    let c = connect(&srv.uri).await;
    c.write(1 << 20, bytes::Bytes::from_static(b"different"), true).await.unwrap();
    c.close().await.unwrap();
    let (uri, s) = (srv.uri.clone(), src.clone());
    let out = tokio::task::spawn_blocking(move || {
        run_with_timeout(
            Command::new("qemu-img").args(["compare", "-q", "-f", "raw", "-F", "raw"]).arg(&s).arg(&uri),
            RUN_TIMEOUT,
        )
    })
    .await
    .unwrap();
    let status = out.status;
    assert_eq!(status.code(), Some(1), "images differ");
    srv.stop().await;
}
