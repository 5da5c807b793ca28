//! `wanblk copy SRC DST`: backup, restore and target-to-target copies over
//! N parallel sessions, fixed or tuned automatically.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use wanblk_blockdev::pool::Hedge;
use wanblk_copy::{CopyError, CopyOptions, CopyOutcome, Progress, Report, StoreReport};
use wanblk_remote::{Remote, RemoteSummary};

use crate::cmd::session::{ClientTlsArgs, SessionArgs};
use crate::location::{Location, Opened, open_destination, open_source};
use crate::units::parse_size;

/// Copy a disk or image between any two locations.
///
/// Locations: `nbd://host[:port]/export`, `nbd+unix:///export?socket=PATH`,
/// `iscsi://[user[%password]@]host[:port]/target-iqn/lun`, a local file or
/// block device, `null:` (a sink; `null:SIZE` reads as zeroes), or
/// `random:SIZE[:SEED]` (a source of pseudo-random data, for benchmarks).
///
/// Network stores are reached over N parallel sessions. The copy is cut
/// into requests of at most `--request-size`; every session keeps up to
/// `--requests` of them in flight and takes the next one as soon as one
/// completes, so a slow connection never holds the others back.
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
    #[command(flatten)]
    tls: ClientTlsArgs,

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

/// Wall-clock and CPU time since the copy started.
struct Clock {
    started: Instant,
    cpu: (Duration, Duration),
}

impl Clock {
    fn start() -> Clock {
        Clock { started: Instant::now(), cpu: wanblk_sys::process::self_cpu_time().unwrap_or_default() }
    }

    /// Seconds, and user and system CPU seconds, so far.
    fn read(&self) -> (f64, f64, f64) {
        let cpu = wanblk_sys::process::self_cpu_time().unwrap_or_default();
        (
            self.started.elapsed().as_secs_f64(),
            cpu.0.saturating_sub(self.cpu.0).as_secs_f64(),
            cpu.1.saturating_sub(self.cpu.1).as_secs_f64(),
        )
    }
}

async fn copy(args: Args) -> anyhow::Result<()> {
    let clock = Clock::start();
    let mut remote = Remote::new(remote_options(&args));
    let (src, dst, size) = open(&args, &mut remote).await?;
    let progress = Arc::new(Progress::default());
    progress.total.store(size, Ordering::Relaxed);
    let counted = Arc::clone(&progress);
    remote.start(move || counted.data.load(Ordering::Relaxed))?;
    let bar = wanblk_copy::progress::Bar::start(Arc::clone(&progress), !args.no_progress, remote.sessions());
    let opts = copy_options(&args, &remote, &dst);
    let piece = opts.max_request_bytes;
    let slots = remote.slots(piece);
    let result = wanblk_copy::copy(
        Arc::clone(&src.endpoint),
        Arc::clone(&dst.endpoint),
        opts,
        Arc::clone(&progress),
        slots,
    )
    .await;
    remote.stop().await;
    bar.finish();
    let (seconds, cpu_user_s, cpu_system_s) = clock.read();
    let mut notes: Vec<String> = src.notes.iter().chain(&dst.notes).cloned().collect();
    let commit = commit(&result, &dst, &mut notes).await;
    let summary = remote.finish().await;
    let mut report = report(&args, &src, &dst, &progress, summary);
    for n in notes.into_iter().rev() {
        if !report.notes.contains(&n) {
            report.notes.insert(0, n);
        }
    }
    (report.bytes, report.request_size) = (size, piece);
    (report.seconds, report.cpu_user_s, report.cpu_system_s) = (seconds, cpu_user_s, cpu_system_s);
    report.goodput_mbps = if seconds > 0.0 { report.data_bytes as f64 * 8.0 / seconds / 1e6 } else { 0.0 };
    let outcome = outcome(result, commit, &dst, &mut report);
    if let Some(path) = &args.report {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing report {}", path.display()))?;
    }
    print_result(&outcome?, &report);
    Ok(())
}

