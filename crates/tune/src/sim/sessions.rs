//! The pools' sessions on a [`FlowModel`] path, one by one, in simulated
//! time: what the [`Controller`](crate::Controller) sees on real TCP,
//! without the network.
//!
//! Every session carries a queue of requests (the pool's depth x request
//! size). Its TCP connection has a congestion window that starts at the
//! initial window and doubles every round trip up to the path's window
//! limit (slow start), again after an idle spell. The sessions with data to
//! send share the bottleneck as [`FlowModel`] says for the sum of their
//! windows, in proportion to their windows, each at most at a per-session
//! rate limit (a server's per-connection limit). A session the controller
//! deactivates finishes the requests it took (it drains), then idles.
//! Bytes count as TCP progress as they move and as completed bytes when a
//! whole request is done, so both figures the controller may use are there.
//!
//! Optionally a new session takes a few round trips to connect (handshake
//! and login) before it shows up in the counters and carries data; the
//! sessions a decision asks to keep open ([`Decision::open`]) start
//! connecting at once. Optionally the application asks for only so many
//! bytes per second (demand), so request slots run out of work. And optionally
//! random loss limits each connection's window: slow start overshoots to a
//! multiple of that window before the first loss, then the window shrinks
//! by 0.7 every round trip down to it (cubic under random loss, roughly).
//! And optionally the server is bursty ([`SessionSim::with_bursts`]): it
//! releases every reply whole, and at random moments holds all replies
//! back for up to some tens of milliseconds and then releases them at once
//! (nbdkit's `rate` filter on a busy host): the rate over a second is
//! exact, but a short interval counts too few or too many bytes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::FlowModel;
use crate::control::{Counters, Decision, PoolCounters, PoolLimits, SessionCounters, TcpCounters};
use crate::interval::INITIAL_WINDOW_BYTES;

/// Idle time after which a connection restarts from the initial window
/// (Linux `tcp_slow_start_after_idle`, after about one RTO).
const IDLE_RESTART_S: f64 = 0.2;

#[derive(Debug, Clone, Default)]
struct Session {
    /// Simulated seconds at which the connection is up.
    ready_at: f64,
    /// The first loss happened since the last (re)start of slow start.
    lost: bool,
    /// Segments retransmitted: under random loss, one per round trip once
    /// the first loss happened.
    retransmits: f64,
    active: bool,
    window: f64,
    delivered: f64,
    /// Bytes the controller sees: `delivered`, or on a bursty server the
    /// replies released so far.
    visible: f64,
    /// Requests taken: (size, bytes left), the first one in progress.
    requests: VecDeque<(u32, f64)>,
    idle_s: f64,
}

/// The simulated pool. See the module docs.
#[derive(Debug, Clone)]
pub struct SessionSim {
    path: FlowModel,
    per_session_limit: f64,
    tcp: bool,
    limits: PoolLimits,
    t0: Instant,
    elapsed: Duration,
    step: Duration,
    sessions: Vec<Session>,
    decision: Decision,
    completed: f64,
    /// Bytes per second the application asks for (`None`: always more).
    demand: Option<f64>,
    /// Bytes asked for and not yet taken by a session.
    asked: f64,
    /// Idle time of the active sessions' request slots, summed, seconds.
    idle_slot_s: f64,
    /// Round trips a new session needs to connect.
    connect_rtts: f64,
    /// Random loss: (the loss-limited window, bytes; how far slow start
    /// overshoots it before the first loss; the loss rate per segment that
    /// holds a session there, [`loss_rate_for`]).
    loss: Option<(f64, f64, f64)>,
    /// A bursty server (see [`SessionSim::with_bursts`]).
    bursts: Option<Bursts>,
}

/// The bursty server's state: replies finished but not yet released.
#[derive(Debug, Clone)]
struct Bursts {
    rng: super::SplitMix64,
    /// Longest hold, seconds.
    hold_max_s: f64,
    /// Mean time between holds, seconds.
    gap_s: f64,
    /// Simulated seconds until which replies are held back.
    held_until: f64,
    /// Finished replies not yet released: (session, bytes).
    pending: Vec<(usize, f64)>,
}

