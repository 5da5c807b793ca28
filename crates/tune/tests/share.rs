//! The controller and the share governor together, in simulated time, on a
//! fluid model of one bottleneck shared with other traffic: the tuner must
//! stop adding sessions once the path is full and shared, still fill the
//! path alone, and `greedy` must be exactly the behaviour without the
//! governor.

use std::time::{Duration, Instant};

use wanblk_tune::share::host::MemberId;
use wanblk_tune::share::{
    CopiesSeen, CopyReport, Governor, GovernorConfig, HostBudget, PathObservation, Restart, ShareMode,
    restart_after, settled_point,
};
use wanblk_tune::{
    Controller, ControllerConfig, Counters, Decision, Parallelism, PoolCounters, PoolLimits, SessionCounters,
    TcpCounters, TunerConfig,
};

/// 1 Gbit/s, 100 ms base RTT, a drop-tail queue of one BDP; each of our
/// sessions window-limited so that 9 fill the path alone.
const CAPACITY: f64 = 125e6;
const BASE_RTT: f64 = 0.1;
const BDP: f64 = CAPACITY * BASE_RTT;
const MAX_QUEUE_S: f64 = 0.1;

/// What shares the path with us.
#[derive(Clone, Copy, Debug)]
enum Other {
    Nobody,
    /// One window-limited flow with this window (bytes).
    Window(f64),
    /// A loss-based flow that keeps the queue full.
    LossBased,
}

/// Steady state with `n` of our sessions on a path of base RTT `base`:
/// (our rate, the other's rate, RTT). Each session's window stays what
/// fills a ninth of the 100 ms path, whatever the path's delay.
fn steady(n: usize, other: Other, base: f64) -> (f64, f64, f64) {
    let ours = n as f64 * BDP / 9.0;
    let bdp = CAPACITY * base;
    match other {
        Other::LossBased => {
            let rtt = base + MAX_QUEUE_S;
            let rate = (ours / rtt).min(CAPACITY * n as f64 / (n as f64 + 1.0));
            (rate, CAPACITY - rate, rtt)
        }
        Other::Nobody | Other::Window(_) => {
            let theirs = if let Other::Window(w) = other { w } else { 0.0 };
            let inflight = ours + theirs;
            if inflight <= bdp {
                (ours / base, theirs / base, base)
            } else {
                let rtt = (inflight / CAPACITY).min(base + MAX_QUEUE_S);
                (CAPACITY * ours / inflight, CAPACITY * theirs / inflight, rtt)
            }
        }
    }
}

/// The counters of a pool of 64 sessions, the first `active` of them
/// active, on a path of RTT `rtt`.
fn counters(active: usize, bytes: &[u64; 64], retrans: &[u32; 64], rtt: f64) -> Counters {
    counters_with_window(active, bytes, retrans, rtt, BDP / 9.0)
}

/// [`counters`] of sessions whose windows are `window` bytes.
fn counters_with_window(
    active: usize,
    bytes: &[u64; 64],
    retrans: &[u32; 64],
    rtt: f64,
    window: f64,
) -> Counters {
    let limits =
        PoolLimits { max_sessions: 64, max_request_bytes: 4 << 20, request_align: 512, max_depth: 4 };
    Counters {
        completed_bytes: bytes.iter().sum(),
        remaining_bytes: None,
        path_capacity: None,
        pools: vec![PoolCounters {
            limits,
            sessions: (0..64)
                .map(|i| SessionCounters {
                    index: i,
                    active: i < active,
                    in_flight: 0,
                    tcp: Some(TcpCounters {
                        bytes: bytes[i],
                        total_retrans: retrans[i],
                        rtt_us: (rtt * 1e6) as u32,
                        cwnd_bytes: window as u64,
                        min_rtt_us: (BASE_RTT * 1e6) as u32,
                        ..TcpCounters::default()
                    }),
                })
                .collect(),
            idle_slot_us: None,
            connecting: 0,
        }],
    }
}

/// Whether the drop-tail queue overflows (our sessions lose segments)
/// with `n` of our sessions beside `other` on a path of base RTT `base`.
fn overflows(n: usize, other: Other, base: f64) -> bool {
    let theirs = match other {
        Other::LossBased => return true,
        Other::Window(w) => w,
        Other::Nobody => 0.0,
    };
    n as f64 * BDP / 9.0 + theirs > CAPACITY * (base + MAX_QUEUE_S)
}

