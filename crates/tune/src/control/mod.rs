//! The controller: every decision about how the pools carry the I/O, as a
//! sans-I/O machine fed with the time and the pools' counters.
//!
//! ```text
//!   driver (thin async loop)                         Controller
//!   sleep until poll_timeout()  ◀──────────────────  poll_timeout() -> Instant
//!   read the pools' Counters    ──── now, &Counters ─▶ on_timeout()
//!   set_active / request bytes  ◀──── Decision ──────  (interval, warm-up, drain
//!   / depth on every pool                              wait, goodput, Tuner,
//!                                                      request plan)
//! ```
//!
//! Every interval the controller turns counters that only grow when bytes
//! really move into a goodput sample and, with a tuner, feeds it to the
//! [`Tuner`] and answers the N it chose. What is counted: a request carries
//! megabytes, so counting only whole completed requests quantizes a short
//! interval badly. When every active session has TCP counters, the sample
//! counts the payload bytes the kernel delivered or had acknowledged
//! (`tcpi_bytes_received + tcpi_bytes_acked`, retransmissions excluded);
//! otherwise (Unix sockets) completed requests, and then an automatic
//! interval lasts until each session has completed a few requests
//! ([`IntervalPolicy::requests_per_session`], up to the longest interval),
//! so one interval does not read 0 and the next twice the rate.
//!
//! A sample taken right after N changed is a warm-up the tuner discards.
//! After an increase (and at the start) it begins only when every active
//! session is open, so handshakes and logins are not measured
//! ([`ControllerConfig::connect_wait_max`]), and lasts until goodput has
//! settled: at least as long as slow start needs to reach the largest
//! window any session has, and then until three consecutive sub-windows
//! of a few round trips agree, or two sub-windows after losses while the
//! path had room ([`ControllerConfig::settle_max`]), so that
//! sessions under random loss are scored at their level after the first
//! losses, not in slow start. A warm-up that settled on a path with room
//! (no standing queue), with the sessions' windows no longer growing fast
//! ([`SETTLED_WINDOW_GROWTH`]) and without a loss (a segment we
//! retransmitted, or one that reached us out of order) is the point's
//! measurement: below the path's capacity the sessions hold the level
//! they settled at, and the interval a measurement would add repeats it
//! ([`IntervalSample::settled_mbps`]; with 512 KB socket buffers at 100
//! ms RTT the climb 4 -> 16 -> 64 took 2.7 s instead of 4.9 s). After a
//! decrease it starts only when the deactivated sessions have finished
//! the requests they took (their bytes would otherwise count for the
//! smaller N; at most
//! [`ControllerConfig::drain_wait_max`], and no longer once they carry
//! under [`DRAIN_TRICKLE`] of the bytes), then lasts two round trips.
//! Sessions the search will want next are opened ahead of need, idle
//! ([`Decision::open`], [`ControllerConfig::warm_spares`]).
//!
//! That drain wait is as long as a session's requests in flight take at
//! its share of the path, so with a tuner the controller also sizes the
//! requests ([`request_plan`]): all sessions together keep about twice the
//! measured bandwidth-delay product in flight (at least 64 MiB), cut into
//! requests that fit each session's share.
//!
//! With each sample the tuner gets [`Signals`]: whether the sessions' RTT
//! stood above its minimum (a full path; [`Counters::standing_queue`]),
//! or goodput reached the total rate cap ([`ControllerConfig::rate_cap_bytes_per_s`]).
//! A sample in which the sessions lacked work (the application, not the
//! path, was the limit: [`IntervalSample::demand_limited`]) is not given
//! to the tuner. On a small path (RTT below [`SMALL_PATH_RTT`], or no TCP
//! at all) the search starts at one or two sessions and steps by alpha
//! ([`ControllerConfig::small_path`]).
//!
//! N is clamped here and only here: [`Controller::new`] fits the configured
//! range into what every pool accepts ([`PoolLimits`]), and every
//! [`Decision`] is within those limits.
//!
//! The controller also keeps a progress trace and reports how fast the
//! run reached the path ([`Timing`]).

mod counters;
mod plan;
mod sample;
mod timing;

use std::time::{Duration, Instant};

pub use counters::{
    Counters, DEFAULT_MSS, PoolCounters, PoolLimits, QUEUE_MIN, QUEUE_SHARE, SMALL_PATH_RTT, SessionCounters,
    TcpCounters,
};
pub use plan::{
    IN_FLIGHT_FLOOR, MIN_REQUEST_BYTES, SMALL_PATH_IN_FLIGHT_FLOOR, request_plan, request_plan_with_floor,
};
pub use sample::IntervalSample;
pub use timing::{NEAR_CAPACITY, PROGRESS_SPACING_S, ProgressPoint, RATE_WINDOW_MIN_S, Timing, time_to_rate};

use crate::config::{ConfigError, TunerConfig};
use crate::interval::{IntervalPolicy, PathSnapshot};
use crate::model::{Signals, first_point, loss_limited_rate};
use crate::tuner::{CAPACITY_JUMP_MAX, Phase, Sample, Tuner, TuningReport};
use counters::{LossCount, TransportMeter};

/// How long each measurement interval is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IntervalChoice {
    /// Always this long.
    Fixed(Duration),
    /// From the path (RTT, goodput, request size), per [`IntervalPolicy`].
    Auto(IntervalPolicy),
}

/// How many sessions carry the I/O.
#[derive(Debug, Clone, PartialEq)]
pub enum Parallelism {
    /// This many, always (clamped to what the pools accept).
    Fixed(usize),
    /// Tuned by a [`Tuner`] with this configuration (its range clamped to
    /// what the pools accept).
    Tuned(TunerConfig),
}

/// What the controller does.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerConfig {
    /// Fixed or tuned N.
    pub parallelism: Parallelism,
    /// Interval rule.
    pub interval: IntervalChoice,
    /// With a tuner: cut requests and lower each session's requests in
    /// flight to its share of the path ([`request_plan`]), so a deactivated
    /// session drains quickly. Otherwise every request is the largest the
    /// pools accept and every session keeps their largest depth.
    pub size_requests: bool,
    /// Longest wait for deactivated sessions to drain after a decrease.
    pub drain_wait_max: Duration,
    /// With a tuner: keep the sessions the search would move to next open
    /// (idle) ahead of need ([`Decision::open`]), so an increase does not
    /// wait for handshakes.
    pub warm_spares: bool,
    /// With a tuner: longest wait, before the warm-up after an increase,
    /// for the new sessions to connect (zero: no wait).
    pub connect_wait_max: Duration,
    /// With a tuner and TCP counters: the warm-up after an increase lasts
    /// until goodput has settled ([`SETTLE_WINDOWS`] consecutive
    /// sub-windows of [`SETTLE_RTTS`] round trips within
    /// [`SETTLE_TOLERANCE`]), at most this long and at most
    /// [`SETTLE_RTTS_MAX`] round trips (but [`SETTLE_MIN`]); not on a small
    /// path (zero: only the slow-start rule of [`IntervalPolicy`]).
    pub settle_max: Duration,
    /// With a tuner: on a small path (RTT below [`SMALL_PATH_RTT`] or no
    /// TCP) start at [`small_path_n0`] sessions and step by alpha.
    pub small_path: bool,
    /// With a tuner: give the tuner [`Signals`] (off: goodput alone, as
    /// in the paper).
    pub signals: bool,
    /// With a tuner: an interval through which fewer than N active
    /// sessions carried data (one connecting, or opened during it) is not
    /// given to the tuner, at most [`PARTIAL_RUN_MAX`] in a row
    /// ([`IntervalSample::partial`]).
    pub skip_partial: bool,
    /// An interval whose request slots were busy less than this share of
    /// the time is demand-limited and not given to the tuner (0: every
    /// interval is; see [`DEMAND_LIMITED`]).
    pub demand_limited: f64,
    /// The user's cap on goodput (`wanblk copy --rate`), bytes per second:
    /// the ceiling of the search. While an interval's goodput is at the cap
    /// ([`AT_RATE_CAP`] of it), more sessions cannot help, so the tuner may
    /// not go above the N that reached it ([`Tuner::set_ceiling`]).
    pub rate_cap_bytes_per_s: Option<f64>,
    /// The host's CPU cores (0: unknown), for the small path's start.
    pub cores: usize,
    /// With a model-informed tuner, TCP and the path's capacity measured
    /// before the first request ([`Counters::path_capacity`] when the
    /// controller starts): the largest window one session can use, bytes
    /// (its socket buffers' cap). The first point is then at least the
    /// sessions that fill the capacity with such windows over the
    /// handshake's RTT ([`first_point`](crate::model::first_point)), at
    /// most as many times the configured N0 as the tuner's jumps
    /// from a measured capacity may multiply N; with warm spares,
    /// [`FIRST_POINT_SPARES`] times it are open while it is measured.
    /// `None`: N0 as configured.
    pub window_cap_bytes: Option<u64>,
    /// With a tuner and an automatic interval: a measured interval whose
    /// two halves' goodputs differ by more than this share of their mean
    /// is doubled (its first half is then the old interval), again while
    /// they differ, up to the longest interval. A server that releases
    /// whole replies, or holds them back now and then (a rate limiter, a
    /// busy host), moves bytes from one short interval into the next; a
    /// doubled interval takes in what was held back. On a steady path the
    /// halves agree and intervals stay short. 0: never ([`HALVES_AGREE`]).
    pub halves_agree: f64,
}

/// Intervals in a row that may be left out of the tuning because they
/// lacked sessions ([`IntervalSample::partial`]): a session that never
/// connects must not stop the search.
pub const PARTIAL_RUN_MAX: u32 = 2;

/// A first point raised by the capacity opens this many times its sessions
/// (see [`ControllerConfig::window_cap_bytes`]), the others as warm spares.
pub const FIRST_POINT_SPARES: usize = 2;

/// Default of [`ControllerConfig::halves_agree`].
pub const HALVES_AGREE: f64 = 0.1;

