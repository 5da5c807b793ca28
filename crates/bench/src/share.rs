//! `--profile share`: how wanblk shares an emulated long-fat path with
//! other traffic and with other copies of itself. On one path (default
//! 1 Gbit/s, 50 ms one way, one BDP of queue, distribution-default socket
//! buffers, cubic) it runs, each `wanblk copy` a restore from the embedded
//! target to `null:` with `-C auto`:
//!
//! - the raw link: iperf3 with 8 flows (the ceiling);
//! - wanblk alone;
//! - k + 1 single iperf3 flows together (what one flow gets against k
//!   others: the reference for the competing flows below), k = 1 and 4;
//! - wanblk started 3 s after k single iperf3 flows, k = 1 and 4: each
//!   flow's rate while the copy runs against the reference;
//! - m wanblk copies started together, m = 2 and 4 (sizes: see
//!   [`ShareOptions::size`]), each tuning on its own (`--share-scope
//!   none`, the default), then the same with the host's budget
//!   (`--share-scope host`: the copies split one copy's N through the
//!   coordinator);
//! - the I/O-intensive case: wanblk alone with 64 KiB requests;
//! - on the same path with random loss 0.01 %, and with bbr instead of
//!   cubic (a new emulated path each): wanblk alone, and 2 copies each
//!   tuning on its own and with the host's budget;
//! - ensemble pacing: a backup started 3 s after one flow going the same
//!   way, without and with `--ensemble-pacing`, on the first path and on
//!   the loss path (there against 2 single flows measured on the loss path
//!   in the backup's direction: random loss caps one cubic flow far below
//!   the clean path's reference).
//!
//! Every wanblk case of the first path runs with each `--share` mode of
//! [`ShareOptions::modes`] (fair, the default, and greedy: the tuner
//! without the governor), one after the other for the same case, so the
//! governor's effect shows side by side; the host-budget, small-request,
//! loss and bbr cases run with the first mode only. Per party: goodput, final and
//! largest N, the median per-interval Jain index of its own sessions; per
//! case: Jain's index between the parties and the goals of issue 16.
//! Results: `share.md` (the table), `runs.csv` and a goodput-over-time
//! plot per case in the output directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use wanblk_copy::Report;
use wanblk_netem::Side;

use crate::path::{BenchPath, PathSpec};
use crate::plot::{Chart, Series};

/// The parts of the share profile (`--parts`; wanblk alone always runs):
/// against iperf3 flows, copies together, 64 KiB requests, the random
/// loss and bbr paths, ensemble pacing.
pub const SHARE_PARTS: [&str; 6] = ["flows", "copies", "small", "loss", "bbr", "pacing"];

/// What to run.
#[derive(Debug, Clone)]
pub struct ShareOptions {
    /// Where `share.md`, `runs.csv` and the plots go.
    pub out_dir: PathBuf,
    /// Bytes one copy moves alone and against flows; copies started
    /// together move this much each when two, half of it each when four.
    pub size: u64,
    /// Bottleneck rate, Mbit/s.
    pub rate_mbps: u64,
    /// One-way delay, ms.
    pub delay_ms: f64,
    /// `--share` modes to compare (e.g. fair, greedy).
    pub modes: Vec<String>,
    /// Numbers of competing iperf3 flows (e.g. 1, 4).
    pub flows: Vec<u32>,
    /// Numbers of copies started together (e.g. 2, 4).
    pub copies: Vec<usize>,
    /// Request size of the I/O-intensive case (e.g. `64K`; `None`: not run).
    pub small_requests: Option<String>,
    /// Random loss of the extra path (e.g. 0.0001; `None`: not run).
    pub loss: Option<f64>,
    /// Congestion control of the extra path (e.g. `bbr`; `None`: not run).
    pub other_congestion: Option<String>,
    /// Backups against one flow with and without `--ensemble-pacing` (on
    /// the first path and the loss path).
    pub ensemble_pacing: bool,
}

/// One party of a case: a wanblk copy or an iperf3 flow.
#[derive(Debug, Clone, Default)]
struct Party {
    name: String,
    goodput_mbps: f64,
    /// For an iperf3 flow: its rate after the copies ended.
    after_mbps: Option<f64>,
    final_n: Option<usize>,
    max_n: Option<usize>,
    own_jain: Option<f64>,
    /// Goodput over time (seconds since the case began, Mbit/s).
    trace: Vec<(f64, f64)>,
    /// N over time, for wanblk.
    n_trace: Vec<(f64, f64)>,
    data_bytes: u64,
    seconds: f64,
}

