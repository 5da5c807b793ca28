//! The public API for tests and benchmarks: build a path, start it (the
//! release loop runs as a thread of this process), run commands at either
//! end, read counters; dropping the [`Scenario`] removes everything.

use std::process::{Child, Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wanblk_netem_model::{Params, Profile, QueueLimit};

use crate::emulator::{self, Control, EmulatorConfig, Shared};
use crate::stats::Stats;
use crate::topology::{self, CreateOptions, Topology};
use crate::{Error, Result};

/// One end of the path, or the router in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client namespace (`10.77.1.2`).
    Client,
    /// The router namespace (NFQUEUE rules, no addresses for tests to use).
    Router,
    /// The server namespace (`10.77.2.2`).
    Server,
}

/// The drop-tail queue size.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum QueueSpec {
    /// A number of packets.
    Packets(u32),
    /// A number of wire bytes.
    Bytes(u64),
    /// A multiple of the bandwidth-delay product (rate x round-trip
    /// propagation delay), in packets of 1514 wire bytes.
    Bdp(f64),
}

/// The TCP buffer sysctls of the client and server namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SysctlProfile {
    /// The distribution defaults: `tcp_rmem = 4096 131072 6291456`, `tcp_wmem = 4096 16384 4194304`.
    Default,
    /// Auto-tuning maxima of 4 x (BDP + queue), at least the defaults: a
    /// single flow can fill the path.
    Bdp,
    /// Both maxima capped at this many bytes (the seed papers' 512 KB).
    Capped(u64),
    /// Whatever a new namespace inherits.
    Keep,
}

impl SysctlProfile {
    /// Parses `default`, `bdp`, `keep` or `capped:512K`.
    ///
    /// # Errors
    /// [`Error::Config`].
    pub fn parse(s: &str) -> Result<SysctlProfile> {
        match s {
            "default" => Ok(SysctlProfile::Default),
            "bdp" => Ok(SysctlProfile::Bdp),
            "keep" => Ok(SysctlProfile::Keep),
            _ => match s.strip_prefix("capped:") {
                Some(v) => wanblk_netem_model::units::parse_size(v)
                    .map(SysctlProfile::Capped)
                    .map_err(|e| Error::Config(e.to_string())),
                None => {
                    Err(Error::Config(format!("sysctl profile `{s}`: use default, bdp, keep or capped:SIZE")))
                }
            },
        }
    }
}

/// Everything needed to create and run one emulator (stored as
/// `config.json` in the run directory for the daemon).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ScenarioConfig {
    /// The emulator's name (namespaces `wbk-NAME-{c,r,s}`).
    pub name: String,
    /// Client to server.
    pub fwd: Params,
    /// Server to client.
    pub back: Params,
    /// Changes over time.
    pub profile: Profile,
    /// Endpoint TCP buffers.
    pub sysctl: SysctlProfile,
    /// Loss PRNG seed.
    pub seed: u64,
    /// CPU of the release loop (`None`: not pinned, no RPS steering).
    pub emulator_cpu: Option<usize>,
    /// SCHED_FIFO priority of the release loop (0: none).
    pub rt_priority: i32,
    /// Kernel NFQUEUE length per direction.
    pub kernel_queue_len: u32,
    /// Lateness (ns) counted as a late release.
    pub late_threshold_ns: u64,
    /// One release-loop thread per direction instead of one for both.
    #[serde(default)]
    pub thread_per_direction: bool,
}

impl ScenarioConfig {
    /// Bandwidth-delay product of the forward direction, bytes (rate x RTT).
    pub fn bdp_bytes(&self) -> u64 {
        let rtt = self.fwd.delay_ns + self.back.delay_ns;
        (u128::from(self.fwd.rate_bps.max(self.back.rate_bps)) * u128::from(rtt) / 8 / 1_000_000_000) as u64
    }

    /// The `(key, value)` sysctls of the endpoints.
    pub fn endpoint_sysctls(&self) -> Vec<(String, String)> {
        let (rmax, wmax, rdef, wdef) = match self.sysctl {
            SysctlProfile::Keep => return Vec::new(),
            SysctlProfile::Default => (6_291_456, 4_194_304, 131_072, 16_384),
            SysctlProfile::Bdp => {
                let q = match self.fwd.queue {
                    QueueLimit::Packets(n) => u64::from(n) * 1514,
                    QueueLimit::Bytes(b) => b,
                    QueueLimit::Unlimited => self.bdp_bytes(),
                };
                let m = 4 * (self.bdp_bytes() + q);
                (m.max(6_291_456), m.max(4_194_304), 131_072, 16_384)
            }
            SysctlProfile::Capped(b) => (b, b, b.min(131_072), b.min(16_384)),
        };
        vec![
            ("net.ipv4.tcp_rmem".into(), format!("4096 {rdef} {rmax}")),
            ("net.ipv4.tcp_wmem".into(), format!("4096 {wdef} {wmax}")),
        ]
    }

