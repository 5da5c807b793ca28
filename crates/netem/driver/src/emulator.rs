//! The release loop: by default one thread, inside the router namespace,
//! serving both NFQUEUE queues with one netlink socket (optionally one
//! thread and socket per direction, see
//! [`EmulatorConfig::thread_per_direction`]).
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

use crate::stats::{DirectionStats, Stats};
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
    /// One thread (and socket) per direction instead of one for both. Both
    /// threads are pinned to `cpu`. Measured slower on 2 cores (docs/netem.md).
    #[serde(default)]
    pub thread_per_direction: bool,
}

impl EmulatorConfig {
    /// How many loop threads this configuration runs (1 or 2); run
    /// [`run`] once per slot `0..threads()`.
    pub fn threads(&self) -> usize {
        if self.thread_per_direction { 2 } else { 1 }
    }

    fn directions(&self, slot: usize) -> Vec<Direction> {
        match (self.thread_per_direction, slot) {
            (false, _) => vec![Direction::Forward, Direction::Back],
            (true, 0) => vec![Direction::Forward],
            (true, _) => vec![Direction::Back],
        }
    }
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

#[derive(Debug, Default)]
struct Slot {
    stats: Mutex<Stats>,
    done: AtomicU64,
    control: Mutex<Vec<Control>>,
    ready: Mutex<Option<std::result::Result<(), String>>>,
    ready_cv: Condvar,
}

/// State shared between the loop thread(s) and their owner.
#[derive(Debug)]
pub struct Shared {
    /// Set to stop the loop.
    pub stop: AtomicBool,
    slots: Vec<Slot>,
    stats_wanted: AtomicU64,
    /// Where to write `stats.json` every 500 ms (daemon mode).
    pub stats_path: Mutex<Option<std::path::PathBuf>>,
}

impl Shared {
    /// A fresh, shareable state for `threads` loop threads (1 or 2).
    pub fn new(threads: usize) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            slots: (0..threads.max(1)).map(|_| Slot::default()).collect(),
            stats_wanted: AtomicU64::new(0),
            stats_path: Mutex::new(None),
        }
    }

    /// Waits until every loop thread serves its queues (or one failed to start).
    ///
    /// # Errors
    /// [`Error::Stopped`] with the loop's start-up error, or after `timeout`.
    pub fn wait_ready(&self, timeout: Duration) -> Result<()> {
        for slot in &self.slots {
            let g = slot.ready.lock().expect("ready lock");
            let (g, _) = slot.ready_cv.wait_timeout_while(g, timeout, |r| r.is_none()).expect("ready lock");
            match &*g {
                Some(Ok(())) => {}
                Some(Err(e)) => return Err(Error::Stopped(e.clone())),
                None => return Err(Error::Stopped(format!("not serving after {timeout:?}"))),
            }
        }
        Ok(())
    }

    fn set_ready(&self, slot: usize, r: std::result::Result<(), String>) {
        let s = &self.slots[slot];
        *s.ready.lock().expect("ready lock") = Some(r);
        s.ready_cv.notify_all();
    }

    /// The latest counters; asks the loop for a fresh snapshot and waits up to 200 ms for it.
    pub fn stats(&self) -> Stats {
        let want = self.stats_wanted.fetch_add(1, Ordering::SeqCst) + 1;
        let deadline = std::time::Instant::now() + Duration::from_millis(200);
        while self.slots.iter().any(|s| s.done.load(Ordering::SeqCst) < want)
            && std::time::Instant::now() < deadline
        {
            if self.stop.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.snapshot()
    }

    /// The counters as last published, merged over the loop threads.
    pub fn snapshot(&self) -> Stats {
        let mut all = self.slots.iter().map(|s| *s.stats.lock().expect("stats lock"));
        let mut m = all.next().unwrap_or_default();
        for s in all {
            m.back = s.back;
            m.elapsed_ns = m.elapsed_ns.max(s.elapsed_ns);
            m.cpu_ns += s.cpu_ns;
            m.wakeups += s.wakeups;
            m.verdict_sends += s.verdict_sends;
            m.kernel_errors += s.kernel_errors;
            m.no_timestamp += s.no_timestamp;
            m.realtime &= s.realtime;
        }
        m
    }

    /// Queues a runtime change.
    pub fn control(&self, c: Control) {
        for s in &self.slots {
            s.control.lock().expect("control lock").push(c.clone());
        }
    }
}