impl SessionSim {
    /// A pool with `limits` on `path`, its clock starting at `t0`, with no
    /// session open yet (apply a [`Decision`] to open some), TCP counters,
    /// no per-session limit and 1 ms steps.
    pub fn new(path: FlowModel, limits: PoolLimits, t0: Instant) -> Self {
        SessionSim {
            path,
            per_session_limit: f64::INFINITY,
            tcp: true,
            limits,
            t0,
            elapsed: Duration::ZERO,
            step: Duration::from_millis(1),
            sessions: Vec::new(),
            decision: Decision {
                active: 0,
                open: 0,
                request_bytes: limits.max_request_bytes,
                depth: limits.max_depth,
            },
            completed: 0.0,
            demand: None,
            asked: 0.0,
            idle_slot_s: 0.0,
            connect_rtts: 0.0,
            loss: None,
            bursts: None,
        }
    }

    /// The application asks for `bytes_per_s` from now on (`None`: it
    /// always has more), queueing at most what the active sessions' slots
    /// hold: an application that is slower than the path.
    pub fn set_demand(&mut self, bytes_per_s: Option<f64>) {
        self.demand = bytes_per_s;
        self.asked = 0.0;
    }

    /// Takes one request's worth of the application's demand, if there is one.
    fn take(demand: Option<f64>, asked: &mut f64, bytes: u32) -> bool {
        match demand {
            None => true,
            Some(_) if *asked >= f64::from(bytes) => {
                *asked -= f64::from(bytes);
                true
            }
            Some(_) => false,
        }
    }

    /// Random loss holds each connection's window to `window` bytes; slow
    /// start overshoots to `overshoot` times that before its first loss.
    pub fn with_loss_window(mut self, window: f64, overshoot: f64) -> Self {
        self.loss = Some(random_loss(window, overshoot, self.path.rtt_s));
        self
    }

    /// A new session needs `rtts` round trips (at the path's base RTT) to
    /// connect before it carries data (e.g. 3 for TCP and NBD's handshake).
    pub fn with_connect_rtts(mut self, rtts: f64) -> Self {
        self.connect_rtts = rtts;
        self
    }

    /// Each session carries at most `bytes_per_s` (e.g. nbdkit's
    /// `connection-rate`).
    pub fn with_session_limit(mut self, bytes_per_s: f64) -> Self {
        self.per_session_limit = bytes_per_s;
        self
    }

    /// A bursty server: replies are released whole (the TCP counters move
    /// by a request at a time, as completions do), and every `gap_s` on
    /// average (random, from `seed`) all replies are held back for a random
    /// time up to `hold_max_s` and then released at once. The server keeps
    /// serving meanwhile, so only when bytes are seen moves, not how many.
    pub fn with_bursts(mut self, seed: u64, hold_max_s: f64, gap_s: f64) -> Self {
        self.bursts = Some(Bursts {
            rng: super::SplitMix64::new(seed),
            hold_max_s,
            gap_s,
            held_until: 0.0,
            pending: Vec::new(),
        });
        self
    }

    /// Each session carries at most `bytes_per_s` from now on (a server's
    /// per-connection limit that changes mid-run).
    pub fn set_session_limit(&mut self, bytes_per_s: f64) {
        self.per_session_limit = bytes_per_s;
    }

    /// Sessions have no TCP counters (Unix sockets): the controller only
    /// sees completed requests.
    pub fn without_tcp(mut self) -> Self {
        self.tcp = false;
        self
    }

    /// The path changes now (e.g. a longer route).
    pub fn set_path(&mut self, path: FlowModel) {
        self.path = path;
        self.loss = self.loss.map(|(window, overshoot, _)| random_loss(window, overshoot, self.path.rtt_s));
    }

    /// The path.
    pub fn path(&self) -> &FlowModel {
        &self.path
    }

    /// Simulated time now.
    pub fn now(&self) -> Instant {
        self.t0 + self.elapsed
    }

    /// Simulated seconds since the start.
    pub fn elapsed_s(&self) -> f64 {
        self.elapsed.as_secs_f64()
    }

    /// Applies a decision: `max(active, open)` sessions are opened (new
    /// ones connect first, then start in slow start), the first `active`
    /// open ones take requests, the others finish what they took.
    pub fn apply(&mut self, d: Decision) {
        self.decision = d;
        let ready_at = self.elapsed_s() + self.connect_rtts * self.path.rtt_s;
        while self.sessions.len() < d.active.max(d.open) {
            self.sessions.push(Session { ready_at, window: INITIAL_WINDOW_BYTES, ..Session::default() });
        }
        self.assign();
    }

    /// The first `active` connected sessions are active (as the pool does).
    fn assign(&mut self) {
        let now = self.elapsed_s();
        let mut n = 0;
        for s in &mut self.sessions {
            let up = s.ready_at <= now;
            s.active = up && n < self.decision.active;
            n += usize::from(up);
        }
    }

