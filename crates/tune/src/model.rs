//! The path model behind the model-informed search (ours; not in the
//! paper): what a measured point says about the points not measured.
//!
//! Each session of a long-fat path carries at most its own cap `r` (its
//! window over the round trip, a loss-limited rate, a server's
//! per-connection limit), and all of them together at most the path's
//! capacity `C`. So goodput rises with N along a ramp through the origin
//! and flattens into a plateau at `C`:
//!
//! ```text
//! G(N) ~ min(N r, C)          knee = ceil((1 - tolerance) C / r)
//! ```
//!
//! Two facts follow, and the search uses them instead of probing:
//!
//! - **Jump while the path has room.** A point measured without a standing
//!   queue (the sessions' RTT at its minimum, [`Signals::standing_queue`])
//!   and with its sessions at their own cap is on the ramp: the path has
//!   room, so the bracket search multiplies N by [`ModelConfig::jump`]
//!   instead of alpha. Once a step that gained lands on a full path (a
//!   standing queue), the knee lies between the last two points and the
//!   bracket search ends there; and when it gained nothing on a full
//!   path from a point that had room, that point is the knee's upper end
//!   (no hump to look for between them).
//! - **A lower bound on the knee.** Goodput per session does not grow
//!   with N (G is concave through the origin), so from a point `lo` below
//!   the plateau no N smaller than `ceil(threshold x lo / G(lo))` reaches
//!   the plateau's threshold. And below a point measured on the ramp,
//!   goodput is N times its per-session rate. The knee search probes that
//!   bound first (and stops when it reaches the plateau's fewest known
//!   sessions), falling back to bisection when the model misses twice;
//!   the golden-section search never probes below the fewest sessions
//!   that could beat its middle.
//!
//! - **Random loss caps a session.** A loss-based congestion control keeps
//!   a window its loss rate allows ([`loss_limited_rate`]); the plateau's
//!   fewest sessions read in slow start carry more than they keep once the
//!   losses cut them. The knee search does not look below the N that the
//!   rate the controller reads ([`Signals::loss_cap`]) fills the plateau
//!   with.
//!
//! The signals come from the controller (`TCP_INFO` of every session);
//! without them (`None`) the model still bounds the knee from measured
//! points but never trusts an unmeasured ramp.

use serde::{Deserialize, Serialize};

/// What the controller saw on the sessions during one interval, beyond
/// goodput (see the [module docs](self)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Signals {
    /// `Some(true)`: the active sessions' RTT stood clearly above its
    /// minimum (a bottleneck queue was filling: the path was full);
    /// `Some(false)`: it stayed at its minimum (the path had room);
    /// `None`: unknown (no TCP counters, or a sub-millisecond path where
    /// queueing delay cannot be told from host scheduling).
    pub standing_queue: Option<bool>,
    /// The goodput came in coarse steps: counted from whole completed
    /// requests, or the halves of an interval of this job disagreed (a
    /// server that releases replies in bursts). The tuner then also asks a
    /// win to rise above the measured noise
    /// ([`ResampleConfig::beyond_noise`](crate::ResampleConfig)).
    #[serde(default)]
    pub coarse: bool,
    /// The path's base RTT over the active sessions' RTT (medians, in
    /// (0, 1]): below 1 by the standing queue's share of the RTT. With
    /// window-limited sessions the same windows without the queue move
    /// `1 / base_share` times as much, so a full point at N says the knee
    /// is near `N x base_share` ([`knee_from_queue`]). `None`: unknown.
    #[serde(default)]
    pub base_share: Option<f64>,
    /// `Some(true)`: a session lost segments during the interval (we
    /// retransmitted, or segments reached us out of order: where we
    /// receive, the server's losses show only there); `Some(false)`: none
    /// did; `None`: unknown. A held N whose goodput falls below the
    /// search's peak with room is searched again only where losses are
    /// seen or unknown: windows shrinking under loss explain the fall,
    /// while on a loss-free path the peak was a burst that did not last.
    #[serde(default)]
    pub losses: Option<bool>,
    /// What one session of a loss-based congestion control can carry on
    /// average at the loss rate the sessions met while the path had room,
    /// bytes per second ([`loss_limited_rate`]); `None` until enough loss
    /// events were seen with room (a clean path, or BBR, never has one).
    /// The knee search does not look for the plateau's fewest sessions
    /// below the N that this rate fills it with.
    #[serde(default)]
    pub loss_cap: Option<f64>,
    /// The path's capacity as goodput, bytes per second, measured apart
    /// from the sessions ([`capacity`](crate::capacity): an echo train's
    /// dispersion); `None`: not measured. From a point on the ramp (room,
    /// sessions at their own cap) the search jumps to the sessions that
    /// fill it at that point's per-session rate instead of a fixed factor.
    #[serde(default)]
    pub capacity: Option<f64>,
}

