//! Goodput monitoring and the tuning loop (seed 000, sections 4.4-4.5).
//!
//! Every interval the controller reads a byte counter that only grows when
//! requests *complete* (never on submission), turns the difference into a
//! goodput sample, and, with a tuner, feeds the sample to
//! [`wanblk_tune::Tuner`] and applies the answer to every pool with
//! [`Pool::set_active`]. Without a tuner it only records samples (fixed N).
//!
//! What is counted: a request carries megabytes, so counting only whole
//! completed requests quantizes a short interval badly (at N sessions x 4
//! MiB requests, one interval may see 0 or 2 completions per session). When
//! every active session runs over TCP, the controller therefore counts the
//! payload-carrying bytes the kernel delivered or had acknowledged
//! (`tcpi_bytes_received + tcpi_bytes_acked` of every session, unique bytes,
//! retransmissions excluded): progress of requests in flight, not of
//! requests merely submitted. Over Unix sockets (no TCP_INFO) it falls back
//! to completed requests. Both figures are kept in every sample.
//!
//! Every sample also records how the active connections shared the path
//! (Jain's fairness index of their byte shares) and our retransmissions.
//!
//! The interval is either fixed (`--interval 2s`) or chosen from the path
//! by [`wanblk_tune::IntervalPolicy`]: a few round trips of the slowest
//! active session (RTT from `TCP_INFO`); a sample taken right after N
//! changed is a warm-up the tuner discards: after an increase as long as
//! slow start needs to reach the largest window any session has (cwnd x MSS
//! or rcv_space); after a decrease until the deactivated sessions have
//! finished their outstanding requests (their bytes would otherwise count
//! for the smaller N), then two round trips.
//!
//! That wait is as long as a session's requests in flight take at its
//! share of the path, so with a tuner the loop also sizes the requests
//! ([`request_plan`]): all sessions together keep about twice the measured
//! bandwidth-delay product in flight (at least 64 MiB), cut into requests
//! that fit each session's share, instead of `depth` x 4 MiB per session
//! (512 MiB at N = 32, seconds of draining at 30 Mbit/s per session).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use wanblk_tune::{IntervalPolicy, PathSnapshot, Tuner, TunerConfig, TuningReport};

use crate::pool::Pool;

/// How long each measurement interval is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IntervalChoice {
    /// Always this long.
    Fixed(Duration),
    /// From the path (RTT, goodput, request size), per [`IntervalPolicy`].
    Auto(IntervalPolicy),
}

/// What the controller does.
#[derive(Debug, Clone)]
pub struct ControlConfig {
    /// Tune N with this tuner configuration; `None` keeps N fixed.
    pub tuner: Option<TunerConfig>,
    /// Interval rule.
    pub interval: IntervalChoice,
    /// Cut requests and lower each session's requests in flight to what
    /// its share of the path needs (see [`request_plan`]), so a deactivated
    /// session drains quickly. Only with a tuner.
    pub adapt_depth: bool,
}

/// How each of `n` sessions should carry its share of the path: the bytes
/// per request and the requests in flight per session.
///
/// All sessions together keep `max(2 x goodput x RTT, IN_FLIGHT_FLOOR)`
/// bytes in flight (twice the path's bandwidth-delay product as measured
/// so far, and never less than the floor, so the first ramp is not held
/// back while the goodput is still unknown or in slow start). Each session
/// gets `1/n` of it: requests are cut to the largest power of two not above
/// half of that (at least [`MIN_SPLIT`], at most `max_request`), plus one
/// request of slack, at least 2 and at most `max_depth`. A session then
/// holds about `1/n` of a few hundred milliseconds of data, not `depth` x
/// the request size: when the tuner deactivates it, it finishes soon.
/// `goodput` in bytes/s and `rtt_s` may be unknown (NaN or 0).
#[must_use]
pub fn request_plan(goodput: f64, rtt_s: f64, n: usize, max_request: u32, max_depth: usize) -> (u32, usize) {
    let measured = if goodput.is_finite() && rtt_s.is_finite() { 2.0 * goodput * rtt_s } else { 0.0 };
    let total = measured.max(IN_FLIGHT_FLOOR as f64);
    let per = total / n.max(1) as f64;
    let max_request = max_request.max(1);
    let split = if per / 2.0 >= f64::from(max_request) {
        max_request
    } else {
        let pow2 = 1u64 << ((per / 2.0).max(1.0).log2().floor() as u32).min(31);
        (pow2.max(u64::from(MIN_SPLIT)) as u32).min(max_request)
    };
    let depth = (per / f64::from(split)).ceil().clamp(1.0, 1e6) as usize + 1;
    (split, depth.min(max_depth.max(1)))
}