/// The share of the rate cap at which goodput counts as at the cap.
pub const AT_RATE_CAP: f64 = 0.9;

impl ControllerConfig {
    /// `parallelism` with an automatic interval (the default policy),
    /// request sizing, a 3 s drain wait, warm spares, a 5 s connect wait,
    /// settling warm-ups of at most 4 s, small-path sense, signals, partial
    /// intervals left out, demand detection, and no rate cap.
    pub fn new(parallelism: Parallelism) -> Self {
        ControllerConfig {
            parallelism,
            interval: IntervalChoice::Auto(IntervalPolicy::default()),
            size_requests: true,
            drain_wait_max: DRAIN_WAIT_MAX,
            warm_spares: true,
            connect_wait_max: CONNECT_WAIT_MAX,
            settle_max: SETTLE_MAX,
            small_path: true,
            signals: true,
            skip_partial: true,
            demand_limited: DEMAND_LIMITED,
            rate_cap_bytes_per_s: None,
            cores: 0,
            window_cap_bytes: None,
            halves_agree: HALVES_AGREE,
        }
    }

    /// Only what the paper's experiments did: no request sizing, spares,
    /// connect wait, settling, small-path sense, signals, partial intervals
    /// left out or demand detection (the tuner sees every interval; the drain wait stays:
    /// without it the paper's measurement is wrong, see docs/results).
    pub fn paper(parallelism: Parallelism) -> Self {
        ControllerConfig {
            size_requests: false,
            warm_spares: false,
            connect_wait_max: Duration::ZERO,
            settle_max: Duration::ZERO,
            small_path: false,
            signals: false,
            skip_partial: false,
            demand_limited: 0.0,
            halves_agree: 0.0,
            ..ControllerConfig::new(parallelism)
        }
    }
}

/// One look at the TCP byte counters during a drain.
#[derive(Debug, Clone, Copy)]
struct DrainMark {
    at: Instant,
    deactivated: u64,
    all: u64,
}

/// Whether the deactivated sessions moved less than [`DRAIN_TRICKLE`] of
/// the bytes since the last mark (two RTTs or [`DRAIN_TRICKLE_WINDOW`] ago,
/// whichever is longer), and the mark to keep. Without TCP counters on
/// every session, or on a small path (where a drain is short anyway and a
/// server's bursts move the counters a whole reply at a time), it never
/// says so.
fn drain_trickles(
    now: Instant,
    counters: &Counters,
    rtt_s: f64,
    mark: Option<DrainMark>,
) -> (bool, Option<DrainMark>) {
    if counters.sessions().any(|s| s.tcp.is_none()) || rtt_s < SMALL_PATH_RTT.as_secs_f64() {
        return (false, None);
    }
    let bytes = |deactivated: bool| {
        counters
            .sessions()
            .filter(|s| !deactivated || !s.active)
            .filter_map(|s| s.tcp)
            .map(|t| t.bytes)
            .sum::<u64>()
    };
    let here = DrainMark { at: now, deactivated: bytes(true), all: bytes(false) };
    let Some(m) = mark else { return (false, Some(here)) };
    if now.saturating_duration_since(m.at).as_secs_f64()
        < (2.0 * rtt_s).max(DRAIN_TRICKLE_WINDOW.as_secs_f64())
    {
        return (false, Some(m));
    }
    let all = here.all.saturating_sub(m.all);
    let deactivated = here.deactivated.saturating_sub(m.deactivated);
    (all > 0 && (deactivated as f64) < DRAIN_TRICKLE * all as f64, Some(here))
}

/// Default longest wait for deactivated sessions to drain after a decrease.
pub const DRAIN_WAIT_MAX: Duration = Duration::from_secs(3);
/// The drain wait ends early once the deactivated sessions carry less
/// than this share of the bytes over a round trip: their last requests
/// sit on connections whose windows a loss shrank (sessions opened into a
/// full queue lose segments in slow start, and cubic then regrows a small
/// window for seconds), and what they still move no longer changes what
/// the smaller N measures.
pub const DRAIN_TRICKLE: f64 = 0.05;
/// Shortest span [`DRAIN_TRICKLE`] is judged over.
pub const DRAIN_TRICKLE_WINDOW: Duration = Duration::from_millis(100);

/// Default longest wait for new sessions to connect before a warm-up.
pub const CONNECT_WAIT_MAX: Duration = Duration::from_secs(5);
/// Default longest settling warm-up after an increase.
pub const SETTLE_MAX: Duration = Duration::from_secs(4);
/// Round trips per settling sub-window (at least [`SETTLE_WINDOW_MIN`]).
pub const SETTLE_RTTS: f64 = 2.0;
/// Shortest settling sub-window.
pub const SETTLE_WINDOW_MIN: Duration = Duration::from_millis(100);
/// A settling warm-up lasts at most this many round trips (and at most
/// [`ControllerConfig::settle_max`])...
pub const SETTLE_RTTS_MAX: f64 = 30.0;
/// ...but may always last this long.
pub const SETTLE_MIN: Duration = Duration::from_millis(500);
/// Consecutive sub-windows whose goodputs all lie within this share (of
/// the largest) of each other have settled.
pub const SETTLE_TOLERANCE: f64 = 0.1;
/// How many consecutive sub-windows must agree: three, so that the two
/// sides of a slow-start overshoot (rising into the first loss, falling
/// after it) cannot pass for a level.
pub const SETTLE_WINDOWS: usize = 3;
/// An interval whose request slots were busy less than this share of the
/// time was paced by the application, not by the path: its goodput says
/// nothing about N, and the tuner does not see it (the default of
/// [`ControllerConfig::demand_limited`]).
pub const DEMAND_LIMITED: f64 = 0.5;
/// A job with less left to move than this many round trips (at least
/// [`END_MIN`]) carry at its goodput is ending: N is held from then on
/// (unless the forecast fails, [`END_REVOKE`]; not on a warm-up alone,
/// [`END_PUT_OFF`]). A
/// step of N pays connects, slow start and a measurement (or a drain)
/// before it can pay off, which takes about this long.
pub const END_RTTS: f64 = 20.0;
/// An end is put off while the current N has only a warm-up behind it,
/// for at most this many intervals of a job (a warm-up and a measurement
/// of one step, or of two when the step after it is a short one): a
/// warm-up's reading is no forecast (on a lossy path it is slow start
/// before the first losses), and the measurement may step N once more.
pub const END_PUT_OFF: u32 = 3;
/// The least time [`END_RTTS`] stands for.
pub const END_MIN: Duration = Duration::from_secs(1);
/// An ending job is searched again once what is left needs more than this
/// many horizons at the latest interval's goodput (the horizon's forecast
/// was wrong by that much).
pub const END_REVOKE: f64 = 2.0;
/// How often the drain and connect waits look at the sessions.
pub const DRAIN_POLL: Duration = Duration::from_millis(20);
/// Shortest interval, whatever the policy says (so time always moves).
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// The first N on a small path: one session per core, one or two (two
/// when the cores are unknown).
pub fn small_path_n0(cores: usize) -> usize {
    if cores == 0 { 2 } else { cores.clamp(1, 2) }
}

/// What the pools should do from now on. Every value is within the limits
/// of every pool ([`PoolLimits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Active sessions (N).
    pub active: usize,
    /// Sessions to keep open, idle ones included (at least `active`): the
    /// extra ones are warm spares the search may activate next.
    pub open: usize,
    /// Bytes per request on the wire.
    pub request_bytes: u32,
    /// Requests in flight per active session.
    pub depth: usize,
}

/// Demand against capacity in one interval.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct DemandSample {
    /// End of the interval, seconds since the controller started (as the
    /// [`IntervalSample`] of the same interval).
    pub t_s: f64,
    /// Share of the interval the active sessions' request slots were busy
    /// (the busiest pool); `None` if the pools do not measure it.
    pub slots_busy: Option<f64>,
    /// The application set the pace ([`DEMAND_LIMITED`]): the sample was
    /// not given to the tuner.
    pub demand_limited: bool,
}

/// The settling rule of one warm-up: progress marks every `sub`, done
/// when [`SETTLE_WINDOWS`] consecutive sub-windows agree after `min_end`,
/// [`SETTLE_AFTER_LOSSES`] sub-windows after losses with room, or at
/// `max_end`.
#[derive(Debug, Clone)]
struct Settle {
    marks: Vec<(Instant, u64)>,
    /// The active sessions' windows together at the last mark
    /// ([`Counters::window_sum`]).
    windows: Option<u64>,
    /// [`Counters::losses_total`] at the last mark.
    losses: Option<u64>,
    /// The path had room at the last mark (no standing queue).
    room: bool,
    /// How many marks there were when the first losses with room were
    /// seen (see [`Settle::mark`]).
    lossy_since: Option<usize>,
    sub: Duration,
    min_end: Instant,
    max_end: Instant,
    /// The level it settled at (`None` until it settled, and when it ran
    /// out of time instead).
    level: Option<Level>,
}

/// Where a settling warm-up settled.
#[derive(Debug, Clone, Copy)]
struct Level {
    /// Goodput over the agreeing sub-windows.
    bytes_per_s: f64,
    /// Their span, seconds.
    span_s: f64,
    /// The sessions' windows grew by at most [`SETTLED_WINDOW_GROWTH`] in
    /// the last sub-window.
    capped: bool,
}

/// A settled warm-up's level is a measurement only if the sessions'
/// windows together grew by at most this factor in its last sub-window
/// (two round trips). On the quick path 4 sessions settled at 886-895
/// Mbit/s with their receive windows still doubling (5.5 to 15 MB), the
/// level read room, and the search jumped to 16 and on; with 512 KB
/// buffers the windows grew 16 % in the last sub-window, at their cap.
const SETTLED_WINDOW_GROWTH: f64 = 1.25;

/// A warm-up ends at least this many sub-windows after the first losses
/// with room, once its rate fell over the last two (see [`Settle::mark`]).
const SETTLE_AFTER_LOSSES: usize = 2;

