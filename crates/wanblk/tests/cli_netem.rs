//! `wanblk netem up / list / exec / stats / down` from the command line
//! (the README's `wanblk netem up --rate 1gbit --delay 50ms`): `up` creates
//! the three namespaces and starts the emulator, `exec` runs commands in
//! them (the path has the delay asked for, the exit code comes back),
//! `stats` counts what crossed, `down` stops the emulator and removes the
//! namespaces. Needs root.

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;
use wanblk_testkit::{require_tool, run_with_timeout};

const TIMEOUT: Duration = Duration::from_secs(60);

fn netem(args: &[&str]) -> Output {
    run_with_timeout(wanblk().arg("netem").args(args), TIMEOUT)
}

fn netem_ok(args: &[&str]) -> String {
    let out = netem(args);
    assert!(
        out.status.success(),
        "wanblk netem {args:?}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn namespaces() -> String {
    String::from_utf8_lossy(&run_with_timeout(Command::new("ip").args(["netns", "list"]), TIMEOUT).stdout)
        .into_owned()
}

/// The process runs (exists and is not a zombie waiting to be reaped).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
}

/// Takes the emulator down when the test ends, whatever happened.
struct Down(String);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = netem(&["down", "--name", &self.0]);
    }
}

#[test]
fn up_exec_stats_down() {
    assert!(wanblk_sys::sched::geteuid() == 0, "the netem command needs root (network namespaces)");
    for (tool, pkg) in [("ip", "iproute2"), ("iptables", "iptables"), ("ping", "iputils-ping")] {
        require_tool(tool, pkg);
    }
    let name = format!("cli{}", std::process::id());
    let ns: Vec<String> = ["c", "r", "s"].iter().map(|s| format!("wbk-{name}-{s}")).collect();
    let up = netem_ok(&["up", "--rate", "100mbit", "--delay", "20ms", "--name", &name, "--cpu", "none"]);
    let _down = Down(name.clone());
    // Counters can be read as soon as `up` returns.
    let stats: serde_json::Value =
        serde_json::from_str(&netem_ok(&["stats", "--name", &name, "--json"])).expect("stats --json is JSON");
    assert!(stats["fwd"]["model"]["out_packets"].is_u64(), "{stats}");
    let pid: u32 = up
        .split("(pid ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("`up` names the emulator's pid: {up}"));
    assert!(alive(pid), "the emulator runs (pid {pid})");
    let list = namespaces();
    for n in &ns {
        assert!(list.contains(n.as_str()), "namespace {n} created: {list}");
    }
    let listed = netem_ok(&["list"]);
    assert!(listed.lines().any(|l| l.starts_with(&name) && l.contains("running")), "{listed}");

    // Through the path: 20 ms each way, so no round trip takes less than
    // 40 ms (a lower bound: a busy host only adds).
    let server = "10.77.2.2";
    let ping = netem_ok(&[
        "exec", "client", "--name", &name, "--", "ping", "-c", "3", "-i", "0.2", "-W", "5", server,
    ]);
    let rtts: Vec<f64> =
        ping.split("time=").skip(1).filter_map(|r| r.split_whitespace().next()?.parse().ok()).collect();
    assert_eq!(rtts.len(), 3, "three replies: {ping}");
    assert!(rtts.iter().all(|&r| r >= 40.0), "the path delays each way: {rtts:?}");
    let addrs = netem_ok(&["exec", "server", "--name", &name, "--", "ip", "-o", "-4", "addr"]);
    assert!(addrs.contains(server), "exec server runs in the server namespace: {addrs}");
    let out = netem(&["exec", "client", "--name", &name, "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "exec returns the command's exit code");

    // The counters are written every 500 ms: wait for the pings to show.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats: serde_json::Value = serde_json::from_str(&netem_ok(&["stats", "--name", &name, "--json"]))
            .expect("stats --json is JSON");
        let released: Vec<u64> = ["fwd", "back"]
            .iter()
            .map(|d| stats[d]["model"]["out_packets"].as_u64().unwrap_or_else(|| panic!("{stats}")))
            .collect();
        if released.iter().all(|&p| p >= 3) {
            break;
        }
        assert!(Instant::now() < deadline, "the pings crossed the emulator both ways: {stats}");
        std::thread::sleep(Duration::from_millis(100));
    }

    let down = netem_ok(&["down", "--name", &name]);
    assert!(down.contains(&format!("removed `{name}`")), "{down}");
    let list = namespaces();
    for n in &ns {
        assert!(!list.contains(n.as_str()), "namespace {n} removed: {list}");
    }
    let deadline = Instant::now() + TIMEOUT;
    while alive(pid) {
        assert!(Instant::now() < deadline, "the emulator (pid {pid}) still runs after down");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!netem_ok(&["list"]).contains(&name), "no longer listed");
    let out = netem(&["stats", "--name", &name]);
    assert!(!out.status.success(), "stats of a removed emulator fails");
}
