//! `wanblk demo`.

use std::path::PathBuf;

use crate::units::parse_size;

/// Show wanblk on an emulated long-fat network it sets up itself.
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
pub(crate) struct Args {
    /// Bytes copied with --connections auto.
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

/// Runs `wanblk demo`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let opts = wanblk_bench::demo::DemoOptions {
        auto_bytes: args.size,
        single_bytes: args.single_size,
        out_dir: args.out,
        rate_mbps: args.rate_mbps,
        delay_ms: args.delay_ms,
    };
    wanblk_bench::demo::run(&exe, &opts)
}
