//! The target goes away mid-I/O: deleting the target or killing tgtd drops
//! the connection, and every pending command fails with an error naming the
//! endpoint and offset; nothing hangs.

mod common;

use std::sync::Arc;

use common::{Tgt, pattern, within};
use wanblk_blockdev::{Endpoint, ErrorKind};
use wanblk_iscsi::IscsiConnector;

/// Eight tasks write and read until an error; `done` counts the requests
/// that completed, so the test knows I/O is under way.
async fn io_until_error(
    ep: Arc<wanblk_iscsi::IscsiEndpoint>,
    done: Arc<tokio::sync::watch::Sender<usize>>,
) -> Vec<wanblk_blockdev::EndpointError> {
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let ep = Arc::clone(&ep);
        let done = Arc::clone(&done);
        tasks.push(tokio::spawn(async move {
            let d = pattern(4 << 20, i);
            loop {
                let off = (i % 4) * (4 << 20);
                if let Err(e) = ep.write(off, d.clone(), false).await {
                    return e;
                }
                done.send_modify(|n| *n += 1);
                if let Err(e) = ep.read(off, 4 << 20).await {
                    return e;
                }
                done.send_modify(|n| *n += 1);
            }
        }));
    }
    let mut errs = Vec::new();
    for t in tasks {
        errs.push(within(90, t).await.unwrap());
    }
    errs
}

/// Starts [`io_until_error`] and returns once 8 requests have completed
/// (the target is then busy with the next ones).
async fn start_io(
    ep: &Arc<wanblk_iscsi::IscsiEndpoint>,
) -> tokio::task::JoinHandle<Vec<wanblk_blockdev::EndpointError>> {
    let done = Arc::new(tokio::sync::watch::Sender::new(0usize));
    let mut rx = done.subscribe();
    let run = tokio::spawn(io_until_error(Arc::clone(ep), done));
    within(60, rx.wait_for(|n| *n >= 8)).await.expect("I/O under way");
    run
}

fn check(errs: &[wanblk_blockdev::EndpointError]) {
    for e in errs {
        eprintln!("{e}");
        assert!(e.endpoint.starts_with("iscsi://127.0.0.1:"), "{e}");
        assert!(
            matches!(e.kind, ErrorKind::Io(_) | ErrorKind::Protocol(_) | ErrorKind::Server { .. }),
            "{e}"
        );
    }
    assert!(errs.iter().any(|e| e.offset.is_some()), "errors name the offset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tgtd_killed_during_io() {
    let mut tgt = Tgt::start();
    let file = tgt.file("lun.img", 16 << 20);
    tgt.target(1, "iqn.2024-01.test:die", &file, None, false);
    tgt.lfn(1);
    let ep = within(30, IscsiConnector::parse(&tgt.uri("iqn.2024-01.test:die")).unwrap().connect_endpoint())
        .await
        .unwrap();
    let run = start_io(&ep).await;
    tgt.kill();
    let errs = within(90, run).await.unwrap();
    check(&errs);
    assert!(errs.iter().all(|e| matches!(e.kind, ErrorKind::Io(_))), "a dropped connection is an I/O error");
    // Later calls fail at once too.
    let e = within(10, ep.read(0, 512)).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Io(_)), "{e}");
    let _ = within(10, ep.close()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_deleted_during_io() {
    let tgt = Tgt::start();
    let file = tgt.file("lun.img", 16 << 20);
    tgt.target(1, "iqn.2024-01.test:del", &file, None, false);
    let ep = within(30, IscsiConnector::parse(&tgt.uri("iqn.2024-01.test:del")).unwrap().connect_endpoint())
        .await
        .unwrap();
    let run = start_io(&ep).await;
    tgt.delete_target(1);
    let errs = within(90, run).await.unwrap();
    check(&errs);
    let _ = within(10, ep.close()).await;
}