/// Loss events the intervals with room must add up to before their loss
/// rate says what a session can carry ([`Signals::loss_cap`]): with fewer,
/// chance alone moves the estimate by more than half.
const LOSS_EVENTS_MIN: f64 = 4.0;

/// The weight of an interval with room in the loss count, relative to the
/// next one's: the count remembers about ten intervals (the path's loss
/// rate may change; the sessions' windows take seconds to follow it).
const LOSS_MEMORY: f64 = 0.9;

/// What the counters say at one mark of a settling warm-up.
#[derive(Debug, Clone, Copy)]
struct Reading {
    /// [`Counters::transport_bytes`].
    bytes: Option<u64>,
    /// [`Counters::window_sum`].
    windows: Option<u64>,
    /// [`Counters::losses_total`].
    losses: Option<u64>,
    /// No standing queue ([`Counters::standing_queue_over`] the path's base).
    room: bool,
}

impl Reading {
    fn of(counters: &Counters, path_base_s: Option<f64>) -> Reading {
        Reading {
            bytes: counters.transport_bytes(),
            windows: counters.window_sum(),
            losses: counters.losses_total(),
            room: counters.standing_queue_over(path_base_s) == Some(false),
        }
    }
}

impl Settle {
    /// A warm-up from `now` with the counters reading `r`, marks every
    /// `sub`, at least until `min_end` and at most until `max_end`; `None`
    /// without TCP counters.
    fn new(now: Instant, r: Reading, sub: Duration, min_end: Instant, max_end: Instant) -> Option<Settle> {
        Some(Settle {
            marks: vec![(now, r.bytes?)],
            windows: r.windows,
            losses: r.losses,
            room: r.room,
            lossy_since: None,
            sub,
            min_end,
            max_end,
            level: None,
        })
    }

    /// Records the progress, the sessions' windows and their losses at
    /// `now`; true when settled (or out of time, or past the first losses
    /// with room: then without a level).
    ///
    /// Losses while the path had room (at this mark and the one before)
    /// end slow start, and on a path with random loss the sessions'
    /// windows then shrink for seconds towards what the loss rate allows
    /// (cubic at 0.01 % and 100 ms: 16 sessions read 933, 741 and 452
    /// Mbit/s in three intervals), so their rates never agree: the warm-up
    /// ends [`SETTLE_AFTER_LOSSES`] sub-windows after them or later, once
    /// the rate fell over two sub-windows in a row, and the point is
    /// measured from there, its sessions out of slow start. Only when it
    /// falls: bbr keeps its rate through random loss (and settles), and
    /// ended early its warm-up left the first interval in its drain and
    /// probing cycles (0.1 % loss: final N 16 and 21 where 8 fill the
    /// path).
    fn mark(&mut self, now: Instant, r: Reading) -> bool {
        let Some(bytes) = r.bytes else { return now >= self.min_end };
        self.marks.push((now, bytes));
        // New losses over a sub-window that had room at both ends.
        let lost = matches!((self.losses, r.losses), (Some(a), Some(b)) if b > a);
        if self.lossy_since.is_none() && lost && r.room && self.room {
            self.lossy_since = Some(self.marks.len());
        }
        (self.losses, self.room) = (r.losses, r.room);
        let windows = r.windows;
        let windows_before = std::mem::replace(&mut self.windows, windows);
        if now >= self.max_end {
            return true;
        }
        if self.lossy_since.is_some_and(|k| self.marks.len() >= k + SETTLE_AFTER_LOSSES)
            && self.falling()
            && now >= self.min_end
        {
            return true;
        }
        if now < self.min_end || self.marks.len() <= SETTLE_WINDOWS {
            return false;
        }
        let rates: Vec<f64> =
            (self.marks.len() - SETTLE_WINDOWS..self.marks.len()).map(|i| self.rate(i)).collect();
        let (lo, hi) = rates.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
        let settled = hi > 0.0 && hi - lo <= SETTLE_TOLERANCE * hi;
        if settled {
            let first = self.marks.len() - 1 - SETTLE_WINDOWS;
            let (t0, b0) = self.marks[first];
            let span = now.saturating_duration_since(t0).as_secs_f64();
            // Windows that still grow fast in the last sub-window are in
            // slow start or the receiver's window auto-tuning (they double
            // every round trip): the rate has not reached their level.
            let capped = match (windows_before, windows) {
                (Some(w0), Some(w1)) => w0 > 0 && w1 as f64 <= w0 as f64 * SETTLED_WINDOW_GROWTH,
                _ => false,
            };
            self.level = (span > 0.0).then(|| Level {
                bytes_per_s: bytes.saturating_sub(b0) as f64 / span,
                span_s: span,
                capped,
            });
        }
        settled
    }

    /// Bytes per second over the sub-window ending at mark `i` (`i >= 1`;
    /// 0 over an empty span).
    fn rate(&self, i: usize) -> f64 {
        let ((t0, b0), (t1, b1)) = (self.marks[i - 1], self.marks[i]);
        let dt = t1.saturating_duration_since(t0).as_secs_f64();
        if dt > 0.0 { b1.saturating_sub(b0) as f64 / dt } else { 0.0 }
    }

    /// The rate fell over each of the last two sub-windows.
    fn falling(&self) -> bool {
        let n = self.marks.len();
        n >= 4 && self.rate(n - 1) < self.rate(n - 2) && self.rate(n - 2) < self.rate(n - 3)
    }

    /// When to look next.
    fn next(&self, now: Instant) -> Instant {
        (now + self.sub).min(self.max_end.max(now + MIN_INTERVAL))
    }
}

/// The halves rule of one measured interval
/// ([`ControllerConfig::halves_agree`]): progress at its start and, once
/// reached, at its middle.
#[derive(Debug, Clone, Copy)]
struct Halves {
    start: (Instant, u64),
    mid_at: Instant,
    mid: Option<u64>,
    end: Instant,
}

impl Halves {
    /// At the end `now` with progress `bytes`: the relative difference of
    /// the two halves' rates (`None` if it cannot be told).
    fn differ(&self, now: Instant, bytes: u64) -> Option<f64> {
        let mid = self.mid?;
        let first = mid.checked_sub(self.start.1)? as f64
            / self.mid_at.saturating_duration_since(self.start.0).as_secs_f64();
        let second =
            bytes.checked_sub(mid)? as f64 / now.saturating_duration_since(self.mid_at).as_secs_f64();
        let mean = (first + second) / 2.0;
        let d = (second - first).abs() / mean;
        d.is_finite().then_some(d)
    }
}

/// Where the controller is between two calls.
#[derive(Debug, Clone)]
enum State {
    /// A decision was just made: the next interval starts at the next call,
    /// with counters read after the pools applied it (which sessions are
    /// active and connecting, and their RTT, depend on it).
    Starting { at: Instant },
    /// After an increase (or at the start): waiting for the new sessions
    /// to connect before the warm-up starts.
    Connecting { began: Instant, next_poll: Instant, rtt_s: f64, length: Duration },
    /// After a decrease: waiting for the deactivated sessions to finish
    /// their requests before the warm-up interval starts. `mark` is the
    /// last look at the TCP byte counters (see [`drain_trickles`]).
    Draining { began: Instant, next_poll: Instant, rtt_s: f64, length: Duration, mark: Option<DrainMark> },
    /// Measuring an interval that ends at `end` (a settling warm-up
    /// looks every sub-window until it has settled).
    Measuring {
        began: Instant,
        end: Instant,
        rtt_s: f64,
        drain_wait_s: f64,
        connect_wait_s: f64,
        settle: Option<Settle>,
        halves: Option<Halves>,
    },
}

/// The controller. See the module docs.
#[derive(Debug, Clone)]
pub struct Controller {
    config: ControllerConfig,
    limits: PoolLimits,
    has_pools: bool,
    tuner: Option<Tuner>,
    decision: Decision,
    start: Instant,
    /// End of the last sample (the next one starts here).
    last_t: Instant,
    last_completed: u64,
    /// Idle slot time of each pool at the start of the interval.
    last_idle: Vec<Option<u64>>,
    demand: Vec<DemandSample>,
    meter: TransportMeter,
    last_goodput: f64,
    /// The best goodput seen: what the path carried at least once.
    best_goodput: f64,
    /// The last change of N was a decrease.
    decreased: bool,
    /// Intervals closed since N last changed.
    since_change: u32,
    /// Whether a queue stood when the current interval began.
    queue_at_begin: Option<bool>,
    /// Whether a queue stood at the last interval before N last changed.
    queue_before_change: Option<bool>,
    /// When the progress trace takes its next point (`None`: only with
    /// the states' own calls).
    next_trace: Option<Instant>,
    /// When N last changed, seconds since the start.
    last_change_s: Option<f64>,
    small_path: bool,
    /// The job is ending (see [`END_RTTS`]): N is held.
    ending: bool,
    /// The tuner took a measurement at the current N since it last
    /// changed (a used sample, or a warm-up that settled).
    measured: bool,
    /// Intervals in which an end was put off because the current N had no
    /// measurement yet (see [`END_PUT_OFF`]).
    end_put_off: u32,
    /// The smallest RTT seen on the path, seconds (0 unknown).
    path_rtt_s: f64,
    /// The path's base RTT as re-taken after a path change (seconds), where
    /// the sessions' own smallest RTTs still name the old path; see
    /// [`set_path_base_rtt`](Self::set_path_base_rtt).
    path_base_s: Option<f64>,
    /// The halves rule has lengthened an interval of this job: the server
    /// releases bytes in bursts (a rate limiter's whole replies, a busy
    /// host), and from then on every sample is coarse for the tuner, not
    /// only the lengthened ones: an interval whose halves happened to
    /// agree on such a server is as noisy as the others.
    bursty: bool,
    /// Intervals in a row left out because they lacked sessions.
    partial_run: u32,
    /// Loss events and segments of the intervals with room, each older
    /// interval weighing [`LOSS_MEMORY`] times less (see
    /// [`Signals::loss_cap`]).
    loss_room: LossCount,
    /// The first point, when the capacity raised it: while it is measured,
    /// with warm spares, [`FIRST_POINT_SPARES`] times it are open.
    raised_first: Option<usize>,
    state: State,
    samples: Vec<IntervalSample>,
    progress: Vec<ProgressPoint>,
}