const SPIN_MIN_NS: u64 = 20_000;
/// Shortest sleep under load: bounds the wake-up rate (and adds at most this much lateness).
const BATCH_WAIT_NS: u64 = 50_000;
const MAX_IDLE_WAIT: Duration = Duration::from_millis(20);

/// Runs loop thread `slot` (of [`EmulatorConfig::threads`]) in the calling
/// thread until `shared.stop` is set. The thread enters the router
/// namespace (for good: run it on a thread of its own).
///
/// # Errors
/// Entering the namespace or binding the queues failed (also reported
/// through [`Shared::wait_ready`]); a socket error while running.
pub fn run(cfg: &EmulatorConfig, shared: &Shared, slot: usize) -> Result<()> {
    let dirs = cfg.directions(slot);
    let (mut q, rt, _ts) = match setup(cfg, &dirs) {
        Ok(v) => {
            shared.set_ready(slot, Ok(()));
            v
        }
        Err(e) => {
            shared.set_ready(slot, Err(e.to_string()));
            return Err(e);
        }
    };
    let r = serve(cfg, shared, slot, &dirs, &mut q, rt);
    q.unbind_all();
    r
}

fn queue_of(d: Direction) -> u16 {
    match d {
        Direction::Forward => QUEUE_FWD,
        Direction::Back => QUEUE_BACK,
    }
}

fn setup(cfg: &EmulatorConfig, dirs: &[Direction]) -> Result<(NfQueue, bool, std::os::fd::OwnedFd)> {
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
    for d in dirs {
        q.bind_queue(queue_of(*d), &qc).map_err(Error::Nfqueue)?;
    }
    Ok((q, rt, ts))
}

/// One direction served by this thread.
struct Served {
    dir: Direction,
    queue: u16,
    link: Link,
}

fn links(cfg: &EmulatorConfig, dirs: &[Direction], start: u64) -> Vec<Served> {
    dirs.iter()
        .map(|&dir| {
            let (p, seed) = match dir {
                Direction::Forward => (cfg.fwd, cfg.seed),
                Direction::Back => (cfg.back, cfg.seed.wrapping_add(1)),
            };
            let link = Link::new(p, seed, start)
                .with_schedule(start, &cfg.profile.for_direction(dir))
                .with_late_threshold(cfg.late_threshold_ns);
            Served { dir, queue: queue_of(dir), link }
        })
        .collect()
}

