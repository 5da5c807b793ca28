//! What the driver reads from its pools, in plain values, and what the
//! controller makes of the TCP byte counters.

use std::collections::HashMap;

/// Everything the controller needs to know about the pools at one moment.
/// The driver fills it from its pools every time it calls the controller.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    /// Payload bytes of completed requests since the start (monotonic): the
    /// copy's progress, or the pool's own count.
    pub completed_bytes: u64,
    /// Bytes the job still has to move, when it knows (a copy: its size
    /// less what is done); `None` for an open-ended one (a front end).
    pub remaining_bytes: Option<u64>,
    /// The path's capacity as goodput, bytes per second, if the driver
    /// measured it ([`capacity`](crate::capacity): an echo train); the
    /// search sizes its jumps from points with room by it.
    pub path_capacity: Option<f64>,
    /// One entry per pool, always in the same order.
    pub pools: Vec<PoolCounters>,
}

/// One pool: its limits and its open sessions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolCounters {
    /// What the pool accepts.
    pub limits: PoolLimits,
    /// Its open sessions (failed ones left out).
    pub sessions: Vec<SessionCounters>,
    /// Microseconds the request slots of active sessions spent with
    /// nothing to do, summed over the slots, since the pool opened
    /// (monotonic; `None` if the pool does not measure it). Idle slots
    /// mean the application, not the path, sets the pace.
    pub idle_slot_us: Option<u64>,
    /// Sessions being opened now (handshake, login).
    pub connecting: usize,
}

/// The values a pool accepts in a [`Decision`](crate::Decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolLimits {
    /// Most sessions the pool may open (after the store's own limits).
    pub max_sessions: usize,
    /// Largest request on the wire, bytes (configured, fitted to the store).
    pub max_request_bytes: u32,
    /// Request sizes must be a multiple of this (the store's block size).
    pub request_align: u32,
    /// Most requests in flight per session.
    pub max_depth: usize,
}

impl Default for PoolLimits {
    /// No limits (what a driver without pools has).
    fn default() -> Self {
        PoolLimits {
            max_sessions: crate::MAX_SESSIONS,
            max_request_bytes: u32::MAX,
            request_align: 1,
            max_depth: 1 << 16,
        }
    }
}

impl PoolLimits {
    /// What every pool of `pools` accepts (the defaults when there is none).
    pub fn common(pools: &[PoolCounters]) -> PoolLimits {
        let Some(first) = pools.first() else { return PoolLimits::default() };
        pools.iter().skip(1).fold(first.limits, |a, p| {
            let b = p.limits;
            PoolLimits {
                max_sessions: a.max_sessions.min(b.max_sessions),
                max_request_bytes: a.max_request_bytes.min(b.max_request_bytes),
                request_align: lcm(a.request_align, b.request_align),
                max_depth: a.max_depth.min(b.max_depth),
            }
        })
    }
}

/// Least common multiple of two block sizes (in practice powers of two);
/// the larger one if it would not fit.
fn lcm(a: u32, b: u32) -> u32 {
    let (a, b) = (a.max(1), b.max(1));
    let gcd = {
        let (mut x, mut y) = (a, b);
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    u32::try_from(u64::from(a / gcd) * u64::from(b)).unwrap_or(a.max(b))
}

/// One session of a pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionCounters {
    /// The session's index in its pool (stable while it is open).
    pub index: usize,
    /// It takes new requests (one of the active N).
    pub active: bool,
    /// Requests it is carrying now; a session that is not active and still
    /// has some is draining.
    pub in_flight: usize,
    /// Its TCP counters; `None` when it has no TCP connection (Unix socket,
    /// local store).
    pub tcp: Option<TcpCounters>,
}

