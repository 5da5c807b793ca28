//! The iSCSI benchmark behind `wanblk-bench run --profile iscsi`: wanblk's
//! initiator against tgtd across the emulated long-fat path.
//!
//! tgtd runs in the server namespace with its portal on the server address
//! and one LUN on tgt's null store (1 TiB, writes dropped, nothing on
//! disk), so the path and the protocol are measured, not a disk. Its limits
//! are raised as a long-fat-network target needs: 16 MiB bursts and data
//! segments, InitialR2T=No, 64 connections per session, 512 queued
//! commands. Every copy runs with `--no-sparse`: the null store's reads
//! may be zeroes, which would otherwise be detected and not counted as
//! data.
//!
//! The initiator declares a MaxRecvDataSegmentLength of 64 KiB (Data-In
//! PDUs of at most 64 KiB; wanblk's default) in the first two
//! experiments: tgtd 1.0.85 writes one PDU at a time and retries on a full
//! socket without waiting. With 16 MiB (the first default) it burns most
//! of a core and caps a restore near 330 Mbit/s whatever the number of
//! connections; with 1 MiB (the second) the connections still wait on
//! each other while they are in slow start (the first ~3 s of a copy on a
//! 100 ms path); 64 KiB fits a fresh socket's send buffer. The third
//! experiment measures PDU sizes.
//!
//! Three experiments:
//!
//! - **The iSCSI read-latency study, Fig 9**: sequential read throughput against the size of
//!   one READ command, one command in flight (the seed's synchronous
//!   reads), on 16 ms one way with socket buffers capped at 1 MB, next to
//!   the seed's latency model B / (4 d + B / S) with S the socket
//!   throughput iperf3 measures on the same path; and the same sizes with
//!   4 commands in flight (wanblk's default pipelining).
//! - **Sessions against MC/S** under `--connections auto` on 1 Gbit/s,
//!   50 ms one way, restore and backup, with fixed N for reference and
//!   iperf3 with 8 flows as the ceiling.
//! - **Data-In PDU size**: restore over 4 sessions on the same path with
//!   MaxRecvDataSegmentLength from 16 MiB (tgt's maximum) down to
//!   64 KiB, with tgtd's CPU time.
//!
//! Writes `runs.csv`, `tables.md` and SVG/PNG plots to the output
//! directory.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use wanblk_copy::Report;
use wanblk_netem::{Side, SysctlProfile};
use wanblk_testkit::tgt::{NULL_LUN_SIZE, Tgt};

use crate::path::{BenchPath, Direction, Measured, PathSpec};
use crate::plot::{Chart, Series};
use crate::report::{cell, converged_at_s, csv_cell, steady_after, timeline};

/// The target's name.
const IQN: &str = "iqn.2024-01.org.wanblk:bench-null";

/// The portal port in the server namespace.
const PORTAL_PORT: u16 = 3260;

/// READ command sizes of the iSCSI read-latency study's Fig 9 (its "125 KB" is 128000 bytes).
const FIG9_SIZES: [u32; 5] = [128_000, 512 << 10, 1 << 20, 2 << 20, 4 << 20];

/// The Data-In PDU limit declared in the Fig 9 and modes experiments
/// (see the module documentation).
const DATA_SEGMENT: u32 = 64 << 10;

/// MaxRecvDataSegmentLength values of the PDU experiment: tgt's maximum
/// (16 MiB - 1, wanblk's former default) down to 64 KiB.
const SEGMENTS: [Option<u32>; 5] =
    [Some(16_777_215), Some(4 << 20), Some(1 << 20), Some(256 << 10), Some(64 << 10)];

/// `--iscsi-param MaxRecvDataSegmentLength=N`.
fn segment_args(seg: u32) -> [String; 2] {
    ["--iscsi-param".into(), format!("MaxRecvDataSegmentLength={seg}")]
}

/// Benchmark settings.
#[derive(Debug, Clone)]
pub struct IscsiBenchOptions {
    /// Output directory (CSV, plots, tables.md).
    pub out_dir: PathBuf,
    /// Seconds each fixed run copies (`--stop-after`): every Fig 9 point
    /// and every fixed N.
    pub fixed_secs: f64,
    /// Seconds of line rate each `-C auto` copy moves (`--length`).
    pub image_secs: f64,
}