/// Retransmit counters of sessions that never lose a segment.
const NO_RETRANSMITS: [u32; 64] = [0; 64];

/// Feeds the interval `ctl` just closed (its last sample; the sessions'
/// RTT `rtt`) to `governor`, and the governor's answers to `ctl`, as the
/// driver does; returns the decision to apply (`decision` if none).
fn govern(
    ctl: &mut Controller,
    governor: &mut Governor,
    rtt: f64,
    decision: Option<Decision>,
) -> Option<Decision> {
    govern_on_host(ctl, governor, rtt, decision, None)
}

/// A copy's link to the host's budget in the simulation: the budget, the
/// copy's id there, the ceiling applied to its controller, the copies
/// it last saw on the path and the bytes it has left (if it says).
type HostSeat<'a> = (&'a mut HostBudget, MemberId, &'a mut Option<usize>, &'a mut CopiesSeen, Option<u64>);

/// [`govern`], and with `host` the copy reports to the host's budget as
/// the driver does (room: [`Governor::room_under`]), the lower of the two
/// ceilings holds, and when copies left it lifts the governor's ceiling
/// and takes over its share of the budget
/// ([`Grant::share_after_leave`](wanblk_tune::share::Grant::share_after_leave)).
fn govern_on_host(
    ctl: &mut Controller,
    governor: &mut Governor,
    rtt: f64,
    mut decision: Option<Decision>,
    host: Option<HostSeat<'_>>,
) -> Option<Decision> {
    let s = *ctl.samples().last().unwrap();
    let o = PathObservation {
        t_s: s.t_s,
        n: s.n,
        rtt_s: rtt,
        min_rtt_s: BASE_RTT,
        goodput_bytes_per_s: s.goodput_mbps * 1e6 / 8.0,
        discarded: s.discarded,
        losses: s.retransmits + s.out_of_order,
        demand_limited: s.demand_limited,
    };
    let changed = governor.observe(&o);
    let mut take_over = None;
    match host {
        None => {
            if let Some(c) = changed {
                decision = ctl.set_ceiling(c).or(decision);
            }
        }
        Some((budget, id, applied, copies_seen, left)) => {
            let last = budget.grant(id);
            let room = governor.room_under(o.n, last.ceiling, last.budget);
            let (n, settled) = settled_point(ctl.tuner(), o.n, last.copies, governor.lossy_room(&o));
            let goodput = o.goodput_bytes_per_s as u64;
            let grant = budget.report(id, CopyReport { n, goodput, settled, room, left });
            if copies_seen.left(grant) {
                governor.other_copy_left(o.t_s);
                take_over = grant.share_after_leave(o.n);
            }
            if let Some(t) = grant.take.filter(|t| *t > o.n) {
                governor.hand_over(o.n, t, o.t_s);
                take_over = take_over.max(Some(t));
            }
            let ceiling = match (governor.ceiling(), grant.ceiling) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if take_over.is_none()
                && let Some(now) = copies_seen.take_at_once(o.n, ceiling, *applied)
            {
                take_over = Some(now);
            }
            if ceiling != *applied {
                *applied = ceiling;
                decision = ctl.set_ceiling(ceiling).or(decision);
            }
        }
    }
    match restart_after(governor.take_restart(), take_over) {
        Some(Restart::Search(n0)) => decision = ctl.restart_search(n0).or(decision),
        Some(Restart::TakeOver(n0)) => decision = ctl.take_over(n0).or(decision),
        None => {}
    }
    ctl.set_path_base_rtt(governor.path_base_rtt_s());
    decision
}

struct Run {
    /// N per measured interval.
    n: Vec<usize>,
    /// Our goodput and the other flow's over the last 60 simulated seconds.
    ours: f64,
    theirs: f64,
    /// Goodput per interval as the controller measured it.
    samples: Vec<(usize, f64)>,
    /// When each interval ended, seconds of simulated time.
    times: Vec<f64>,
}

impl Run {
    /// Seconds after `at` until an interval moved `mbps` or more again,
    /// once one after `at` had moved less.
    fn reached_after(&self, at: f64, mbps: f64) -> Option<f64> {
        let mut after = self.times.iter().zip(&self.samples).filter(|(t, _)| **t > at);
        after.find(|(_, (_, g))| *g < mbps)?;
        after.find(|(_, (_, g))| *g >= mbps).map(|(t, _)| t - at)
    }
}

