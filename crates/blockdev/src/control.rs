//! Goodput monitoring and the tuning loop (seed 000, sections 4.4-4.5).
//!
//! Every interval the controller reads a byte counter that only grows when
//! requests *complete* (never on submission), turns the difference into a
//! goodput sample, and, with a tuner, feeds the sample to
//! [`wanblk_apt::Tuner`] and applies the answer to every pool with
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
//! by [`wanblk_apt::IntervalPolicy`]: a few round trips of the slowest
//! active session (RTT from `TCP_INFO`); a sample taken right after N
//! changed is a warm-up the tuner discards: after an increase as long as
//! slow start needs to reach the largest window any session has (cwnd x MSS
//! or rcv_space); after a decrease until the deactivated sessions have
//! finished their outstanding requests (their bytes would otherwise count
//! for the smaller N), then two round trips.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;
use wanblk_apt::{IntervalPolicy, PathSnapshot, Tuner, TunerConfig, TuningReport};

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
}

/// One measured interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
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
) -> Result<(), wanblk_apt::ConfigError> {
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
        if warmup && decreased {
            let deadline = Instant::now() + DRAIN_WAIT_MAX;
            while Instant::now() < deadline && pools.iter().any(|p| p.draining() > 0) {
                tokio::select! {
                    _ = tokio::time::sleep(DRAIN_POLL) => {}
                    r = stop.wait_for(|s| *s) => { let _ = r; break; }
                }
            }
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
        if let Some(t) = tuner.as_mut() {
            let step = t.observe(wanblk_apt::Sample { n, goodput_bytes_per_s: goodput, duration_s: dt });
            sample.discarded = step.discarded();
            if step.next_n != n {
                decreased = step.next_n < n;
                n = set_all(step.next_n);
                tracing::info!(from = sample.n, to = n, phase = ?step.phase, "tuner changed N");
            }
            *state.report.lock().unwrap_or_else(|e| e.into_inner()) = Some(t.report());
        }
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
    use super::jain;

    #[test]
    fn jain_index() {
        assert_eq!(jain(&[5.0, 5.0, 5.0]), Some(1.0));
        let one = jain(&[9.0, 0.0, 0.0]).unwrap();
        assert!((one - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(jain(&[3.0]), None);
        assert_eq!(jain(&[0.0, 0.0]), None);
    }
}