/// The average rate of one session of a loss-based congestion control at
/// loss rate `p` (loss events per segment) and base round trip `rtt_s`,
/// with segments of `mss` bytes, in bytes per second: cubic's average
/// window (RFC 8312, section 5.1: `1.054 (rtt / p)^0.75` segments with its
/// C = 0.4 and beta = 0.7), or Reno's `1.22 / sqrt(p)` where that is larger
/// (cubic's TCP-friendly region), over the round trip. `None` for
/// meaningless input. At 0.01 % and 100 ms: 187 segments, 21.7 Mbit/s.
pub fn loss_limited_rate(p: f64, rtt_s: f64, mss: f64) -> Option<f64> {
    if !(p > 0.0 && p <= 1.0 && rtt_s > 0.0 && mss > 0.0 && rtt_s.is_finite() && mss.is_finite()) {
        return None;
    }
    let cubic = 1.054 * (rtt_s / p).powf(0.75);
    let reno = 1.22 / p.sqrt();
    let rate = cubic.max(reno).max(1.0) * mss / rtt_s;
    rate.is_finite().then_some(rate)
}

/// The fewest sessions that carry `threshold` bytes per second at `rate`
/// each (at least 1, saturating).
pub(crate) fn sessions_at(threshold: f64, rate: f64) -> usize {
    sessions_for(threshold, rate).max(1)
}

/// The first point of a search that knows the path's `capacity` (goodput,
/// bytes per second) before its first request: the fewest sessions that
/// could move `1 - tolerance` of it, each carrying at most `window` bytes
/// (the largest its socket buffers allow) over the base round trip
/// `rtt_s`. A session never carries more, so no smaller N reaches the
/// knee: starting there skips the points below it. At 200 ms RTT with
/// 512 KB buffers and 956 Mbit/s, 44 (the sessions' real windows are
/// smaller: the knee was 72-76). `None` for meaningless input.
pub fn first_point(capacity: f64, window: u64, rtt_s: f64, tolerance: f64) -> Option<usize> {
    let ok = capacity.is_finite() && capacity > 0.0 && window > 0 && rtt_s.is_finite() && rtt_s > 0.0;
    ok.then(|| sessions_at(capacity * (1.0 - tolerance.clamp(0.0, 1.0)), window as f64 / rtt_s))
}

/// The knee a full point suggests (see [`Signals::base_share`]): the
/// sessions that move `1 - tolerance` of the point's goodput once the
/// queue is gone, `ceil(n x base_share x (1 - tolerance))`. A model
/// estimate, not a bound: sessions limited by losses rather than windows
/// grow their windows when the queue is gone (the knee is lower), and a
/// queue someone else keeps does not go (it is higher).
pub(crate) fn knee_from_queue(n: usize, base_share: Option<f64>, tolerance: f64) -> Option<usize> {
    let s = base_share.filter(|s| s.is_finite() && *s > 0.0 && *s <= 1.0)?;
    let k = (n as f64 * s * (1.0 - tolerance.clamp(0.0, 1.0))).ceil();
    (k.is_finite() && k >= 1.0).then(|| (k as usize).min(n))
}

/// Parameters of the model-informed search (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Factor of the bracket search's step while the path has room (at
    /// least alpha; 4 reaches 64 sessions from 4 in two steps).
    pub jump: f64,
    /// A first point with a standing queue is measured one step of alpha
    /// up before the knee is searched below it (a few loss-based flows
    /// keep a queue and still leave the link short). Off: the knee is
    /// searched below it at once, for a workload that prefers fewer
    /// sessions (a sequential reader waits on its next request, which
    /// takes longer the more sessions share the path).
    #[serde(default = "yes")]
    pub step_above_full: bool,
}

fn yes() -> bool {
    true
}

impl Default for ModelConfig {
    /// Steps of 4x, a step up from a full first point.
    fn default() -> Self {
        ModelConfig { jump: 4.0, step_above_full: true }
    }
}

/// Per-session goodput at `g` over `n` sessions, if meaningful.
fn per_session(n: usize, g: f64) -> Option<f64> {
    (n > 0 && g.is_finite() && g > 0.0).then(|| g / n as f64)
}

