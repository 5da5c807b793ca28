//! The release loop: one thread, inside the router namespace, serving both
//! NFQUEUE queues with one netlink socket.
//!
//! Each iteration reads every queued packet's metadata (id, length, kernel
//! receive timestamp) and feeds it to that direction's [`Link`], sends the
//! due decisions as verdicts (each drop on its own, before the batch accept
//! that would cover it; releases as one `NFQNL_MSG_VERDICT_BATCH` up to the
//! last due id), then sleeps until the next decision is due.
//!
//! Timing: VM timers oversleep by tens of microseconds, so a long wait
//! (longer than the oversleep estimate plus 20 us) ends that much early and
//! the rest is spun; the estimate follows the measured oversleep. Short
//! waits (packets back to back under load) just sleep: releases are then up
//! to one oversleep late and go out in batches, which keeps the loop's CPU
//! use low. Arrival times come from the kernel's receive timestamp, so they
//! do not depend on when the loop reads the socket.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use wanblk_netem_model::{Change, Decision, Link, Params, Profile};
use wanblk_sys::nfqueue::{self, CopyMode, NfQueue, QueueConfig, Verdict};
use wanblk_sys::sched;

use crate::stats::Stats;
use crate::topology::{QUEUE_BACK, QUEUE_FWD};
use crate::{Direction, Error, Result};

/// What the release loop needs.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct EmulatorConfig {
    /// The router namespace's name (`/run/netns/NAME`).
    pub router_ns: String,
    /// Client to server parameters.
    pub fwd: Params,
    /// Server to client parameters.
    pub back: Params,
    /// Changes over time, offsets from the loop's start.
    pub profile: Profile,
    /// PRNG seed of the random loss (the back direction uses `seed + 1`).
    pub seed: u64,
    /// CPU to pin the loop to.
    pub cpu: Option<usize>,
    /// SCHED_FIFO priority (0: normal scheduling).
    pub rt_priority: i32,
    /// Kernel queue length per queue (`NFQA_CFG_QUEUE_MAXLEN`).
    pub kernel_queue_len: u32,
    /// Lateness counted as late, ns.
    pub late_threshold_ns: u64,
}

/// A change requested while running.
#[derive(Debug, Clone)]
pub enum Control {
    /// Replace parameters and schedule from now on (offsets count from now).
    Reschedule {
        /// New client to server parameters.
        fwd: Params,
        /// New server to client parameters.
        back: Params,
        /// New schedule.
        profile: Profile,
    },
}

/// State shared between the loop and its owner.
#[derive(Debug, Default)]
pub struct Shared {
    /// Set to stop the loop.
    pub stop: AtomicBool,
    stats: Mutex<Stats>,
    stats_wanted: AtomicU64,
    stats_done: AtomicU64,
    control: Mutex<Vec<Control>>,
    ready: Mutex<Option<std::result::Result<(), String>>>,
    ready_cv: Condvar,
    /// Where to write `stats.json` every 500 ms (daemon mode).
    pub stats_path: Mutex<Option<std::path::PathBuf>>,
}

impl Shared {
    /// A fresh, shareable state.
    pub fn new() -> Shared {
        Shared::default()
    }

    /// Waits until the loop serves its queues (or failed to start).
    ///
    /// # Errors
    /// [`Error::Stopped`] with the loop's start-up error, or after `timeout`.
    pub fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let g = self.ready.lock().expect("ready lock");
        let (g, _) = self.ready_cv.wait_timeout_while(g, timeout, |r| r.is_none()).expect("ready lock");
        match &*g {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(Error::Stopped(e.clone())),
            None => Err(Error::Stopped(format!("not serving after {timeout:?}"))),
        }
    }

    fn set_ready(&self, r: std::result::Result<(), String>) {
        *self.ready.lock().expect("ready lock") = Some(r);
        self.ready_cv.notify_all();
    }

    /// The latest counters; asks the loop for a fresh snapshot and waits up to 200 ms for it.
    pub fn stats(&self) -> Stats {
        let want = self.stats_wanted.fetch_add(1, Ordering::SeqCst) + 1;
        let deadline = std::time::Instant::now() + Duration::from_millis(200);
        while self.stats_done.load(Ordering::SeqCst) < want && std::time::Instant::now() < deadline {
            if self.stop.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        *self.stats.lock().expect("stats lock")
    }

    /// Queues a runtime change.
    pub fn control(&self, c: Control) {
        self.control.lock().expect("control lock").push(c);
    }
}

const SPIN_MIN_NS: u64 = 20_000;
/// Shortest sleep under load: bounds the wake-up rate (and adds at most this much lateness).
const BATCH_WAIT_NS: u64 = 50_000;
const MAX_IDLE_WAIT: Duration = Duration::from_millis(20);