/// One measured case.
#[derive(Debug, Clone)]
struct Case {
    case: String,
    /// The path when not the first one ("loss 0.01 %", "bbr"), else "".
    path: String,
    mode: String,
    parties: Vec<Party>,
    /// For copies together: all their bytes over the longest one's time.
    combined_mbps: Option<f64>,
    /// A reference rate per competing flow (flows against k others).
    reference_mbps: Option<f64>,
}

impl Case {
    fn wanblk(&self) -> impl Iterator<Item = &Party> {
        self.parties.iter().filter(|p| p.final_n.is_some())
    }

    fn flows(&self) -> impl Iterator<Item = &Party> {
        self.parties.iter().filter(|p| p.final_n.is_none())
    }

    /// The case with its path, e.g. "alone (bbr)".
    fn title(&self) -> String {
        if self.path.is_empty() { self.case.clone() } else { format!("{} ({})", self.case, self.path) }
    }

    fn jain(&self) -> Option<f64> {
        let xs: Vec<f64> = self.parties.iter().map(|p| p.goodput_mbps).collect();
        jain(&xs)
    }

    /// The copies' N together while all of them ran: the median, over the
    /// second half of that time (every 0.25 s), of the sum of their N.
    /// Their final N summed is not that: a copy left alone when the
    /// others end tunes to what one copy needs.
    fn n_together(&self) -> Option<f64> {
        let copies: Vec<&Party> = self.wanblk().collect();
        if copies.len() < 2 {
            return None;
        }
        let end = copies.iter().map(|p| p.n_trace.last().map(|x| x.0)).collect::<Option<Vec<f64>>>()?;
        let end = end.into_iter().fold(f64::INFINITY, f64::min);
        let start = copies.iter().filter_map(|p| p.n_trace.first().map(|x| x.0)).fold(0.0, f64::max);
        let mut sums = Vec::new();
        let mut t = start.max(end / 2.0);
        while t <= end {
            sums.push(copies.iter().filter_map(|p| n_at(&p.n_trace, t)).sum::<f64>());
            t += 0.25;
        }
        sums.sort_by(f64::total_cmp);
        sums.get(sums.len() / 2).copied()
    }
}

/// N at `t` from a trace of (interval end, N during it): the N of the
/// first interval ending at or after `t`.
fn n_at(trace: &[(f64, f64)], t: f64) -> Option<f64> {
    trace.iter().find(|(end, _)| *end >= t).map(|x| x.1)
}

/// Jain's index (as wanblk's own): (sum x)^2 / (n sum x^2).
fn jain(xs: &[f64]) -> Option<f64> {
    let sum: f64 = xs.iter().sum();
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    (xs.len() > 1 && sq > 0.0).then(|| sum * sum / (xs.len() as f64 * sq))
}

/// What iperf3 measured: per stream, its rate per interval.
#[derive(Debug, Default)]
struct Iperf {
    /// (interval start, end, Mbit/s) per stream.
    streams: Vec<Vec<(f64, f64, f64)>>,
}

impl Iperf {
    fn parse(json: &[u8]) -> anyhow::Result<Iperf> {
        let j: serde_json::Value = serde_json::from_slice(json).context("iperf3's JSON output")?;
        if let Some(e) = j.get("error") {
            bail!("iperf3: {e}");
        }
        let mut streams: Vec<Vec<(f64, f64, f64)>> = Vec::new();
        for iv in j["intervals"].as_array().context("iperf3: no intervals")? {
            for (i, s) in iv["streams"].as_array().into_iter().flatten().enumerate() {
                if streams.len() <= i {
                    streams.push(Vec::new());
                }
                let f = |k: &str| s[k].as_f64().unwrap_or(0.0);
                streams[i].push((f("start"), f("end"), f("bits_per_second") / 1e6));
            }
        }
        anyhow::ensure!(!streams.is_empty(), "iperf3 reported no streams");
        Ok(Iperf { streams })
    }

    /// Stream `i`'s mean rate over the intervals whose middle lies in
    /// `[from, to)` seconds (None when none does).
    fn mean(&self, i: usize, from: f64, to: f64) -> Option<f64> {
        let v: Vec<f64> = self.streams[i]
            .iter()
            .filter(|(a, b, _)| {
                let m = (a + b) / 2.0;
                m >= from && m < to
            })
            .map(|x| x.2)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }
}

