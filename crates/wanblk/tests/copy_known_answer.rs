//! `wanblk copy -C auto` on a path whose best N is known: nbdkit's `rate`
//! filter limits each connection to 100 Mbit/s and the server to 400
//! Mbit/s, so goodput grows with N up to N = 4 and is flat above (the knee
//! is total / per connection). The tuner must end at the knee or within
//! one bracket step (alpha = 2) above it ([`top`]), and at least four
//! sessions must really carry data. Over TCP on loopback; the data is
//! checked by sha256 against nbdkit's pattern.
//!
//! A tuner that does not follow goodput fails here: pinned at N0 (1 or 2
//! sessions, half the rate or less), climbing to the limit (16), or stopping
//! early on a noisy sample.

mod common;

use std::time::Duration;

use common::*;
use wanblk_testkit::{Peer, free_port, join_within, require_tool};

/// The tests of this file run one at a time: two rate-limited copies side
/// by side on a small host take CPU from each other, and the goodput each
/// N reaches (the answer the tuner must find) would depend on the other.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Per-connection and total limits of the server, bits per second.
const PER_CONNECTION: u64 = 100_000_000;
const TOTAL: u64 = 400_000_000;
/// The best N: the fewest sessions that carry the total.
const KNEE: u64 = TOTAL / PER_CONNECTION;
/// The limiter's bucket in seconds of its rate (nbdkit's default, 2 s,
/// lets a new connection send 2 s of data at once: a step up in N then
/// looks like a gain the path does not have).
const BURST_S: f64 = 0.1;
/// The highest N accepted for a knee: one bracket step (alpha = 2) above
/// it. On this limiter samples at one N vary by 5-10 %, so the search
/// sometimes takes a point above the knee for a gain the server does not
/// have: in 2026-11-24's repeated runs it ended at 1.5-2 x the knee in 4
/// of about 100 copies (issue 13's 1.5 x goal is a benchmark figure, not a
/// bound this test can hold on a noisy plateau). Pinned N, no re-tune and
/// a climb to the session limit all still fail.
fn top(knee: u64) -> u64 {
    2 * knee
}

/// At 400 Mbit/s about 13 s: the search on this path settles in a few
/// seconds.
const SIZE: u64 = 640 << 20;

