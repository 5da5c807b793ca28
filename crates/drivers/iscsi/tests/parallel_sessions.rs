//! 1 and 4 sessions (each its own ISID) writing and reading disjoint
//! regions concurrently; the backing file matches.

mod common;

use std::sync::Arc;

use common::{Tgt, file_bytes, pattern, within};
use wanblk_blockdev::Endpoint;
use wanblk_iscsi::IscsiConnector;

async fn run(sessions: usize) {
    let tgt = Tgt::start();
    let size = 64u64 << 20;
    let file = tgt.file("lun.img", size);
    tgt.target(1, "iqn.2024-01.test:par", &file, None, false);
    tgt.lfn(1);
    let c = IscsiConnector::parse(&tgt.uri("iqn.2024-01.test:par")).unwrap();
    let mut eps = Vec::new();
    for _ in 0..sessions {
        eps.push(within(30, c.connect_endpoint()).await.unwrap());
    }
    let chunk = 4u64 << 20;
    let mut tasks = Vec::new();
    for (i, ep) in eps.iter().enumerate() {
        let ep = Arc::clone(ep);
        tasks.push(tokio::spawn(async move {
            let mut off = i as u64 * chunk;
            while off < size {
                let data = pattern(chunk as usize, off);
                ep.write(off, data.clone(), false).await.unwrap();
                assert!(ep.read(off, chunk as u32).await.unwrap() == data);
                off += chunk * sessions as u64;
            }
        }));
    }
    for t in tasks {
        within(120, t).await.unwrap();
    }
    for ep in &eps {
        within(30, ep.flush()).await.unwrap();
    }
    for off in (0..size).step_by(chunk as usize) {
        assert!(
            file_bytes(&file, off, chunk as usize) == pattern(chunk as usize, off)[..],
            "file differs at {off}"
        );
    }
    for ep in &eps {
        within(30, ep.close()).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session() {
    run(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_sessions() {
    run(4).await;
}

/// Sessions after the first take the LUN's block size, size and limits
/// from the first session's probe (they only clear their UNIT ATTENTION):
/// on a 4096-byte-block LUN each later session's very first command is a
/// write, read back through another session, and the file matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_sessions_share_the_first_probe() {
    let tgt = Tgt::start();
    let size = 16u64 << 20;
    let file = tgt.file("lun.img", size);
    tgt.target(1, "iqn.2024-01.test:shared", &file, Some(4096), false);
    tgt.lfn(1);
    let c = IscsiConnector::parse(&tgt.uri("iqn.2024-01.test:shared")).unwrap();
    let first = within(30, c.connect_endpoint()).await.unwrap();
    let later = futures::future::join_all((0..3).map(|_| within(30, c.connect_endpoint()))).await;
    let later: Vec<_> = later.into_iter().map(Result::unwrap).collect();
    let chunk = 1u64 << 20;
    for (i, ep) in later.iter().enumerate() {
        assert_eq!(ep.block_len(), 4096);
        assert_eq!(ep.size(), size);
        assert_eq!(ep.max_request_bytes(), first.max_request_bytes());
        let off = i as u64 * chunk;
        let data = pattern(chunk as usize, off + 7);
        within(30, ep.write(off, data.clone(), false)).await.unwrap();
        let back = within(30, later[(i + 1) % later.len()].read(off, chunk as u32)).await.unwrap();
        assert!(back == data, "session {} read other bytes at {off}", (i + 1) % later.len());
    }
    for ep in later.iter().chain(std::iter::once(&first)) {
        within(30, ep.flush()).await.unwrap();
    }
    for i in 0..later.len() as u64 {
        let off = i * chunk;
        assert!(
            file_bytes(&file, off, chunk as usize) == pattern(chunk as usize, off + 7)[..],
            "file differs at {off}"
        );
    }
    for ep in later.iter().chain(std::iter::once(&first)) {
        within(30, ep.close()).await.unwrap();
    }
}