    pub(crate) fn emulator(&self, router_ns: &str) -> EmulatorConfig {
        EmulatorConfig {
            router_ns: router_ns.to_string(),
            fwd: self.fwd,
            back: self.back,
            profile: self.profile.clone(),
            seed: self.seed,
            cpu: self.emulator_cpu,
            rt_priority: self.rt_priority,
            kernel_queue_len: self.kernel_queue_len,
            late_threshold_ns: self.late_threshold_ns,
            thread_per_direction: self.thread_per_direction,
        }
    }
}

/// Builds a [`Scenario`]. Defaults: 1 Gbit/s, 20 ms each way, a queue of one
/// BDP, no loss, distribution-default TCP buffers, the release loop pinned to
/// the last CPU under SCHED_FIFO priority 50.
#[derive(Debug, Clone)]
pub struct ScenarioBuilder {
    rate: u64,
    rate_back: Option<u64>,
    delay: u64,
    delay_back: Option<u64>,
    queue: QueueSpec,
    loss: f64,
    loss_back: Option<f64>,
    profile: Profile,
    sysctl: SysctlProfile,
    name: Option<String>,
    seed: u64,
    emulator_cpu: Option<Option<usize>>,
    rt_priority: i32,
    kernel_queue_len: u32,
    late_threshold_ns: u64,
    overhead: u32,
    thread_per_direction: bool,
}

