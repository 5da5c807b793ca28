//! `wanblk copy SRC DST`: backup, restore and target-to-target copies over
//! N parallel sessions, fixed or tuned automatically.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::sync::watch;
use wanblk_blockdev::pool::Hedge;
use wanblk_copy::progress::{Display, Phase, PhaseCell, Reporter};
use wanblk_copy::{
    Control, CopyError, CopyOptions, CopyOutcome, Journal, Progress, RateLimit, Report, StoreIdentity,
    StoreReport,
};
use wanblk_remote::{Remote, RemoteSummary};

use crate::cmd::session::{COPY_INITIAL, ClientTlsArgs, SessionArgs};
use crate::location::{self, Location, Opened, open_destination, open_source, shown};
use crate::units::{parse_rate, parse_size};
use crate::{exit, resume};

/// Arguments of `wanblk copy` (the help text is in `cmd::help`).
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit::HELP)]
pub(crate) struct Args {
    /// Where to read from: a location (see LOCATIONS in --help).
    src: String,
    /// Where to write to: a location (see LOCATIONS in --help).
    dst: String,

    #[command(flatten)]
    session: SessionArgs,
    #[command(flatten)]
    tls: ClientTlsArgs,

    /// Copy only the first SIZE bytes of the source (K, M, G suffixes).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    length: Option<u64>,

    /// Stop issuing requests after this many seconds and finish with what
    /// is done (a time-boxed copy for benchmarks): the report says
    /// `"complete": false`, a new destination file keeps its .wanblk-part
    /// name (its journal kept, so the same command without --stop-after
    /// resumes), and wanblk exits with 0: the stop was asked for.
    #[arg(long, value_name = "SECS")]
    stop_after: Option<f64>,

    /// Do not flush the destination at the end (the default flush makes
    /// the copy durable: NBD FLUSH, SCSI SYNCHRONIZE CACHE, fsync).
    #[arg(long, conflicts_with = "flush")]
    no_flush: bool,

    /// The default now (kept so older command lines work).
    #[arg(long, hide = true)]
    flush: bool,

    /// Compute the sha256 of the whole image while copying, in offset order
    /// (holes hashed as zeroes), so it equals `sha256sum` of a raw image of
    /// the source. Printed on stdout and written to the report.
    #[arg(long)]
    checksum: bool,

    /// After the copy and its flush, read the destination back (in
    /// parallel, over the same sessions) and compare it with what was read
    /// from the source; a difference names the first bad offset and exits
    /// with 1.
    #[arg(long)]
    verify: bool,

    /// The destination already reads as zeroes: skip holes and zero blocks
    /// instead of zeroing them. Implied for a new file and for null:.
    #[arg(long)]
    destination_is_zero: bool,

    /// Copy every byte as data: no block status, no zero detection.
    #[arg(long)]
    no_sparse: bool,

    /// Keep the resume journal in FILE (for any destination, network
    /// stores and block devices included; by default a copy to a regular
    /// file keeps it in FILE.wanblk-journal beside it).
    #[arg(long, value_name = "FILE")]
    state: Option<PathBuf>,

    /// Resume an interrupted copy; fail if there is no journal. (Running
    /// the same command again resumes anyway when a journal is found.)
    #[arg(long, conflicts_with = "restart")]
    resume: bool,

    /// Start over: discard the journal of an earlier, interrupted copy.
    #[arg(long)]
    restart: bool,

    /// Write a JSON report (bytes, seconds, goodput, connections, samples,
    /// sha256, tuning, faults survived) to FILE.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,

    /// Write per-connection TCP_INFO samples (cwnd, RTT, retransmits,
    /// unacknowledged and unsent bytes) as CSV to FILE, every 100 ms.
    #[arg(long, value_name = "FILE")]
    tcp_log: Option<PathBuf>,

    /// Cap the copy's goodput at this many bits per second over all
    /// sessions together (e.g. 100M, 1.5G, 800000; K, M, G, T are powers of
    /// 1000): leave room for others on a shared link. Each session is paced
    /// at its share, and the automatic tuning never adds sessions once the
    /// cap is reached.
    #[arg(long, value_name = "BITS_PER_S", value_parser = parse_rate)]
    rate: Option<u64>,