    /// Sessions connected so far.
    pub fn connected(&self) -> usize {
        let now = self.elapsed_s();
        self.sessions.iter().filter(|s| s.ready_at <= now).count()
    }

    /// The counters a pool would report now.
    pub fn counters(&self) -> Counters {
        let rtt = self.rtt(self.sending().map(|(_, s)| s.window).sum());
        let now = self.elapsed_s();
        let sessions = self
            .sessions
            .iter()
            .enumerate()
            .filter(|(_, s)| s.ready_at <= now)
            .map(|(index, s)| SessionCounters {
                index,
                active: s.active,
                in_flight: s.requests.len(),
                tcp: self.tcp.then_some(TcpCounters {
                    bytes: s.visible as u64,
                    total_retrans: s.retransmits as u32,
                    rcv_out_of_order: 0,
                    rtt_us: (rtt * 1e6) as u32,
                    cwnd_bytes: s.window as u64,
                    rcv_space: 0,
                    min_rtt_us: (self.path.rtt_s * 1e6) as u32,
                    mss: 0,
                    rate_based: false,
                }),
            })
            .collect();
        Counters {
            completed_bytes: self.completed as u64,
            remaining_bytes: None,
            path_capacity: None,
            pools: vec![PoolCounters {
                limits: self.limits,
                sessions,
                idle_slot_us: Some((self.idle_slot_s * 1e6) as u64),
                connecting: self.sessions.len() - self.connected(),
            }],
        }
    }

    /// Goodput with `n` sessions at their full window, bytes per second:
    /// what a fixed N reaches once slow start is over.
    pub fn steady_goodput(&self, n: usize) -> f64 {
        let w = self.loss.map_or(self.path.window_bytes, |(lw, _, _)| lw.min(self.path.window_bytes));
        let windows = vec![w; n];
        self.rates(&windows).iter().sum()
    }

    /// The N in `1..=n_max` with the best steady goodput (the smallest on
    /// ties), and that goodput.
    pub fn best_fixed(&self, n_max: usize) -> (usize, f64) {
        (1..=n_max.max(1))
            .map(|n| (n, self.steady_goodput(n)))
            .fold((1, 0.0), |b, c| if c.1 > b.1 * (1.0 + 1e-12) { c } else { b })
    }

    /// Runs the sessions until `t` (nothing if `t` is not later than now).
    pub fn advance_to(&mut self, t: Instant) {
        let until = t.saturating_duration_since(self.t0);
        while self.elapsed < until {
            let dt = self.step.min(until - self.elapsed);
            self.tick(dt.as_secs_f64());
            self.elapsed += dt;
        }
    }

    fn sending(&self) -> impl Iterator<Item = (usize, &Session)> {
        self.sessions.iter().enumerate().filter(|(_, s)| !s.requests.is_empty())
    }

    /// Round-trip time with `x` bytes in flight: base RTT plus queueing up to the buffer.
    fn rtt(&self, x: f64) -> f64 {
        let p = &self.path;
        let bdp = p.capacity_bytes_per_s * p.rtt_s;
        p.rtt_s + (x - bdp).clamp(0.0, p.buffer_bytes) / p.capacity_bytes_per_s
    }

    /// Rates of flows with these windows: the path's goodput for their sum
    /// ([`FlowModel`]'s formula), shared by window, each at most the
    /// per-session limit (the rest goes to the others).
    fn rates(&self, windows: &[f64]) -> Vec<f64> {
        let p = &self.path;
        let x: f64 = windows.iter().sum();
        if x <= 0.0 {
            return vec![0.0; windows.len()];
        }
        let c = p.capacity_bytes_per_s;
        let room = c * p.rtt_s + p.buffer_bytes;
        let raw =
            if x <= room { (x / self.rtt(x)).min(c) } else { c / (1.0 + p.loss_penalty * (x / room - 1.0)) };
        let total = raw / (1.0 + p.per_flow_overhead * (windows.len().max(1) - 1) as f64);
        let mut rates: Vec<f64> = windows.iter().map(|w| total * w / x).collect();
        let limit = self.per_session_limit;
        for _ in 0..windows.len() {
            let excess: f64 = rates.iter().map(|r| (r - limit).max(0.0)).sum();
            let free: f64 = windows.iter().zip(&rates).filter(|(_, r)| **r < limit).map(|(w, _)| w).sum();
            rates.iter_mut().for_each(|r| *r = r.min(limit));
            if excess <= 0.0 || free <= 0.0 {
                break;
            }
            for (r, w) in rates.iter_mut().zip(windows) {
                if *r < limit {
                    *r += excess * w / free;
                }
            }
        }
        rates
    }

