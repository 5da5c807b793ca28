//! Options shared by every command that talks to a network store over
//! parallel sessions (`wanblk copy`, `wanblk serve`): how many sessions,
//! tuning, request shape, TCP and protocol knobs.

use std::time::Duration;

use wanblk_blockdev::pool::{Hedge, RetryPolicy};
use wanblk_remote::{RemoteOptions, Sessions, Tuning};
use wanblk_sys::tcp::TcpOptions;
use wanblk_tune::IntervalChoice;
use wanblk_tune::share::ShareMode;

use crate::units::{parse_duration_or_zero, parse_size};

/// How many sessions to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Connections {
    /// Exactly this many.
    Fixed(usize),
    /// Tuned while copying.
    Auto,
}

fn parse_connections(s: &str) -> Result<Connections, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(Connections::Auto);
    }
    connection_count(s)
        .map(Connections::Fixed)
        .map_err(|_| format!("expected `auto` or a number of connections from 1 to 1024, got {s:?}"))
}

/// The `--interval` argument.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum IntervalArg {
    /// Chosen from the path.
    Auto,
    /// Fixed.
    Every(Duration),
}

fn parse_interval(s: &str) -> Result<IntervalArg, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(IntervalArg::Auto);
    }
    let (num, scale) = if let Some(ms) = s.strip_suffix("ms") {
        (ms, 1e-3)
    } else if let Some(sec) = s.strip_suffix('s') {
        (sec, 1.0)
    } else {
        (s, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v * scale <= 3600.0 => {
            Ok(IntervalArg::Every(Duration::from_secs_f64(v * scale)))
        }
        _ => Err(format!("expected an interval such as 500ms, 2s or `auto`, got {s:?}")),
    }
}

fn parse_request_size(s: &str) -> Result<u32, String> {
    let v = parse_size(s)?;
    if v == 0 || v > 256 << 20 || v % 512 != 0 {
        return Err(format!("request size must be a multiple of 512 bytes between 512 and 256M, got {s:?}"));
    }
    Ok(v as u32)
}

fn connection_count(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n @ 1..=1024) => Ok(n),
        _ => Err(format!("expected a number of connections from 1 to 1024, got {s:?}")),
    }
}

fn parse_param(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// A refinement of `--connections auto` that `--tuner-off` turns off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TunerFeature {
    /// Steps of 4x while the path has room, and a search for the knee led
    /// by the path's model.
    Model,
    /// Open the sessions the search may want next ahead of need.
    Spares,
    /// Measure a new N only once its sessions are connected and goodput is
    /// steady.
    Settle,
    /// Start at 1-2 sessions on a path under 1 ms or a Unix socket.
    SmallPath,
    /// Tell the tuner when the path is full (the RTT stands above its
    /// minimum).
    Signals,
}

/// iSCSI parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum IscsiMode {
    /// One session per parallel connection (works with any target).
    Sessions,
    /// Several connections inside one session (MC/S; the target must allow it;
    /// write data then waits for the target's R2T, InitialR2T=Yes).
    Mcs,
}

/// TLS settings for `nbds://` and `nbds+unix://` stores (libnbd's URI
/// parameters of the same names override them per URI).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ClientTlsArgs {
    /// Directory with ca-cert.pem (the CA that signed the server's
    /// certificate) and optionally client-cert.pem and client-key.pem
    /// (libnbd's layout; URI: tls-certificates=DIR). Without it the
    /// system's trusted CAs verify the server.
    #[arg(long, value_name = "DIR")]
    pub(crate) tls_certificates: Option<std::path::PathBuf>,
    /// Verify the server's certificate and name (URI: tls-verify-peer).
    /// `false` still encrypts, but to whoever answers.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) tls_verify_peer: bool,
    /// The name the server's certificate must carry (URI: tls-hostname);
    /// the URI's host by default.
    #[arg(long, value_name = "NAME")]
    pub(crate) tls_hostname: Option<String>,
    /// TLS pre-shared key file (URI: tls-psk-file). Not supported: rustls
    /// has no TLS-PSK; use certificates.
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_psk_file: Option<std::path::PathBuf>,
    /// PSK identity (URI: tls-username); only used with a PSK.
    #[arg(long, value_name = "NAME")]
    pub(crate) tls_username: Option<String>,
}