/// One row of `runs.csv`.
#[derive(Debug, Clone)]
struct Row {
    /// `fig9`, `modes`, `segment` or `ceiling`.
    experiment: String,
    /// Path label.
    path: String,
    /// One-way delay, ms.
    delay_ms: f64,
    direction: Direction,
    /// `sessions`, `mcs`, or empty for iperf3.
    mode: String,
    /// Connections asked for: a number or `auto`.
    asked: String,
    /// Commands in flight per connection.
    requests: Option<u32>,
    /// Bytes per READ/WRITE command.
    request_size: Option<u32>,
    /// MaxRecvDataSegmentLength declared (None: wanblk's default, 64 KiB).
    data_segment: Option<u32>,
    /// Final N.
    n: Option<u64>,
    /// Payload over wall time of the copy, Mbit/s.
    goodput_mbps: f64,
    /// Mean of the samples after the first 30 % of the run (after
    /// convergence for auto), Mbit/s.
    steady_mbps: Option<f64>,
    /// The iSCSI read-latency study's model for this point, Mbit/s (Fig 9 rows).
    model_mbps: Option<f64>,
    seconds: f64,
    bytes: u64,
    client_cpu_s_per_gbit: Option<f64>,
    server_cpu_s_per_gbit: Option<f64>,
    /// tgtd's CPU time over the copy's wall time, % of one core.
    server_cpu_pct: Option<f64>,
    converge_s: Option<f64>,
    /// The wanblk report.
    report: Option<Report>,
}

impl Row {
    /// Steady goodput if known, else the whole run's.
    fn best(&self) -> f64 {
        self.steady_mbps.unwrap_or(self.goodput_mbps)
    }
}

/// The iSCSI read-latency study's latency model: one READ of `b` bytes costs 4 one-way delays
/// plus its transfer time at the socket throughput `s` (bytes/s).
fn seed_model(b: f64, d_s: f64, s_bytes: f64) -> f64 {
    b / (4.0 * d_s + b / s_bytes)
}

/// A path with tgtd behind it. Fields drop in order: tgtd stops before the
/// namespaces go.
struct IscsiPath {
    tgt: Tgt,
    path: BenchPath,
    uri: String,
    exe: PathBuf,
    work: tempfile::TempDir,
}

impl IscsiPath {
    /// Starts the emulated path (its NBD target stays idle: the path gives
    /// the namespaces and iperf3) and tgtd in the server namespace.
    fn start(spec: &PathSpec, exe: &Path) -> anyhow::Result<IscsiPath> {
        let mut path = BenchPath::start(spec, exe, 1 << 30)?;
        let scenario = &*path.scenario_mut();
        let portal = SocketAddr::from((scenario.server_addr(), PORTAL_PORT));
        let tgt = Tgt::launch(portal, |cmd| {
            wanblk_sys::process::terminate_with_parent(cmd);
            scenario.enter(Side::Server, cmd)
        })
        .context("starting tgtd in the server namespace")?;
        tgt.try_null_target(1, IQN, None)?;
        tgt.try_lfn(1)?;
        tgt.try_set(1, "MaxConnections", "64")?;
        // tgt's maximum; the CmdSN window of one MC/S session serves every
        // connection's commands.
        tgt.try_set(1, "MaxQueueCmd", "512")?;
        let uri = tgt.uri(IQN);
        let work = tempfile::Builder::new().prefix("wanblk-bench-iscsi-").tempdir()?;
        Ok(IscsiPath { tgt, path, uri, exe: exe.to_path_buf(), work })
    }

