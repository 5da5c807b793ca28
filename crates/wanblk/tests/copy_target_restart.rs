//! A target that goes away in the middle of a copy and comes back: nbdkit
//! is killed (SIGKILL, as a crash) during a backup and started again on the
//! same port ~5 s later. The copy reconnects (paced attempts within
//! --retry-for), sends again what was in flight and what the dead sessions
//! had acknowledged but not flushed, and completes; the target's file is
//! checked by sha256, and the report says what happened.

mod common;

use std::time::Duration;

use common::*;
use wanblk_testkit::free_port;

const IMAGE: u64 = 32 << 20;

#[test]
fn nbdkit_killed_mid_copy_and_restarted_5_s_later() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0x7e57).unwrap();
    let disk = dir.path().join("disk.img");
    sparse_file(&disk, IMAGE);
    let log = dir.path().join("nbdkit.log");
    let port = free_port();
    // 100 Mbit/s: the copy lasts a few seconds, so the kill lands inside it.
    let args = [
        "--filter=log",
        "--filter=rate",
        "file",
        disk.to_str().unwrap(),
        "rate=100M",
        &format!("logfile={}", log.display()),
    ];
    let (mut nbdkit, uri) = peers::nbdkit_tcp(port, &args);
    let rep = dir.path().join("r.json");
    let copy = spawn_copy(&[src.to_str().unwrap(), &uri, "-C", "4", "--report", rep.to_str().unwrap()]);
    wait_until("nbdkit acknowledges 4 writes", Duration::from_secs(60), || logged_writes(&log) >= 4);
    nbdkit.kill();
    std::thread::sleep(Duration::from_secs(5));
    let (_again, _) = peers::nbdkit_tcp(port, &args);
    let out = copy.wait(COPY_TIMEOUT);
    let (code, _, stderr) = text(&out);
    assert_eq!(code, Some(0), "the copy rides out the restart:\n{stderr}");
    let r = report(&rep);
    assert_eq!(r["complete"], true, "{r}");
    assert_eq!(r["flushed"], true, "{r}");
    assert!(r["faults"]["reconnects"].as_u64().unwrap() >= 1, "the report counts the reconnects: {r}");
    assert!(
        r["faults"]["outage_s"].as_f64().unwrap() > 0.0,
        "the report counts the time without a session: {r}"
    );
    assert!(stderr.contains("survived"), "the summary says what happened:\n{stderr}");
    assert_eq!(sha256_file(&disk).unwrap(), sha, "the target holds the source");
}