impl ClientTlsArgs {
    /// The options every `nbds://` store starts from.
    pub(crate) fn options(&self) -> wanblk_nbd::TlsClientOptions {
        wanblk_nbd::TlsClientOptions {
            certificates: self.tls_certificates.clone(),
            verify_peer: self.tls_verify_peer,
            hostname: self.tls_hostname.clone(),
            psk_file: self.tls_psk_file.clone(),
            username: self.tls_username.clone(),
        }
    }
}

/// `auto`'s first N for `wanblk copy` (the paper's N0).
pub(crate) const COPY_INITIAL: usize = 4;
/// `auto`'s first N for the front ends (`mount`, `serve`): see
/// `--initial-connections`.
pub(crate) const FRONT_END_INITIAL: usize = 8;

/// Session and tuning options (flattened into commands).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SessionArgs {
    /// Parallel sessions per network store: a number, or `auto` to tune N
    /// while copying (automatic parallelism tuning: a search on measured
    /// goodput that steps up quickly while the path has room, then looks
    /// for the fewest sessions that fill it; re-tuning when the path
    /// changes).
    #[arg(short = 'C', long, default_value = "auto", value_parser = parse_connections)]
    pub(crate) connections: Connections,

    /// Upper bound on sessions with `--connections auto` (the store's own
    /// limit also applies). 128: with the 512 KB socket buffers of older
    /// systems a session carries about 21 Mbit/s at 200 ms RTT, and a
    /// 1 Gbit/s path needs about 75 of them.
    #[arg(long, default_value_t = 128, value_parser = connection_count)]
    pub(crate) max_connections: usize,

    /// First N tried by `--connections auto`. Default: 4 for `copy`; 8
    /// for `mount` and `serve`, whose writes and reads come in bursts on
    /// sessions left idle in between (TCP starts each burst in slow start
    /// again, and more sessions leave it sooner: a 256 MiB ext4 write +
    /// sync at 100 ms RTT moved 543-662 Mbit/s with 8 against 377-458
    /// with 4; with 16 a sequential reader waited more often for one slow
    /// request, and a cold 1 GiB read fell from about 800 to 580-690).
    #[arg(long, value_parser = connection_count)]
    pub(crate) initial_connections: Option<usize>,

    /// Goodput measurement interval: a duration (`500ms`, `2s`) or `auto`.
    /// `auto` takes T = clamp(5 x RTT, 0.25 s, 3 s), with RTT the largest
    /// smoothed RTT of the active sessions from TCP_INFO. The interval after
    /// N changes is a warm-up, discarded: after an increase it starts once
    /// the new sessions are connected (at most 5 s) and lasts at least
    /// RTT x (1 + log2(W / 14600)) for the largest window W any session has
    /// reached (slow start), then until goodput over three consecutive
    /// spans of 2 x RTT agrees within 10 % (at most 4 s: slow start over
    /// and the first losses taken); after a decrease it lasts until the deactivated
    /// sessions have finished the requests they took (at most 3 s, and no
    /// longer once they carry under 5 % of the bytes), then 2 x RTT for
    /// the queue to drain. Goodput is counted from the bytes
    /// TCP delivered or had acknowledged on every session; over Unix
    /// sockets from completed requests, and then `auto` lasts until each
    /// session has completed about 4 requests (at most 3 s).
    #[arg(long, default_value = "auto", value_parser = parse_interval)]
    pub(crate) interval: IntervalArg,

    /// Reproduce the paper's tuner exactly (strict comparisons, one sample
    /// per point, no warm-up discard, no re-tuning, none of the
    /// refinements of `--tuner-off`, no request sizing).
    #[arg(long)]
    pub(crate) paper_tuner: bool,

    /// Turn off refinements of `--connections auto` (comma-separated; all
    /// are on by default): `model` (steps of 4x while the path has room,
    /// and a knee search led by the path's model), `spares` (open the
    /// sessions the search may want next ahead of need), `settle` (measure
    /// a new N only once its sessions are connected and goodput is
    /// steady), `small-path` (start at 1-2 sessions on a path under 1 ms
    /// or a Unix socket), `signals` (tell the tuner the path is full when
    /// the RTT stands above its minimum).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST")]
    pub(crate) tuner_off: Vec<TunerFeature>,

    /// Keep `--requests` x `--request-size` in flight on every session even
    /// with `auto`. By default `auto` keeps max(2 x goodput x RTT, 64 MiB)
    /// in flight over all sessions together: each session's share is cut
    /// into requests of a power of two between 256 KiB and --request-size,
    /// at most --requests of them, so that a session the tuner
    /// deactivates has little left to finish before the next measurement.
    #[arg(long)]
    pub(crate) fixed_requests: bool,

    /// Requests in flight per session (the most, with `auto`).
    #[arg(short = 'R', long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) requests: u32,

    /// Bytes per request (K, M, G suffixes).
    #[arg(long, default_value = "4M", value_parser = parse_request_size)]
    pub(crate) request_size: u32,

    /// TCP congestion control for our connections (e.g. cubic, bbr).
    #[arg(long)]
    pub(crate) congestion: Option<String>,

    /// Do not ask NBD servers for structured replies.
    #[arg(long)]
    pub(crate) no_structured_replies: bool,

    /// iSCSI parallelism: separate sessions, or connections within one session.
    #[arg(long, value_enum, default_value = "sessions")]
    pub(crate) iscsi_mode: IscsiMode,

    /// Override an iSCSI login key (repeatable), e.g. MaxBurstLength=1048576.
    #[arg(long = "iscsi-param", value_name = "KEY=VALUE", value_parser = parse_param)]
    pub(crate) iscsi_params: Vec<(String, String)>,

    /// iSCSI InitiatorName. Default: open-iscsi's (/etc/iscsi/initiatorname.iscsi)
    /// if set, else iqn.2024-01.<reversed domain>:<host> from the host name
    /// (the same on every run).
    #[arg(long, value_name = "IQN")]
    pub(crate) initiator_name: Option<String>,

    /// File holding the iSCSI CHAP secret of the user named in the URI
    /// (iscsi://USER@host/...); one trailing newline is ignored. Else the
    /// WANBLK_ISCSI_PASSWORD environment variable (or USER%SECRET in the
    /// URI, which other local users can see).
    #[arg(long, value_name = "FILE", value_parser = parse_secret_file)]
    pub(crate) secret_file: Option<wanblk_remote::Secret>,

    /// Mutual CHAP: file holding the secret the iSCSI target must prove it
    /// knows (its outgoing account); else WANBLK_ISCSI_TARGET_PASSWORD.
    /// Must differ from the initiator's secret.
    #[arg(long, value_name = "FILE", value_parser = parse_secret_file)]
    pub(crate) target_secret_file: Option<wanblk_remote::Secret>,

    /// Mutual CHAP: the user name the target must answer with.
    #[arg(long, value_name = "NAME")]
    pub(crate) target_user: Option<String>,

    /// When sessions fail or the store goes away (a restart, a network
    /// outage), keep trying to reconnect this long (e.g. 90s, 5m, 1h):
    /// attempts one at a time, waiting 0.2 s after the first failure,
    /// doubling up to 5 s, with jitter. Requests wait meanwhile, and are
    /// sent again once a session works. 0 gives up at the first failure.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration_or_zero)]
    pub(crate) retry_for: Duration,

    /// A request with no answer after this long (flushes: 4 times as
    /// long) is sent again on another session and its session is
    /// replaced (iSCSI aborts the task first). It also sets TCP's user
    /// timeout (unacknowledged data) and connect timeouts (half of it,
    /// 5 to 30 s); keepalive probes start after half of it (at most 30 s)
    /// idle. 0 turns the deadline off.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration_or_zero)]
    pub(crate) io_timeout: Duration,

    /// How `--connections auto` shares the network path with other
    /// traffic. `fair` (the default): stop adding sessions once the path is
    /// full and shared: the round-trip time has risen above the path's base
    /// RTT by more than a quarter of it (a standing queue at the
    /// bottleneck) and each session moves less than with fewer sessions
    /// (more sessions only take share from the others); N is then held
    /// where the windows fit without that queue, so a flow sharing the path
    /// keeps most of its rate; once fewer sessions left that queue as deep
    /// (flows that keep it full whatever wanblk does), the queue alone
    /// lowers N, towards one session. A queue that stands for several
    /// seconds while each session still moves as much as with fewer (other
    /// traffic yielding to wanblk, or a server's own pace) is tested by
    /// taking a quarter of the sessions away: if the queue stays it is
    /// someone else's and is treated so; if goodput falls with it, the
    /// sessions come back. While N is held so, the window each
    /// session advertises is clamped near the sessions' mean, so they move
    /// about evenly (in a restore; writes can be paced with
    /// --ensemble-pacing). When a queue that stood goes while N stays (the
    /// other traffic ended), the limit is lifted and the search for N
    /// starts again. Alone on the path (fewer sessions carried
    /// nearly all of what more carry, with no queue) the queue is wanblk's
    /// own and is left to the tuner. `polite`: act on the queue alone, allowing
    /// almost none (5 % of the base RTT), so other traffic goes first;
    /// against traffic that keeps the queue full wanblk falls back towards
    /// one session. `greedy`: no such limit; more sessions are added as
    /// long as goodput rises, even when it is taken from other flows (the
    /// behaviour before this option existed). A queue of up to 10 ms always
    /// counts as none, and on a path whose base RTT is below 1 ms (a LAN)
    /// no limit applies. Applies to `--connections auto`.
    #[arg(long, value_name = "MODE", default_value = "fair", value_parser = parse_share)]
    pub(crate) share: ShareMode,

    /// Which copies share one session budget with `--connections auto`.
    /// `none` (the default): each copy tunes on its own, and `--share`
    /// keeps copies from escalating against each other. `host`
    /// (experimental): copies running on this machine against the same
    /// server split the number of sessions one copy would use; they find
    /// each other through a small coordinator on a Unix socket in
    /// $XDG_RUNTIME_DIR/wanblk (else /run/wanblk), run by one of them and
    /// taken over by another when it ends; a copy that cannot reach it goes
    /// on alone. The budget starts as the N the first copy tuned to and
    /// grows by a quarter whenever every copy runs near its share with no
    /// standing queue on the path (on a lossy path, where each session
    /// carries little, the first N is far too few); when a copy ends, the
    /// others take its share over at once. Off by default: it is
    /// newer and less measured than `none` (docs/results/share).
    #[arg(long, value_name = "SCOPE", default_value = "none")]
    pub(crate) share_scope: wanblk_remote::ShareScope,

    /// Once `--share` has found the path full and shared, pace all
    /// sessions together at the goodput they reach (plus 10 %), split
    /// evenly between them, instead of letting each probe for more on its
    /// own. Pacing shapes what wanblk sends, so it acts on writes (a
    /// backup), not on reads. Off by default: see docs/results/share for
    /// what it changed.
    #[arg(long)]
    pub(crate) ensemble_pacing: bool,

    /// Probe the path's capacity before tuning N: two trains of 256 ICMP
    /// echo requests (384 KB each) to the server (IPv4); how far apart the
    /// replies arrive tells the bottleneck rate. `copy` sends them before
    /// its first request and waits for the replies (about one round trip;
    /// at most three when none come). The estimate sizes the first point
    /// (at least the sessions that fill it with windows at the socket
    /// buffers' cap) and the jump from it (512 KB buffers at 200 ms RTT:
    /// 45 -> ~75 sessions, where the search without it went 4 -> 16 -> 64
    /// -> 128). `serve` and `mount` send them in the background and
    /// size only the jump. Needs a raw ICMP socket (root) or the ping
    /// group; without replies the search climbs as before. Not with
    /// `--paper-tuner` or `--tuner-off model`. Off by default: whole copies
    /// with 512 KB buffers at 100 ms one way moved 0.85 of the link against
    /// 0.76 without, but two copies started together on a lossy path each
    /// probing took longer (docs/results/full/stop51-first).
    #[arg(long, overrides_with = "no_capacity_probe")]
    pub(crate) capacity_probe: bool,

    /// Do not probe the path's capacity (the default; see
    /// `--capacity-probe`): the last of the two given wins.
    #[arg(long, overrides_with = "capacity_probe")]
    pub(crate) no_capacity_probe: bool,

    /// Print a table of the sessions every second on stderr instead of
    /// the progress bar: each session's goodput, congestion window, RTT,
    /// retransmits and share of the bytes, and Jain's fairness index of
    /// the active sessions.
    #[arg(long)]
    pub(crate) sessions_view: bool,
}

