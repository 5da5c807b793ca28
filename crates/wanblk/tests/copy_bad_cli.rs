//! Bad command lines and impossible copies: each gives a one-line error
//! (no panic, no backtrace) and a non-zero exit.

mod common;

use common::*;

/// Runs `wanblk copy ARGS` and checks the failure is one clear line that
/// contains `expect`.
fn rejected(args: &[&str], expect: &str) -> String {
    let out = copy(args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "wanblk copy {args:?} succeeded");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{args:?}: {err}");
    // clap adds "For more information, try '--help'." after its one line.
    let lines: Vec<&str> =
        err.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("For more information")).collect();
    assert_eq!(lines.len(), 1, "{args:?}: expected one line, got:\n{err}");
    assert!(err.contains(expect), "{args:?}: expected {expect:?} in:\n{err}");
    err
}

#[test]
fn bad_uris_and_flags_are_one_line_errors() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    random_file(&src, 2 << 20, 1).unwrap();
    let s = src.to_str().unwrap();
    rejected(&["http://host/x", "null:"], "unknown location scheme \"http\"");
    rejected(&["nbd+unix:///x", "null:"], "needs ?socket=PATH");
    let missing = dir.path().join("no.sock");
    let uri = format!("nbd+unix:///x?socket={}", missing.display());
    rejected(&[&uri, "null:"], "No such file");
    rejected(&["nbd://[::1", "null:"], "unterminated IPv6 literal");
    rejected(&["nbd://127.0.0.1:99999/x", "null:"], "bad port");
    rejected(&[s, "random:1M"], "source only");
    rejected(&[s, "null:", "-C", "0"], "number of connections");
    rejected(&[s, "null:", "-C", "100000"], "number of connections");
    rejected(&[s, "null:", "--max-connections", "0"], "number of connections");
    rejected(&[s, "null:", "--request-size", "3"], "multiple of 512");
    rejected(&[s, "null:", "--request-size", "1G"], "256M");
    rejected(&[s, "null:", "--interval", "soon"], "interval");
    rejected(&[dir.path().join("absent.img").to_str().unwrap(), "null:"], "absent.img");
}

#[test]
fn destination_smaller_than_the_source_is_refused() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    random_file(&src, 2 << 20, 2).unwrap();
    let s = src.to_str().unwrap();
    // A target (here nbdkit's 1 MiB memory disk) cannot grow: refused
    // before any request is sent, naming both sizes.
    let (_nbdkit, uri) = peers::nbdkit(dir.path(), &["memory", "1M"]);
    let err = rejected(&[s, &uri], "smaller than the source");
    assert!(err.contains("1048576") && err.contains("2097152"), "names both sizes: {err}");
    rejected(&[s, "null:1M"], "smaller than the source");
    // An existing regular file grows to the source's size, and says so.
    let dst = dir.path().join("dst.img");
    random_file(&dst, 1 << 20, 3).unwrap();
    let out = copy_ok(&[s, dst.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("extended to 2097152 bytes"));
    assert_eq!(sha256_file(&dst).unwrap(), sha256_file(&src).unwrap());
}
