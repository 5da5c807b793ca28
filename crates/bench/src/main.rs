//! `wanblk-bench`: the demo and the benchmark suites, kept apart from the
//! product. It drives the `wanblk` binary as a subprocess (`wanblk copy`,
//! `wanblk target`), so the shipped `wanblk` links neither the test kit nor
//! the plotting stack.
//!
//! `wanblk` is looked up next to this program (both are built into the
//! same `target/release/`), or named with `--wanblk PATH`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

/// wanblk-bench: the demo and the benchmarks of wanblk on an emulated long-fat network.
#[derive(Debug, Parser)]
#[command(name = "wanblk-bench", version, about, long_about = None)]
struct Cli {
    /// The wanblk program to run [default: `wanblk` in this program's directory].
    #[arg(long, global = true, value_name = "PATH")]
    wanblk: Option<PathBuf>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    // Each subcommand's help is its arguments' doc comment.
    Demo(DemoArgs),
    Run(RunArgs),
}

/// Show wanblk on an emulated long-fat network: one session vs tuned N.
///
/// Creates three network namespaces (client, router, server) joined by veth
/// pairs, with wanblk's NFQUEUE emulator in the router (1 Gbit/s, 50 ms each
/// way, one BDP of queue; distribution-default socket buffers 6 MB / 4 MB),
/// starts the embedded NBD target in the server namespace, measures the raw
/// link with iperf3, then copies from the target with one connection and
/// with `--connections auto`. Prints a table and writes a plot of goodput
/// and N over time. Everything it created is removed when it ends.
///
/// Needs root for the namespaces; without it the demo runs on loopback.
#[derive(Debug, clap::Args)]
struct DemoArgs {
    /// Bytes copied with --connections auto (K, M, G suffixes: binary).
    #[arg(long, default_value = "4G", value_parser = parse_size)]
    size: u64,
    /// Bytes copied with one connection.
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    single_size: u64,
    /// Bottleneck rate in Mbit/s.
    #[arg(long, default_value_t = 1000)]
    rate_mbps: u64,
    /// One-way delay in milliseconds.
    #[arg(long, default_value_t = 50.0)]
    delay_ms: f64,
    /// Directory for the plot and the samples CSV.
    #[arg(long, default_value = "wanblk-demo")]
    out: PathBuf,
}

