//! Server errors: transient ones (nbdkit's error filter answering EIO to
//! 1 % of reads and writes) are retried and counted, and the copy
//! completes; a permanent one (ENOSPC on every write) stops the copy at
//! once with the offset, and once the cause is gone the same command
//! resumes and completes. Every image is checked by sha256.

mod common;

use common::*;

const IMAGE: u64 = 32 << 20;

#[test]
fn transient_eio_on_1_percent_of_requests_is_retried() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0xe10).unwrap();
    let disk = dir.path().join("disk.img");
    sparse_file(&disk, IMAGE);
    let (_nbdkit, uri) = peers::nbdkit(
        dir.path(),
        &[
            "--filter=error",
            "file",
            disk.to_str().unwrap(),
            "error=EIO",
            "error-pread-rate=1%",
            "error-pwrite-rate=1%",
        ],
    );
    // Small requests: 512 writes, then 512 reads, so some of each fail.
    let small = ["-C", "2", "--request-size", "64K"];
    let rep = dir.path().join("backup.json");
    let mut args = vec![src.to_str().unwrap(), &uri, "--report", rep.to_str().unwrap()];
    args.extend(small);
    copy_ok(&args);
    assert_eq!(sha256_file(&disk).unwrap(), sha, "the target holds the source");
    let backup = report(&rep);
    let restored = dir.path().join("restored.img");
    let rep = dir.path().join("restore.json");
    let mut args =
        vec![uri.as_str(), restored.to_str().unwrap(), "--checksum", "--report", rep.to_str().unwrap()];
    args.extend(small);
    let out = copy_ok(&args);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), sha);
    assert_eq!(sha256_file(&restored).unwrap(), sha, "the restored image is the source");
    let restore = report(&rep);
    let errors = |r: &serde_json::Value| r["faults"]["transient_errors"].as_u64().unwrap();
    // 1024 requests at 1 %: no error at all would happen once in 20000 runs.
    assert!(errors(&backup) + errors(&restore) > 0, "transient errors counted:\n{backup}\n{restore}");
    assert!(backup["faults"]["retried_requests"].as_u64().unwrap() >= errors(&backup));
}

#[test]
fn a_permanent_error_stops_at_once_with_the_offset_and_the_copy_resumes_later() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0xe11).unwrap();
    let disk = dir.path().join("disk.img");
    sparse_file(&disk, IMAGE);
    let trigger = dir.path().join("full");
    std::fs::write(&trigger, b"").unwrap();
    let (_nbdkit, uri) = peers::nbdkit(
        dir.path(),
        &[
            "--filter=error",
            "file",
            disk.to_str().unwrap(),
            "error=ENOSPC",
            "error-pwrite-rate=100%",
            &format!("error-pwrite-file={}", trigger.display()),
        ],
    );
    let state = dir.path().join("copy.state");
    let rep = dir.path().join("r.json");
    let args =
        [src.to_str().unwrap(), &uri, "--state", state.to_str().unwrap(), "--report", rep.to_str().unwrap()];
    let (code, _, stderr) = text(&copy(&args));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("at offset") && stderr.contains("NBD_ENOSPC"),
        "names the offset and the cause:\n{stderr}"
    );
    assert!(stderr.contains("to resume, run"), "says how to resume:\n{stderr}");
    let r = report(&rep);
    assert_eq!(r["faults"]["transient_errors"], 0, "a permanent error is not retried: {r}");
    assert!(state.exists(), "the journal is kept");
    // The target has room again: the same command completes the copy.
    std::fs::remove_file(&trigger).unwrap();
    let out = copy_ok(&args);
    assert!(String::from_utf8_lossy(&out.stderr).contains("resuming"));
    assert_eq!(report(&rep)["complete"], true);
    assert!(!state.exists(), "the journal is removed once the copy completed");
    assert_eq!(sha256_file(&disk).unwrap(), sha);
}
