//! `wanblk-bench demo`: the embedded target behind an emulated long-fat path
//! (1 Gbit/s, 50 ms each way, one BDP of queue, distribution-default socket
//! buffers), the raw link measured by iperf3, then one session against
//! `--connections auto`, with a table and a plot of goodput and N over time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;

use crate::path::{BenchPath, Direction, PathSpec, Run};
use crate::plot::{Chart, Series};

/// Demo settings.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Bytes copied with `--connections auto`.
    pub auto_bytes: u64,
    /// Bytes copied with one connection (it is slow: keep it smaller).
    pub single_bytes: u64,
    /// Where the plot and CSV go.
    pub out_dir: PathBuf,
    /// Bottleneck rate, Mbit/s.
    pub rate_mbps: u64,
    /// One-way delay, ms.
    pub delay_ms: f64,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            auto_bytes: 4 << 30,
            single_bytes: 1 << 30,
            out_dir: PathBuf::from("wanblk-demo"),
            rate_mbps: 1000,
            delay_ms: 50.0,
        }
    }
}

/// Why the emulated WAN cannot run here, if it cannot.
fn wan_unavailable() -> Option<String> {
    if !Path::new("/proc/self/ns/net").exists() {
        return Some("this kernel has no network namespaces".into());
    }
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if uid.as_deref() != Some("0") {
        return Some("the emulated WAN needs root (network namespaces, iptables, NFQUEUE)".into());
    }
    None
}

fn table(runs: &[(String, Run)], ceiling: Option<f64>) -> String {
    let mut t = String::new();
    t += "| run | goodput (Mbit/s) | of the link ceiling | final N | converged after | client CPU s / Gbit |\n";
    t += "|---|---:|---:|---:|---:|---:|\n";
    for (label, r) in runs {
        let of = ceiling.map_or("-".to_string(), |c| format!("{:.0} %", 100.0 * r.goodput_mbps / c));
        let conv = r.converge_s.map_or("-".to_string(), |s| format!("{s:.1} s"));
        let n = r.connections.map_or("-".to_string(), |n| n.to_string());
        let cpu =
            r.client_cpu_s.map_or("-".to_string(), |c| format!("{:.2}", c / (r.bytes as f64 * 8.0 / 1e9)));
        t += &format!("| {label} | {:.0} | {of} | {n} | {conv} | {cpu} |\n", r.goodput_mbps);
    }
    t
}

fn samples(r: &Run) -> Vec<(f64, f64, f64)> {
    let Some(report) = &r.report else { return Vec::new() };
    report.samples.iter().map(|s| (s.t_s, s.goodput_mbps, s.n as f64)).collect()
}

fn write_outputs(
    opts: &DemoOptions,
    runs: &[(String, Run)],
    ceiling: Option<f64>,
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(&opts.out_dir).with_context(|| format!("creating {}", opts.out_dir.display()))?;
    let mut csv = String::from("run,t_s,n,goodput_mbps\n");
    let mut series = Vec::new();
    let mut right = Vec::new();
    for (label, r) in runs {
        let s = samples(r);
        for (t, g, n) in &s {
            csv += &format!("{label},{t:.3},{n},{g:.1}\n");
        }
        series.push(Series {
            markers: false,
            ..Series::new(format!("{label} goodput"), s.iter().map(|p| (p.0, p.1)).collect())
        });
        right.push(Series::new(format!("{label} N"), s.iter().map(|p| (p.0, p.2)).collect()));
    }
    if let (Some(c), Some(tmax)) =
        (ceiling, series.iter().flat_map(|s| s.points.last()).map(|p| p.0).reduce(f64::max))
    {
        series.push(Series::reference("iperf3 ceiling", vec![(0.0, c), (tmax, c)]));
    }
    std::fs::write(opts.out_dir.join("samples.csv"), csv)?;
    let stem = opts.out_dir.join("goodput");
    crate::plot::write(
        &Chart {
            title: "wanblk-bench demo: goodput and active sessions over time".into(),
            x_label: "seconds".into(),
            y_label: "goodput (Mbit/s)".into(),
            log_x: false,
            series,
            right: Some(("active sessions N".into(), right)),
        },
        &stem,
    )
    .map_err(anyhow::Error::msg)?;
    Ok(stem.with_extension("png"))
}

