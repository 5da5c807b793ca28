//! `--paper-tuner`: the seed's algorithm exactly, as the report shows it:
//! no interval discarded (no warm-up), no re-tuning, no knee search, N
//! doubled (alpha = 2) while the bracket grows, and no request sizing
//! (every interval at `--request-size` and `--requests`). The same copy
//! without the flag does discard warm-up intervals, so the check can fail.

mod common;

use common::*;
use wanblk_testkit::{free_port, require_tool};

const SIZE: u64 = 48 << 20;
const MAX: u64 = 16;

/// Copies the rate-limited source with `-C auto` and `extra`; checks the
/// copy by sha256 and returns the report.
fn auto_copy(dir: &std::path::Path, uri: &str, sha: &str, name: &str, extra: &[&str]) -> serde_json::Value {
    let (dst, rep) = (dir.join(format!("{name}.img")), dir.join(format!("{name}.json")));
    let max = MAX.to_string();
    let mut args = vec![
        uri,
        dst.to_str().unwrap(),
        "-C",
        "auto",
        "--max-connections",
        &max,
        "--interval",
        "100ms",
        "--report",
        rep.to_str().unwrap(),
    ];
    args.extend(extra);
    copy_ok(&args);
    assert_eq!(sha256_file(&dst).unwrap(), sha, "{name}: the copy is the source");
    let r = report(&rep);
    assert!(r["tuning"]["intervals"].as_u64().unwrap_or(0) >= 3, "{name}: the tuner saw intervals: {r}");
    r
}

/// Intervals the tuner discarded as warm-up after N changed (not the last,
/// partial interval, nor one with too little demand to judge N).
fn warmups(r: &serde_json::Value) -> u64 {
    r["tuning"]["discards"]["warmup"].as_u64().unwrap_or_else(|| panic!("tuning.discards.warmup: {r}"))
}

#[test]
fn the_paper_tuner_discards_nothing_and_doubles_n() {
    require_tool("nbdkit", "nbdkit");
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, SIZE, 0x9a9e).unwrap();
    let port = free_port();
    // 200 Mbit/s in all (a bucket of 0.2 s, not the filter's 2 s burst):
    // some 2 s, 20 intervals of 100 ms.
    let (_nbdkit, uri) = peers::nbdkit_tcp(
        port,
        &["-r", "--filter=rate", "file", src.to_str().unwrap(), "rate=200M", "burstiness=0.2"],
    );

    let r = auto_copy(dir.path(), &uri, &sha, "paper", &["--paper-tuner"]);
    let t = &r["tuning"];
    assert_eq!(warmups(&r), 0, "no warm-up discarded: {r}");
    assert_eq!(t["discards"]["stale"], 0, "{t}");
    assert_eq!(t["retunes"], 0, "no re-tuning: {t}");
    let steps = t["steps"].as_array().unwrap();
    assert!(!steps.is_empty(), "the tuner decided: {t}");
    assert_eq!(steps[0]["n"], 4, "the first point is N0 = 4: {t}");
    for s in steps {
        let phase = s["phase"].as_str().unwrap();
        assert!(!matches!(phase, "knee" | "bracket_down"), "only the paper's phases: {s}");
        let (n, next) = (s["n"].as_u64().unwrap(), s["next_n"].as_u64().unwrap());
        if phase == "bracket_up" && next > n {
            assert_eq!(next, (2 * n).min(MAX), "the bracket grows by alpha = 2: {s}");
        }
    }
    let (size, depth) = (r["request_size"].as_u64().unwrap(), r["requests"].as_u64().unwrap());
    for s in r["samples"].as_array().unwrap() {
        assert_eq!(
            (s["request_bytes"].as_u64(), s["depth"].as_u64()),
            (Some(size), Some(depth)),
            "no request sizing: {s}"
        );
    }

    // Our tuner on the same copy: warm-ups after N changed are discarded.
    let r = auto_copy(dir.path(), &uri, &sha, "ours", &[]);
    assert!(warmups(&r) > 0, "the default tuner discards warm-up intervals: {r}");
}
