//! The thin async loop around [`Controller`]: sleep until its timeout, read
//! the pools' counters, apply its decisions. Every decision is the
//! controller's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use tokio::sync::watch;
use wanblk_blockdev::pool::{Pool, PoolSnapshot};
use wanblk_tune::share::{
    CopiesSeen, CopyReport, EnsemblePacer, Governor, PathObservation, Restart, SessionSample, WindowSplitter,
    median, restart_after, settled_point,
};
use wanblk_tune::{Controller, Counters, Decision, PoolCounters, PoolLimits, SessionCounters, TcpCounters};

use crate::host::HostLink;
use crate::monitor;
use crate::probe::Capacity;

/// The controller's view of one pool: its limits and open sessions.
fn pool_counters(p: &PoolSnapshot) -> PoolCounters {
    PoolCounters {
        limits: PoolLimits {
            max_sessions: p.max_sessions,
            max_request_bytes: p.max_request_bytes,
            request_align: p.request_align,
            max_depth: p.max_depth,
        },
        sessions: p
            .sessions
            .iter()
            .filter(|s| !s.failed)
            .map(|s| SessionCounters {
                index: s.index,
                active: s.active,
                in_flight: s.in_flight,
                tcp: (!s.tcp.is_empty()).then(|| TcpCounters {
                    bytes: s.tcp.iter().map(|i| i.bytes_received + i.bytes_acked).sum(),
                    total_retrans: s.tcp.iter().map(|i| i.total_retrans).sum(),
                    rcv_out_of_order: s.tcp.iter().map(|i| i.rcv_ooopack).sum(),
                    rtt_us: s.tcp.iter().map(|i| i.data_rtt_us()).max().unwrap_or(0),
                    cwnd_bytes: s
                        .tcp
                        .iter()
                        .map(|i| u64::from(i.snd_cwnd) * u64::from(i.snd_mss))
                        .max()
                        .unwrap_or(0),
                    rcv_space: s.tcp.iter().map(|i| i.rcv_space).max().unwrap_or(0),
                    min_rtt_us: s.tcp.iter().map(|i| i.min_rtt_us).filter(|r| *r > 0).min().unwrap_or(0),
                    mss: s.tcp.iter().map(|i| i.snd_mss.max(i.rcv_mss)).max().unwrap_or(0),
                    rate_based: s.tcp.iter().any(|i| i.congestion.as_str().starts_with("bbr")),
                }),
            })
            .collect(),
        idle_slot_us: Some(p.idle_slot_us),
        connecting: p.connecting,
    }
}

/// The counters of `pools` now, with `completed` bytes of completed requests.
pub(crate) fn counters(
    pools: &[Arc<Pool>],
    completed: u64,
    remaining: Option<u64>,
    capacity: Option<f64>,
) -> Counters {
    Counters {
        completed_bytes: completed,
        remaining_bytes: remaining,
        path_capacity: capacity,
        pools: pools.iter().map(|p| pool_counters(&p.snapshot())).collect(),
    }
}

/// Applies `d` to every pool (the values are within their limits).
pub(crate) fn apply(pools: &[Arc<Pool>], d: Decision) {
    for p in pools {
        let applied = p
            .set_active(d.active)
            .and(p.set_open(d.open))
            .and(p.set_request_bytes(d.request_bytes))
            .and(p.set_depth(d.depth));
        if let Err(e) = applied {
            tracing::warn!("{e}");
        }
    }
}

/// What the path showed in the interval `ctl` just closed: the active
/// `sessions`' median smoothed RTT and the smallest RTT any session saw.
fn observation(ctl: &Controller, sessions: &[SessionSample]) -> Option<PathObservation> {
    let sample = ctl.samples().last()?;
    let rtts: Vec<f64> =
        sessions.iter().filter(|s| s.active && s.rtt_us > 0).map(|s| f64::from(s.rtt_us) / 1e6).collect();
    let min_rtt = sessions.iter().map(|s| s.min_rtt_us).filter(|r| *r > 0).min().unwrap_or(0);
    Some(PathObservation {
        t_s: sample.t_s,
        n: sample.n,
        rtt_s: median(&rtts)?,
        min_rtt_s: f64::from(min_rtt) / 1e6,
        goodput_bytes_per_s: sample.goodput_mbps * 1e6 / 8.0,
        discarded: sample.discarded,
        losses: sample.retransmits + sample.out_of_order,
        demand_limited: sample.demand_limited,
    })
}

