//! `wanblk copy SRC DST`: backup, restore and target-to-target copies over
//! N parallel sessions, fixed or tuned automatically.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::control::{self, ControlState};
use wanblk_blockdev::pool::Hedge;
use wanblk_copy::{CopyOptions, Progress, Report, Sample};

use crate::cmd::session::SessionArgs;
use crate::location::{Location, open_destination, open_source};
use crate::units::parse_size;

/// Copy a disk or image between any two locations.
///
/// Locations: `nbd://host[:port]/export`, `nbd+unix:///export?socket=PATH`,
/// `iscsi://[user[%password]@]host[:port]/target-iqn/lun`, a local file or
/// block device, `null:` (a sink; `null:SIZE` reads as zeroes), or
/// `random:SIZE[:SEED]` (a source of pseudo-random data, for benchmarks).
///
/// Network stores are reached over N parallel sessions. The copy is split
/// into requests of `--request-size`; every session keeps `--requests` of
/// them in flight and takes the next one as soon as one completes, so a slow
/// connection never holds the others back.
///
/// A new destination file is written as FILE.wanblk-part and renamed when
/// the copy completes; if the copy fails, the .wanblk-part file holds exactly
/// the pieces that were copied and the error says how far it got. An
/// existing destination (file, device, NBD or iSCSI) is written in place.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Where to read from.
    src: String,
    /// Where to write to.
    dst: String,

    #[command(flatten)]
    session: SessionArgs,

    /// Copy only the first SIZE bytes of the source (K, M, G suffixes).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    length: Option<u64>,

    /// Stop issuing requests after this many seconds and finish with what
    /// is done (a time-boxed copy for benchmarks; the report says
    /// `"complete": false` and a new destination file keeps its
    /// .wanblk-part name).
    #[arg(long, value_name = "SECS")]
    stop_after: Option<f64>,

    /// Flush the destination to stable storage at the end.
    #[arg(long)]
    flush: bool,

    /// Compute the sha256 of the whole image while copying, in offset order
    /// (holes hashed as zeroes), so it equals `sha256sum` of a raw image of
    /// the source. Printed and written to the report.
    #[arg(long)]
    verify: bool,

    /// The destination already reads as zeroes: skip holes and zero blocks
    /// instead of zeroing them. Implied for a new file and for null:.
    #[arg(long)]
    destination_is_zero: bool,

    /// Copy every byte as data: no block status, no zero detection.
    #[arg(long)]
    no_sparse: bool,

    /// Write a JSON report (bytes, seconds, goodput, connections, samples,
    /// sha256, tuning) to FILE.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,

    /// Write per-connection TCP_INFO samples (cwnd, RTT, retransmits,
    /// unacknowledged and unsent bytes) as CSV to FILE, every 100 ms.
    #[arg(long, value_name = "FILE")]
    tcp_log: Option<PathBuf>,

    /// Do not show a progress bar (it only shows on a terminal anyway).
    #[arg(long)]
    no_progress: bool,
}

/// Runs `wanblk copy`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(copy(args))
}

