//! `wanblk copy` against tgtd when things go wrong: an unknown target IQN,
//! a wrong CHAP secret, tgtd killed mid-copy. Each makes the command exit
//! non-zero with a message naming the endpoint (never the secret), and
//! leaves no destination file that pretends to be complete.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::*;
use wanblk_testkit::Running;
use wanblk_testkit::tgt::Tgt;

fn part_of(dst: &Path) -> std::path::PathBuf {
    dst.with_file_name(format!("{}.wanblk-part", dst.file_name().unwrap().to_str().unwrap()))
}

/// The copy failed with `needles` in its message, and `dst` was not created.
fn assert_failed(out: &Output, dst: &Path, needles: &[&str]) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "the copy succeeded: {err}");
    for n in needles {
        assert!(err.contains(n), "error mentions {n:?}: {err}");
    }
    assert!(!dst.exists(), "{} must not exist after a failed copy", dst.display());
    err
}

#[test]
fn unknown_target_iqn() {
    let tgt = Tgt::start();
    let file = tgt.file("lun.img", 16 << 20);
    tgt.target(1, "iqn.2024-01.test:exists", &file, None, false);
    let dir = tempdir();
    let wrong = tgt.uri("iqn.2024-01.test:missing");
    // Restore: the source fails to log in, nothing is created.
    let dst = dir.path().join("out.img");
    let out = copy(&[&wrong, dst.to_str().unwrap()]);
    assert_failed(&out, &dst, &[&wrong, "target not found"]);
    assert!(!part_of(&dst).exists(), "no partial file either");
    // Backup: the destination fails to log in; the source is untouched.
    let src = dir.path().join("src.img");
    let sha = random_file(&src, 1 << 20, 1).unwrap();
    let out = copy(&[src.to_str().unwrap(), &wrong]);
    assert_failed(&out, &dir.path().join("never"), &[&wrong, "target not found"]);
    assert_eq!(sha256_file(&src).unwrap(), sha);
}

#[test]
fn wrong_chap_secret() {
    let tgt = Tgt::start();
    let file = tgt.file("lun.img", 16 << 20);
    let iqn = "iqn.2024-01.test:chap";
    tgt.target(1, iqn, &file, None, false);
    tgt.chap(1, "alice", "right-secret-123");
    let dir = tempdir();
    let dst = dir.path().join("out.img");
    let bad = tgt.chap_uri(iqn, "alice", "wrong-secret-456");
    let out = copy(&[&bad, dst.to_str().unwrap(), "-C", "2"]);
    // The endpoint is named by its URI without the password.
    let err =
        assert_failed(&out, &dst, &[&format!("127.0.0.1:{}/{iqn}/1", tgt.port), "authentication failed"]);
    assert!(!err.contains("wrong-secret-456"), "the secret must not be printed: {err}");
    assert!(!part_of(&dst).exists(), "no partial file either");
    // The right secret works (the account is set up correctly).
    let good = tgt.chap_uri(iqn, "alice", "right-secret-123");
    let out = copy_ok(&[&good, dst.to_str().unwrap(), "--length", "1M"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("right-secret-123"));
    assert!(dst.exists());
}

#[test]
fn tgtd_killed_mid_copy() {
    let mut tgt = Tgt::start();
    // A large sparse LUN, copied as data one small request at a time, so
    // the copy is still running when tgtd dies.
    let file = tgt.file("lun.img", 8 << 30);
    let iqn = "iqn.2024-01.test:dies";
    tgt.target(1, iqn, &file, None, false);
    tgt.lfn(1);
    let dir = tempdir();
    let dst = dir.path().join("out.img");
    let uri = tgt.uri(iqn);
    // Killed by PID if the test fails before it ends.
    let child = Running::start(
        wanblk()
            .arg("copy")
            .args([&uri, dst.to_str().unwrap(), "-C", "1", "--requests", "2", "--request-size", "256K"])
            .args(["--no-sparse", "--no-progress", "--retry-for", "1s"]),
    );
    // Wait until data reaches the partial file, then kill the target.
    let part = part_of(&dst);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata(&part).is_ok_and(|m| m.blocks() >= 8 << 11) {
            break;
        }
        assert!(Instant::now() < deadline, "no data copied within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    tgt.kill();
    let out = child.wait(COPY_TIMEOUT);
    let err = assert_failed(&out, &dst, &[&uri, "offset"]);
    eprintln!("{err}");
    assert!(part.exists() && err.contains("wanblk-part"), "the partial copy is kept and named: {err}");
    assert!(err.contains("bytes copied"), "the message says how far the copy got: {err}");
}
