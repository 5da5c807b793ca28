//! One emulated long-fat path with the embedded target behind it, and the
//! tools that run across it: `wanblk copy`, `nbdcopy` and `iperf3`, each in
//! the client namespace, each measured the same way.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use wanblk_copy::Report;
use wanblk_netem::{Scenario, Side, SysctlProfile};

/// The path to emulate.
#[derive(Debug, Clone, Serialize)]
pub struct PathSpec {
    /// Bottleneck rate, bit/s.
    pub rate_bps: u64,
    /// One-way delay, each direction.
    pub delay_ms: f64,
    /// Router queue as a multiple of the bandwidth-delay product.
    pub queue_bdp: f64,
    /// Random loss probability per packet, each direction.
    pub loss: f64,
    /// TCP buffer sysctls of the endpoints.
    pub sysctl: SysctlProfile,
    /// Congestion control of both endpoints (`cubic`, `bbr`, `reno`).
    pub congestion: String,
}

impl PathSpec {
    /// `rate` Mbit/s, `delay` ms one way, 1 BDP of queue, no loss,
    /// distribution-default buffers, cubic.
    pub fn new(rate_mbps: u64, delay_ms: f64) -> Self {
        PathSpec {
            rate_bps: rate_mbps * 1_000_000,
            delay_ms,
            queue_bdp: 1.0,
            loss: 0.0,
            sysctl: SysctlProfile::Default,
            congestion: "cubic".into(),
        }
    }

    /// A short label such as `1000M-50ms-default-cubic`.
    pub fn label(&self) -> String {
        let buf = match self.sysctl {
            SysctlProfile::Default => "default".to_string(),
            SysctlProfile::Bdp => "bdp".to_string(),
            SysctlProfile::Capped(b) => format!("cap{}K", b / 1024),
            SysctlProfile::Keep => "keep".to_string(),
        };
        // Loss in parts per million: the label names files, and a dot
        // ("loss0.0001") would be taken for an extension and cut off, so
        // two loss levels would write the same plot.
        let loss =
            if self.loss > 0.0 { format!("-loss{}ppm", (self.loss * 1e6).round()) } else { String::new() };
        let label =
            format!("{}M-{}ms-{buf}-{}{loss}", self.rate_bps / 1_000_000, self.delay_ms, self.congestion);
        label.replace('.', "p")
    }
}

/// Which way data moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Target to client (read from the target): restore.
    Restore,
    /// Client to target (write to the target): backup.
    Backup,
}

/// What one transfer measured.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Tool and settings, e.g. `wanblk -C auto`, `nbdcopy -C 4 -R 64`, `iperf3 -P 8`.
    pub tool: String,
    /// Direction.
    pub direction: Direction,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Payload bits per second / 10^6.
    pub goodput_mbps: f64,
    /// Client CPU seconds (user + system) during the run, when known.
    pub client_cpu_s: Option<f64>,
    /// Server (target) CPU seconds during the run, when known.
    pub server_cpu_s: Option<f64>,
    /// Final (or fixed) number of connections.
    pub connections: Option<u64>,
    /// Seconds until the tuner converged, with `auto`.
    pub converge_s: Option<f64>,
    /// Share of the host's CPU time stolen by the hypervisor during the run,
    /// percent (`/proc/stat`): high values mark a run disturbed by other VMs.
    pub steal_pct: Option<f64>,
    /// The wanblk report, for wanblk runs.
    #[serde(skip)]
    pub report: Option<Report>,
}

impl Run {
    /// A wanblk run named `tool` in `direction` from its `report`; the
    /// client's CPU as measured around the process (`client_cpu_s`), else
    /// the report's own.
    pub(crate) fn from_report(
        tool: String,
        direction: Direction,
        report: Report,
        client_cpu_s: Option<f64>,
    ) -> Run {
        Run {
            tool,
            direction,
            bytes: report.data_bytes,
            seconds: report.seconds,
            goodput_mbps: report.goodput_mbps,
            client_cpu_s: client_cpu_s.or(Some(report.cpu_user_s + report.cpu_system_s)),
            server_cpu_s: None,
            connections: Some(report.connections as u64),
            converge_s: crate::report::converged_at_s(&report),
            steal_pct: None,
            report: Some(report),
        }
    }
}

