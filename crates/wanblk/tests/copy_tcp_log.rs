//! `--tcp-log FILE`: CSV with the documented columns, one row per session
//! per tick (every session on every tick, once), ticks in time order, each
//! session's counters only growing, and the congestion control each socket
//! runs. The copy is rate limited so it lasts many ticks.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use wanblk_testkit::{free_port, require_tool};

const SIZE: u64 = 24 << 20;
const N: usize = 3;

#[test]
fn one_row_per_session_per_tick() {
    require_tool("nbdkit", "nbdkit");
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, SIZE, 0x7c9).unwrap();
    let port = free_port();
    // 100 Mbit/s, with a bucket of 0.2 s instead of the filter's default
    // 2 s burst: about 2 s, some 20 ticks of 100 ms.
    let (_nbdkit, nbdkit_uri) = peers::nbdkit_tcp(
        port,
        &["-r", "--filter=rate", "file", src.to_str().unwrap(), "rate=100M", "burstiness=0.2"],
    );
    let (dst, log, rep) = (dir.path().join("dst.img"), dir.path().join("tcp.csv"), dir.path().join("r.json"));
    let n = N.to_string();
    copy_ok(&[
        &nbdkit_uri,
        dst.to_str().unwrap(),
        "-C",
        &n,
        // Small requests: 96 of them, so each session gets its share.
        "--request-size",
        "256K",
        "--tcp-log",
        log.to_str().unwrap(),
        "--report",
        rep.to_str().unwrap(),
    ]);
    assert_eq!(sha256_file(&dst).unwrap(), sha, "the copy is the source");
    assert_sessions_carried(&report(&rep), N);

    let csv = std::fs::read_to_string(&log).unwrap();
    let mut lines = csv.lines();
    let header = lines.next().expect("a header");
    assert_eq!(header, wanblk_remote::TCP_LOG_HEADER, "the documented columns");
    let cols: Vec<&str> = header.split(',').collect();
    let col = |name: &str| cols.iter().position(|c| *c == name).unwrap();
    let default_cc = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();

    // t_s -> sessions seen; session -> its bytes_received over time.
    let mut ticks: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut order: Vec<f64> = Vec::new();
    let mut received: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), cols.len(), "every row has every column: {line}");
        let num = |name: &str| -> u64 {
            f[col(name)].parse().unwrap_or_else(|_| panic!("{name} is a whole number: {line}"))
        };
        let t: f64 = f[col("t_s")].parse().unwrap_or_else(|_| panic!("t_s is a number: {line}"));
        if order.last() != Some(&t) {
            assert!(order.last().is_none_or(|&last| t > last), "ticks in time order: {t} after {order:?}");
            order.push(t);
        }
        assert_eq!(num("pool"), 0, "one store: {line}");
        assert_eq!(num("active"), 1, "every session of -C {N} is active: {line}");
        assert_eq!(f[col("congestion")], default_cc.trim(), "the socket's congestion control: {line}");
        ticks.entry(f[col("t_s")].to_string()).or_default().push(num("session"));
        received.entry(num("session")).or_default().push(num("bytes_received"));
    }
    assert!(order.len() >= 3, "a copy of seconds is sampled on several ticks: {} ticks\n{csv}", order.len());
    let all: Vec<u64> = (0..N as u64).collect();
    for (t, sessions) in &ticks {
        let mut s = sessions.clone();
        s.sort_unstable();
        assert_eq!(s, all, "tick {t}: each of the {N} sessions exactly once");
    }
    assert_eq!(received.keys().copied().collect::<BTreeSet<_>>(), all.iter().copied().collect());
    for (s, r) in &received {
        assert!(r.windows(2).all(|w| w[0] <= w[1]), "session {s}: bytes_received only grows: {r:?}");
        assert!(*r.last().unwrap() > 0, "session {s} received data: {r:?}");
    }
}
