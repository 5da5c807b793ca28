//! Loopback throughput of the iSCSI endpoint: writes then reads `SIZE_MIB`
//! through N sessions (or MC/S connections), 4 MiB commands, several in
//! flight per connection.
//!
//! `cargo run --release -p wanblk-iscsi --example iscsi_bench -- iscsi://127.0.0.1:3261/iqn.../1 sessions 4 256`

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use wanblk_blockdev::Endpoint;
use wanblk_iscsi::{IscsiConnector, IscsiOptions, Mode};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let uri = args.get(1).expect("usage: iscsi_bench URI [sessions|mcs] [N] [MiB] [KEY=VALUE...]");
    let mode: Mode = args.get(2).map_or(Mode::Sessions, |m| m.parse().expect("mode"));
    let n: usize = args.get(3).map_or(1, |v| v.parse().expect("N"));
    let mib: u64 = args.get(4).map_or(256, |v| v.parse().expect("MiB"));
    let params = args[5.min(args.len())..]
        .iter()
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("KEY=VALUE");
            (k.to_string(), v.to_string())
        })
        .collect();
    let c = IscsiConnector::new(uri, IscsiOptions { mode, params, ..Default::default() }).expect("connector");
    let mut eps = Vec::new();
    for _ in 0..n {
        eps.push(c.connect_endpoint().await.expect("connect"));
    }
    let size = (mib << 20).min(eps[0].size());
    let chunk = 4u64 << 20;
    let depth = 4;
    let data = Bytes::from(vec![0x5au8; chunk as usize]);
    for (label, write) in [("write", true), ("read", false)] {
        let t = Instant::now();
        let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut tasks = Vec::new();
        for ep in &eps {
            for _ in 0..depth {
                let (ep, next, data) = (Arc::clone(ep), Arc::clone(&next), data.clone());
                tasks.push(tokio::spawn(async move {
                    loop {
                        let off = next.fetch_add(chunk, std::sync::atomic::Ordering::SeqCst);
                        if off >= size {
                            break;
                        }
                        let len = chunk.min(size - off);
                        if write {
                            ep.write(off, data.slice(..len as usize), false).await.expect("write");
                        } else {
                            let b = ep.read(off, len as u32).await.expect("read");
                            assert_eq!(b.len() as u64, len);
                        }
                    }
                }));
            }
        }
        for t in tasks {
            t.await.expect("task");
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "{label}: {mode:?} x{n}: {:.0} MiB in {s:.2} s = {:.0} MiB/s",
            size as f64 / 1048576.0,
            size as f64 / 1048576.0 / s
        );
    }
    for ep in &eps {
        ep.close().await.expect("close");
    }
}