impl Controller {
    /// A controller starting at `now` on pools that read `counters` now.
    /// [`decision`](Self::decision) says what to apply; then call
    /// [`on_timeout`](Self::on_timeout) (its timeout is `now`) to start the
    /// first interval.
    ///
    /// # Errors
    /// A tuner configuration the tuner rejects.
    pub fn new(
        config: ControllerConfig,
        counters: &Counters,
        now: Instant,
    ) -> Result<Controller, ConfigError> {
        let limits = PoolLimits::common(&counters.pools);
        let most = limits.max_sessions.max(1);
        let has_pools = !counters.pools.is_empty();
        // Small: a sub-millisecond RTT, or no TCP at all (a Unix socket).
        let rtt = counters.min_rtt_s();
        let small_path = config.small_path
            && has_pools
            && matches!(config.parallelism, Parallelism::Tuned(_))
            && (if counters.tcp_complete() { rtt > 0.0 && rtt < SMALL_PATH_RTT.as_secs_f64() } else { true });
        let (n, tuner, raised) = match &config.parallelism {
            Parallelism::Fixed(n) => ((*n).clamp(1, most), None, false),
            Parallelism::Tuned(cfg) => {
                let mut cfg = cfg.clone();
                if small_path {
                    cfg.n0 = cfg.n0.min(small_path_n0(config.cores));
                    if let Some(m) = cfg.model.as_mut() {
                        m.jump = cfg.alpha;
                    }
                }
                cfg.n_max = cfg.n_max.min(most).max(cfg.n_min);
                let sized = (!small_path && cfg.model.is_some())
                    .then(|| {
                        first_point(counters.path_capacity?, config.window_cap_bytes?, rtt, cfg.tolerance)
                    })
                    .flatten();
                let raised =
                    sized.map(|k| k.min(cfg.n0.saturating_mul(CAPACITY_JUMP_MAX))).filter(|k| *k > cfg.n0);
                cfg.n0 = raised.unwrap_or(cfg.n0).clamp(cfg.n_min, cfg.n_max);
                let t = Tuner::new(cfg)?;
                (t.current(), Some(t), raised.is_some())
            }
        };
        let raised_first = raised.then_some(n);
        let mut meter = TransportMeter::default();
        let _ = meter.delta(counters, 0.0);
        let mut c = Controller {
            decision: Decision { active: n, open: n, request_bytes: 0, depth: 0 },
            limits,
            has_pools,
            tuner,
            start: now,
            last_t: now,
            last_completed: counters.completed_bytes,
            last_idle: counters.pools.iter().map(|p| p.idle_slot_us).collect(),
            demand: Vec::new(),
            meter,
            last_goodput: f64::NAN,
            best_goodput: 0.0,
            decreased: false,
            since_change: 0,
            queue_at_begin: None,
            queue_before_change: None,
            next_trace: None,
            last_change_s: None,
            small_path,
            ending: false,
            measured: false,
            end_put_off: 0,
            path_rtt_s: rtt,
            path_base_s: None,
            bursty: false,
            partial_run: 0,
            loss_room: LossCount::default(),
            raised_first,
            state: State::Starting { at: now },
            samples: Vec::new(),
            progress: Vec::new(),
            config,
        };
        c.size_requests(0.0);
        c.open_spares();
        c.trace(now, counters);
        Ok(c)
    }

    /// The capacity raised the first point above the configured N0
    /// ([`ControllerConfig::window_cap_bytes`]).
    pub fn first_point_raised(&self) -> bool {
        self.raised_first.is_some()
    }

    /// What the pools should do now.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// When the controller wants to be called next: the end of the
    /// interval, the next look at a settling warm-up, the next look at
    /// sessions connecting or draining, or (with pools) the next point of
    /// the progress trace, every [`PROGRESS_SPACING_S`].
    pub fn poll_timeout(&self) -> Instant {
        let state = self.state_timeout();
        self.next_trace.map_or(state, |t| state.min(t))
    }

    /// When the current state wants to act next (the progress trace's
    /// own points aside).
    fn state_timeout(&self) -> Instant {
        match &self.state {
            State::Starting { at } => *at,
            State::Connecting { next_poll, .. } | State::Draining { next_poll, .. } => *next_poll,
            State::Measuring { end, .. } => *end,
        }
    }

    /// Called at (or after) [`poll_timeout`](Self::poll_timeout) with the
    /// pools' counters. Returns a decision when the pools should change;
    /// earlier calls do nothing. After an interval closes the controller
    /// asks to be called again at once, with counters read after the
    /// decision was applied, to start the next one.
    pub fn on_timeout(&mut self, now: Instant, counters: &Counters) -> Option<Decision> {
        if now < self.poll_timeout() {
            return None;
        }
        self.trace(now, counters);
        if now < self.state_timeout() {
            return None;
        }
        match self.state.clone() {
            State::Starting { .. } => {
                self.begin_interval(now, counters);
                None
            }
            State::Connecting { began, rtt_s, length, .. } => {
                let waited = now.saturating_duration_since(began);
                let max = self.config.connect_wait_max;
                // Wait while sessions are missing and some are on their
                // way (a store that refuses more is not waited for).
                if counters.active_open() < self.decision.active && counters.connecting() > 0 && waited < max
                {
                    let next_poll = (now + DRAIN_POLL).min(began + max);
                    self.state = State::Connecting { began, next_poll, rtt_s, length };
                } else {
                    // The sessions are open: slow start begins now.
                    let rtt_s = counters.max_rtt_s().max(rtt_s);
                    self.state = self.measuring(now, counters, rtt_s, length, 0.0, waited.as_secs_f64());
                }
                None
            }
            State::Draining { began, rtt_s, length, mark, .. } => {
                let waited = now.saturating_duration_since(began);
                let (trickle, mark) = drain_trickles(now, counters, rtt_s, mark);
                if counters.draining() > 0 && waited < self.config.drain_wait_max && !trickle {
                    let next_poll = (now + DRAIN_POLL).min(began + self.config.drain_wait_max);
                    self.state = State::Draining { began, next_poll, rtt_s, length, mark };
                } else {
                    let drain_wait_s = waited.as_secs_f64();
                    self.state = State::Measuring {
                        began: now,
                        end: now + length,
                        rtt_s,
                        drain_wait_s,
                        connect_wait_s: 0.0,
                        settle: None,
                        halves: None,
                    };
                }
                None
            }
            State::Measuring {
                began, rtt_s, drain_wait_s, connect_wait_s, mut settle, mut halves, ..
            } => {
                if let Some(st) = settle.as_mut()
                    && !st.mark(now, Reading::of(counters, self.path_base_s))
                {
                    let end = st.next(now);
                    self.state =
                        State::Measuring { began, end, rtt_s, drain_wait_s, connect_wait_s, settle, halves };
                    return None;
                }
                if let Some(h) = halves.as_mut()
                    && h.mid.is_none()
                {
                    h.mid = Some(progress_bytes(counters));
                    let end = h.end;
                    self.state =
                        State::Measuring { began, end, rtt_s, drain_wait_s, connect_wait_s, settle, halves };
                    return None;
                }
                if let Some(end) = self.longer_for_completions(now, began, counters) {
                    self.state =
                        State::Measuring { began, end, rtt_s, drain_wait_s, connect_wait_s, settle, halves };
                    return None;
                }
                if let Some(h) = halves
                    && let Some(next) = self.longer_for_halves(&h, now, began, counters)
                {
                    let end = next.end;
                    let halves = Some(next);
                    self.bursty = true;
                    self.state =
                        State::Measuring { began, end, rtt_s, drain_wait_s, connect_wait_s, settle, halves };
                    return None;
                }
                let before = self.decision;
                let level = settle.and_then(|st| st.level);
                self.sample(now, counters, rtt_s, (drain_wait_s, connect_wait_s), false, level);
                self.state = State::Starting { at: now };
                (self.decision != before).then_some(self.decision)
            }
        }
    }

    /// Records the partial last interval (not a tuning input) when the
    /// driver stops at `now`.
    pub fn finish(&mut self, now: Instant, counters: &Counters) {
        let (rtt_s, waits) = match &self.state {
            State::Starting { .. } => (counters.max_rtt_s(), (0.0, 0.0)),
            State::Connecting { began, rtt_s, .. } => {
                (*rtt_s, (0.0, now.saturating_duration_since(*began).as_secs_f64()))
            }
            State::Draining { began, rtt_s, .. } => {
                (*rtt_s, (now.saturating_duration_since(*began).as_secs_f64(), 0.0))
            }
            State::Measuring { rtt_s, drain_wait_s, connect_wait_s, .. } => {
                (*rtt_s, (*drain_wait_s, *connect_wait_s))
            }
        };
        self.trace(now, counters);
        if now > self.last_t {
            self.sample(now, counters, rtt_s, waits, true, None);
        }
        self.state = State::Measuring {
            began: now,
            end: now,
            rtt_s,
            drain_wait_s: 0.0,
            connect_wait_s: 0.0,
            settle: None,
            halves: None,
        };
    }

    /// Every interval measured so far.
    pub fn samples(&self) -> &[IntervalSample] {
        &self.samples
    }

    /// Demand against capacity, one entry per interval (as [`samples`](Self::samples)).
    pub fn demand(&self) -> &[DemandSample] {
        &self.demand
    }

    /// Bytes moved over time, one point per call (at least
    /// [`PROGRESS_SPACING_S`] apart).
    pub fn progress(&self) -> &[ProgressPoint] {
        &self.progress
    }

    /// How fast the run reached the path so far ([`Timing`]).
    pub fn timing(&self) -> Timing {
        let final_n_since = self.tuner.as_ref().map(|_| self.last_change_s.unwrap_or(0.0));
        timing::timing(&self.samples, &self.progress, final_n_since, self.path_rtt_s)
    }

