//! `--rate`: a cap on how fast the copy moves data, kept by when each
//! piece may start.
//!
//! Pacing the sockets (`SO_MAX_PACING_RATE`, set by the pool) only slows
//! what we send; a read's bytes come from the server as fast as it likes.
//! So the engine also asks no faster than the cap: each data piece gets a
//! start time from a [`Schedule`], the pieces' bytes spread evenly over
//! time at the cap. The schedule is sans-I/O (the caller passes `now`);
//! [`RateLimit`] is the shared handle the copy tasks wait on.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Start times for pieces at `bytes_per_s`: a piece may start once the
/// bytes before it have had their time. The first piece starts at once;
/// a schedule that fell behind (the path was slower than the cap) does
/// not bank the lost time as a burst.
#[derive(Debug, Clone)]
pub struct Schedule {
    bytes_per_s: f64,
    /// When the next piece may start.
    next: Option<Instant>,
}

impl Schedule {
    /// A schedule at `bytes_per_s` (at least 1).
    pub fn new(bytes_per_s: u64) -> Schedule {
        Schedule { bytes_per_s: bytes_per_s.max(1) as f64, next: None }
    }

    /// The cap, bytes per second.
    pub fn bytes_per_s(&self) -> f64 {
        self.bytes_per_s
    }

    /// How far ahead of `now` the schedule is booked.
    pub fn ahead(&self, now: Instant) -> Duration {
        self.next.map_or(Duration::ZERO, |n| n.saturating_duration_since(now))
    }

    /// Reserves `bytes` asked at `now`: returns when they may start.
    pub fn reserve(&mut self, now: Instant, bytes: u64) -> Instant {
        let start = self.next.map_or(now, |n| n.max(now));
        self.next = Some(start + Duration::from_secs_f64(bytes as f64 / self.bytes_per_s));
        start
    }
}

/// The copy books pieces at most this far ahead of now.
pub const HORIZON: Duration = Duration::from_millis(250);

/// A [`Schedule`] shared by the copy's tasks.
#[derive(Debug)]
pub struct RateLimit {
    schedule: Mutex<Schedule>,
}

impl RateLimit {
    /// A cap of `bytes_per_s`.
    pub fn new(bytes_per_s: u64) -> RateLimit {
        RateLimit { schedule: Mutex::new(Schedule::new(bytes_per_s)) }
    }

    /// Reserves `bytes` now and returns when they may start (wait with
    /// `tokio::time::sleep_until`). Reserve in the order the pieces should
    /// go.
    pub fn reserve(&self, bytes: u64) -> Instant {
        let mut s = self.schedule.lock().unwrap_or_else(|e| e.into_inner());
        s.reserve(Instant::now(), bytes)
    }

    /// How far ahead the schedule is booked now: the copy books no more
    /// than [`HORIZON`] ahead, so pieces do not pile up waiting.
    pub fn ahead(&self) -> Duration {
        let s = self.schedule.lock().unwrap_or_else(|e| e.into_inner());
        s.ahead(Instant::now())
    }

    /// The largest piece that keeps the cap smooth: about 50 ms of it, a
    /// power of two between 64 KiB and `max`. A copy cut into pieces of a
    /// few seconds each would move in bursts, and its last piece would
    /// overrun the cap on a short copy.
    pub fn piece_bytes(bytes_per_s: u64, max: u32) -> u32 {
        let want = (bytes_per_s / 20).max(64 << 10);
        let pow2 = 1u64 << (63 - want.leading_zeros());
        pow2.min(u64::from(max)).max(1) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_start_at_the_cap() {
        let t0 = Instant::now();
        let mut s = Schedule::new(1_000_000);
        assert_eq!(s.reserve(t0, 500_000), t0, "the first piece goes at once");
        assert_eq!(s.reserve(t0, 500_000), t0 + Duration::from_millis(500));
        assert_eq!(s.reserve(t0, 250_000), t0 + Duration::from_secs(1));
        // 1.25 MB reserved: the next starts at 1.25 s whenever it is asked.
        assert_eq!(s.reserve(t0 + Duration::from_millis(10), 1), t0 + Duration::from_millis(1250));
        assert_eq!(s.ahead(t0 + Duration::from_millis(250)), Duration::from_micros(1_000_001));
        assert_eq!(s.ahead(t0 + Duration::from_secs(9)), Duration::ZERO);
    }

    #[test]
    fn time_lost_to_a_slow_path_is_not_a_burst_later() {
        let t0 = Instant::now();
        let mut s = Schedule::new(1_000_000);
        s.reserve(t0, 1_000_000);
        let late = t0 + Duration::from_secs(10);
        assert_eq!(s.reserve(late, 1_000_000), late);
        assert_eq!(s.reserve(late, 1), late + Duration::from_secs(1));
    }

    #[test]
    fn over_a_long_run_the_average_is_the_cap() {
        let t0 = Instant::now();
        let mut s = Schedule::new(12_500_000);
        let piece = RateLimit::piece_bytes(12_500_000, 4 << 20);
        assert_eq!(piece, 512 << 10);
        let mut last = t0;
        let total = 200u64 * u64::from(piece);
        for _ in 0..200 {
            last = s.reserve(t0, u64::from(piece));
        }
        // The last piece starts when all the others had their time.
        let secs = (last - t0).as_secs_f64() + f64::from(piece) / 12.5e6;
        assert!((total as f64 / secs - 12.5e6).abs() < 1.0, "{}", total as f64 / secs);
    }

    #[test]
    fn piece_sizes() {
        assert_eq!(RateLimit::piece_bytes(1, 4 << 20), 64 << 10);
        assert_eq!(RateLimit::piece_bytes(125_000_000, 4 << 20), 4 << 20);
        assert_eq!(RateLimit::piece_bytes(125_000_000, 1 << 20), 1 << 20);
        assert_eq!(RateLimit::piece_bytes(u64::MAX, 4 << 20), 4 << 20);
    }
}
