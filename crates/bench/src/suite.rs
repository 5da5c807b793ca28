//! The benchmark suite behind `wanblk-bench run`: the seeds' experiments on
//! wanblk's own emulated path, with the raw link (iperf3) and nbdcopy
//! measured side by side in the same run, written as CSV, plots and
//! Markdown tables.
//!
//! Every figure is measured; nothing is tuned to one setting: the same
//! tool defaults run on every path.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use wanblk_copy::Report;
use wanblk_netem::{Profile, SysctlProfile};

use crate::path::{BenchPath, Direction, PathSpec, Run};
use crate::plot::{Chart, Series};
use crate::report::{cell, converged_at_s, csv_cell, steady_after, timeline};

/// How much to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// One path (1 Gbit/s, 50 ms one way, default buffers): minutes.
    Quick,
    /// The seeds' grids (delay, bandwidth, buffers, loss, cubic/bbr): hours.
    Full,
}

/// Suite settings.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// Quick or full.
    pub level: Level,
    /// Output directory (CSV, plots, tables.md).
    pub out_dir: PathBuf,
    /// Seconds each fixed-N run copies before it stops (`--stop-after`).
    pub fixed_secs: f64,
    /// Seconds of line rate each whole-image run (auto, nbdcopy) copies.
    pub image_secs: f64,
    /// Parts of the full profile to run (empty: all of [`FULL_PARTS`]).
    pub parts: Vec<String>,
    /// Fixed N values to run on every path instead of the profile's own.
    pub fixed: Option<Vec<u32>>,
}

/// The parts of the full profile, in the order they run: the main path
/// (1 Gbit/s, 50 ms, both directions, N up to 128), BDL-APT's Fig 11
/// delay grid and Fig 10 bandwidth grid with distribution-default buffers
/// and with the seeds' 512 KB (`-capped`), random loss with cubic and bbr,
/// and two path changes mid-copy.
pub const FULL_PARTS: [&str; 7] =
    ["main", "delay", "delay-capped", "bandwidth", "bandwidth-capped", "loss", "change"];

/// The parts of the quick profile: the main path, then its path change.
pub const QUICK_PARTS: [&str; 2] = ["main", "change"];

/// One row of `runs.csv`.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Scenario name (ceiling, fixed-n, auto, nbdcopy, change, loss).
    pub scenario: String,
    /// Path label.
    pub path: String,
    /// Bottleneck Mbit/s.
    pub rate_mbps: u64,
    /// One-way delay, ms.
    pub delay_ms: f64,
    /// Socket buffer profile.
    pub buffers: String,
    /// Congestion control.
    pub cc: String,
    /// Loss probability.
    pub loss: f64,
    /// Direction.
    pub direction: Direction,
    /// Tool and settings.
    pub tool: String,
    /// Final or fixed N.
    pub n: Option<u64>,
    /// Whole-run goodput, Mbit/s (bytes / wall time, start-up included).
    pub goodput_mbps: f64,
    /// Steady-state goodput, Mbit/s: after the first 30 % of the run, or
    /// after convergence for auto (wanblk runs only).
    pub steady_mbps: Option<f64>,
    /// Seconds.
    pub seconds: f64,
    /// Payload bytes.
    pub bytes: u64,
    /// Client CPU seconds per transferred Gbit.
    pub client_cpu_s_per_gbit: Option<f64>,
    /// Server CPU seconds per transferred Gbit.
    pub server_cpu_s_per_gbit: Option<f64>,
    /// Seconds to convergence (auto).
    pub converge_s: Option<f64>,
    /// Seconds until goodput first reached 95 % of what the path carried
    /// (the report's `timing.time_to_95pct_s`; wanblk runs).
    pub time_to_95pct_s: Option<f64>,
    /// Seconds until N was final (the report's `timing.time_to_final_n_s`;
    /// wanblk with auto).
    pub time_to_final_n_s: Option<f64>,
    /// Hypervisor steal share of host CPU during the run, percent.
    pub steal_pct: Option<f64>,
    /// The report's progress trace (wanblk runs; for the time to 0.95 of
    /// the path's ceiling, which only the tables know).
    #[serde(skip)]
    pub progress: Vec<wanblk_tune::control::ProgressPoint>,
}

impl Row {
    /// Steady goodput if known, else the whole run's.
    fn steady_or_whole(&self) -> f64 {
        self.steady_mbps.unwrap_or(self.goodput_mbps)
    }
}

/// Steady goodputs within this fraction of the best fixed N's count as a tie.
const FIXED_TIE: f64 = 0.02;