/// Polls `child` until it ends or `limit` passes (then kills it).
fn wait_for(child: &mut Child, limit: Duration, what: &str) -> anyhow::Result<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not end within {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Bench<'a> {
    path: BenchPath,
    exe: &'a Path,
    work: tempfile::TempDir,
    congestion: String,
    /// Seconds one copy alone took (sizes iperf3's run).
    alone_s: f64,
    next_port: u16,
    size: u64,
    /// The path's name in the cases ("" for the first path).
    label: String,
    /// Where every copy's report is kept (`--out`/reports), and how many
    /// so far (their names start with it).
    keep: PathBuf,
    kept: std::cell::Cell<u32>,
}

/// iperf3 running in reverse (server to client, as a restore).
struct Flows {
    server: Child,
    client: Child,
    out: PathBuf,
    started: Instant,
    secs: u32,
}

/// A started copy.
struct Copy {
    child: Child,
    report: PathBuf,
    stderr: PathBuf,
    started: Instant,
    name: String,
    mode: String,
}

impl<'a> Bench<'a> {
    /// The bench on `path` (started with `spec`), copies of `size` bytes,
    /// its cases named with `label`; a fresh work directory.
    fn new(
        path: BenchPath,
        spec: &PathSpec,
        exe: &'a Path,
        size: u64,
        label: String,
        keep: PathBuf,
    ) -> anyhow::Result<Self> {
        let work = tempfile::Builder::new().prefix("wanblk-share-").tempdir()?;
        Ok(Bench {
            path,
            exe,
            work,
            congestion: spec.congestion.clone(),
            alone_s: 0.0,
            next_port: 5201,
            size,
            label,
            keep,
            kept: std::cell::Cell::new(0),
        })
    }

    fn flows(&mut self, k: u32, secs: u32) -> anyhow::Result<Flows> {
        self.flows_dir(k, secs, true)
    }

    /// k flows for `secs`, server to client (`reverse`, as a restore) or
    /// client to server (as a backup).
    fn flows_dir(&mut self, k: u32, secs: u32, reverse: bool) -> anyhow::Result<Flows> {
        let port = self.next_port.to_string();
        self.next_port += 1;
        let sc = self.path.scenario();
        let mut s = Command::new("iperf3");
        s.args(["-s", "-1", "-p", &port]).stdout(Stdio::null()).stderr(Stdio::null());
        wanblk_sys::process::terminate_with_parent(&mut s);
        let server = sc.spawn(Side::Server, &mut s).context("starting iperf3 -s")?;
        std::thread::sleep(Duration::from_millis(300));
        let out = self.work.path().join(format!("iperf3-{port}.json"));
        let mut c = Command::new("iperf3");
        c.args(["-c", &sc.server_addr().to_string(), "-p", &port, "-J", "-i", "1"])
            .args(if reverse { &["-R"][..] } else { &[][..] })
            .args(["-C", &self.congestion, "-P", &k.to_string(), "-t", &secs.to_string()])
            .stdout(std::fs::File::create(&out)?)
            .stderr(Stdio::null());
        wanblk_sys::process::terminate_with_parent(&mut c);
        let client = sc.spawn(Side::Client, &mut c).context("starting iperf3 -c")?;
        Ok(Flows { server, client, out, started: Instant::now(), secs })
    }

    fn finish_flows(&self, mut f: Flows) -> anyhow::Result<Iperf> {
        let limit = Duration::from_secs(u64::from(f.secs) + 30);
        let st = wait_for(&mut f.client, limit, "iperf3");
        let _ = f.server.kill();
        let _ = f.server.wait();
        anyhow::ensure!(st?.success(), "iperf3 failed");
        Iperf::parse(&std::fs::read(&f.out)?)
    }

    fn copy(&self, name: &str, mode: &str, length: u64, extra: &[&str]) -> anyhow::Result<Copy> {
        self.copy_dir(name, mode, length, extra, false)
    }

