//! `--rate`: the cap holds over the whole copy, whatever N. A fast path
//! (TCP over loopback to the embedded target) carries far more than
//! 100 Mbit/s, so a copy capped at 100M must measure 90-105 Mbit/s from
//! start to end, reading (the cap bounds what we ask for) and writing
//! (each session is also paced at its share). Each copy is ~3 s.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;

/// 36 MiB: 3.0 s at 100 Mbit/s.
const SIZE: u64 = 36 << 20;

/// `wanblk target` on a free loopback port with a random fill; writes are
/// dropped. Returns the guard and its URI.
fn target() -> (wanblk_testkit::Peer, String) {
    let port = wanblk_testkit::free_port();
    let mut cmd = wanblk();
    cmd.args(["target", "--size", &SIZE.to_string(), "--fill", "random:11", "--discard-writes"])
        .args(["--listen", &format!("127.0.0.1:{port}"), "--export", "disk"])
        .stdout(Stdio::null());
    let peer = wanblk_testkit::Peer::spawn("wanblk target", &mut cmd);
    wanblk_testkit::wait_for_tcp(([127, 0, 0, 1], port).into(), Duration::from_secs(10));
    (peer, format!("nbd://127.0.0.1:{port}/disk"))
}

fn capped(src: &str, dst: &str, conns: &str) -> f64 {
    let dir = tempdir();
    let rep = dir.path().join("r.json");
    let args = [src, dst, "--rate", "100M", "-C", conns, "--no-sparse", "--report", rep.to_str().unwrap()];
    copy_ok(&args);
    let r = report(&rep);
    assert_eq!(r["complete"], true, "{r}");
    assert_eq!(r["data_bytes"], SIZE, "every byte carried as data: {r}");
    let mbps = r["goodput_mbps"].as_f64().unwrap();
    println!(
        "{src} -> {dst} -C {conns}: {mbps:.1} Mbit/s over {:.2} s, {} session(s)",
        r["seconds"], r["connections"]
    );
    mbps
}

#[test]
fn reads_and_writes_hold_the_cap_at_any_n() {
    let (_t, uri) = target();
    let mut seen = Vec::new();
    for conns in ["1", "4", "auto"] {
        seen.push((format!("read -C {conns}"), capped(&uri, "null:", conns)));
    }
    for conns in ["4", "auto"] {
        seen.push((format!("write -C {conns}"), capped(&format!("random:{SIZE}:3"), &uri, conns)));
    }
    for (what, mbps) in &seen {
        assert!((90.0..=105.0).contains(mbps), "{what}: {mbps:.1} Mbit/s, outside 90-105: {seen:?}");
    }
}

#[test]
fn without_the_cap_the_same_path_is_faster() {
    // The check above cannot pass by accident on a path that only carries
    // 100 Mbit/s.
    let (_t, uri) = target();
    let dir = tempdir();
    let rep = dir.path().join("r.json");
    copy_ok(&[&uri, "null:", "-C", "4", "--no-sparse", "--report", rep.to_str().unwrap()]);
    let mbps = report(&rep)["goodput_mbps"].as_f64().unwrap();
    assert!(mbps > 150.0, "uncapped: {mbps:.1} Mbit/s");
}