/// Runs the loop in the calling thread until `shared.stop` is set. The thread
/// enters the router namespace (for good: run it on a thread of its own).
///
/// # Errors
/// Entering the namespace or binding the queues failed (also reported
/// through [`Shared::wait_ready`]); a socket error while running.
pub fn run(cfg: &EmulatorConfig, shared: &Shared) -> Result<()> {
    let (mut q, rt, _ts) = match setup(cfg) {
        Ok(v) => {
            shared.set_ready(Ok(()));
            v
        }
        Err(e) => {
            shared.set_ready(Err(e.to_string()));
            return Err(e);
        }
    };
    let r = serve(cfg, shared, &mut q, rt);
    q.unbind_all();
    r
}

fn setup(cfg: &EmulatorConfig) -> Result<(NfQueue, bool, std::os::fd::OwnedFd)> {
    let ns = wanblk_sys::netns::path_of(&cfg.router_ns);
    wanblk_sys::netns::enter(&ns).map_err(|e| Error::io(format!("enter namespace {}", ns.display()), e))?;
    if let Some(cpu) = cfg.cpu
        && let Err(e) = sched::set_thread_affinity(&[cpu])
    {
        tracing::warn!("cannot pin the emulator to cpu {cpu}: {e}");
    }
    let _ = sched::set_timer_slack_ns(1);
    let rt = cfg.rt_priority > 0 && sched::set_thread_fifo(cfg.rt_priority).is_ok();
    if cfg.rt_priority > 0 && !rt {
        tracing::warn!("cannot use SCHED_FIFO: timing will be less accurate");
    }
    let ts = nfqueue::enable_rx_timestamps().map_err(|e| Error::io("enable receive timestamps", e))?;
    let mut q = NfQueue::open(256 << 20).map_err(Error::Nfqueue)?;
    let qc = QueueConfig {
        copy: CopyMode::Packet(20),
        max_len: cfg.kernel_queue_len,
        fail_open: false,
        gso: false,
    };
    q.bind_queue(QUEUE_FWD, &qc).map_err(Error::Nfqueue)?;
    q.bind_queue(QUEUE_BACK, &qc).map_err(Error::Nfqueue)?;
    Ok((q, rt, ts))
}

fn links(cfg: &EmulatorConfig, start: u64) -> [Link; 2] {
    let mk = |p: Params, seed: u64, dir: Direction| {
        Link::new(p, seed, start)
            .with_schedule(start, &cfg.profile.for_direction(dir))
            .with_late_threshold(cfg.late_threshold_ns)
    };
    [mk(cfg.fwd, cfg.seed, Direction::Forward), mk(cfg.back, cfg.seed.wrapping_add(1), Direction::Back)]
}

