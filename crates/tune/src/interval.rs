//! How long one measurement interval should be, from what the driver knows
//! about the path. A pure function: the driver measures, this only computes.

use serde::{Deserialize, Serialize};

/// TCP's initial congestion window assumed by the warm-up rule: 10 segments
/// of 1460 bytes (RFC 6928).
pub const INITIAL_WINDOW_BYTES: f64 = 14_600.0;

/// Round trips a warm-up after a decrease of N lasts (queue drain, with one
/// round trip of margin).
pub const DRAIN_RTTS: f64 = 2.0;

/// What the driver knows when it starts an interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PathSnapshot {
    /// Largest smoothed RTT among the active sessions, in seconds (from
    /// `TCP_INFO`); 0 or non-finite when unknown.
    pub max_rtt_s: f64,
    /// The last measured goodput in bytes per second; 0 or non-finite when
    /// unknown (first interval).
    pub goodput_bytes_per_s: f64,
    /// Sessions active in the coming interval.
    pub sessions: usize,
    /// Size of one request (NBD/SCSI read or write) in bytes.
    pub request_bytes: u64,
    /// Per-session window limit (socket buffer) in bytes, if known; used by
    /// the warm-up rule.
    pub window_bytes: Option<u64>,
    /// The tuner will discard this interval ([`Step::next_is_warmup`](crate::Step)).
    pub warmup: bool,
    /// The warm-up follows a decrease of N: no session restarts, only the
    /// queue the larger N built has to drain. (The controller also waits for
    /// deactivated sessions to finish their requests before it starts this
    /// interval.)
    pub after_decrease: bool,
}

/// Chooses the measurement interval.
///
/// For a measured interval:
///
/// ```text
/// T = clamp( max( k * RTT_max,  q * N * S / G ),  T_min, T_max )
/// ```
///
/// with `k` = [`rtt_multiple`](Self::rtt_multiple), `RTT_max` the largest RTT
/// of the active sessions, `q` = [`requests_per_session`](Self::requests_per_session),
/// `N` the active sessions, `S` the request size and `G` the last goodput:
/// long enough to span several round trips, and for each session to
/// complete about `q` requests, so that counting whole completed requests
/// errs by at most about 1/q. `T_max` wins over both rules, so a stalled path
/// still gets a decision every `T_max`.
///
/// For a warm-up interval (one the tuner discards), only as long as TCP slow
/// start needs to grow from the initial window to the session's window `W`:
///
/// ```text
/// T_warm = clamp( RTT_max * (1 + log2(W / IW)),  T_min, T_max )
/// ```
///
/// with IW = 14 600 bytes ([`INITIAL_WINDOW_BYTES`]); without `W`, the warm-up
/// interval is a measured interval. After a decrease of N no session
/// restarts (the remaining ones keep their windows) and only the queue the
/// larger N built has to drain, which takes at most about one RTT:
/// `T_warm = clamp(DRAIN_RTTS * RTT_max, T_min, T_max)`.
///
/// Defaults: k = 5, q = 4, T_min = 0.2 s, T_max = 3 s, so a 100 ms path
/// measures over about 0.5 s and a 10 ms path over 0.2 s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IntervalPolicy {
    /// `k`: round trips per interval.
    pub rtt_multiple: f64,
    /// `q`: requests each session should complete per interval.
    pub requests_per_session: f64,
    /// `T_min` in seconds.
    pub min_interval_s: f64,
    /// `T_max` in seconds.
    pub max_interval_s: f64,
}

impl Default for IntervalPolicy {
    fn default() -> Self {
        IntervalPolicy {
            rtt_multiple: 5.0,
            requests_per_session: 4.0,
            min_interval_s: 0.2,
            max_interval_s: 3.0,
        }
    }
}

/// A non-negative finite value, or 0.
fn nonneg(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 { x } else { 0.0 }
}

