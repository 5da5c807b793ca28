//! Queueing model of wanblk's long-fat-network emulator, sans-I/O and deterministic.
//!
//! ```text
//!   arrivals (id, len, t)          decisions
//!  ---------------------> [Link] ------------------> Drop { id, reason }   (at once)
//!                           |                       Release { up_to_id }  (when due)
//!                           +-- poll_timeout(): when the next decision is due
//! ```
//!
//! A [`Link`] is one direction of the emulated path. Each packet that arrives
//! (identified by the kernel's NFQUEUE packet id, its IP length and its arrival
//! time) goes through, in order:
//!
//! 1. a blackout check (a [`BlackoutMode::Drop`] window loses everything);
//! 2. random loss with probability `loss` (a seeded PRNG: the same inputs
//!    always give the same drops);
//! 3. a drop-tail FIFO of `queue` packets (or bytes), served at `rate` bit/s:
//!    a packet starts service at `max(arrival, previous finish)` and takes
//!    `(len + overhead) * 8 / rate` seconds (the overhead defaults to the 14
//!    bytes of an Ethernet header);
//! 4. a fixed one-way `delay`.
//!
//! Releases are FIFO: a packet never leaves before one that arrived earlier
//! (so one batch verdict "accept every id up to N" releases a prefix of the
//! queue). Drops are decided on arrival and returned before any release, so a
//! driver can issue each drop verdict before the batch accept that would cover
//! it.
//!
//! The model has no clock: every time is an input, in nanoseconds on any
//! monotonic timeline. Parameter changes over time come from a [`Profile`]
//! (times relative to the link's `start`). A change applies to the packets
//! whose service *starts* after it (rate), that *arrive* after it (loss,
//! queue limit, drop blackouts) or that *leave the bottleneck* after it
//! (delay); a packet in service finishes at the rate it started with.
//!
//! No I/O, no clock, no `unsafe`: the driver (`wanblk-netem`) does the rest.
#![forbid(unsafe_code)]

use std::collections::VecDeque;

pub mod profile;
pub mod units;

pub use profile::{BlackoutMode, Change, Event, Profile, Scope};

/// A parse error for rates, durations, sizes and profiles. Its message says what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{msg}")]
pub struct ParseError {
    msg: String,
}

impl ParseError {
    pub(crate) fn new(msg: impl Into<String>) -> ParseError {
        ParseError { msg: msg.into() }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.msg
    }
}

/// One direction of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Direction {
    /// Client to server.
    Forward,
    /// Server to client.
    Back,
}

impl Direction {
    /// `"fwd"` or `"back"`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Forward => "fwd",
            Direction::Back => "back",
        }
    }
}

/// The drop-tail queue's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum QueueLimit {
    /// At most this many packets wait or are in service.
    Packets(u32),
    /// At most this many wire bytes (length + overhead) wait or are in service.
    Bytes(u64),
    /// No limit.
    Unlimited,
}

/// The parameters of one direction at one moment.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Params {
    /// Bottleneck rate in bit/s; 0 means unlimited (no serialisation, no queue).
    pub rate_bps: u64,
    /// One-way propagation delay, ns.
    pub delay_ns: u64,
    /// Probability that a packet is lost at random, 0..=1.
    pub loss: f64,
    /// Drop-tail limit.
    pub queue: QueueLimit,
    /// Bytes added to each packet's IP length to get its size on the wire.
    pub overhead_bytes: u32,
}

impl Default for Params {
    fn default() -> Params {
        Params { rate_bps: 0, delay_ns: 0, loss: 0.0, queue: QueueLimit::Unlimited, overhead_bytes: 14 }
    }
}

impl Params {
    fn apply(&mut self, c: Change) {
        match c {
            Change::Rate(r) => self.rate_bps = r,
            Change::Delay(d) => self.delay_ns = d,
            Change::Loss(p) => self.loss = p,
            Change::Queue(q) => self.queue = q,
            Change::Blackout { .. } => {}
        }
    }
}

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DropReason {
    /// The drop-tail queue was full.
    Queue,
    /// Random loss.
    Random,
    /// It arrived during a [`BlackoutMode::Drop`] blackout.
    Blackout,
}

/// What the driver must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Drop packet `id` now (it arrived at `at`).
    Drop {
        /// The packet id.
        id: u32,
        /// Why.
        reason: DropReason,
        /// Its arrival time.
        at: u64,
    },
    /// Release every queued packet up to and including `up_to_id` (a prefix
    /// of the FIFO: `count` packets).
    Release {
        /// Last id released.
        up_to_id: u32,
        /// How many packets this releases.
        count: u32,
        /// The scheduled release time of the last one.
        at: u64,
    },
}