    /// Do not show progress.
    #[arg(long, conflicts_with_all = ["progress", "progress_json"])]
    no_progress: bool,

    /// Write progress lines to file descriptor FD (e.g. --progress=3 with
    /// `3>progress.log`); --progress alone means stderr. Without it,
    /// progress shows as a bar on a terminal and as a line every
    /// --progress-interval on stderr otherwise.
    #[arg(long, value_name = "FD", require_equals = true, num_args = 0..=1, default_missing_value = "2")]
    progress: Option<u32>,

    /// Progress as JSON lines (one object per line: t_s, phase, bytes_done,
    /// bytes_total, percent, rate_mbps, average_mbps, eta_s, sessions), to
    /// stderr or the --progress FD.
    #[arg(long)]
    progress_json: bool,

    /// Seconds between progress lines (not the bar).
    #[arg(long, value_name = "SECS", default_value_t = 10.0, value_parser = parse_interval_s)]
    progress_interval: f64,
}

fn parse_interval_s(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('s').parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86400.0 => Ok(v),
        _ => Err(format!("expected a number of seconds, got {s:?}")),
    }
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

/// Where progress goes, from the flags; `stdout_is_image` when the
/// destination is `-`.
fn progress_display(args: &Args, stdout_is_image: bool) -> anyhow::Result<Display> {
    if args.no_progress {
        return Ok(Display::Off);
    }
    let every = Duration::from_secs_f64(args.progress_interval);
    let out: Box<dyn std::io::Write + Send> = match args.progress {
        None | Some(2) => Box::new(std::io::stderr()),
        Some(1) if stdout_is_image => bail!("--progress=1: standard output carries the image (-)"),
        Some(1) => Box::new(std::io::stdout()),
        Some(fd) => Box::new(
            std::fs::OpenOptions::new()
                .append(true)
                .open(format!("/dev/fd/{fd}"))
                .with_context(|| format!("--progress={fd}: file descriptor {fd} is not open for writing"))?,
        ),
    };
    Ok(match (args.progress_json, args.progress) {
        (true, _) => Display::Json { out, every },
        // The bar would redraw over the live session table: lines instead.
        (false, None | Some(2)) if args.session.sessions_view => Display::Text { out, every },
        (false, None | Some(2)) => Display::stderr_default(every),
        (false, Some(_)) => Display::Text { out, every },
    })
}

/// A report for a copy that failed before it started (a bad location, a
/// store that cannot be opened): what was asked and why it failed.
fn early_report(args: &Args, error: &anyhow::Error, seconds: f64) -> Report {
    Report {
        schema_version: wanblk_copy::report::SCHEMA_VERSION,
        source: shown(&args.src),
        destination: shown(&args.dst),
        bytes: 0,
        seconds,
        goodput_mbps: 0.0,
        data_bytes: 0,
        zero_bytes: 0,
        skipped_bytes: 0,
        connections: 0,
        requests: args.session.requests as usize,
        request_size: args.session.request_size,
        samples: Vec::new(),
        stores: Vec::new(),
        sha256: None,
        complete: false,
        resumed_bytes: 0,
        interrupted: false,
        flushed: false,
        max_in_flight_bytes: 0,
        verify: None,
        faults: wanblk_copy::Faults::default(),
        journal: None,
        tuning: None,
        timing: None,
        progress: Vec::new(),
        cpu_user_s: 0.0,
        cpu_system_s: 0.0,
        notes: Vec::new(),
        error: Some(format!("{error:#}")),
        share: wanblk_tune::share::SessionMeter::new().report(
            args.session.share.as_str(),
            &[],
            Vec::new(),
            1,
        ),
    }
}

fn write_report(path: &std::path::Path, report: &Report) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(report)?;
    std::fs::write(path, json + "\n").with_context(|| format!("writing report {}", path.display()))
}