    /// `wanblk copy` in the client namespace in `direction` with `args`;
    /// a restore reads from the LUN into `null:`, a backup writes
    /// `random:` data to the LUN.
    fn wanblk(&mut self, direction: Direction, args: &[&str]) -> anyhow::Result<Row> {
        let report = self.work.path().join("report.json");
        let _ = std::fs::remove_file(&report);
        let (src, dst) = match direction {
            Direction::Restore => (self.uri.clone(), "null:".to_string()),
            Direction::Backup => (format!("random:{NULL_LUN_SIZE}"), self.uri.clone()),
        };
        let mut c = Command::new(&self.exe);
        c.arg("copy").arg(&src).arg(&dst).args(args).args(["--no-sparse", "--no-progress", "--report"]);
        c.arg(&report).args(["--congestion", &self.path.spec().congestion]);
        let Measured { out, wall, client_cpu, server_cpu: server_s, .. } =
            self.path.measured(&mut c, self.tgt.pid())?;
        if !crate::report::copy_ok(out.status, args) {
            bail!("wanblk copy {args:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        let r = crate::report::read(&report, &format!("wanblk copy {args:?} ({direction:?})"))?;
        let (seconds, bytes) = (r.seconds, r.data_bytes);
        let converge_s = converged_at_s(&r);
        let gbit = bytes as f64 * 8.0 / 1e9;
        let per = |cpu: Option<f64>| cpu.filter(|_| gbit > 0.0).map(|c| c / gbit);
        let spec = self.path.spec();
        Ok(Row {
            experiment: String::new(),
            path: spec.label(),
            delay_ms: spec.delay_ms,
            direction,
            mode: String::new(),
            asked: String::new(),
            requests: Some(r.requests as u32),
            request_size: Some(r.request_size),
            data_segment: args
                .iter()
                .find_map(|a| a.strip_prefix("MaxRecvDataSegmentLength="))
                .and_then(|v| v.parse().ok()),
            n: Some(r.connections as u64),
            goodput_mbps: r.goodput_mbps,
            // After convergence; a copy that converged at its very end has
            // no samples after it: then after the first 30 %.
            steady_mbps: converge_s
                .and_then(|c| steady_after(&r, c))
                .or_else(|| steady_after(&r, 0.3 * seconds)),
            model_mbps: None,
            seconds,
            bytes,
            client_cpu_s_per_gbit: per(Some(client_cpu)),
            server_cpu_s_per_gbit: per(server_s),
            server_cpu_pct: server_s.filter(|_| wall > 0.0).map(|s| s / wall * 100.0),
            converge_s,
            report: Some(r),
        })
    }

    /// iperf3 with `flows` flows for 8 s in `direction`.
    fn iperf3(&self, flows: u32, direction: Direction) -> anyhow::Result<Row> {
        let r = self.path.iperf3(flows, 8, direction)?;
        let spec = self.path.spec();
        Ok(Row {
            experiment: "ceiling".into(),
            path: spec.label(),
            delay_ms: spec.delay_ms,
            direction,
            mode: String::new(),
            asked: flows.to_string(),
            requests: None,
            request_size: None,
            data_segment: None,
            n: Some(u64::from(flows)),
            goodput_mbps: r.goodput_mbps,
            steady_mbps: None,
            model_mbps: None,
            seconds: r.seconds,
            bytes: r.bytes,
            client_cpu_s_per_gbit: None,
            server_cpu_s_per_gbit: None,
            server_cpu_pct: None,
            converge_s: None,
            report: None,
        })
    }
}

/// Collects rows and rewrites `runs.csv` after each, so an interrupted run
/// keeps what it measured.
struct Recorder {
    dir: PathBuf,
    rows: Vec<Row>,
    failures: Vec<String>,
}

impl Recorder {
    fn push(&mut self, label: &str, r: anyhow::Result<Row>) -> Option<Row> {
        match r {
            Ok(row) => {
                println!(
                    "  {:<7} {:<44} {:>7.1} Mbit/s{}{}",
                    format!("{:?}", row.direction).to_lowercase(),
                    label,
                    row.goodput_mbps,
                    row.steady_mbps.map_or(String::new(), |s| format!(" (steady {s:.1})")),
                    row.n.map_or(String::new(), |n| format!(" N={n}"))
                );
                self.rows.push(row.clone());
                if let Err(e) = self.flush() {
                    println!("  (could not write runs.csv: {e:#})");
                }
                Some(row)
            }
            Err(e) => {
                let msg = format!("{label}: {e:#}");
                println!("  FAILED {msg}");
                self.failures.push(msg);
                None
            }
        }
    }

    fn flush(&self) -> anyhow::Result<()> {
        let mut csv = String::from(
            "experiment,path,delay_ms,direction,mode,connections,requests,request_size,data_segment,n,\
goodput_mbps,steady_mbps,model_mbps,seconds,bytes,client_cpu_s_per_gbit,server_cpu_s_per_gbit,\
server_cpu_pct,converge_s\n",
        );
        let u = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
        for r in &self.rows {
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},{},{},{},{:.2},{},{},{:.2},{},{},{},{},{}",
                r.experiment,
                r.path,
                r.delay_ms,
                format!("{:?}", r.direction).to_lowercase(),
                r.mode,
                r.asked,
                u(r.requests.map(u64::from)),
                u(r.request_size.map(u64::from)),
                u(r.data_segment.map(u64::from)),
                u(r.n),
                r.goodput_mbps,
                csv_cell(r.steady_mbps),
                csv_cell(r.model_mbps),
                r.seconds,
                r.bytes,
                csv_cell(r.client_cpu_s_per_gbit),
                csv_cell(r.server_cpu_s_per_gbit),
                csv_cell(r.server_cpu_pct),
                csv_cell(r.converge_s)
            );
        }
        std::fs::write(self.dir.join("runs.csv"), csv)?;
        Ok(())
    }
}

