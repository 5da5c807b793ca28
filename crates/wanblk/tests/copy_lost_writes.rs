//! A target that acknowledges writes from a volatile cache and loses them
//! when it restarts: nbdkit's cache filter in write-back mode keeps writes
//! in a temporary file and only writes them to the plugin on a flush, so
//! killing nbdkit loses every write acknowledged since the last flush.
//! wanblk keeps the writes each session acknowledged until a flush covers
//! them; when the sessions fail, it sends them again, and the final flush
//! makes the destination right (checked by sha256 of nbdkit's file).

mod common;

use std::time::Duration;

use common::*;
use wanblk_testkit::free_port;

const IMAGE: u64 = 32 << 20;

#[test]
fn writes_lost_by_a_restarted_target_are_sent_again() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0x10_57).unwrap();
    let disk = dir.path().join("disk.img");
    sparse_file(&disk, IMAGE);
    let log = dir.path().join("nbdkit.log");
    let port = free_port();
    let args = [
        "--filter=log",
        "--filter=rate",
        "--filter=cache",
        "file",
        disk.to_str().unwrap(),
        "cache=writeback",
        "rate=100M",
        &format!("logfile={}", log.display()),
    ];
    let (mut nbdkit, uri) = peers::nbdkit_tcp(port, &args);
    let rep = dir.path().join("r.json");
    let copy = spawn_copy(&[src.to_str().unwrap(), &uri, "-C", "2", "--report", rep.to_str().unwrap()]);
    wait_until("nbdkit acknowledges 4 writes", Duration::from_secs(60), || logged_writes(&log) >= 4);
    nbdkit.kill();
    // The acknowledged writes were only in the cache: the file lacks them.
    assert_ne!(sha256_file(&disk).unwrap(), sha);
    std::thread::sleep(Duration::from_secs(1));
    let (_again, _) = peers::nbdkit_tcp(port, &args);
    let out = copy.wait(COPY_TIMEOUT);
    let (code, _, stderr) = text(&out);
    assert_eq!(code, Some(0), "{stderr}");
    let r = report(&rep);
    assert_eq!((r["complete"].as_bool(), r["flushed"].as_bool()), (Some(true), Some(true)), "{r}");
    assert!(
        r["faults"]["resent_bytes"].as_u64().unwrap() >= 4 << 20,
        "the acknowledged, unflushed writes were sent again: {r}"
    );
    assert_eq!(sha256_file(&disk).unwrap(), sha, "after the final flush the target's file holds the source");
}