/// A running path: emulator, target in the server namespace, work directory.
pub struct BenchPath {
    spec: PathSpec,
    size: u64,
    /// Congestion control is set per socket (the namespace default could not be changed).
    per_socket: bool,
    scenario: Scenario,
    target: Child,
    uri: String,
    /// Targets of an exact size for tools that copy whole images (nbdcopy).
    sized: Vec<(u64, Child, String)>,
    exe: PathBuf,
    work: tempfile::TempDir,
}

impl std::fmt::Debug for BenchPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BenchPath").field("spec", &self.spec).field("uri", &self.uri).finish()
    }
}

/// A short label for a wanblk run: its flags without file names and sizes.
fn wanblk_label(extra: &[&str]) -> String {
    let mut out = vec!["wanblk"];
    let mut skip = false;
    for a in extra {
        if skip {
            skip = false;
            continue;
        }
        if matches!(*a, "--tcp-log" | "--length" | "--stop-after") {
            skip = true;
            continue;
        }
        out.push(a);
    }
    out.join(" ")
}

/// Starts `exe target` serving `size` bytes of a random fill (writes
/// dropped) on `port` in the server namespace; returns it and its URI.
fn spawn_target(
    scenario: &Scenario,
    exe: &std::path::Path,
    size: u64,
    port: u16,
    congestion: &str,
) -> anyhow::Result<(Child, String)> {
    spawn_target_with(scenario, exe, size, port, congestion, &[])
}