/// Drives the real controller (and, with `share`, the governor as the
/// driver does) for `seconds` of simulated time.
fn simulate(other: Other, share: Option<ShareMode>, seconds: f64) -> Run {
    simulate_path(other, share, seconds, None)
}

/// [`simulate`], with the path's base RTT stepping to `step.1` seconds at
/// `step.0` seconds of simulated time. The sessions' smallest RTT stays
/// the first path's, as `tcpi_min_rtt` of a long-lived connection does.
fn simulate_path(other: Other, share: Option<ShareMode>, seconds: f64, step: Option<(f64, f64)>) -> Run {
    let mut bytes = [0u64; 64];
    let mut retrans = [0u32; 64];
    let t0 = Instant::now();
    let config =
        ControllerConfig::new(Parallelism::Tuned(TunerConfig { n0: 4, n_max: 64, ..TunerConfig::default() }));
    let mut ctl = Controller::new(config, &counters(4, &bytes, &retrans, BASE_RTT), t0).unwrap();
    let mut governor = share.map(|m| Governor::new(GovernorConfig::new(m)));
    let mut now = t0;
    let mut active = ctl.decision().active;
    let (mut ours, mut theirs) = (0.0, 0.0);
    let end = t0 + Duration::from_secs_f64(seconds);
    while now < end {
        let next = ctl.poll_timeout().max(now).min(end);
        let dt = next.saturating_duration_since(now).as_secs_f64();
        let base = |t: Instant| match step {
            Some((at, rtt)) if t.duration_since(t0).as_secs_f64() >= at => rtt,
            _ => BASE_RTT,
        };
        let (rate, other_rate, _) = steady(active, other, base(now));
        for b in bytes.iter_mut().take(active) {
            *b += (rate / active as f64 * dt) as u64;
        }
        if overflows(active, other, base(now)) {
            for r in retrans.iter_mut().take(active) {
                *r += 1;
            }
        }
        let counted = next.saturating_duration_since(now.max(end - Duration::from_secs(60))).as_secs_f64();
        ours += rate * counted;
        theirs += other_rate * counted;
        now = next;
        let measured = ctl.samples().len();
        let (_, _, rtt_now) = steady(active, other, base(now));
        let mut decision = ctl.on_timeout(now, &counters(active, &bytes, &retrans, rtt_now));
        if ctl.samples().len() > measured
            && let Some(g) = governor.as_mut()
        {
            decision = govern(&mut ctl, g, rtt_now, decision);
        }
        if let Some(d) = decision {
            active = d.active;
        }
    }
    Run {
        n: ctl.samples().iter().map(|s| s.n).collect(),
        ours: ours / 60.0,
        theirs: theirs / 60.0,
        samples: ctl.samples().iter().map(|s| (s.n, s.goodput_mbps)).collect(),
        times: ctl.samples().iter().map(|s| s.t_s).collect(),
    }
}

fn late_max_n(r: &Run) -> usize {
    r.n[r.n.len() / 2..].iter().copied().max().unwrap()
}

#[test]
fn greedy_is_exactly_the_behaviour_without_the_governor() {
    for other in [Other::Nobody, Other::Window(0.262 * BDP), Other::LossBased] {
        let without = simulate(other, None, 300.0);
        let greedy = simulate(other, Some(ShareMode::Greedy), 300.0);
        assert_eq!(without.samples, greedy.samples, "{other:?}");
    }
}

#[test]
fn alone_the_path_is_still_filled() {
    let greedy = simulate(Other::Nobody, Some(ShareMode::Greedy), 300.0);
    for mode in [ShareMode::Fair, ShareMode::Polite] {
        let r = simulate(Other::Nobody, Some(mode), 300.0);
        assert!(
            r.ours >= 0.97 * greedy.ours,
            "{mode}: {:.0} Mbit/s against greedy's {:.0}; N {:?}",
            r.ours * 8e-6,
            greedy.ours * 8e-6,
            r.n
        );
    }
}

