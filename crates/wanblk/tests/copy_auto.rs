//! `wanblk copy --connections auto` moves N while it copies: from nbdkit
//! (TCP on loopback, a per-connection rate limit so more sessions really
//! help up to a total cap) to `null:`, with the data checked by sha256.

mod common;

use std::collections::BTreeSet;

use common::*;
use wanblk_testkit::{free_port, require_tool};

const SIZE: u64 = 1 << 30;

#[test]
fn auto_moves_n_and_reports_the_search() {
    require_tool("nbdkit", "nbdkit");
    let dir = tempdir();
    let port = free_port();
    let (_nbdkit, uri) = peers::nbdkit_tcp(
        port,
        &["--filter=rate", "pattern", &SIZE.to_string(), "connection-rate=400M", "rate=1600M"],
    );
    let args = ["-C", "auto", "--initial-connections", "1", "--max-connections", "16"];
    let r = copy_pattern(&uri, SIZE, &args, &dir.path().join("auto.json"));
    let samples = r["samples"].as_array().expect("samples");
    let ns: BTreeSet<u64> = samples.iter().map(|s| s["n"].as_u64().unwrap()).collect();
    assert!(ns.len() >= 3, "the search tried at least 3 values of N: {ns:?}\n{r:#}");
    for s in samples {
        assert!(s["t_s"].as_f64().is_some() && s["goodput_mbps"].as_f64().is_some(), "{s}");
    }
    let final_n = r["connections"].as_u64().unwrap();
    assert!((1..=16).contains(&final_n), "final N within bounds: {final_n}");
    let tuning = &r["tuning"];
    assert!(tuning["phase"].is_string(), "tuning phase reported: {tuning}");
    assert!(tuning["steps"].as_array().is_some_and(|s| !s.is_empty()), "tuning steps recorded: {tuning}");
    assert_eq!(tuning["current_n"], final_n, "report's final N is the tuner's");
}
