//! Send room: a session takes more work only while what it already took
//! is close to going on the wire.
//!
//! Writes are carried by the session that takes them. A session whose
//! socket already holds megabytes it cannot send yet (its congestion window
//! is small, or losses cut it) would otherwise take more from the queue,
//! and at the end of a burst (a backup's end, a write-back before a flush,
//! a session the tuner deactivates) the others wait on its backlog while
//! they idle: on a 100 ms path 8 sessions of one copy carried windows
//! between 1.4 and 8 MB, and each held up to three 4 MiB requests. With
//! send room the data waits in the pool's queue, where the first session
//! able to send takes it.

use std::time::Duration;

use crate::endpoint::SendBacklog;

/// A session may always hold this many unsent bytes (besides half its
/// window): enough to keep a window of slow start fed between two looks.
pub(super) const MIN_UNSENT: u64 = 512 << 10;

/// Below this round trip (a LAN, loopback) no session is held back: a
/// window drains faster than the pool could look again.
const MIN_RTT_US: u32 = 1_000;

/// Whether a session with `b` has room for another request: its unsent
/// bytes within half its congestion window (at least [`MIN_UNSENT`]), or a
/// path too short to matter.
pub(super) fn has_room(b: &SendBacklog) -> bool {
    b.rtt_us < MIN_RTT_US || b.unsent_bytes <= (b.cwnd_bytes / 2).max(MIN_UNSENT)
}

/// How long a slot without room waits before it looks again: a sixteenth
/// of the round trip, between 2 and 20 ms (the window drains by about a
/// sixteenth meanwhile, well within the half it keeps).
pub(super) fn poll(b: &SendBacklog) -> Duration {
    Duration::from_micros(u64::from(b.rtt_us / 16)).clamp(Duration::from_millis(2), Duration::from_millis(20))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backlog(unsent_bytes: u64, cwnd_bytes: u64, rtt_us: u32) -> SendBacklog {
        SendBacklog { unsent_bytes, cwnd_bytes, rtt_us }
    }

    #[test]
    fn a_session_far_ahead_of_its_window_waits() {
        // 8 MiB unsent on a 1.4 MB window at 100 ms: no room.
        assert!(!has_room(&backlog(8 << 20, 1_400_000, 100_000)));
        // Half the window unsent: room.
        assert!(has_room(&backlog(700_000, 1_400_000, 100_000)));
        // Slow start: a 14 KB window may still hold the floor.
        assert!(has_room(&backlog(MIN_UNSENT, 14_480, 100_000)));
        assert!(!has_room(&backlog(MIN_UNSENT + 1, 14_480, 100_000)));
        // A LAN never waits.
        assert!(has_room(&backlog(64 << 20, 14_480, 200)));
    }

    #[test]
    fn looks_again_within_a_fraction_of_the_round_trip() {
        assert_eq!(poll(&backlog(0, 0, 100_000)), Duration::from_micros(6_250));
        assert_eq!(poll(&backlog(0, 0, 0)), Duration::from_millis(2));
        assert_eq!(poll(&backlog(0, 0, u32::MAX)), Duration::from_millis(20));
    }
}