async fn copy(args: Args) -> anyhow::Result<()> {
    let src_loc = Location::parse(&args.src).context("source")?;
    let dst_loc = Location::parse(&args.dst).context("destination")?;
    // A copy writes every range exactly once, so a straggling write may be
    // duplicated on an idle session as safely as a read.
    let net = args.session.net_options(Hedge::ReadsAndWrites);
    let started = Instant::now();
    let cpu_start = wanblk_sys::process::self_cpu_time().unwrap_or_default();
    let src = open_source(&src_loc, &net).await?;
    let size = args.length.map_or(src.endpoint.size(), |l| l.min(src.endpoint.size()));
    let dst = open_destination(&dst_loc, size, &net).await?;
    let mut notes: Vec<String> = src.notes.iter().chain(&dst.notes).cloned().collect();
    for n in &notes {
        eprintln!("wanblk: note: {n}");
    }
    let pools: Vec<_> = [&src.pool, &dst.pool].into_iter().flatten().cloned().collect();
    if pools.is_empty() && args.session.is_auto() {
        tracing::info!("no network store: nothing to tune");
    }

    let progress = Arc::new(Progress::default());
    progress.total.store(size, Ordering::Relaxed);
    let state = Arc::new(ControlState::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let control_cfg = args.session.controller_config(!pools.is_empty());
    let controller = {
        let (pools, progress, state) = (pools.clone(), Arc::clone(&progress), Arc::clone(&state));
        tokio::spawn(async move {
            control::run(pools, move || progress.data.load(Ordering::Relaxed), control_cfg, state, stop_rx)
                .await
        })
    };
    let tcp_logger = args
        .tcp_log
        .as_ref()
        .map(|path| crate::tcplog::spawn(path.clone(), pools.clone(), started, stop_tx.subscribe()));
    let bar = {
        let state = Arc::clone(&state);
        wanblk_copy::progress::Bar::start(Arc::clone(&progress), !args.no_progress, move || state.current_n())
    };
    // Pieces match the largest request after the pools fitted it to the
    // servers' block sizes, so a piece is cut only when requests shrink.
    let request_size =
        pools.iter().map(|p| p.max_request_bytes()).min().unwrap_or(net.pool.max_request_bytes);
    let slots = {
        let pools = pools.clone();
        let depth = net.pool.max_depth;
        let piece = u64::from(request_size.max(1));
        move || {
            pools
                .iter()
                .map(|p| p.capacity_bytes().div_ceil(piece).max(1) as usize)
                .max()
                .unwrap_or(depth * 2)
        }
    };
    let opts = CopyOptions {
        request_size,
        verify: args.verify,
        destination_is_zero: args.destination_is_zero || dst.known_zero,
        sparse: !args.no_sparse,
        flush: args.flush,
        length: args.length,
        stop_at: args
            .stop_after
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| tokio::time::Instant::now() + Duration::from_secs_f64(s)),
        ..CopyOptions::default()
    };
    let result = wanblk_copy::copy(
        Arc::clone(&src.endpoint),
        Arc::clone(&dst.endpoint),
        opts,
        Arc::clone(&progress),
        slots,
    )
    .await;
    let _ = stop_tx.send(true);
    bar.finish();
    match controller.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => notes.push(format!("tuner configuration rejected: {e}")),
        Err(e) => notes.push(format!("controller failed: {e}")),
    }
    if let Some(t) = tcp_logger {
        match t.await {
            Ok(Err(e)) => notes.push(format!("TCP log: {e:#}")),
            Err(e) => notes.push(format!("TCP log task failed: {e}")),
            Ok(Ok(())) => {}
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu_end = wanblk_sys::process::self_cpu_time().unwrap_or_default();
    let commit = match &result {
        Ok(out) if out.complete => dst.commit().await,
        Ok(out) => {
            if let Some((part, _)) = &dst.part {
                notes.push(format!(
                    "stopped early after {} bytes: {} holds them and was not renamed",
                    out.bytes,
                    part.display()
                ));
            }
            Ok(())
        }
        Err(_) => Ok(()),
    };
    // Close sessions cleanly (NBD_CMD_DISC, iSCSI logout); errors here do
    // not change the outcome of the copy.
    for p in &pools {
        if let Err(e) = p.close().await {
            tracing::debug!("closing {}: {e}", p.name());
        }
    }
    for n in pools.iter().flat_map(|p| p.notes()) {
        if !notes.contains(&n) {
            notes.push(n);
        }
    }
    let data_bytes = progress.data.load(Ordering::Relaxed);
    let samples: Vec<Sample> = state.samples();
    let mut report = Report {
        schema_version: wanblk_copy::report::SCHEMA_VERSION,
        source: src.endpoint.name().to_string(),
        destination: match &dst.part {
            Some((_, fin)) => fin.display().to_string(),
            None => dst.endpoint.name().to_string(),
        },
        bytes: size,
        seconds,
        goodput_mbps: if seconds > 0.0 { data_bytes as f64 * 8.0 / seconds / 1e6 } else { 0.0 },
        data_bytes,
        zero_bytes: progress.zeroed.load(Ordering::Relaxed),
        skipped_bytes: progress.skipped.load(Ordering::Relaxed),
        connections: state.current_n().max(1),
        requests: net.pool.max_depth,
        request_size,
        samples,
        sha256: None,
        complete: false,
        tuning: state.tuning(),
        cpu_user_s: cpu_end.0.saturating_sub(cpu_start.0).as_secs_f64(),
        cpu_system_s: cpu_end.1.saturating_sub(cpu_start.1).as_secs_f64(),
        notes: notes.clone(),
        error: None,
    };
    let outcome = match result {
        Ok(out) => {
            report.sha256 = out.sha256.clone();
            report.complete = out.complete;
            report.bytes = out.bytes;
            commit.map(|()| out)
        }
        Err(e) => {
            let partial = match &dst.part {
                Some((part, _)) => format!(
                    "; {} holds the {} bytes copied (complete up to offset {}); it was not renamed",
                    part.display(),
                    e.written,
                    e.contiguous
                ),
                None => format!(
                    "; the destination was written in place: {} bytes copied, complete up to offset {}",
                    e.written, e.contiguous
                ),
            };
            Err(anyhow::anyhow!("{}{partial}", e.error))
        }
    };
    if let Err(e) = &outcome {
        report.error = Some(format!("{e:#}"));
    }
    if let Some(path) = &args.report {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing report {}", path.display()))?;
    }
    let out = outcome?;
    eprintln!(
        "wanblk: copied {} bytes ({} data, {} zeroed, {} skipped) in {:.2} s: {:.1} Mbit/s, {} connection(s)",
        out.bytes,
        out.data_bytes,
        out.zero_bytes,
        out.skipped_bytes,
        seconds,
        report.goodput_mbps,
        report.connections
    );
    if let Some(h) = &out.sha256 {
        println!("{h}");
    }
    Ok(())
}