/// Cumulative counters of one session's TCP connection(s), from `TCP_INFO`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// `tcpi_bytes_received + tcpi_bytes_acked`: unique payload bytes moved
    /// either way (retransmissions excluded).
    pub bytes: u64,
    /// `tcpi_total_retrans`: segments our side retransmitted.
    pub total_retrans: u32,
    /// `tcpi_rcv_ooopack`: segments that reached our side out of order
    /// (the losses of what the peer sends, where we mostly receive).
    pub rcv_out_of_order: u32,
    /// Smoothed RTT, microseconds.
    pub rtt_us: u32,
    /// Congestion window in bytes (`tcpi_snd_cwnd x tcpi_snd_mss`).
    pub cwnd_bytes: u64,
    /// Receive window target, bytes (`tcpi_rcv_space`).
    pub rcv_space: u32,
    /// Smallest RTT seen on the connection, microseconds (`tcpi_min_rtt`;
    /// 0 if unknown): the path's RTT without queueing.
    pub min_rtt_us: u32,
    /// Segment size of the data, bytes (0 if unknown: then
    /// [`DEFAULT_MSS`]).
    pub mss: u32,
    /// The connection's congestion control keeps its rate through random
    /// loss (BBR): its losses say nothing about what a session can carry.
    pub rate_based: bool,
}

/// The segment size assumed where a session does not report one (Ethernet
/// less IP and TCP headers with timestamps).
pub const DEFAULT_MSS: u32 = 1448;

impl Counters {
    /// Sessions that are not active and still carry requests.
    pub fn draining(&self) -> usize {
        self.sessions().filter(|s| !s.active && s.in_flight > 0).count()
    }

    /// Every active session has TCP counters (so goodput can come from them).
    pub fn tcp_complete(&self) -> bool {
        !self.pools.is_empty() && self.sessions().all(|s| s.tcp.is_some() || !s.active)
    }

    /// Active sessions in the pool that has the fewest: how many of the
    /// active N are open everywhere (fewer while new sessions connect).
    pub fn active_open(&self) -> usize {
        self.pools.iter().map(|p| p.sessions.iter().filter(|s| s.active).count()).min().unwrap_or(0)
    }

    /// Sessions being opened in all pools.
    pub fn connecting(&self) -> usize {
        self.pools.iter().map(|p| p.connecting).sum()
    }

    /// The smallest RTT any session has seen, seconds (0 if unknown): the
    /// path's round trip without queueing.
    pub fn min_rtt_s(&self) -> f64 {
        self.sessions()
            .filter_map(|s| s.tcp)
            .map(|t| t.min_rtt_us)
            .filter(|us| *us > 0)
            .min()
            .map_or(0.0, |us| f64::from(us) / 1e6)
    }

    /// Did the active sessions' RTT stand above its minimum (a bottleneck
    /// queue: the path was full)? The median over the active sessions of
    /// `rtt - min_rtt` against the larger of [`QUEUE_MIN`] and
    /// [`QUEUE_SHARE`] of the median `min_rtt`. `None` without TCP
    /// counters, or on a path whose RTT is below [`SMALL_PATH_RTT`]
    /// (queueing there is the hosts', not the path's).
    pub fn standing_queue(&self) -> Option<bool> {
        self.standing_queue_over(None)
    }

    /// [`standing_queue`](Self::standing_queue), with each session's base
    /// RTT at least `path_base_s` seconds (the path's base RTT re-taken
    /// after a path change, where `tcpi_min_rtt` still names the old path).
    pub fn standing_queue_over(&self, path_base_s: Option<f64>) -> Option<bool> {
        let (base, queue) = self.queue_over(path_base_s)?;
        Some(queue > (QUEUE_SHARE * base).max(QUEUE_MIN.as_secs_f64()))
    }

    /// The path's base RTT over the active sessions' RTT (medians; see
    /// [`Signals::base_share`](crate::Signals::base_share)), with the base
    /// taken as in [`standing_queue_over`](Self::standing_queue_over).
    pub fn base_share_over(&self, path_base_s: Option<f64>) -> Option<f64> {
        let (base, queue) = self.queue_over(path_base_s)?;
        Some(base / (base + queue))
    }

