//! The physical ceiling: iperf3 across the emulated path, for the rates,
//! delays, flow counts, congestion controls and buffer profiles every later
//! benchmark compares against.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::scenario::{Scenario, Side, SysctlProfile};
use crate::{Error, Result};

/// The outcome of one iperf3 run.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct IperfResult {
    /// Goodput measured by the receiver, bit/s.
    pub received_bps: f64,
    /// Retransmitted segments counted by the sender (TCP), or 0.
    pub retransmits: u64,
    /// UDP: datagrams lost (from the receiver's report).
    pub lost_packets: u64,
    /// UDP: datagrams sent.
    pub packets: u64,
}

/// An iperf3 server in the server namespace, stopped on drop.
#[derive(Debug)]
pub struct IperfServer {
    child: Child,
}

impl IperfServer {
    /// Starts `iperf3 -s` on the server's address and waits until it listens.
    ///
    /// # Errors
    /// iperf3 missing or failing to start.
    pub fn start(sc: &Scenario) -> Result<IperfServer> {
        if crate::topology::which("iperf3").is_none() {
            return Err(Error::ToolMissing { tool: "iperf3", package: "iperf3" });
        }
        let mut c = Command::new("iperf3");
        c.args(["-s", "-B", &sc.server_addr().to_string()]).stdout(Stdio::null()).stderr(Stdio::null());
        let child = sc.spawn(Side::Server, &mut c).map_err(|e| Error::io("start iperf3 -s", e))?;
        // Wait for the listening socket in the server namespace.
        for _ in 0..200 {
            let mut ss = Command::new("ss");
            ss.args(["-ltnH", "sport = :5201"]);
            if let Ok(o) = sc.exec(Side::Server, &mut ss)
                && !o.stdout.is_empty()
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(IperfServer { child })
    }
}

impl Drop for IperfServer {
    fn drop(&mut self) {
        let _ = wanblk_sys::process::signal(self.child.id(), wanblk_sys::process::SIGTERM);
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What to run from the client.
#[derive(Debug, Clone)]
pub struct IperfRun {
    /// Parallel streams (`-P`).
    pub flows: u32,
    /// Congestion control (`-C`), e.g. "cubic", "bbr".
    pub cc: Option<String>,
    /// Measured seconds (`-t`).
    pub seconds: u32,
    /// Seconds omitted at the start (`-O`, slow start).
    pub omit: u32,
    /// UDP at this rate (`-u -b`), instead of TCP.
    pub udp_bps: Option<u64>,
    /// Server-to-client instead (`-R`).
    pub reverse: bool,
}

impl Default for IperfRun {
    fn default() -> IperfRun {
        IperfRun { flows: 1, cc: None, seconds: 10, omit: 2, udp_bps: None, reverse: false }
    }
}

/// Reads a child's pipe to its end on a thread.
fn read_all<R: std::io::Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

/// Runs `cmd` in `side`'s namespace and returns its output; kills it (by
/// its PID) and fails if it runs longer than `limit`.
fn exec_within(
    sc: &Scenario,
    side: Side,
    cmd: &mut Command,
    limit: Duration,
) -> Result<std::process::Output> {
    let what = format!("{cmd:?}");
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = sc.spawn(side, cmd).map_err(|e| Error::io("start iperf3 -c", e))?;
    let out = read_all(child.stdout.take());
    let err = read_all(child.stderr.take());
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| Error::io("wait for iperf3 -c", e))? {
            break st;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned();
            return Err(Error::Command {
                cmd: what,
                status: format!("still running after {limit:?}, killed"),
                stderr,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(std::process::Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// Runs the iperf3 client in the client namespace against a running [`IperfServer`].
///
/// # Errors
/// iperf3 failing (its error message), or output that is not iperf3 JSON.
pub fn iperf3(sc: &Scenario, run: &IperfRun) -> Result<IperfResult> {
    let mut c = Command::new("iperf3");
    c.args(["-c", &sc.server_addr().to_string(), "-J", "-P", &run.flows.to_string()]);
    c.args(["-t", &run.seconds.to_string(), "-O", &run.omit.to_string()]);
    if let Some(cc) = &run.cc {
        c.args(["-C", cc]);
    }
    if let Some(b) = run.udp_bps {
        c.args(["-u", "-b", &b.to_string(), "-l", "1400"]);
    }
    if run.reverse {
        c.arg("-R");
    }
    // A path that stops carrying packets must not hang the caller: iperf3
    // gives up on a control connection it cannot open, and is killed (by
    // its PID) if the run outlasts its own duration by far.
    c.args(["--connect-timeout", "10000"]);
    let limit = Duration::from_secs(u64::from(run.seconds + run.omit) + 60);
    let out = exec_within(sc, Side::Client, &mut c, limit)?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::Config(format!("iperf3 output is not JSON ({e}): {text}")))?;
    if let Some(err) = v.get("error").and_then(|e| e.as_str()) {
        return Err(Error::Command {
            cmd: format!("{c:?}"),
            status: out.status.to_string(),
            stderr: err.to_string(),
        });
    }
    let end = &v["end"];
    let f = |p: &serde_json::Value| p.as_f64().unwrap_or(0.0);
    let u = |p: &serde_json::Value| p.as_u64().unwrap_or(0);
    Ok(if run.udp_bps.is_some() {
        IperfResult {
            received_bps: f(&end["sum"]["bits_per_second"]) * (1.0 - f(&end["sum"]["lost_percent"]) / 100.0),
            retransmits: 0,
            lost_packets: u(&end["sum"]["lost_packets"]),
            packets: u(&end["sum"]["packets"]),
        }
    } else {
        IperfResult {
            received_bps: f(&end["sum_received"]["bits_per_second"]),
            retransmits: u(&end["sum_sent"]["retransmits"]),
            lost_packets: 0,
            packets: 0,
        }
    })
}

/// One cell of the ceiling matrix.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CeilingCase {
    /// Bottleneck rate, bit/s.
    pub rate_bps: u64,
    /// One-way delay, ms.
    pub delay_ms: u64,
    /// Parallel flows.
    pub flows: u32,
    /// Congestion control.
    pub cc: String,
    /// Endpoint buffers.
    pub sysctl: SysctlProfile,
}

/// One measured row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CeilingRow {
    /// The case.
    pub case: CeilingCase,
    /// iperf3 goodput, bit/s (median of the repeats).
    pub goodput_bps: f64,
    /// Goodput over the set rate.
    pub utilisation: f64,
    /// Sender retransmits (of the median run).
    pub retransmits: u64,
    /// Emulator queue drops, both directions (of the median run).
    pub queue_drops: u64,
    /// Kernel NFQUEUE drops (should be 0).
    pub kernel_drops: u64,
    /// Release loop CPU during the run, fraction of one core.
    pub emulator_cpu: f64,
    /// Mean release lateness, us.
    pub mean_late_us: f64,
    /// The machine's 1-minute load average when the row finished (other
    /// work on the machine makes the numbers noisier).
    pub load_avg: f64,
}

impl CeilingRow {
    /// The CSV header of [`to_csv`](Self::to_csv).
    pub const CSV_HEADER: &'static str = "rate_mbit,delay_ms,flows,cc,buffers,goodput_mbit,utilisation,retransmits,queue_drops,kernel_drops,emulator_cpu_pct,mean_late_us,load_avg";

    /// One CSV line.
    pub fn to_csv(&self) -> String {
        format!(
            "{},{},{},{},{},{:.1},{:.3},{},{},{},{:.1},{:.1},{:.2}",
            self.case.rate_bps / 1_000_000,
            self.case.delay_ms,
            self.case.flows,
            self.case.cc,
            sysctl_name(self.case.sysctl),
            self.goodput_bps / 1e6,
            self.utilisation,
            self.retransmits,
            self.queue_drops,
            self.kernel_drops,
            self.emulator_cpu * 100.0,
            self.mean_late_us,
            self.load_avg
        )
    }
}

/// `default`, `bdp`, `capped:524288`, `keep`.
pub fn sysctl_name(s: SysctlProfile) -> String {
    match s {
        SysctlProfile::Default => "default".into(),
        SysctlProfile::Bdp => "bdp".into(),
        SysctlProfile::Keep => "keep".into(),
        SysctlProfile::Capped(b) if b % 1024 == 0 => format!("capped:{}K", b / 1024),
        SysctlProfile::Capped(b) => format!("capped:{b}"),
    }
}

/// The matrix of the issue: 200 Mbit/s and 1 Gbit/s, 20 and 50 ms one way,
/// 1 and 8 flows, each available congestion control of cubic and bbr,
/// default and 512 KB-capped buffers.
pub fn default_cases() -> Vec<CeilingCase> {
    let available =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").unwrap_or_default();
    let mut v = Vec::new();
    for rate in [200_000_000u64, 1_000_000_000] {
        for delay in [20u64, 50] {
            for cc in ["cubic", "bbr"] {
                if !available.split_whitespace().any(|a| a == cc) {
                    continue;
                }
                for sysctl in [SysctlProfile::Default, SysctlProfile::Capped(512 * 1024)] {
                    for flows in [1u32, 8] {
                        v.push(CeilingCase {
                            rate_bps: rate,
                            delay_ms: delay,
                            flows,
                            cc: cc.to_string(),
                            sysctl,
                        });
                    }
                }
            }
        }
    }
    v
}

/// Measures each case: a fresh scenario (queue of one BDP), an iperf3 run of
/// `seconds` after 3 omitted seconds, `repeats` times (the median is kept).
/// `progress` sees each row as it is done.
///
/// # Errors
/// The first scenario or iperf3 failure.
pub fn ceiling_matrix(
    cases: &[CeilingCase],
    seconds: u32,
    repeats: u32,
    mut progress: impl FnMut(&CeilingRow),
) -> Result<Vec<CeilingRow>> {
    let mut rows = Vec::new();
    for case in cases {
        let sc = Scenario::builder()
            .rate_bps(case.rate_bps)
            .delay(Duration::from_millis(case.delay_ms))
            .queue_bdp(1.0)
            .sysctl_profile(case.sysctl)
            .start()?;
        let _srv = IperfServer::start(&sc)?;
        let mut runs = Vec::new();
        for _ in 0..repeats.max(1) {
            let before = sc.stats()?;
            let run = IperfRun {
                flows: case.flows,
                cc: Some(case.cc.clone()),
                seconds,
                omit: 3,
                ..IperfRun::default()
            };
            // iperf3's server occasionally resets a control connection that
            // follows a run too closely: retry once after a pause.
            let r = match iperf3(&sc, &run) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!("iperf3 failed, retrying once: {e}");
                    std::thread::sleep(Duration::from_secs(2));
                    iperf3(&sc, &run)?
                }
            };
            let after = sc.stats()?;
            runs.push((r, before, after));
        }
        runs.sort_by(|a, b| a.0.received_bps.total_cmp(&b.0.received_bps));
        let (r, before, after) = &runs[runs.len() / 2];
        let d = |f: fn(&crate::Stats) -> u64| f(after) - f(before);
        let out = d(|s| s.fwd.model.out_packets + s.back.model.out_packets).max(1);
        let row = CeilingRow {
            case: case.clone(),
            goodput_bps: r.received_bps,
            utilisation: r.received_bps / case.rate_bps as f64,
            retransmits: r.retransmits,
            queue_drops: d(|s| s.fwd.model.queue_drops + s.back.model.queue_drops),
            kernel_drops: d(|s| s.fwd.kernel_drops() + s.back.kernel_drops()),
            emulator_cpu: d(|s| s.cpu_ns) as f64 / d(|s| s.elapsed_ns).max(1) as f64,
            mean_late_us: d(|s| s.fwd.model.sum_late_ns + s.back.model.sum_late_ns) as f64
                / out as f64
                / 1000.0,
            load_avg: std::fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|l| l.split_whitespace().next().and_then(|w| w.parse().ok()))
                .unwrap_or(0.0),
        };
        progress(&row);
        rows.push(row);
    }
    Ok(rows)
}
