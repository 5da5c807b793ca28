//! Copies on one host share one session budget (`--share-scope host`):
//! two `wanblk copy` processes from the same rate-limited nbdkit find each
//! other through the host's coordinator (each report says
//! `share.host_copies` = 2), keep their combined N within what one copy
//! may use, and copy the right bytes; when the copy serving the
//! coordinator is killed mid-copy, the other finishes alone with the right
//! bytes.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use wanblk_testkit::{Peer, Running, free_port};

/// Starts `wanblk copy SRC DST` with the host's coordinator in `run_dir`
/// (its own `XDG_RUNTIME_DIR`, so no other test's copies join), its
/// report in `report`, its log (info for the remote crate) in `log`.
fn start(run_dir: &Path, src: &str, dst: &Path, report: &Path, log: &Path, extra: &[&str]) -> Running {
    Running::start(&mut command(run_dir, src, dst, report, log, extra))
}

/// The command [`start`] runs.
fn command(run_dir: &Path, src: &str, dst: &Path, report: &Path, log: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new("sh");
    // `exec` keeps the PID wanblk's, so the test kills wanblk itself.
    cmd.args(["-c", "exec \"$0\" \"$@\" 2>\"$LOG\""])
        .arg(env!("CARGO_BIN_EXE_wanblk"))
        .args(["copy", "--no-progress", "--log", "wanblk_remote=info,warn", src])
        .arg(dst)
        .args(["-C", "auto", "--initial-connections", "6", "--max-connections", "8", "--interval", "100ms"])
        .args(["--report", report.to_str().unwrap()])
        .args(extra)
        // The host's budget is opt-in (see --share-scope's help).
        .args(if extra.contains(&"--share-scope") { &[][..] } else { &["--share-scope", "host"][..] })
        .env("XDG_RUNTIME_DIR", run_dir)
        .env("LOG", log);
    cmd
}

/// The log without its colour codes.
fn read_log(log: &Path) -> String {
    let raw = std::fs::read_to_string(log).unwrap_or_default();
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|c| *c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

fn logged(log: &Path, what: &str) -> bool {
    read_log(log).contains(what)
}

#[test]
fn two_copies_on_one_host_see_each_other_and_share_one_budget() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let src_sha = random_file(&src, 96 << 20, 11).unwrap();
    let port = free_port();
    // 240 Mbit/s for both together: each copy lasts several seconds.
    let (_nbdkit, uri) =
        peers::nbdkit_tcp(port, &["-r", "--filter=rate", "file", src.to_str().unwrap(), "rate=240M"]);
    let run_dir = dir.path().join("run");
    let p = |name: &str| dir.path().join(name);
    let a = start(&run_dir, &uri, &p("a.img"), &p("a.json"), &p("a.log"), &[]);
    let b = start(&run_dir, &uri, &p("b.img"), &p("b.json"), &p("b.log"), &[]);
    for (copy, name) in [(a, "a"), (b, "b")] {
        let out = copy.wait(COPY_TIMEOUT);
        let log = read_log(&p(&format!("{name}.log")));
        assert!(out.status.success(), "copy {name} failed: {}\n{log}", out.status);
    }
    let mut reports = Vec::new();
    for name in ["a", "b"] {
        assert_eq!(sha256_file(&p(&format!("{name}.img"))).unwrap(), src_sha, "copy {name} is the source");
        let r = report(&p(&format!("{name}.json")));
        let log = read_log(&p(&format!("{name}.log")));
        assert_eq!(r["share"]["host_copies"], 2, "copy {name} saw the other: {}\n{log}", r["share"]);
        reports.push(r);
    }
    // Each copy alone may use up to 8 and starts at 6; together they
    // split one copy's budget: the first copy's N once its search is past
    // its climb, at most 8, plus the one session the other was held at
    // meanwhile (CI saw 4 + 5 at 2.4 s), so 9. The check is half a second
    // before the end of the copy that finished first (the copies started together, their
    // clocks a moment apart): each copy's N in its interval that spanned
    // that moment (a sample's N is the one of its whole interval: the
    // interval that ended before the moment may have had one session
    // more, given back at its end; CI saw 2 there and 1 in the interval
    // around the end). Not at the end itself: the copy left alone takes
    // the whole budget two intervals (200 ms) after the other left, and
    // tunes on without a ceiling, so the sum of the two final Ns says
    // nothing.
    let secs = |r: &serde_json::Value| r["seconds"].as_f64().unwrap();
    reports.sort_by(|x, y| secs(x).total_cmp(&secs(y)));
    let (first, second) = (&reports[0], &reports[1]);
    let moment = secs(first) - 0.5;
    let n_at = |r: &serde_json::Value| {
        let samples = r["samples"].as_array().unwrap();
        let t = |s: &serde_json::Value| s["t_s"].as_f64().unwrap();
        let then = samples
            .iter()
            .find(|s| t(s) >= moment && t(s) - s["duration_s"].as_f64().unwrap() <= moment)
            .or_else(|| samples.iter().rfind(|s| t(s) <= moment))
            .unwrap_or_else(|| panic!("no interval by {moment:.1} s: {samples:?}"));
        then["n"].as_u64().unwrap()
    };
    let (n1, n2) = (n_at(first), n_at(second));
    assert!(
        n1 + n2 <= 9,
        "combined N {n1} + {n2} at {moment:.1} s is more than one copy may use: the samples {:?} and {:?}",
        first["samples"],
        second["samples"]
    );
    assert!(run_dir.join("wanblk").join("coord.sock").exists(), "the coordinator's socket");
}