/// The best fixed N of a path's fixed-N rows: the highest steady goodput;
/// among the Ns within [`FIXED_TIE`] of it (on a path that a few sessions
/// fill, every N from 2 to 128 reads the link's rate once steady), the one
/// whose run moved the most, start-up included, then the fewest sessions.
/// (Taking the last of equal maxima had set 128 sessions beside auto where
/// 2 fill a 200 Mbit/s path.)
fn best_fixed_n<'a>(rows: impl Iterator<Item = &'a Row>) -> Option<u64> {
    let rows: Vec<&Row> = rows.filter(|r| r.n.is_some()).collect();
    let top = rows.iter().map(|r| r.steady_or_whole()).fold(f64::NEG_INFINITY, f64::max);
    rows.into_iter()
        .filter(|r| r.steady_or_whole() >= top * (1.0 - FIXED_TIE))
        .max_by(|a, b| a.goodput_mbps.total_cmp(&b.goodput_mbps).then(b.n.cmp(&a.n)))
        .and_then(|r| r.n)
}

fn buffers_label(p: SysctlProfile) -> String {
    match p {
        SysctlProfile::Default => "default".into(),
        SysctlProfile::Bdp => "bdp".into(),
        SysctlProfile::Capped(b) => format!("capped-{}K", b / 1024),
        SysctlProfile::Keep => "keep".into(),
    }
}

fn row(scenario: &str, spec: &PathSpec, r: &Run) -> Row {
    let gbit = r.bytes as f64 * 8.0 / 1e9;
    let per = |c: Option<f64>| c.filter(|_| gbit > 0.0).map(|c| c / gbit);
    let steady = r.report.as_ref().and_then(|j| {
        let from = r.converge_s.unwrap_or(0.3 * r.seconds);
        steady_after(j, from)
    });
    let timing = r.report.as_ref().and_then(|j| j.timing);
    Row {
        scenario: scenario.into(),
        path: spec.label(),
        rate_mbps: spec.rate_bps / 1_000_000,
        delay_ms: spec.delay_ms,
        buffers: buffers_label(spec.sysctl),
        cc: spec.congestion.clone(),
        loss: spec.loss,
        direction: r.direction,
        tool: r.tool.clone(),
        n: r.connections,
        goodput_mbps: r.goodput_mbps,
        steady_mbps: steady,
        seconds: r.seconds,
        bytes: r.bytes,
        client_cpu_s_per_gbit: per(r.client_cpu_s),
        server_cpu_s_per_gbit: per(r.server_cpu_s),
        converge_s: r.converge_s,
        time_to_95pct_s: timing.and_then(|t| t.time_to_95pct_s),
        time_to_final_n_s: timing.and_then(|t| t.time_to_final_n_s),
        steal_pct: r.steal_pct,
        progress: r.report.as_ref().map(|j| j.progress.clone()).unwrap_or_default(),
    }
}

/// Seconds until the run's goodput first reached 0.95 of `ceiling_mbps`
/// (the path's iperf3 ceiling, where the report's own figure measures
/// against what the run itself carried), over the report's trailing
/// window of max(0.25 s, 2 RTT).
fn time_to_95pct_of(r: &Row, ceiling_mbps: f64) -> Option<f64> {
    use wanblk_tune::control::{NEAR_CAPACITY, RATE_WINDOW_MIN_S, time_to_rate};
    let window = RATE_WINDOW_MIN_S.max(4.0 * r.delay_ms / 1e3);
    time_to_rate(&r.progress, NEAR_CAPACITY * ceiling_mbps * 1e6 / 8.0, window)
}

/// Collects rows and writes them as they come, so an interrupted run keeps
/// what it measured.
struct Recorder {
    dir: PathBuf,
    rows: Vec<Row>,
    failures: Vec<String>,
}

impl Recorder {
    fn push(&mut self, scenario: &str, spec: &PathSpec, r: anyhow::Result<Run>) -> Option<Run> {
        match r {
            Ok(r) => {
                let row = row(scenario, spec, &r);
                println!(
                    "  {:<8} {:<7} {:<28} {:>7.0} Mbit/s{}{}",
                    scenario,
                    format!("{:?}", r.direction).to_lowercase(),
                    r.tool,
                    r.goodput_mbps,
                    row.steady_mbps.map_or(String::new(), |s| format!(" (steady {s:.0})")),
                    r.connections.map_or(String::new(), |n| format!(" N={n}"))
                );
                self.rows.push(row);
                let _ = self.flush();
                Some(r)
            }
            Err(e) => {
                let msg = format!("{scenario} on {}: {e:#}", spec.label());
                println!("  FAILED {msg}");
                self.failures.push(msg);
                None
            }
        }
    }

    fn flush(&self) -> anyhow::Result<()> {
        let mut csv = String::from(
            "scenario,path,rate_mbps,delay_ms,buffers,cc,loss,direction,tool,n,goodput_mbps,steady_mbps,seconds,bytes,\
client_cpu_s_per_gbit,server_cpu_s_per_gbit,converge_s,steal_pct\n",
        );
        for r in &self.rows {
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},{:?},{},{},{:.1},{},{:.2},{},{},{},{},{}",
                r.scenario,
                r.path,
                r.rate_mbps,
                r.delay_ms,
                r.buffers,
                r.cc,
                r.loss,
                r.direction,
                r.tool,
                r.n.map_or(String::new(), |n| n.to_string()),
                r.goodput_mbps,
                csv_cell(r.steady_mbps),
                r.seconds,
                r.bytes,
                csv_cell(r.client_cpu_s_per_gbit),
                csv_cell(r.server_cpu_s_per_gbit),
                csv_cell(r.converge_s),
                r.steal_pct.map_or(String::new(), |v| format!("{v:.1}"))
            );
        }
        std::fs::write(self.dir.join("runs.csv"), csv)?;
        Ok(())
    }
}