/// The iSCSI read-latency study's Fig 9 on 1 Gbit/s, 16 ms one way, 1 MB socket buffers.
fn fig9(rec: &mut Recorder, exe: &Path, opts: &IscsiBenchOptions) -> anyhow::Result<()> {
    let spec = PathSpec { sysctl: SysctlProfile::Capped(1 << 20), ..PathSpec::new(1000, 16.0) };
    println!("iSCSI read-latency study, Fig 9: READ command size, {}", spec.label());
    let mut p = IscsiPath::start(&spec, exe)?;
    let socket = rec.push("iperf3 -P 1 (socket throughput S)", p.iperf3(1, Direction::Restore));
    let s_bytes = socket.as_ref().map(|r| r.goodput_mbps * 1e6 / 8.0);
    let d = spec.delay_ms / 1e3;
    let stop = opts.fixed_secs.to_string();
    let [p1, p2] = segment_args(DATA_SEGMENT);
    for requests in [1u32, 4] {
        for size in FIG9_SIZES {
            let (rs, ss) = (requests.to_string(), size.to_string());
            let args = [
                "-C",
                "1",
                "--requests",
                &rs,
                "--request-size",
                &ss,
                "--stop-after",
                &stop,
                p1.as_str(),
                &p2,
            ];
            let label = format!("-C 1 --requests {requests} --request-size {size}");
            let r = p.wanblk(Direction::Restore, &args).map(|mut r| {
                r.experiment = "fig9".into();
                r.mode = "sessions".into();
                r.asked = "1".into();
                r.model_mbps = s_bytes.map(|s| seed_model(f64::from(size), d, s) * 8.0 / 1e6);
                r
            });
            rec.push(&label, r);
        }
    }
    drop(p);
    Ok(())
}

/// Sessions against MC/S on 1 Gbit/s, 50 ms one way, default buffers.
fn modes(rec: &mut Recorder, exe: &Path, opts: &IscsiBenchOptions) -> anyhow::Result<()> {
    let spec = PathSpec::new(1000, 50.0);
    println!("sessions vs MC/S, {}", spec.label());
    let mut p = IscsiPath::start(&spec, exe)?;
    for dir in [Direction::Restore, Direction::Backup] {
        for flows in [1, 8] {
            let r = p.iperf3(flows, dir);
            rec.push(&format!("iperf3 -P {flows}"), r);
        }
    }
    let stop = opts.fixed_secs.to_string();
    let image = ((spec.rate_bps as f64 / 8.0 * opts.image_secs) as u64 >> 20).max(64) << 20;
    let len = image.to_string();
    // A safety net: a mode that crawls still ends.
    let cap = (opts.image_secs * 6.0).max(60.0).to_string();
    let [p1, p2] = segment_args(DATA_SEGMENT);
    for dir in [Direction::Restore, Direction::Backup] {
        for (mode, asked) in
            [("sessions", "1"), ("sessions", "4"), ("sessions", "8"), ("mcs", "4"), ("mcs", "8")]
        {
            let args = ["--iscsi-mode", mode, "-C", asked, "--stop-after", &stop, &p1, &p2];
            let r = p.wanblk(dir, &args).map(|mut r| {
                r.experiment = "modes".into();
                (r.mode, r.asked) = (mode.into(), asked.into());
                r
            });
            rec.push(&format!("--iscsi-mode {mode} -C {asked}"), r);
        }
        for mode in ["sessions", "mcs"] {
            let args = ["--iscsi-mode", mode, "-C", "auto", "--length", &len, "--stop-after", &cap, &p1, &p2];
            let r = p.wanblk(dir, &args).map(|mut r| {
                r.experiment = "modes".into();
                (r.mode, r.asked) = (mode.into(), "auto".into());
                r
            });
            let row = rec.push(&format!("--iscsi-mode {mode} -C auto --length {len}"), r);
            if let Some(rep) = row.and_then(|r| r.report) {
                let name = format!("auto-{mode}-{:?}.json", dir).to_lowercase();
                let _ = std::fs::write(
                    rec.dir.join(name),
                    serde_json::to_string_pretty(&rep).unwrap_or_default(),
                );
            }
        }
    }
    // Data-In PDU size: restore over 4 sessions.
    for seg in SEGMENTS {
        let seg_args = seg.map(segment_args);
        let mut args = vec!["-C", "4", "--stop-after", &stop];
        if let Some([a, b]) = &seg_args {
            args.extend([a.as_str(), b.as_str()]);
        }
        let r = p.wanblk(Direction::Restore, &args).map(|mut r| {
            r.experiment = "segment".into();
            (r.mode, r.asked) = ("sessions".into(), "4".into());
            r
        });
        let what = seg.map_or("default (16 MiB)".to_string(), |s| s.to_string());
        rec.push(&format!("-C 4, MaxRecvDataSegmentLength {what}"), r);
    }
    drop(p);
    Ok(())
}

