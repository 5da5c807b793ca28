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