/// nbdkit serving its pattern of `size` bytes over TCP on loopback behind
/// the `rate` filter with this file's limits (and `extra` filter
/// parameters), and its URI.
fn limited_nbdkit(size: u64, extra: &[String]) -> (Peer, String) {
    let mut args = vec![
        "--filter=rate".to_string(),
        "pattern".to_string(),
        size.to_string(),
        format!("connection-rate={PER_CONNECTION}"),
        format!("rate={TOTAL}"),
        format!("burstiness={BURST_S}"),
    ];
    args.extend_from_slice(extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    peers::nbdkit_tcp(free_port(), &args)
}

/// A report's intervals as (t, N, Mbit/s, standing queue, segments lost),
/// for failure messages: the last two are what the tuner's re-tuning rules
/// read besides goodput.
fn trail(r: &serde_json::Value) -> Vec<(f64, u64, f64, serde_json::Value, u64)> {
    r["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|s| {
            (
                s["t_s"].as_f64().unwrap(),
                s["n"].as_u64().unwrap(),
                s["goodput_mbps"].as_f64().unwrap(),
                s["standing_queue"].clone(),
                s["retransmits"].as_u64().unwrap_or(0) + s["out_of_order"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn auto_ends_at_the_known_best_n() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    require_tool("nbdkit", "nbdkit");
    let dir = tempdir();
    let (_nbdkit, uri) = limited_nbdkit(SIZE, &[]);
    // The automatic interval: ~0.25 s on loopback, lengthened where the
    // rate-limited server's whole replies come in bursts.
    let r =
        copy_pattern(&uri, SIZE, &["-C", "auto", "--max-connections", "16"], &dir.path().join("auto.json"));
    let summary = trail(&r);
    let final_n = r["connections"].as_u64().unwrap();
    assert!(
        (KNEE..=top(KNEE)).contains(&final_n),
        "auto ended at N = {final_n}; the best N is {KNEE} (at most {}): samples (t, N, Mbit/s, queue, lost) {summary:?}",
        top(KNEE)
    );
    assert_eq!(r["tuning"]["current_n"], final_n, "the report's N is the tuner's");
    // The sessions the tuner asked for really carried data: each of the
    // final N carried at least a tenth of a fair share.
    let bytes = session_bytes(&r);
    let share = SIZE / final_n;
    let carried = bytes.iter().filter(|b| **b >= share / 10).count() as u64;
    assert!(carried >= KNEE, "only {carried} sessions carried data: {bytes:?}");
    // The report says when N became final, and that is before the end.
    let seconds = r["seconds"].as_f64().unwrap();
    let final_at = r["timing"]["time_to_final_n_s"].as_f64().expect("time_to_final_n_s with auto");
    assert!(final_at < seconds, "N final at {final_at} s of {seconds} s");
}

/// The per-connection limit falls to a third mid-copy (nbdkit's
/// `connection-rate-file`), so the best N moves from 4 to 12: once auto has
/// held N at the first knee (at most one step above it, [`top`], as
/// [`auto_ends_at_the_known_best_n`] accepts: there the change still costs
/// a third of the goodput, above the re-tuning threshold of a fifth) for
/// 2 s, the change must make it search again and end at the new knee (at
/// most [`top`] of it). The test changes the limit when the progress lines
/// (`--progress-json` on standard output) have shown that N for 2 s, not
/// after a fixed time.
#[test]
fn auto_tunes_again_when_the_limit_changes() {
    use std::io::BufRead;
    const SIZE: u64 = 1280 << 20;
    const LOWER: u64 = PER_CONNECTION / 3;
    // The copy takes 30-40 s here; clean-clone CI once killed it after
    // 150 s without a trail (2026-12-07). It now gets its own limit, the
    // progress lines name what happened if it is reached, and the report
    // must show no request that timed out or was sent again (a stuck
    // request would wait out the 60 s request deadline). How long the
    // re-tune takes is the bench's to measure, not this test's.
    const LIMIT: Duration = Duration::from_secs(240);
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    require_tool("nbdkit", "nbdkit");
    let dir = tempdir();
    let rate_file = dir.path().join("connection-rate");
    let (_nbdkit, uri) = limited_nbdkit(SIZE, &[format!("connection-rate-file={}", rate_file.display())]);
    let rep = dir.path().join("auto.json");
    let mut child = wanblk()
        .args(["copy", &uri, "null:", "-C", "auto", "--max-connections", "32", "--checksum"])
        .args(["--progress=1", "--progress-json", "--progress-interval", "0.25"])
        .args(["--report", rep.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start wanblk copy");
    let stdout = child.stdout.take().unwrap();
    let mut copy = Peer::adopt("wanblk copy", child);
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Wait until N has stayed at the first knee for 2 s, then lower the
    // limit.
    let deadline = std::time::Instant::now() + LIMIT;
    let mut held: Option<(u64, f64)> = None;
    let mut changed_at = None;
    let mut sha = None;
    // Every progress line as (t, N, Mbit/s), for the message if the copy
    // does not end in time (it then writes no report).
    let mut progress: Vec<(f64, u64, f64)> = Vec::new();
    let mut timed_out = false;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = match rx.recv_timeout(left) {
            Ok(line) => line,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                break;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let Ok(p) = serde_json::from_str::<serde_json::Value>(&line) else {
            sha = Some(line.trim().to_string());
            continue;
        };
        let (Some(t), Some(n)) = (p["t_s"].as_f64(), p["sessions"].as_u64()) else { continue };
        progress.push((t, n, (p["rate_mbps"].as_f64().unwrap_or(f64::NAN) * 10.0).round() / 10.0));
        if changed_at.is_some() || n == 0 {
            continue;
        }
        match held {
            Some((m, since)) if m == n && t - since >= 2.0 && (KNEE..=top(KNEE)).contains(&n) => {
                let tmp = dir.path().join("connection-rate.new");
                std::fs::write(&tmp, LOWER.to_string()).unwrap();
                std::fs::rename(&tmp, &rate_file).unwrap();
                changed_at = Some((t, n));
            }
            Some((m, _)) if m == n => {}
            _ => held = Some((n, t)),
        }
    }
    if timed_out {
        copy.kill();
        panic!(
            "wanblk copy did not finish within {LIMIT:?} (killed it; the limit fell at (t, N) \
             {changed_at:?}): progress (t, N, Mbit/s) {progress:?}"
        );
    }
    // The copy closed its output: it is writing its report and ending.
    let status = copy.wait_within(Duration::from_secs(30));
    join_within(reader, Duration::from_secs(10), "progress reader");
    println!("limit fell at (t, N) {changed_at:?}; progress (t, N, Mbit/s) {progress:?}");
    assert!(status.success(), "wanblk copy failed: {status}");
    let r = report(&rep);
    let samples = trail(&r);
    for fault in ["timeouts", "retried_requests", "reconnects"] {
        assert_eq!(
            r["faults"][fault].as_u64(),
            Some(0),
            "{fault} on a loopback server that never fails: faults {}; progress (t, N, Mbit/s) {progress:?}",
            r["faults"]
        );
    }
    let (t_change, n_before) = changed_at.unwrap_or_else(|| {
        panic!(
            "N never held still for 2 s at {KNEE}..={} (the best N and one step above): samples (t, N, \
             Mbit/s, queue, lost) {samples:?}",
            top(KNEE)
        )
    });
    assert!(
        (KNEE..=top(KNEE)).contains(&n_before),
        "N held at {n_before} before the change at {t_change:.1} s; the best N was {KNEE}: samples (t, N, \
         Mbit/s, queue, lost) {samples:?}"
    );
    assert_eq!(sha.as_deref(), Some(pattern_sha256(SIZE).as_str()), "the data is nbdkit's pattern");
    // The tuner's decisions (N, Mbit/s, next N), for the messages below.
    let steps: Vec<(u64, f64, u64)> = r["tuning"]["steps"]
        .as_array()
        .expect("tuning steps")
        .iter()
        .map(|s| {
            let g = s["goodput_bytes_per_s"].as_f64().unwrap() * 8e-6;
            (s["n"].as_u64().unwrap(), (g * 10.0).round() / 10.0, s["next_n"].as_u64().unwrap())
        })
        .collect();
    let knee = TOTAL / LOWER;
    let final_n = r["connections"].as_u64().unwrap();
    let after: Vec<_> = samples.iter().filter(|s| s.0 >= t_change).collect();
    let before: Vec<_> = samples.iter().filter(|s| s.0 < t_change).collect();
    let retunes = &r["tuning"]["retunes"];
    assert!(
        (knee..=top(knee)).contains(&final_n),
        "after the limit fell at {t_change:.1} s auto ended at N = {final_n}; the best N is {knee}: samples \
         since (t, N, Mbit/s, queue, lost) {after:?}; decisions (N, Mbit/s, next N) {steps:?}; re-tunes {retunes}; samples \
         before {before:?}"
    );
}

/// The copy engine keeps every session of the pool busy, whatever the
/// request size: at a fixed N = 16 with 256 KiB requests, each connection
/// limited to 25 Mbit/s (no total limit), the copy must move at least 0.7
/// of 16 x 25 Mbit/s, and every session must carry at least a third of a
/// fair share. The engine once counted the pool's free slots in 4 MiB
/// pieces while it read 256-512 KiB ones, and kept a half to an eighth of
/// the sessions idle (2026-11-27); nothing else failed. Counting them in
/// 4 MiB pieces here moves 234 Mbit/s and leaves sessions with a quarter
/// of a share. (With `-C auto` the pieces follow the tuner's request
/// plan instead of `--request-size`; the same count applies.)
#[test]
fn small_requests_keep_every_session_busy() {
    const N: u64 = 16;
    const PER: u64 = 25_000_000;
    const SIZE: u64 = 96 << 20;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    require_tool("nbdkit", "nbdkit");
    let dir = tempdir();
    let (_nbdkit, uri) = peers::nbdkit_tcp(
        free_port(),
        &[
            "--filter=rate",
            "pattern",
            &SIZE.to_string(),
            &format!("connection-rate={PER}"),
            &format!("burstiness={BURST_S}"),
        ],
    );
    let n = N.to_string();
    let r = copy_pattern(&uri, SIZE, &["-C", &n, "--request-size", "256K"], &dir.path().join("fixed.json"));
    let bytes = session_bytes(&r);
    let share = SIZE / N;
    let carried = bytes.iter().filter(|b| **b >= share / 3).count() as u64;
    let mbps = r["goodput_mbps"].as_f64().unwrap();
    let most = (N * PER) as f64 / 1e6;
    println!("-C {N} --request-size 256K: {mbps:.0} Mbit/s of {most:.0}; per session {bytes:?}");
    assert_eq!(carried, N, "sessions idle: {bytes:?}");
    assert!(mbps >= 0.7 * most, "{mbps:.0} Mbit/s of the {most:.0} that {N} sessions carry: idle slots");
}