    fn tick(&mut self, dt: f64) {
        let d = self.decision;
        if self.sessions.iter().any(|s| !s.active && s.ready_at <= self.elapsed_s() && s.ready_at > 0.0) {
            self.assign();
        }
        if let Some(rate) = self.demand {
            let most = (d.active * d.depth.max(1)) as f64 * f64::from(d.request_bytes);
            self.asked = (self.asked + rate * dt).min(most);
        }
        for s in &mut self.sessions {
            if s.active {
                while s.requests.len() < d.depth.max(1)
                    && Self::take(self.demand, &mut self.asked, d.request_bytes)
                {
                    if s.requests.is_empty() && s.idle_s > IDLE_RESTART_S {
                        s.window = INITIAL_WINDOW_BYTES;
                        s.lost = false;
                    }
                    s.requests.push_back((d.request_bytes, f64::from(d.request_bytes)));
                }
                self.idle_slot_s += d.depth.max(1).saturating_sub(s.requests.len()) as f64 * dt;
            }
        }
        let sending: Vec<usize> = self.sending().map(|(i, _)| i).collect();
        let windows: Vec<f64> = sending.iter().map(|i| self.sessions[*i].window).collect();
        let rtt = self.rtt(windows.iter().sum());
        let rates = self.rates(&windows);
        let limit = self.path.window_bytes;
        for (i, r) in sending.iter().zip(rates) {
            let s = &mut self.sessions[*i];
            let mut bytes = r * dt;
            s.delivered += bytes;
            if self.bursts.is_none() {
                s.visible = s.delivered;
            }
            while bytes > 0.0 {
                let Some(front) = s.requests.front_mut() else { break };
                let take = bytes.min(front.1);
                front.1 -= take;
                bytes -= take;
                if front.1 <= 1e-6 {
                    match self.bursts.as_mut() {
                        Some(b) => b.pending.push((*i, f64::from(front.0))),
                        None => self.completed += f64::from(front.0),
                    }
                    s.requests.pop_front();
                    if s.active
                        && s.requests.len() < d.depth.max(1)
                        && Self::take(self.demand, &mut self.asked, d.request_bytes)
                    {
                        s.requests.push_back((d.request_bytes, f64::from(d.request_bytes)));
                    }
                }
            }
            if let Some((_, _, p)) = self.loss {
                // Segments lost at the rate that holds a loss-based
                // session's window at `lw` by the model the controller
                // reads the loss rate with.
                s.retransmits += p * r * dt / f64::from(crate::DEFAULT_MSS);
            }
            s.window = match self.loss {
                Some((lw, _, _)) if s.lost => (s.window * 0.7f64.powf(dt / rtt)).max(lw),
                Some((lw, overshoot, _)) => {
                    let w = s.window * (dt / rtt).exp2();
                    s.lost = w >= lw * overshoot;
                    w
                }
                None => s.window * (dt / rtt).exp2(),
            }
            .min(limit);
        }
        self.release(dt);
        for s in &mut self.sessions {
            if s.requests.is_empty() {
                s.idle_s += dt;
            } else {
                s.idle_s = 0.0;
            }
        }
    }
}

/// [`SessionSim::loss`] for a loss-limited `window` (bytes) and slow
/// start's `overshoot` of it at `rtt_s`.
fn random_loss(window: f64, overshoot: f64, rtt_s: f64) -> (f64, f64, f64) {
    (window, overshoot, loss_rate_for(window / f64::from(crate::DEFAULT_MSS), rtt_s))
}

/// The loss rate at which [`loss_limited_rate`](crate::loss_limited_rate)
/// gives a session `window` segments at `rtt_s` (bisection on its log).
fn loss_rate_for(window: f64, rtt_s: f64) -> f64 {
    let (mut lo, mut hi) = (1e-12f64.ln(), 0.0f64);
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        match crate::loss_limited_rate(mid.exp(), rtt_s, 1.0) {
            Some(rate) if rate * rtt_s > window => lo = mid,
            _ => hi = mid,
        }
    }
    hi.exp()
}

