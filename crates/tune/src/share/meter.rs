//! Per-session monitoring (the iSCSI remote-write study's per-connection view, from TCP_INFO):
//! what each session carried over the last period and in all, and how
//! evenly the sessions shared the work.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::governor::CeilingChange;
use super::jain;

/// One session's cumulative counters at one moment, as the driver reads
/// them (TCP_INFO, or the pool's own counts without TCP).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionSample {
    /// The pool (store) it belongs to, in the order opened.
    pub pool: usize,
    /// Its index in the pool.
    pub index: usize,
    /// One of the active N.
    pub active: bool,
    /// Payload bytes moved since it opened (TCP bytes acknowledged plus
    /// received; completed requests where there is no TCP).
    pub bytes: u64,
    /// Segments it retransmitted since it opened.
    pub retransmits: u64,
    /// Smoothed RTT now, microseconds (0: unknown).
    pub rtt_us: u32,
    /// Smallest RTT it has seen, microseconds (0: unknown).
    pub min_rtt_us: u32,
    /// Congestion window now, bytes (0: unknown).
    pub cwnd_bytes: u64,
}

/// One row of the live table: one session over the last period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionRow {
    /// Pool (store).
    pub pool: usize,
    /// Session index in the pool.
    pub index: usize,
    /// Active (else idle or draining).
    pub active: bool,
    /// Goodput over the period, Mbit/s.
    pub goodput_mbps: f64,
    /// Its share of the bytes all sessions moved in the period (0..=1).
    pub share: f64,
    /// Congestion window now, bytes.
    pub cwnd_bytes: u64,
    /// Smoothed RTT now, ms.
    pub rtt_ms: f64,
    /// Segments retransmitted during the period.
    pub retransmits: u64,
}

/// What one session did over the whole run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SessionReport {
    /// Pool (store), in the order opened.
    pub pool: usize,
    /// Session index in the pool.
    pub index: usize,
    /// Payload bytes it moved while watched.
    pub bytes: u64,
    /// Its share of all sessions' bytes (0..=1).
    pub share: f64,
    /// Segments it retransmitted while watched.
    pub retransmits: u64,
    /// Last smoothed RTT, ms.
    pub rtt_ms: f64,
    /// Smallest RTT it saw, ms.
    pub min_rtt_ms: f64,
    /// Last congestion window, bytes.
    pub cwnd_bytes: u64,
}

/// How the path was shared, for the report: the own sessions' fairness
/// and what each carried, the share mode and the ceilings it set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareReport {
    /// `polite`, `fair` or `greedy`.
    pub mode: String,
    /// Median over the measured intervals of Jain's index of the active
    /// sessions' bytes (warm-up intervals left out); `null` without TCP
    /// counters or with one session.
    #[serde(deserialize_with = "Option::deserialize")]
    pub fairness_median: Option<f64>,
    /// The lowest of those per-interval indexes.
    #[serde(deserialize_with = "Option::deserialize")]
    pub fairness_min: Option<f64>,
    /// How many intervals the two figures above are over.
    pub fairness_intervals: usize,
    /// Per session, what it carried over the whole run.
    pub sessions: Vec<SessionReport>,
    /// Ceilings on N the share mode set, in order.
    pub ceilings: Vec<CeilingChange>,
    /// Most copies seen sharing this host's budget at once (1: alone).
    pub host_copies: usize,
    /// Every measured interval as the share governor read it (the first
    /// [`READINGS_MAX`](super::governor::READINGS_MAX)); empty for
    /// `greedy` and in reports written before stop 40.
    #[serde(default)]
    pub readings: Vec<super::GovernorReading>,
}

/// The median of `xs` (`None` if empty; NaN values ignored).
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 })
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    /// The current connection's counters when first seen.
    first: SessionSample,
    last: SessionSample,
    /// What earlier connections under this index moved and retransmitted.
    carried: (u64, u64),
    min_rtt_us: u32,
}

impl Seen {
    fn moved(&self) -> u64 {
        self.carried.0.saturating_add(self.last.bytes.saturating_sub(self.first.bytes))
    }

    fn retransmits(&self) -> u64 {
        self.carried.1.saturating_add(self.last.retransmits.saturating_sub(self.first.retransmits))
    }
}

