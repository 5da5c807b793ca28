//! One measured interval, as the controller records it for reports.

use serde::{Deserialize, Serialize};

/// One measured interval. Read back (from a copy's report), every field is
/// required (`null` for none).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IntervalSample {
    /// End of the interval, seconds since the controller started.
    pub t_s: f64,
    /// Active sessions during the interval.
    pub n: usize,
    /// Goodput over the interval in Mbit/s (10^6 bits per second): TCP
    /// byte counters when every active session has them, else completed
    /// requests. The tuner saw this figure unless it took
    /// [`settled_mbps`](Self::settled_mbps) ([`tuner_mbps`](Self::tuner_mbps)).
    pub goodput_mbps: f64,
    /// Goodput from completed requests only, Mbit/s.
    pub completed_mbps: f64,
    /// The goodput came from TCP byte counters (else from completions).
    pub from_tcp: bool,
    /// Jain's fairness index of the active sessions' shares of the bytes
    /// moved (1 = equal; low values mean some connections starve while
    /// others run). Needs TCP counters.
    #[serde(deserialize_with = "Option::deserialize")]
    pub fairness: Option<f64>,
    /// TCP segments our sockets retransmitted during the interval (our
    /// side sends in a backup; in a restore the server's retransmissions
    /// are invisible to us).
    pub retransmits: u64,
    /// TCP segments that reached our sockets out of order during the
    /// interval: in a restore, the server's losses (or reordering).
    #[serde(default)]
    pub out_of_order: u64,
    /// Length of the interval in seconds.
    pub duration_s: f64,
    /// Largest smoothed RTT of the active sessions at the start, ms (0 if unknown).
    pub rtt_ms: f64,
    /// The tuner ignored this sample (warm-up after a change of N, the
    /// partial last interval, an interval that lacked sessions
    /// ([`partial`](Self::partial)) or one the application's demand set).
    pub discarded: bool,
    /// Fewer than [`n`](Self::n) active sessions carried data through the
    /// whole interval (one still connecting, or opened during it): the
    /// goodput measured fewer sessions than N, and the tuner was not given
    /// the sample (at most [`PARTIAL_RUN_MAX`](crate::PARTIAL_RUN_MAX)
    /// intervals in a row).
    #[serde(default)]
    pub partial: bool,
    /// Seconds spent, before this interval, waiting for sessions the tuner
    /// deactivated to finish their requests (0 when N did not decrease).
    pub drain_wait_s: f64,
    /// Seconds of this interval spent waiting for new sessions to connect
    /// (handshake and login) before slow start could begin (0 when none
    /// were missing).
    pub connect_wait_s: f64,
    /// Share of the interval the active sessions' request slots were busy
    /// (1 - slot time spent waiting for work / (sessions x depth x
    /// interval), the busiest pool); `None` when the pools do not measure
    /// it. Near 1 the path (capacity) limited goodput; well below 1 the
    /// application's demand did.
    #[serde(deserialize_with = "Option::deserialize")]
    pub busy: Option<f64>,
    /// The sessions lacked work for much of the interval
    /// ([`busy`](Self::busy) below [`ControllerConfig::demand_limited`](crate::ControllerConfig)):
    /// goodput measured the application's demand, not the path, and the
    /// tuner was not given the sample.
    pub demand_limited: bool,
    /// The job was about to end (less left to move than
    /// [`END_RTTS`](crate::END_RTTS) round trips carry at the lowest
    /// goodput of the last ones): from this interval on N is held, and the
    /// tuner was not given it.
    #[serde(default)]
    pub ending: bool,
    /// The active sessions' RTT stood above its minimum at the end of the
    /// interval (a full path), as given to the tuner; `None` when unknown.
    #[serde(deserialize_with = "Option::deserialize")]
    pub standing_queue: Option<bool>,
    /// A warm-up after an increase (or at the start) that settled on a
    /// path with room, with the sessions' windows no longer growing fast
    /// and without a loss (a segment retransmitted by us or out of order at
    /// us): the level it settled at (Mbit/s, over its last sub-windows),
    /// which the tuner took as the point's measurement instead of
    /// measuring another interval. `None` otherwise (the tuner saw
    /// [`goodput_mbps`](Self::goodput_mbps), or nothing).
    #[serde(default)]
    pub settled_mbps: Option<f64>,
    /// What one session of a loss-based congestion control carries at the
    /// loss rate the sessions met in the intervals that ended with room
    /// (Mbit/s; [`Signals::loss_cap`](crate::Signals::loss_cap)), once
    /// enough losses were seen; `None` on a clean path, with BBR, or
    /// without the model's signals.
    #[serde(default)]
    pub loss_cap_mbps: Option<f64>,
    /// Bytes per request on the wire at the end of the interval.
    pub request_bytes: u32,
    /// Requests in flight per session allowed at the end of the interval.
    pub depth: usize,
}

impl IntervalSample {
    /// The goodput the tuner took for this interval, Mbit/s: the settled
    /// level of a warm-up ([`settled_mbps`](Self::settled_mbps)) or the
    /// interval's goodput.
    pub fn tuner_mbps(&self) -> f64 {
        self.settled_mbps.unwrap_or(self.goodput_mbps)
    }

    /// A settled interval: given to the tuner, or held back from it only
    /// because the job was ending (N held, as settled as any).
    pub fn settled(&self) -> bool {
        !self.discarded || self.ending
    }
}
