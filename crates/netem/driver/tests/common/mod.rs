//! Shared by the emulator's integration tests (included with `mod common;`).
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::process::{Command, Output};
use std::time::Duration;

use wanblk_netem::{Scenario, Side};

/// Runs `cmd` in `side`'s namespace; after `timeout` it is killed by PID
/// and the test fails, naming the command.
pub fn exec(sc: &Scenario, side: Side, cmd: &mut Command, timeout: Duration) -> Output {
    sc.enter(side, cmd).expect("enter the scenario's namespace");
    wanblk_testkit::run_with_timeout(cmd, timeout)
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Fails (never skips) unless running as root. Returns a guard that keeps
/// the tests of one binary from running at the same time: they measure
/// timing and throughput on a 2-core machine.
pub fn require_root() -> std::sync::MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        wanblk_sys::sched::geteuid() == 0,
        "the netem tests need root (network namespaces, iptables, NFQUEUE): run the README's test command as root"
    );
    wanblk_testkit::require_tool("ip", "iproute2");
    wanblk_testkit::require_tool("iptables", "iptables");
    guard
}

/// RTT summary of a ping run, ms (from ping's `rtt min/avg/max/mdev` line,
/// which has microsecond precision; the per-reply lines are rounded).
#[derive(Debug, Clone)]
pub struct PingSummary {
    pub sent: u32,
    pub received: u32,
    pub min: f64,
    pub avg: f64,
    pub max: f64,
    pub mdev: f64,
    /// Per-reply RTTs as ping prints them (3 significant digits: 0.1 ms
    /// steps from 10 ms, 1 ms steps from 100 ms).
    pub replies: Vec<f64>,
}

/// Runs `ping` from the client to the server.
pub fn ping(sc: &Scenario, count: u32, interval: &str, size: u32) -> PingSummary {
    wanblk_testkit::require_tool("ping", "iputils-ping");
    let mut c = Command::new("ping");
    c.args(["-n", "-c", &count.to_string(), "-i", interval, "-s", &size.to_string(), "-W", "5"]);
    c.arg(sc.server_addr().to_string());
    let out = exec(sc, Side::Client, &mut c, Duration::from_secs(60 + u64::from(count)));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut s = PingSummary {
        sent: 0,
        received: 0,
        min: f64::NAN,
        avg: f64::NAN,
        max: f64::NAN,
        mdev: f64::NAN,
        replies: Vec::new(),
    };
    for l in text.lines() {
        if let Some(t) = l.split("time=").nth(1).and_then(|t| t.split_whitespace().next()) {
            s.replies.extend(t.parse::<f64>().ok());
        }
        if l.contains("packets transmitted") {
            let n: Vec<u32> = l.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
            s.sent = n[0];
            s.received = n[1];
        }
        if let Some(v) = l.split(" = ").nth(1).filter(|_| l.starts_with("rtt")) {
            let v = v.split(" ms").next().unwrap_or("");
            let n: Vec<f64> = v.split('/').filter_map(|w| w.parse().ok()).collect();
            (s.min, s.avg, s.max, s.mdev) = (n[0], n[1], n[2], n[3]);
        }
    }
    assert!(s.sent > 0, "no ping summary in: {text}");
    s
}

/// The median of `v`.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Load average over the last minute (for reports).
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_string()
}

/// Bytes received so far by interface `dev` in `side`'s namespace (layer 2:
/// IP length + 14), from `ip -s -j link`.
pub fn rx_bytes(sc: &Scenario, side: Side, dev: &str) -> u64 {
    let mut c = Command::new("ip");
    c.args(["-s", "-j", "link", "show", "dev", dev]);
    let out = exec(sc, side, &mut c, Duration::from_secs(20));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j output");
    v[0]["stats64"]["rx"]["bytes"].as_u64().expect("rx bytes")
}

/// Waits until no packet has entered the emulator (either way) for 150 ms,
/// and returns the counters then.
///
/// # Panics
/// The path is still busy after 10 s.
pub fn quiet(sc: &Scenario) -> wanblk_netem::Stats {
    let arrived = |st: &wanblk_netem::Stats| st.fwd.model.in_packets + st.back.model.in_packets;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut last = sc.stats().expect("emulator stats");
    let mut still = 0;
    while still < 3 {
        assert!(std::time::Instant::now() < deadline, "packets still pass the emulator after 10 s");
        std::thread::sleep(Duration::from_millis(50));
        let st = sc.stats().expect("emulator stats");
        still = if arrived(&st) == arrived(&last) { still + 1 } else { 0 };
        last = st;
    }
    last
}

/// UDP datagrams the kernel of `side`'s namespace dropped on receipt
/// (`Udp: InErrors` of /proc/net/snmp: full socket buffers, when the
/// receiving program is starved on a busy machine).
pub fn udp_in_errors(sc: &Scenario, side: Side) -> u64 {
    let out = exec(sc, side, Command::new("cat").arg("/proc/net/snmp"), Duration::from_secs(20));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next().unwrap_or_default(), udp.next().unwrap_or_default());
    let col = names.split_whitespace().position(|n| n == "InErrors").expect("Udp InErrors in /proc/net/snmp");
    values.split_whitespace().nth(col).and_then(|v| v.parse().ok()).expect("a number")
}