impl Default for ScenarioBuilder {
    fn default() -> ScenarioBuilder {
        ScenarioBuilder {
            rate: 1_000_000_000,
            rate_back: None,
            delay: 20_000_000,
            delay_back: None,
            queue: QueueSpec::Bdp(1.0),
            loss: 0.0,
            loss_back: None,
            profile: Profile::default(),
            sysctl: SysctlProfile::Default,
            name: None,
            seed: 1,
            emulator_cpu: None,
            rt_priority: 50,
            kernel_queue_len: 200_000,
            late_threshold_ns: wanblk_netem_model::DEFAULT_LATE_THRESHOLD_NS,
            overhead: 14,
            thread_per_direction: false,
        }
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl ScenarioBuilder {
    /// Bottleneck rate in bit/s, both directions (0: unlimited).
    pub fn rate_bps(mut self, bps: u64) -> Self {
        self.rate = bps;
        self
    }
    /// Rate of the server-to-client direction, if different.
    pub fn rate_back_bps(mut self, bps: u64) -> Self {
        self.rate_back = Some(bps);
        self
    }
    /// One-way delay, both directions (unless [`delay_back`](Self::delay_back)).
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = d.as_nanos() as u64;
        self
    }
    /// One-way delay of the server-to-client direction.
    pub fn delay_back(mut self, d: Duration) -> Self {
        self.delay_back = Some(d.as_nanos() as u64);
        self
    }
    /// Drop-tail queue of `n` packets.
    pub fn queue_packets(mut self, n: u32) -> Self {
        self.queue = QueueSpec::Packets(n);
        self
    }
    /// Drop-tail queue of `n` wire bytes.
    pub fn queue_bytes(mut self, n: u64) -> Self {
        self.queue = QueueSpec::Bytes(n);
        self
    }
    /// Drop-tail queue of `f` bandwidth-delay products.
    pub fn queue_bdp(mut self, f: f64) -> Self {
        self.queue = QueueSpec::Bdp(f);
        self
    }
    /// Any [`QueueSpec`].
    pub fn queue(mut self, q: QueueSpec) -> Self {
        self.queue = q;
        self
    }
    /// Random loss probability, both directions (unless [`loss_back`](Self::loss_back)).
    pub fn loss(mut self, p: f64) -> Self {
        self.loss = p;
        self
    }
    /// Random loss of the server-to-client direction.
    pub fn loss_back(mut self, p: f64) -> Self {
        self.loss_back = Some(p);
        self
    }
    /// Parameter changes over time.
    pub fn profile(mut self, p: Profile) -> Self {
        self.profile = p;
        self
    }
    /// Endpoint TCP buffer sysctls.
    pub fn sysctl_profile(mut self, s: SysctlProfile) -> Self {
        self.sysctl = s;
        self
    }
    /// The emulator's name (default `tPID-N`, unique per process).
    pub fn name(mut self, n: &str) -> Self {
        self.name = Some(n.to_string());
        self
    }
    /// Seed of the loss PRNG.
    pub fn seed(mut self, s: u64) -> Self {
        self.seed = s;
        self
    }
    /// CPU for the release loop (`None`: do not pin). Default: the last CPU.
    pub fn emulator_cpu(mut self, cpu: Option<usize>) -> Self {
        self.emulator_cpu = Some(cpu);
        self
    }
    /// SCHED_FIFO priority of the release loop (0: normal scheduling).
    pub fn rt_priority(mut self, p: i32) -> Self {
        self.rt_priority = p;
        self
    }
    /// Kernel NFQUEUE length per direction.
    pub fn kernel_queue_len(mut self, n: u32) -> Self {
        self.kernel_queue_len = n;
        self
    }
    /// One release-loop thread (and socket) per direction instead of one
    /// thread for both (the default, measured better on 2 cores).
    pub fn thread_per_direction(mut self, on: bool) -> Self {
        self.thread_per_direction = on;
        self
    }
    /// Per-packet overhead added to the IP length on the wire (default 14).
    pub fn overhead_bytes(mut self, n: u32) -> Self {
        self.overhead = n;
        self
    }

    /// The configuration this builder describes.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad name, probability or queue.
    pub fn config(&self) -> Result<ScenarioConfig> {
        let name = match &self.name {
            Some(n) => n.clone(),
            None => format!("t{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)),
        };
        topology::check_name(&name)?;
        let loss_back = self.loss_back.unwrap_or(self.loss);
        for p in [self.loss, loss_back] {
            if !(0.0..=1.0).contains(&p) {
                return Err(Error::Config(format!("loss {p} is not within 0..1")));
            }
        }
        let delay_back = self.delay_back.unwrap_or(self.delay);
        let rate_back = self.rate_back.unwrap_or(self.rate);
        let queue = match self.queue {
            QueueSpec::Packets(n) => QueueLimit::Packets(n),
            QueueSpec::Bytes(b) => QueueLimit::Bytes(b),
            QueueSpec::Bdp(f) => {
                if !(f.is_finite() && f >= 0.0) {
                    return Err(Error::Config(format!("queue of {f} BDP")));
                }
                let bdp = u128::from(self.rate) * u128::from(self.delay + delay_back) / 8 / 1_000_000_000;
                let pkts = (bdp as f64 * f / 1514.0).ceil() as u32;
                QueueLimit::Packets(pkts.max(2))
            }
        };
        let p = |rate_bps, delay_ns, loss| Params {
            rate_bps,
            delay_ns,
            loss,
            queue,
            overhead_bytes: self.overhead,
        };
        let cpus = wanblk_sys::sched::available_cpus();
        let emulator_cpu = self.emulator_cpu.unwrap_or(Some(cpus - 1));
        Ok(ScenarioConfig {
            name,
            fwd: p(self.rate, self.delay, self.loss),
            back: p(rate_back, delay_back, loss_back),
            profile: self.profile.clone(),
            sysctl: self.sysctl,
            seed: self.seed,
            emulator_cpu,
            rt_priority: self.rt_priority,
            kernel_queue_len: self.kernel_queue_len,
            late_threshold_ns: self.late_threshold_ns,
            thread_per_direction: self.thread_per_direction,
        })
    }

    /// Sweeps stale emulators, creates the topology and starts the release
    /// loop as a thread of this process; returns once it serves its queues.
    ///
    /// # Errors
    /// Not root, missing tools, a failing command, or the loop failing to start.
    pub fn start(self) -> Result<Scenario> {
        let cfg = self.config()?;
        Scenario::start(cfg)
    }
}

/// A running emulated path. Dropping it stops the loop and removes the
/// namespaces (processes still running inside keep them alive, unnamed,
/// until they exit: stop the peers you spawned first).
#[derive(Debug)]
pub struct Scenario {
    topo: Topology,
    cfg: ScenarioConfig,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<Result<()>>>,
}

impl Scenario {
    /// A builder with the defaults.
    pub fn builder() -> ScenarioBuilder {
        ScenarioBuilder::default()
    }

    /// Starts a scenario from a full configuration (see [`ScenarioBuilder::start`]).
    ///
    /// # Errors
    /// As [`ScenarioBuilder::start`].
    pub fn start(cfg: ScenarioConfig) -> Result<Scenario> {
        topology::preflight()?;
        for name in topology::sweep_stale() {
            tracing::info!("removed stale emulator {name}");
        }
        let opts = CreateOptions { endpoint_sysctls: cfg.endpoint_sysctls(), emulator_cpu: cfg.emulator_cpu };
        let topo = topology::create(&cfg.name, &opts)?;
        let ecfg = cfg.emulator(&topo.router_ns);
        let shared = Arc::new(Shared::new(ecfg.threads()));
        let mut sc = Scenario { topo, cfg, shared, threads: Vec::new() };
        for slot in 0..ecfg.threads() {
            let (sh, ec) = (Arc::clone(&sc.shared), ecfg.clone());
            let t = std::thread::Builder::new()
                .name(format!("netem-{}-{slot}", sc.cfg.name))
                .spawn(move || emulator::run(&ec, &sh, slot))
                .map_err(|e| Error::io("spawn the emulator thread", e))?;
            sc.threads.push(t);
        }
        sc.shared.wait_ready(Duration::from_secs(10))?;
        Ok(sc)
    }

    /// The configuration.
    pub fn config(&self) -> &ScenarioConfig {
        &self.cfg
    }

    /// The namespaces.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The client's address.
    pub fn client_addr(&self) -> std::net::Ipv4Addr {
        topology::CLIENT_ADDR
    }

    /// The server's address.
    pub fn server_addr(&self) -> std::net::Ipv4Addr {
        topology::SERVER_ADDR
    }

    /// The namespace of `side`.
    pub fn namespace(&self, side: Side) -> &str {
        match side {
            Side::Client => &self.topo.client_ns,
            Side::Router => &self.topo.router_ns,
            Side::Server => &self.topo.server_ns,
        }
    }

    /// A command that runs `program` inside `side`'s namespace.
    ///
    /// # Panics
    /// If the namespace is gone (the scenario was torn down).
    pub fn command(&self, side: Side, program: &str) -> Command {
        let mut c = Command::new(program);
        self.enter(side, &mut c).expect("the scenario's namespace exists");
        c
    }

    /// Makes `cmd` run inside `side`'s namespace (a `setns` between fork and
    /// exec; arguments, environment and standard I/O are kept).
    ///
    /// # Errors
    /// The namespace is gone.
    pub fn enter(&self, side: Side, cmd: &mut Command) -> std::io::Result<()> {
        wanblk_sys::netns::command_in(cmd, &wanblk_sys::netns::path_of(self.namespace(side)))
    }

    /// Runs `cmd` to completion inside `side`'s namespace and returns its output.
    ///
    /// # Errors
    /// The program could not be started.
    pub fn exec(&self, side: Side, cmd: &mut Command) -> std::io::Result<Output> {
        self.enter(side, cmd)?;
        cmd.output()
    }

    /// Starts `cmd` inside `side`'s namespace (a long-running peer).
    ///
    /// # Errors
    /// The program could not be started.
    pub fn spawn(&self, side: Side, cmd: &mut Command) -> std::io::Result<Child> {
        self.enter(side, cmd)?;
        cmd.spawn()
    }

    /// Current counters (a fresh snapshot from the loop).
    ///
    /// # Errors
    /// [`Error::Stopped`] if the loop has ended.
    pub fn stats(&self) -> Result<Stats> {
        if self.threads.is_empty() || self.threads.iter().any(|t| t.is_finished()) {
            return Err(Error::Stopped("the release loop is not running".into()));
        }
        Ok(self.shared.stats())
    }

    /// Replaces the parameters and schedule from now on (profile offsets
    /// count from now). Packets already queued keep their release times.
    pub fn reschedule(&mut self, fwd: Params, back: Params, profile: Profile) {
        self.cfg.fwd = fwd;
        self.cfg.back = back;
        self.cfg.profile = profile.clone();
        self.shared.control(Control::Reschedule { fwd, back, profile });
    }

    /// Starts `profile` now, keeping the current parameters as its base.
    pub fn set_profile(&mut self, profile: Profile) {
        let (f, b) = (self.cfg.fwd, self.cfg.back);
        self.reschedule(f, b, profile);
    }

    /// Stops the loop and removes the namespaces; returns the final counters.
    ///
    /// # Errors
    /// The loop's error, if it failed while running; removing the topology.
    pub fn stop(mut self) -> Result<Stats> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<Stats> {
        if self.threads.is_empty() {
            return Ok(Stats::default());
        }
        self.shared.stop.store(true, Ordering::SeqCst);
        let mut result = Ok(());
        for t in self.threads.drain(..) {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(e),
                Err(_) => result = Err(Error::Stopped("the release loop panicked".into())),
            }
        }
        let stats = self.shared.snapshot();
        topology::destroy(&self.topo.name)?;
        result.map(|()| stats)
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!("netem {}: {e}", self.topo.name);
        }
    }
}