/// Counters of one direction. All are totals since the link was created,
/// except the `max_*` high-water marks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    /// Packets that arrived.
    pub in_packets: u64,
    /// IP bytes that arrived.
    pub in_bytes: u64,
    /// Packets released.
    pub out_packets: u64,
    /// IP bytes released.
    pub out_bytes: u64,
    /// Packets dropped because the queue was full.
    pub queue_drops: u64,
    /// Packets dropped at random.
    pub random_drops: u64,
    /// Packets dropped by a blackout.
    pub blackout_drops: u64,
    /// Highest number of packets in the drop-tail queue (in service included).
    pub max_queue_packets: u64,
    /// Highest number of wire bytes in the drop-tail queue.
    pub max_queue_bytes: u64,
    /// Packets released later than the late threshold after their due time.
    pub late_releases: u64,
    /// Largest lateness seen, ns.
    pub max_late_ns: u64,
    /// Sum of all lateness, ns (divide by `out_packets` for the mean).
    pub sum_late_ns: u64,
}

/// A deterministic PRNG (xoshiro256**, seeded through splitmix64).
#[derive(Debug, Clone)]
struct Rng {
    s: [u64; 4],
}

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng { s: [next(), next(), next(), next()] }
    }

    fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        // 53 random bits as a uniform float in [0, 1).
        ((self.next_u64() >> 11) as f64) * (1.0 / (1u64 << 53) as f64) < p
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: u64,
    end: u64,
    mode: BlackoutMode,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    id: u32,
    len: u32,
    at: u64,
}

/// The default lateness above which a release counts as late: 250 us.
pub const DEFAULT_LATE_THRESHOLD_NS: u64 = 250_000;

/// One direction of the emulated path. See the [crate docs](crate).
#[derive(Debug, Clone)]
pub struct Link {
    /// Parameter sets in force from each time on (absolute ns), sorted; the first starts at 0.
    segments: Vec<(u64, Params)>,
    windows: Vec<Window>,
    rng: Rng,
    late_threshold_ns: u64,
    /// Finish times (ns) and wire sizes of packets in the drop-tail queue.
    backlog: VecDeque<(u64, u64)>,
    backlog_bytes: u64,
    /// Finish time of the last packet served, picoseconds (keeps sub-ns precision).
    last_finish_ps: u128,
    last_arrival: u64,
    last_release_at: u64,
    line: VecDeque<Pending>,
    drops: VecDeque<Decision>,
    counters: Counters,
}

impl Link {
    /// A link with fixed `params`, a PRNG `seed`, and `start`, the time that
    /// profile offsets count from.
    pub fn new(params: Params, seed: u64, start: u64) -> Link {
        Link {
            segments: vec![(0, params)],
            windows: Vec::new(),
            rng: Rng::new(seed),
            late_threshold_ns: DEFAULT_LATE_THRESHOLD_NS,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            last_finish_ps: 0,
            last_arrival: 0,
            last_release_at: 0,
            line: VecDeque::new(),
            drops: VecDeque::new(),
            counters: Counters::default(),
        }
        .with_schedule(start, &[])
    }

    /// Replaces the schedule: `params` from now on, then each `(offset, change)`
    /// at `start + offset`. Packets already queued keep their release times.
    pub fn with_schedule(mut self, start: u64, changes: &[(u64, Change)]) -> Link {
        self.set_schedule(start, self.segments[0].1, changes);
        self
    }

    /// Sets the lateness (ns) above which a release counts in
    /// [`Counters::late_releases`].
    pub fn with_late_threshold(mut self, ns: u64) -> Link {
        self.late_threshold_ns = ns;
        self
    }

    /// Replaces the parameters and the schedule at time `now`: `params` apply
    /// from `now`, then each `(offset, change)` at `start + offset`. Changes
    /// scheduled earlier and not yet reached are forgotten; packets already
    /// queued keep their release times.
    pub fn set_schedule(&mut self, start: u64, params: Params, changes: &[(u64, Change)]) {
        let now = start;
        self.segments.retain(|(t, _)| *t < now);
        self.windows.retain(|w| w.start < now);
        self.segments.push((now, params));
        if self.segments[0].0 != 0 {
            self.segments.insert(0, (0, params));
        }
        let mut changes = changes.to_vec();
        changes.sort_by_key(|c| c.0);
        let mut cur = params;
        for (off, c) in changes {
            let t = start.saturating_add(off);
            match c {
                Change::Blackout { duration, mode } => {
                    self.windows.push(Window { start: t, end: t.saturating_add(duration), mode });
                }
                c => {
                    cur.apply(c);
                    if self.segments.last().is_some_and(|s| s.0 == t) {
                        self.segments.last_mut().expect("non-empty").1 = cur;
                    } else {
                        self.segments.push((t, cur));
                    }
                }
            }
        }
        self.windows.sort_by_key(|w| w.start);
    }

    /// The parameters in force at `t`.
    pub fn params_at(&self, t: u64) -> Params {
        let i = self.segments.partition_point(|(s, _)| *s <= t);
        self.segments[i.saturating_sub(1)].1
    }

    /// The counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Packets accepted and not yet released (held by the kernel).
    pub fn pending(&self) -> usize {
        self.line.len()
    }