/// Bytes in flight over all sessions that [`request_plan`] always allows.
pub const IN_FLIGHT_FLOOR: u64 = 64 << 20;

/// Smallest bytes per request [`request_plan`] chooses (libnbd's nbdcopy
/// uses this size by default).
pub const MIN_SPLIT: u32 = 256 << 10;

/// One measured interval. Read back (from a copy's report), every field is
/// required (`null` for none).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IntervalSample {
    /// End of the interval, seconds since the controller started.
    pub t_s: f64,
    /// Active sessions during the interval.
    pub n: usize,
    /// Goodput over the interval in Mbit/s (10^6 bits per second): the
    /// figure the tuner saw (transport bytes when available, see the module docs).
    pub goodput_mbps: f64,
    /// Goodput from completed requests only, Mbit/s.
    pub completed_mbps: f64,
    /// The goodput came from TCP byte counters (else from completions).
    pub from_tcp: bool,
    /// Jain's fairness index of the active sessions' shares of the bytes
    /// moved (1 = equal; low values mean some connections starve while
    /// others run, seed 004's concern). Needs TCP counters.
    #[serde(deserialize_with = "Option::deserialize")]
    pub fairness: Option<f64>,
    /// TCP segments our sockets retransmitted during the interval (our
    /// side sends in a backup; in a restore the server's retransmissions
    /// are invisible to us).
    pub retransmits: u64,
    /// Length of the interval in seconds.
    pub duration_s: f64,
    /// Largest smoothed RTT of the active sessions at the start, ms (0 if unknown).
    pub rtt_ms: f64,
    /// The tuner ignored this sample (warm-up after a change of N, or the
    /// partial last interval).
    pub discarded: bool,
    /// Seconds spent, before this interval, waiting for sessions the tuner
    /// deactivated to finish their requests (0 when N did not decrease).
    pub drain_wait_s: f64,
    /// Bytes per request on the wire at the end of the interval.
    pub request_bytes: u32,
    /// Requests in flight per session allowed at the end of the interval.
    pub depth: usize,
}

/// Shared, readable-while-running state of a controller.
#[derive(Debug, Default)]
pub struct ControlState {
    samples: Mutex<Vec<IntervalSample>>,
    report: Mutex<Option<TuningReport>>,
    current_n: std::sync::atomic::AtomicUsize,
}

