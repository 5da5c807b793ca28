//! `wanblk bench`.

use std::path::PathBuf;

/// Run the benchmark suite on the emulated long-fat network.
///
/// Each path is emulated by wanblk's own NFQUEUE emulator with the embedded
/// target behind it (reads from a random fill, writes dropped); on each
/// path the raw link (iperf3), wanblk with fixed N and with auto, and
/// libnbd's nbdcopy (its defaults and a sweep of -C/-T) run one after the
/// other. Writes runs.csv, tables.md and SVG/PNG plots to --out.
///
/// `quick` (one path, 1 Gbit/s, 50 ms one way, both directions, a path
/// change mid-copy, per-connection TCP_INFO) takes about 25 minutes;
/// `full` (the seeds' delay and bandwidth grids with default and 512 KB
/// socket buffers, loss with cubic and bbr, two path changes) takes hours.
/// `iscsi` (about 10 minutes) runs wanblk's iSCSI initiator against tgtd
/// in the server namespace: seed 001's Fig 9 (read throughput vs READ
/// command size at 16 ms one way with 1 MB buffers, against the seed's
/// latency model) and iSCSI sessions vs MC/S under `-C auto`.
/// Needs root (and tgt for `iscsi`). `loopback` (a minute, no root, no
/// emulator) copies 1 GiB from `nbdkit pattern` over TCP on 127.0.0.1 to
/// null: with wanblk and with nbdcopy, interleaved, and prints the ratio.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// `quick`, `full`, `iscsi` or `loopback`.
    #[arg(long, default_value = "quick", value_parser = ["quick", "full", "iscsi", "loopback"])]
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
    /// With `--profile full`: run only these parts (comma-separated) of
    /// main, delay, delay-capped, bandwidth, bandwidth-capped, loss,
    /// change [default: all].
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

/// Runs `wanblk bench`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    if args.profile == "loopback" {
        return wanblk_bench::loopback::run(
            &exe,
            &wanblk_bench::loopback::LoopbackOptions {
                out_dir: args.out.unwrap_or_else(|| PathBuf::from("docs/results/loopback")),
                size: 1 << 30,
                repeats: args.repeats,
            },
        );
    }
    if args.profile == "iscsi" {
        return wanblk_bench::iscsi::run(
            &exe,
            &wanblk_bench::iscsi::IscsiBenchOptions {
                out_dir: args.out.unwrap_or_else(|| PathBuf::from("docs/results/iscsi")),
                fixed_secs: args.fixed_secs,
                image_secs: args.image_secs,
            },
        );
    }
    anyhow::ensure!(
        args.parts.is_empty() || args.profile == "full",
        "--parts selects parts of `--profile full`"
    );
    let level = if args.profile == "full" {
        wanblk_bench::suite::Level::Full
    } else {
        wanblk_bench::suite::Level::Quick
    };
    wanblk_bench::suite::run(
        &exe,
        &wanblk_bench::suite::SuiteOptions {
            level,
            out_dir: args.out.unwrap_or_else(|| PathBuf::from("docs/results/quick")),
            fixed_secs: args.fixed_secs,
            image_secs: args.image_secs,
            parts: args.parts,
            fixed: (!args.fixed.is_empty()).then_some(args.fixed),
        },
    )
}