/// Differences per-session counters between calls. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct SessionMeter {
    last_t_s: Option<f64>,
    seen: BTreeMap<(usize, usize), Seen>,
}

impl SessionMeter {
    /// A meter that has seen nothing yet.
    pub fn new() -> SessionMeter {
        SessionMeter::default()
    }

    /// Takes the sessions' counters at `t_s` seconds and returns one row
    /// per session seen at the previous call too (a new session gets its
    /// first row next time). Counters that went backwards (a session
    /// replaced under the same index) count as zero.
    pub fn observe(&mut self, t_s: f64, sessions: &[SessionSample]) -> Vec<SessionRow> {
        let dt = self.last_t_s.map(|t| t_s - t).filter(|d| *d > 0.0);
        self.last_t_s = Some(t_s);
        let mut rows = Vec::new();
        for s in sessions {
            let key = (s.pool, s.index);
            let prev = self.seen.get(&key).map(|x| x.last);
            let entry =
                self.seen.entry(key).or_insert(Seen { first: *s, last: *s, carried: (0, 0), min_rtt_us: 0 });
            let replaced = s.bytes < entry.last.bytes || s.retransmits < entry.last.retransmits;
            if replaced {
                // A new connection under this index: keep what the old one
                // moved and count the new one from zero.
                entry.carried = (entry.moved(), entry.retransmits());
                entry.first = SessionSample { bytes: 0, retransmits: 0, ..*s };
            }
            entry.last = *s;
            let rtt = if s.min_rtt_us > 0 { s.min_rtt_us } else { s.rtt_us };
            if rtt > 0 && (entry.min_rtt_us == 0 || rtt < entry.min_rtt_us) {
                entry.min_rtt_us = rtt;
            }
            let (Some(prev), Some(dt)) = (prev, dt) else { continue };
            let prev = if replaced { SessionSample { bytes: 0, retransmits: 0, ..prev } } else { prev };
            let moved = s.bytes.saturating_sub(prev.bytes);
            rows.push(SessionRow {
                pool: s.pool,
                index: s.index,
                active: s.active,
                goodput_mbps: moved as f64 * 8.0 / dt / 1e6,
                share: moved as f64,
                cwnd_bytes: s.cwnd_bytes,
                rtt_ms: f64::from(s.rtt_us) / 1e3,
                retransmits: s.retransmits.saturating_sub(prev.retransmits),
            });
        }
        let total: f64 = rows.iter().map(|r| r.share).sum();
        for r in &mut rows {
            // `share` held the bytes moved until here.
            r.share = if total > 0.0 { r.share / total } else { 0.0 };
        }
        rows
    }

    /// What every session seen carried over the whole run.
    pub fn sessions(&self) -> Vec<SessionReport> {
        let total: f64 = self.seen.values().map(|s| s.moved() as f64).sum();
        self.seen
            .iter()
            .map(|(&(pool, index), s)| SessionReport {
                pool,
                index,
                bytes: s.moved(),
                share: if total > 0.0 { s.moved() as f64 / total } else { 0.0 },
                retransmits: s.retransmits(),
                rtt_ms: f64::from(s.last.rtt_us) / 1e3,
                min_rtt_ms: f64::from(s.min_rtt_us) / 1e3,
                cwnd_bytes: s.last.cwnd_bytes,
            })
            .collect()
    }

    /// The report: per-session totals and the per-interval fairness
    /// figures from `interval_fairness` (one entry per measured interval).
    pub fn report(
        &self,
        mode: &str,
        interval_fairness: &[f64],
        ceilings: Vec<CeilingChange>,
        host_copies: usize,
    ) -> ShareReport {
        ShareReport {
            mode: mode.to_string(),
            fairness_median: median(interval_fairness),
            fairness_min: interval_fairness.iter().copied().filter(|x| !x.is_nan()).reduce(f64::min),
            fairness_intervals: interval_fairness.iter().filter(|x| !x.is_nan()).count(),
            sessions: self.sessions(),
            ceilings,
            host_copies: host_copies.max(1),
            readings: Vec::new(),
        }
    }
}