fn parse_share(s: &str) -> Result<ShareMode, String> {
    s.parse::<ShareMode>().map_err(|e| e.to_string())
}

pub(crate) fn parse_secret_file(s: &str) -> Result<wanblk_remote::Secret, String> {
    wanblk_remote::Secret::from_file(std::path::Path::new(s)).map_err(|e| e.to_string())
}

impl SessionArgs {
    /// `--retry-for` and `--io-timeout`, the pool's defaults otherwise.
    pub(crate) fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            retry_for: self.retry_for,
            io_timeout: (!self.io_timeout.is_zero()).then_some(self.io_timeout),
            ..RetryPolicy::default()
        }
    }

    /// TCP options of every session: congestion control, keepalive after
    /// half the request deadline idle (1 to 30 s), and the user timeout
    /// equal to the deadline, so a connection whose peer vanished fails
    /// instead of retransmitting for minutes.
    pub(crate) fn tcp_options(&self) -> TcpOptions {
        let deadline = (!self.io_timeout.is_zero()).then_some(self.io_timeout);
        TcpOptions {
            congestion: self.congestion.clone(),
            keepalive: Some(deadline.map_or(Duration::from_secs(30), |d| {
                (d / 2).clamp(Duration::from_secs(1), Duration::from_secs(30))
            })),
            user_timeout: deadline,
            ..TcpOptions::default()
        }
    }

    /// Whether to probe the path's capacity (see `--capacity-probe`).
    pub(crate) fn capacity_probe(&self) -> bool {
        self.capacity_probe && !self.no_capacity_probe
    }

    /// `--connections auto`.
    pub(crate) fn is_auto(&self) -> bool {
        self.connections == Connections::Auto
    }

    /// How to reach and tune network stores, with the given hedging policy
    /// and first N of `auto` when `--initial-connections` is not given
    /// ([`COPY_INITIAL`] or [`FRONT_END_INITIAL`]).
    pub(crate) fn remote_options(&self, hedge: Hedge, initial: usize) -> RemoteOptions {
        RemoteOptions {
            sessions: match self.connections {
                Connections::Fixed(n) => Sessions::Fixed(n),
                Connections::Auto => Sessions::Auto {
                    initial: self.initial_connections.unwrap_or(initial),
                    max: self.max_connections,
                },
            },
            tuning: Tuning {
                paper: self.paper_tuner,
                size_requests: !self.fixed_requests,
                interval: match self.interval {
                    IntervalArg::Every(d) => IntervalChoice::Fixed(d),
                    IntervalArg::Auto => Tuning::default().interval,
                },
                model: !self.tuner_off.contains(&TunerFeature::Model),
                spares: !self.tuner_off.contains(&TunerFeature::Spares),
                settle: !self.tuner_off.contains(&TunerFeature::Settle),
                small_path: !self.tuner_off.contains(&TunerFeature::SmallPath),
                signals: !self.tuner_off.contains(&TunerFeature::Signals),
                step_above_full: true,
            },
            max_depth: self.requests as usize,
            max_request_bytes: self.request_size,
            hedge,
            retry: self.retry_policy(),
            tcp: self.tcp_options(),
            structured_replies: !self.no_structured_replies,
            tls: wanblk_nbd::TlsClientOptions::default(),
            iscsi_mode: match self.iscsi_mode {
                IscsiMode::Sessions => wanblk_remote::IscsiMode::Sessions,
                IscsiMode::Mcs => wanblk_remote::IscsiMode::Mcs,
            },
            iscsi_params: self.iscsi_params.clone(),
            initiator_name: self.initiator_name.clone(),
            iscsi_secret: self.secret_file.clone(),
            iscsi_target_user: self.target_user.clone(),
            iscsi_target_secret: self.target_secret_file.clone(),
            tcp_log: None,
            rate_cap_bytes_per_s: None,
            sessions_view: self.sessions_view,
            share: self.share,
            share_scope: self.share_scope,
            ensemble_pacing: self.ensemble_pacing,
            capacity_probe: self.capacity_probe(),
        }
    }
}
