//! Loopback read (or write) throughput of the NBD client.
//!
//! ```text
//! cargo run --release -p wanblk-nbd --example read_throughput -- [URI] [CONNECTIONS] [SECONDS] [REQUEST] [DEPTH] [read|write]
//! ```
//!
//! Without a URI (or with `-`) it serves a 1 GiB in-memory export with our
//! own server on 127.0.0.1 and reads from that. Each connection keeps DEPTH
//! reads of REQUEST bytes (default 4 MiB x 8) in flight for SECONDS (5).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wanblk_blockdev::Endpoint;
use wanblk_blockdev::local::{Fill, MemoryEndpoint};
use wanblk_nbd::{NbdConnector, NbdOptions, NbdServer, ServeOptions};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let uri_arg = args.first().cloned().unwrap_or_else(|| "-".into());
    let conns: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let secs: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let req: u32 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4 << 20);
    let depth: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(8);
    let write = args.get(5).is_some_and(|m| m == "write");
    let payload = bytes::Bytes::from(vec![0xa5u8; req as usize]);

    let uri = if uri_arg == "-" {
        let mem = Arc::new(MemoryEndpoint::new("mem", 1 << 30, Fill::Zero));
        // Write every page once so reads copy real pages, not fill zeroes.
        let chunk = bytes::Bytes::from(vec![0x5au8; 4 << 20]);
        for off in (0..1u64 << 30).step_by(4 << 20) {
            mem.write(off, chunk.clone(), false).await.unwrap();
        }
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("nbd://127.0.0.1:{}/m", l.local_addr().unwrap().port());
        let srv = NbdServer::new(mem, ServeOptions { export_name: "m".into(), ..Default::default() });
        tokio::spawn(async move { srv.serve_tcp(l, std::future::pending()).await });
        uri
    } else {
        uri_arg
    };
    let connector = NbdConnector::new(&uri, NbdOptions::default()).unwrap();
    let mut sessions = Vec::new();
    for _ in 0..conns {
        sessions.push(Arc::new(connector.open().await.unwrap()));
    }
    let size = sessions[0].size();
    let total = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (ci, s) in sessions.iter().enumerate() {
        for d in 0..depth {
            let (s, total, payload) = (s.clone(), total.clone(), payload.clone());
            let slots = size / u64::from(req);
            tasks.push(tokio::spawn(async move {
                let mut i = (ci * depth + d) as u64;
                while Instant::now() < deadline {
                    let off = (i % slots) * u64::from(req);
                    if write {
                        s.write(off, payload.clone(), false).await.unwrap();
                    } else {
                        s.read(off, req).await.unwrap();
                    }
                    total.fetch_add(u64::from(req), Ordering::Relaxed);
                    i += 7;
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let el = start.elapsed().as_secs_f64();
    let bytes = total.load(Ordering::Relaxed) as f64;
    println!(
        "{uri}: {} {conns} connection(s), {depth} x {} KiB in flight each: {:.0} MiB/s ({:.2} Gbit/s)",
        if write { "write" } else { "read" },
        req / 1024,
        bytes / el / (1 << 20) as f64,
        bytes * 8.0 / el / 1e9
    );
    for s in sessions {
        s.close().await.unwrap();
    }
}