fn serve(cfg: &EmulatorConfig, shared: &Shared, q: &mut NfQueue, rt: bool) -> Result<()> {
    let start = sched::monotonic_ns();
    let cpu0 = sched::thread_cpu_time_ns();
    let mut links = links(cfg, start);
    let mut out: Vec<u8> = Vec::with_capacity(64 << 10);
    let mut oversleep_est: u64 = 60_000;
    let mut st = Stats { realtime: rt, cpu: cfg.cpu, ..Stats::default() };
    let mut last_publish = start;
    let mut last_file = start;
    let mut clock_offset = sched::realtime_ns().wrapping_sub(start);

    while !shared.stop.load(Ordering::Relaxed) {
        let now = sched::monotonic_ns();
        // Read every waiting packet; arrival = kernel receive time on our clock.
        let mut no_ts = 0u64;
        q.recv_packets(|p| {
            let t = match p.timestamp_ns {
                Some(real) => real.wrapping_sub(clock_offset).min(now),
                None => {
                    no_ts += 1;
                    now
                }
            };
            let i = usize::from(p.queue == QUEUE_BACK);
            links[i].handle_arrival(p.id, p.len, t);
        })
        .map_err(Error::Nfqueue)?;
        st.no_timestamp += no_ts;

        let now = sched::monotonic_ns();
        release(&mut links, now, q, &mut out, &mut st)?;

        // Housekeeping, at most every 50 ms or when asked.
        let wanted = shared.stats_wanted.load(Ordering::Relaxed);
        if now - last_publish > 50_000_000 || wanted > shared.stats_done.load(Ordering::Relaxed) {
            last_publish = now;
            clock_offset = sched::realtime_ns().wrapping_sub(sched::monotonic_ns());
            apply_controls(shared, &mut links, now, cfg);
            publish(shared, &links, q, &mut st, start, cpu0, oversleep_est, wanted);
            if now - last_file > 500_000_000 {
                last_file = now;
                if let Some(p) = shared.stats_path.lock().expect("path lock").as_ref() {
                    let _ = crate::topology::write_json(p, &st);
                }
            }
        }

        let next = links.iter().filter_map(Link::poll_timeout).min();
        let now = sched::monotonic_ns();
        match next {
            None => {
                st.wakeups += 1;
                q.wait_readable(MAX_IDLE_WAIT).map_err(Error::Nfqueue)?;
            }
            Some(t) if t <= now => {}
            Some(t) if t - now > oversleep_est + SPIN_MIN_NS => {
                // Long wait: wake early by the oversleep estimate, spin the rest.
                st.wakeups += 1;
                let want = (t - now - oversleep_est).min(MAX_IDLE_WAIT.as_nanos() as u64);
                let readable = q.wait_readable(Duration::from_nanos(want)).map_err(Error::Nfqueue)?;
                let woke = sched::monotonic_ns();
                if !readable {
                    let over = woke.saturating_sub(now + want);
                    // EWMA with weight 1/8; clamp to a sane range.
                    oversleep_est = ((oversleep_est * 7 + over) / 8).clamp(5_000, 300_000);
                    // The rest is at most about one oversleep estimate: spin it.
                    while sched::monotonic_ns() < t {
                        std::hint::spin_loop();
                    }
                }
            }
            Some(t) => {
                // Short wait (under load): plain sleep of at least
                // BATCH_WAIT_NS, so releases go out in batches.
                st.wakeups += 1;
                sched::sleep_until_monotonic_ns(t.max(now + BATCH_WAIT_NS));
            }
        }
    }
    publish(shared, &links, q, &mut st, start, cpu0, oversleep_est, u64::MAX);
    Ok(())
}

fn release(
    links: &mut [Link; 2],
    now: u64,
    q: &mut NfQueue,
    out: &mut Vec<u8>,
    st: &mut Stats,
) -> Result<()> {
    out.clear();
    for (i, link) in links.iter_mut().enumerate() {
        let queue = if i == 0 { QUEUE_FWD } else { QUEUE_BACK };
        while let Some(d) = link.poll_decision(now) {
            match d {
                Decision::Drop { id, .. } => nfqueue::push_verdict(out, queue, id, Verdict::Drop, false),
                Decision::Release { up_to_id, .. } => {
                    nfqueue::push_verdict(out, queue, up_to_id, Verdict::Accept, true)
                }
            }
            if out.len() > 48 << 10 {
                q.send(out).map_err(Error::Nfqueue)?;
                st.verdict_sends += 1;
                out.clear();
            }
        }
    }
    if !out.is_empty() {
        q.send(out).map_err(Error::Nfqueue)?;
        st.verdict_sends += 1;
    }
    Ok(())
}

fn apply_controls(shared: &Shared, links: &mut [Link; 2], now: u64, _cfg: &EmulatorConfig) {
    let controls: Vec<Control> = std::mem::take(&mut *shared.control.lock().expect("control lock"));
    for c in controls {
        match c {
            Control::Reschedule { fwd, back, profile } => {
                let f: Vec<(u64, Change)> = profile.for_direction(Direction::Forward);
                let b: Vec<(u64, Change)> = profile.for_direction(Direction::Back);
                links[0].set_schedule(now, fwd, &f);
                links[1].set_schedule(now, back, &b);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn publish(
    shared: &Shared,
    links: &[Link; 2],
    q: &NfQueue,
    st: &mut Stats,
    start: u64,
    cpu0: u64,
    est: u64,
    wanted: u64,
) {
    let now = sched::monotonic_ns();
    st.elapsed_ns = now - start;
    st.cpu_ns = sched::thread_cpu_time_ns() - cpu0;
    st.oversleep_estimate_ns = est;
    st.kernel_errors = q.stats().errors;
    let kernel = nfqueue::kernel_queue_stats().unwrap_or_default();
    for (i, d) in [&mut st.fwd, &mut st.back].into_iter().enumerate() {
        d.model = links[i].counters();
        d.pending = links[i].pending() as u64;
        let qn = if i == 0 { QUEUE_FWD } else { QUEUE_BACK };
        if let Some(k) = kernel.iter().find(|k| k.queue == qn) {
            d.kernel = *k;
        }
    }
    *shared.stats.lock().expect("stats lock") = *st;
    if wanted != u64::MAX {
        shared.stats_done.fetch_max(wanted, Ordering::SeqCst);
    } else {
        shared.stats_done.store(u64::MAX, Ordering::SeqCst);
    }
}
