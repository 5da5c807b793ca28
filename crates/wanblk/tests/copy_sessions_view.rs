//! The per-session view: `--sessions-view` prints the live table, and the
//! report says what every session carried and how evenly (Jain's index per
//! interval), against nbdkit on loopback.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use wanblk_copy::report::Report;
use wanblk_testkit::{Peer, free_port, require_tool, wait_for_tcp};

#[test]
fn the_live_table_and_the_report_show_every_session() {
    require_tool("nbdkit", "nbdkit");
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let src_sha = random_file(&src, 64 << 20, 11).unwrap();
    let port = free_port();
    // 20 ms per read: 256 reads of 256 KiB, 4 at a time, last over a
    // second, so the table (every second) shows at least once.
    let _nbdkit = Peer::spawn(
        "nbdkit",
        Command::new("nbdkit")
            .args(["-f", "--exit-with-parent", "-r", "-i", "127.0.0.1", "-p", &port.to_string()])
            .args(["--filter=delay", "file"])
            .arg(&src)
            .arg("delay-read=20ms"),
    );
    wait_for_tcp(([127, 0, 0, 1], port).into(), Duration::from_secs(10));
    let (dst, rep) = (dir.path().join("dst.img"), dir.path().join("r.json"));
    let uri = format!("nbd://127.0.0.1:{port}/");
    let out = copy_ok(&[
        &uri,
        dst.to_str().unwrap(),
        "-C",
        "4",
        "-R",
        "1",
        "--request-size",
        "256K",
        "--sessions-view",
        "--verify",
        "--report",
        rep.to_str().unwrap(),
    ]);
    assert_eq!(sha256_file(&dst).unwrap(), src_sha, "the copy is the source");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sessions at") && stderr.contains("pool sess state"), "{stderr}");
    let r = Report::from_json(&std::fs::read(&rep).unwrap()).unwrap();
    let share = &r.share;
    assert_eq!(share.mode, "fair");
    assert_eq!(share.sessions.len(), 4, "{share:?}");
    assert!(
        share.sessions.iter().all(|s| s.bytes > 0 && s.rtt_ms > 0.0),
        "every session carried data: {share:?}"
    );
    let total: f64 = share.sessions.iter().map(|s| s.share).sum();
    assert!((total - 1.0).abs() < 1e-6, "{share:?}");
    assert!(share.fairness_intervals >= 1, "{share:?}");
    let median = share.fairness_median.expect("a median over the measured intervals");
    assert!(median > 0.25 && median <= 1.0 + 1e-9, "{median}");
}

#[test]
fn an_unknown_share_mode_is_refused_by_name() {
    let out = copy(&["random:1M", "null:", "--share", "nice"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("polite, fair or greedy") && stderr.contains("nice"), "{stderr}");
}