    fn in_window(&self, t: u64, mode: BlackoutMode) -> Option<Window> {
        self.windows.iter().copied().find(|w| w.mode == mode && w.start <= t && t < w.end)
    }

    /// A packet `id` of `len` IP bytes arrived at `t`. Its fate is decided now;
    /// fetch it with [`poll_decision`](Self::poll_decision).
    ///
    /// Arrival times are expected to be non-decreasing; an earlier one is
    /// treated as equal to the latest seen (FIFO order is kept).
    pub fn handle_arrival(&mut self, id: u32, len: u32, t: u64) {
        let t = t.max(self.last_arrival);
        self.last_arrival = t;
        self.counters.in_packets += 1;
        self.counters.in_bytes += u64::from(len);
        let p = self.params_at(t);

        if self.in_window(t, BlackoutMode::Drop).is_some() {
            self.drop(id, DropReason::Blackout, t);
            return;
        }
        if self.rng.chance(p.loss) {
            self.drop(id, DropReason::Random, t);
            return;
        }
        while self.backlog.front().is_some_and(|(f, _)| *f <= t) {
            let (_, b) = self.backlog.pop_front().expect("non-empty");
            self.backlog_bytes -= b;
        }
        let wire = u64::from(len) + u64::from(p.overhead_bytes);
        let full = match p.queue {
            QueueLimit::Packets(n) => self.backlog.len() as u64 >= u64::from(n),
            QueueLimit::Bytes(n) => self.backlog_bytes + wire > n,
            QueueLimit::Unlimited => false,
        };
        if full && p.rate_bps != 0 {
            self.drop(id, DropReason::Queue, t);
            return;
        }

        // Service start: after the arrival and the previous packet, and not
        // inside a hold blackout.
        let mut start_ps = (u128::from(t) * 1000).max(self.last_finish_ps);
        loop {
            let s_ns = u64::try_from(start_ps.div_ceil(1000)).unwrap_or(u64::MAX);
            match self.in_window(s_ns, BlackoutMode::Hold) {
                Some(w) => start_ps = start_ps.max(u128::from(w.end) * 1000),
                None => break,
            }
        }
        let start_ns = u64::try_from(start_ps / 1000).unwrap_or(u64::MAX);
        let rate = self.params_at(start_ns).rate_bps;
        let finish_ps = if rate == 0 {
            start_ps
        } else {
            start_ps + u128::from(wire) * 8 * 1_000_000_000_000 / u128::from(rate)
        };
        self.last_finish_ps = finish_ps;
        let finish = u64::try_from(finish_ps.div_ceil(1000)).unwrap_or(u64::MAX);
        if rate != 0 {
            self.backlog.push_back((finish, wire));
            self.backlog_bytes += wire;
            self.counters.max_queue_packets = self.counters.max_queue_packets.max(self.backlog.len() as u64);
            self.counters.max_queue_bytes = self.counters.max_queue_bytes.max(self.backlog_bytes);
        }
        let at = finish.saturating_add(self.params_at(finish).delay_ns).max(self.last_release_at);
        self.last_release_at = at;
        self.line.push_back(Pending { id, len, at });
    }

    fn drop(&mut self, id: u32, reason: DropReason, at: u64) {
        match reason {
            DropReason::Queue => self.counters.queue_drops += 1,
            DropReason::Random => self.counters.random_drops += 1,
            DropReason::Blackout => self.counters.blackout_drops += 1,
        }
        self.drops.push_back(Decision::Drop { id, reason, at });
    }

    /// When the next decision is due: a pending drop's arrival time, else the
    /// release time of the oldest queued packet; `None` when nothing is pending.
    pub fn poll_timeout(&self) -> Option<u64> {
        match self.drops.front() {
            Some(Decision::Drop { at, .. }) => Some(*at),
            _ => self.line.front().map(|p| p.at),
        }
    }

    /// The next decision due at `now`, if any: first every pending drop (in
    /// arrival order), then one release covering every packet due by `now`.
    ///
    /// `now` is taken as the actual release time: packets released more than
    /// the late threshold after their due time count as late.
    pub fn poll_decision(&mut self, now: u64) -> Option<Decision> {
        if let Some(d) = self.drops.pop_front() {
            return Some(d);
        }
        let mut last: Option<Pending> = None;
        let mut count = 0u32;
        while let Some(p) = self.line.front().copied() {
            if p.at > now {
                break;
            }
            self.line.pop_front();
            let late = now - p.at;
            if late > self.late_threshold_ns {
                self.counters.late_releases += 1;
            }
            self.counters.max_late_ns = self.counters.max_late_ns.max(late);
            self.counters.sum_late_ns += late;
            self.counters.out_packets += 1;
            self.counters.out_bytes += u64::from(p.len);
            count += 1;
            last = Some(p);
        }
        last.map(|p| Decision::Release { up_to_id: p.id, count, at: p.at })
    }
}

#[cfg(test)]
mod tests;