    /// The path was small at the start (see [`ControllerConfig::small_path`]).
    pub fn small_path(&self) -> bool {
        self.small_path
    }

    /// The tuner's record so far (`None` with a fixed N).
    pub fn tuning(&self) -> Option<TuningReport> {
        self.tuner.as_ref().map(Tuner::report)
    }

    /// The tuner (`None` with a fixed N).
    pub fn tuner(&self) -> Option<&Tuner> {
        self.tuner.as_ref()
    }

    /// What every pool accepts (the limits N and requests are clamped to).
    pub fn limits(&self) -> PoolLimits {
        self.limits
    }

    /// The path's base RTT, seconds, for the standing-queue signal, when
    /// the share governor re-took it after a path change (`None`: each
    /// session's own smallest RTT, the default). A session's `tcpi_min_rtt`
    /// never expires, so after the path got longer the sessions opened
    /// before read the new delay as a standing queue, and the tuner would
    /// take the path as full at its first point. Each session's base is
    /// the larger of its own smallest RTT and this.
    pub fn set_path_base_rtt(&mut self, base_s: Option<f64>) {
        self.path_base_s = base_s.filter(|b| b.is_finite() && *b > 0.0);
    }

    /// Keeps a tuned N at or below `ceiling` from now on (`None`: up to the
    /// configured most again): the hook of the share governor and the
    /// host's session budget ([`crate::share`]). Call it between intervals
    /// (right after [`on_timeout`](Self::on_timeout) closed one). Below the
    /// current N, N is set to the ceiling and held there (the ceiling is
    /// where the path is full), unless the tuner was climbing from a point
    /// below the ceiling and can decide its next N under it
    /// ([`Tuner::decide_under_ceiling`]). A lower ceiling above the current
    /// N only bounds the search as it goes ([`Tuner::limit_to`]). A higher
    /// ceiling starts the search again from the current N up to it, and
    /// not below the current N ([`Tuner::search_above_current`]). Returns
    /// the decision if N changed. A fixed N is left alone.
    pub fn set_ceiling(&mut self, ceiling: Option<usize>) -> Option<Decision> {
        let Parallelism::Tuned(configured) = &self.config.parallelism else { return None };
        let tuner = self.tuner.as_ref()?;
        let cfg = tuner.config().clone();
        let n_lo = configured.n_min.max(1);
        let most = configured.n_max.min(self.limits.max_sessions.max(1)).max(n_lo);
        let n_max = ceiling.map_or(most, |c| c.clamp(n_lo, most));
        if n_max == cfg.n_max && tuner.current() <= n_max {
            return None;
        }
        let current = tuner.current();
        let lowered = current > n_max;
        if n_max < cfg.n_max {
            // A lower ceiling: the search goes on under it with what it
            // learned when it can (a search started again above the
            // current N would climb back into the queue just found).
            let tuner = self.tuner.as_mut()?;
            if !lowered {
                tuner.limit_to(n_max);
                return None;
            }
            if tuner.decide_under_ceiling(n_max).is_some() {
                return self.follow_tuner();
            }
        }
        let n0 = current.clamp(n_lo, n_max);
        let n_min = if lowered { n_max } else { n_lo };
        let mut tuner = Tuner::new(TunerConfig { n0, n_min, n_max, ..cfg }).ok()?;
        if !lowered {
            // A raised ceiling asks whether more sessions help now; the N
            // held so far is not searched below (a probe at a quarter of
            // it cost a quarter of the link for an interval).
            tuner.search_above_current();
        }
        self.replace_tuner(tuner)
    }

    /// Starts the tuner's search again from `n0` (clamped to the
    /// configured range and the ceiling): the share governor's hook after
    /// a path change or once the traffic that kept the queue left
    /// ([`Governor::take_restart`](crate::share::Governor::take_restart)).
    /// At the current N, a held N is searched above again and a search
    /// under way goes on. Returns the decision if N changed. A fixed N is
    /// left alone.
    pub fn restart_search(&mut self, n0: usize) -> Option<Decision> {
        let tuner = self.tuner.as_ref()?;
        let n0 = n0.clamp(tuner.config().n_min, tuner.config().n_max);
        let here = n0 == tuner.current();
        if here && tuner.converged().is_none() {
            // A search under way from here already.
            return None;
        }
        // Held here beside traffic that has left: whether more sessions
        // help now, not whether fewer do.
        self.search_from(n0, here)
    }

    /// Moves to `n0` sessions at once and searches only above them (the
    /// first point full is the knee): the host's budget after other copies
    /// left the path, whose share the copies that left held while the
    /// budget filled it ([`Grant::share_after_leave`](crate::share::Grant::share_after_leave)).
    /// A search restarted there would climb above it and drain back.
    /// Returns the decision if N changed. A fixed N is left alone.
    pub fn take_over(&mut self, n0: usize) -> Option<Decision> {
        let tuner = self.tuner.as_ref()?;
        let n0 = n0.clamp(tuner.config().n_min, tuner.config().n_max);
        self.search_from(n0, true)
    }

    /// A new search from `n0` (clamped already), only above it with
    /// `above`.
    fn search_from(&mut self, n0: usize, above: bool) -> Option<Decision> {
        let cfg = self.tuner.as_ref()?.config().clone();
        let mut tuner = Tuner::new(TunerConfig { n0, ..cfg }).ok()?;
        if above {
            tuner.search_above_current();
        }
        self.replace_tuner(tuner)
    }

    /// Puts `tuner` in place of the running one and follows its N.
    fn replace_tuner(&mut self, tuner: Tuner) -> Option<Decision> {
        self.tuner = Some(tuner);
        self.follow_tuner()
    }

    /// Takes the running tuner's N as the active N (and the request plan
    /// and spares that go with it). Returns the decision if N changed.
    fn follow_tuner(&mut self) -> Option<Decision> {
        let before = self.decision.active;
        self.decision.active = self.tuner.as_ref()?.current();
        if self.decision.active == before {
            return None;
        }
        self.decreased = self.decision.active < before;
        self.queue_before_change = self.samples.last().and_then(|s| s.standing_queue);
        self.since_change = 0;
        self.measured = false;
        let rtt_s = self.samples.last().map_or(0.0, |s| s.rtt_ms / 1e3);
        self.last_change_s = self.samples.last().map(|s| s.t_s);
        self.size_requests(rtt_s);
        self.open_spares();
        Some(self.decision)
    }

    /// Adds a progress point at `now` (replacing the last one if it is
    /// closer than the spacing).
    fn trace(&mut self, now: Instant, counters: &Counters) {
        // With pools, a point at least every spacing: the time to reach
        // the path is read from this trace, and intervals and settling
        // looks alone leave gaps of 0.2 s and more (a run that reached
        // 0.95 of the path at 1.5 s read 1.7 s).
        self.next_trace = self.has_pools.then(|| now + Duration::from_secs_f64(timing::PROGRESS_SPACING_S));
        let t_s = now.saturating_duration_since(self.start).as_secs_f64();
        let point = match counters.transport_bytes() {
            Some(bytes) => ProgressPoint { t_s, bytes, from_tcp: true },
            None => ProgressPoint { t_s, bytes: counters.completed_bytes, from_tcp: false },
        };
        if self.path_rtt_s == 0.0 {
            self.path_rtt_s = counters.min_rtt_s();
        }
        let n = self.progress.len();
        if n >= 2 && t_s - self.progress[n - 2].t_s < timing::PROGRESS_SPACING_S {
            self.progress[n - 1] = point;
        } else {
            self.progress.push(point);
        }
    }

    /// Starts the next interval at `now`: its length, and a drain or
    /// connect wait first after a change of N.
    fn begin_interval(&mut self, now: Instant, counters: &Counters) {
        let rtt_s = counters.max_rtt_s();
        self.queue_at_begin = counters.standing_queue_over(self.path_base_s);
        let warmup = self.tuner.as_ref().is_some_and(Tuner::next_is_warmup);
        let length = match self.config.interval {
            IntervalChoice::Fixed(d) => d,
            IntervalChoice::Auto(policy) => {
                // TCP counters see bytes in flight: round trips are enough
                // (and without pools there are no requests to wait for).
                let policy = if counters.tcp_complete() || !self.has_pools {
                    IntervalPolicy { requests_per_session: 0.0, ..policy }
                } else {
                    policy
                };
                Duration::from_secs_f64(policy.interval_s(&PathSnapshot {
                    max_rtt_s: rtt_s,
                    goodput_bytes_per_s: self.last_goodput,
                    sessions: self.decision.active,
                    request_bytes: u64::from(self.decision.request_bytes),
                    window_bytes: counters.max_window_bytes(),
                    warmup,
                    after_decrease: self.decreased,
                }))
            }
        }
        .max(MIN_INTERVAL);
        let missing = counters.active_open() < self.decision.active;
        // Sessions are opened in the background once the decision is
        // applied, so `connecting` may still read 0 here: the first look
        // comes after one poll.
        self.state = if warmup && self.decreased {
            State::Draining { began: now, next_poll: now, rtt_s, length, mark: None }
        } else if warmup && missing && self.config.connect_wait_max > Duration::ZERO && self.has_pools {
            State::Connecting { began: now, next_poll: now + DRAIN_POLL, rtt_s, length }
        } else {
            self.measuring(now, counters, rtt_s, length, 0.0, 0.0)
        };
    }

