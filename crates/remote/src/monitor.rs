//! The per-session monitor (the iSCSI remote-write study's per-connection view): every period
//! it reads every session's counters into a [`SessionMeter`] and, with
//! `--sessions-view`, prints the live table (goodput, cwnd, RTT,
//! retransmits, share) on standard error. What the meter gathered goes to
//! the report at the end.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use wanblk_blockdev::pool::{Pool, PoolSnapshot};
use wanblk_tune::share::{SessionMeter, SessionSample, render_table};

/// How often the monitor reads the sessions.
pub const MONITOR_PERIOD: Duration = Duration::from_secs(1);

/// The sessions of one pool snapshot as the meter takes them: TCP byte
/// counters where there are some, completed requests otherwise.
pub(crate) fn session_samples(pool: usize, p: &PoolSnapshot) -> Vec<SessionSample> {
    p.sessions
        .iter()
        .filter(|s| !s.failed)
        .map(|s| SessionSample {
            pool,
            index: s.index,
            active: s.active,
            bytes: if s.tcp.is_empty() {
                s.completed_bytes
            } else {
                s.tcp.iter().map(|i| i.bytes_received + i.bytes_acked).sum()
            },
            retransmits: s.tcp.iter().map(|i| u64::from(i.total_retrans)).sum(),
            rtt_us: s.tcp.iter().map(|i| i.data_rtt_us()).max().unwrap_or(0),
            min_rtt_us: s.tcp.iter().map(|i| i.min_rtt_us).filter(|r| *r > 0).min().unwrap_or(0),
            cwnd_bytes: s.tcp.iter().map(|i| u64::from(i.snd_cwnd) * u64::from(i.snd_mss)).max().unwrap_or(0),
        })
        .collect()
}

/// Every open session of `pools` now.
pub(crate) fn all_samples(pools: &[Arc<Pool>]) -> Vec<SessionSample> {
    pools.iter().enumerate().flat_map(|(i, p)| session_samples(i, &p.snapshot())).collect()
}

/// Reads the sessions every `period` until `stop` turns true (and once
/// more then); prints the table on stderr if `view`. Returns the meter.
pub(crate) async fn run(
    pools: Vec<Arc<Pool>>,
    start: Instant,
    period: Duration,
    view: bool,
    mut stop: watch::Receiver<bool>,
) -> SessionMeter {
    let mut meter = SessionMeter::new();
    loop {
        let t = start.elapsed().as_secs_f64();
        let rows = meter.observe(t, &all_samples(&pools));
        if view && !rows.is_empty() {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(render_table(t, &rows).as_bytes());
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    meter.observe(start.elapsed().as_secs_f64(), &all_samples(&pools));
    meter
}