#[test]
fn a_window_limited_flow_keeps_most_of_its_rate() {
    let window = 0.262 * BDP;
    let alone = window / BASE_RTT;
    let greedy = simulate(Other::Window(window), Some(ShareMode::Greedy), 300.0);
    let fair = simulate(Other::Window(window), Some(ShareMode::Fair), 300.0);
    assert!(
        fair.theirs >= 0.8 * alone,
        "fair: the other flow keeps {:.2} of its rate; N {:?}",
        fair.theirs / alone,
        fair.n
    );
    assert!(
        late_max_n(&fair) < late_max_n(&greedy),
        "fair stops adding sessions once the path is full: {:?} vs greedy {:?}",
        fair.n,
        greedy.n
    );
    // Our sessions still fill what the other flow leaves.
    assert!(fair.ours + fair.theirs >= 0.9 * CAPACITY, "{:.0} + {:.0}", fair.ours * 8e-6, fair.theirs * 8e-6);
    let polite = simulate(Other::Window(window), Some(ShareMode::Polite), 300.0);
    assert!(polite.theirs >= fair.theirs * 0.99, "polite yields at least as much as fair");
}

#[test]
fn against_a_queue_filling_flow_polite_takes_about_one_flows_share() {
    let polite = simulate(Other::LossBased, Some(ShareMode::Polite), 300.0);
    let greedy = simulate(Other::LossBased, Some(ShareMode::Greedy), 300.0);
    assert!(late_max_n(&polite) <= 2, "N {:?}", polite.n);
    assert!(late_max_n(&greedy) > 2, "greedy climbs: {:?}", greedy.n);
}

/// The path's delay steps from 100 to 400 ms RTT mid-copy (the quick
/// profile's path change): every session keeps its window, so the longer
/// path needs four times the sessions. The governor must read the longer
/// RTT as a longer path, not as a queue that more sessions would only
/// grow: `fair` must climb as `greedy` does, not fall to one session.
#[test]
fn a_longer_path_is_not_read_as_a_full_one() {
    let step = Some((60.0, 0.4));
    let greedy = simulate_path(Other::Nobody, Some(ShareMode::Greedy), 300.0, step);
    let fair = simulate_path(Other::Nobody, Some(ShareMode::Fair), 300.0, step);
    let link = CAPACITY * 8e-6;
    let (fair_back, greedy_back) =
        (fair.reached_after(60.0, 0.9 * link), greedy.reached_after(60.0, 0.9 * link));
    eprintln!(
        "fair {:.0} Mbit/s, N {:?}, 0.9 of the link {fair_back:?} s after the change; greedy {:.0}, N {:?}, {greedy_back:?} s",
        fair.ours * 8e-6,
        &fair.n[fair.n.len() - 5..],
        greedy.ours * 8e-6,
        &greedy.n[greedy.n.len() - 5..]
    );
    // The governor first reads the longer path as a queue and cuts N to
    // find out; that costs a few intervals, not a climb from N = 2 (23 s
    // before the search restarted from the N that refills the path).
    let (Some(fair_back), Some(greedy_back)) = (fair_back, greedy_back) else {
        panic!("the link was not filled again: fair N {:?}, greedy N {:?}", fair.n, greedy.n)
    };
    assert!(
        fair_back <= greedy_back + 4.0,
        "fair took {fair_back:.1} s to fill the longer path, greedy {greedy_back:.1} s; N {:?}",
        fair.n
    );
    // 36 windows of a ninth of the first path's BDP fill the longer one.
    assert!(late_max_n(&greedy) >= 30, "greedy fills the longer path: N {:?}", greedy.n);
    assert!(
        fair.ours >= 0.9 * greedy.ours,
        "fair: {:.0} Mbit/s against greedy's {:.0} over the last 60 s; N {:?}",
        fair.ours * 8e-6,
        greedy.ours * 8e-6,
        fair.n
    );
}

/// `k` copies, each with its own controller and governor (no host budget),
/// started together on one path with nobody else: each copy's sessions
/// are window-limited as in [`steady`], and the bottleneck is shared in
/// proportion to what each keeps in flight. No losses, as in the share
/// bench's runs (receive windows kept the queue just short of its limit,
/// at 190 ms with 16 to 64 sessions). Each copy's governor has its own
/// stagger seed, as copies in their own processes do. With `leave`, the
/// first copy ends then (its sessions leave the path). Returns, per copy,
/// N per measured interval and its goodput over the last 60 simulated
/// seconds, and the copies' combined goodput over them.
fn simulate_copies(
    k: usize,
    mode: ShareMode,
    seconds: f64,
    leave: Option<f64>,
) -> (Vec<Vec<usize>>, Vec<f64>, f64) {
    let leave = leave.map_or(Leave::Never, Leave::FirstAt);
    let (ns, each, together, ..) = simulate_copies_on(k, mode, seconds, leave, BDP / 9.0, None, 60.0);
    (ns, each, together)
}