    /// A measured interval of `length` from `now`; after an increase (or
    /// at the start), with TCP counters and settling on, one that settles.
    fn measuring(
        &self,
        now: Instant,
        counters: &Counters,
        rtt_s: f64,
        length: Duration,
        drain_wait_s: f64,
        connect_wait_s: f64,
    ) -> State {
        let warmup = self.tuner.as_ref().is_some_and(Tuner::next_is_warmup);
        // Slow start on a small path is over in a blink: nothing to settle.
        let settle_max =
            self.config.settle_max.min(Duration::from_secs_f64(SETTLE_RTTS_MAX * rtt_s).max(SETTLE_MIN));
        let settle = (warmup && !self.decreased && !self.small_path && settle_max > Duration::ZERO)
            .then(|| {
                let sub = Duration::from_secs_f64(SETTLE_RTTS * rtt_s).max(SETTLE_WINDOW_MIN);
                let reading = Reading::of(counters, self.path_base_s);
                Settle::new(now, reading, sub, now + length, now + length.max(settle_max))
            })
            .flatten();
        // The halves rule, for measured intervals of an automatic length.
        let halves = (!warmup
            && settle.is_none()
            && self.tuner.is_some()
            && self.has_pools
            && self.config.halves_agree > 0.0
            && matches!(self.config.interval, IntervalChoice::Auto(_))
            && length >= 2 * MIN_INTERVAL
            && !self.ramp_under_loss())
        .then(|| Halves {
            start: (now, progress_bytes(counters)),
            mid_at: now + length / 2,
            mid: None,
            end: now + length,
        });
        let end = match (&settle, &halves) {
            (Some(st), _) => st.next(now),
            (None, Some(h)) => h.mid_at,
            (None, None) => now + length,
        };
        State::Measuring { began: now, end, rtt_s, drain_wait_s, connect_wait_s, settle, halves }
    }

    /// The search is stepping up a path with room whose sessions lose
    /// segments: the last interval (the point's warm-up) had no standing
    /// queue and losses. There each session's rate swings with its losses
    /// and the halves of an interval differ for that reason, not because a
    /// server held bytes back; the halves rule doubled the intervals at 4
    /// and 16 sessions to 2 s each on cubic 0.1 % (a 243 MiB copy lasts 10
    /// s), where the next step (4 x N with room) does not hang on a close
    /// reading.
    fn ramp_under_loss(&self) -> bool {
        self.tuner.as_ref().is_some_and(|t| t.phase() == Phase::BracketUp)
            && self
                .samples
                .last()
                .is_some_and(|s| s.standing_queue == Some(false) && s.retransmits + s.out_of_order > 0)
    }

    /// The halves rule at the end `now` of a measured interval: when its
    /// halves differ by more than [`ControllerConfig::halves_agree`] and a
    /// doubled interval fits in the longest one, the doubled interval
    /// (its middle is now).
    fn longer_for_halves(
        &self,
        h: &Halves,
        now: Instant,
        began: Instant,
        counters: &Counters,
    ) -> Option<Halves> {
        let IntervalChoice::Auto(policy) = self.config.interval else { return None };
        let bytes = progress_bytes(counters);
        let d = h.differ(now, bytes)?;
        let length = now.saturating_duration_since(began);
        let longest = Duration::from_secs_f64(policy.max_interval_s.max(0.0));
        (d > self.config.halves_agree && 2 * length <= longest).then(|| Halves {
            start: h.start,
            mid_at: now,
            mid: Some(bytes),
            end: now + length,
        })
    }

    /// When goodput comes from completed requests and an automatic interval
    /// has not yet seen each session complete a few requests (and
    /// [`COMPLETIONS_MIN`] in all): the later end it needs (at most the
    /// longest interval after `began`).
    fn longer_for_completions(&self, now: Instant, began: Instant, counters: &Counters) -> Option<Instant> {
        let IntervalChoice::Auto(policy) = self.config.interval else { return None };
        if counters.tcp_complete() || !self.has_pools {
            return None;
        }
        let longest = began + Duration::from_secs_f64(policy.max_interval_s.max(0.0));
        let requests = (policy.requests_per_session * self.decision.active as f64).max(COMPLETIONS_MIN);
        let want = requests * f64::from(self.decision.request_bytes);
        let got = counters.completed_bytes.saturating_sub(self.last_completed) as f64;
        if now >= longest || want.is_nan() || want <= got {
            return None;
        }
        let elapsed = now.saturating_duration_since(self.last_t).as_secs_f64();
        let more = if got > 0.0 { elapsed * (want / got - 1.0) } else { policy.min_interval_s };
        let more = Duration::from_secs_f64(more.clamp(MIN_INTERVAL.as_secs_f64(), 3600.0));
        Some((now + more).min(longest))
    }

    /// Share of the last `dt` seconds the request slots of the active
    /// sessions were busy, for the busiest pool that measures it.
    fn slots_busy(&mut self, counters: &Counters, dt: f64) -> Option<f64> {
        let slots = (self.decision.active * self.decision.depth.max(1)) as f64;
        let busy = counters
            .pools
            .iter()
            .zip(&self.last_idle)
            .filter_map(|(p, was)| {
                let idle = p.idle_slot_us?.saturating_sub((*was)?) as f64 / 1e6;
                (slots > 0.0 && dt > 0.0).then(|| (1.0 - idle / (slots * dt)).clamp(0.0, 1.0))
            })
            .fold(None, |m: Option<f64>, b| Some(m.map_or(b, |m| m.max(b))));
        self.last_idle = counters.pools.iter().map(|p| p.idle_slot_us).collect();
        busy
    }

    /// Closes the interval ending at `now`: records its sample and, unless
    /// `last`, lets the tuner decide on it. `level` is where a settling
    /// warm-up settled: the tuner takes it as the point's measurement when
    /// the path had room, the windows had stopped growing fast and nothing
    /// was retransmitted ([`IntervalSample::settled_mbps`]).
    fn sample(
        &mut self,
        now: Instant,
        counters: &Counters,
        rtt_s: f64,
        waits: (f64, f64),
        last: bool,
        level: Option<Level>,
    ) {
        let dt = now.saturating_duration_since(self.last_t).as_secs_f64();
        let rate = |b: u64| if dt > 0.0 { b as f64 / dt } else { f64::NAN };
        let completed_rate = rate(counters.completed_bytes.saturating_sub(self.last_completed));
        let transport = self.meter.delta(counters, dt);
        // A copy between two pools runs at the pace of the slower one.
        let transport_rate = transport.as_ref().and_then(|t| t.per_pool.iter().copied().min()).map(rate);
        let goodput = transport_rate.unwrap_or(completed_rate);
        let busy = self.slots_busy(counters, dt);
        let demand_limited = self.tuner.is_some() && busy.is_some_and(|b| b < self.config.demand_limited);
        // Sessions that were not there for the whole interval: the sample
        // measured fewer than N (on a busy host a new session can connect
        // after the warm-up already ended). A warm-up that settled did so
        // with the sessions opened during it: it lacks only those still
        // not open at its end.
        let n = self.decision.active;
        let warmup = self.tuner.as_ref().is_some_and(Tuner::next_is_warmup);
        let settled = warmup && level.is_some();
        let lacking = counters.active_open() < n
            || (!settled && transport.as_ref().is_some_and(|t| t.fresh_active > 0));
        let partial = !last
            && self.config.skip_partial
            && self.tuner.is_some()
            && lacking
            && self.partial_run < PARTIAL_RUN_MAX;
        self.partial_run = if partial { self.partial_run + 1 } else { 0 };
        // At the user's rate cap more sessions cannot help: a full path.
        let capped = self
            .config
            .rate_cap_bytes_per_s
            .is_some_and(|cap| goodput.is_finite() && goodput >= cap * AT_RATE_CAP);
        let standing_queue = if capped {
            Some(true)
        } else {
            // After a decrease, a queue that stood before it counts as
            // one at the start: it may have drained during the drain wait.
            let begin = match self.queue_before_change {
                Some(true) => Some(true),
                _ => self.queue_at_begin,
            };
            queue_reading(
                begin,
                counters.standing_queue_over(self.path_base_s),
                self.decreased && self.since_change <= AFTER_DECREASE_INTERVALS,
            )
        };
        self.since_change = self.since_change.saturating_add(1);
        // Whether a session lost segments in the interval (see
        // [`Signals::losses`]); `None` when an active session has no TCP
        // counters.
        let losses = transport.as_ref().map(|t| t.retransmits + t.out_of_order > 0);
        // A warm-up that settled on a path with room, with the sessions'
        // windows no longer growing fast, and without a loss (a segment we
        // retransmitted, or one that reached us out of order: where we
        // receive, the server's losses show only there) measured the point
        // below the path's capacity, where a level holds: the interval a
        // measurement would add repeats it. Not on a bursty server, whose
        // levels need the halves rule.
        let level = level.filter(|l| {
            warmup
                && l.capped
                && self.config.signals
                && !self.bursty
                && l.bytes_per_s.is_finite()
                && l.bytes_per_s > 0.0
                && standing_queue == Some(false)
                && losses == Some(false)
        });
        let mut sample = IntervalSample {
            t_s: now.saturating_duration_since(self.start).as_secs_f64(),
            n,
            goodput_mbps: goodput * 8.0 / 1e6,
            completed_mbps: completed_rate * 8.0 / 1e6,
            from_tcp: transport_rate.is_some(),
            fairness: transport.as_ref().and_then(|t| t.fairness),
            retransmits: transport.as_ref().map_or(0, |t| t.retransmits),
            out_of_order: transport.as_ref().map_or(0, |t| t.out_of_order),
            duration_s: dt,
            rtt_ms: rtt_s * 1e3,
            discarded: last || demand_limited || partial,
            partial,
            drain_wait_s: waits.0,
            connect_wait_s: waits.1,
            busy,
            demand_limited,
            ending: false,
            standing_queue,
            settled_mbps: None,
            loss_cap_mbps: None,
            request_bytes: 0,
            depth: 0,
        };
        self.last_t = now;
        self.last_completed = counters.completed_bytes;
        if !last && !demand_limited && !partial {
            self.last_goodput = goodput;
            if goodput.is_finite() {
                self.best_goodput = self.best_goodput.max(goodput);
            }
            let coarse = transport_rate.is_none() || self.bursty;
            let signals = if self.config.signals {
                // At the user's rate cap the "queue" is the cap's.
                let base_share = if capped { None } else { counters.base_share_over(self.path_base_s) };
                let loss_cap = self.loss_cap(counters, standing_queue, transport.as_ref().map(|t| t.loss));
                sample.loss_cap_mbps = loss_cap.map(|c| c * 8.0 / 1e6);
                Signals {
                    standing_queue,
                    coarse,
                    base_share,
                    losses,
                    loss_cap,
                    capacity: counters.path_capacity,
                }
            } else {
                Signals::default()
            };
            // At the lowest goodput of the intervals within the horizon,
            // and only once the job has run that long: a burst (a server's
            // token bucket releasing seconds of data at once) must not end
            // the search in the first second.
            let horizon_s = (END_RTTS * rtt_s).max(END_MIN.as_secs_f64());
            let since = sample.t_s - horizon_s;
            let pace = self
                .samples
                .iter()
                .rev()
                .take_while(|s| s.t_s > since)
                .map(|s| s.goodput_mbps * 1e6 / 8.0)
                .fold(goodput, f64::min);
            let remaining = counters.remaining_bytes.map(|r| r as f64);
            if !self.ending {
                self.ending = since >= 0.0
                    && remaining.is_some_and(|r| pace.is_finite() && pace > 0.0 && r < pace * horizon_s);
                if self.ending && !self.measured && self.end_put_off < END_PUT_OFF && self.tuner.is_some() {
                    // The current N has only its warm-up behind it: on a
                    // lossy path that is slow start before the first losses
                    // cut the windows, and holding N on it froze a climb
                    // whose next step would have carried the rest several
                    // times faster. Its measurement first.
                    self.ending = false;
                    self.end_put_off += 1;
                }
            } else if remaining
                .is_some_and(|r| goodput.is_finite() && goodput > 0.0 && r > goodput * END_REVOKE * horizon_s)
            {
                // The forecast failed: at this interval's goodput what is
                // left needs more than twice the horizon. Readings taken
                // before losses cut the windows (a warm-up in slow start)
                // looked like an end; N is searched again.
                self.ending = false;
            }
            sample.ending = self.ending;
            sample.discarded |= self.ending;
            if let Some(t) = self.tuner.as_mut().filter(|_| !sample.ending) {
                if self.config.rate_cap_bytes_per_s.is_some() {
                    t.set_ceiling(capped.then_some(n));
                }
                let (g, d) = match level {
                    Some(l) if t.take_warmup_as_settled() => {
                        sample.settled_mbps = Some(l.bytes_per_s * 8.0 / 1e6);
                        (l.bytes_per_s, l.span_s)
                    }
                    _ => (goodput, dt),
                };
                let step = t.observe_with(Sample { n, goodput_bytes_per_s: g, duration_s: d }, signals);
                sample.discarded = step.discarded();
                self.measured |= !step.discarded();
                if step.next_n != n {
                    self.decreased = step.next_n < n;
                    self.queue_before_change = standing_queue;
                    self.since_change = 0;
                    self.measured = false;
                    self.decision.active = step.next_n;
                    self.last_change_s = Some(sample.t_s);
                }
            }
            self.size_requests(rtt_s);
            self.open_spares();
        }
        (sample.request_bytes, sample.depth) = self.shape();
        self.demand.push(DemandSample { t_s: sample.t_s, slots_busy: busy, demand_limited });
        self.samples.push(sample);
    }

