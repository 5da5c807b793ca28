//! How to reach network stores and how to carry I/O to them.

use std::path::PathBuf;
use std::time::Duration;

use wanblk_blockdev::pool::{Hedge, PoolConfig, RetryPolicy};
use wanblk_sys::tcp::TcpOptions;
use wanblk_tune::share::ShareMode;
use wanblk_tune::{ControllerConfig, IntervalChoice, IntervalPolicy, ModelConfig, Parallelism, TunerConfig};

/// How many sessions each network store gets, as the user asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sessions {
    /// Exactly this many.
    Fixed(usize),
    /// Tuned while running, starting at `initial`, never above `max`.
    Auto {
        /// First N tried.
        initial: usize,
        /// Largest N.
        max: usize,
    },
}

/// How N is tuned (with [`Sessions::Auto`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// The paper's tuner exactly ([`TunerConfig::paper`]) with only what
    /// the paper's experiments did ([`ControllerConfig::paper`]): no
    /// request sizing and none of the refinements below.
    pub paper: bool,
    /// Size requests and depth to each session's share of the path
    /// ([`wanblk_tune::request_plan`]); off keeps the largest ones.
    pub size_requests: bool,
    /// Measurement interval.
    pub interval: IntervalChoice,
    /// The model-informed search ([`TunerConfig::model`]).
    pub model: bool,
    /// Open the search's next sessions ahead of need
    /// ([`ControllerConfig::warm_spares`]).
    pub spares: bool,
    /// Warm-ups wait for new sessions to connect and for goodput to
    /// settle ([`ControllerConfig::connect_wait_max`],
    /// [`ControllerConfig::settle_max`]).
    pub settle: bool,
    /// Start small on a small path ([`ControllerConfig::small_path`]).
    pub small_path: bool,
    /// Signals to the tuner ([`ControllerConfig::signals`]).
    pub signals: bool,
    /// With the model: a step up from a full first point
    /// ([`ModelConfig::step_above_full`](wanblk_tune::ModelConfig::step_above_full)).
    pub step_above_full: bool,
}

impl Default for Tuning {
    /// Our tuner with every refinement, request sizing, and the automatic
    /// interval (at least 0.25 s).
    fn default() -> Self {
        Tuning {
            paper: false,
            size_requests: true,
            interval: IntervalChoice::Auto(IntervalPolicy {
                min_interval_s: 0.25,
                ..IntervalPolicy::default()
            }),
            model: true,
            spares: true,
            settle: true,
            small_path: true,
            signals: true,
            step_above_full: true,
        }
    }
}

/// Everything about reaching network stores: the pool's shape, tuning,
/// TCP options, and the NBD and iSCSI options.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteOptions {
    /// Sessions per store.
    pub sessions: Sessions,
    /// Tuning of N (with [`Sessions::Auto`]) and of the request size.
    pub tuning: Tuning,
    /// Most requests in flight per session.
    pub max_depth: usize,
    /// Largest request on the wire, bytes.
    pub max_request_bytes: u32,
    /// Which straggling requests idle sessions may duplicate.
    pub hedge: Hedge,
    /// Reconnecting, retries and request deadlines.
    pub retry: RetryPolicy,
    /// Options of every TCP connection.
    pub tcp: TcpOptions,
    /// NBD: ask for structured replies (and block status).
    pub structured_replies: bool,
    /// NBD: TLS settings for `nbds://` stores (the URI's `tls-*`
    /// parameters override them).
    pub tls: wanblk_nbd::TlsClientOptions,
    /// iSCSI: one session per parallel session, or connections in one (MC/S).
    pub iscsi_mode: crate::IscsiMode,
    /// iSCSI login key overrides.
    pub iscsi_params: Vec<(String, String)>,
    /// iSCSI InitiatorName (the host's default if `None`).
    pub initiator_name: Option<String>,
    /// iSCSI CHAP secret for a URI user without `%password`.
    pub iscsi_secret: Option<wanblk_iscsi::Secret>,
    /// iSCSI mutual CHAP: the target's user name, if it must be checked.
    pub iscsi_target_user: Option<String>,
    /// iSCSI mutual CHAP: the target's secret.
    pub iscsi_target_secret: Option<wanblk_iscsi::Secret>,
    /// Write every session's TCP_INFO as CSV to this file every
    /// [`TCP_LOG_PERIOD`](crate::TCP_LOG_PERIOD).
    pub tcp_log: Option<PathBuf>,
    /// Cap on the goodput of each store, bytes per second (`--rate`): its
    /// active sessions are paced at their share of it, and the tuner
    /// treats it as the ceiling. What we receive is bounded by the caller
    /// (the copy engine asks no faster than the cap).
    pub rate_cap_bytes_per_s: Option<u64>,
    /// Print the live per-session table on stderr every
    /// [`MONITOR_PERIOD`](crate::MONITOR_PERIOD).
    pub sessions_view: bool,
    /// How the sessions share the path with other traffic.
    pub share: ShareMode,
    /// Whether the copies of this host on the same path share one session
    /// budget (the host's coordinator).
    pub share_scope: ShareScope,
    /// Pace the sessions together at the measured goodput while the path
    /// is full and shared ([`wanblk_tune::share::pacing`]).
    pub ensemble_pacing: bool,
    /// With a tuned N and the model-informed search: send two ICMP echo
    /// trains to the server at the start and size the search's jumps by
    /// the capacity their replies' spacing shows
    /// ([`wanblk_tune::capacity`]); measured before the first request
    /// ([`Remote::probe_path`](crate::Remote::probe_path)), it sizes the
    /// first point too ([`ControllerConfig::window_cap_bytes`]).
    pub capacity_probe: bool,
}

