//! SIGINT in the middle of a copy, then the same command again: the first
//! run stops issuing, lets what is in flight finish, flushes, records what
//! completed in the journal, says how to resume and exits with 3
//! (incomplete); the second run copies only what is missing. The bytes
//! carried twice are at most the first run's in-flight window (both
//! reports), and the result is checked by sha256.

mod common;

use std::time::Duration;

use common::*;
use wanblk_testkit::free_port;

const IMAGE: u64 = 32 << 20;

#[test]
fn sigint_at_half_way_then_the_same_command_completes() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0x5161).unwrap();
    // A slow source (64 Mbit/s): the signal lands mid-copy.
    let (_nbdkit, uri) =
        peers::nbdkit_tcp(free_port(), &["-r", "--filter=rate", "file", src.to_str().unwrap(), "rate=64M"]);
    let dst = dir.path().join("out.img");
    let part = dir.path().join("out.img.wanblk-part");
    let journal = dir.path().join("out.img.wanblk-journal");
    let (rep1, rep2) = (dir.path().join("r1.json"), dir.path().join("r2.json"));
    // Small requests, few in flight: the window is small next to the image.
    let shape = ["-C", "2", "--requests", "2", "--request-size", "256K"];
    let mut args = vec![uri.as_str(), dst.to_str().unwrap(), "--report", rep1.to_str().unwrap()];
    args.extend(shape);
    let run = spawn_copy(&args);
    wait_until("half the image written", Duration::from_secs(60), || allocated(&part) >= IMAGE / 2);
    wanblk_sys::process::signal(run.pid(), wanblk_sys::process::SIGINT).unwrap();
    let (code, _, stderr) = text(&run.wait(COPY_TIMEOUT));
    assert_eq!(code, Some(3), "an interrupted copy is incomplete:\n{stderr}");
    assert!(stderr.contains("to resume, run"), "{stderr}");
    assert!(part.exists() && journal.exists() && !dst.exists());
    let r1 = report(&rep1);
    assert_eq!((r1["complete"].as_bool(), r1["interrupted"].as_bool()), (Some(false), Some(true)), "{r1}");

    let mut args = vec![uri.as_str(), dst.to_str().unwrap(), "--report", rep2.to_str().unwrap()];
    args.extend(shape);
    let out = copy_ok(&args);
    assert!(String::from_utf8_lossy(&out.stderr).contains("resuming"));
    let r2 = report(&rep2);
    assert_eq!(r2["complete"], true, "{r2}");
    let resumed = r2["resumed_bytes"].as_u64().unwrap();
    assert!(resumed >= IMAGE / 4, "the second run skipped what the first copied: {r2}");
    let (d1, d2) = (r1["data_bytes"].as_u64().unwrap(), r2["data_bytes"].as_u64().unwrap());
    let window = r1["max_in_flight_bytes"].as_u64().unwrap();
    let twice = (d1 + d2).saturating_sub(IMAGE);
    assert!(twice <= window, "{twice} bytes carried twice, more than one in-flight window ({window})");
    assert!(!part.exists() && !journal.exists(), "the part file was renamed and the journal removed");
    assert_eq!(sha256_file(&dst).unwrap(), sha);
}