impl ControlState {
    /// Samples so far.
    pub fn samples(&self) -> Vec<IntervalSample> {
        self.samples.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    /// The tuner's record so far (None with a fixed N).
    pub fn tuning(&self) -> Option<TuningReport> {
        self.report.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    /// The active N now.
    pub fn current_n(&self) -> usize {
        self.current_n.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Per-session cumulative TCP byte counters, to difference between samples.
#[derive(Debug, Default)]
struct TransportMeter {
    last: HashMap<(usize, usize), (u64, u32)>,
}

/// What the transport counters say about one interval.
#[derive(Debug, Default)]
struct TransportDelta {
    /// Bytes moved per pool.
    per_pool: Vec<u64>,
    /// Jain's fairness index of the bytes moved by the active sessions
    /// (1 = equal shares, 1/n = one session carried everything).
    fairness: Option<f64>,
    /// Segments our sockets retransmitted (meaningful where we send).
    retransmits: u64,
}

/// Jain's fairness index of `xs`: (sum x)^2 / (n * sum x^2).
fn jain(xs: &[f64]) -> Option<f64> {
    let sum: f64 = xs.iter().sum();
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    (xs.len() > 1 && sq > 0.0).then(|| sum * sum / (xs.len() as f64 * sq))
}

impl TransportMeter {
    /// Bytes moved since the last call, per pool, counting only sessions
    /// seen both times (so sessions opening or failing do not jump the sum).
    /// `None` when an active session has no TCP_INFO (e.g. a Unix socket).
    fn delta(&mut self, pools: &[Arc<Pool>]) -> Option<TransportDelta> {
        let mut now = HashMap::new();
        let mut usable = true;
        let mut d = TransportDelta { per_pool: vec![0u64; pools.len()], ..Default::default() };
        let mut shares = Vec::new();
        for (p, pool) in pools.iter().enumerate() {
            for (s, active, infos) in pool.session_tcp_info() {
                if infos.is_empty() {
                    usable &= !active;
                    continue;
                }
                let total: u64 = infos.iter().map(|i| i.bytes_received + i.bytes_acked).sum();
                let retrans: u32 = infos.iter().map(|i| i.total_retrans).sum();
                if let Some((prev, prev_retrans)) = self.last.get(&(p, s)) {
                    let moved = total.saturating_sub(*prev);
                    d.per_pool[p] += moved;
                    d.retransmits += u64::from(retrans.saturating_sub(*prev_retrans));
                    if active {
                        shares.push(moved as f64);
                    }
                }
                now.insert((p, s), (total, retrans));
            }
        }
        self.last = now;
        d.fairness = jain(&shares);
        usable.then_some(d)
    }
}

/// The largest per-connection window seen on any session, in bytes: the
/// sender's congestion window (cwnd x MSS, where we send) or the receive
/// window target (rcv_space, where we receive). New sessions need about
/// log2(window / initial window) round trips of slow start to reach it.
fn max_window_bytes(pools: &[Arc<Pool>]) -> Option<u64> {
    pools
        .iter()
        .flat_map(|p| p.session_tcp_info())
        .flat_map(|(_, _, infos)| infos)
        .map(|i| (u64::from(i.snd_cwnd) * u64::from(i.snd_mss)).max(u64::from(i.rcv_space)))
        .max()
        .filter(|w| *w > 0)
}

/// Longest wait for deactivated sessions to drain after a decrease of N.
const DRAIN_WAIT_MAX: Duration = Duration::from_secs(3);
/// How often that wait looks at the sessions.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// Bytes per request and requests per session the pools use now (the
/// smallest over the pools).
fn request_shape(pools: &[Arc<Pool>]) -> (u32, usize) {
    (pools.iter().map(|p| p.split()).min().unwrap_or(0), pools.iter().map(|p| p.depth()).min().unwrap_or(0))
}

/// Largest smoothed RTT, in seconds, among the active sessions of `pools`.
fn max_rtt_s(pools: &[Arc<Pool>]) -> f64 {
    pools
        .iter()
        .flat_map(|p| p.session_tcp_info())
        .filter(|(_, active, _)| *active)
        .flat_map(|(_, _, infos)| infos)
        .map(|i| f64::from(i.rtt_us) / 1e6)
        .fold(0.0, f64::max)
}

/// Runs the monitoring (and tuning) loop until `stop` turns true, then
/// records the partial last interval and returns.
///
/// `completed` must return bytes of *completed* requests (monotonic).
///
/// # Errors
/// A tuner configuration the tuner rejects.
pub async fn run(
    pools: Vec<Arc<Pool>>,
    completed: impl Fn() -> u64,
    config: ControlConfig,
    state: Arc<ControlState>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), wanblk_tune::ConfigError> {
    let n_max = pools.iter().map(|p| p.max_sessions()).min().unwrap_or(1);
    let mut tuner = match config.tuner {
        Some(mut cfg) => {
            cfg.n_max = cfg.n_max.min(n_max).max(cfg.n_min);
            cfg.n0 = cfg.n0.clamp(cfg.n_min, cfg.n_max);
            Some(Tuner::new(cfg)?)
        }
        None => None,
    };
    let set_all = |n: usize| -> usize { pools.iter().map(|p| p.set_active(n)).min().unwrap_or(n) };
    let mut n = match &tuner {
        Some(t) => set_all(t.current()),
        None => pools.iter().map(|p| p.active()).min().unwrap_or(1),
    };
    state.current_n.store(n, std::sync::atomic::Ordering::Relaxed);
    let request_bytes = pools.iter().map(|p| u64::from(p.request_size())).max().unwrap_or(4 << 20);
    let start = Instant::now();
    let mut last_t = start;
    let mut last_bytes = completed();
    let mut meter = TransportMeter::default();
    let _ = meter.delta(&pools);
    let mut last_goodput = f64::NAN;
    // The best goodput seen: what the path carried at least once.
    let mut best_goodput = 0.0_f64;
    let adapt_depth = config.adapt_depth && tuner.is_some();
    let fit_depth = |n: usize, best: f64, rtt: f64| {
        if adapt_depth {
            for p in &pools {
                let (split, depth) = request_plan(best, rtt, n, p.request_size(), p.max_depth());
                let used = p.set_split(split);
                let depth = if used == split {
                    depth
                } else {
                    // Rounded to the store's block size: same bytes in flight.
                    depth * split as usize / used.max(1) as usize + 1
                };
                p.set_depth(depth);
            }
        }
    };
    fit_depth(n, f64::NAN, 0.0);
    // The last change of N was a decrease (its warm-up only drains the queue).
    let mut decreased = false;
    loop {
        let rtt = max_rtt_s(&pools);
        let warmup = tuner.as_ref().is_some_and(|t| t.next_is_warmup());
        let interval = match config.interval {
            IntervalChoice::Fixed(d) => d,
            IntervalChoice::Auto(policy) => Duration::from_secs_f64(policy.interval_s(&PathSnapshot {
                max_rtt_s: rtt,
                goodput_bytes_per_s: last_goodput,
                sessions: n,
                request_bytes,
                window_bytes: max_window_bytes(&pools),
                warmup,
                after_decrease: decreased,
            })),
        };
        // After a decrease the deactivated sessions first finish the
        // requests they took (up to depth x request size each, seconds on a
        // window-limited path) and their bytes would be counted for the new
        // N: the warm-up lasts until they have drained (at most the longest
        // interval), then the usual 2 RTT.
        let mut drain_wait_s = 0.0;
        if warmup && decreased {
            let began = Instant::now();
            let deadline = began + DRAIN_WAIT_MAX;
            while Instant::now() < deadline && pools.iter().any(|p| p.draining() > 0) {
                tokio::select! {
                    _ = tokio::time::sleep(DRAIN_POLL) => {}
                    r = stop.wait_for(|s| *s) => { let _ = r; break; }
                }
            }
            drain_wait_s = began.elapsed().as_secs_f64();
            tracing::debug!(
                waited_s = drain_wait_s,
                still_draining = pools.iter().map(|p| p.draining()).sum::<usize>(),
                "drain wait after a decrease"
            );
        }
        let stopped = tokio::select! {
            _ = tokio::time::sleep(interval) => false,
            r = stop.wait_for(|s| *s) => { let _ = r; true }
        };
        let now = Instant::now();
        let bytes = completed();
        let transport = meter.delta(&pools);
        let dt = now.duration_since(last_t).as_secs_f64();
        let rate = |b: u64| if dt > 0.0 { b as f64 / dt } else { f64::NAN };
        let completed_rate = rate(bytes.saturating_sub(last_bytes));
        // A copy between two pools runs at the pace of the slower one.
        let transport_rate = transport.as_ref().and_then(|t| t.per_pool.iter().copied().min()).map(rate);
        let goodput = transport_rate.unwrap_or(completed_rate);
        let (request_bytes, depth) = request_shape(&pools);
        let mut sample = IntervalSample {
            t_s: now.duration_since(start).as_secs_f64(),
            n,
            goodput_mbps: goodput * 8.0 / 1e6,
            completed_mbps: completed_rate * 8.0 / 1e6,
            from_tcp: transport_rate.is_some(),
            fairness: transport.as_ref().and_then(|t| t.fairness),
            retransmits: transport.as_ref().map_or(0, |t| t.retransmits),
            duration_s: dt,
            rtt_ms: rtt * 1e3,
            discarded: stopped,
            drain_wait_s,
            request_bytes,
            depth,
        };
        last_t = now;
        last_bytes = bytes;
        if stopped {
            // The last, partial interval: recorded but not a tuning input.
            if dt > 0.0 {
                state.samples.lock().unwrap_or_else(|e| e.into_inner()).push(sample);
            }
            break;
        }
        last_goodput = goodput;
        if goodput.is_finite() {
            best_goodput = best_goodput.max(goodput);
        }
        if let Some(t) = tuner.as_mut() {
            let step = t.observe(wanblk_tune::Sample { n, goodput_bytes_per_s: goodput, duration_s: dt });
            sample.discarded = step.discarded();
            if step.next_n != n {
                decreased = step.next_n < n;
                n = set_all(step.next_n);
                tracing::info!(from = sample.n, to = n, phase = ?step.phase, "tuner changed N");
            }
            *state.report.lock().unwrap_or_else(|e| e.into_inner()) = Some(t.report());
        }
        fit_depth(n, best_goodput, rtt);
        (sample.request_bytes, sample.depth) = request_shape(&pools);
        state.current_n.store(n, std::sync::atomic::Ordering::Relaxed);
        state.samples.lock().unwrap_or_else(|e| e.into_inner()).push(sample);
    }
    if let Some(t) = &tuner {
        *state.report.lock().unwrap_or_else(|e| e.into_inner()) = Some(t.report());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{MIN_SPLIT, jain, request_plan};

    #[test]
    fn requests_follow_the_share_of_the_path() {
        const M: u32 = 1 << 20;
        // 1 Gbit/s, 100 ms: 2 x 12.5 MB is below the 64 MiB floor.
        let g = 125e6;
        // Few sessions: whole 4 MiB requests, as many as allowed.
        assert_eq!(request_plan(g, 0.1, 1, 4 * M, 4), (4 * M, 4));
        assert_eq!(request_plan(g, 0.1, 4, 4 * M, 16), (4 * M, 5));
        // 32 sessions: 2 MiB each -> 1 MiB requests, 3 in flight.
        assert_eq!(request_plan(g, 0.1, 32, 4 * M, 4), (M, 3));
        // 64 sessions: 1 MiB each -> 512 KiB requests, 3 in flight.
        assert_eq!(request_plan(g, 0.1, 64, 4 * M, 4), (512 << 10, 3));
        // 1024 sessions: the 256 KiB floor, 2 in flight.
        assert_eq!(request_plan(g, 0.1, 1024, 4 * M, 4), (MIN_SPLIT, 2));
        // A long fat path: 10 Gbit/s, 200 ms, 16 sessions -> 2 x 250 MB / 16.
        assert_eq!(request_plan(1.25e9, 0.2, 16, 4 * M, 16), (4 * M, 9));
        // Nothing known yet: the floor.
        assert_eq!(request_plan(f64::NAN, 0.0, 16, 4 * M, 4), (2 * M, 3));
        // Never above the request size the user chose, nor the depth.
        assert_eq!(request_plan(g, 0.1, 64, 64 << 10, 16).0, 64 << 10);
        assert_eq!(request_plan(g, 0.1, 64, 64 << 10, 1).1, 1);
        assert_eq!(request_plan(f64::INFINITY, f64::INFINITY, 0, 0, 0), (1, 1));
    }

    proptest::proptest! {
        #[test]
        fn a_plan_stays_in_bounds(g in 0.0f64..1e12, rtt in 0.0f64..10.0, n in 1usize..1024, req in 1u32..=(1 << 30), depth in 1usize..64) {
            let (split, slots) = request_plan(g, rtt, n, req, depth);
            proptest::prop_assert!(split <= req && split >= MIN_SPLIT.min(req));
            proptest::prop_assert!(slots >= 1 && slots <= depth);
        }
    }

    #[test]
    fn jain_index() {
        assert_eq!(jain(&[5.0, 5.0, 5.0]), Some(1.0));
        let one = jain(&[9.0, 0.0, 0.0]).unwrap();
        assert!((one - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(jain(&[3.0]), None);
        assert_eq!(jain(&[0.0, 0.0]), None);
    }
}
