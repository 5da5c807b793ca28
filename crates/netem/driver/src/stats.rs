//! Counters of a running emulator, per direction, plus the kernel's own
//! NFQUEUE drop counters and the release loop's CPU use.

use wanblk_netem_model::Counters;
use wanblk_sys::nfqueue::KernelQueueStats;

/// One direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DirectionStats {
    /// The model's counters (in, out, drops, queue high-water mark, lateness).
    pub model: Counters,
    /// The kernel's line of `/proc/net/netfilter/nfnetlink_queue` for this
    /// direction's queue: `queue_dropped` (kernel queue full) and
    /// `user_dropped` (netlink socket full) should stay 0.
    pub kernel: KernelQueueStats,
    /// Packets held in the kernel queue right now.
    pub pending: u64,
}

impl DirectionStats {
    /// Drops the emulator did not decide: kernel queue or socket overflow.
    pub fn kernel_drops(&self) -> u64 {
        self.kernel.queue_dropped + self.kernel.user_dropped
    }
}

/// A snapshot of a running emulator.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    /// Client to server.
    pub fwd: DirectionStats,
    /// Server to client.
    pub back: DirectionStats,
    /// Time since the release loop started, ns.
    pub elapsed_ns: u64,
    /// CPU time of the release loop thread, ns.
    pub cpu_ns: u64,
    /// Loop iterations that slept (wake-ups).
    pub wakeups: u64,
    /// Verdict datagrams sent.
    pub verdict_sends: u64,
    /// Error answers from the kernel (e.g. verdicts on unknown ids; should be 0).
    pub kernel_errors: u64,
    /// Packets without a kernel timestamp (their arrival time is when they were read).
    pub no_timestamp: u64,
    /// Current estimate of timer oversleep, ns (the loop wakes this much early).
    pub oversleep_estimate_ns: u64,
    /// Whether the loop runs under SCHED_FIFO.
    pub realtime: bool,
    /// The CPU it is pinned to, if any.
    pub cpu: Option<usize>,
}

impl Stats {
    /// CPU use of the release loop since it started, as a fraction of one core.
    pub fn cpu_fraction(&self) -> f64 {
        if self.elapsed_ns == 0 { 0.0 } else { self.cpu_ns as f64 / self.elapsed_ns as f64 }
    }

    /// Human-readable table (`wanblk netem stats`).
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "{:<6} {:>12} {:>12} {:>10} {:>10} {:>10} {:>9} {:>9} {:>10} {:>9} {:>10}\n",
            "dir",
            "in",
            "out",
            "q-drops",
            "rnd-drops",
            "blk-drops",
            "max-q",
            "late",
            "mean-late",
            "pending",
            "kern-drop"
        ));
        for (name, d) in [("fwd", &self.fwd), ("back", &self.back)] {
            let m = &d.model;
            let mean = m.sum_late_ns.checked_div(m.out_packets).unwrap_or(0);
            s.push_str(&format!(
                "{:<6} {:>12} {:>12} {:>10} {:>10} {:>10} {:>9} {:>9} {:>8}us {:>9} {:>10}\n",
                name,
                m.in_packets,
                m.out_packets,
                m.queue_drops,
                m.random_drops,
                m.blackout_drops,
                m.max_queue_packets,
                m.late_releases,
                mean / 1000,
                d.pending,
                d.kernel_drops()
            ));
        }
        s.push_str(&format!(
            "emulator: up {:.1}s, cpu {:.1}% of one core{}{}, {} wake-ups, {} kernel errors, {} packets without timestamp\n",
            self.elapsed_ns as f64 / 1e9,
            self.cpu_fraction() * 100.0,
            self.cpu.map(|c| format!(" (pinned to cpu {c})")).unwrap_or_default(),
            if self.realtime { ", SCHED_FIFO" } else { "" },
            self.wakeups,
            self.kernel_errors,
            self.no_timestamp
        ));
        s
    }
}