fn mb(mbps: f64) -> f64 {
    mbps / 8.0
}

fn fig9_chart(rows: &[Row]) -> Option<Chart> {
    let pts = |requests: u32| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| r.experiment == "fig9" && r.requests == Some(requests))
            .filter_map(|r| Some((f64::from(r.request_size?) / 1024.0, mb(r.best()))))
            .collect()
    };
    let (one, four) = (pts(1), pts(4));
    if one.is_empty() && four.is_empty() {
        return None;
    }
    let socket = rows
        .iter()
        .find(|r| r.experiment == "ceiling" && r.delay_ms == 16.0 && r.n == Some(1))
        .map(|r| r.goodput_mbps);
    let mut series = vec![
        Series::new("wanblk, 1 command in flight", one),
        Series::new("wanblk, 4 commands in flight", four),
    ];
    if let Some(s) = socket {
        let (s_b, d) = (s * 1e6 / 8.0, 0.016);
        let xs: Vec<f64> = (0..=40).map(|i| 125.0 * (4096.0f64 / 125.0).powf(f64::from(i) / 40.0)).collect();
        let model = |k: f64| -> Vec<(f64, f64)> {
            xs.iter().map(|&x| (x, x * 1024.0 / (k * d + x * 1024.0 / s_b) / 1e6)).collect()
        };
        series.push(Series::reference("read-latency model B/(4d+B/S)", model(4.0)));
        series.push(Series::reference("one round trip per command B/(2d+B/S)", model(2.0)));
        series.push(Series::reference(
            format!("socket S (iperf3, 1 flow): {:.1} MB/s", mb(s)),
            vec![(125.0, mb(s)), (4096.0, mb(s))],
        ));
    }
    Some(Chart {
        title: "sequential read vs READ command size, 16 ms one way, 1 MB buffers".into(),
        x_label: "READ command size (KiB)".into(),
        y_label: "throughput (MB/s)".into(),
        log_x: true,
        series,
        right: None,
    })
}