    /// A restore (target to `null:`) or a `backup` (`random:` to the target).
    fn copy_dir(
        &self,
        name: &str,
        mode: &str,
        length: u64,
        extra: &[&str],
        backup: bool,
    ) -> anyhow::Result<Copy> {
        let report = self.work.path().join(format!("{name}.json"));
        let stderr = self.work.path().join(format!("{name}.err"));
        let _ = std::fs::remove_file(&report);
        let random = format!("random:{length}");
        let (src, dst) = if backup { (random.as_str(), self.path.uri()) } else { (self.path.uri(), "null:") };
        let mut c = Command::new(self.exe);
        c.args(["copy", src, dst, "-C", "auto", "--share", mode, "--no-progress"])
            .args(["--length", &length.to_string(), "--congestion", &self.congestion, "--report"])
            .arg(&report)
            .args(extra)
            // The host's coordinator of these copies only (not of other
            // wanblk copies on the machine).
            .env("XDG_RUNTIME_DIR", self.work.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr)?);
        wanblk_sys::process::terminate_with_parent(&mut c);
        let child = self.path.scenario().spawn(Side::Client, &mut c).context("starting wanblk copy")?;
        Ok(Copy {
            child,
            report,
            stderr,
            started: Instant::now(),
            name: name.to_string(),
            mode: mode.to_string(),
        })
    }

    /// Waits for a copy; its party, times relative to `t0`.
    fn finish_copy(&self, mut c: Copy, t0: Instant) -> anyhow::Result<(Party, f64)> {
        let st = wait_for(&mut c.child, Duration::from_secs(900), "wanblk copy")?;
        let ended = t0.elapsed().as_secs_f64();
        if !st.success() {
            bail!("{} failed: {}", c.name, std::fs::read_to_string(&c.stderr).unwrap_or_default());
        }
        let r = crate::report::read(&c.report, &c.name)?;
        // Kept for a look at the tuner's and the governor's record.
        let k = self.kept.get() + 1;
        self.kept.set(k);
        let slug: String = format!("{}{}-{}", self.label, c.name, c.mode)
            .chars()
            .map(|x| if x.is_ascii_alphanumeric() { x } else { '-' })
            .collect();
        std::fs::create_dir_all(&self.keep)?;
        std::fs::copy(&c.report, self.keep.join(format!("{k:02}-{slug}.json")))?;
        let off = c.started.duration_since(t0).as_secs_f64();
        Ok((party(&c.name, &r, off), ended))
    }

    fn alone(&mut self, mode: &str) -> anyhow::Result<Case> {
        self.alone_with("alone", mode, &[])
    }

    /// One copy alone with `extra` flags.
    fn alone_with(&mut self, case: &str, mode: &str, extra: &[&str]) -> anyhow::Result<Case> {
        let t0 = Instant::now();
        let c = self.copy("wanblk", mode, self.path_size(), extra)?;
        let (p, _) = self.finish_copy(c, t0)?;
        if extra.is_empty() {
            self.alone_s = self.alone_s.max(p.seconds);
        }
        Ok(Case {
            case: case.into(),
            path: self.label.clone(),
            mode: mode.into(),
            parties: vec![p],
            combined_mbps: None,
            reference_mbps: None,
        })
    }

    fn path_size(&self) -> u64 {
        self.size
    }

    /// k + 1 single flows together for 20 s, server to client; the rate
    /// of each after 3 s.
    fn reference(&mut self, k: u32) -> anyhow::Result<Case> {
        self.reference_dir(k, true)
    }

    /// [`Bench::reference`], server to client (`reverse`) or client to
    /// server (against a backup).
    fn reference_dir(&mut self, k: u32, reverse: bool) -> anyhow::Result<Case> {
        let f = self.flows_dir(k + 1, 20, reverse)?;
        let ip = self.finish_flows(f)?;
        let parties: Vec<Party> = (0..ip.streams.len())
            .map(|i| Party {
                name: format!("iperf3 flow {}", i + 1),
                goodput_mbps: ip.mean(i, 3.0, 1e9).unwrap_or(0.0),
                trace: ip.streams[i].iter().map(|(_, b, r)| (*b, *r)).collect(),
                ..Party::default()
            })
            .collect();
        let mean = parties.iter().map(|p| p.goodput_mbps).sum::<f64>() / parties.len().max(1) as f64;
        Ok(Case {
            case: format!(
                "{} single flows together{}",
                k + 1,
                if reverse { "" } else { " (client to server)" }
            ),
            path: self.label.clone(),
            mode: "-".into(),
            parties,
            combined_mbps: None,
            reference_mbps: Some(mean),
        })
    }

    /// wanblk started 3 s after k single flows.
    fn against(&mut self, k: u32, mode: &str, reference: Option<f64>) -> anyhow::Result<Case> {
        self.against_with(k, mode, reference, &[], false)
    }

    /// [`Bench::against`] with `extra` flags, as a restore or a `backup`
    /// (the flows then go the same way, client to server).
    fn against_with(
        &mut self,
        k: u32,
        mode: &str,
        reference: Option<f64>,
        extra: &[&str],
        backup: bool,
    ) -> anyhow::Result<Case> {
        let secs = (3.0 + self.alone_s * 2.0 + 15.0).ceil() as u32;
        let f = self.flows_dir(k, secs, !backup)?;
        let t0 = f.started;
        std::thread::sleep(Duration::from_secs(3));
        let c = self.copy_dir("wanblk", mode, self.path_size(), extra, backup)?;
        let (p, ended) = self.finish_copy(c, t0)?;
        let began = ended - p.seconds;
        let ip = self.finish_flows(f)?;
        let mut parties = vec![p];
        for i in 0..ip.streams.len() {
            parties.push(Party {
                name: format!("iperf3 flow {}", i + 1),
                goodput_mbps: ip.mean(i, began, ended).unwrap_or(0.0),
                after_mbps: ip.mean(i, ended + 2.0, 1e9),
                trace: ip.streams[i].iter().map(|(_, b, r)| (*b, *r)).collect(),
                ..Party::default()
            });
        }
        let what = match (backup, extra.contains(&"--ensemble-pacing")) {
            (false, _) => String::new(),
            (true, false) => " (backup)".into(),
            (true, true) => " (backup, ensemble pacing)".into(),
        };
        Ok(Case {
            case: format!("wanblk + {k} flow{}{what}", if k == 1 { "" } else { "s" }),
            path: self.label.clone(),
            mode: mode.into(),
            parties,
            combined_mbps: None,
            reference_mbps: reference,
        })
    }

    /// m copies started together, each tuning on its own or (`host`)
    /// sharing the host's budget.
    fn together(&mut self, m: usize, mode: &str, host: bool) -> anyhow::Result<Case> {
        let each = if m <= 2 { self.size } else { self.size * 2 / m as u64 };
        let scope = ["--share-scope", if host { "host" } else { "none" }];
        let t0 = Instant::now();
        let copies: Vec<Copy> = (0..m)
            .map(|i| self.copy(&format!("wanblk {}", i + 1), mode, each, &scope))
            .collect::<anyhow::Result<_>>()?;
        let mut parties = Vec::new();
        for c in copies {
            parties.push(self.finish_copy(c, t0)?.0);
        }
        let bytes: u64 = parties.iter().map(|p| p.data_bytes).sum();
        let longest = parties.iter().map(|p| p.seconds).fold(0.0, f64::max);
        Ok(Case {
            case: format!("{m} copies {}", if host { "sharing the host's budget" } else { "together" }),
            path: self.label.clone(),
            mode: mode.into(),
            parties,
            combined_mbps: (longest > 0.0).then(|| bytes as f64 * 8.0 / longest / 1e6),
            reference_mbps: None,
        })
    }
}

