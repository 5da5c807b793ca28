//! Progress off a terminal: text lines on stderr every interval and at
//! the end, JSON lines that parse, another file descriptor; and a report
//! even when the copy fails before it starts.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// Runs `wanblk copy ARGS` (stderr captured, so not a terminal).
fn run_copy(args: &[&str]) -> std::process::Output {
    wanblk_testkit::run_with_timeout(wanblk().arg("copy").args(args), COPY_TIMEOUT)
}

// 48 MiB at 200 Mbit/s: at least 2 s, so lines every 0.3 s must show.
const ARGS: &[&str] = &["random:48M:5", "null:", "--rate", "200M", "--progress-interval", "0.3"];

#[test]
fn text_lines_appear_off_a_terminal() {
    let out = run_copy(ARGS);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("wanblk: progress ")).collect();
    assert!(lines.len() >= 2, "a line while copying and one at the end:\n{err}");
    assert!(lines.iter().any(|l| l.starts_with("wanblk: progress copying:")), "{err}");
    let last = lines.last().unwrap();
    assert!(last.starts_with("wanblk: progress done: 100.0% (50331648 of 50331648 bytes)"), "{last}");
    assert!(lines.iter().all(|l| l.contains("Mbit/s")), "rates in Mbit/s, as the summary: {err}");
    assert!(err.contains("Mbit/s, 1 connection(s)"), "{err}");
}

#[test]
fn json_lines_parse_and_can_go_to_another_descriptor() {
    let mut args = ARGS.to_vec();
    args.push("--progress-json");
    let out = run_copy(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(lines.len() >= 2, "{err}");
    for l in &lines {
        for key in [
            "t_s",
            "phase",
            "bytes_done",
            "bytes_total",
            "percent",
            "rate_mbps",
            "average_mbps",
            "eta_s",
            "sessions",
        ] {
            assert!(l.get(key).is_some(), "{key} missing: {l}");
        }
    }
    let done: Vec<u64> = lines.iter().map(|l| l["bytes_done"].as_u64().unwrap()).collect();
    assert!(done.windows(2).all(|w| w[0] <= w[1]), "bytes_done never goes back: {done:?}");
    let last = lines.last().unwrap();
    assert_eq!(last["phase"], "done");
    assert_eq!(last["bytes_done"], 48u64 << 20);

    // --progress=3 with fd 3 a file: the lines go there, not to stderr.
    let dir = tempdir();
    let log = dir.path().join("progress.log");
    let line = format!(
        "{} copy {} --progress=3 --progress-json 3>{}",
        env!("CARGO_BIN_EXE_wanblk"),
        ARGS.join(" "),
        log.display()
    );
    let out = wanblk_testkit::run_with_timeout(Command::new("/bin/sh").arg("-c").arg(&line), COPY_TIMEOUT);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("\"phase\""));
    let text = std::fs::read_to_string(&log).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().expect("lines in fd 3")).unwrap();
    assert_eq!(last["phase"], "done", "{text}");
    // A closed descriptor is a clear error.
    let out = run_copy(&["random:1M", "null:", "--progress=9"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("file descriptor 9"));
    let _ = Duration::ZERO;
}

#[test]
fn a_copy_that_cannot_start_still_writes_its_report() {
    let dir = tempdir();
    let rep = dir.path().join("r.json");
    let missing = dir.path().join("absent.sock");
    let src = format!("nbd+unix:///disk?socket={}", missing.display());
    let out =
        run_copy(&[&src, dir.path().join("out.img").to_str().unwrap(), "--report", rep.to_str().unwrap()]);
    assert!(!out.status.success());
    let r = report(&rep);
    assert_eq!(r["schema_version"], wanblk_copy::report::SCHEMA_VERSION);
    // It reads back as a report of this version.
    wanblk_copy::Report::from_json(&std::fs::read(&rep).unwrap()).expect("a typed report");
    assert_eq!(r["complete"], false);
    assert_eq!(r["bytes"], 0);
    assert_eq!(r["source"], src);
    let e = r["error"].as_str().expect("the error is in the report");
    assert!(e.contains("absent.sock") || e.contains("No such file"), "{r}");
    // A bad location too, with an iSCSI password kept out of the report.
    let out =
        run_copy(&["iscsi://u%hunter2@127.0.0.1:1/iqn.x:y/1", "null:", "--report", rep.to_str().unwrap()]);
    assert!(!out.status.success());
    let r = report(&rep);
    assert!(r["error"].is_string(), "{r}");
    assert!(!r.to_string().contains("hunter2"), "{r}");
}

/// Log lines sent to a file or a pipe carry no terminal colour codes
/// (`wanblk mount ... 2> log` had kept them in every line).
#[test]
fn log_lines_off_a_terminal_have_no_colour_codes() {
    wanblk_testkit::require_tool("nbdkit", "nbdkit");
    let dir = tempdir();
    let (_nbdkit, uri) = peers::nbdkit(dir.path(), &["memory", "16M"]);
    let out = copy(&[&uri, "null:", "-C", "auto", "--log", "info"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(" INFO "), "an info line to look at: {err}");
    assert!(!err.contains('\u{1b}'), "escape codes in the log: {err:?}");
}
