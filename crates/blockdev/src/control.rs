//! The thin async loop around [`wanblk_tune::Controller`]: sleeps until the
//! controller's timeout, reads the pools' counters, and applies its
//! decisions to every pool. Every decision is the controller's.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;
use wanblk_tune::{
    ConfigError, Controller, ControllerConfig, Counters, Decision, IntervalSample, PoolCounters, PoolLimits,
    SessionCounters, TcpCounters, TuningReport,
};

use crate::pool::{Pool, PoolSnapshot};

/// Shared, readable-while-running state of a controller.
#[derive(Debug, Default)]
pub struct ControlState {
    samples: Mutex<Vec<IntervalSample>>,
    report: Mutex<Option<TuningReport>>,
    current_n: std::sync::atomic::AtomicUsize,
}

impl ControlState {
    /// Samples so far.
    pub fn samples(&self) -> Vec<IntervalSample> {
        self.samples.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    /// The tuner's record so far (None with a fixed N).
    pub fn tuning(&self) -> Option<TuningReport> {
        self.report.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    /// The active N now.
    pub fn current_n(&self) -> usize {
        self.current_n.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn publish(&self, c: &Controller) {
        *self.samples.lock().unwrap_or_else(|e| e.into_inner()) = c.samples().to_vec();
        *self.report.lock().unwrap_or_else(|e| e.into_inner()) = c.tuning();
        self.current_n.store(c.decision().active, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The controller's view of one pool.
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
                }),
            })
            .collect(),
    }
}

fn apply(pools: &[Arc<Pool>], d: Decision) {
    for p in pools {
        let applied =
            p.set_active(d.active).and(p.set_request_bytes(d.request_bytes)).and(p.set_depth(d.depth));
        if let Err(e) = applied {
            tracing::warn!("{e}");
        }
    }
}

/// Runs the controller until `stop` turns true, then records the partial
/// last interval and returns.
///
/// `completed` must return bytes of *completed* requests (monotonic).
///
/// # Errors
/// A tuner configuration the tuner rejects.
pub async fn run(
    pools: Vec<Arc<Pool>>,
    completed: impl Fn() -> u64,
    config: ControllerConfig,
    state: Arc<ControlState>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ConfigError> {
    let counters = || Counters {
        completed_bytes: completed(),
        pools: pools.iter().map(|p| pool_counters(&p.snapshot())).collect(),
    };
    let mut ctl = Controller::new(config, &counters(), Instant::now())?;
    apply(&pools, ctl.decision());
    state.publish(&ctl);
    loop {
        let wake = tokio::time::Instant::from_std(ctl.poll_timeout());
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            r = stop.wait_for(|s| *s) => { let _ = r; break; }
        }
        let (before, samples) = (ctl.decision().active, ctl.samples().len());
        if let Some(d) = ctl.on_timeout(Instant::now(), &counters()) {
            apply(&pools, d);
            if d.active != before {
                tracing::info!(from = before, to = d.active, "tuner changed N");
            }
        }
        if ctl.samples().len() != samples {
            state.publish(&ctl);
        }
    }
    ctl.finish(Instant::now(), &counters());
    state.publish(&ctl);
    Ok(())
}