/// A wanblk party from its report; its traces start `off` seconds into the case.
fn party(name: &str, r: &Report, off: f64) -> Party {
    Party {
        name: name.into(),
        goodput_mbps: r.goodput_mbps,
        after_mbps: None,
        final_n: Some(r.connections),
        max_n: r.samples.iter().map(|s| s.n).max(),
        own_jain: r.share.fairness_median,
        trace: r.samples.iter().map(|s| (s.t_s + off, s.goodput_mbps)).collect(),
        n_trace: r.samples.iter().map(|s| (s.t_s + off, s.n as f64)).collect(),
        data_bytes: r.data_bytes,
        seconds: r.seconds,
    }
}

/// Runs the share profile.
///
/// # Errors
/// Not root, tools missing, the emulator or a copy failing.
pub fn run(exe: &Path, opts: &ShareOptions) -> anyhow::Result<()> {
    anyhow::ensure!(wanblk_sys::sched::geteuid() == 0, "the share profile needs root (network namespaces)");
    anyhow::ensure!(
        wanblk_testkit::which("iperf3").is_some(),
        "iperf3 is missing: apt-get install -y iperf3"
    );
    let spec = PathSpec::new(opts.rate_mbps, opts.delay_ms);
    let path = BenchPath::start(&spec, exe, opts.size).context("starting the emulated path")?;
    let mut extra_paths = Vec::new();
    if let Some(loss) = opts.loss {
        extra_paths.push((format!("loss {} %", loss * 100.0), PathSpec { loss, ..spec.clone() }));
    }
    if let Some(cc) = &opts.other_congestion {
        extra_paths.push((cc.clone(), PathSpec { congestion: cc.clone(), ..spec.clone() }));
    }
    println!(
        "share: {} MiB copies, {} Mbit/s, {} ms one way, modes {}",
        opts.size >> 20,
        opts.rate_mbps,
        opts.delay_ms,
        opts.modes.join(", ")
    );
    let keep = opts.out_dir.join("reports");
    let mut b = Bench::new(path, &spec, exe, opts.size, String::new(), keep.clone())?;
    let link = {
        let f = b.flows(8, 12)?;
        let ip = b.finish_flows(f)?;
        (0..ip.streams.len()).filter_map(|i| ip.mean(i, 2.0, 1e9)).sum::<f64>()
    };
    println!("  link (iperf3 -P 8): {link:.0} Mbit/s");
    let mut cases = Vec::new();
    let show = |c: Case, cases: &mut Vec<Case>| {
        let ps: Vec<String> = c
            .parties
            .iter()
            .map(|p| match p.final_n {
                Some(n) => format!("{} {:.0} Mbit/s N={n}", p.name, p.goodput_mbps),
                None => format!("{} {:.0}", p.name, p.goodput_mbps),
            })
            .collect();
        println!("  {:<24} {:<7} {}", c.title(), c.mode, ps.join(", "));
        cases.push(c);
    };
    for mode in &opts.modes {
        show(b.alone(mode)?, &mut cases);
    }
    for &k in &opts.flows {
        let r = b.reference(k)?;
        let reference = r.reference_mbps;
        show(r, &mut cases);
        for mode in &opts.modes {
            show(b.against(k, mode, reference)?, &mut cases);
        }
    }
    let first = opts.modes.first().map_or("fair", String::as_str);
    for &m in &opts.copies {
        for mode in &opts.modes {
            show(b.together(m, mode, false)?, &mut cases);
        }
        show(b.together(m, first, true)?, &mut cases);
    }
    if let Some(size) = &opts.small_requests {
        show(b.alone_with(&format!("alone, {size} requests"), first, &["--request-size", size])?, &mut cases);
    }
    let reference_1 =
        cases.iter().find(|c| c.case == "2 single flows together").and_then(|c| c.reference_mbps);
    if opts.ensemble_pacing {
        for extra in [&[][..], &["--ensemble-pacing"][..]] {
            show(b.against_with(1, first, reference_1, extra, true)?, &mut cases);
        }
    }
    drop(b);
    for (label, spec) in extra_paths {
        let path =
            BenchPath::start(&spec, exe, opts.size).with_context(|| format!("starting the {label} path"))?;
        println!("  path: {label}");
        let mut b = Bench::new(path, &spec, exe, opts.size, label, keep.clone())?;
        show(b.alone(first)?, &mut cases);
        if opts.copies.contains(&2) {
            // Both scopes, so the host's budget is held against copies
            // tuning on their own on this path too.
            show(b.together(2, first, false)?, &mut cases);
            show(b.together(2, first, true)?, &mut cases);
        }
        if opts.ensemble_pacing && spec.loss > 0.0 {
            // A flow's share is held against what it gets beside another
            // flow on this same path, going the same way: random loss caps
            // one cubic flow far below the clean path's reference (35
            // against 286 Mbit/s), and on the emulated lossy path a flow
            // from client to server moved about half what one the other
            // way did (37 against 67, 2026-11-29).
            let r = b.reference_dir(1, false)?;
            let reference = r.reference_mbps;
            show(r, &mut cases);
            for extra in [&[][..], &["--ensemble-pacing"][..]] {
                show(b.against_with(1, first, reference, extra, true)?, &mut cases);
            }
        }
    }
    write(&opts.out_dir, opts, link, &cases)
}