impl SessionSim {
    /// The bursty server: starts a hold now and then, and releases the
    /// finished replies when no hold is on.
    fn release(&mut self, dt: f64) {
        let now = self.elapsed_s() + dt;
        let Some(b) = self.bursts.as_mut() else { return };
        if now >= b.held_until && b.rng.next_f64() < dt / b.gap_s.max(dt) {
            b.held_until = now + b.rng.next_f64() * b.hold_max_s;
        }
        if now < b.held_until {
            return;
        }
        for (i, bytes) in b.pending.drain(..) {
            self.completed += bytes;
            if let Some(s) = self.sessions.get_mut(i) {
                s.visible += bytes;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::PathModel;

    fn limits() -> PoolLimits {
        PoolLimits { max_sessions: 64, max_request_bytes: 4 << 20, request_align: 512, max_depth: 4 }
    }

    #[test]
    fn steady_state_is_the_flow_model() {
        let path = FlowModel::new(1000.0, 50.0, 524_288.0);
        let sim = SessionSim::new(path, limits(), Instant::now());
        for n in [1, 6, 12, 40] {
            let (a, b) = (sim.steady_goodput(n), path.goodput(n));
            assert!((a - b).abs() < 1e-6 * b, "{n}: {a} {b}");
        }
    }

    #[test]
    fn slow_start_then_full_windows() {
        let path = FlowModel::new(1000.0, 100.0, 1_048_576.0);
        let t0 = Instant::now();
        let mut sim = SessionSim::new(path, limits(), t0);
        sim.apply(Decision { active: 4, open: 0, request_bytes: 1 << 20, depth: 4 });
        sim.advance_to(t0 + Duration::from_millis(200));
        let early = sim.counters().pools[0].sessions[0].tcp.unwrap();
        assert!(early.cwnd_bytes < 100_000, "{early:?}");
        sim.advance_to(t0 + Duration::from_secs(2));
        let c = sim.counters();
        assert!(c.pools[0].sessions.iter().all(|s| s.tcp.unwrap().cwnd_bytes == 1 << 20));
        let before = c.pools[0].sessions[0].tcp.unwrap().bytes;
        sim.advance_to(t0 + Duration::from_secs(3));
        let moved = sim.counters().pools[0].sessions[0].tcp.unwrap().bytes - before;
        let want = sim.steady_goodput(4) / 4.0;
        assert!((moved as f64 - want).abs() < 0.01 * want, "{moved} {want}");
    }

    #[test]
    fn a_deactivated_session_drains_then_idles() {
        let path = FlowModel::new(1000.0, 20.0, 524_288.0);
        let t0 = Instant::now();
        let mut sim = SessionSim::new(path, limits(), t0);
        sim.apply(Decision { active: 2, open: 0, request_bytes: 4 << 20, depth: 4 });
        sim.advance_to(t0 + Duration::from_secs(1));
        sim.apply(Decision { active: 1, open: 0, request_bytes: 4 << 20, depth: 4 });
        assert_eq!(sim.counters().draining(), 1);
        sim.advance_to(t0 + Duration::from_secs(3));
        let c = sim.counters();
        assert_eq!(c.draining(), 0);
        let idle = c.pools[0].sessions[1].tcp.unwrap().bytes;
        sim.advance_to(t0 + Duration::from_secs(4));
        assert_eq!(sim.counters().pools[0].sessions[1].tcp.unwrap().bytes, idle);
    }

    #[test]
    fn per_session_limits_and_completions_without_tcp() {
        // 400 Mbit/s in all, 100 Mbit/s per session: 4 sessions fill it.
        let path = FlowModel {
            per_flow_overhead: 0.0,
            loss_penalty: 0.0,
            ..FlowModel::new(400.0, 0.2, 64.0 * 1048576.0)
        };
        let t0 = Instant::now();
        let mut sim = SessionSim::new(path, limits(), t0).with_session_limit(12.5e6).without_tcp();
        assert!((sim.steady_goodput(2) - 25e6).abs() < 1.0);
        assert!((sim.steady_goodput(4) - 50e6).abs() < 1.0);
        assert!((sim.steady_goodput(8) - 50e6).abs() < 1.0);
        assert_eq!(sim.best_fixed(64).0, 4);
        sim.apply(Decision { active: 4, open: 0, request_bytes: 4 << 20, depth: 4 });
        sim.advance_to(t0 + Duration::from_secs(10));
        let c = sim.counters();
        assert!(c.pools[0].sessions.iter().all(|s| s.tcp.is_none()));
        let done = c.completed_bytes as f64;
        assert!(done <= 10.0 * 50e6 && done > 10.0 * 50e6 - 16.0 * 4194304.0, "{done}");
    }
}