fn serve(
    cfg: &EmulatorConfig,
    shared: &Shared,
    slot: usize,
    dirs: &[Direction],
    q: &mut NfQueue,
    rt: bool,
) -> Result<()> {
    let start = sched::monotonic_ns();
    let cpu0 = sched::thread_cpu_time_ns();
    let mut links = links(cfg, dirs, start);
    let mut out: Vec<u8> = Vec::with_capacity(64 << 10);
    let mut oversleep_est: u64 = 60_000;
    let mut st = Stats { realtime: rt, cpu: cfg.cpu, ..Stats::default() };
    let mut last_publish = start;
    let mut last_file = start;
    let mut clock_offset = clock_offset(None);
    let done = &shared.slots[slot].done;

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
            if let Some(s) = links.iter_mut().find(|s| s.queue == p.queue) {
                s.link.handle_arrival(p.id, p.len, t);
            }
        })
        .map_err(Error::Nfqueue)?;
        st.no_timestamp += no_ts;

        let now = sched::monotonic_ns();
        release(&mut links, now, q, &mut out, &mut st)?;

        // Housekeeping, at most every 50 ms or when asked.
        let wanted = shared.stats_wanted.load(Ordering::Relaxed);
        if now - last_publish > 50_000_000 || wanted > done.load(Ordering::Relaxed) {
            last_publish = now;
            clock_offset = clock_offset_or(clock_offset);
            apply_controls(shared, slot, &mut links, now);
            publish(shared, slot, &links, q, &mut st, start, cpu0, oversleep_est, wanted);
            if slot == 0 && now - last_file > 500_000_000 {
                last_file = now;
                if let Some(p) = shared.stats_path.lock().expect("path lock").as_ref() {
                    let _ = crate::topology::write_json(p, &shared.snapshot());
                }
            }
        }

        let next = links.iter().filter_map(|s| s.link.poll_timeout()).min();
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
    publish(shared, slot, &links, q, &mut st, start, cpu0, oversleep_est, u64::MAX);
    Ok(())
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC`, ns, read between two monotonic reads
/// less than 10 us apart (a preemption between the reads would shift every
/// arrival time by its length). Falls back to `previous` after 8 tries.
fn clock_offset(previous: Option<u64>) -> u64 {
    let mut best: Option<(u64, u64)> = None;
    for _ in 0..8 {
        let m1 = sched::monotonic_ns();
        let r = sched::realtime_ns();
        let m2 = sched::monotonic_ns();
        let width = m2 - m1;
        let off = r.wrapping_sub(m1 + width / 2);
        if width < 10_000 {
            return off;
        }
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((width, off));
        }
    }
    previous.unwrap_or_else(|| best.map_or(0, |(_, o)| o))
}

fn clock_offset_or(previous: u64) -> u64 {
    clock_offset(Some(previous))
}

fn release(links: &mut [Served], now: u64, q: &mut NfQueue, out: &mut Vec<u8>, st: &mut Stats) -> Result<()> {
    out.clear();
    for s in links.iter_mut() {
        while let Some(d) = s.link.poll_decision(now) {
            match d {
                Decision::Drop { id, .. } => nfqueue::push_verdict(out, s.queue, id, Verdict::Drop, false),
                Decision::Release { up_to_id, .. } => {
                    nfqueue::push_verdict(out, s.queue, up_to_id, Verdict::Accept, true)
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

fn apply_controls(shared: &Shared, slot: usize, links: &mut [Served], now: u64) {
    let controls: Vec<Control> =
        std::mem::take(&mut *shared.slots[slot].control.lock().expect("control lock"));
    for c in controls {
        match c {
            Control::Reschedule { fwd, back, profile } => {
                for s in links.iter_mut() {
                    let p = if s.dir == Direction::Forward { fwd } else { back };
                    let changes: Vec<(u64, Change)> = profile.for_direction(s.dir);
                    s.link.set_schedule(now, p, &changes);
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn publish(
    shared: &Shared,
    slot: usize,
    links: &[Served],
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
    for s in links {
        let d = if s.dir == Direction::Forward { &mut st.fwd } else { &mut st.back };
        d.model = s.link.counters();
        d.pending = s.link.pending() as u64;
        if let Some(k) = kernel.iter().find(|k| k.queue == s.queue) {
            d.kernel = *k;
        }
    }
    // With one thread per direction, slot 1 holds the back direction; the
    // merge in `Shared::snapshot` takes `back` from it.
    if shared.slots.len() == 2 && slot == 0 {
        st.back = DirectionStats::default();
    }
    *shared.slots[slot].stats.lock().expect("stats lock") = *st;
    let d = &shared.slots[slot].done;
    if wanted != u64::MAX {
        d.fetch_max(wanted, Ordering::SeqCst);
    } else {
        d.store(u64::MAX, Ordering::SeqCst);
    }
}