/// When copies leave the simulated path.
#[derive(Clone, Copy)]
enum Leave {
    /// None does.
    Never,
    /// The first copy, at this many seconds.
    FirstAt(f64),
    /// Each copy once it moved this many bytes (it tells the host's
    /// budget the bytes it has left).
    EachAfter(f64),
}

/// Copies on one simulated path: N per interval of each copy, each copy's
/// goodput over the counted tail (bytes/s), their sum, when each
/// interval ended (seconds), and when each copy ended (with
/// [`Leave::EachAfter`]; seconds).
type CopiesRun = (Vec<Vec<usize>>, Vec<f64>, f64, Vec<Vec<f64>>, Vec<Option<f64>>);

/// [`simulate_copies`] with sessions whose windows are `window` bytes (a
/// smaller window stands for the lower rate random loss leaves a cubic
/// session), and with `host` the copies share one host's budget, joining
/// with that budget (as told by an earlier coordinator); goodput is
/// counted over the last `tail` seconds.
fn simulate_copies_on(
    k: usize,
    mode: ShareMode,
    seconds: f64,
    leave: Leave,
    window: f64,
    host: Option<usize>,
    tail: f64,
) -> CopiesRun {
    let t0 = Instant::now();
    // The shared path: (rate of one session, RTT) with `total` sessions of
    // all copies on it, which share it as the sessions of one would.
    let path = |total: usize| {
        let inflight = total as f64 * window;
        let (rate, rtt) = if inflight <= BDP {
            (inflight / BASE_RTT, BASE_RTT)
        } else {
            (CAPACITY, (inflight / CAPACITY).min(BASE_RTT + MAX_QUEUE_S))
        };
        (rate / total.max(1) as f64, rtt)
    };
    let mut budget = HostBudget::new();
    let config =
        ControllerConfig::new(Parallelism::Tuned(TunerConfig { n0: 4, n_max: 64, ..TunerConfig::default() }));
    struct Copy {
        ctl: Controller,
        governor: Governor,
        bytes: [u64; 64],
        active: usize,
        /// Bytes moved in the last `tail` seconds.
        last: f64,
        /// With a host budget: the copy's id there, the ceiling applied.
        seat: Option<(MemberId, Option<usize>, CopiesSeen)>,
        /// Bytes moved in all.
        moved: f64,
        /// When the copy ended (seconds), with [`Leave::EachAfter`].
        ended: Option<f64>,
    }
    let mut copies: Vec<Copy> = (0..k)
        .map(|i| {
            let bytes = [0u64; 64];
            let first = counters_with_window(4, &bytes, &NO_RETRANSMITS, BASE_RTT, window);
            let ctl = Controller::new(config.clone(), &first, t0).unwrap();
            let active = ctl.decision().active;
            let governor =
                Governor::new(GovernorConfig { stagger_seed: 7 + i as u64, ..GovernorConfig::new(mode) });
            let seat = host.map(|b| (budget.join("path", Some(b)), None, CopiesSeen::default()));
            Copy { ctl, governor, bytes, active, last: 0.0, seat, moved: 0.0, ended: None }
        })
        .collect();
    let mut now = t0;
    let end = t0 + Duration::from_secs_f64(seconds);
    let mut gone = None;
    while now < end && copies.iter().any(|c| c.ended.is_none()) {
        if let Leave::FirstAt(at) = leave
            && gone.is_none()
            && now >= t0 + Duration::from_secs_f64(at)
        {
            let c = copies.remove(0);
            if let Some((id, _, _)) = c.seat {
                budget.leave(id);
            }
            gone = Some(c);
        }
        if let Leave::EachAfter(size) = leave {
            for c in copies.iter_mut().filter(|c| c.ended.is_none() && c.moved >= size) {
                c.ended = Some(now.duration_since(t0).as_secs_f64());
                c.active = 0;
                if let Some((id, _, _)) = c.seat {
                    budget.leave(id);
                }
            }
        }
        let Some(next) = copies.iter().filter(|c| c.ended.is_none()).map(|c| c.ctl.poll_timeout()).min()
        else {
            break;
        };
        let next = next.max(now).min(end);
        let dt = next.saturating_duration_since(now).as_secs_f64();
        let counted =
            next.saturating_duration_since(now.max(end - Duration::from_secs_f64(tail))).as_secs_f64();
        let total: usize = copies.iter().map(|c| c.active).sum();
        let (rate, _) = path(total);
        for c in copies.iter_mut() {
            for b in c.bytes.iter_mut().take(c.active) {
                *b += (rate * dt) as u64;
            }
            c.last += rate * c.active as f64 * counted;
            c.moved += rate * c.active as f64 * dt;
        }
        now = next;
        let (_, rtt) = path(copies.iter().map(|c| c.active).sum());
        for c in copies.iter_mut().filter(|c| c.ended.is_none()) {
            let measured = c.ctl.samples().len();
            let seen = counters_with_window(c.active, &c.bytes, &NO_RETRANSMITS, rtt, window);
            let mut decision = c.ctl.on_timeout(now, &seen);
            if c.ctl.samples().len() > measured {
                let left = match leave {
                    Leave::EachAfter(size) => Some((size - c.moved).max(0.0) as u64),
                    _ => None,
                };
                let seat = c.seat.as_mut().map(|(id, applied, seen)| (&mut budget, *id, applied, seen, left));
                decision = govern_on_host(&mut c.ctl, &mut c.governor, rtt, decision, seat);
            }
            if let Some(d) = decision {
                c.active = d.active;
            }
        }
    }
    let ns = copies.iter().map(|c| c.ctl.samples().iter().map(|s| s.n).collect()).collect();
    let each: Vec<f64> = copies.iter().map(|c| c.last / tail).collect();
    let together = each.iter().sum();
    let times = copies.iter().map(|c| c.ctl.samples().iter().map(|s| s.t_s).collect()).collect();
    let ends = copies.iter().map(|c| c.ended).collect();
    (ns, each, together, times, ends)
}

