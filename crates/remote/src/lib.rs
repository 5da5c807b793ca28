//! The network stores one command works on, as one object: [`Remote`].
//!
//! `wanblk copy`, `serve` and `mount` reach NBD and iSCSI stores the same
//! way: a [`Remote`] opens each store as a session pool (the URI picks the
//! driver, [`connector`]), then runs one controller for all of its pools
//! (so a copy between two network stores tunes one N for both) and,
//! if asked, the TCP log; at the end it stops them, closes every session
//! and hands back what happened ([`RemoteSummary`]).
//!
//! A *session* is one NBD connection or one iSCSI session (or MC/S
//! connection); a *pool* carries I/O over N sessions to one store; a
//! `Remote` holds the pools of one command.
//!
//! I/O boundary: this crate owns the tokio tasks (the controller's loop,
//! the TCP log); every decision is made by the sans-I/O
//! [`wanblk_tune::Controller`], every byte moved by the pools.

mod connect;
mod drive;
mod error;
mod host;
mod monitor;
mod options;
mod probe;
mod tcplog;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::pool::{Faults, Pool};
use wanblk_tune::share::{EnsemblePacer, Governor, GovernorConfig, SessionMeter, ShareReport};
use wanblk_tune::{Controller, DemandSample, IntervalSample, ProgressPoint, Timing, TuningReport};

pub use connect::{Scheme, connector, is_remote};
pub use error::RemoteError;
pub use host::{path_key, runtime_dir};
pub use monitor::MONITOR_PERIOD;
pub use options::{RemoteOptions, Sessions, ShareScope, TCP_LOG_PERIOD, Tuning};
pub use tcplog::HEADER as TCP_LOG_HEADER;
pub use wanblk_iscsi::Mode as IscsiMode;
/// A CHAP secret (never shown).
pub use wanblk_iscsi::Secret;

/// The network stores of one command. See the crate docs.
///
/// Use: [`open`](Self::open) each store, [`start`](Self::start) the
/// controller, do the I/O through the pools, [`stop`](Self::stop) the
/// controller when the I/O is done, then [`finish`](Self::finish).
pub struct Remote {
    options: RemoteOptions,
    pools: Vec<Arc<Pool>>,
    started: Instant,
    sessions: Arc<AtomicUsize>,
    running: Option<Running>,
    stopped: Option<Stopped>,
    /// The capacity the probe's trains measured before the job's first
    /// request ([`probe_path`](Self::probe_path)): `Some` once it ran.
    measured: Option<Option<f64>>,
}

/// The tasks of a started [`Remote`].
struct Running {
    stop: watch::Sender<bool>,
    controller: JoinHandle<(Controller, Governor, usize)>,
    tcp_log: Option<JoinHandle<std::io::Result<()>>>,
    monitor: JoinHandle<SessionMeter>,
}

/// What the tasks left behind.
struct Stopped {
    controller: Option<Controller>,
    governor: Option<Governor>,
    /// The most copies of this host seen on the path at once.
    host_copies: usize,
    meter: SessionMeter,
    notes: Vec<String>,
}

/// What a [`Remote`] did, handed back by [`Remote::finish`].
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteSummary {
    /// Active sessions per store at the end (1 without network stores).
    pub sessions: usize,
    /// Goodput per measurement interval.
    pub samples: Vec<IntervalSample>,
    /// Demand against capacity per interval (the share of the time request
    /// slots were busy; intervals the application paced were kept from the tuner).
    pub demand: Vec<DemandSample>,
    /// The tuner's record (with [`Sessions::Auto`] and a network store).
    pub tuning: Option<TuningReport>,
    /// Adjustments and warnings (store limits, failed sessions, the TCP log).
    pub notes: Vec<String>,
    /// Per store, in the order opened.
    pub stores: Vec<StoreSummary>,
    /// How fast the run reached the path (`None` without a controller).
    pub timing: Option<Timing>,
    /// Bytes moved over time, as the controller saw them.
    pub progress: Vec<ProgressPoint>,
    /// How the sessions shared the work (per-session totals, fairness).
    pub share: ShareReport,
}

/// What one store's pool did.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreSummary {
    /// The store (URI without secrets).
    pub name: String,
    /// Payload bytes each session carried, by session index (failed
    /// sessions included): how many sessions really carried data.
    pub session_bytes: Vec<u64>,
    /// Sessions retired after a connection failure.
    pub failed_sessions: usize,
    /// Straggling requests duplicated, and duplicates that answered first.
    pub hedged: (u64, u64),
    /// What went wrong and was ridden out.
    pub faults: Faults,
}

