//! How closely the emulator follows its settings, measured at the
//! receiver: the figures of docs/netem.md's Accuracy table. The tests
//! (`tests/udp.rs`, `tests/profile.rs`, `tests/throughput.rs`) only check
//! bounds that hold on a busy machine; this measures how close it comes.
//! Needs root and iperf3.
//!
//! ```text
//! flock /work/bench.lock cargo run -p wanblk-netem --release --example accuracy -- [--repeats 3]
//! ```
//!
//! Prints a Markdown table (median, min and max of the runs) and the load
//! average before and after.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use wanblk_netem::bench::{IperfRun, IperfServer, iperf3};
use wanblk_netem::{Profile, Scenario, Side, SysctlProfile};
use wanblk_testkit::Peer;

/// Layer-2 bytes (IP length + 14) received by `dev` in `side`'s namespace.
fn rx_bytes(sc: &Scenario, side: Side, dev: &str) -> anyhow::Result<u64> {
    let mut c = Command::new("ip");
    c.args(["-s", "-j", "link", "show", "dev", dev]);
    sc.enter(side, &mut c)?;
    let out = wanblk_testkit::output_within(&mut c, Duration::from_secs(20))?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("ip -j output")?;
    v[0]["stats64"]["rx"]["bytes"].as_u64().context("no rx bytes in ip's output")
}

/// The loop's clock (s) around a receiver counter read: the read happened
/// between the two stamps; the midpoint is used.
fn stamped_rx(sc: &Scenario) -> anyhow::Result<(f64, u64)> {
    let a = sc.stats()?.elapsed_ns;
    let rx = rx_bytes(sc, Side::Server, "s0")?;
    let b = sc.stats()?.elapsed_ns;
    Ok(((a + b) as f64 / 2e9, rx))
}

fn udp_client(sc: &Scenario, bps: &str, seconds: u32) -> anyhow::Result<Peer> {
    let child = sc.spawn(
        Side::Client,
        Command::new("iperf3")
            .args([
                "-c",
                &sc.server_addr().to_string(),
                "-u",
                "-b",
                bps,
                "-l",
                "1400",
                "-t",
                &seconds.to_string(),
            ])
            .stdout(Stdio::null()),
    )?;
    Ok(Peer::adopt("iperf3 -c", child))
}

/// A UDP flood at 300 Mbit/s into 200 Mbit/s: the rate the server's
/// interface receives over 4 s of steady state, as a fraction of the rate.
fn udp_flood() -> anyhow::Result<f64> {
    let rate = 200_000_000.0;
    let sc = Scenario::builder()
        .rate_bps(rate as u64)
        .delay(Duration::from_millis(10))
        .queue_packets(200)
        .sysctl_profile(SysctlProfile::Default)
        .start()?;
    let _srv = IperfServer::start(&sc)?;
    let mut client = udp_client(&sc, "300M", 7)?;
    std::thread::sleep(Duration::from_millis(1500));
    let (t0, b0) = stamped_rx(&sc)?;
    std::thread::sleep(Duration::from_secs(4));
    let (t1, b1) = stamped_rx(&sc)?;
    client.wait_within(Duration::from_secs(60));
    Ok((b1 - b0) as f64 * 8.0 / (t1 - t0) / rate)
}

