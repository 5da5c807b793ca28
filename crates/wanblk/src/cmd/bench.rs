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
/// change mid-copy, per-connection TCP_INFO) takes about 10 minutes;
/// `full` (the seeds' delay and bandwidth grids with default and 512 KB
/// socket buffers, loss with cubic and bbr, two path changes) takes hours.
/// Needs root.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// `quick` or `full`.
    #[arg(long, default_value = "quick", value_parser = ["quick", "full"])]
    profile: String,
    /// Output directory.
    #[arg(long, default_value = "docs/results/quick")]
    out: PathBuf,
    /// Seconds each fixed-N run copies.
    #[arg(long, default_value_t = 10.0)]
    fixed_secs: f64,
    /// Seconds of line rate each whole-image run (auto, nbdcopy) copies.
    #[arg(long, default_value_t = 12.0)]
    image_secs: f64,
}

/// Runs `wanblk bench`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let level = if args.profile == "full" {
        wanblk_bench::suite::Level::Full
    } else {
        wanblk_bench::suite::Level::Quick
    };
    wanblk_bench::suite::run(
        &exe,
        &wanblk_bench::suite::SuiteOptions {
            level,
            out_dir: args.out,
            fixed_secs: args.fixed_secs,
            image_secs: args.image_secs,
        },
    )
}