    /// Medians over the active sessions of the base RTT and of the queue
    /// above it, seconds; `None` without TCP counters or on a small path.
    fn queue_over(&self, path_base_s: Option<f64>) -> Option<(f64, f64)> {
        let floor = path_base_s.unwrap_or(0.0);
        let mut base = Vec::new();
        let mut queue = Vec::new();
        for t in self.sessions().filter(|s| s.active).filter_map(|s| s.tcp) {
            if t.min_rtt_us > 0 && t.rtt_us > 0 {
                let min_rtt = (f64::from(t.min_rtt_us) / 1e6).max(floor);
                base.push(min_rtt);
                queue.push((f64::from(t.rtt_us) / 1e6 - min_rtt).max(0.0));
            }
        }
        let (base, queue) = (median(&mut base)?, median(&mut queue)?);
        (base >= SMALL_PATH_RTT.as_secs_f64()).then_some((base, queue))
    }

    /// Payload bytes the TCP counters of every open session add up to, in
    /// the pool that moved the fewest (`None` without TCP counters on
    /// every active session): the warm-up's progress.
    pub(crate) fn transport_bytes(&self) -> Option<u64> {
        if !self.tcp_complete() {
            return None;
        }
        self.pools.iter().map(|p| p.sessions.iter().filter_map(|s| s.tcp).map(|t| t.bytes).sum()).min()
    }

    /// Largest smoothed RTT of the active sessions, seconds (0 if unknown).
    pub fn max_rtt_s(&self) -> f64 {
        self.sessions()
            .filter(|s| s.active)
            .filter_map(|s| s.tcp)
            .map(|t| f64::from(t.rtt_us) / 1e6)
            .fold(0.0, f64::max)
    }

    /// The largest per-connection window of any session, bytes: the
    /// congestion window where we send, the receive window target where we
    /// receive. New sessions need about log2(window / initial window) round
    /// trips of slow start to reach it.
    pub fn max_window_bytes(&self) -> Option<u64> {
        self.sessions()
            .filter_map(|s| s.tcp)
            .map(|t| t.cwnd_bytes.max(u64::from(t.rcv_space)))
            .max()
            .filter(|w| *w > 0)
    }

    /// The active sessions' windows together, bytes (each counted as
    /// [`max_window_bytes`](Self::max_window_bytes) counts it); `None`
    /// unless every active session has TCP counters.
    pub fn window_sum(&self) -> Option<u64> {
        if !self.tcp_complete() {
            return None;
        }
        Some(
            self.sessions()
                .filter(|s| s.active)
                .filter_map(|s| s.tcp)
                .map(|t| t.cwnd_bytes.max(u64::from(t.rcv_space)))
                .sum(),
        )
    }

    /// Segments lost on the way so far, as the open sessions saw them:
    /// those they retransmitted plus those that reached them out of order
    /// (`None` unless every active session has TCP counters). Only its
    /// growth means something: sessions come and go.
    pub fn losses_total(&self) -> Option<u64> {
        if !self.tcp_complete() {
            return None;
        }
        Some(
            self.sessions()
                .filter_map(|s| s.tcp)
                .map(|t| u64::from(t.total_retrans) + u64::from(t.rcv_out_of_order))
                .sum(),
        )
    }

    /// The active sessions' segment size, bytes (the largest reported;
    /// [`DEFAULT_MSS`] when none is).
    pub fn mss(&self) -> u32 {
        self.sessions()
            .filter(|s| s.active)
            .filter_map(|s| s.tcp)
            .map(|t| t.mss)
            .max()
            .filter(|m| *m > 0)
            .unwrap_or(DEFAULT_MSS)
    }

    /// Every open session of every pool.
    pub(crate) fn sessions(&self) -> impl Iterator<Item = &SessionCounters> {
        self.pools.iter().flat_map(|p| &p.sessions)
    }
}