fn bytes_for(spec: &PathSpec, secs: f64) -> u64 {
    bytes_for_mbps(spec.rate_bps as f64 / 1e6, secs)
}

/// Bytes `secs` seconds of `mbps` carry: whole MiB, at least 64 MiB.
fn bytes_for_mbps(mbps: f64, secs: f64) -> u64 {
    let b = mbps * 1e6 / 8.0 * secs;
    ((b as u64) >> 20).max(64) << 20
}

fn timeline_chart(title: &str, report: &Report, ceiling: Option<f64>, mark: Option<f64>) -> Chart {
    let g = timeline(report, |s| s.goodput_mbps);
    let tmax = g.last().map_or(1.0, |p| p.0);
    let mut series = vec![Series { markers: false, ..Series::new("goodput", g) }];
    if let Some(c) = ceiling {
        series.push(Series::reference("iperf3 ceiling", vec![(0.0, c), (tmax, c)]));
    }
    if let Some(t) = mark {
        let top = ceiling.unwrap_or(1000.0);
        series.push(Series::reference("path change", vec![(t, 0.0), (t, top)]));
    }
    Chart {
        title: title.into(),
        x_label: "seconds".into(),
        y_label: "goodput (Mbit/s)".into(),
        log_x: false,
        series,
        right: Some((
            "active sessions N".into(),
            vec![Series { markers: false, ..Series::new("N", timeline(report, |s| s.n as f64)) }],
        )),
    }
}

/// Per-connection view over time from a `--tcp-log` CSV: the sender's
/// congestion window (backup: the client sends) or each connection's
/// receive rate (restore: the client receives, and only the server, out of
/// our reach, knows its cwnd).
fn tcpinfo_chart(csv: &str, title: &str, direction: Direction) -> Chart {
    let mut by_session: std::collections::BTreeMap<u64, Vec<(f64, f64)>> = Default::default();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let value_col = if direction == Direction::Backup { "cwnd" } else { "bytes_received" };
    let y_label = if direction == Direction::Backup { "cwnd (segments)" } else { "received (Mbit/s)" };
    let empty = || Chart {
        title: title.into(),
        x_label: "seconds".into(),
        y_label: y_label.into(),
        log_x: false,
        series: vec![],
        right: None,
    };
    let (Some(t), Some(s), Some(v)) = (col("t_s"), col("session"), col(value_col)) else {
        return empty();
    };
    let mut last: std::collections::BTreeMap<u64, (f64, f64)> = Default::default();
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        let (Some(t), Some(s), Some(v)) = (
            f.get(t).and_then(|x| x.parse::<f64>().ok()),
            f.get(s).and_then(|x| x.parse::<u64>().ok()),
            f.get(v).and_then(|x| x.parse::<f64>().ok()),
        ) else {
            continue;
        };
        if direction == Direction::Backup {
            by_session.entry(s).or_default().push((t, v));
        } else {
            // Receive rate of this connection since its previous sample.
            if let Some((t0, v0)) = last.insert(s, (t, v))
                && t > t0
            {
                by_session.entry(s).or_default().push((t, (v - v0).max(0.0) * 8.0 / (t - t0) / 1e6));
            }
        }
    }
    Chart {
        series: by_session
            .into_iter()
            .map(|(s, p)| Series { markers: false, ..Series::new(format!("session {s}"), p) })
            .collect(),
        ..empty()
    }
}