fn modes_chart(rows: &[Row], dir: Direction) -> Option<Chart> {
    let rs: Vec<&Row> = rows.iter().filter(|r| r.experiment == "modes" && r.direction == dir).collect();
    if rs.is_empty() {
        return None;
    }
    let fixed = |mode: &str| -> Vec<(f64, f64)> {
        let mut v: Vec<(f64, f64)> = rs
            .iter()
            .filter(|r| r.asked != "auto" && (r.mode == mode || r.asked == "1"))
            .filter_map(|r| Some((r.asked.parse::<f64>().ok()?, r.best())))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let mut series = vec![
        Series::new("sessions, fixed N (steady)", fixed("sessions")),
        Series::new("MC/S, fixed N (steady)", fixed("mcs")),
    ];
    let hline = |name: String, v: f64| Series::reference(name, vec![(1.0, v), (8.0, v)]);
    for mode in ["sessions", "mcs"] {
        if let Some(a) = rs.iter().find(|r| r.asked == "auto" && r.mode == mode) {
            let name = if mode == "mcs" { "MC/S" } else { "sessions" };
            let label = format!("{name} -C auto, whole copy (ended at N={})", a.n.unwrap_or(0));
            series.push(hline(label, a.goodput_mbps));
        }
    }
    if let Some(c) = rows
        .iter()
        .find(|r| r.experiment == "ceiling" && r.delay_ms == 50.0 && r.direction == dir && r.n == Some(8))
    {
        series.push(hline("iperf3 -P 8".into(), c.goodput_mbps));
    }
    Some(Chart {
        title: format!("iSCSI sessions vs MC/S, 1 Gbit/s, 50 ms one way ({dir:?})"),
        x_label: "N (connections)".into(),
        y_label: "goodput (Mbit/s)".into(),
        log_x: true,
        series,
        right: None,
    })
}

fn segment_chart(rows: &[Row]) -> Option<Chart> {
    let rs: Vec<&Row> = rows.iter().filter(|r| r.experiment == "segment").collect();
    if rs.is_empty() {
        return None;
    }
    let x = |r: &Row| {
        f64::from(r.data_segment.unwrap_or(wanblk_iscsi_proto::keys::DEFAULT_RECV_SEGMENT)) / 1024.0
    };
    let mut goodput: Vec<(f64, f64)> = rs.iter().map(|r| (x(r), r.best())).collect();
    let mut cpu: Vec<(f64, f64)> = rs.iter().filter_map(|r| Some((x(r), r.server_cpu_pct?))).collect();
    goodput.sort_by(|a, b| a.0.total_cmp(&b.0));
    cpu.sort_by(|a, b| a.0.total_cmp(&b.0));
    Some(Chart {
        title: "restore over 4 sessions vs Data-In PDU size, 1 Gbit/s, 50 ms one way".into(),
        x_label: "MaxRecvDataSegmentLength (KiB)".into(),
        y_label: "goodput, steady (Mbit/s)".into(),
        log_x: true,
        series: vec![Series::new("goodput", goodput)],
        right: Some(("tgtd CPU (% of one core)".into(), vec![Series::new("tgtd CPU", cpu)])),
    })
}

fn timeline_chart(rows: &[Row], dir: Direction) -> Option<Chart> {
    let mut series = Vec::new();
    let mut right = Vec::new();
    for r in rows.iter().filter(|r| r.experiment == "modes" && r.asked == "auto" && r.direction == dir) {
        let Some(rep) = &r.report else { continue };
        let name = if r.mode == "mcs" { "MC/S" } else { "sessions" };
        series.push(Series {
            markers: false,
            ..Series::new(format!("{name} goodput"), timeline(rep, |s| s.goodput_mbps))
        });
        right.push(Series {
            markers: false,
            ..Series::new(format!("{name} N"), timeline(rep, |s| s.n as f64))
        });
    }
    (!series.is_empty()).then(|| Chart {
        title: format!("-C auto over time, sessions vs MC/S, 1 Gbit/s, 50 ms ({dir:?})"),
        x_label: "seconds".into(),
        y_label: "goodput (Mbit/s)".into(),
        log_x: false,
        series,
        right: Some(("connections N".into(), right)),
    })
}

fn tables(rows: &[Row], failures: &[String], context: &str) -> String {
    let mut t = format!(
        "# wanblk iSCSI benchmark (generated by `wanblk-bench run --profile iscsi`)\n\n\
wanblk's iSCSI initiator against tgtd (null backing store: nothing touches a disk) in the \
server namespace of wanblk's emulated path; every row measured in one run. Copies use \
`--no-sparse` so every byte read is carried and counted. The Fig 9 and sessions/MC/S copies \
declare MaxRecvDataSegmentLength={DATA_SEGMENT} (Data-In PDUs of at most 64 KiB; the PDU-size \
table below shows why). See runs.csv for every field.\n\n{context}\n",
    );
    let fig: Vec<&Row> = rows.iter().filter(|r| r.experiment == "fig9").collect();
    if !fig.is_empty() {
        let socket = rows.iter().find(|r| r.experiment == "ceiling" && r.delay_ms == 16.0 && r.n == Some(1));
        let _ = writeln!(
            t,
            "\n## iSCSI read-latency study, Fig 9: READ command size, 1 Gbit/s, 16 ms one way, 1 MB socket buffers\n"
        );
        let _ = writeln!(
            t,
            "One session, restore (LUN to `null:`), each point copies for a fixed time; throughput is the \
steady mean after the first 30 % of the run, in MB/s (10^6 bytes/s) like the seed. The model is \
the seed's B / (4d + B/S) with d = 16 ms and S = the socket throughput of one iperf3 flow on the \
same path{}.\n",
            socket.map_or(String::new(), |s| format!(" ({:.1} MB/s)", mb(s.goodput_mbps)))
        );
        let _ = writeln!(
            t,
            "| READ size (bytes) | 1 in flight MB/s | model MB/s | measured / model | 4 in flight MB/s | 4 vs 1 |"
        );
        let _ = writeln!(t, "|---:|---:|---:|---:|---:|---:|");
        for size in FIG9_SIZES {
            let find =
                |req: u32| fig.iter().find(|r| r.request_size == Some(size) && r.requests == Some(req));
            let (one, four) = (find(1), find(4));
            let f = |r: Option<&&Row>| r.map_or("-".into(), |r| format!("{:.2}", mb(r.best())));
            let model = one.or(four).and_then(|r| r.model_mbps);
            let ratio = one.zip(model).map_or("-".into(), |(r, m)| format!("{:.2}", r.best() / m));
            let gain = one.zip(four).map_or("-".into(), |(a, b)| format!("{:.1}x", b.best() / a.best()));
            let _ = writeln!(
                t,
                "| {size} | {} | {} | {ratio} | {} | {gain} |",
                f(one),
                model.map_or("-".into(), |m| format!("{:.2}", mb(m))),
                f(four)
            );
        }
    }
    let modes: Vec<&Row> = rows.iter().filter(|r| r.experiment == "modes").collect();
    if !modes.is_empty() {
        let _ = writeln!(t, "\n## Sessions vs MC/S, 1 Gbit/s, 50 ms one way, default socket buffers\n");
        let _ = writeln!(
            t,
            "`--iscsi-mode sessions` opens one iSCSI session per connection; `--iscsi-mode mcs` opens \
connections inside one session (target MaxConnections 64). Fixed N copies for a fixed time; \
`-C auto` copies a fixed length. Goodput is the whole copy (start-up and tuning included); \
steady is the mean after convergence (auto, when samples follow it) or after the first 30 %.\n"
        );
        for dir in [Direction::Restore, Direction::Backup] {
            let ceiling = rows
                .iter()
                .filter(|r| r.experiment == "ceiling" && r.delay_ms == 50.0 && r.direction == dir)
                .map(|r| r.goodput_mbps)
                .reduce(f64::max);
            let _ = writeln!(t, "\n### {dir:?}\n");
            let _ = writeln!(
                t,
                "| mode | -C | final N | goodput Mbit/s | steady Mbit/s | / iperf3 -P 8 | converged | client CPU s/Gbit | tgtd CPU s/Gbit | tgtd CPU % |"
            );
            let _ = writeln!(t, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
            for r in
                rows.iter().filter(|r| r.experiment == "ceiling" && r.delay_ms == 50.0 && r.direction == dir)
            {
                let _ = writeln!(
                    t,
                    "| iperf3 | -P {} | {} | {:.0} | - | - | - | - | - | - |",
                    r.asked, r.asked, r.goodput_mbps
                );
            }
            for r in modes.iter().filter(|r| r.direction == dir) {
                let _ = writeln!(
                    t,
                    "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} |",
                    r.mode,
                    r.asked,
                    r.n.map_or("-".into(), |n| n.to_string()),
                    r.goodput_mbps,
                    cell(r.steady_mbps, 0),
                    ceiling.map_or("-".into(), |c| format!("{:.2}", r.goodput_mbps / c)),
                    r.converge_s.map_or("-".into(), |c| format!("{c:.1} s")),
                    cell(r.client_cpu_s_per_gbit, 2),
                    cell(r.server_cpu_s_per_gbit, 2),
                    cell(r.server_cpu_pct, 0),
                );
            }
        }
    }
    let seg: Vec<&Row> = rows.iter().filter(|r| r.experiment == "segment").collect();
    if !seg.is_empty() {
        let _ = writeln!(t, "\n## Data-In PDU size: restore over 4 sessions, 1 Gbit/s, 50 ms one way\n");
        let _ = writeln!(
            t,
            "MaxRecvDataSegmentLength is the largest Data-In PDU the initiator accepts; wanblk declared \
16 MiB - 1 at first, then 1 MiB, and 64 KiB since the start-up measurements of issue 13. tgtd CPU % is its CPU time over the copy's wall \
time (100 = one core).\n"
        );
        let _ = writeln!(
            t,
            "| MaxRecvDataSegmentLength | goodput Mbit/s | steady Mbit/s | tgtd CPU s/Gbit | tgtd CPU % |"
        );
        let _ = writeln!(t, "|---:|---:|---:|---:|---:|");
        for r in seg {
            let _ = writeln!(
                t,
                "| {} | {:.0} | {} | {} | {} |",
                r.data_segment.map_or("default (64 KiB)".into(), |s| s.to_string()),
                r.goodput_mbps,
                cell(r.steady_mbps, 0),
                cell(r.server_cpu_s_per_gbit, 2),
                cell(r.server_cpu_pct, 0)
            );
        }
    }
    if !failures.is_empty() {
        t += "\n## Runs that failed\n\n";
        for f in failures {
            let _ = writeln!(t, "- {f}");
        }
    }
    t
}

/// The 1, 5 and 15 minute load averages, as /proc/loadavg shows them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Runs the iSCSI benchmark with `exe` (the wanblk binary) as the copier.
///
/// # Errors
/// The output directory cannot be created or written; a path or tgtd that
/// cannot start. Individual failed copies are recorded, not fatal.
pub fn run(exe: &Path, opts: &IscsiBenchOptions) -> anyhow::Result<()> {
    std::fs::create_dir_all(&opts.out_dir).with_context(|| format!("creating {}", opts.out_dir.display()))?;
    let mut rec = Recorder { dir: opts.out_dir.clone(), rows: Vec::new(), failures: Vec::new() };
    let started = Instant::now();
    let load_before = load_average();
    if let Err(e) = fig9(&mut rec, exe, opts) {
        rec.failures.push(format!("Fig 9 path: {e:#}"));
    }
    if let Err(e) = modes(&mut rec, exe, opts) {
        rec.failures.push(format!("sessions vs MC/S path: {e:#}"));
    }
    rec.flush()?;
    let dir = &opts.out_dir;
    let mut plots: Vec<(Chart, PathBuf)> = Vec::new();
    if let Some(c) = fig9_chart(&rec.rows) {
        plots.push((c, dir.join("fig9-command-size")));
    }
    if let Some(c) = segment_chart(&rec.rows) {
        plots.push((c, dir.join("data-segment")));
    }
    for d in [Direction::Restore, Direction::Backup] {
        let name = format!("{d:?}").to_lowercase();
        if let Some(c) = modes_chart(&rec.rows, d) {
            plots.push((c, dir.join(format!("modes-{name}"))));
        }
        if let Some(c) = timeline_chart(&rec.rows, d) {
            plots.push((c, dir.join(format!("auto-timeline-{name}"))));
        }
    }
    for (chart, stem) in plots {
        if let Err(e) = crate::plot::write(&chart, &stem) {
            rec.failures.push(format!("plot {}: {e}", stem.display()));
        }
    }
    let context = format!(
        "Machine: {} CPU(s), shared by the emulator, tgtd and the initiator; load average {} before \
the run, {} after.",
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        load_before,
        load_average()
    );
    std::fs::write(dir.join("tables.md"), tables(&rec.rows, &rec.failures, &context))?;
    println!(
        "\nwrote {}/runs.csv, tables.md and plots in {:.0} s",
        dir.display(),
        started.elapsed().as_secs_f64()
    );
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

    #[test]
    fn seed_model_matches_the_paper_shape() {
        // 4 MB reads at 16 ms with S = 20 MB/s: 4e6 / (0.064 + 0.2) bytes/s.
        let v = seed_model(4e6, 0.016, 20e6);
        assert!((v - 4e6 / 0.264).abs() < 1.0, "{v}");
        // Small commands are latency-bound: 125 KB per 4 one-way delays.
        assert!(seed_model(128_000.0, 0.016, 1e12) < 2.01e6);
    }

    #[test]
    fn tables_and_charts_from_rows() {
        let row = |exp: &str, mode: &str, asked: &str, req: Option<u32>, size: Option<u32>, g: f64| Row {
            experiment: exp.into(),
            path: "p".into(),
            delay_ms: if exp == "fig9" { 16.0 } else { 50.0 },
            direction: Direction::Restore,
            mode: mode.into(),
            asked: asked.into(),
            requests: req,
            request_size: size,
            data_segment: None,
            n: asked.parse().ok(),
            goodput_mbps: g,
            steady_mbps: None,
            model_mbps: Some(g * 0.9),
            seconds: 10.0,
            bytes: 1,
            client_cpu_s_per_gbit: None,
            server_cpu_s_per_gbit: None,
            server_cpu_pct: Some(50.0),
            converge_s: None,
            report: None,
        };
        let mut rows = vec![Row { delay_ms: 16.0, ..row("ceiling", "", "1", None, None, 200.0) }];
        for s in FIG9_SIZES {
            rows.push(row("fig9", "sessions", "1", Some(1), Some(s), f64::from(s) / 1e4));
            rows.push(row("fig9", "sessions", "1", Some(4), Some(s), f64::from(s) / 5e3));
        }
        rows.push(row("modes", "sessions", "8", Some(4), Some(4 << 20), 800.0));
        rows.push(row("modes", "mcs", "auto", Some(4), Some(4 << 20), 700.0));
        rows.push(Row {
            data_segment: Some(16 << 20),
            ..row("segment", "sessions", "4", Some(4), Some(4 << 20), 330.0)
        });
        rows.push(Row {
            data_segment: Some(1 << 20),
            ..row("segment", "sessions", "4", Some(4), Some(4 << 20), 800.0)
        });
        let t = tables(&rows, &["x failed".into()], "ctx");
        assert!(t.contains("| 128000 |") && t.contains("| 4194304 |"), "{t}");
        assert!(t.contains("2.0x") && t.contains("x failed"), "{t}");
        let c = fig9_chart(&rows).unwrap();
        assert_eq!(c.series.len(), 5);
        assert_eq!(c.series[0].points.len(), FIG9_SIZES.len());
        assert!(modes_chart(&rows, Direction::Restore).is_some());
        assert!(modes_chart(&rows, Direction::Backup).is_none());
        assert!(t.contains("| 16777216 | 330 |") && t.contains("| 1048576 | 800 |"), "{t}");
        assert_eq!(segment_chart(&rows).unwrap().series[0].points, vec![(1024.0, 800.0), (16384.0, 330.0)]);
    }
}