/// A path whose RTT is below this is small (a LAN, loopback, a Unix
/// socket): one or two sessions fill it, and a standing queue cannot be
/// told from host scheduling.
pub const SMALL_PATH_RTT: std::time::Duration = std::time::Duration::from_millis(1);

/// Smallest queueing delay (RTT above its minimum) that counts as a
/// standing queue, whatever the path.
pub const QUEUE_MIN: std::time::Duration = std::time::Duration::from_millis(3);

/// Share of the path's minimum RTT that queueing delay must exceed to
/// count as a standing queue (5 %: on a 100 ms path, 5 ms of queue; a
/// 500-packet buffer at 1 Gbit/s holds 6 ms).
pub const QUEUE_SHARE: f64 = 0.05;

/// The median of `xs` (sorted in place), `None` if empty.
fn median(xs: &mut [f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let k = xs.len();
    Some(if k % 2 == 1 { xs[k / 2] } else { (xs[k / 2 - 1] + xs[k / 2]) / 2.0 })
}

/// Per-session cumulative TCP counters, kept to difference between samples.
#[derive(Debug, Default, Clone)]
pub(crate) struct TransportMeter {
    last: HashMap<(usize, usize), (u64, u32, u32)>,
}

/// What the TCP counters say about one interval.
#[derive(Debug, Default)]
pub(crate) struct TransportDelta {
    /// Bytes moved per pool.
    pub(crate) per_pool: Vec<u64>,
    /// Jain's fairness index of the bytes moved by the active sessions.
    pub(crate) fairness: Option<f64>,
    /// Segments our sockets retransmitted (meaningful where we send).
    pub(crate) retransmits: u64,
    /// Segments that reached our sockets out of order (where we receive:
    /// the peer's losses).
    pub(crate) out_of_order: u64,
    /// Active sessions not seen at the previous call (opened since): their
    /// bytes of this interval are not in `per_pool`.
    pub(crate) fresh_active: usize,
    /// Loss events of the interval as the active loss-based sessions saw
    /// them, and the segments they moved (see [`loss_events`]).
    pub(crate) loss: LossCount,
}

/// Loss events and the segments they happened among, over some time.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct LossCount {
    pub(crate) events: f64,
    pub(crate) segments: f64,
}

/// One session's loss events over an interval of `dt_s` in which it moved
/// `moved` bytes and saw `retransmits` and `out_of_order` more segments,
/// at `rtt_s` with segments of `mss` bytes. A segment we retransmitted is
/// one event (at the loss rates that cap a session, a window seldom loses
/// two). Where we receive, a loss shows as the segments that reach us
/// behind its hole until its retransmission arrives, about a round trip of
/// the session's rate: that many out-of-order segments are one event. A
/// session that moved less than [`LOSS_MIN_SEGMENTS`] tells nothing.
pub(crate) fn loss_events(
    moved: u64,
    retransmits: u64,
    out_of_order: u64,
    rtt_s: f64,
    mss: u32,
    dt_s: f64,
) -> LossCount {
    let mss = f64::from(if mss == 0 { DEFAULT_MSS } else { mss });
    let segments = moved as f64 / mss;
    if !(segments >= LOSS_MIN_SEGMENTS && rtt_s > 0.0 && dt_s > 0.0 && rtt_s.is_finite() && dt_s.is_finite())
    {
        return LossCount::default();
    }
    let window = (segments / dt_s * rtt_s).max(1.0);
    LossCount { events: retransmits as f64 + out_of_order as f64 / window, segments }
}

/// See [`loss_events`].
const LOSS_MIN_SEGMENTS: f64 = 64.0;

/// Jain's fairness index of `xs`: (sum x)^2 / (n * sum x^2); 1 = equal
/// shares, 1/n = one of them carried everything.
pub(crate) fn jain(xs: &[f64]) -> Option<f64> {
    let sum: f64 = xs.iter().sum();
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    (xs.len() > 1 && sq > 0.0).then(|| sum * sum / (xs.len() as f64 * sq))
}