    /// Adds an interval's loss count to those of the intervals with room
    /// when it ended with room (`queue` `Some(false)`: losses with a queue
    /// standing are the queue's). Not only those that began with room too:
    /// the first sessions' slow start often builds a queue that their
    /// first random losses drain, and without that interval a leader
    /// beside another copy had 1.5 events where the knee search began
    /// (0.01 %). A slow start that overflows a deep queue still has it at
    /// the interval's end; on a shallow one a full path's losses are its
    /// sessions' share, which the rate they allow says too. Returns what a
    /// session can carry at the loss rate they add up to
    /// ([`Signals::loss_cap`]): `None` before [`LOSS_EVENTS_MIN`] events.
    fn loss_cap(&mut self, counters: &Counters, queue: Option<bool>, loss: Option<LossCount>) -> Option<f64> {
        if let (Some(false), Some(l)) = (queue, loss) {
            self.loss_room = LossCount {
                events: self.loss_room.events * LOSS_MEMORY + l.events,
                segments: self.loss_room.segments * LOSS_MEMORY + l.segments,
            };
        }
        let LossCount { events, segments } = self.loss_room;
        if !(events >= LOSS_EVENTS_MIN && segments > 0.0) {
            return None;
        }
        let base = self.path_base_s.unwrap_or(0.0).max(counters.min_rtt_s());
        loss_limited_rate(events / segments, base, f64::from(counters.mss()))
    }

    /// Sets the request size and depth of the decision for its N.
    fn size_requests(&mut self, rtt_s: f64) {
        let (request_bytes, depth) = if self.config.size_requests && self.tuner.is_some() {
            let floor = if self.small_path { SMALL_PATH_IN_FLIGHT_FLOOR } else { IN_FLIGHT_FLOOR };
            plan::fit(&self.limits, self.best_goodput, rtt_s, self.decision.active, floor)
        } else {
            (self.limits.max_request_bytes, self.limits.max_depth)
        };
        self.decision.request_bytes = request_bytes;
        self.decision.depth = depth;
    }

    /// Sets the sessions to keep open: the active ones, and with warm
    /// spares the N the search moves to next if it climbs (never fewer
    /// than already asked: sessions stay open once opened).
    fn open_spares(&mut self) {
        // On a small path a handshake costs next to nothing.
        let next = self
            .tuner
            .as_ref()
            .filter(|_| self.config.warm_spares && !self.small_path)
            .and_then(Tuner::next_if_better)
            .unwrap_or(0);
        // A first point raised by the capacity is a lower bound: the jump
        // from it goes where the windows the kernel really gives fill the
        // capacity, not the climb's 4x. The sessions for windows of half
        // the buffers' cap (what Linux advertises of a receive buffer with
        // its default overhead; 0.62 measured at 512 KB) are opened ahead.
        let next = match self.raised_first {
            Some(n) if self.config.warm_spares && n == self.decision.active => {
                n.saturating_mul(FIRST_POINT_SPARES)
            }
            _ => next,
        };
        self.decision.open =
            self.decision.open.max(self.decision.active).max(next).min(self.limits.max_sessions.max(1));
    }

    /// Request size and depth as a sample records them (0 without pools).
    fn shape(&self) -> (u32, usize) {
        if self.has_pools { (self.decision.request_bytes, self.decision.depth) } else { (0, 0) }
    }
}

/// Bytes moved so far, as the goodput counts them: the TCP byte counters
/// when every active session has them, else completed requests.
fn progress_bytes(counters: &Counters) -> u64 {
    counters.transport_bytes().unwrap_or(counters.completed_bytes)
}

/// Intervals after a decrease (the warm-up that drains, then the first
/// measured one) whose end without a queue is not taken for room when a
/// queue stood at their start or before the decrease; see [`queue_reading`].
const AFTER_DECREASE_INTERVALS: u32 = 1;

/// The standing queue an interval reports: the one at its end (`end`),
/// except just after a decrease (`after_decrease`) when a queue stood at
/// its start (or before the decrease: the drain wait may have emptied it
/// before the interval began; quick stop 29, backup: 5 -> 9 -> 7 -> 5) and
/// is gone at its end. Then the queue the removed sessions
/// left was draining while the kept ones still had the windows of a
/// smaller share of the path (cubic regrows them over seconds): the
/// interval measured that transient, not room, and reports nothing
/// (`None`). Read as room, it made the knee search look for a hump above
/// a point that held the plateau (quick stop 28, backup: 5 -> 9 -> 7 -> 5).
fn queue_reading(begin: Option<bool>, end: Option<bool>, after_decrease: bool) -> Option<bool> {
    if after_decrease && begin == Some(true) && end == Some(false) { None } else { end }
}

/// Without TCP counters an automatic interval lasts until at least this
/// many requests have completed in all (and the policy's number per
/// session), so that counting whole requests errs by a few percent, not
/// by the tolerance the tuner compares with.
pub const COMPLETIONS_MIN: f64 = 32.0;

#[cfg(test)]
mod tests {
    use super::*;

    fn pools(max_sessions: usize) -> Counters {
        let limits =
            PoolLimits { max_sessions, max_request_bytes: 1 << 20, request_align: 512, max_depth: 4 };
        Counters {
            completed_bytes: 0,
            remaining_bytes: None,
            path_capacity: None,
            pools: vec![PoolCounters { limits, sessions: Vec::new(), idle_slot_us: None, connecting: 0 }],
        }
    }

    /// A settle at 100 MB/s every 200 ms, with the sessions' windows
    /// growing by `growth[k - 1]` at mark k: the mark it settled at, and
    /// its level.
    fn settle_with(growth: &[f64]) -> (u32, Option<Level>) {
        let t0 = Instant::now();
        let sub = Duration::from_millis(200);
        let start = Reading { bytes: Some(0), windows: Some(1_000_000), losses: Some(0), room: true };
        let mut st = Settle::new(t0, start, sub, t0 + sub, t0 + 10 * sub).unwrap();
        let mut w = 1_000_000.0;
        for (k, g) in (1..).zip(growth) {
            w *= g;
            let r = Reading { bytes: Some(u64::from(k) * 20_000_000), windows: Some(w as u64), ..start };
            if st.mark(t0 + k * sub, r) {
                return (k, st.level);
            }
        }
        (0, st.level)
    }