fn fmt_opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// The goals of issue 16 a case is held against, in words; `link` the
/// measured ceiling, `alone_n` and `alone_mbps` one copy's by mode.
fn verdict(c: &Case, link: f64, alone: &[(String, String, usize, f64)]) -> String {
    let mut v = Vec::new();
    let one = alone.iter().find(|(p, m, _, _)| *p == c.path && *m == c.mode).map(|a| (&a.1, a.2, a.3));
    let greedy_alone = alone.iter().find(|(p, m, _, _)| *p == c.path && m == "greedy").map(|a| a.3);
    if c.case.starts_with("alone") {
        let p = &c.parties[0];
        v.push(format!("{:.2} of the link", p.goodput_mbps / link));
        if let Some(g) = greedy_alone.filter(|_| c.mode != "greedy" && c.case == "alone") {
            let ok = p.goodput_mbps >= 0.97 * g;
            v.push(format!("{:.2} of greedy alone (goal >= 0.97: {})", p.goodput_mbps / g, yes(ok)));
        }
    } else if c.case.starts_with("wanblk +") {
        if let Some(r) = c.reference_mbps.filter(|r| *r > 0.0) {
            let worst = c.flows().map(|p| p.goodput_mbps / r).fold(f64::INFINITY, f64::min);
            v.push(format!(
                "flows keep >= {worst:.2} of their reference (goal >= 0.8: {})",
                yes(worst >= 0.8)
            ));
        }
    } else if let Some(comb) = c.combined_mbps {
        let use_ = comb / link;
        v.push(format!("link use {use_:.2} (goal >= 0.93: {})", yes(use_ >= 0.93)));
        let n: usize = c.wanblk().filter_map(|p| p.final_n).sum();
        if let Some((_, n1, _)) = one {
            match c.n_together() {
                Some(together) => {
                    let ratio = together / n1.max(1) as f64;
                    v.push(format!(
                        "N together {together:.0} = {ratio:.1}x one copy's {n1} (goal <= 1.5x: {}; final N summed {n})",
                        yes(ratio <= 1.5)
                    ));
                }
                None => {
                    let ratio = n as f64 / n1.max(1) as f64;
                    v.push(format!(
                        "N {n} = {ratio:.1}x one copy's {n1} (goal <= 1.5x: {})",
                        yes(ratio <= 1.5)
                    ));
                }
            }
        }
        if let Some(j) = c.jain() {
            v.push(format!("Jain {j:.3} (goal >= 0.95: {})", yes(j >= 0.95)));
        }
    }
    let own: Vec<f64> = c.wanblk().filter_map(|p| p.own_jain).collect();
    if !own.is_empty() {
        let worst = own.iter().copied().fold(f64::INFINITY, f64::min);
        v.push(format!("own sessions' Jain median {worst:.2} (goal >= 0.95: {})", yes(worst >= 0.95)));
    }
    v.join("; ")
}