async fn copy(args: Args) -> anyhow::Result<()> {
    check(&args)?;
    let clock = Clock::start();
    let started = (|| {
        let src_loc = Location::parse(&args.src).context("source").map_err(usage)?;
        let dst_loc = Location::parse(&args.dst).context("destination").map_err(usage)?;
        if src_loc == Location::Stdio && dst_loc == Location::Stdio {
            bail!("source and destination are both -: use cat");
        }
        let display = progress_display(&args, dst_loc == Location::Stdio)?;
        Ok((src_loc, dst_loc, display))
    })();
    let mut remote = Remote::new(remote_options(&args));
    let opened = match started {
        Ok((s, d, display)) => open(&args, &s, &d, &mut remote).await.map(|o| (o, display)),
        Err(e) => Err(e),
    };
    let ((mut src, mut dst, size, mut journal), display) = match opened {
        Ok(o) => o,
        Err(e) => {
            if let Some(path) = &args.report {
                write_report(path, &early_report(&args, &e, clock.read().0))?;
            }
            let _ = remote.finish().await;
            return Err(e);
        }
    };
    let progress = Arc::new(Progress::default());
    progress.total.store(size, Ordering::Relaxed);
    let phase = Arc::new(PhaseCell::default());
    let counted = Arc::clone(&progress);
    // What is left: known once the copy has sized the job (0 until then),
    // never for a stream read from stdin (its total grows as it is read).
    let (left, sized) = (Arc::clone(&progress), !src.stdio);
    // Before the first request: the probe's echo trains have the path to themselves.
    remote.probe_path().await;
    remote.start_with_remaining(
        move || counted.data.load(Ordering::Relaxed),
        move || {
            let total = left.total.load(Ordering::Relaxed);
            (sized && total > 0).then(|| total.saturating_sub(left.done.load(Ordering::Relaxed)))
        },
    )?;
    phase.set(Phase::Copying);
    let reporter = Reporter::start(
        display,
        Arc::clone(&progress),
        Arc::clone(&phase),
        remote.sessions(),
        remote.fault_status(),
    );
    let opts = copy_options(&args, &remote, &src, &dst, journal.as_ref());
    let piece = opts.max_request_bytes;
    // Pieces read from a source pool follow its request size (the copy
    // engine's planner): count slots in those.
    let reads = (!src.stdio).then(|| Arc::clone(&src.endpoint));
    let slots = remote.slots(move || {
        reads.as_deref().map_or(piece, |ep| wanblk_copy::read_piece_bytes(ep, piece.into()) as u32)
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let signalled = stop_rx.clone();
    let signals = crate::signals::watch(
        stop_tx,
        "finishing the requests in flight (at most 10 s), flushing and saving the journal",
    )?;
    let result = if src.stdio {
        let stdin = tokio::io::stdin();
        wanblk_copy::copy_from_stream(
            stdin,
            "-",
            Arc::clone(&dst.endpoint),
            opts,
            Arc::clone(&progress),
            slots,
        )
        .await
    } else {
        wanblk_copy::copy(
            Arc::clone(&src.endpoint),
            Arc::clone(&dst.endpoint),
            opts,
            Arc::clone(&progress),
            slots,
            Control { stop: Some(stop_rx), journal: journal.as_mut() },
        )
        .await
    };
    remote.stop().await;
    phase.set(Phase::Finishing);
    let (seconds, cpu_user_s, cpu_system_s) = clock.read();
    let mut notes: Vec<String> = src.notes.iter().chain(&dst.notes).cloned().collect();
    let commit = commit(&result, &dst, &mut journal, &mut notes).await;
    let closed = match (src.close().await, dst.close().await) {
        (Err(e), _) | (_, Err(e)) if result.is_ok() => Err(e),
        _ => Ok(()),
    };
    let commit = commit.and(closed);
    let summary = remote.finish().await;
    drop(signals);
    let mut report = report(&args, &src, &dst, &progress, summary);
    for n in notes.into_iter().rev() {
        if !report.notes.contains(&n) {
            report.notes.insert(0, n);
        }
    }
    if let Some(r) = args.rate {
        report.notes.push(format!("goodput capped at {:.1} Mbit/s (--rate)", r as f64 / 1e6));
    }
    (report.bytes, report.request_size) =
        (if src.stdio { progress.total.load(Ordering::Relaxed) } else { size }, piece);
    (report.seconds, report.cpu_user_s, report.cpu_system_s) = (seconds, cpu_user_s, cpu_system_s);
    report.goodput_mbps = if seconds > 0.0 { report.data_bytes as f64 * 8.0 / seconds / 1e6 } else { 0.0 };
    report.journal = journal.as_ref().map(|j| j.path().display().to_string());
    let outcome = outcome(result, commit, &dst, journal.as_ref(), &mut report);
    phase.set(if outcome.as_ref().is_ok_and(|o| o.complete) { Phase::Done } else { Phase::Failed });
    reporter.finish().await;
    if let Some(path) = &args.report {
        write_report(path, &report)?;
    }
    let out = outcome?;
    let signalled = *signalled.borrow();
    print_result(&out, &report, dst.stdio, signalled);
    finished(&args, &out, journal.as_ref(), signalled)
}

/// Refuses option combinations that cannot work, before opening anything.
fn check(args: &Args) -> anyhow::Result<()> {
    if args.verify && (args.dst.starts_with("null:") || args.dst == "-" || args.src == "-") {
        return Err(exit::usage(
            "--verify: the destination cannot be read back (null:, or standard input or output)",
        ));
    }
    if args.stop_after.is_some_and(|s| !(s.is_finite() && s >= 0.0)) {
        return Err(exit::usage("--stop-after: expected a number of seconds"));
    }
    Ok(())
}

/// How to reach the network stores: a copy writes every range exactly
/// once, so a straggling write may be duplicated on an idle session as
/// safely as a read.
fn remote_options(args: &Args) -> wanblk_remote::RemoteOptions {
    wanblk_remote::RemoteOptions {
        tcp_log: args.tcp_log.clone(),
        tls: args.tls.options(),
        rate_cap_bytes_per_s: args.rate.map(|bits| (bits / 8).max(1)),
        ..args.session.remote_options(Hedge::ReadsAndWrites, COPY_INITIAL)
    }
}

fn resume_mode(args: &Args) -> resume::Mode {
    match (args.resume, args.restart) {
        (true, _) => resume::Mode::Resume,
        (_, true) => resume::Mode::Restart,
        _ => resume::Mode::Auto,
    }
}

/// Opens the source and the destination (network stores through `remote`)
/// and the journal (resuming an interrupted copy when it says so), and
/// says what was adjusted. Returns them and the bytes to copy (for
/// standard input: at most that many, the destination's size).
async fn open(
    args: &Args,
    src_loc: &Location,
    dst_loc: &Location,
    remote: &mut Remote,
) -> anyhow::Result<(Opened, Opened, u64, Option<Journal>)> {
    let (src, dst, size, journal) = if *src_loc == Location::Stdio {
        // The input's size is known only at its end: the destination sets it.
        let size = match (dst_loc, args.length) {
            (_, Some(l)) => l,
            (Location::Null(None), None) => u64::MAX >> 1,
            (Location::File(p), None) if !p.exists() => bail!(
                "reading standard input (-), whose size is unknown, into a new file: give --length SIZE, or use an existing file, a device or a network store"
            ),
            _ => 0,
        };
        let dst = open_destination(dst_loc, size, remote).await.context("destination")?;
        let size = args.length.map_or(dst.endpoint.size(), |l| l.min(dst.endpoint.size()));
        let mut src = Opened::stdin();
        src.notes.push("-: standard input is read in order, as one stream, as it arrives".to_string());
        (src, dst, size, None)
    } else {
        let src = open_source(src_loc, remote).await.context("source")?;
        let size = args.length.map_or(src.endpoint.size(), |l| l.min(src.endpoint.size()));
        let (dst, journal) = open_journaled(args, dst_loc, &src, size, remote).await?;
        (src, dst, size, journal)
    };
    for n in src.notes.iter().chain(&dst.notes) {
        eprintln!("wanblk: note: {n}");
    }
    if remote.pools().is_empty() && args.session.is_auto() {
        tracing::info!("no network store: nothing to tune");
    }
    Ok((src, dst, size, journal))
}

/// A location that cannot be parsed is a usage error.
fn usage(e: anyhow::Error) -> anyhow::Error {
    exit::usage(format!("{e:#}"))
}

/// Opens the destination of a copy from `src` and its resume journal:
/// an earlier, interrupted copy of the same source to the same place is
/// resumed (its partial file reopened), a journal of another copy refused.
async fn open_journaled(
    args: &Args,
    dst_loc: &Location,
    src: &Opened,
    size: u64,
    remote: &mut Remote,
) -> anyhow::Result<(Opened, Option<Journal>)> {
    let jpath = if matches!(dst_loc, Location::Null(_)) {
        None
    } else {
        resume::journal_path(dst_loc, args.state.as_deref())
    };
    let mode = resume_mode(args);
    if jpath.is_none() && mode != resume::Mode::Resume {
        // Nowhere to keep a journal: no identity to take (its sample
        // would read the source beyond the copy itself).
        return Ok((open_destination(dst_loc, size, remote).await.context("destination")?, None));
    }
    let (dst, plan, identity) = if let (true, Location::File(p)) = (location::is_new_file(dst_loc), dst_loc) {
        // Decide before creating the .wanblk-part file: a resume reopens it.
        let new_file = StoreIdentity { name: p.display().to_string(), size, serial: None };
        let id = resume::identity(&*src.endpoint, size, new_file).await.context("source")?;
        let mut plan = resume::plan(jpath, mode, &id)?;
        let dst = match &plan {
            resume::Plan::Resume(path, _) => match location::reopen_part(p, size).context("destination")? {
                Some(d) => d,
                None => {
                    eprintln!(
                        "wanblk: note: journal {} found but not the partial file {}: starting over",
                        path.display(),
                        location::part_path(p).display()
                    );
                    plan = resume::Plan::Fresh(path.clone());
                    open_destination(dst_loc, size, remote).await.context("destination")?
                }
            },
            _ => open_destination(dst_loc, size, remote).await.context("destination")?,
        };
        (dst, plan, id)
    } else {
        let dst = open_destination(dst_loc, size, remote).await.context("destination")?;
        let d = &dst.endpoint;
        let store = StoreIdentity { name: d.name().to_string(), size: d.size(), serial: d.serial() };
        let id = resume::identity(&*src.endpoint, size, store).await.context("source")?;
        (dst, resume::plan(jpath, mode, &id)?, id)
    };
    let journal = match plan {
        resume::Plan::None => None,
        resume::Plan::Fresh(path) => Some(Journal::create(&path, identity)?),
        resume::Plan::Resume(path, decoded) => {
            let done = decoded.done.bytes();
            eprintln!(
                "wanblk: resuming: {done} of {size} bytes were copied by an earlier run (journal {})",
                path.display()
            );
            Some(Journal::resume(&path, decoded)?)
        }
    };
    Ok((dst, journal))
}

/// The copy engine's options. Its pieces are the largest request every
/// store accepts, so a piece is cut only when the controller shrinks
/// requests. A resumed destination holds earlier data: it is not known
/// to read as zeroes.
fn copy_options(
    args: &Args,
    remote: &Remote,
    src: &Opened,
    dst: &Opened,
    journal: Option<&Journal>,
) -> CopyOptions {
    let resumed = journal.is_some_and(|j| !j.done().is_empty());
    // A local server's session takes no more than its block sizes say (a
    // pool cuts any request itself).
    let mut piece = remote.max_request_bytes();
    for o in [src, dst].into_iter().filter(|o| o.server.is_some()) {
        let bs = o.endpoint.capabilities().block_sizes;
        let cut = piece.min(bs.maximum.max(bs.minimum.max(1)));
        piece = (cut - cut % bs.minimum.max(1)).max(bs.minimum.max(1));
    }
    let rate = args.rate.map(|bits| (bits / 8).max(1));
    if let Some(r) = rate {
        piece = RateLimit::piece_bytes(r, piece);
    }
    CopyOptions {
        max_request_bytes: piece,
        rate: rate.map(|r| Arc::new(RateLimit::new(r))),
        in_order: dst.stdio,
        max_in_flight_bytes: if dst.stdio { 256 << 20 } else { CopyOptions::default().max_in_flight_bytes },
        checksum: args.checksum,
        verify: args.verify,
        destination_is_zero: (args.destination_is_zero || dst.known_zero) && !resumed,
        sparse: !args.no_sparse,
        flush: !args.no_flush,
        length: args.length,
        stop_at: args
            .stop_after
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| tokio::time::Instant::now() + Duration::from_secs_f64(s)),
        ..CopyOptions::default()
    }
}

/// After a complete, verified copy: move a new file into place and remove
/// the journal. A copy stopped early leaves the file under its
/// .wanblk-part name (noted) and keeps the journal.
async fn commit(
    result: &Result<CopyOutcome, CopyError>,
    dst: &Opened,
    journal: &mut Option<Journal>,
    notes: &mut Vec<String>,
) -> anyhow::Result<()> {
    match result {
        Ok(out) if out.complete && out.verify.as_ref().is_some_and(|v| v.first_bad_offset.is_some()) => {
            // The journal says ranges are good that are not: drop it, so a
            // rerun copies everything again.
            if let Some(j) = journal.take() {
                j.remove()?;
            }
            Ok(())
        }
        Ok(out) if out.complete => {
            dst.commit().await?;
            if let Some(j) = journal.take() {
                j.remove()?;
            }
            Ok(())
        }
        Ok(out) => {
            if let Some((part, _)) = &dst.part {
                let note = format!(
                    "stopped early after {} bytes: {} holds them and was not renamed",
                    out.bytes,
                    part.display()
                );
                eprintln!("wanblk: note: {note}");
                notes.push(note);
            }
            Ok(())
        }
        Err(_) => Ok(()),
    }
}

/// The report of the copy so far: what the stores and the controller
/// did; sizes, times and the outcome are filled in by the caller.
fn report(args: &Args, src: &Opened, dst: &Opened, progress: &Progress, summary: RemoteSummary) -> Report {
    let faults = faults(&summary);
    Report {
        schema_version: wanblk_copy::report::SCHEMA_VERSION,
        source: if src.stdio || src.server.is_some() {
            shown(&args.src)
        } else {
            src.endpoint.name().to_string()
        },
        destination: match &dst.part {
            Some((_, fin)) => fin.display().to_string(),
            None if dst.stdio || dst.server.is_some() => shown(&args.dst),
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
        resumed_bytes: progress.resumed.load(Ordering::Relaxed),
        interrupted: false,
        flushed: false,
        max_in_flight_bytes: 0,
        verify: None,
        faults,
        journal: None,
        tuning: summary.tuning,
        timing: summary.timing,
        progress: summary.progress,
        cpu_user_s: 0.0,
        cpu_system_s: 0.0,
        notes: summary.notes,
        error: None,
        share: summary.share,
    }
}

/// The faults of every store, for the report.
fn faults(summary: &RemoteSummary) -> wanblk_copy::Faults {
    let f = summary.faults();
    wanblk_copy::Faults {
        reconnects: f.reconnects,
        retried_requests: f.retried_requests,
        transient_errors: f.transient_errors,
        timeouts: f.timeouts,
        resent_bytes: f.resent_bytes,
        outage_s: f.outage_s,
    }
}

/// The copy's outcome, written into `report`: a failed copy says how far
/// it got, where the bytes are, and how to resume.
fn outcome(
    result: Result<CopyOutcome, CopyError>,
    commit: anyhow::Result<()>,
    dst: &Opened,
    journal: Option<&Journal>,
    report: &mut Report,
) -> anyhow::Result<CopyOutcome> {
    let outcome = match result {
        Ok(out) => {
            report.sha256 = out.sha256.clone();
            report.complete = out.complete;
            report.bytes = out.bytes;
            report.interrupted = out.interrupted;
            report.flushed = out.flushed;
            report.max_in_flight_bytes = out.max_in_flight_bytes;
            report.verify = out.verify.clone();
            commit.map(|()| out)
        }
        Err(e) => {
            report.max_in_flight_bytes = e.max_in_flight_bytes;
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
            let again = match journal {
                Some(j) => format!(
                    "\nwanblk: the journal {} holds what was copied and flushed; to resume, run: {}",
                    j.path().display(),
                    resume::resume_command()
                ),
                None => String::new(),
            };
            Err(anyhow::anyhow!("{}{partial}{again}", e.error))
        }
    };
    if let Err(e) = &outcome {
        report.error = Some(format!("{e:#}"));
    }
    outcome
}

/// One line on stderr; the sha256 on stdout with `--checksum` (on stderr
/// when stdout carries the image).
fn print_result(out: &CopyOutcome, report: &Report, stdout_is_image: bool, signalled: bool) {
    let resumed = if out.resumed_bytes > 0 {
        format!(", {} copied by an earlier run", out.resumed_bytes)
    } else {
        String::new()
    };
    eprintln!(
        "wanblk: {} {} bytes ({} data, {} zeroed, {} skipped{resumed}) in {:.2} s: {:.1} Mbit/s, {} connection(s)",
        match (out.complete, signalled) {
            (true, _) => "copied",
            (false, true) => "interrupted, copied",
            (false, false) => "stopped early (--stop-after), copied",
        },
        out.bytes,
        out.data_bytes,
        out.zero_bytes,
        out.skipped_bytes,
        report.seconds,
        report.goodput_mbps,
        report.connections
    );
    let f = &report.faults;
    // Straggling requests duplicated on idle sessions alone are routine.
    if f.reconnects + f.transient_errors + f.timeouts + f.resent_bytes > 0 || f.outage_s > 0.0 {
        eprintln!(
            "wanblk: survived: {} reconnect(s), {} request(s) retried ({} transient server error(s), {} timeout(s)), {} bytes re-sent, {:.1} s without a session",
            f.reconnects, f.retried_requests, f.transient_errors, f.timeouts, f.resent_bytes, f.outage_s
        );
    }
    if let Some(h) = &out.sha256 {
        if stdout_is_image {
            eprintln!("wanblk: sha256 {h}");
        } else {
            println!("{h}");
        }
    }
}

/// The exit status of a copy that ran to its end: verification failed
/// (1), interrupted by a signal (3, with the command that resumes), or
/// success (a --stop-after run included: the stop was asked for).
fn finished(
    args: &Args,
    out: &CopyOutcome,
    journal: Option<&Journal>,
    signalled: bool,
) -> anyhow::Result<()> {
    if let Some(bad) = out.verify.as_ref().and_then(|v| v.first_bad_offset) {
        anyhow::bail!(
            "verification failed: the destination differs from the source at offset {bad}; \
             run the copy again with --restart"
        );
    }
    if let Some(v) = &out.verify {
        eprintln!("wanblk: verified: the destination reads back as the source ({} bytes)", v.checked_bytes);
    }
    if out.complete {
        return Ok(());
    }
    if !signalled && args.stop_after.is_some() {
        // The stop was asked for (a time-boxed run): exit 0, as before;
        // print_result and commit said what was done and where it is.
        return Ok(());
    }
    let why = if out.interrupted { "interrupted" } else { "stopped early" };
    let how = match journal {
        Some(j) => format!(
            "; the journal {} holds what was copied; to resume, run: {}",
            j.path().display(),
            resume::resume_command()
        ),
        None if args.dst.starts_with("null:") => String::new(),
        None => "; nothing records what was copied (no journal: use --state FILE to keep one)".to_string(),
    };
    Err(exit::incomplete(format!("{why} after {} bytes{how}", out.bytes)))
}