/// Runs one path's experiments: ceiling, fixed N, auto, nbdcopy; returns
/// the auto restore run (for timelines).
#[allow(clippy::too_many_arguments)]
fn path_experiments(
    rec: &mut Recorder,
    exe: &Path,
    spec: &PathSpec,
    opts: &SuiteOptions,
    fixed: &[u32],
    directions: &[Direction],
    nbdcopy_sweep: &[(u32, u32)],
    iperf_flows: &[u32],
    tcp_log: bool,
) -> anyhow::Result<()> {
    println!("path {}", spec.label());
    let mut path = BenchPath::start(spec, exe, 1 << 40)?;
    if path.congestion_per_socket() {
        println!(
            "  (congestion control {} set per socket: nbdcopy's own sends use the namespace default)",
            spec.congestion
        );
    }
    // The ceiling in each direction this path runs: iperf3 from the
    // server (`-R`) for a restore, from the client for a backup; the two
    // directions need not carry the same (queues, offloads, a busy host).
    let mut ceilings = Ceilings::default();
    for &dir in directions {
        for &f in iperf_flows {
            if let Some(r) = rec.push("ceiling", spec, path.iperf3(f, 8, dir)) {
                ceilings.add(dir, r.goodput_mbps);
            }
        }
    }
    // Whole-image runs copy `image_secs` of the measured ceiling (of the
    // rate if iperf3 failed), so a slow path does not make them last for
    // many minutes and a fast one still runs long enough to tune. One
    // size for both directions: the larger ceiling.
    let image = match ceilings.max() {
        Some(c) => bytes_for_mbps(c, opts.image_secs),
        None => bytes_for(spec, opts.image_secs),
    };
    let stop = format!("{}", opts.fixed_secs);
    let fixed = opts.fixed.as_deref().unwrap_or(fixed);
    for &dir in directions {
        for &n in fixed {
            let ns = n.to_string();
            rec.push("fixed-n", spec, path.wanblk(dir, &["-C", &ns, "--stop-after", &stop]));
        }
        let len = image.to_string();
        let log = rec.dir.join(format!("tcpinfo-{}-{:?}.csv", spec.label(), dir).to_lowercase());
        let mut args = vec!["-C", "auto", "--length", &len];
        let logs = log.to_string_lossy().to_string();
        if tcp_log {
            args.extend(["--tcp-log", &logs]);
        }
        if let Some(r) = rec.push("auto", spec, path.wanblk(dir, &args)) {
            let stem = rec.dir.join(format!("auto-{}-{:?}", spec.label(), dir).to_lowercase());
            if let Some(rep) = &r.report {
                let _ = std::fs::write(
                    stem.with_extension("json"),
                    serde_json::to_string_pretty(rep).unwrap_or_default(),
                );
                let title = format!("wanblk -C auto, {} ({:?})", spec.label(), dir);
                let _ = crate::plot::write(&timeline_chart(&title, rep, ceilings.get(dir), None), &stem);
            }
            if tcp_log && let Ok(csv) = std::fs::read_to_string(&log) {
                let stem = rec.dir.join(format!("tcpinfo-{}-{:?}", spec.label(), dir).to_lowercase());
                let what = if dir == Direction::Backup { "cwnd" } else { "receive rate" };
                let title = format!("{what} per connection, {} ({dir:?})", spec.label());
                let _ = crate::plot::write(&tcpinfo_chart(&csv, &title, dir), &stem);
            }
        }
        // The best fixed N of this run over the same whole image: the
        // fixed-N rows copy a few seconds and have no end of copy, where on
        // a lossy path sessions straggle (stop 32: the best fixed N read
        // 230 Mbit/s over 10 s at cubic 0.1 %, auto 219 over its image),
        // so auto is also set beside a fixed N that copies what it copies.
        let best = best_fixed_n(
            rec.rows
                .iter()
                .filter(|r| r.scenario == "fixed-n" && r.path == spec.label() && r.direction == dir),
        );
        if let Some(n) = best {
            let ns = n.to_string();
            rec.push("fixed-whole", spec, path.wanblk(dir, &["-C", &ns, "--length", &len]));
        }
        rec.push("nbdcopy", spec, path.nbdcopy(dir, image, None, None));
        for &(c, t) in nbdcopy_sweep {
            rec.push("nbdcopy", spec, path.nbdcopy(dir, image, Some(c), Some(t)));
        }
    }
    // The ceiling once more at the end: a host that was busy (steal) during
    // the first measurement would otherwise leave a ceiling that is too low.
    if let Some(&f) = iperf_flows.last() {
        for &dir in directions {
            let r = path.iperf3(f, 8, dir).map(|mut r| {
                r.tool += " (end)";
                r
            });
            if let Some(r) = rec.push("ceiling", spec, r) {
                ceilings.add(dir, r.goodput_mbps);
            }
        }
    }
    // Goodput vs N for this path, with auto, nbdcopy and the ceiling.
    for &dir in directions {
        let rows: Vec<&Row> =
            rec.rows.iter().filter(|r| r.path == spec.label() && r.direction == dir).collect();
        let fixed_pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.scenario == "fixed-n")
            .filter_map(|r| Some((r.n? as f64, r.steady_or_whole())))
            .collect();
        if fixed_pts.is_empty() {
            continue;
        }
        let (x0, x1) = (fixed_pts.first().map_or(1.0, |p| p.0), fixed_pts.last().map_or(1.0, |p| p.0));
        let mut series = vec![Series::new("wanblk, fixed N (steady)", fixed_pts)];
        let hline = |name: String, v: f64| Series::reference(name, vec![(x0, v), (x1, v)]);
        if let Some(a) = rows.iter().find(|r| r.scenario == "auto") {
            series.push(hline(format!("wanblk auto (N={})", a.n.unwrap_or(0)), a.goodput_mbps));
        }
        if let Some(w) = rows.iter().find(|r| r.scenario == "fixed-whole") {
            series.push(hline(format!("wanblk N={}, whole image", w.n.unwrap_or(0)), w.goodput_mbps));
        }
        if let Some(b) =
            rows.iter().filter(|r| r.scenario == "nbdcopy").map(|r| r.goodput_mbps).reduce(f64::max)
        {
            series.push(hline("nbdcopy, best".into(), b));
        }
        if let Some(c) = ceilings.get(dir) {
            series.push(hline("iperf3 ceiling".into(), c));
        }
        let stem = rec.dir.join(format!("fixed-n-{}-{:?}", spec.label(), dir).to_lowercase());
        let _ = crate::plot::write(
            &Chart {
                title: format!("goodput vs N, {} ({:?})", spec.label(), dir),
                x_label: "N (sessions)".into(),
                y_label: "goodput (Mbit/s)".into(),
                log_x: true,
                series,
                right: None,
            },
            &stem,
        );
    }
    drop(path);
    Ok(())
}