fn yes(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

fn write(dir: &Path, opts: &ShareOptions, link: f64, cases: &[Case]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut csv = std::fs::File::create(dir.join("runs.csv"))?;
    writeln!(
        csv,
        "case,mode,party,goodput_mbps,after_mbps,reference_mbps,final_n,max_n,own_jain_median,jain_parties,combined_mbps,link_mbps,seconds"
    )?;
    for c in cases {
        for p in &c.parties {
            writeln!(
                csv,
                "{},{},{},{:.1},{},{},{},{},{},{},{},{:.1},{:.2}",
                c.title(),
                c.mode,
                p.name,
                p.goodput_mbps,
                p.after_mbps.map_or(String::new(), |x| format!("{x:.1}")),
                c.reference_mbps.map_or(String::new(), |x| format!("{x:.1}")),
                p.final_n.map_or(String::new(), |x| x.to_string()),
                p.max_n.map_or(String::new(), |x| x.to_string()),
                p.own_jain.map_or(String::new(), |x| format!("{x:.3}")),
                c.jain().map_or(String::new(), |x| format!("{x:.3}")),
                c.combined_mbps.map_or(String::new(), |x| format!("{x:.1}")),
                link,
                p.seconds
            )?;
        }
    }
    let alone: Vec<(String, String, usize, f64)> = cases
        .iter()
        .filter(|c| c.case == "alone")
        .map(|c| {
            (c.path.clone(), c.mode.clone(), c.parties[0].final_n.unwrap_or(1), c.parties[0].goodput_mbps)
        })
        .collect();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut md = std::fs::File::create(dir.join("share.md"))?;
    writeln!(md, "# Sharing the path\n")?;
    writeln!(
        md,
        "`wanblk-bench run --profile share`: {} Mbit/s, {} ms one way, queue 1 BDP, distribution-default socket \
         buffers, cubic; restores of {} MiB (two copies: each; four: half of it each) from the embedded target to \
         null: with `wanblk copy -C auto --share MODE`; iperf3 flows in reverse (server to client, as the copies). \
         Link (iperf3 -P 8): {link:.0} Mbit/s. Load average at the end: {}\n",
        opts.rate_mbps,
        opts.delay_ms,
        opts.size >> 20,
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    )?;
    writeln!(
        md,
        "| case | --share | goodput per party, Mbit/s | final N (largest) | Jain between parties | against the goals |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    for c in cases {
        let gp: Vec<String> = c
            .parties
            .iter()
            .map(|p| match p.after_mbps {
                Some(a) => format!("{}: {:.0} (after: {a:.0})", p.name, p.goodput_mbps),
                None => format!("{}: {:.0}", p.name, p.goodput_mbps),
            })
            .collect();
        let ns: Vec<String> = c
            .wanblk()
            .map(|p| {
                format!("{} ({})", p.final_n.unwrap_or(0), p.max_n.map_or("-".into(), |x| x.to_string()))
            })
            .collect();
        let mut goals = verdict(c, link, &alone);
        if let Some(r) = c.reference_mbps.filter(|_| c.mode == "-") {
            goals = format!("reference per flow {r:.0} Mbit/s");
        }
        if let Some(comb) = c.combined_mbps {
            goals = format!("together {comb:.0} Mbit/s; {goals}");
        }
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            c.title(),
            c.mode,
            gp.join("; "),
            if ns.is_empty() { "-".into() } else { ns.join(" + ") },
            fmt_opt(c.jain(), 3),
            goals
        )?;
        if c.mode != "-" {
            let stem = dir.join(format!("{}-{}", stem_of(&c.title()), c.mode));
            plot_case(c, &stem)?;
        }
    }
    println!("share: wrote {}", dir.join("share.md").display());
    Ok(())
}