/// Benchmark wanblk against nbdcopy and the raw link (quick, full, iscsi, loopback, frontend, tls, faults or share).
///
/// Each path is emulated by wanblk's own NFQUEUE emulator with the embedded
/// target behind it (reads from a random fill, writes dropped); on each
/// path the raw link (iperf3), wanblk with fixed N and with auto, and
/// libnbd's nbdcopy (its defaults and a sweep of -C/-T) run one after the
/// other. Writes runs.csv, tables.md and SVG/PNG plots to --out.
///
/// `quick` (one path, 1 Gbit/s, 50 ms one way, both directions, a path
/// change mid-copy, per-connection TCP_INFO) takes about 25 minutes;
/// `full` (the delay and bandwidth grids of the automatic parallelism
/// tuning paper with default and 512 KB socket buffers, loss with cubic and
/// bbr, two path changes) takes hours. `iscsi` (about 10 minutes) runs
/// wanblk's iSCSI initiator against tgtd in the server namespace: read
/// throughput vs READ command size at 16 ms one way with 1 MB buffers
/// (against the iSCSI-over-WAN paper's latency model) and iSCSI sessions
/// vs MC/S under `-C auto`. Needs root (and tgt for `iscsi`). `loopback` (a
/// minute, no root, no emulator) copies 1 GiB from `nbdkit pattern` over
/// TCP on 127.0.0.1 to null: with wanblk and with nbdcopy, interleaved,
/// and prints the ratio. `frontend` (about 30 minutes, root, nbdfuse and
/// fio) measures the block device front end as applications use it, at
/// 100 ms and 20 ms RTT: ext4 on a loop device over nbdfuse straight to the
/// remote, over nbdfuse to `wanblk serve`, and over `wanblk mount` (mkfs,
/// write + sync, cold read-back), `dd bs=10M` from the disk file, random
/// 4 KiB reads at queue depth 1 and 32, and memory vs --cache-size. `tls`
/// (about 10 minutes, root) measures what NBD over TLS costs on the quick
/// profile's path: the target in clear text and with `--tls require`, the
/// same copies against each (fixed N and `-C auto`, both directions):
/// goodput and CPU seconds per Gbit of client and target.
/// `faults` (about 10 minutes, root, nbdkit and tgt) copies 1 GiB across a
/// 500 Mbit/s, 25 ms path while a fault happens: nbdkit and tgtd killed and
/// restarted after 5 s and 30 s, blackouts of 5 s and 60 s, SIGINT at half
/// way and a rerun; a table of what the user saw, time lost and bytes sent
/// again. `share` (about 15 minutes, root, iperf3) shows how wanblk shares
/// a 1 Gbit/s, 50 ms path: alone, against 1 and 4 iperf3 flows, and 2 and
/// 4 copies started together, each with `--share fair` and `greedy`, and
/// 2 and 4 copies sharing the host's budget; alone with 64 KiB requests;
/// alone and 2 copies (each on its own, and on the host's budget) on the
/// same path with 0.01 % random loss and with bbr; a backup against one
/// flow without and with `--ensemble-pacing`: goodput of each party, N,
/// and Jain's fairness index between the parties and among each copy's
/// own sessions.
#[derive(Debug, clap::Args)]
struct RunArgs {
    /// `quick`, `full`, `iscsi`, `loopback`, `frontend`, `tls`, `faults` or `share`.
    #[arg(long, default_value = "quick", value_parser = ["quick", "full", "iscsi", "loopback", "frontend", "tls", "faults", "share"])]
    profile: String,
    /// Output directory [default: docs/results/PROFILE].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seconds each fixed-N run copies.
    #[arg(long, default_value_t = 10.0)]
    fixed_secs: f64,
    /// Seconds each whole-image run (auto, nbdcopy) copies at the path's
    /// measured iperf3 ceiling (at line rate for `iscsi`).
    #[arg(long, default_value_t = 24.0)]
    image_secs: f64,
    /// With `--profile quick`: run only these parts (comma-separated) of
    /// main, change; with `--profile full`: of
    /// main, delay, delay-capped, bandwidth, bandwidth-capped, loss,
    /// change; with `--profile frontend`: of mount, serve, direct (the
    /// three ways to the disk), memory, 100ms, 20ms (the paths); with
    /// `--profile share` (wanblk alone always runs): of flows, copies,
    /// small (64 KiB requests), loss, bbr (the extra paths), pacing
    /// [default: all].
    #[arg(long, value_delimiter = ',')]
    parts: Vec<String>,
    /// Fixed N values to run on every path (comma-separated), instead of
    /// the profile's (quick: 1-32, full: 1-128 by powers of two).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=1024))]
    fixed: Vec<u32>,
    /// With `--profile loopback`: copies per tool.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeats: u32,
}

fn parse_size(s: &str) -> Result<u64, String> {
    wanblk_netem::model::units::parse_size(s).map_err(|e| e.to_string())
}

/// The wanblk program: `given`, or `wanblk` in `own_dir`; checked to run
/// and to be wanblk.
fn locate_wanblk(given: Option<PathBuf>, own_dir: &Path) -> anyhow::Result<PathBuf> {
    let path = given.clone().unwrap_or_else(|| own_dir.join("wanblk"));
    if !path.is_file() {
        let hint = if given.is_some() {
            "check --wanblk".to_string()
        } else {
            format!(
                "build it with `cargo build --release -p wanblk` (it is looked up next to wanblk-bench, in {}), or name it with --wanblk PATH",
                own_dir.display()
            )
        };
        bail!("wanblk not found at {}: {hint}", path.display());
    }
    // Absolute, so it still resolves in the network namespaces' processes.
    let path = std::fs::canonicalize(&path).with_context(|| format!("resolving {}", path.display()))?;
    let out = Command::new(&path)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", path.display()))?;
    let version = String::from_utf8_lossy(&out.stdout);
    let first = version.lines().next().unwrap_or("").trim();
    if !out.status.success() || !first.starts_with("wanblk ") {
        bail!("{} does not look like wanblk (`--version` printed {first:?})", path.display());
    }
    Ok(path)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let own = std::env::current_exe().context("locating wanblk-bench itself")?;
    let own_dir = own.parent().context("wanblk-bench has no directory")?;
    let exe = locate_wanblk(cli.wanblk, own_dir)?;
    match cli.command {
        Cmd::Demo(a) => wanblk_bench::demo::run(
            &exe,
            &wanblk_bench::demo::DemoOptions {
                auto_bytes: a.size,
                single_bytes: a.single_size,
                out_dir: a.out,
                rate_mbps: a.rate_mbps,
                delay_ms: a.delay_ms,
            },
        ),
        Cmd::Run(a) => run_suite(&exe, a),
    }
}