impl IntervalPolicy {
    /// The interval in seconds for `path` (see the type's documentation).
    ///
    /// Never panics and always returns a finite, non-negative value:
    /// non-finite or negative inputs count as unknown (0), and if
    /// `min_interval_s > max_interval_s` the maximum wins.
    pub fn interval_s(&self, path: &PathSnapshot) -> f64 {
        let rtt = nonneg(path.max_rtt_s);
        let want = match (path.warmup, path.window_bytes) {
            (true, _) if path.after_decrease => DRAIN_RTTS * rtt,
            (true, Some(w)) => {
                let rounds = (w as f64 / INITIAL_WINDOW_BYTES).max(1.0).log2();
                rtt * (1.0 + rounds)
            }
            _ => {
                let by_rtt = nonneg(self.rtt_multiple) * rtt;
                let g = nonneg(path.goodput_bytes_per_s);
                let bytes =
                    nonneg(self.requests_per_session) * path.sessions as f64 * path.request_bytes as f64;
                let by_bytes = if g > 0.0 { nonneg(bytes / g) } else { 0.0 };
                by_rtt.max(by_bytes)
            }
        };
        want.max(nonneg(self.min_interval_s)).min(nonneg(self.max_interval_s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(rtt: f64, g: f64, n: usize) -> PathSnapshot {
        PathSnapshot {
            max_rtt_s: rtt,
            goodput_bytes_per_s: g,
            sessions: n,
            request_bytes: 1 << 20,
            window_bytes: Some(4 << 20),
            warmup: false,
            after_decrease: false,
        }
    }

    #[test]
    fn rtt_rule_and_clamps() {
        let p = IntervalPolicy::default();
        // 100 ms: 5 RTTs = 0.5 s when the byte rule asks less (10 Gbit/s).
        assert!((p.interval_s(&path(0.1, 1.25e9, 8)) - 0.5).abs() < 1e-12);
        // 10 ms: 50 ms is below T_min.
        assert!((p.interval_s(&path(0.01, 1.25e9, 8)) - 0.2).abs() < 1e-12);
        // 2 s RTT: 10 s is above T_max.
        assert!((p.interval_s(&path(2.0, 1.25e9, 8)) - 3.0).abs() < 1e-12);
    }

    #[test]
    fn byte_rule_lengthens_slow_paths() {
        let p = IntervalPolicy::default();
        // 16 sessions x 4 x 1 MiB = 64 MiB at 100 MB/s: 0.67 s > 0.5 s.
        let t = p.interval_s(&path(0.1, 1e8, 16));
        assert!((t - 64.0 * 1048576.0 / 1e8).abs() < 1e-9, "{t}");
        // Unknown goodput: the byte rule is skipped.
        assert!((p.interval_s(&path(0.1, 0.0, 16)) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn warmup_covers_slow_start() {
        let p = IntervalPolicy::default();
        let mut s = path(0.1, 1e9, 8);
        s.warmup = true;
        // 4 MiB / 14600 B = 2^8.17: about 9.2 RTTs.
        let t = p.interval_s(&s);
        assert!((0.9..0.95).contains(&t), "{t}");
        s.window_bytes = None;
        assert!((p.interval_s(&s) - 0.5).abs() < 1e-12);
        // After a decrease only the queue drains: 2 RTTs.
        s.window_bytes = Some(4 << 20);
        s.after_decrease = true;
        assert!((p.interval_s(&s) - 0.2).abs() < 1e-12);
        s.warmup = false;
        assert!((p.interval_s(&s) - 0.5).abs() < 1e-12, "a measured interval is unaffected");
    }

    #[test]
    fn garbage_in_is_finite_out() {
        let weird = IntervalPolicy {
            rtt_multiple: f64::NAN,
            requests_per_session: -1.0,
            min_interval_s: 5.0,
            max_interval_s: 1.0,
        };
        for rtt in [f64::NAN, f64::INFINITY, -1.0, 0.0, 1e300] {
            for g in [f64::NAN, f64::NEG_INFINITY, 0.0, 1e-300] {
                for pol in [weird, IntervalPolicy::default()] {
                    let t = pol.interval_s(&path(rtt, g, usize::MAX));
                    assert!(t.is_finite() && t >= 0.0, "{t}");
                }
            }
        }
    }
}