/// Two and four `fair` copies started together see each other's queue:
/// when one cuts, the other's queue stays, which must not be read as a
/// longer path (a re-base lifts the ceiling and the search restarts from
/// more sessions; both copies escalated to 32 sessions in the share bench,
/// where 9 fill this path). Together they must stay near what one copy
/// needs and still fill most of the link.
#[test]
fn copies_together_do_not_escalate() {
    for k in [2, 4] {
        let (ns, each, together) = simulate_copies(k, ShareMode::Fair, 300.0, None);
        let late: Vec<usize> = ns.iter().map(|n| n[n.len() / 2..].iter().copied().max().unwrap()).collect();
        eprintln!(
            "{k} copies: {:.0} Mbit/s together ({:?} each), late max N {late:?}",
            together * 8e-6,
            each.iter().map(|g| (g * 8e-6).round()).collect::<Vec<_>>()
        );
        let total: usize = late.iter().sum();
        assert!(total <= 18, "{k} copies: N {late:?} where 9 fill the path; N per interval {ns:?}");
        assert!(together >= 0.85 * CAPACITY, "{k} copies: {:.0} Mbit/s; N {ns:?}", together * 8e-6);
    }
}

/// Copies sharing the host's budget on a path where each session carries
/// little (random loss: 25 sessions fill it) and the budget they start
/// from is far too few (4, a first N taken early): it must grow until the
/// path is full, and no further than the path needs (two copies on the
/// share bench's loss path split 6-9 sessions for the whole copy, 0.43-0.54
/// of the link, before it grew).
#[test]
fn a_host_budget_taken_too_low_grows_until_the_path_is_full() {
    for k in [2, 4] {
        let (ns, each, together, ..) =
            simulate_copies_on(k, ShareMode::Fair, 240.0, Leave::Never, BDP / 25.0, Some(4), 60.0);
        let late: Vec<usize> = ns.iter().map(|n| n[n.len() / 2..].iter().copied().max().unwrap()).collect();
        eprintln!(
            "{k} copies, host budget from 4: {:.0} Mbit/s together ({:?} each), late max N {late:?}",
            together * 8e-6,
            each.iter().map(|g| (g * 8e-6).round()).collect::<Vec<_>>()
        );
        assert!(together >= 0.85 * CAPACITY, "{k} copies: {:.0} Mbit/s; N {ns:?}", together * 8e-6);
        let total: usize = late.iter().sum();
        assert!(total <= 40, "{k} copies: N {late:?} where 25 fill the path; N per interval {ns:?}");
    }
}