impl TransportMeter {
    /// Bytes moved since the last call, per pool, counting only sessions
    /// seen both times (so sessions opening or failing do not jump the
    /// sum). `None` when an active session has no TCP counters.
    pub(crate) fn delta(&mut self, c: &Counters, dt_s: f64) -> Option<TransportDelta> {
        let mut now = HashMap::new();
        let mut d = TransportDelta { per_pool: vec![0; c.pools.len()], ..TransportDelta::default() };
        let mut shares = Vec::new();
        for (p, pool) in c.pools.iter().enumerate() {
            for s in &pool.sessions {
                let Some(tcp) = s.tcp else { continue };
                if let Some((bytes, retrans, ooo)) = self.last.get(&(p, s.index)) {
                    let moved = tcp.bytes.saturating_sub(*bytes);
                    let retrans = u64::from(tcp.total_retrans.saturating_sub(*retrans));
                    let ooo = u64::from(tcp.rcv_out_of_order.saturating_sub(*ooo));
                    d.per_pool[p] += moved;
                    d.retransmits += retrans;
                    d.out_of_order += ooo;
                    if s.active {
                        shares.push(moved as f64);
                        if !tcp.rate_based {
                            let rtt_s = f64::from(tcp.rtt_us) / 1e6;
                            let l = loss_events(moved, retrans, ooo, rtt_s, tcp.mss, dt_s);
                            d.loss.events += l.events;
                            d.loss.segments += l.segments;
                        }
                    }
                } else if s.active {
                    d.fresh_active += 1;
                }
                now.insert((p, s.index), (tcp.bytes, tcp.total_retrans, tcp.rcv_out_of_order));
            }
        }
        self.last = now;
        d.fairness = jain(&shares);
        c.tcp_complete().then_some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loss_is_a_round_trip_of_out_of_order_segments_where_we_receive() {
        // A session receiving 100 Mbit/s at 100 ms for 0.5 s: 4317 segments
        // of 1448 bytes, 863 of them a round trip. 1726 segments out of
        // order: two holes.
        let l = loss_events(6_250_000, 0, 1726, 0.1, 1448, 0.5);
        assert!((l.segments - 4316.3).abs() < 1.0, "{l:?}");
        assert!((l.events - 2.0).abs() < 0.01, "{l:?}");
        // Where we send, each segment retransmitted is one.
        let l = loss_events(6_250_000, 3, 0, 0.1, 0, 0.5);
        assert!((l.events - 3.0).abs() < 1e-9, "{l:?}");
        // Too little moved, or no time: nothing to tell, never a panic.
        assert_eq!(loss_events(1000, 5, 500, 0.1, 1448, 0.5), LossCount::default());
        assert_eq!(loss_events(6_250_000, 5, 500, 0.0, 1448, 0.5), LossCount::default());
        assert_eq!(loss_events(6_250_000, 5, 500, 0.1, 1448, f64::NAN), LossCount::default());
        assert!(loss_events(u64::MAX, u64::MAX, u64::MAX, 1e-9, 1, 1e-9).events.is_finite());
    }

    #[test]
    fn jain_index() {
        assert_eq!(jain(&[5.0, 5.0, 5.0]), Some(1.0));
        let one = jain(&[9.0, 0.0, 0.0]).unwrap();
        assert!((one - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(jain(&[3.0]), None);
        assert_eq!(jain(&[0.0, 0.0]), None);
    }

    #[test]
    fn common_limits() {
        let pool = |max_sessions, max_request_bytes, request_align, max_depth| PoolCounters {
            limits: PoolLimits { max_sessions, max_request_bytes, request_align, max_depth },
            sessions: Vec::new(),
            idle_slot_us: None,
            connecting: 0,
        };
        let l = PoolLimits::common(&[pool(64, 4 << 20, 512, 4), pool(8, 1 << 20, 4096, 16)]);
        assert_eq!(
            l,
            PoolLimits { max_sessions: 8, max_request_bytes: 1 << 20, request_align: 4096, max_depth: 4 }
        );
        assert_eq!(PoolLimits::common(&[]), PoolLimits::default());
        assert_eq!(lcm(6, 4), 12);
        assert_eq!(lcm(0, 0), 1);
        assert_eq!(lcm(u32::MAX, u32::MAX - 1), u32::MAX);
    }

    #[test]
    fn meter_counts_sessions_seen_twice_and_needs_tcp_on_every_active_session() {
        let s = |index, active, bytes| SessionCounters {
            index,
            active,
            in_flight: 0,
            tcp: Some(TcpCounters { bytes, ..TcpCounters::default() }),
        };
        let c = |sessions| Counters {
            completed_bytes: 0,
            remaining_bytes: None,
            path_capacity: None,
            pools: vec![PoolCounters {
                limits: PoolLimits::default(),
                sessions,
                idle_slot_us: None,
                connecting: 0,
            }],
        };
        let mut m = TransportMeter::default();
        assert_eq!(m.delta(&c(vec![s(0, true, 100)]), 1.0).unwrap().per_pool, vec![0]);
        // Session 1 is new: not counted until seen twice, and said so.
        let d = m.delta(&c(vec![s(0, true, 300), s(1, true, 50)]), 1.0).unwrap();
        assert_eq!((d.per_pool.clone(), d.fresh_active), (vec![200], 1));
        let d = m.delta(&c(vec![s(0, true, 400), s(1, true, 150)]), 1.0).unwrap();
        assert_eq!((d.per_pool[0], d.fairness, d.fresh_active), (200, Some(1.0), 0));
        // A new idle session (a warm spare) is not an active one missing.
        let d = m.delta(&c(vec![s(0, true, 500), s(1, true, 250), s(3, false, 9)]), 1.0).unwrap();
        assert_eq!(d.fresh_active, 0);
        let unix = SessionCounters { index: 2, active: true, in_flight: 1, tcp: None };
        assert!(m.delta(&c(vec![s(0, true, 500), unix]), 1.0).is_none());
        let idle = SessionCounters { active: false, ..unix };
        assert!(m.delta(&c(vec![s(0, true, 600), idle]), 1.0).is_some());
    }
}

#[cfg(test)]
mod queue_tests {
    use super::*;

    fn with_rtts(rtts: &[(u32, u32)]) -> Counters {
        let sessions = rtts
            .iter()
            .enumerate()
            .map(|(index, (rtt_us, min_rtt_us))| SessionCounters {
                index,
                active: true,
                in_flight: 1,
                tcp: Some(TcpCounters { rtt_us: *rtt_us, min_rtt_us: *min_rtt_us, ..TcpCounters::default() }),
            })
            .collect();
        Counters {
            completed_bytes: 0,
            remaining_bytes: None,
            path_capacity: None,
            pools: vec![PoolCounters {
                limits: PoolLimits::default(),
                sessions,
                idle_slot_us: None,
                connecting: 0,
            }],
        }
    }

    #[test]
    fn a_standing_queue_is_rtt_above_its_minimum() {
        // 100 ms path: 4 ms of queue is nothing, 30 ms is a full path.
        assert_eq!(with_rtts(&[(104_000, 100_000), (101_000, 100_000)]).standing_queue(), Some(false));
        assert_eq!(with_rtts(&[(106_000, 100_000)]).standing_queue(), Some(true));
        assert_eq!(with_rtts(&[(130_000, 100_000), (131_000, 100_100)]).standing_queue(), Some(true));
        // Loopback: unknown, whatever the ratio.
        assert_eq!(with_rtts(&[(400, 50)]).standing_queue(), None);
        // No RTT known.
        assert_eq!(with_rtts(&[(0, 0)]).standing_queue(), None);
        assert_eq!(with_rtts(&[(130_000, 100_000)]).min_rtt_s(), 0.1);
        assert_eq!(with_rtts(&[(130_000, 100_000), (1, 0)]).active_open(), 2);
    }
}