/// Runs `ctl` on `pools` until `stop` turns true, then records the partial
/// last interval and returns it. After every interval `governor` sees the
/// path and may set a ceiling on N, and `host` (the copies of this host on
/// the same path) may set another; the lower one holds. `sessions`
/// follows the active N. With `pacer` (and the user's `--rate`), the
/// sessions are paced together while the governor holds a ceiling; while
/// it holds one, the window each session advertises is also clamped near
/// the sessions' mean ([`WindowSplitter`]).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    mut ctl: Controller,
    capacity: Capacity,
    mut governor: Governor,
    host: Option<HostLink>,
    mut pacer: Option<(EnsemblePacer, Option<u64>)>,
    pools: Vec<Arc<Pool>>,
    (completed, remaining): (impl Fn() -> u64, impl Fn() -> Option<u64>),
    sessions: Arc<AtomicUsize>,
    mut stop: watch::Receiver<bool>,
) -> (Controller, Governor, usize) {
    let mut applied: Option<usize> = None;
    let mut copies_seen = CopiesSeen::default();
    let mut window = WindowSplitter::new();
    loop {
        let wake = tokio::time::Instant::from_std(ctl.poll_timeout());
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            r = stop.wait_for(|s| *s) => { let _ = r; break; }
        }
        let before = ctl.decision().active;
        let measured = ctl.samples().len();
        let mut decision =
            ctl.on_timeout(Instant::now(), &counters(&pools, completed(), remaining(), capacity.get()));
        // Read once per measured interval: the governor's observation and
        // the window splitter take the same snapshot.
        let closed = ctl.samples().len() > measured;
        let samples = if closed { monitor::all_samples(&pools) } else { Vec::new() };
        if closed && let Some(o) = observation(&ctl, &samples) {
            if let Some(ceiling) = governor.observe(&o) {
                tracing::info!(?ceiling, n = o.n, rtt_ms = o.rtt_s * 1e3, "share: ceiling on N");
            }
            ctl.set_path_base_rtt(governor.path_base_rtt_s());
            let grant = host.as_ref().map(|h| {
                let last = h.grant();
                let (n, settled) = settled_point(ctl.tuner(), o.n, last.copies, governor.lossy_room(&o));
                let room = governor.room_under(o.n, last.ceiling, last.budget);
                let goodput = o.goodput_bytes_per_s.max(0.0) as u64;
                tracing::debug!(n, goodput, settled, room, ceiling = ?last.ceiling, "share: report to the host");
                h.report(CopyReport { n, goodput, settled, room, left: remaining() });
                h.grant()
            });
            let mut take_over = None;
            if let Some(g) = grant
                && copies_seen.left(g)
            {
                if governor.other_copy_left(o.t_s).is_some() {
                    tracing::info!(copies = g.copies, "share: another copy left, ceiling lifted");
                }
                take_over = g.share_after_leave(o.n);
            }
            // Another copy gave a session up for this one (the
            // coordinator's turns): above this copy's own ceiling too.
            if let Some(t) = grant.and_then(|g| g.take).filter(|t| *t > o.n) {
                governor.hand_over(o.n, t, o.t_s);
                tracing::info!(n0 = t, "share: a session another copy gave up taken over");
                take_over = take_over.max(Some(t));
            }
            let mut ceiling = governor.ceiling();
            if let Some(c) = grant.and_then(|g| g.ceiling) {
                ceiling = Some(ceiling.map_or(c, |g| g.min(c)));
            }
            if let Some((p, user_cap)) = pacer.as_mut()
                && let Some(rate) = p.observe(governor.ceiling().is_some(), o.goodput_bytes_per_s, *user_cap)
            {
                tracing::info!(?rate, "share: ensemble pacing");
                for pool in &pools {
                    pool.set_rate_cap(rate);
                }
            }
            let shared = governor.ceiling().is_some();
            if let Some(clamp) = window.observe(o.t_s, &samples, shared, o.losses > 0) {
                tracing::info!(?clamp, "share: window clamp per session");
                for pool in &pools {
                    pool.set_window_clamp(clamp);
                }
            }
            if take_over.is_none()
                && let Some(now) = copies_seen.take_at_once(o.n, ceiling, applied)
            {
                tracing::info!(n0 = now, "share: a left-over session of the budget handed to this copy");
                take_over = Some(now);
            }
            if ceiling != applied {
                applied = ceiling;
                decision = ctl.set_ceiling(ceiling).or(decision);
            }
            match restart_after(governor.take_restart(), take_over) {
                Some(Restart::Search(n0)) => {
                    tracing::info!(n0, "share: the ceiling was lifted, the search starts again");
                    decision = ctl.restart_search(n0).or(decision);
                }
                Some(Restart::TakeOver(n0)) => {
                    tracing::info!(n0, "share: a share of the host budget taken over at once");
                    decision = ctl.take_over(n0).or(decision);
                }
                None => {}
            }
        }
        if let Some(d) = decision {
            apply(&pools, d);
            sessions.store(d.active, Ordering::Relaxed);
            if d.active != before {
                tracing::info!(from = before, to = d.active, "tuner changed N");
            }
        }
    }
    ctl.finish(Instant::now(), &counters(&pools, completed(), remaining(), capacity.get()));
    let copies = host.as_ref().map_or(1, HostLink::peak_copies);
    (ctl, governor, copies)
}