impl RemoteSummary {
    /// The faults of every store together.
    pub fn faults(&self) -> Faults {
        let mut f = Faults::default();
        for s in &self.stores {
            f.add(&s.faults);
        }
        f
    }
}

impl Remote {
    /// No store open yet.
    pub fn new(options: RemoteOptions) -> Remote {
        Remote {
            options,
            pools: Vec::new(),
            started: Instant::now(),
            sessions: Arc::new(AtomicUsize::new(1)),
            running: None,
            stopped: None,
            measured: None,
        }
    }

    /// The options.
    pub fn options(&self) -> &RemoteOptions {
        &self.options
    }

    /// Opens the store `uri` as a pool of sessions (its first sessions
    /// connected) and keeps it; the pool is the store's [`Endpoint`].
    ///
    /// # Errors
    /// Not a network store, a bad URI, or the first session fails.
    pub async fn open(&mut self, uri: &str) -> Result<Arc<Pool>, RemoteError> {
        let c = connector(uri, &self.options)?;
        let pool = Arc::new(Pool::open(c, self.options.pool_config()).await?);
        if self.options.rate_cap_bytes_per_s.is_some() {
            pool.set_rate_cap(self.options.rate_cap_bytes_per_s);
        }
        self.pools.push(Arc::clone(&pool));
        Ok(pool)
    }