/// The best iperf3 goodput measured in each direction, Mbit/s.
#[derive(Debug, Default, Clone, Copy)]
struct Ceilings {
    restore: Option<f64>,
    backup: Option<f64>,
}

impl Ceilings {
    fn slot(&mut self, dir: Direction) -> &mut Option<f64> {
        match dir {
            Direction::Restore => &mut self.restore,
            Direction::Backup => &mut self.backup,
        }
    }

    /// Keeps `mbps` if it is the best in `dir` so far.
    fn add(&mut self, dir: Direction, mbps: f64) {
        let c = self.slot(dir);
        *c = Some(c.map_or(mbps, |c| c.max(mbps)));
    }

    /// The ceiling measured in `dir`, if any.
    fn get(self, dir: Direction) -> Option<f64> {
        match dir {
            Direction::Restore => self.restore,
            Direction::Backup => self.backup,
        }
    }

    /// The larger of the two.
    fn max(self) -> Option<f64> {
        match (self.restore, self.backup) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A path change in the middle of an auto copy, plotted, with the time
/// the tuner took to converge again.
fn change_experiment(
    rec: &mut Recorder,
    exe: &Path,
    spec: &PathSpec,
    change: &str,
    at_s: f64,
    secs: f64,
) -> anyhow::Result<()> {
    println!("path {} with `{change}` at {at_s} s", spec.label());
    let mut path = BenchPath::start(spec, exe, 1 << 40)?;
    let profile = Profile::parse(&format!("at {at_s}s {change}")).map_err(|e| anyhow::anyhow!("{e}"))?;
    let len = bytes_for(spec, secs).to_string();
    path.scenario_mut().set_profile(profile);
    let r = path.wanblk(Direction::Restore, &["-C", "auto", "--length", &len]);
    if let Some(r) = rec.push(&format!("change: {change}"), spec, r)
        && let Some(rep) = &r.report
    {
        let label = change.replace(' ', "-");
        let stem = rec.dir.join(format!("change-{label}-{}", spec.label()).to_lowercase());
        let _ = std::fs::write(
            stem.with_extension("json"),
            serde_json::to_string_pretty(rep).unwrap_or_default(),
        );
        let _ = crate::plot::write(
            &timeline_chart(&format!("auto across a change ({change} at {at_s} s)"), rep, None, Some(at_s)),
            &stem,
        );
        // Re-convergence: the last convergence after the change.
        let conv = converged_at_s(rep);
        let retunes = rep.tuning.as_ref().map_or(0, |t| t.retunes);
        let tuner = match conv {
            Some(t) if t > at_s && retunes > 0 => {
                format!("the tuner re-converged {:.1} s after the change", t - at_s)
            }
            _ => format!("the tuner's own re-tunes: {retunes} (ceilings set by --share restart its search)"),
        };
        let note = match crate::report::recovery(rep, at_s) {
            Some((best, reached, last, n)) => format!(
                "after the change: 0.9 of the best interval ({best:.0} Mbit/s) first reached after {reached:.1} s; N last changed after {last:.1} s, ending at N = {n}; {tuner}"
            ),
            None => format!("no settled interval after the change; {tuner}"),
        };
        println!("    {note}");
        let _ = std::fs::write(rec.dir.join(format!("change-{label}.txt")), note + "\n");
    }
    Ok(())
}

fn tables(rows: &[Row]) -> String {
    let mut t = String::new();
    let mut paths: Vec<String> = rows.iter().map(|r| r.path.clone()).collect();
    paths.dedup();
    paths.sort();
    paths.dedup();
    for p in paths {
        for dir in [Direction::Restore, Direction::Backup] {
            let rs: Vec<&Row> = rows.iter().filter(|r| r.path == p && r.direction == dir).collect();
            if rs.iter().all(|r| r.scenario == "ceiling") && dir == Direction::Backup {
                continue;
            }
            if rs.is_empty() {
                continue;
            }
            // Each direction against its own ceiling.
            let ceiling =
                rs.iter().filter(|r| r.scenario == "ceiling").map(|r| r.goodput_mbps).reduce(f64::max);
            let nbd_default = rs.iter().find(|r| r.tool == "nbdcopy").map(|r| r.goodput_mbps);
            let _ = writeln!(t, "\n### {p}, {dir:?}\n");
            let _ = writeln!(
                t,
                "| scenario | tool | N | goodput Mbit/s | steady Mbit/s | / ceiling | / nbdcopy default | client CPU s/Gbit | server CPU s/Gbit | converged | 95 % at s | 95 % of ceiling at s | N final at s | host steal % |"
            );
            let _ = writeln!(t, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
            for r in rs {
                let ratio = |d: Option<f64>| d.map_or("-".into(), |d| format!("{:.2}", r.goodput_mbps / d));
                let _ = writeln!(
                    t,
                    "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    r.scenario,
                    r.tool,
                    r.n.map_or("-".into(), |n| n.to_string()),
                    r.goodput_mbps,
                    cell(r.steady_mbps, 0),
                    ratio(ceiling),
                    ratio(nbd_default),
                    cell(r.client_cpu_s_per_gbit, 2),
                    cell(r.server_cpu_s_per_gbit, 2),
                    r.converge_s.map_or("-".into(), |c| format!("{c:.1} s")),
                    cell(r.time_to_95pct_s, 1),
                    cell(ceiling.and_then(|c| time_to_95pct_of(r, c)), 1),
                    cell(r.time_to_final_n_s, 1),
                    cell(r.steal_pct, 0),
                );
            }
        }
    }
    t
}

/// Seed figures across paths: goodput vs delay (Fig 11) and vs bandwidth (Fig 10).
fn grid_chart(
    rows: &[Row],
    title: &str,
    x: impl Fn(&Row) -> Option<f64>,
    x_label: &str,
    buffers: &str,
) -> Chart {
    let mut series: std::collections::BTreeMap<String, Vec<(f64, f64)>> = Default::default();
    for r in
        rows.iter().filter(|r| r.buffers == buffers && r.direction == Direction::Restore && r.loss == 0.0)
    {
        let Some(xv) = x(r) else { continue };
        let name = match r.scenario.as_str() {
            "fixed-n" => format!("wanblk N={}", r.n.unwrap_or(0)),
            "auto" => "wanblk auto".into(),
            "ceiling" => continue,
            "nbdcopy" if r.tool == "nbdcopy" => "nbdcopy default".into(),
            _ => continue,
        };
        let y = if r.scenario == "fixed-n" { r.steady_or_whole() } else { r.goodput_mbps };
        series.entry(name).or_default().push((xv, y));
    }
    let mut ceil: Vec<(f64, f64)> = Vec::new();
    for r in rows.iter().filter(|r| {
        r.buffers == buffers && r.scenario == "ceiling" && r.direction == Direction::Restore && r.loss == 0.0
    }) {
        if let Some(xv) = x(r) {
            match ceil.iter_mut().find(|p| p.0 == xv) {
                Some(p) => p.1 = p.1.max(r.goodput_mbps),
                None => ceil.push((xv, r.goodput_mbps)),
            }
        }
    }
    let mut out: Vec<Series> = series
        .into_iter()
        .map(|(n, mut p)| {
            p.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series::new(n, p)
        })
        .collect();
    if !ceil.is_empty() {
        ceil.sort_by(|a, b| a.0.total_cmp(&b.0));
        out.push(Series { dashed: true, ..Series::new("iperf3 ceiling", ceil) });
    }
    Chart {
        title: format!("{title} ({buffers} socket buffers, restore)"),
        x_label: x_label.into(),
        y_label: "goodput (Mbit/s)".into(),
        log_x: false,
        series: out,
        right: None,
    }
}

/// One path of a grid: the path, the fixed N values, the nbdcopy
/// (connections, threads) sweep and the iperf3 flow counts.
type PathPlan<'a> = (PathSpec, &'a [u32], &'a [(u32, u32)], &'a [u32]);

/// Runs the suite.
///
/// # Errors
/// Creating the output directory; individual failed runs are recorded and
/// reported, not fatal.
pub fn run(exe: &Path, opts: &SuiteOptions) -> anyhow::Result<()> {
    let known: &[&str] = match opts.level {
        Level::Quick => &QUICK_PARTS,
        Level::Full => &FULL_PARTS,
    };
    let profile = match opts.level {
        Level::Quick => "quick",
        Level::Full => "full",
    };
    crate::parts::check(&opts.parts, known, profile)?;
    std::fs::create_dir_all(&opts.out_dir).with_context(|| format!("creating {}", opts.out_dir.display()))?;
    let mut rec = Recorder { dir: opts.out_dir.clone(), rows: Vec::new(), failures: Vec::new() };
    let both = [Direction::Restore, Direction::Backup];
    let main = PathSpec::new(1000, 50.0);
    let part = |p: &str| crate::parts::selects(&opts.parts, p);
    match opts.level {
        Level::Quick => {
            if part("main") {
                path_experiments(
                    &mut rec,
                    exe,
                    &main,
                    opts,
                    &[1, 2, 4, 8, 16, 32],
                    &both,
                    &[(4, 4), (8, 8), (16, 16)],
                    &[1, 8],
                    true,
                )?;
            }
            if part("change") {
                change_experiment(&mut rec, exe, &main, "delay 200ms", 30.0, 60.0)?;
            }
        }
        Level::Full => {
            let fixed = [1, 2, 4, 8, 16, 32, 64, 128];
            let sweep = [(1, 1), (4, 4), (8, 8), (16, 16), (32, 32), (64, 64)];
            if part("main") {
                path_experiments(
                    &mut rec,
                    exe,
                    &main,
                    opts,
                    &fixed,
                    &both,
                    &sweep,
                    &[1, 2, 4, 8, 16, 32],
                    true,
                )?;
            }
            // BDL-APT Fig 11 (900 Mbit/s, one-way delay 10..100 ms) and Fig 10
            // (10 ms one way, 200..1000 Mbit/s), with distribution-default and
            // the seeds' 512 KB socket buffers; then random loss with cubic
            // and bbr on the main path. (paths, fixed N, nbdcopy sweep, iperf3 flows)
            let mut grid: Vec<PathPlan<'_>> = Vec::new();
            for (buffers, suffix) in
                [(SysctlProfile::Default, ""), (SysctlProfile::Capped(512 << 10), "-capped")]
            {
                for delay in [10.0, 20.0, 50.0, 100.0].into_iter().filter(|_| part(&format!("delay{suffix}")))
                {
                    grid.push((
                        PathSpec { sysctl: buffers, ..PathSpec::new(900, delay) },
                        &fixed,
                        &sweep[1..4],
                        &[1, 8],
                    ));
                }
                for rate in
                    [200, 400, 600, 800, 1000].into_iter().filter(|_| part(&format!("bandwidth{suffix}")))
                {
                    grid.push((
                        PathSpec { sysctl: buffers, ..PathSpec::new(rate, 10.0) },
                        &fixed,
                        &sweep[1..4],
                        &[1, 8],
                    ));
                }
            }
            for cc in ["cubic", "bbr"].into_iter().filter(|_| part("loss")) {
                for loss in [0.0001, 0.001] {
                    let spec = PathSpec { loss, congestion: cc.into(), ..PathSpec::new(1000, 50.0) };
                    grid.push((spec, &[1, 8, 32], &[], &[8]));
                }
            }
            for (spec, fixed, sweep, flows) in grid {
                let r = path_experiments(
                    &mut rec,
                    exe,
                    &spec,
                    opts,
                    fixed,
                    &[Direction::Restore],
                    sweep,
                    flows,
                    false,
                );
                if let Err(e) = r {
                    rec.failures.push(format!("{}: {e:#}", spec.label()));
                }
            }
            if part("change") {
                change_experiment(&mut rec, exe, &main, "delay 100ms", 30.0, 90.0)?;
                change_experiment(&mut rec, exe, &main, "rate 500mbit", 30.0, 70.0)?;
            }
            for buffers in ["default", "capped-512K"] {
                let delay_rows: Vec<Row> = rec.rows.iter().filter(|r| r.rate_mbps == 900).cloned().collect();
                let has = |rows: &[Row]| rows.iter().any(|r| r.buffers == buffers);
                let _ = has(&delay_rows).then(|| {
                    crate::plot::write(
                        &grid_chart(
                            &delay_rows,
                            "goodput vs one-way delay, 900 Mbit/s",
                            |r| Some(r.delay_ms),
                            "one-way delay (ms)",
                            buffers,
                        ),
                        &rec.dir.join(format!("fig11-delay-{buffers}")),
                    )
                });
                let bw_rows: Vec<Row> =
                    rec.rows.iter().filter(|r| r.delay_ms == 10.0 && r.rate_mbps != 900).cloned().collect();
                let _ = has(&bw_rows).then(|| {
                    crate::plot::write(
                        &grid_chart(
                            &bw_rows,
                            "goodput vs bandwidth, 10 ms one way",
                            |r| Some(r.rate_mbps as f64),
                            "bottleneck (Mbit/s)",
                            buffers,
                        ),
                        &rec.dir.join(format!("fig10-bandwidth-{buffers}")),
                    )
                });
            }
        }
    }
    rec.flush()?;
    let mut md = String::from(
        "# wanblk-bench results (generated)\n\nEvery row measured in one run of `wanblk-bench run`; see runs.csv for all fields.\n",
    );
    md += &tables(&rec.rows);
    if !rec.failures.is_empty() {
        md += "\n## Runs that failed\n\n";
        for f in &rec.failures {
            let _ = writeln!(md, "- {f}");
        }
    }
    std::fs::write(opts.out_dir.join("tables.md"), md)?;
    println!("\nwrote {}/runs.csv, tables.md and plots", opts.out_dir.display());
    if !rec.failures.is_empty() {
        println!("{} run(s) failed:", rec.failures.len());
        for f in &rec.failures {
            println!("  {f}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(scenario: &str, direction: Direction, goodput_mbps: f64) -> Row {
        Row {
            scenario: scenario.into(),
            path: "1000M-50ms-default-cubic".into(),
            rate_mbps: 1000,
            delay_ms: 50.0,
            buffers: "default".into(),
            cc: "cubic".into(),
            loss: 0.0,
            direction,
            tool: if scenario == "ceiling" { "iperf3 -P 8" } else { "wanblk -C auto" }.into(),
            n: Some(8),
            goodput_mbps,
            steady_mbps: None,
            seconds: 8.0,
            bytes: 1 << 30,
            client_cpu_s_per_gbit: None,
            server_cpu_s_per_gbit: None,
            converge_s: None,
            time_to_95pct_s: None,
            time_to_final_n_s: None,
            steal_pct: None,
            progress: Vec::new(),
        }
    }

    #[test]
    fn the_best_fixed_n_among_equals_moved_the_most() {
        let fixed = |n: u64, whole: f64, steady: f64| Row {
            n: Some(n),
            steady_mbps: Some(steady),
            ..row("fixed-n", Direction::Restore, whole)
        };
        // A 200 Mbit/s path: every N reads the link once steady.
        let rows =
            [fixed(1, 121.0, 123.0), fixed(2, 188.0, 190.6), fixed(8, 180.0, 191.2), fixed(128, 88.0, 191.4)];
        assert_eq!(best_fixed_n(rows.iter()), Some(2));
        // A path that needs many: the steady rate decides.
        let rows = [fixed(8, 500.0, 520.0), fixed(32, 700.0, 800.0), fixed(64, 690.0, 940.0)];
        assert_eq!(best_fixed_n(rows.iter()), Some(64));
        // Equal in both: the fewest sessions.
        let rows = [fixed(16, 900.0, 950.0), fixed(8, 900.0, 950.0)];
        assert_eq!(best_fixed_n(rows.iter()), Some(8));
        assert_eq!(best_fixed_n([].iter()), None);
    }

    /// The ratio column of the `auto` row in the table of `dir`.
    fn auto_ratio(table: &str, dir: &str) -> String {
        let section = table.split("### ").find(|s| s.contains(&format!(", {dir}"))).expect(dir);
        let line = section.lines().find(|l| l.starts_with("| auto")).expect("auto row");
        line.split('|').nth(6).unwrap().trim().to_string()
    }

    #[test]
    fn each_direction_is_compared_with_its_own_ceiling() {
        let rows = [
            row("ceiling", Direction::Restore, 900.0),
            row("ceiling", Direction::Backup, 450.0),
            row("auto", Direction::Restore, 450.0),
            row("auto", Direction::Backup, 450.0),
        ];
        let t = tables(&rows);
        assert_eq!(auto_ratio(&t, "Restore"), "0.50", "{t}");
        assert_eq!(auto_ratio(&t, "Backup"), "1.00", "{t}");
    }

    #[test]
    fn the_tables_show_when_the_run_reached_the_path() {
        let rows = [
            row("ceiling", Direction::Restore, 900.0),
            Row {
                time_to_95pct_s: Some(1.3),
                time_to_final_n_s: Some(7.5),
                // 0.5 s of nothing, then 800 Mbit/s, from 1.5 s on 1000:
                // 0.95 of the 900 ceiling over the trailing 0.25 s from
                // 1.57 s on, the next point of the trace at 1.6 s.
                progress: (0..=60)
                    .map(|i| {
                        let t_s = f64::from(i) * 0.05;
                        let mbit = if t_s <= 0.5 {
                            0.0
                        } else if t_s <= 1.5 {
                            (t_s - 0.5) * 800.0
                        } else {
                            800.0 + (t_s - 1.5) * 1000.0
                        };
                        wanblk_tune::control::ProgressPoint {
                            t_s,
                            bytes: (mbit * 1e6 / 8.0) as u64,
                            from_tcp: true,
                        }
                    })
                    .collect(),
                ..row("auto", Direction::Restore, 850.0)
            },
        ];
        let t = tables(&rows);
        assert!(t.contains("| 95 % at s | 95 % of ceiling at s | N final at s |"), "{t}");
        let auto = t.lines().find(|l| l.starts_with("| auto")).unwrap();
        let cells: Vec<&str> = auto.split('|').map(str::trim).collect();
        assert_eq!((cells[11], cells[12], cells[13]), ("1.3", "1.6", "7.5"), "{auto}");
        let ceiling = t.lines().find(|l| l.starts_with("| ceiling")).unwrap();
        assert!(ceiling.contains("| - | - | - |"), "{ceiling}");
    }

    #[test]
    fn ceilings_keep_the_best_per_direction() {
        let mut c = Ceilings::default();
        assert_eq!(c.max(), None);
        c.add(Direction::Restore, 900.0);
        c.add(Direction::Restore, 950.0);
        c.add(Direction::Restore, 920.0);
        assert_eq!((c.get(Direction::Restore), c.get(Direction::Backup)), (Some(950.0), None));
        c.add(Direction::Backup, 400.0);
        assert_eq!((c.get(Direction::Backup), c.max()), (Some(400.0), Some(950.0)));
    }
}