#[test]
fn a_copy_whose_coordinator_dies_finishes_alone() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let src_sha = random_file(&src, 64 << 20, 12).unwrap();
    let port = free_port();
    let (_nbdkit, uri) =
        peers::nbdkit_tcp(port, &["-r", "--filter=rate", "file", src.to_str().unwrap(), "rate=80M"]);
    let run_dir = dir.path().join("run");
    let sock = run_dir.join("wanblk").join("coord.sock");
    let p = |name: &str| dir.path().join(name);
    let mut a = Peer::spawn(
        "wanblk copy a",
        &mut command(&run_dir, &uri, &p("a.img"), &p("a.json"), &p("a.log"), &[]),
    );
    wait_until("the first copy serves the coordinator", Duration::from_secs(30), || sock.exists());
    let b = start(&run_dir, &uri, &p("b.img"), &p("b.json"), &p("b.log"), &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !logged(&p("b.log"), "copies=2") {
        let logs = (read_log(&p("a.log")), read_log(&p("b.log")));
        assert!(std::time::Instant::now() < deadline, "the second copy did not join within 30 s: {logs:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SIGTERM, not SIGKILL: the copy stops as on Ctrl-C (requests in
    // flight finish, then it exits) and its coordinator goes with it.
    // Killed with requests in flight, nbdkit 1.32 with its rate filter aborts
    // the whole server ("raw_send_socket: Assertion `sock >= 0' failed")
    // and the other copy has nothing left to copy from.
    a.signal(wanblk_sys::process::SIGTERM);
    a.wait_within(Duration::from_secs(60));
    let out = b.wait(COPY_TIMEOUT);
    let log = read_log(&p("b.log"));
    assert!(out.status.success(), "the second copy failed: {}\n{log}", out.status);
    assert!(log.contains("going on alone"), "it noticed the coordinator was gone:\n{log}");
    assert_eq!(sha256_file(&p("b.img")).unwrap(), src_sha, "the second copy is the source");
    let r = report(&p("b.json"));
    assert_eq!(r["share"]["host_copies"], 2, "{}", r["share"]);
    assert_eq!(r["complete"], true);
}

#[test]
fn share_scope_none_keeps_copies_apart() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let src_sha = random_file(&src, 32 << 20, 13).unwrap();
    let port = free_port();
    let (_nbdkit, uri) =
        peers::nbdkit_tcp(port, &["-r", "--filter=rate", "file", src.to_str().unwrap(), "rate=240M"]);
    let run_dir = dir.path().join("run");
    let p = |name: &str| dir.path().join(name);
    let none = ["--share-scope", "none"];
    let a = start(&run_dir, &uri, &p("a.img"), &p("a.json"), &p("a.log"), &none);
    let b = start(&run_dir, &uri, &p("b.img"), &p("b.json"), &p("b.log"), &none);
    for (copy, name) in [(a, "a"), (b, "b")] {
        assert!(copy.wait(COPY_TIMEOUT).status.success(), "copy {name}");
        assert_eq!(sha256_file(&p(&format!("{name}.img"))).unwrap(), src_sha);
        assert_eq!(report(&p(&format!("{name}.json")))["share"]["host_copies"], 1);
    }
    assert!(!run_dir.join("wanblk").exists(), "no coordinator was started");
}