    #[test]
    fn a_warm_up_with_losses_and_room_ends_two_sub_windows_after_them() {
        // Windows doubling and rates that never agree: slow start, then
        // from the first losses on falling (random losses shrinking the
        // windows), or rising on (`rising`).
        let t0 = Instant::now();
        let sub = Duration::from_millis(200);
        let run_with = |lossy_from: u32, queue_at: u32, rising: bool| {
            let start = Reading { bytes: Some(0), windows: Some(1_000), losses: Some(5), room: true };
            let mut st = Settle::new(t0, start, sub, t0 + sub, t0 + 20 * sub).unwrap();
            let mut bytes = 0u64;
            for k in 1..20u32 {
                let peak = lossy_from.min(10);
                let step = if rising || k < peak {
                    u64::from(k) * 100
                } else {
                    10_000 / u64::from(k - peak + 1).pow(2)
                };
                bytes += step * 10_000;
                let r = Reading {
                    bytes: Some(bytes),
                    windows: Some(1_000 << k),
                    losses: Some(5 + u64::from(k >= lossy_from) * 3),
                    room: k != queue_at,
                };
                if st.mark(t0 + k * sub, r) {
                    return (k, st.level.is_some());
                }
            }
            (0, false)
        };
        let run = |lossy_from, queue_at| run_with(lossy_from, queue_at, false);
        assert_eq!(run(3, 0), (5, false), "losses at mark 3: two sub-windows more, no level");
        assert_eq!(run_with(3, 0, true), (0, false), "the rate does not fall (bbr): no end");
        // Losses seen while a queue stood (a drop-tail queue that
        // overflowed), and none after: not this rule, the warm-up runs on
        // (0: not over within 19 marks).
        assert_eq!(run(3, 3), (0, false));
        assert_eq!(run(3, 2), (0, false), "the mark before had a queue");
        assert_eq!(run(30, 0), (0, false), "no losses");
    }

    #[test]
    fn a_settled_level_is_a_measurement_only_with_windows_at_their_cap() {
        let (k, l) = settle_with(&[1.0; 4]);
        let l = l.unwrap();
        assert_eq!(k, 3, "three sub-windows agree");
        assert!((l.bytes_per_s - 100e6).abs() < 1.0 && (l.span_s - 0.6).abs() < 1e-9 && l.capped, "{l:?}");
        assert!(settle_with(&[1.2; 4]).1.unwrap().capped);
        assert!(!settle_with(&[2.0; 4]).1.unwrap().capped, "windows still doubling");
    }

    #[test]
    fn n_is_clamped_to_what_every_pool_accepts() {
        let now = Instant::now();
        let tuned = Parallelism::Tuned(TunerConfig { n0: 8, n_max: 64, ..TunerConfig::default() });
        let c = Controller::new(ControllerConfig::new(tuned), &pools(4), now).unwrap();
        assert_eq!(c.decision().active, 4);
        assert_eq!(c.tuner().unwrap().config().n_max, 4);
        let c = Controller::new(ControllerConfig::new(Parallelism::Fixed(10)), &pools(3), now).unwrap();
        assert_eq!(c.decision(), Decision { active: 3, open: 3, request_bytes: 1 << 20, depth: 4 });
        let c = Controller::new(ControllerConfig::new(Parallelism::Fixed(0)), &pools(3), now).unwrap();
        assert_eq!(c.decision().active, 1);
        let bad = Parallelism::Tuned(TunerConfig { alpha: 0.5, ..TunerConfig::default() });
        assert!(Controller::new(ControllerConfig::new(bad), &pools(3), now).is_err());
    }

    #[test]
    fn a_capacity_known_at_the_start_sizes_the_first_point() {
        let now = Instant::now();
        let mbit = 1e6 / 8.0;
        // One session connected, 200 ms RTT, 956 Mbit/s measured, 512 KiB
        // buffers: 45 sessions at their cap (less the tolerance, 3 %), twice
        // as many opened.
        let at = |rtt_us: u32, capacity: Option<f64>| {
            let mut c = pools(512);
            let tcp = TcpCounters { min_rtt_us: rtt_us, rtt_us, mss: 1448, ..TcpCounters::default() };
            c.pools[0].sessions.push(SessionCounters {
                index: 0,
                active: true,
                in_flight: 0,
                tcp: Some(tcp),
            });
            c.path_capacity = capacity;
            c
        };
        let tuned = |n0| Parallelism::Tuned(TunerConfig { n0, n_max: 512, ..TunerConfig::default() });
        let config =
            |n0| ControllerConfig { window_cap_bytes: Some(512 << 10), ..ControllerConfig::new(tuned(n0)) };
        let start = |config: ControllerConfig, counters: &Counters| {
            let d = Controller::new(config, counters, now).unwrap().decision();
            (d.active, d.open)
        };
        let wan = at(200_000, Some(956.0 * mbit));
        assert_eq!(start(config(4), &wan), (45, 90));
        assert!(Controller::new(config(4), &wan, now).unwrap().first_point_raised());
        assert!(!Controller::new(config(50), &wan, now).unwrap().first_point_raised());
        assert_eq!(start(ControllerConfig { warm_spares: false, ..config(4) }, &wan), (45, 45));
        // Never below the configured N0, and at most the jumps' 32 times it.
        assert_eq!(start(config(50), &wan).0, 50);
        assert_eq!(start(config(1), &wan), (32, 64));
        // Buffers that fill the path with a few sessions: N0 as configured.
        let big = ControllerConfig { window_cap_bytes: Some(16 << 20), ..config(4) };
        assert_eq!(start(big, &wan).0, 4);
        // Nothing measured, no window, no RTT, a small path, or the
        // paper's tuner (no model): as configured.
        assert_eq!(start(config(4), &at(200_000, None)).0, 4);
        assert_eq!(start(ControllerConfig { window_cap_bytes: None, ..config(4) }, &wan).0, 4);
        assert_eq!(start(config(4), &at(0, Some(956.0 * mbit))).0, 4);
        assert!(start(config(4), &at(300, Some(956.0 * mbit))).0 <= 4);
        let paper = Parallelism::Tuned(TunerConfig { n_max: 512, ..TunerConfig::paper() });
        let paper = ControllerConfig { window_cap_bytes: Some(512 << 10), ..ControllerConfig::paper(paper) };
        assert_eq!(start(paper, &wan).0, 4);
    }

    #[test]
    fn without_pools_only_completions_are_sampled() {
        let now = Instant::now();
        let policy = IntervalPolicy { min_interval_s: 0.25, ..IntervalPolicy::default() };
        let config = ControllerConfig {
            interval: IntervalChoice::Auto(policy),
            ..ControllerConfig::new(Parallelism::Fixed(1))
        };
        let mut c = Controller::new(config, &Counters::default(), now).unwrap();
        assert_eq!(c.poll_timeout(), now, "the first interval starts at the first call");
        assert_eq!(c.on_timeout(now, &Counters::default()), None);
        let t = c.poll_timeout();
        assert_eq!(t - now, Duration::from_millis(250));
        let done = Counters {
            completed_bytes: 1 << 20,
            remaining_bytes: None,
            path_capacity: None,
            pools: Vec::new(),
        };
        assert_eq!(c.on_timeout(t - Duration::from_millis(1), &done), None, "too early: nothing happens");
        assert_eq!(c.samples().len(), 0);
        assert_eq!(c.on_timeout(t, &done), None, "a fixed N without pools decides nothing");
        let s = c.samples()[0];
        assert!((s.completed_mbps - 8.0 * 1048576.0 / 0.25 / 1e6).abs() < 1e-6, "{s:?}");
        assert!(!s.from_tcp && (s.request_bytes, s.depth) == (0, 0));
        c.finish(t + Duration::from_millis(100), &done);
        assert!(c.samples()[1].discarded && c.samples()[1].completed_mbps == 0.0);
    }

    #[test]
    fn a_queue_that_drains_just_after_a_decrease_is_not_room() {
        assert_eq!(queue_reading(Some(true), Some(false), true), None);
        // Anywhere else the end of the interval tells.
        assert_eq!(queue_reading(Some(true), Some(false), false), Some(false));
        assert_eq!(queue_reading(Some(false), Some(false), true), Some(false));
        assert_eq!(queue_reading(None, Some(false), true), Some(false));
        assert_eq!(queue_reading(Some(false), Some(true), true), Some(true));
        assert_eq!(queue_reading(Some(true), None, true), None);
    }

    #[test]
    fn a_drain_ends_once_the_deactivated_sessions_only_trickle() {
        // Five active sessions, three deactivated ones still carrying
        // requests, on a 100 ms path; `moved` bytes per session so far.
        let at = |active: u64, deactivated: u64| {
            let mut c = pools(8);
            for i in 0..8 {
                let on = i < 5;
                let tcp = TcpCounters {
                    bytes: if on { active } else { deactivated },
                    rtt_us: 100_000,
                    ..Default::default()
                };
                c.pools[0].sessions.push(SessionCounters {
                    index: i,
                    active: on,
                    in_flight: usize::from(!on),
                    tcp: Some(tcp),
                });
            }
            c
        };
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let (no, mark) = drain_trickles(t0, &at(0, 0), 0.1, None);
        assert!(!no && mark.is_some(), "the first look only marks");
        let (no, same) = drain_trickles(ms(150), &at(10_000_000, 100_000), 0.1, mark);
        assert!(!no, "judged over two RTTs, not fewer");
        assert_eq!(same.unwrap().at, t0);
        // Over 200 ms the deactivated sessions moved a third of the bytes:
        // they still drain at their share.
        let (no, mark) = drain_trickles(ms(200), &at(10_000_000, 3_000_000), 0.1, mark);
        assert!(!no);
        // Over the next 200 ms, 1 % of them: their windows are tiny.
        let (yes, _) = drain_trickles(ms(400), &at(20_000_000, 3_300_000), 0.1, mark);
        assert!(yes);
        // Nothing moved at all (a stall): not a trickle.
        let (no, _) = drain_trickles(ms(400), &at(10_000_000, 3_000_000), 0.1, mark);
        assert!(!no);
        // A small path, or sessions without TCP counters: never.
        assert!(!drain_trickles(ms(400), &at(20_000_000, 3_300_000), 0.0002, mark).0);
        let mut unix = at(20_000_000, 3_300_000);
        unix.pools[0].sessions[7].tcp = None;
        assert!(!drain_trickles(ms(400), &unix, 0.1, mark).0);
    }
}