/// Runs the demo; prints progress and the table to stdout.
///
/// # Errors
/// A failing tool or the emulator.
pub fn run(exe: &Path, opts: &DemoOptions) -> anyhow::Result<()> {
    let mut runs = Vec::new();
    let ceiling;
    match wan_unavailable() {
        None => {
            let spec = PathSpec::new(opts.rate_mbps, opts.delay_ms);
            println!(
                "wanblk-bench demo: emulated path {} Mbit/s, {} ms one way ({} ms RTT), queue 1 BDP, socket buffers 6 MB / 4 MB, cubic",
                opts.rate_mbps,
                opts.delay_ms,
                2.0 * opts.delay_ms
            );
            let path = BenchPath::start(&spec, exe, opts.auto_bytes.max(opts.single_bytes))?;
            println!("  target {} (in the server namespace)", path.uri());
            println!("  measuring the raw link: iperf3, 8 flows, 8 s ...");
            let c = path.iperf3(8, 8, Direction::Restore)?;
            println!("    {:.0} Mbit/s", c.goodput_mbps);
            ceiling = Some(c.goodput_mbps);
            runs.push(("iperf3 -P 8 (ceiling)".to_string(), c));
            let single = format!("{}", opts.single_bytes);
            println!("  wanblk copy --connections 1, {} MiB ...", opts.single_bytes >> 20);
            let r = path.wanblk(Direction::Restore, &["-C", "1", "--length", &single])?;
            println!("    {:.0} Mbit/s", r.goodput_mbps);
            runs.push(("wanblk -C 1".to_string(), r));
            let auto = format!("{}", opts.auto_bytes);
            println!("  wanblk copy --connections auto, {} MiB ...", opts.auto_bytes >> 20);
            let r = path.wanblk(Direction::Restore, &["-C", "auto", "--length", &auto])?;
            println!("    {:.0} Mbit/s with N = {}", r.goodput_mbps, r.connections.unwrap_or(0));
            runs.push(("wanblk -C auto".to_string(), r));
            drop(path);
        }
        Some(why) => {
            println!(
                "wanblk-bench demo: {why}; falling back to loopback (no emulated WAN: figures are local, not long-fat)"
            );
            ceiling = None;
            runs.extend(loopback(exe, opts)?);
        }
    }
    println!();
    print!("{}", table(&runs, ceiling));
    let png = write_outputs(opts, &runs, ceiling)?;
    println!();
    println!("plot: {} (and .svg); samples: {}", png.display(), opts.out_dir.join("samples.csv").display());
    Ok(())
}

/// Without root: the target on 127.0.0.1, same two copies.
fn loopback(exe: &Path, opts: &DemoOptions) -> anyhow::Result<Vec<(String, Run)>> {
    let mut cmd = Command::new(exe);
    cmd.args(["target", "--size", &opts.auto_bytes.to_string(), "--fill", "random:1", "--discard-writes"])
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped());
    wanblk_sys::process::terminate_with_parent(&mut cmd);
    let mut target = cmd.spawn().context("starting wanblk target")?;
    let copies = |target: &mut std::process::Child| -> anyhow::Result<Vec<(String, Run)>> {
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(target.stdout.take().context("target stdout")?),
            &mut line,
        )?;
        let uri = line.trim().to_string();
        let mut out = Vec::new();
        let work = tempfile::tempdir()?;
        for (label, conns, bytes) in
            [("wanblk -C 1", "1", opts.single_bytes), ("wanblk -C auto", "auto", opts.auto_bytes)]
        {
            let report = work.path().join("r.json");
            let st = Command::new(exe)
                .args(["copy", &uri, "null:", "-C", conns, "--length", &bytes.to_string(), "--report"])
                .arg(&report)
                .status()?;
            anyhow::ensure!(st.success(), "{label} failed");
            let r = crate::report::read(&report, label)?;
            out.push((label.to_string(), Run::from_report(label.to_string(), Direction::Restore, r, None)));
        }
        Ok(out)
    };
    let out = copies(&mut target);
    let _ = wanblk_sys::process::signal(target.id(), wanblk_sys::process::SIGTERM);
    let _ = wait_timeout(&mut target, Duration::from_secs(5));
    out
}

fn wait_timeout(child: &mut std::process::Child, d: Duration) -> std::io::Result<()> {
    let deadline = std::time::Instant::now() + d;
    while std::time::Instant::now() < deadline {
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill()?;
    child.wait().map(|_| ())
}