/// `at 2s rate 50mbit`, `at 4s blackout 1s` on a 100 Mbit/s path under a
/// 150 Mbit/s UDP flood, started once the flood flows: the rates the
/// server's interface receives in each phase (loop-clock windows), as
/// fractions of the phase's rate (the blackout's as Mbit/s).
fn profile() -> anyhow::Result<[f64; 4]> {
    let mut sc = Scenario::builder()
        .rate_bps(100_000_000)
        .delay(Duration::from_millis(5))
        .queue_packets(100)
        .start()?;
    let _srv = IperfServer::start(&sc)?;
    let mut client = udp_client(&sc, "150M", 30)?;
    let (_, rx0) = stamped_rx(&sc)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while stamped_rx(&sc)?.1 < rx0 + (1 << 20) {
        if Instant::now() > deadline {
            bail!("no traffic within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    sc.set_profile(Profile::parse("at 2s rate 50mbit\nat 4s blackout 1s\n")?);
    let origin = sc.stats()?.elapsed_ns as f64 / 1e9;
    let mut out = [0.0; 4];
    for (i, (a, b, rate)) in
        [(0.3, 1.8, 100e6), (2.3, 3.8, 50e6), (4.2, 4.8, 1e6), (5.3, 6.8, 50e6)].into_iter().enumerate()
    {
        let wait_until = |t: f64| -> anyhow::Result<()> {
            while sc.stats()?.elapsed_ns as f64 / 1e9 - origin < t {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(())
        };
        wait_until(a)?;
        let (t0, b0) = stamped_rx(&sc)?;
        wait_until(b)?;
        let (t1, b1) = stamped_rx(&sc)?;
        out[i] = (b1 - b0) as f64 * 8.0 / (t1 - t0) / rate;
    }
    client.stop();
    Ok(out)
}

/// 4 cubic flows, 20 ms one way, BDP buffers: iperf3's goodput as a
/// fraction of the rate.
fn tcp(rate_bps: u64) -> anyhow::Result<f64> {
    let sc = Scenario::builder()
        .rate_bps(rate_bps)
        .delay(Duration::from_millis(20))
        .queue_bdp(1.0)
        .sysctl_profile(SysctlProfile::Bdp)
        .start()?;
    let _srv = IperfServer::start(&sc)?;
    let r = iperf3(
        &sc,
        &IperfRun { flows: 4, cc: Some("cubic".into()), seconds: 8, omit: 3, ..IperfRun::default() },
    )?;
    Ok(r.received_bps / rate_bps as f64)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Median, min and max.
fn summary(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() -> anyhow::Result<()> {
    let mut repeats = 3;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--repeats" => repeats = args.next().context("--repeats N")?.parse()?,
            other => bail!("unknown argument {other}"),
        }
    }
    let load_before = load();
    let mut rows: Vec<(String, Vec<f64>, &str)> = Vec::new();
    let mut udp = Vec::new();
    let mut phases = vec![Vec::new(); 4];
    let (mut t200, mut t1g) = (Vec::new(), Vec::new());
    for run in 0..repeats {
        eprintln!("run {}/{repeats}", run + 1);
        udp.push(udp_flood()?);
        for (p, v) in phases.iter_mut().zip(profile()?) {
            p.push(v);
        }
        t200.push(tcp(200_000_000)?);
        t1g.push(tcp(1_000_000_000)?);
    }
    rows.push(("UDP flood 300 into 200 Mbit/s, received on the wire".into(), udp, "of the rate"));
    let names = ["100 Mbit/s", "after `rate 50mbit`", "during `blackout 1s`", "after the blackout"];
    for (name, v) in names.into_iter().zip(phases) {
        let unit = if name.starts_with("during") { "Mbit/s" } else { "of the rate" };
        rows.push((format!("profile under a 150 Mbit/s UDP flood: {name}"), v, unit));
    }
    rows.push(("TCP, 4 cubic flows, 20 ms, BDP buffers, 200 Mbit/s".into(), t200, "of the rate"));
    rows.push(("TCP, 4 cubic flows, 20 ms, BDP buffers, 1 Gbit/s".into(), t1g, "of the rate"));
    println!("| what | median | min..max | unit |");
    println!("|---|---|---|---|");
    for (what, v, unit) in rows {
        let (med, lo, hi) = summary(v);
        if unit == "Mbit/s" {
            println!("| {what} | {med:.3} | {lo:.3}..{hi:.3} | {unit} |");
        } else {
            println!("| {what} | {:.2}% | {:.2}..{:.2}% | {unit} |", med * 100.0, lo * 100.0, hi * 100.0);
        }
    }
    println!("\n{repeats} runs each; load average {load_before} before, {} after", load());
    Ok(())
}