/// The live table: a header line (time, N, total goodput, Jain's index of
/// the active sessions) and one line per session.
pub fn render_table(t_s: f64, rows: &[SessionRow]) -> String {
    let active: Vec<&SessionRow> = rows.iter().filter(|r| r.active).collect();
    let total: f64 = rows.iter().map(|r| r.goodput_mbps).sum();
    let fairness = jain(&active.iter().map(|r| r.goodput_mbps).collect::<Vec<_>>());
    let mut out = format!(
        "sessions at {t_s:.1} s: N={} {total:.1} Mbit/s, Jain {}\n",
        active.len(),
        fairness.map_or("-".to_string(), |j| format!("{j:.3}"))
    );
    let _ = writeln!(out, "  pool sess state   Mbit/s  share  cwnd KiB  rtt ms  retrans");
    for r in rows {
        let _ = writeln!(
            out,
            "  {:>4} {:>4} {:<6} {:>8.1} {:>5.1}% {:>9} {:>7.2} {:>8}",
            r.pool,
            r.index,
            if r.active { "active" } else { "idle" },
            r.goodput_mbps,
            r.share * 100.0,
            r.cwnd_bytes / 1024,
            r.rtt_ms,
            r.retransmits
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(index: usize, bytes: u64, retransmits: u64) -> SessionSample {
        SessionSample {
            pool: 0,
            index,
            active: true,
            bytes,
            retransmits,
            rtt_us: 50_000,
            min_rtt_us: 40_000,
            cwnd_bytes: 1 << 20,
        }
    }

    #[test]
    fn rows_are_differences_and_shares_add_up() {
        let mut m = SessionMeter::new();
        assert!(m.observe(0.0, &[s(0, 0, 0), s(1, 0, 0)]).is_empty(), "nothing to difference yet");
        let rows = m.observe(1.0, &[s(0, 3_000_000, 2), s(1, 1_000_000, 0), s(2, 5, 0)]);
        assert_eq!(rows.len(), 2, "session 2 is new: no row yet");
        assert!((rows[0].goodput_mbps - 24.0).abs() < 1e-9);
        assert!((rows[0].share - 0.75).abs() < 1e-9 && (rows[1].share - 0.25).abs() < 1e-9);
        assert_eq!((rows[0].retransmits, rows[1].retransmits), (2, 0));
        let table = render_table(1.0, &rows);
        assert!(table.contains("N=2") && table.contains("Jain 0.800"), "{table}");
        let report = m.report("fair", &[0.5, 0.9, 1.0], Vec::new(), 1);
        assert_eq!(report.fairness_median, Some(0.9));
        assert_eq!(report.fairness_min, Some(0.5));
        assert_eq!(
            report.sessions.iter().map(|r| r.bytes).collect::<Vec<_>>(),
            vec![3_000_000, 1_000_000, 0]
        );
        assert!((report.sessions[0].min_rtt_ms - 40.0).abs() < 1e-9);
    }

    #[test]
    fn a_replaced_connection_keeps_what_the_old_one_moved() {
        let mut m = SessionMeter::new();
        m.observe(0.0, &[s(0, 100, 0)]);
        m.observe(1.0, &[s(0, 600, 3)]);
        let rows = m.observe(2.0, &[s(0, 50, 0)]);
        assert_eq!(rows[0].goodput_mbps, 50.0 * 8.0 / 1e6);
        m.observe(3.0, &[s(0, 250, 1)]);
        let r = m.sessions()[0];
        assert_eq!((r.bytes, r.retransmits), (500 + 250, 3 + 1));
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 1.0]), Some(1.0));
    }

    proptest! {
        #[test]
        fn arbitrary_counters_never_panic_and_shares_stay_in_range(
            steps in proptest::collection::vec(proptest::collection::vec((0usize..4, any::<u64>(), any::<u64>(), any::<bool>()), 0..6), 1..8)
        ) {
            let mut m = SessionMeter::new();
            for (t, step) in steps.iter().enumerate() {
                let samples: Vec<SessionSample> = step.iter().map(|&(index, bytes, retransmits, active)| {
                    SessionSample { index, bytes, retransmits, active, ..SessionSample::default() }
                }).collect();
                for r in m.observe(t as f64, &samples) {
                    prop_assert!((0.0..=1.0).contains(&r.share));
                }
                let _ = render_table(t as f64, &[]);
            }
            let total: f64 = m.sessions().iter().map(|r| r.share).sum();
            prop_assert!(total == 0.0 || (total - 1.0).abs() < 1e-6);
        }
    }
}
