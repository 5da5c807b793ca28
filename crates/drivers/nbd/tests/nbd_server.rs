//! Our client against nbd-server (simple replies only).

mod common;

use common::*;
use wanblk_blockdev::Endpoint;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_against_nbd_server() {
    let dir = wanblk_testkit::tempdir();
    let file = dir.path().join("disk.img");
    std::fs::File::create(&file).unwrap().set_len(32 << 20).unwrap();
    let (_peer, uri) = nbd_server(dir.path(), &file, "disk", "flush = true\nfua = true\ntrim = true\n");
    let s = connect(&uri).await;
    assert_eq!(s.size(), 32 << 20);
    assert!(!s.negotiated().structured_replies, "nbd-server speaks simple replies only");
    assert!(!s.capabilities().can_block_status);
    let caps = s.capabilities();
    assert!(caps.can_flush && caps.can_fua && caps.can_trim);
    within(60, exercise(&s)).await;
    // Many requests in flight on simple replies too.
    let s = std::sync::Arc::new(s);
    let tasks: Vec<_> = (0..32u64)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                let d = pattern(64 << 10, i + 100);
                s.write(i << 20, d.clone(), false).await.unwrap();
                assert_eq!(s.read(i << 20, 64 << 10).await.unwrap(), d);
            })
        })
        .collect();
    for t in tasks {
        within(30, t).await.unwrap();
    }
    within(10, s.close()).await.unwrap();
    let f = std::fs::read(&file).unwrap();
    assert_eq!(&f[5 << 20..(5 << 20) + (64 << 10)], &pattern(64 << 10, 105)[..]);
}
