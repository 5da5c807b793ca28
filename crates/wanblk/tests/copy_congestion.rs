//! `--congestion` reaches every TCP connection, NBD and iSCSI alike: the
//! algorithm each session's socket reports (TCP_CONGESTION, logged with
//! TCP_INFO by `--tcp-log`) is the one asked for, and without the flag the
//! system default.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use wanblk_testkit::{free_port, require_tool};

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
/// the congestion control of every row of the TCP log, by session; every
/// session that opened is in the log.
fn congestion_of_sessions(dir: &Path, uri: &str, extra: &[&str]) -> Vec<(String, String)> {
    let (log, rep) = (dir.join("tcp.csv"), dir.join("r.json"));
    let mut args =
        vec![uri, "null:", "-C", "2", "--tcp-log", log.to_str().unwrap(), "--report", rep.to_str().unwrap()];
    args.extend(extra);
    copy_ok(&args);
    let r = report(&rep);
    assert_sessions_carried(&r, 2);
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
    let sessions: std::collections::BTreeSet<&str> = rows.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(sessions, ["0", "1"].into(), "every session logged: {csv}");
    rows
}

fn check(dir: &Path, uri: &str) {
    let (default, other) = default_and_other();
    let rows = congestion_of_sessions(dir, uri, &["--congestion", &other]);
    assert!(rows.iter().all(|(_, cc)| *cc == other), "asked for {other}: {rows:?}");
    let rows = congestion_of_sessions(dir, uri, &[]);
    assert!(rows.iter().all(|(_, cc)| *cc == default), "system default {default}: {rows:?}");
}

/// The congestion control of every established TCP socket to `port`, as
/// the kernel reports it (`ss -ti`).
fn sockets_to(port: u16) -> Vec<String> {
    let out = wanblk_testkit::run(Command::new("ss").args([
        "-tinH",
        "state",
        "established",
        "dport",
        "=",
        &format!(":{port}"),
    ]));
    // One line per socket, then its indented info line: the algorithm's
    // name is one of its first words (after options such as ts, sack, ecn).
    out.lines()
        .filter(|l| l.starts_with(char::is_whitespace))
        .map(|l| {
            l.split_whitespace()
                .find(|w| !w.contains(':') && !matches!(*w, "ts" | "sack" | "ecn" | "ecnseen" | "fastopen"))
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// The process runs (exists and is not a zombie waiting to be reaped).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
}

/// Beyond the data sessions the TCP log shows, the side session (block
/// status, flush) gets the algorithm too: every socket wanblk opens to the
/// server, as the kernel sees it while the copy runs.
#[test]
fn congestion_control_reaches_every_socket_including_the_side_session() {
    require_tool("nbdkit", "nbdkit");
    require_tool("ss", "iproute2");
    let (_, other) = default_and_other();
    let port = free_port();
    // 64 MiB at 100 Mbit/s: over 5 s to look at the sockets.
    let (_nbdkit, uri) = peers::nbdkit_tcp(port, &["--filter=rate", "pattern", "64M", "rate=100M"]);
    let copy = wanblk_testkit::Running::start(wanblk().args([
        "copy",
        &uri,
        "null:",
        "-C",
        "2",
        "--checksum",
        "--no-progress",
        "--congestion",
        &other,
    ]));
    // Two data sessions and the side session the copy's block status opens.
    // The algorithm is set just after connect, so a busy host can show a
    // fresh socket with the default for a moment: look again until all
    // three run the one asked for (while the copy runs; the last view of
    // three sockets is kept for the message).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while std::time::Instant::now() < deadline && running(copy.pid()) {
        let s = sockets_to(port);
        if s.len() >= 3 {
            let done = s.iter().all(|cc| *cc == other);
            seen = s;
            if done {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = copy.wait(COPY_TIMEOUT);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(seen.len(), 3, "2 data sessions and the side session: {seen:?}");
    assert!(seen.iter().all(|cc| *cc == other), "asked for {other}: {seen:?}");
    // The pattern plugin's image: its sha256 as nbdcopy reads it.
    let dir = tempdir();
    let img = dir.path().join("pattern.img");
    peers::nbdcopy(&uri, img.to_str().unwrap(), &[]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        sha256_file(&img).unwrap(),
        "the copy read the image"
    );
}

#[test]
fn congestion_control_reaches_nbd_sessions() {
    require_tool("nbdkit", "nbdkit");
    let dir = tempdir();
    let port = free_port();
    let (_nbdkit, nbdkit_uri) = peers::nbdkit_tcp(port, &["--filter=rate", "pattern", "64M", "rate=200M"]);
    check(dir.path(), &nbdkit_uri);
}

#[test]
fn congestion_control_reaches_iscsi_sessions() {
    let dir = tempdir();
    let lun = iscsi_lun("iqn.2024-01.test:congestion", None);
    check(dir.path(), &lun.uri);
}