/// How to reach the network stores: a copy writes every range exactly
/// once, so a straggling write may be duplicated on an idle session as
/// safely as a read.
fn remote_options(args: &Args) -> wanblk_remote::RemoteOptions {
    wanblk_remote::RemoteOptions {
        tcp_log: args.tcp_log.clone(),
        tls: args.tls.options(),
        ..args.session.remote_options(Hedge::ReadsAndWrites)
    }
}

/// Opens the source and the destination (network stores through `remote`)
/// and says what was adjusted. Returns them and the bytes to copy.
async fn open(args: &Args, remote: &mut Remote) -> anyhow::Result<(Opened, Opened, u64)> {
    let src_loc = Location::parse(&args.src).context("source")?;
    let dst_loc = Location::parse(&args.dst).context("destination")?;
    let src = open_source(&src_loc, remote).await?;
    let size = args.length.map_or(src.endpoint.size(), |l| l.min(src.endpoint.size()));
    let dst = open_destination(&dst_loc, size, remote).await?;
    for n in src.notes.iter().chain(&dst.notes) {
        eprintln!("wanblk: note: {n}");
    }
    if remote.pools().is_empty() && args.session.is_auto() {
        tracing::info!("no network store: nothing to tune");
    }
    Ok((src, dst, size))
}

/// The copy engine's options. Its pieces are the largest request every
/// store accepts, so a piece is cut only when the controller shrinks
/// requests.
fn copy_options(args: &Args, remote: &Remote, dst: &Opened) -> CopyOptions {
    CopyOptions {
        max_request_bytes: remote.max_request_bytes(),
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
    }
}

/// After a complete copy: flush a new destination file and rename it into
/// place. A copy stopped early leaves the file under its .wanblk-part name
/// (noted).
async fn commit(
    result: &Result<CopyOutcome, CopyError>,
    dst: &Opened,
    notes: &mut Vec<String>,
) -> anyhow::Result<()> {
    match result {
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
    }
}

/// The report of the copy so far: what the stores and the controller
/// did; sizes, times and the outcome are filled in by the caller.
fn report(args: &Args, src: &Opened, dst: &Opened, progress: &Progress, summary: RemoteSummary) -> Report {
    Report {
        schema_version: wanblk_copy::report::SCHEMA_VERSION,
        source: src.endpoint.name().to_string(),
        destination: match &dst.part {
            Some((_, fin)) => fin.display().to_string(),
            None => dst.endpoint.name().to_string(),
        },
        bytes: 0,
        seconds: 0.0,
        goodput_mbps: 0.0,
        data_bytes: progress.data.load(Ordering::Relaxed),
        zero_bytes: progress.zeroed.load(Ordering::Relaxed),
        skipped_bytes: progress.skipped.load(Ordering::Relaxed),
        connections: summary.sessions,
        requests: args.session.requests as usize,
        request_size: 0,
        samples: summary.samples,
        stores: summary
            .stores
            .into_iter()
            .map(|s| StoreReport {
                name: s.name,
                session_bytes: s.session_bytes,
                failed_sessions: s.failed_sessions,
            })
            .collect(),
        sha256: None,
        complete: false,
        tuning: summary.tuning,
        cpu_user_s: 0.0,
        cpu_system_s: 0.0,
        notes: summary.notes,
        error: None,
    }
}

/// The copy's outcome, written into `report`: a failed copy says how far
/// it got and where the bytes are.
fn outcome(
    result: Result<CopyOutcome, CopyError>,
    commit: anyhow::Result<()>,
    dst: &Opened,
    report: &mut Report,
) -> anyhow::Result<CopyOutcome> {
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
    outcome
}

/// One line on stderr; the sha256 on stdout with `--verify`.
fn print_result(out: &CopyOutcome, report: &Report) {
    eprintln!(
        "wanblk: copied {} bytes ({} data, {} zeroed, {} skipped) in {:.2} s: {:.1} Mbit/s, {} connection(s)",
        out.bytes,
        out.data_bytes,
        out.zero_bytes,
        out.skipped_bytes,
        report.seconds,
        report.goodput_mbps,
        report.connections
    );
    if let Some(h) = &out.sha256 {
        println!("{h}");
    }
}