    /// The pools opened so far.
    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }

    /// Notes of the pools so far (store limits, adjusted request size).
    pub fn notes(&self) -> Vec<String> {
        self.pools.iter().flat_map(|p| p.notes()).collect()
    }

    /// The largest request every pool accepts (each fitted it to its
    /// store), or the configured one without pools: the size the copy
    /// engine cuts its pieces to.
    pub fn max_request_bytes(&self) -> u32 {
        self.pools.iter().map(|p| p.max_request_bytes()).min().unwrap_or(self.options.max_request_bytes)
    }

    /// How many pieces of `piece_bytes()` bytes (the copy's piece size
    /// now: it follows a source pool's request size) keep the busiest
    /// pool's active sessions busy (at least 1; twice the depth without
    /// pools).
    pub fn slots(
        &self,
        piece_bytes: impl Fn() -> u32 + Send + Sync + 'static,
    ) -> impl Fn() -> usize + Send + Sync + 'static {
        let pools = self.pools.clone();
        let without = self.options.max_depth.max(1) * 2;
        move || {
            let piece = u64::from(piece_bytes().max(1));
            pools.iter().map(|p| p.capacity_bytes().div_ceil(piece).max(1) as usize).max().unwrap_or(without)
        }
    }

    /// The active sessions per store now, for a progress display.
    pub fn sessions(&self) -> impl Fn() -> usize + Send + Sync + 'static {
        let n = Arc::clone(&self.sessions);
        move || n.load(Ordering::Relaxed)
    }

    /// What went wrong so far, in words for a progress display: "" when
    /// nothing did, else e.g. "reconnecting (12 s)" or "3 reconnects, 17
    /// retried".
    pub fn fault_status(&self) -> impl Fn() -> String + Send + Sync + 'static {
        let pools = self.pools.clone();
        move || {
            let mut f = Faults::default();
            for p in &pools {
                f.add(&p.faults());
            }
            let mut parts = Vec::new();
            if f.reconnecting {
                parts.push("reconnecting".to_string());
            }
            if f.reconnects > 0 {
                parts.push(format!("{} reconnect{}", f.reconnects, if f.reconnects == 1 { "" } else { "s" }));
            }
            if f.retried_requests > 0 {
                parts.push(format!("{} retried", f.retried_requests));
            }
            if f.outage_s >= 1.0 {
                parts.push(format!("{:.0} s lost", f.outage_s));
            }
            parts.join(", ")
        }
    }

    /// A counter of the bytes the pools completed (for [`start`](Self::start)
    /// when nothing else counts progress, as in `serve`).
    pub fn pool_progress(&self) -> impl Fn() -> u64 + Send + 'static {
        let pools = self.pools.clone();
        move || pools.iter().map(|p| p.completed_bytes()).sum()
    }

    /// With `--capacity-probe` and a tuned N: sends the probe's echo trains
    /// to the first store's server and waits for their replies, so that
    /// no request of ours shares the bottleneck with them. Call after
    /// opening the stores and before the job's first request (else
    /// [`start`](Self::start) sends them in the background). It waits for
    /// the first reply at most three of the sessions' handshake round
    /// trips (at least 50 ms); a path under 1 ms is not probed.
    pub async fn probe_path(&mut self) {
        if !self.probing() || self.measured.is_some() {
            return;
        }
        let Some(first) = self.pools.first() else { return };
        let rtt_us = first.snapshot().sessions.iter().flat_map(|s| &s.tcp).map(|i| i.rtt_us).max();
        let rtt = std::time::Duration::from_micros(rtt_us.map_or(0, u64::from));
        if rtt < std::time::Duration::from_millis(1) {
            return;
        }
        let wait = (rtt * 3).max(std::time::Duration::from_millis(50));
        let (peer, own) = (first.peer_addr(), self.own_bytes());
        self.measured =
            Some(tokio::task::spawn_blocking(move || probe::measure(peer, wait, &own)).await.ok().flatten());
    }

    /// The capacity probe runs: asked for, with a tuned N whose search
    /// uses the model (not the paper's, which has no use for it).
    fn probing(&self) -> bool {
        let t = &self.options.tuning;
        self.options.capacity_probe
            && matches!(self.options.sessions, Sessions::Auto { .. })
            && t.model
            && !t.paper
    }

    /// A counter of the TCP bytes the pools' sessions have moved.
    fn own_bytes(&self) -> impl Fn() -> u64 + Send + 'static {
        let pools = self.pools.clone();
        move || {
            pools
                .iter()
                .flat_map(|p| p.snapshot().sessions)
                .flat_map(|s| s.tcp)
                .map(|i| i.bytes_received + i.bytes_acked)
                .sum()
        }
    }

    /// Starts the controller on every pool (and the TCP log if asked).
    /// `completed` counts payload bytes of completed requests (monotonic);
    /// without TCP counters goodput comes from it. Does nothing if already
    /// started.
    ///
    /// # Errors
    /// The tuner's configuration is invalid.
    pub fn start(&mut self, completed: impl Fn() -> u64 + Send + 'static) -> Result<(), RemoteError> {
        self.start_with_remaining(completed, || None)
    }

    /// [`start`](Self::start) for a job of known size: `remaining` tells
    /// the bytes still to move. Near the end (less left than a probe of N
    /// takes to pay off) the controller stops changing N: new sessions
    /// would still be in slow start when the work runs out, and fewer would
    /// leave their requests to drain.
    pub fn start_with_remaining(
        &mut self,
        completed: impl Fn() -> u64 + Send + 'static,
        remaining: impl Fn() -> Option<u64> + Send + 'static,
    ) -> Result<(), RemoteError> {
        if self.running.is_some() || self.stopped.is_some() {
            return Ok(());
        }
        let cores = std::thread::available_parallelism().map_or(0, usize::from);
        let mut config = self.options.controller_config(!self.pools.is_empty(), cores);
        // The trains' estimate from before the first request sizes the
        // first point with the largest windows the sockets allow.
        let before = self.measured.flatten();
        let window = before.and_then(|_| wanblk_sys::tcp::window_cap(&self.options.tcp));
        config.window_cap_bytes = window;
        let ctl = Controller::new(
            config,
            &drive::counters(&self.pools, completed(), remaining(), before),
            Instant::now(),
        )?;
        if let (Some(c), Some(w), true) = (before, window, ctl.first_point_raised()) {
            tracing::info!(
                n = ctl.decision().active,
                capacity_mbps = c * 8.0 / 1e6,
                window_cap_bytes = w,
                "first point sized from the capacity (sessions at most at the buffers' cap)"
            );
        }
        drive::apply(&self.pools, ctl.decision());
        self.sessions.store(ctl.decision().active, Ordering::Relaxed);
        let (stop, stop_rx) = watch::channel(false);
        let tcp_log = self.options.tcp_log.clone().map(|path| {
            let (pools, start, stop) = (self.pools.clone(), self.started, stop.subscribe());
            tokio::spawn(async move { tcplog::run(&path, pools, start, TCP_LOG_PERIOD, stop).await })
        });
        if ctl.small_path() {
            tracing::info!(
                n = ctl.decision().active,
                "small path (RTT below 1 ms or no TCP): starting small"
            );
        }
        let monitor = tokio::spawn(monitor::run(
            self.pools.clone(),
            self.started,
            MONITOR_PERIOD,
            self.options.sessions_view,
            stop.subscribe(),
        ));
        let governor = Governor::new(GovernorConfig {
            stagger_seed: stagger_seed(),
            ..GovernorConfig::new(self.options.share)
        });
        let host = self.host_link();
        let capacity = if self.probing() && !ctl.small_path() {
            match self.measured {
                Some(c) => probe::Capacity::known(c),
                None => probe::start(self.pools.first().and_then(|p| p.peer_addr()), self.own_bytes()),
            }
        } else {
            probe::Capacity::default()
        };
        let controller = tokio::spawn(drive::run(
            ctl,
            capacity,
            governor,
            host,
            self.options.ensemble_pacing.then(|| (EnsemblePacer::new(), self.options.rate_cap_bytes_per_s)),
            self.pools.clone(),
            (completed, remaining),
            Arc::clone(&self.sessions),
            stop_rx,
        ));
        self.running = Some(Running { stop, controller, tcp_log, monitor });
        Ok(())
    }

    /// The link to the host's coordinator: with a tuned N, network stores
    /// and `--share-scope host` (the copies of this host on the same path
    /// share one budget). The path key is the first store's server, in
    /// this network namespace: the same address in another namespace (the
    /// bench's and the tests' emulated paths) is another path.
    fn host_link(&self) -> Option<host::HostLink> {
        let tuned = matches!(self.options.sessions, Sessions::Auto { .. });
        let first = self.pools.first()?;
        (tuned && self.options.share_scope == ShareScope::Host).then(|| {
            let key = match wanblk_sys::netns::current_id() {
                Some(ns) => format!("{ns}{}", path_key(first.name())),
                None => path_key(first.name()),
            };
            host::HostLink::start(runtime_dir(), key)
        })
    }

    /// Stops the controller (recording the last, partial interval) and the
    /// TCP log; the pools stay open. Does nothing if not running.
    pub async fn stop(&mut self) {
        let Some(run) = self.running.take() else { return };
        let _ = run.stop.send(true);
        let mut notes = Vec::new();
        let (controller, governor, host_copies) = match run.controller.await {
            Ok((c, g, k)) => (Some(c), Some(g), k),
            Err(e) => {
                notes.push(format!("controller failed: {e}"));
                (None, None, 1)
            }
        };
        if let Some(t) = run.tcp_log {
            let path = self.options.tcp_log.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
            match t.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => notes.push(format!("TCP log: writing {path}: {e}")),
                Err(e) => notes.push(format!("TCP log task failed: {e}")),
            }
        }
        let meter = run.monitor.await.unwrap_or_else(|e| {
            notes.push(format!("session monitor failed: {e}"));
            SessionMeter::new()
        });
        self.stopped = Some(Stopped { controller, governor, host_copies, meter, notes });
    }

    /// Stops (if still running), closes every session cleanly (NBD_CMD_DISC,
    /// iSCSI logout; failures to close only go to the debug log) and
    /// returns what happened.
    pub async fn finish(mut self) -> RemoteSummary {
        self.stop().await;
        for p in &self.pools {
            if let Err(e) = p.close().await {
                tracing::debug!("closing {}: {e}", p.name());
            }
        }
        let Stopped { controller, governor, host_copies, meter, notes: mut task_notes } =
            self.stopped.take().unwrap_or(Stopped {
                controller: None,
                governor: None,
                host_copies: 1,
                meter: SessionMeter::new(),
                notes: Vec::new(),
            });
        let mut notes: Vec<String> = Vec::new();
        for n in self.notes().into_iter().chain(task_notes.drain(..)) {
            if !notes.contains(&n) {
                notes.push(n);
            }
        }
        let stores = self
            .pools
            .iter()
            .map(|p| {
                let s = p.snapshot();
                StoreSummary {
                    name: p.name().to_string(),
                    session_bytes: s.sessions.iter().map(|x| x.completed_bytes).collect(),
                    failed_sessions: s.failed(),
                    hedged: (s.hedged, s.hedges_won),
                    faults: s.faults,
                }
            })
            .collect();
        let samples = controller.as_ref().map(|c| c.samples().to_vec()).unwrap_or_default();
        let fairness: Vec<f64> = samples.iter().filter(|s| s.settled()).filter_map(|s| s.fairness).collect();
        let ceilings = governor.as_ref().map(|g| g.changes().to_vec()).unwrap_or_default();
        let mut share = meter.report(self.options.share.as_str(), &fairness, ceilings, host_copies);
        share.readings = governor.as_ref().map(|g| g.readings().to_vec()).unwrap_or_default();
        RemoteSummary {
            sessions: controller.as_ref().map_or(1, |c| c.decision().active),
            samples,
            demand: controller.as_ref().map(|c| c.demand().to_vec()).unwrap_or_default(),
            tuning: controller.as_ref().and_then(Controller::tuning),
            notes,
            stores,
            timing: controller.as_ref().map(Controller::timing),
            progress: controller.as_ref().map(|c| c.progress().to_vec()).unwrap_or_default(),
            share,
        }
    }
}

/// A seed for the share governor's raise waits that differs between the
/// copies of one host started together (their process ids) and between
/// runs (the clock); never 0, which means no random part.
fn stagger_seed() -> u64 {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    (nanos ^ u64::from(std::process::id()).rotate_left(32)) | 1
}
