//! One receive window for the ensemble (Fair-TCP's shared congestion
//! state, from the receiving side): while the path is full and shared, no
//! session of a copy is let keep much more in flight than the copy's
//! sessions keep on average.
//!
//! Sessions that share a bottleneck with many other flows do not even out
//! by themselves: a cubic flow that grew its window while the path was
//! empty (the first session, opened before the others) keeps it for tens
//! of seconds against flows that joined the full queue later. Four copies
//! on the share bench's path, 5 sessions each: the first session of every
//! copy held a 3.9 MB window where the others held 0.6-1.7 MB, and moved
//! half of its copy's bytes (own sessions' Jain index 0.58-0.69 per
//! interval). In a restore the server's congestion window is out of
//! reach, but the window the client advertises is not: the driver clamps
//! every session's advertised window (`TCP_WINDOW_CLAMP`) at
//! [`MARGIN`] times the mean of what the active sessions kept in flight
//! over the last interval (goodput x RTT). A session above it is held
//! there; the capacity it gives up goes to the queue and to the sessions
//! below, whose windows then grow, and with them the mean and the clamp.
//! The clamp never falls below the mean, so it cannot spiral down; it is
//! removed when the path shows room or N is 1.
//!
//! It acts on what we receive (a restore, reads); what we send is paced
//! instead ([`EnsemblePacer`](crate::share::EnsemblePacer), opt-in).
//!
//! Sans-I/O: fed with the sessions' cumulative counters and the time, it
//! answers the clamp.

use std::collections::BTreeMap;

use super::meter::SessionSample;
use super::update;

/// How far above the mean window one session may keep in flight.
pub const MARGIN: f64 = 1.25;

/// The clamp is never set below this many bytes (a few segments more than
/// the kernel's own floor), whatever the mean.
pub const MIN_CLAMP: u64 = 256 << 10;

/// Changes smaller than this share of the clamp are not applied.
const HYSTERESIS: f64 = 0.05;

/// The ensemble's receive-window clamp. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct WindowSplitter {
    /// Bytes each session (pool, index) had moved at the last call.
    last: BTreeMap<(usize, usize), u64>,
    last_t: Option<f64>,
    clamp: Option<u64>,
}

impl WindowSplitter {
    /// No clamp.
    pub fn new() -> WindowSplitter {
        WindowSplitter::default()
    }

    /// The clamp now, bytes.
    pub fn clamp(&self) -> Option<u64> {
        self.clamp
    }

    /// One interval ending at `t_s`: the sessions' counters now and
    /// whether the path is full and shared (the governor holds a ceiling).
    /// Returns the new clamp when it changed (`Some(None)`: removed).
    pub fn observe(&mut self, t_s: f64, sessions: &[SessionSample], shared: bool) -> Option<Option<u64>> {
        let dt = self.last_t.map(|t| t_s - t).filter(|d| d.is_finite() && *d > 0.0);
        let windows: Vec<f64> = sessions
            .iter()
            .filter(|s| s.active && s.rtt_us > 0)
            .filter_map(|s| {
                let before = *self.last.get(&(s.pool, s.index))?;
                let rate = s.bytes.checked_sub(before)? as f64 / dt?;
                Some(rate * f64::from(s.rtt_us) / 1e6)
            })
            .collect();
        self.last = sessions.iter().map(|s| ((s.pool, s.index), s.bytes)).collect();
        self.last_t = Some(t_s);
        let active = sessions.iter().filter(|s| s.active).count();
        let new = if !shared || active < 2 {
            None
        } else if windows.len() < 2 || windows.len() < active {
            // A session without a rate yet (just opened): keep what holds.
            return None;
        } else {
            let mean = windows.iter().sum::<f64>() / windows.len() as f64;
            if !(mean.is_finite() && mean > 0.0) {
                return None;
            }
            Some(((mean * MARGIN) as u64).max(MIN_CLAMP))
        };
        update(&mut self.clamp, new, HYSTERESIS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(index: usize, bytes: u64, rtt_ms: u32) -> SessionSample {
        SessionSample {
            pool: 0,
            index,
            active: true,
            bytes,
            retransmits: 0,
            rtt_us: rtt_ms * 1000,
            min_rtt_us: 100_000,
            cwnd_bytes: 0,
        }
    }

    #[test]
    fn holds_the_largest_window_near_the_mean_while_the_path_is_shared() {
        let mut w = WindowSplitter::new();
        let at = |moved: [u64; 3]| -> Vec<SessionSample> {
            moved.iter().enumerate().map(|(i, b)| session(i, *b, 125)).collect()
        };
        assert_eq!(w.observe(0.0, &at([0, 0, 0]), true), None, "no rates yet");
        // In one second: 32, 8 and 8 MB/s over 125 ms: windows 4, 1 and
        // 1 MB, mean 2 MB: the clamp is 2.5 MB.
        let r = w.observe(1.0, &at([32_000_000, 8_000_000, 8_000_000]), true);
        assert_eq!(r, Some(Some(2_500_000)));
        // The held session gave up share, the others grew: 20, 16, 12 MB/s.
        let r = w.observe(2.0, &at([52_000_000, 24_000_000, 20_000_000]), true);
        assert_eq!(r, None, "mean 2 MB again: within the hysteresis");
        let r = w.observe(3.0, &at([72_000_000, 44_000_000, 40_000_000]), true);
        assert_eq!(r, Some(Some(3_125_000)), "20 MB/s each: 2.5 MB, clamp 3.1 MB");
        // Room: no clamp.
        assert_eq!(w.observe(4.0, &at([90_000_000, 60_000_000, 55_000_000]), false), Some(None));
        assert_eq!(w.clamp(), None);
    }

    #[test]
    fn never_below_the_floor_and_not_for_one_session() {
        let mut w = WindowSplitter::new();
        let tiny = |b: u64| vec![session(0, b, 100), session(1, b, 100)];
        assert_eq!(w.observe(0.0, &tiny(0), true), None);
        assert_eq!(w.observe(1.0, &tiny(1000), true), Some(Some(MIN_CLAMP)));
        let one = [session(0, 5000, 100)];
        assert_eq!(w.observe(2.0, &one, true), Some(None), "one session: nothing to split");
        // A session that just opened has no rate: nothing decided.
        let mut w = WindowSplitter::new();
        assert_eq!(w.observe(0.0, &[session(0, 0, 100)], true), None);
        let two = [session(0, 1_000_000, 100), session(1, 0, 100)];
        assert_eq!(w.observe(1.0, &two, true), None);
        // Counters that went back (a session replaced at the same index)
        // and bad times are ignored.
        assert_eq!(w.observe(0.5, &[session(0, 10, 100), session(1, 10, 100)], true), None);
    }
}