/// [`spawn_target`] with `extra` flags (e.g. `--tls require ...`).
fn spawn_target_with(
    scenario: &Scenario,
    exe: &std::path::Path,
    size: u64,
    port: u16,
    congestion: &str,
    extra: &[&str],
) -> anyhow::Result<(Child, String)> {
    let listen = format!("{}:{port}", scenario.server_addr());
    let mut cmd = Command::new(exe);
    wanblk_sys::process::terminate_with_parent(&mut cmd);
    let mut target = scenario.spawn(
        Side::Server,
        cmd.args(["target", "--size", &size.to_string(), "--fill", "random:1", "--discard-writes"])
            .args(["--listen", &listen, "--congestion", congestion])
            // The emulated path is private to this machine (namespaces).
            .arg("--insecure")
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    )?;
    let stdout = target.stdout.take().context("target stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).context("reading the target's URI")?;
    let uri = line.trim().to_string();
    if !uri.starts_with("nbd://") && !uri.starts_with("nbds://") {
        let _ = target.kill();
        let _ = target.wait();
        bail!("the target did not print its URI (got {uri:?})");
    }
    Ok((target, uri))
}

/// CPU seconds (user + system) of this process's ended, waited-for
/// children so far: the difference around a run is the run's CPU.
pub(crate) fn children_cpu_s() -> f64 {
    wanblk_sys::process::children_cpu_time().map(|(u, s)| (u + s).as_secs_f64()).unwrap_or(0.0)
}

/// What [`BenchPath::measured`] saw of one command.
pub(crate) struct Measured {
    pub(crate) out: std::process::Output,
    /// Wall-clock seconds.
    pub(crate) wall: f64,
    /// Client CPU seconds.
    pub(crate) client_cpu: f64,
    /// Target CPU seconds, when its pid was known.
    pub(crate) server_cpu: Option<f64>,
    /// Hypervisor steal share, percent.
    pub(crate) steal_pct: Option<f64>,
}

/// Measures the hypervisor's steal share of host CPU time between
/// [`Steal::start`] and [`Steal::pct`].
struct Steal(Option<(u64, u64)>);

impl Steal {
    fn start() -> Self {
        Steal(wanblk_sys::process::host_cpu_ticks().ok())
    }

    fn pct(&self) -> Option<f64> {
        let (a0, s0) = self.0?;
        let (a1, s1) = wanblk_sys::process::host_cpu_ticks().ok()?;
        let all = a1.checked_sub(a0).filter(|d| *d > 0)?;
        Some(s1.saturating_sub(s0) as f64 * 100.0 / all as f64)
    }
}

fn stop(child: &mut Child) {
    let _ = wanblk_sys::process::signal(child.id(), wanblk_sys::process::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl BenchPath {
    /// Creates the emulated path and starts `exe target` behind it, serving
    /// `size` bytes (reads come from a random fill, writes are dropped, so
    /// nothing is allocated). Every transfer on this path moves `size` bytes.
    ///
    /// # Errors
    /// Not root, no namespaces, a tool missing, or the target not starting.
    pub fn start(spec: &PathSpec, exe: &std::path::Path, size: u64) -> anyhow::Result<BenchPath> {
        let scenario = Scenario::builder()
            .rate_bps(spec.rate_bps)
            .delay(Duration::from_secs_f64(spec.delay_ms / 1e3))
            .queue_bdp(spec.queue_bdp)
            .loss(spec.loss)
            .sysctl_profile(spec.sysctl)
            .start()
            .context("starting the emulated path")?;
        // Congestion control: the namespace default where the kernel lets us
        // set it; otherwise (a new namespace may only pick from the host's
        // tcp_allowed_congestion_control) per socket, which needs root: our
        // target and client get --congestion and iperf3 gets -C. nbdcopy
        // has no such option: as a sender (backup) it keeps the default.
        let mut per_socket = false;
        for side in [Side::Client, Side::Server] {
            let mut c = Command::new("sysctl");
            c.arg("-qw").arg(format!("net.ipv4.tcp_congestion_control={}", spec.congestion));
            per_socket |= !scenario.exec(side, &mut c)?.status.success();
        }
        let (target, uri) = spawn_target(&scenario, exe, size, 10809, &spec.congestion)?;
        let work = tempfile::Builder::new().prefix("wanblk-bench-").tempdir()?;
        Ok(BenchPath {
            spec: spec.clone(),
            size,
            per_socket,
            scenario,
            target,
            uri,
            sized: Vec::new(),
            exe: exe.to_path_buf(),
            work,
        })
    }

    /// Starts another target of the path's size behind the emulator on
    /// `port` with `extra` flags (stopped with the path); returns its URI
    /// and process id.
    ///
    /// # Errors
    /// The target not starting.
    pub fn extra_target(&mut self, port: u16, extra: &[&str]) -> anyhow::Result<(String, u32)> {
        let (child, uri) =
            spawn_target_with(&self.scenario, &self.exe, self.size, port, &self.spec.congestion, extra)?;
        let pid = child.id();
        // Not a sized target of another size: keyed by a size no one asks for.
        self.sized.push((u64::MAX - u64::from(port), child, uri.clone()));
        Ok((uri, pid))
    }

    /// The path's description.
    pub fn spec(&self) -> &PathSpec {
        &self.spec
    }

    /// The URI of a target serving exactly `size` bytes (started on first use).
    fn sized_target(&mut self, size: u64) -> anyhow::Result<String> {
        if let Some((_, _, uri)) = self.sized.iter().find(|(s, _, _)| *s == size) {
            return Ok(uri.clone());
        }
        let port = 10810 + self.sized.len() as u16;
        let (child, uri) = spawn_target(&self.scenario, &self.exe, size, port, &self.spec.congestion)?;
        self.sized.push((size, child, uri.clone()));
        Ok(uri)
    }

    /// True when congestion control could only be set per socket (then
    /// nbdcopy's own sockets use the namespace default).
    pub fn congestion_per_socket(&self) -> bool {
        self.per_socket
    }

    /// The target's URI as seen from the client namespace.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The emulator (to start more peers in its namespaces).
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// The emulator, e.g. to change its profile mid-run.
    pub fn scenario_mut(&mut self) -> &mut Scenario {
        &mut self.scenario
    }

    /// Runs `cmd` in the client namespace and measures it: wall time, the
    /// client's CPU (the child and what it waited for, from rusage) and the
    /// CPU of the target process `target_pid` (from /proc).
    pub(crate) fn measured(&self, cmd: &mut Command, target_pid: u32) -> anyhow::Result<Measured> {
        let children = children_cpu_s;
        let server = || wanblk_sys::process::proc_cpu_time(target_pid).ok();
        wanblk_sys::process::terminate_with_parent(cmd);
        let (c0, s0, steal, t0) = (children(), server(), Steal::start(), Instant::now());
        let out = self.scenario.exec(Side::Client, cmd)?;
        let wall = t0.elapsed().as_secs_f64();
        let (c1, s1) = (children(), server());
        let server_cpu = s0.zip(s1).map(|(a, b)| b.saturating_sub(a).as_secs_f64());
        Ok(Measured { out, wall, client_cpu: c1 - c0, server_cpu, steal_pct: steal.pct() })
    }

    /// iperf3 with `flows` parallel flows for `secs` seconds; `Restore`
    /// sends from the server side (`-R`). Returns the received rate.
    ///
    /// # Errors
    /// iperf3 missing or failing, or unparsable JSON.
    pub fn iperf3(&self, flows: u32, secs: u32, direction: Direction) -> anyhow::Result<Run> {
        let port = "5201";
        let mut server = self.scenario.spawn(
            Side::Server,
            Command::new("iperf3").args(["-s", "-1", "-p", port]).stdout(Stdio::null()).stderr(Stdio::null()),
        )?;
        std::thread::sleep(Duration::from_millis(300));
        let mut c = Command::new("iperf3");
        c.args(["-c", &self.scenario.server_addr().to_string(), "-p", port, "-J", "-O", "2"])
            .args(["-C", &self.spec.congestion])
            .args(["-P", &flows.to_string(), "-t", &secs.to_string()]);
        if direction == Direction::Restore {
            c.arg("-R");
        }
        let steal = Steal::start();
        let out = self.scenario.exec(Side::Client, &mut c)?;
        let steal_pct = steal.pct();
        let _ = server.kill();
        let _ = server.wait();
        let tool = format!("iperf3 -P {flows}");
        let j: serde_json::Value =
            serde_json::from_slice(&out.stdout).with_context(|| format!("{tool}: its JSON output"))?;
        if let Some(e) = j.get("error") {
            bail!("{tool}: {e}");
        }
        let sum = &j["end"]["sum_received"];
        let field =
            |k: &str| sum[k].as_f64().with_context(|| format!("{tool}: no end.sum_received.{k} in its JSON"));
        let (bps, secs_f, bytes) = (field("bits_per_second")?, field("seconds")?, field("bytes")?);
        Ok(Run {
            tool,
            direction,
            bytes: bytes as u64,
            seconds: secs_f,
            goodput_mbps: bps / 1e6,
            client_cpu_s: None,
            server_cpu_s: None,
            connections: Some(u64::from(flows)),
            converge_s: None,
            steal_pct,
            report: None,
        })
    }

    /// `wanblk copy` of the whole target in `direction`, with `extra` flags
    /// (e.g. `["-C", "auto"]`).
    ///
    /// # Errors
    /// The copy failing, or its report missing.
    pub fn wanblk(&self, direction: Direction, extra: &[&str]) -> anyhow::Result<Run> {
        self.wanblk_at(&self.uri.clone(), self.target.id(), direction, extra)
    }

    /// [`BenchPath::wanblk`] against the target at `uri` (process `pid`,
    /// for its CPU time), e.g. one from [`BenchPath::extra_target`].
    ///
    /// # Errors
    /// The copy failing, or its report missing.
    pub fn wanblk_at(
        &self,
        uri: &str,
        pid: u32,
        direction: Direction,
        extra: &[&str],
    ) -> anyhow::Result<Run> {
        let size = self.size;
        let report = self.work.path().join("report.json");
        let _ = std::fs::remove_file(&report);
        let (src, dst) = match direction {
            Direction::Restore => (uri.to_string(), "null:".to_string()),
            Direction::Backup => (format!("random:{size}"), uri.to_string()),
        };
        let mut c = Command::new(&self.exe);
        c.arg("copy").arg(&src).arg(&dst).args(extra).arg("--report").arg(&report).arg("--no-progress");
        c.args(["--congestion", &self.spec.congestion]);
        let Measured { out, client_cpu, server_cpu, steal_pct, .. } = self.measured(&mut c, pid)?;
        let tool = wanblk_label(extra);
        if !crate::report::copy_ok(out.status, extra) {
            bail!("wanblk copy {extra:?} ({direction:?}) failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let r = crate::report::read(&report, &format!("{tool} ({direction:?})"))?;
        Ok(Run {
            server_cpu_s: server_cpu,
            steal_pct,
            ..Run::from_report(tool, direction, r, Some(client_cpu))
        })
    }

    /// libnbd's `nbdcopy` of `size` bytes in `direction` with `-C conns
    /// -T threads` (`None` keeps nbdcopy's defaults: 4 connections, one
    /// thread per core, and nbdcopy uses at most one connection per thread). nbdcopy copies whole
    /// images, so it gets a target of exactly `size` bytes; a backup reads
    /// from a local `nbdkit random` on a Unix socket.
    ///
    /// # Errors
    /// nbdcopy missing or failing.
    pub fn nbdcopy(
        &mut self,
        direction: Direction,
        size: u64,
        conns: Option<u32>,
        threads: Option<u32>,
    ) -> anyhow::Result<Run> {
        let uri = self.sized_target(size)?;
        let mut c = Command::new("nbdcopy");
        let mut tool = "nbdcopy".to_string();
        if let Some(n) = conns {
            c.arg(format!("--connections={n}"));
            tool += &format!(" -C {n}");
        }
        if let Some(t) = threads {
            c.arg(format!("--threads={t}"));
            tool += &format!(" -T {t}");
        }
        // A backup reads from a local nbdkit `random` on a Unix socket. (Given
        // as `[ nbdkit ... ]`, nbdcopy would use a single connection.)
        let mut source = None;
        match direction {
            Direction::Restore => {
                c.arg(&uri).arg("null:");
            }
            Direction::Backup => {
                let sock = self.work.path().join("random.sock");
                let _ = std::fs::remove_file(&sock);
                let mut k = Command::new("nbdkit");
                k.args(["-f", "--exit-with-parent", "-U"]).arg(&sock).args(["random", &size.to_string()]);
                wanblk_sys::process::terminate_with_parent(&mut k);
                source = Some(k.stdout(Stdio::null()).spawn().context("starting nbdkit random")?);
                let deadline = Instant::now() + Duration::from_secs(10);
                while !sock.exists() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
                c.arg(format!("nbd+unix:///?socket={}", sock.display())).arg(&uri);
            }
        }
        let pid = self.sized.iter().find(|(s, _, _)| *s == size).map_or(0, |(_, child, _)| child.id());
        let measured = self.measured(&mut c, pid);
        if let Some(mut k) = source {
            stop(&mut k);
        }
        let Measured { out, wall, client_cpu, server_cpu, steal_pct } = measured?;
        if !out.status.success() {
            bail!("{tool} failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(Run {
            tool,
            direction,
            bytes: size,
            seconds: wall,
            goodput_mbps: size as f64 * 8.0 / wall / 1e6,
            client_cpu_s: Some(client_cpu),
            server_cpu_s: server_cpu,
            connections: conns.map(u64::from),
            converge_s: None,
            steal_pct,
            report: None,
        })
    }
}

impl Drop for BenchPath {
    fn drop(&mut self) {
        stop(&mut self.target);
        for (_, child, _) in &mut self.sized {
            stop(child);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PathSpec;

    #[test]
    fn labels_name_files_without_dots() {
        assert_eq!(PathSpec::new(1000, 50.0).label(), "1000M-50ms-default-cubic");
        let lossy = |loss| PathSpec { loss, ..PathSpec::new(1000, 50.0) }.label();
        assert_eq!(lossy(0.0001), "1000M-50ms-default-cubic-loss100ppm");
        assert_eq!(lossy(0.001), "1000M-50ms-default-cubic-loss1000ppm");
        assert_eq!(PathSpec::new(900, 2.5).label(), "900M-2p5ms-default-cubic");
    }
}
