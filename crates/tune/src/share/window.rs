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
//! The clamp never falls below the mean; it is removed when the path shows
//! room or N is 1.
//!
//! It does not fall until [`QUIET`] intervals in a row had no losses. Under
//! random loss every session's window is cut at random and regrows slowly,
//! so the windows sit well under the largest one and their mean under the
//! clamp; a clamp
//! lowered to 1.25 times that mean stopped the regrowth, the mean fell
//! again, and it spiralled: two copies on the share path with 0.01 % loss,
//! one copy's clamp went 821, 598, 522, 484, 456, 403, 353, 333 KB in 16 s
//! while its governor held a ceiling, its sessions moved 21 Mbit/s each
//! against the other copy's 50 (unclamped), 213 against 795 Mbit/s.
//! Losses already even such sessions out; the clamp is for windows that
//! grew on an empty path and no loss cuts. (Falling in any interval without
//! losses was not enough: at 5 sessions a third of the 0.5 s intervals had
//! none, and the clamp still fell 629, 541, 501 KB.)
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

/// Intervals in a row without losses before the clamp may fall (about the
/// seconds a window cut by a random loss takes to regrow at 100 ms).
pub const QUIET: u32 = 4;

/// Changes smaller than this share of the clamp are not applied.
const HYSTERESIS: f64 = 0.05;

/// The ensemble's receive-window clamp. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct WindowSplitter {
    /// Bytes each session (pool, index) had moved at the last call.
    last: BTreeMap<(usize, usize), u64>,
    last_t: Option<f64>,
    clamp: Option<u64>,
    /// Intervals in a row without losses.
    quiet: u32,
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

    /// One interval ending at `t_s`: the sessions' counters now, whether
    /// the path is full and shared (the governor holds a ceiling) and
    /// whether the sessions lost segments in it (the clamp falls only after
    /// [`QUIET`] intervals without: see the module docs). Returns the new
    /// clamp when it changed (`Some(None)`: removed).
    pub fn observe(
        &mut self,
        t_s: f64,
        sessions: &[SessionSample],
        shared: bool,
        lossy: bool,
    ) -> Option<Option<u64>> {
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
        self.quiet = if lossy { 0 } else { self.quiet.saturating_add(1) };
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
            let clamp = ((mean * MARGIN) as u64).max(MIN_CLAMP);
            match self.clamp {
                Some(held) if self.quiet < QUIET && clamp < held => return None,
                _ => Some(clamp),
            }
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
        assert_eq!(w.observe(0.0, &at([0, 0, 0]), true, false), None, "no rates yet");
        // In one second: 32, 8 and 8 MB/s over 125 ms: windows 4, 1 and
        // 1 MB, mean 2 MB: the clamp is 2.5 MB.
        let r = w.observe(1.0, &at([32_000_000, 8_000_000, 8_000_000]), true, false);
        assert_eq!(r, Some(Some(2_500_000)));
        // The held session gave up share, the others grew: 20, 16, 12 MB/s.
        let r = w.observe(2.0, &at([52_000_000, 24_000_000, 20_000_000]), true, false);
        assert_eq!(r, None, "mean 2 MB again: within the hysteresis");
        let r = w.observe(3.0, &at([72_000_000, 44_000_000, 40_000_000]), true, false);
        assert_eq!(r, Some(Some(3_125_000)), "20 MB/s each: 2.5 MB, clamp 3.1 MB");
        // Room: no clamp.
        assert_eq!(w.observe(4.0, &at([90_000_000, 60_000_000, 55_000_000]), false, false), Some(None));
        assert_eq!(w.clamp(), None);
    }

    #[test]
    fn does_not_fall_while_sessions_lose_segments() {
        let mut w = WindowSplitter::new();
        let at = |moved: [u64; 2]| -> Vec<SessionSample> {
            moved.iter().enumerate().map(|(i, b)| session(i, *b, 100)).collect()
        };
        assert_eq!(w.observe(0.0, &at([0, 0]), true, false), None);
        // 8 MB/s each over 100 ms: windows of 800 KB, clamp 1 MB.
        assert_eq!(w.observe(1.0, &at([8_000_000, 8_000_000]), true, true), Some(Some(1_000_000)));
        // Random loss cut both windows (4 MB/s: 400 KB): the clamp holds.
        assert_eq!(w.observe(2.0, &at([12_000_000, 12_000_000]), true, true), None);
        assert_eq!(w.clamp(), Some(1_000_000));
        // It still rises, and is removed when the path has room.
        let r = w.observe(3.0, &at([24_000_000, 24_000_000]), true, true);
        assert_eq!(r, Some(Some(1_500_000)), "12 MB/s: 1.2 MB windows, clamp 1.5 MB");
        // Without losses for QUIET intervals the same fall lowers it.
        let mut t = 3.0;
        let mut moved = 24_000_000;
        for _ in 1..QUIET {
            (t, moved) = (t + 1.0, moved + 4_000_000);
            assert_eq!(w.observe(t, &at([moved, moved]), true, false), None, "not quiet long enough");
        }
        let r = w.observe(t + 1.0, &at([moved + 4_000_000, moved + 4_000_000]), true, false);
        assert_eq!(r, Some(Some(500_000)));
        assert_eq!(w.observe(t + 2.0, &at([moved + 8_000_000; 2]), false, true), Some(None));
    }

    #[test]
    fn never_below_the_floor_and_not_for_one_session() {
        let mut w = WindowSplitter::new();
        let tiny = |b: u64| vec![session(0, b, 100), session(1, b, 100)];
        assert_eq!(w.observe(0.0, &tiny(0), true, false), None);
        assert_eq!(w.observe(1.0, &tiny(1000), true, false), Some(Some(MIN_CLAMP)));
        let one = [session(0, 5000, 100)];
        assert_eq!(w.observe(2.0, &one, true, false), Some(None), "one session: nothing to split");
        // A session that just opened has no rate: nothing decided.
        let mut w = WindowSplitter::new();
        assert_eq!(w.observe(0.0, &[session(0, 0, 100)], true, false), None);
        let two = [session(0, 1_000_000, 100), session(1, 0, 100)];
        assert_eq!(w.observe(1.0, &two, true, false), None);
        // Counters that went back (a session replaced at the same index)
        // and bad times are ignored.
        assert_eq!(w.observe(0.5, &[session(0, 10, 100), session(1, 10, 100)], true, false), None);
    }
}