fn run_suite(exe: &Path, args: RunArgs) -> anyhow::Result<()> {
    let out = |name: &str| args.out.clone().unwrap_or_else(|| PathBuf::from("docs/results").join(name));
    match args.profile.as_str() {
        "loopback" => wanblk_bench::loopback::run(
            exe,
            &wanblk_bench::loopback::LoopbackOptions {
                out_dir: out("loopback"),
                size: 1 << 30,
                repeats: args.repeats,
            },
        ),
        "frontend" => wanblk_bench::frontend::run(
            exe,
            &wanblk_bench::frontend::FrontendOptions {
                out_dir: out("frontend"),
                delays_ms: vec![50.0, 10.0],
                file_bytes: 256 << 20,
                dd_bytes: 1 << 30,
                fio_secs: 15,
                step_limit_s: 60,
                cache_sizes: vec![64 << 20, 256 << 20, 1 << 30],
                parts: args.parts.clone(),
            },
        ),
        "faults" => wanblk_bench::faults::run(
            exe,
            &wanblk_bench::faults::FaultsOptions {
                out_dir: out("faults"),
                size: 1 << 30,
                rate_mbps: 500,
                delay_ms: 25.0,
            },
        ),
        "share" => {
            wanblk_bench::parts::check(&args.parts, &wanblk_bench::share::SHARE_PARTS, "share")?;
            let part = |name: &str| wanblk_bench::parts::selects(&args.parts, name);
            wanblk_bench::share::run(
                exe,
                &wanblk_bench::share::ShareOptions {
                    out_dir: out("share"),
                    size: 2 << 30,
                    rate_mbps: 1000,
                    delay_ms: 50.0,
                    modes: vec!["fair".into(), "greedy".into()],
                    flows: if part("flows") { vec![1, 4] } else { Vec::new() },
                    copies: if part("copies") { vec![2, 4] } else { Vec::new() },
                    small_requests: part("small").then(|| "64K".into()),
                    loss: part("loss").then_some(0.0001),
                    other_congestion: part("bbr").then(|| "bbr".into()),
                    ensemble_pacing: part("pacing"),
                },
            )
        }
        "tls" => wanblk_bench::tls::run(
            exe,
            &wanblk_bench::tls::TlsBenchOptions {
                out_dir: out("tls"),
                fixed_secs: args.fixed_secs,
                image_secs: args.image_secs,
                fixed: if args.fixed.is_empty() { vec![1, 8, 32] } else { args.fixed.clone() },
            },
        ),
        "iscsi" => wanblk_bench::iscsi::run(
            exe,
            &wanblk_bench::iscsi::IscsiBenchOptions {
                out_dir: out("iscsi"),
                fixed_secs: args.fixed_secs,
                image_secs: args.image_secs,
            },
        ),
        profile => {
            anyhow::ensure!(
                args.parts.is_empty() || profile == "full" || profile == "quick",
                "--parts selects parts of `--profile quick`, `full`, `frontend` or `share`"
            );
            let level = if profile == "full" {
                wanblk_bench::suite::Level::Full
            } else {
                wanblk_bench::suite::Level::Quick
            };
            wanblk_bench::suite::run(
                exe,
                &wanblk_bench::suite::SuiteOptions {
                    level,
                    out_dir: out(profile),
                    fixed_secs: args.fixed_secs,
                    image_secs: args.image_secs,
                    parts: args.parts.clone(),
                    fixed: (!args.fixed.is_empty()).then(|| args.fixed.clone()),
                },
            )
        }
    }
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wanblk-bench: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn missing_wanblk_says_how_to_build_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = locate_wanblk(None, dir.path()).unwrap_err().to_string();
        assert!(e.contains("cargo build --release -p wanblk"), "{e}");
        let e = locate_wanblk(Some(dir.path().join("nope")), dir.path()).unwrap_err().to_string();
        assert!(e.contains("nope") && e.contains("--wanblk"), "{e}");
    }

    #[test]
    fn another_program_is_not_taken_for_wanblk() {
        let e = locate_wanblk(Some(PathBuf::from("/bin/true")), Path::new("/")).unwrap_err().to_string();
        assert!(e.contains("does not look like wanblk"), "{e}");
    }
}
