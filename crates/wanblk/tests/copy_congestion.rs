//! `--congestion` reaches every TCP connection, NBD and iSCSI alike: the
//! algorithm each session's socket reports (TCP_CONGESTION, logged with
//! TCP_INFO by `--tcp-log`) is the one asked for, and without the flag the
//! system default.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use wanblk_testkit::{Peer, free_port, require_tool, wait_for_tcp};

/// The system's default congestion control, and another one this process
/// may set: one of `tcp_allowed_congestion_control` (any process), else of
/// `tcp_available_congestion_control` (root).
fn default_and_other() -> (String, String) {
    let read =
        |f: &str| std::fs::read_to_string(format!("/proc/sys/net/ipv4/{f}")).expect(f).trim().to_string();
    let default = read("tcp_congestion_control");
    let (allowed, available) =
        (read("tcp_allowed_congestion_control"), read("tcp_available_congestion_control"));
    let other = allowed
        .split_whitespace()
        .chain(available.split_whitespace())
        .find(|c| *c != default)
        .expect("a second congestion control algorithm (reno is always built in)")
        .to_string();
    (default, other)
}

/// Copies `uri` to `null:` over 2 sessions with `extra` flags and returns
/// the congestion control of every row of the TCP log, by session.
fn congestion_of_sessions(dir: &Path, uri: &str, extra: &[&str]) -> Vec<(String, String)> {
    let log = dir.join("tcp.csv");
    let mut args = vec![uri, "null:", "-C", "2", "--tcp-log", log.to_str().unwrap()];
    args.extend(extra);
    copy_ok(&args);
    let csv = std::fs::read_to_string(&log).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col =
        |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name} column"));
    let (session, cc) = (col("session"), col("congestion"));
    let rows: Vec<(String, String)> = lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[session].to_string(), f[cc].to_string())
        })
        .collect();
    let sessions: std::collections::BTreeSet<&String> = rows.iter().map(|(s, _)| s).collect();
    assert!(sessions.len() >= 2, "both sessions logged: {csv}");
    rows
}

fn check(dir: &Path, uri: &str) {
    let (default, other) = default_and_other();
    let rows = congestion_of_sessions(dir, uri, &["--congestion", &other]);
    assert!(rows.iter().all(|(_, cc)| *cc == other), "asked for {other}: {rows:?}");
    let rows = congestion_of_sessions(dir, uri, &[]);
    assert!(rows.iter().all(|(_, cc)| *cc == default), "system default {default}: {rows:?}");
}

#[test]
fn congestion_control_reaches_nbd_sessions() {
    require_tool("nbdkit", "nbdkit");
    let dir = tempdir();
    let port = free_port();
    let _nbdkit = Peer::spawn(
        "nbdkit",
        Command::new("nbdkit")
            .args(["-f", "--exit-with-parent", "-i", "127.0.0.1", "-p", &port.to_string()])
            .args(["--filter=rate", "pattern", "64M", "rate=200M"]),
    );
    wait_for_tcp(([127, 0, 0, 1], port).into(), Duration::from_secs(10));
    check(dir.path(), &format!("nbd://127.0.0.1:{port}/"));
}

#[test]
fn congestion_control_reaches_iscsi_sessions() {
    let dir = tempdir();
    let lun = iscsi_lun("iqn.2024-01.test:congestion", None);
    check(dir.path(), &lun.uri);
}