/// Copies that cut against each other's queue hold ceilings of a few
/// sessions each; when one ends, its queue goes with it, and the others
/// must take the path back within seconds, not a quarter of a ceiling at a
/// time (four copies on the share bench, stop 38: three held 1 session
/// each for 11 s at 0.7 of the link after the fourth ended).
#[test]
fn when_a_copy_ends_the_others_fill_the_path_again() {
    for k in [2, 4] {
        // The last 60 s start 5 s after the first copy ended.
        let (ns, each, together) = simulate_copies(k, ShareMode::Fair, 185.0, Some(120.0));
        eprintln!(
            "{k} copies, one ended: {:.0} Mbit/s together ({:?} each)",
            together * 8e-6,
            each.iter().map(|g| (g * 8e-6).round()).collect::<Vec<_>>()
        );
        assert!(together >= 0.9 * CAPACITY, "{k} copies, one ended: {:.0} Mbit/s; N {ns:?}", together * 8e-6);
    }
}

/// Copies sharing the host's budget: when one ends, the others take over
/// its share of the budget at once (its sessions' room is free now)
/// instead of climbing to it a measured step at a time (two copies on the
/// share bench: the one left held 2 sessions, 0.4 of the link, for 5 s).
#[test]
fn when_a_copy_on_the_host_budget_ends_the_others_take_its_share_at_once() {
    for k in [2, 4] {
        // A budget of 10 where 9 fill the path.
        let (ns, each, together, times, _) =
            simulate_copies_on(k, ShareMode::Fair, 130.0, Leave::FirstAt(120.0), BDP / 9.0, Some(10), 8.0);
        // Each copy's N in the intervals that ended within 2 s of the
        // leave (four intervals of 5 RTTs; a second grant confirms the
        // leave): its share of the 10 by then.
        let soon: Vec<usize> = ns
            .iter()
            .zip(&times)
            .map(|(n, t)| {
                n.iter()
                    .zip(t)
                    .filter(|(_, t)| **t > 120.0 && **t <= 122.0)
                    .map(|(n, _)| *n)
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        eprintln!(
            "{k} copies on the host budget, one ended: N within 2 s {soon:?}, then {:.0} Mbit/s together ({:?} each)",
            together * 8e-6,
            each.iter().map(|g| (g * 8e-6).round()).collect::<Vec<_>>(),
        );
        let share = 10 / (k - 1);
        assert!(soon.iter().all(|n| *n >= share), "{k} copies: N {soon:?} 2 s after one ended; N {ns:?}");
        assert!(together >= 0.9 * CAPACITY, "{k} copies, one ended: {:.0} Mbit/s; N {ns:?}", together * 8e-6);
    }
}

/// Copies started together on the host's budget with none known yet: the
/// first tunes while the others hold one session each, and the budget is
/// set once the first's search is past its climb, not when it converges
/// (four copies on the share bench: the first's search read 8, 6, 7 beside
/// the three held copies for 19 s and never converged, and the three held
/// one session each for its whole copy).
#[test]
fn copies_started_together_split_the_budget_once_the_first_search_passed_its_climb() {
    for k in [2, 4] {
        // Budget 0: none known; the first 12 s counted.
        let (ns, each, together, times, _) =
            simulate_copies_on(k, ShareMode::Fair, 12.0, Leave::Never, BDP / 9.0, Some(0), 12.0);
        // When the held copies first ran more than one session again.
        let freed: Vec<Option<f64>> = ns[1..]
            .iter()
            .zip(&times[1..])
            .map(|(n, t)| {
                n.iter().zip(t).skip_while(|(n, _)| **n > 1).find(|(n, _)| **n > 1).map(|(_, t)| *t)
            })
            .collect();
        eprintln!(
            "{k} copies from no budget: held ones freed at {freed:?} s, {:.0} Mbit/s together ({:?} each), N {ns:?}",
            together * 8e-6,
            each.iter().map(|g| (g * 8e-6).round()).collect::<Vec<_>>(),
        );
        assert!(
            freed.iter().all(|t| t.is_some_and(|t| t <= 8.0)),
            "{k} copies: held ones freed at {freed:?}; N {ns:?}"
        );
    }
}

/// The size each copy moves in the simulations of copies that end.
const COPY_SIZE: f64 = 2.0 * 1024.0 * 1024.0 * 1024.0;

/// Two copies of [`COPY_SIZE`] on the host's budget `budget` with sessions
/// of `window` bytes, started together: N per interval of each, and when
/// each ended (seconds).
fn two_copies_to_the_end(window: f64, budget: usize) -> (Vec<Vec<usize>>, Vec<f64>) {
    let (ns, _, _, _, ends) = simulate_copies_on(
        2,
        ShareMode::Fair,
        240.0,
        Leave::EachAfter(COPY_SIZE),
        window,
        Some(budget),
        60.0,
    );
    (ns, ends.iter().map(|e| e.expect("every copy ends")).collect())
}

/// Two copies of one size on a budget that does not split evenly (5, where
/// the path is full at 5 with a small queue, so it does not grow): the
/// session left over moves to the copy with more bytes left, and the two
/// end together. Held by the copy that joined first, it gave the share
/// bench's two 2 GiB copies 3 and 2 sessions for a whole copy (570 against
/// 424 Mbit/s), and the second ran its last 10 s alone.
#[test]
fn copies_on_an_odd_budget_end_together() {
    let (ns, ends) = two_copies_to_the_end(BDP / 4.5, 5);
    let ideal = 2.0 * COPY_SIZE / CAPACITY;
    eprintln!("ends {ends:?} (both at the link's rate: {ideal:.1} s); N {ns:?}");
    assert!((ends[0] - ends[1]).abs() <= 1.5, "copies ended {ends:?} apart; N per interval {ns:?}");
    let late: Vec<usize> = ns.iter().map(|n| *n[n.len() / 2..].iter().max().unwrap()).collect();
    assert!(late.iter().all(|n| *n == 3), "the left-over session moves: late max N {late:?}; N {ns:?}");
}

/// Two copies of one size whose own governors hold them under the host's
/// budget, unevenly (each cuts on the queue the two make together; the
/// path is full at 5 sessions with a small queue): the coordinator's turns
/// move a session between them, and they end together. Without turns one
/// copy ran 3 sessions and the other 2 (or 1) for the whole copy, on the
/// share bench's path as here, and the second ran alone at the end.
#[test]
fn copies_held_unevenly_by_their_governors_end_together() {
    for budget in [7, 9] {
        let (ns, ends) = two_copies_to_the_end(BDP / 4.5, budget);
        eprintln!("budget {budget}: ends {ends:?}; N {ns:?}");
        assert!((ends[0] - ends[1]).abs() <= 2.0, "budget {budget}: ends {ends:?}; N per interval {ns:?}");
        let ideal = 2.0 * COPY_SIZE / CAPACITY;
        assert!(
            ends[0].max(ends[1]) <= ideal * 1.1,
            "budget {budget}: ends {ends:?}, {ideal:.1} s at the link's rate"
        );
    }
}

/// Copies on a path where each session carries little (random loss: 25
/// sessions fill it) from a budget of 4: every raise of the budget, and the
/// first split of one, is taken at once by copies near their grants. Taken
/// as a ceiling only, each step waited for every copy's search under it
/// (2 GiB each: both done at 42.9 s, against 40.9 s; the link moves both in
/// 34.4 s). On the emulated 0.01 % loss path, six runs each: the last copy
/// done at a median of 43.0 s against 49.2.
#[test]
fn copies_take_a_grown_budget_at_once() {
    let (ns, ends) = two_copies_to_the_end(BDP / 25.0, 4);
    let last = ends.iter().copied().fold(0.0, f64::max);
    eprintln!("ends {ends:?}; N {ns:?}");
    // 40.9 s with the budget grown a quarter on room the copies reported
    // again on their first interval after each growth (a growth an
    // interval while no queue showed); counting room afresh under each
    // budget, 44.2 with quarters and 41.7 with a doubling while a growth
    // gained in proportion (20, then 40: the copies' tuners come back to
    // 15-16 each).
    assert!(last <= 42.5, "last copy done at {last:.1} s; N per interval {ns:?}");
}