/// Which copies share one session budget (`--share-scope`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ShareScope {
    /// The copies of this host that use the same path (its server) split
    /// the N one copy needs, through a coordinator on a Unix socket.
    Host,
    /// Each copy tunes on its own (the default: see `--share-scope`).
    #[default]
    None,
}

impl std::str::FromStr for ShareScope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "host" => Ok(ShareScope::Host),
            "none" => Ok(ShareScope::None),
            _ => Err(format!("expected host or none, got {s:?}")),
        }
    }
}

impl Default for RemoteOptions {
    /// `-C auto` (4 to 64 sessions), 4 requests of 4 MiB per session,
    /// straggling reads hedged, system TCP defaults, structured replies,
    /// iSCSI sessions.
    fn default() -> Self {
        RemoteOptions {
            sessions: Sessions::Auto { initial: 4, max: 64 },
            tuning: Tuning::default(),
            max_depth: 4,
            max_request_bytes: 4 << 20,
            hedge: Hedge::Reads,
            retry: RetryPolicy::default(),
            tcp: TcpOptions::default(),
            structured_replies: true,
            tls: wanblk_nbd::TlsClientOptions::default(),
            iscsi_mode: wanblk_iscsi::Mode::Sessions,
            iscsi_params: Vec::new(),
            initiator_name: None,
            iscsi_secret: None,
            iscsi_target_user: None,
            iscsi_target_secret: None,
            tcp_log: None,
            rate_cap_bytes_per_s: None,
            sessions_view: false,
            share: ShareMode::default(),
            share_scope: ShareScope::default(),
            ensemble_pacing: false,
            capacity_probe: false,
        }
    }
}

impl RemoteOptions {
    /// The shape of every pool. With `auto` (and small-path sense) a pool
    /// opens one session first: the controller looks at its RTT before it
    /// decides how many more to open.
    pub fn pool_config(&self) -> PoolConfig {
        let (initial_sessions, max_sessions) = match self.sessions {
            Sessions::Fixed(n) => (n, n),
            Sessions::Auto { max, .. } if self.tuning.small_path && !self.tuning.paper => (1, max),
            Sessions::Auto { initial, max } => (initial, max),
        };
        PoolConfig {
            initial_sessions,
            max_sessions,
            max_depth: self.max_depth,
            max_request_bytes: self.max_request_bytes,
            hedge: self.hedge,
            retry: self.retry,
            background_initial: matches!(self.sessions, Sessions::Auto { .. }),
        }
    }

    /// How long connecting and logging in may take: half the request
    /// deadline, between 5 and 30 s (30 s without a deadline), so that
    /// reconnecting through an outage tries again soon.
    pub fn connect_timeout(&self) -> Duration {
        self.retry.io_timeout.map_or(Duration::from_secs(30), |t| {
            (t / 2).clamp(Duration::from_secs(5), Duration::from_secs(30))
        })
    }

    /// The controller's configuration: a tuner only with
    /// [`Sessions::Auto`] and something to tune. `cores` is the host's
    /// (for the small path's start).
    pub fn controller_config(&self, has_pools: bool, cores: usize) -> ControllerConfig {
        let t = &self.tuning;
        let parallelism = match self.sessions {
            Sessions::Fixed(n) => Parallelism::Fixed(n),
            Sessions::Auto { initial, max } if has_pools => {
                let base = if t.paper { TunerConfig::paper() } else { TunerConfig::default() };
                let model = if t.model {
                    base.model.map(|m| ModelConfig { step_above_full: t.step_above_full, ..m })
                } else {
                    None
                };
                Parallelism::Tuned(TunerConfig { n0: initial, n_max: max, model, ..base })
            }
            Sessions::Auto { .. } => Parallelism::Fixed(1),
        };
        let rate_cap_bytes_per_s = self.rate_cap_bytes_per_s.map(|r| r as f64);
        if t.paper {
            // The user's cap stays the ceiling (outside the paper's scope).
            return ControllerConfig {
                interval: t.interval,
                rate_cap_bytes_per_s,
                ..ControllerConfig::paper(parallelism)
            };
        }
        let on = ControllerConfig::new(parallelism);
        ControllerConfig {
            interval: t.interval,
            size_requests: t.size_requests,
            warm_spares: t.spares,
            connect_wait_max: if t.settle { on.connect_wait_max } else { Duration::ZERO },
            settle_max: if t.settle { on.settle_max } else { Duration::ZERO },
            small_path: t.small_path,
            signals: t.signals,
            cores,
            rate_cap_bytes_per_s,
            ..on
        }
    }
}

/// How often the TCP log samples the sessions.
pub const TCP_LOG_PERIOD: Duration = Duration::from_millis(100);
