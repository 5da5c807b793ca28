//! The thin async loop around [`Controller`]: sleep until its timeout, read
//! the pools' counters, apply its decisions. Every decision is the
//! controller's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use tokio::sync::watch;
use wanblk_blockdev::pool::{Pool, PoolSnapshot};
use wanblk_tune::{Controller, Counters, Decision, PoolCounters, PoolLimits, SessionCounters, TcpCounters};

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
                    rtt_us: s.tcp.iter().map(|i| i.rtt_us).max().unwrap_or(0),
                    cwnd_bytes: s
                        .tcp
                        .iter()
                        .map(|i| u64::from(i.snd_cwnd) * u64::from(i.snd_mss))
                        .max()
                        .unwrap_or(0),
                    rcv_space: s.tcp.iter().map(|i| i.rcv_space).max().unwrap_or(0),
                    min_rtt_us: s.tcp.iter().map(|i| i.min_rtt_us).filter(|r| *r > 0).min().unwrap_or(0),
                }),
            })
            .collect(),
        idle_slot_us: Some(p.idle_slot_us),
        connecting: p.connecting,
    }
}

/// The counters of `pools` now, with `completed` bytes of completed requests.
pub(crate) fn counters(pools: &[Arc<Pool>], completed: u64) -> Counters {
    Counters {
        completed_bytes: completed,
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

/// Runs `ctl` on `pools` until `stop` turns true, then records the partial
/// last interval and returns it. `sessions` follows the active N.
pub(crate) async fn run(
    mut ctl: Controller,
    pools: Vec<Arc<Pool>>,
    completed: impl Fn() -> u64,
    sessions: Arc<AtomicUsize>,
    mut stop: watch::Receiver<bool>,
) -> Controller {
    loop {
        let wake = tokio::time::Instant::from_std(ctl.poll_timeout());
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            r = stop.wait_for(|s| *s) => { let _ = r; break; }
        }
        let before = ctl.decision().active;
        if let Some(d) = ctl.on_timeout(Instant::now(), &counters(&pools, completed())) {
            apply(&pools, d);
            sessions.store(d.active, Ordering::Relaxed);
            if d.active != before {
                tracing::info!(from = before, to = d.active, "tuner changed N");
            }
        }
    }
    ctl.finish(Instant::now(), &counters(&pools, completed()));
    ctl
}
