//! How fast a run reached the path, from the controller's own record: the
//! progress trace (bytes over time at every call), the time N became
//! final, what the path carried, and how long the application's demand
//! rather than the path limited goodput.

use serde::{Deserialize, Serialize};

use super::sample::IntervalSample;

/// One point of the progress trace: bytes moved by `t_s`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProgressPoint {
    /// Seconds since the controller started.
    pub t_s: f64,
    /// Payload bytes moved so far: the TCP byte counters of the sessions
    /// when `from_tcp`, else completed requests.
    pub bytes: u64,
    /// `bytes` came from TCP byte counters.
    pub from_tcp: bool,
}

/// Points of the trace are kept at least this far apart (the last one of
/// a closer run replaces the previous), so a long run stays small.
pub const PROGRESS_SPACING_S: f64 = 0.05;

/// Shortest window over which the trace's goodput is judged: a rate over
/// a shorter span is mostly noise (request and window granularity).
pub const RATE_WINDOW_MIN_S: f64 = 0.25;

/// Goodput must reach this share of the run's capacity for
/// [`Timing::time_to_95pct_s`].
pub const NEAR_CAPACITY: f64 = 0.95;

/// The first time the trace's goodput over a trailing window of at least
/// `window_s` reached `rate` (bytes per second): the end of that window,
/// seconds since the start. Windows whose ends come from different byte
/// sources are skipped. `None` if it never did.
pub fn time_to_rate(progress: &[ProgressPoint], rate: f64, window_s: f64) -> Option<f64> {
    let window_s = if window_s.is_finite() && window_s > 0.0 { window_s } else { RATE_WINDOW_MIN_S };
    let mut j = 0;
    for (i, b) in progress.iter().enumerate() {
        while j + 1 < i && b.t_s - progress[j + 1].t_s >= window_s {
            j += 1;
        }
        let a = progress[j];
        let dt = b.t_s - a.t_s;
        if dt >= window_s && a.from_tcp == b.from_tcp && b.bytes >= a.bytes {
            let r = (b.bytes - a.bytes) as f64 / dt;
            if r >= rate {
                return Some(b.t_s);
            }
        }
    }
    None
}

/// How fast the run reached the path ([`Controller::timing`](super::Controller::timing)).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Seconds until goodput first reached 95 % of `capacity_mbps`, over
    /// a trailing window of at least max(0.25 s, 2 RTT) of the progress
    /// trace.
    #[serde(deserialize_with = "Option::deserialize")]
    pub time_to_95pct_s: Option<f64>,
    /// Seconds until N last changed (it kept its final value from then
    /// on); 0 if it never changed; `None` with a fixed N.
    #[serde(deserialize_with = "Option::deserialize")]
    pub time_to_final_n_s: Option<f64>,
    /// What the path carried: the median goodput (Mbit/s) of the measured
    /// samples since N became final (all measured samples with a fixed N),
    /// leaving out warm-ups and demand-limited ones; the largest measured
    /// one if there is none.
    #[serde(deserialize_with = "Option::deserialize")]
    pub capacity_mbps: Option<f64>,
    /// Seconds of samples in which the application's demand, not the
    /// path, limited goodput ([`IntervalSample::demand_limited`]).
    pub demand_limited_s: f64,
}

/// The [`Timing`] of a run from its samples, trace, last change of N and
/// path RTT.
pub(crate) fn timing(
    samples: &[IntervalSample],
    progress: &[ProgressPoint],
    final_n_since_s: Option<f64>,
    rtt_s: f64,
) -> Timing {
    let measured = |s: &&IntervalSample| s.settled() && !s.demand_limited && s.goodput_mbps.is_finite();
    let since = final_n_since_s.unwrap_or(0.0);
    let mut settled: Vec<f64> = samples
        .iter()
        .filter(measured)
        .filter(|s| s.t_s - s.duration_s >= since - 1e-9)
        .map(|s| s.goodput_mbps)
        .collect();
    settled.sort_by(f64::total_cmp);
    let capacity_mbps = if settled.is_empty() {
        samples.iter().filter(measured).map(|s| s.goodput_mbps).reduce(f64::max)
    } else {
        Some(settled[settled.len() / 2])
    };
    let window = RATE_WINDOW_MIN_S.max(2.0 * rtt_s);
    let time_to_95pct_s =
        capacity_mbps.and_then(|c| time_to_rate(progress, NEAR_CAPACITY * c * 1e6 / 8.0, window));
    Timing {
        time_to_95pct_s,
        time_to_final_n_s: final_n_since_s,
        capacity_mbps,
        demand_limited_s: samples.iter().filter(|s| s.demand_limited).map(|s| s.duration_s).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(points: &[(f64, u64)]) -> Vec<ProgressPoint> {
        points.iter().map(|&(t_s, bytes)| ProgressPoint { t_s, bytes, from_tcp: true }).collect()
    }

    #[test]
    fn the_first_window_at_the_rate() {
        // 0..1 s at 10 B/s, then 100 B/s.
        let p = trace(&[(0.0, 0), (0.5, 5), (1.0, 10), (1.25, 35), (1.5, 60), (1.75, 85), (2.0, 110)]);
        assert_eq!(time_to_rate(&p, 95.0, 0.25), Some(1.25));
        // A 0.5 s window needs two fast quarters.
        assert_eq!(time_to_rate(&p, 95.0, 0.5), Some(1.5));
        assert_eq!(time_to_rate(&p, 200.0, 0.25), None);
        assert_eq!(time_to_rate(&[], 1.0, 0.25), None);
        // Mixed sources are never compared.
        let mut mixed = trace(&[(0.0, 0), (1.0, 1000)]);
        mixed[1].from_tcp = false;
        assert_eq!(time_to_rate(&mixed, 1.0, 0.25), None);
        // Garbage windows fall back to the minimum.
        assert_eq!(time_to_rate(&p, 95.0, f64::NAN), Some(1.25));
    }
}
