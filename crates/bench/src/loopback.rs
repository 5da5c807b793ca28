//! The loopback benchmark: wanblk and nbdcopy reading the same nbdkit
//! export over TCP on 127.0.0.1 into `null:`, side by side, repeated and
//! interleaved, with the ratio of their medians. No emulator and no root:
//! on loopback there is no window to fill, so this measures the cost of the
//! client itself (protocol handling, copies, scheduling) against libnbd's.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use wanblk_testkit::{Peer, free_port, wait_for_tcp, which};

use crate::plot::{Chart, Series};

/// Settings of the loopback benchmark.
#[derive(Debug, Clone)]
pub struct LoopbackOptions {
    /// Output directory (runs.csv, tables.md, plot).
    pub out_dir: PathBuf,
    /// Bytes each copy reads.
    pub size: u64,
    /// Copies per tool.
    pub repeats: u32,
}

/// One copy.
#[derive(Debug, Clone)]
struct Copy {
    tool: &'static str,
    repeat: u32,
    seconds: f64,
    cpu_s: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Runs the benchmark and writes its files.
///
/// # Errors
/// nbdkit or nbdcopy missing, a copy failing, or the output not writable.
pub fn run(exe: &Path, opts: &LoopbackOptions) -> anyhow::Result<()> {
    for (tool, package) in [("nbdkit", "nbdkit"), ("nbdcopy", "libnbd-bin")] {
        if which(tool).is_none() {
            bail!("{tool} is not installed (apt-get install {package}; scripts/setup.sh installs it)");
        }
    }
    anyhow::ensure!(opts.repeats > 0, "--repeats must be at least 1");
    std::fs::create_dir_all(&opts.out_dir).with_context(|| format!("creating {}", opts.out_dir.display()))?;
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut nbdkit = Command::new("nbdkit");
    nbdkit
        .args(["-f", "--exit-with-parent", "-r", "-i", "127.0.0.1", "-p", &port.to_string()])
        .args(["pattern", &opts.size.to_string()])
        .stdout(Stdio::null());
    wanblk_sys::process::terminate_with_parent(&mut nbdkit);
    let mut server = Peer::spawn("nbdkit", &mut nbdkit);
    wait_for_tcp(addr, Duration::from_secs(10));
    let uri = format!("nbd://127.0.0.1:{port}/");
    println!(
        "loopback: {} MiB of `nbdkit pattern` over TCP 127.0.0.1 to null:, {} copies per tool, interleaved",
        opts.size >> 20,
        opts.repeats
    );

    type Tool = (&'static str, fn(&Path, &str) -> Command);
    let tools: [Tool; 4] = [
        ("wanblk (defaults: -C auto)", |exe, uri| {
            let mut c = Command::new(exe);
            c.args(["copy", uri, "null:", "--no-progress"]);
            c
        }),
        ("nbdcopy (defaults)", |_, uri| {
            let mut c = Command::new("nbdcopy");
            c.args([uri, "null:"]);
            c
        }),
        ("wanblk -C 1", |exe, uri| {
            let mut c = Command::new(exe);
            c.args(["copy", uri, "null:", "--no-progress", "-C", "1"]);
            c
        }),
        ("nbdcopy -C 1 -T 1", |_, uri| {
            let mut c = Command::new("nbdcopy");
            c.args(["--connections=1", "--threads=1", uri, "null:"]);
            c
        }),
    ];
    let children_cpu = crate::path::children_cpu_s;
    let mut copies = Vec::new();
    for repeat in 1..=opts.repeats {
        for (name, make) in &tools {
            let mut cmd = make(exe, &uri);
            cmd.stdout(Stdio::null()).stderr(Stdio::piped());
            let (cpu0, t0) = (children_cpu(), Instant::now());
            let out = cmd.output().with_context(|| format!("running {name}"))?;
            let seconds = t0.elapsed().as_secs_f64();
            if !out.status.success() {
                bail!("{name} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
            }
            let c = Copy { tool: name, repeat, seconds, cpu_s: children_cpu() - cpu0 };
            println!(
                "  {:<28} run {repeat}: {:>7.0} Mbit/s ({:.2} s, {:.2} CPU s)",
                name,
                opts.size as f64 * 8.0 / seconds / 1e6,
                seconds,
                c.cpu_s
            );
            copies.push(c);
        }
    }
    server.stop();

    let mbps = |s: f64| opts.size as f64 * 8.0 / s / 1e6;
    let mut csv = String::from("tool,repeat,bytes,seconds,goodput_mbps,cpu_s\n");
    for c in &copies {
        let _ = writeln!(
            csv,
            "{},{},{},{:.3},{:.1},{:.3}",
            c.tool,
            c.repeat,
            opts.size,
            c.seconds,
            mbps(c.seconds),
            c.cpu_s
        );
    }
    std::fs::write(opts.out_dir.join("runs.csv"), csv)?;

    let med =
        |tool: &str| median(copies.iter().filter(|c| c.tool == tool).map(|c| mbps(c.seconds)).collect());
    let med_cpu = |tool: &str| {
        let gbit = opts.size as f64 * 8.0 / 1e9;
        median(copies.iter().filter(|c| c.tool == tool).map(|c| c.cpu_s / gbit).collect())
    };
    let mut md = format!(
        "# Loopback: wanblk vs nbdcopy (generated by `wanblk-bench run --profile loopback`)\n\n\
         {} MiB of `nbdkit pattern` (multi-conn; cheap to serve and without all-zero blocks, so nothing is skipped as sparse) over TCP on 127.0.0.1 into `null:`; {} copies per tool, \
         interleaved; wall time of the whole process (start-up included); CPU is the process's user + \
         system time. Machine: {} CPU(s).\n\n\
         | tool | median Mbit/s | median CPU s/Gbit | runs (Mbit/s) |\n|---|---:|---:|---|\n",
        opts.size >> 20,
        opts.repeats,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for (name, _) in &tools {
        let runs: Vec<String> =
            copies.iter().filter(|c| c.tool == *name).map(|c| format!("{:.0}", mbps(c.seconds))).collect();
        let _ = writeln!(md, "| {name} | {:.0} | {:.3} | {} |", med(name), med_cpu(name), runs.join(", "));
    }
    let ratio = med(tools[0].0) / med(tools[1].0);
    let ratio1 = med(tools[2].0) / med(tools[3].0);
    let _ = writeln!(
        md,
        "\nwanblk / nbdcopy, defaults: **{ratio:.2}x**; one connection each: **{ratio1:.2}x** (target: >= 1).\n"
    );
    std::fs::write(opts.out_dir.join("tables.md"), &md)?;
    let series = tools
        .iter()
        .map(|(name, _)| {
            let pts =
                copies.iter().filter(|c| c.tool == *name).map(|c| (f64::from(c.repeat), mbps(c.seconds)));
            Series::new(*name, pts.collect())
        })
        .collect();
    crate::plot::write(
        &Chart {
            title: format!("loopback, {} MiB from nbdkit to null:", opts.size >> 20),
            x_label: "copy".into(),
            y_label: "goodput (Mbit/s)".into(),
            log_x: false,
            series,
            right: None,
        },
        &opts.out_dir.join("loopback"),
    )
    .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
    println!("\nwanblk / nbdcopy: {ratio:.2}x with defaults, {ratio1:.2}x with one connection each");
    println!("wrote {}/runs.csv, tables.md and loopback.svg/png", opts.out_dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }
}
