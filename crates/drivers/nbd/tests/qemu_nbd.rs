//! Our client against qemu-nbd on a raw temp file.

mod common;

use std::sync::Arc;

use common::*;
use wanblk_blockdev::Endpoint;

fn raw_file(dir: &std::path::Path, size: u64) -> std::path::PathBuf {
    let p = dir.join("disk.raw");
    std::fs::File::create(&p).unwrap().set_len(size).unwrap();
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_against_qemu_nbd() {
    let dir = wanblk_testkit::tempdir();
    let file = raw_file(dir.path(), 64 << 20);
    let (_peer, uri) = qemu_nbd(&file, "disk", &["-t"]);
    let s = connect(&uri).await;
    assert_eq!(s.size(), 64 << 20);
    assert!(s.negotiated().structured_replies);
    assert!(s.capabilities().can_block_status);
    assert!(!s.capabilities().can_multi_conn, "qemu-nbd with --shared=1 does not advertise multi-conn");
    within(60, exercise(&s)).await;
    within(10, s.close()).await.unwrap();
    // What we wrote is in the file, byte for byte.
    let f = std::fs::read(&file).unwrap();
    let data = pattern(1 << 20, 7);
    assert_eq!(&f[(4 << 20) + 131072..(4 << 20) + (512 << 10)], &data[131072..512 << 10]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_nbd_shared_sessions_and_multi_conn_flag() {
    let dir = wanblk_testkit::tempdir();
    let file = raw_file(dir.path(), 32 << 20);
    let (_peer, uri) = qemu_nbd(&file, "disk", &["--shared=4", "-t"]);
    let sessions: Vec<Arc<dyn Endpoint>> = {
        let mut v: Vec<Arc<dyn Endpoint>> = Vec::new();
        for _ in 0..4 {
            v.push(Arc::new(connect(&uri).await));
        }
        v
    };
    // qemu-nbd (10.x) advertises multi-conn for --shared > 1.
    assert!(sessions.iter().all(|s| s.capabilities().can_multi_conn));
    let tasks: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let s = s.clone();
            tokio::spawn(async move {
                let data = pattern(1 << 20, i as u64);
                s.write((i as u64) << 22, data.clone(), false).await.unwrap();
                s.flush().await.unwrap();
                data
            })
        })
        .collect();
    let mut written = Vec::new();
    for t in tasks {
        written.push(within(30, t).await.unwrap());
    }
    // Every session sees every other session's flushed writes.
    for (i, data) in written.iter().enumerate() {
        let reader = &sessions[(i + 1) % 4];
        assert_eq!(&reader.read((i as u64) << 22, 1 << 20).await.unwrap(), data);
    }
    for s in sessions {
        s.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_nbd_read_only_advertises_multi_conn() {
    let dir = wanblk_testkit::tempdir();
    let file = raw_file(dir.path(), 8 << 20);
    let (_peer, uri) = qemu_nbd(&file, "ro", &["-r", "--shared=2"]);
    let s = connect(&uri).await;
    let caps = s.capabilities();
    assert!(caps.read_only);
    assert!(caps.can_multi_conn, "qemu-nbd advertises multi-conn for read-only exports");
    assert!(s.read(0, 1 << 20).await.unwrap().iter().all(|b| *b == 0));
    s.close().await.unwrap();
}