/// A file name stem for a case title: "2 copies together" -> "2copies",
/// "alone, 64K requests" -> "alone-64Krequests", "alone (loss 0.01 %)" ->
/// "alone-loss0p01".
fn stem_of(title: &str) -> String {
    let t = title.replace("together", "").replace(" (", "-").replace(", ", "-").replace('.', "p");
    t.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect::<String>()
        .trim_end_matches('-')
        .to_string()
}

fn plot_case(c: &Case, stem: &Path) -> anyhow::Result<()> {
    let series = c.parties.iter().map(|p| Series::new(p.name.clone(), p.trace.clone())).collect();
    let right: Vec<Series> =
        c.wanblk().map(|p| Series::reference(format!("N of {}", p.name), p.n_trace.clone())).collect();
    let chart = Chart {
        title: format!("{} (--share {})", c.title(), c.mode),
        x_label: "seconds".into(),
        y_label: "goodput, Mbit/s".into(),
        log_x: false,
        series,
        right: (!right.is_empty()).then(|| ("N".to_string(), right)),
    };
    crate::plot::write(&chart, stem).map_err(|e| anyhow::anyhow!("plot {}: {e}", stem.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iperf3_intervals_are_averaged_per_stream_over_a_window() {
        let json = br#"{"intervals":[
            {"streams":[{"start":0,"end":1,"bits_per_second":1e8},{"start":0,"end":1,"bits_per_second":3e8}]},
            {"streams":[{"start":1,"end":2,"bits_per_second":2e8},{"start":1,"end":2,"bits_per_second":3e8}]},
            {"streams":[{"start":2,"end":3,"bits_per_second":4e8},{"start":2,"end":3,"bits_per_second":1e8}]}]}"#;
        let ip = Iperf::parse(json).unwrap();
        assert_eq!(ip.streams.len(), 2);
        assert_eq!(ip.mean(0, 1.0, 3.0), Some(300.0));
        assert_eq!(ip.mean(1, 0.0, 1.0), Some(300.0));
        assert_eq!(ip.mean(1, 5.0, 9.0), None);
        assert!(Iperf::parse(br#"{"error":"unable to connect"}"#).is_err());
    }

    #[test]
    fn plot_stems_stay_as_before_and_name_the_path() {
        assert_eq!(stem_of("2 copies together"), "2copies");
        assert_eq!(stem_of("wanblk + 1 flow"), "wanblk1flow");
        assert_eq!(stem_of("alone, 64K requests"), "alone-64Krequests");
        assert_eq!(stem_of("alone (loss 0.01 %)"), "alone-loss0p01");
        assert_eq!(stem_of("2 copies sharing the host's budget (bbr)"), "2copiessharingthehostsbudget-bbr");
    }

    #[test]
    fn n_together_is_taken_while_every_copy_ran() {
        let copy = |n_trace: Vec<(f64, f64)>| Party { final_n: Some(0), n_trace, ..Party::default() };
        // Copy 1 holds 3 and ends at 20 s; copy 2 holds 2, then alone
        // tunes to 5 until 40 s: together 5, not 3 + 5.
        let one: Vec<(f64, f64)> = (1..=40).map(|i| (f64::from(i) * 0.5, 3.0)).collect();
        let two: Vec<(f64, f64)> =
            (1..=80).map(|i| (f64::from(i) * 0.5, if i <= 40 { 2.0 } else { 5.0 })).collect();
        let c = Case {
            case: "2 copies together".into(),
            path: String::new(),
            mode: "fair".into(),
            parties: vec![copy(one), copy(two)],
            combined_mbps: Some(900.0),
            reference_mbps: None,
        };
        assert_eq!(c.n_together(), Some(5.0));
        assert_eq!(n_at(&[(1.0, 4.0), (2.0, 8.0)], 1.5), Some(8.0));
        assert_eq!(n_at(&[(1.0, 4.0)], 1.5), None);
        let alone = Case { parties: vec![copy(vec![(1.0, 4.0)])], ..c };
        assert_eq!(alone.n_together(), None);
    }

    #[test]
    fn jain_between_parties() {
        assert_eq!(jain(&[400.0, 400.0]), Some(1.0));
        assert!(jain(&[900.0, 100.0]).unwrap() < 0.7);
        assert_eq!(jain(&[1.0]), None);
    }
}