/// `ceil(threshold / rate)` as a session count (saturating).
fn sessions_for(threshold: f64, rate: f64) -> usize {
    let k = (threshold / rate).ceil();
    if k.is_finite() && k >= 0.0 { k.min(usize::MAX as f64 / 2.0) as usize } else { usize::MAX / 2 }
}

/// The fewest sessions that can reach `threshold`, by the model: from a
/// point `lo` measured below the plateau (`lo_g`; concavity: G(N) <=
/// N G(lo) / lo for N >= lo), and from the plateau's fewest known
/// sessions `hi` when it was measured on the ramp (`hi_ramp`: G(N) =
/// N G(hi) / hi below it). Never below `lo + 1`.
pub(crate) fn knee_floor(
    threshold: f64,
    lo: usize,
    lo_g: Option<f64>,
    hi: usize,
    hi_g: Option<f64>,
) -> usize {
    let from_lo = lo_g.and_then(|g| per_session(lo, g)).map_or(0, |r| sessions_for(threshold, r));
    let from_hi = hi_g.and_then(|g| per_session(hi, g)).map_or(0, |r| sessions_for(threshold, r));
    from_lo.max(from_hi).max(lo.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_a_lower_bound_on_a_ramp() {
        // 60 per session, plateau 956: threshold 927 -> 16 sessions.
        assert_eq!(knee_floor(927.0, 4, Some(240.0), 64, None), 16);
        // The plateau's fewest sessions measured on the ramp.
        assert_eq!(knee_floor(927.0, 0, None, 4, Some(936.0)), 4);
        // Nothing known: just above lo.
        assert_eq!(knee_floor(927.0, 7, None, 64, None), 8);
        // Garbage never panics.
        assert_eq!(knee_floor(f64::NAN, 3, Some(0.0), 9, Some(f64::INFINITY)), 4);
        assert!(knee_floor(1e300, 1, Some(1e-300), 2, None) >= 2);
    }

    #[test]
    fn the_first_point_is_what_the_largest_windows_need() {
        let mbit = 1e6 / 8.0;
        // 956 Mbit/s, 200 ms RTT, 512 KiB: 45.6 sessions at their cap, 0.95 of it 43.3.
        assert_eq!(first_point(956.0 * mbit, 512 << 10, 0.2, 0.05), Some(44));
        // The quick path's 6 MB buffers at 100 ms: one session would do.
        assert_eq!(first_point(956.0 * mbit, 6 << 20, 0.1, 0.05), Some(2));
        for (c, w, r) in
            [(0.0, 1, 0.1), (f64::NAN, 1, 0.1), (1.0, 0, 0.1), (1.0, 1, 0.0), (1.0, 1, f64::INFINITY)]
        {
            assert_eq!(first_point(c, w, r, 0.05), None, "{c} {w} {r}");
        }
        assert_eq!(first_point(1e300, 1, 1e6, 0.05), first_point(1e301, 1, 1e6, 0.05), "saturates");
    }

    #[test]
    fn a_session_carries_less_the_more_it_loses() {
        // Cubic at 0.01 % and 100 ms: about 187 segments of 1448 bytes a
        // round trip, 21.7 Mbit/s.
        let r = loss_limited_rate(1e-4, 0.1, 1448.0).unwrap() * 8.0 / 1e6;
        assert!((21.0..22.5).contains(&r), "{r}");
        // Ten times the loss, under a quarter of the rate; Reno's region at
        // short round trips (1 ms: 1.22 / sqrt(p) is the larger window).
        let worse = loss_limited_rate(1e-3, 0.1, 1448.0).unwrap() * 8.0 / 1e6;
        assert!(worse < r / 4.0, "{worse}");
        let lan = loss_limited_rate(1e-4, 0.001, 1448.0).unwrap();
        assert!((lan - 122.0 * 1448.0 / 0.001).abs() < 1e3 * 1448.0, "{lan}");
        for bad in [(0.0, 0.1), (-1.0, 0.1), (f64::NAN, 0.1), (1e-4, 0.0), (1e-4, f64::INFINITY), (2.0, 0.1)]
        {
            assert_eq!(loss_limited_rate(bad.0, bad.1, 1448.0), None, "{bad:?}");
        }
        assert_eq!(sessions_at(927.0, 0.0), usize::MAX / 2);
        assert_eq!(sessions_at(0.0, 10.0), 1);
    }
}
