//! Competition-aware tuning: a ceiling on N from the standing queue.
//!
//! Parallel sessions fill a long-fat path because N flows take N shares
//! of it. Alone, goodput stops rising once the path is full; against other
//! flows it keeps rising, because every extra session takes share from
//! them, and the tuner reads that as "more N, more goodput". The
//! difference shows in the round-trip time: while the path has idle
//! capacity the sessions' smoothed RTT stays at the path's base RTT (the
//! smallest RTT seen); once the sessions together keep more in flight than
//! the path holds, the surplus waits in the bottleneck queue and every
//! flow on the path, ours and the others, sees the RTT grow, and a
//! window-limited flow's rate falls with it.
//!
//! So the governor estimates, from one settled interval, how many of our
//! sessions fill the path without a standing queue: with N sessions
//! moving their windows every RTT, the same windows every base RTT plus
//! the allowed queue need N x (base + allowed) / RTT sessions (TCP Vegas'
//! estimate, applied to the ensemble). It keeps the tuner at that N
//! ([`Controller::set_ceiling`](crate::Controller::set_ceiling)). While
//! the queue stays below half of what the mode allows for a few intervals
//! at the ceiling, and either shows room (no more than the RTT's noise, [`ROOM_QUEUE_S`]) or would
//! stay within what the mode allows with one more session's window on top
//! (RTT / N), it raises the ceiling by a quarter (other traffic may have
//! left), and the tuner searches up to it. Alone at the knee the path is
//! full with a few ms of queue, and one more window is the queue the cut
//! took away: no raise. A cut that overshot (the queue gone, and our
//! goodput down by more than the crowding share: the sessions kept did not
//! keep the windows the estimate assumed) is raised at the next interval.
//!
//! Alone on the path, a queue is ours and nobody else's rate depends on
//! it: `fair` does not cut while a smaller N carried at least 0.95 of our
//! best goodput with no queue and we still carry 0.97 of it. A loss-based
//! competitor present from the start keeps a queue at every N; a
//! window-limited one leaves a few sessions of ours short of what more of
//! them take from it; one that arrives later takes share from us. Each of
//! these ends the exemption.
//!
//! A queue alone is not proof: a server that paces each connection (or a
//! slow disk behind it) also makes the RTT grow, while every added session
//! still adds as much goodput as the others carry. So `fair` lowers the
//! ceiling only when the goodput per session has also fallen against a
//! smaller N (the third signal: the aggregate's delivery rate per
//! session falling as N rises). `polite` acts on the queue alone: against
//! a loss-based flow that keeps the queue full whatever we do, its ceiling
//! falls towards one session, and the ensemble takes about one flow's
//! share, as one more TCP flow would.
//!
//! A longer RTT is not always a queue. When the path itself gets longer
//! (a route change; the emulated path's delay step), every session keeps
//! its window, so the RTT grows and the goodput per session falls exactly
//! as behind a standing queue, and the smallest RTT the sessions have seen
//! (`tcpi_min_rtt`, which never expires) still names the old path. What
//! tells the two apart is our own N: a queue our sessions built shrinks
//! when the ceiling takes sessions away (with window-limited sessions the
//! RTT falls about in proportion to N, down to the base), while a longer
//! path, or a queue someone else keeps full, stays whatever we do. So after
//! each cut `fair` checks the next settled interval: if N fell by a quarter
//! or more and the RTT fell by less than half of what a queue of ours would
//! have, the RTT is the path's, not ours. The governor then takes that RTT
//! as the new base (from then on from the sessions' smoothed RTTs only,
//! since `tcpi_min_rtt` still remembers the old path), forgets the
//! per-session goodputs measured on the old path, and lifts its ceiling;
//! the tuner's search starts again from the N that would carry the old
//! path's best goodput at the per-session goodput now
//! ([`Governor::take_restart`]), not from the N of the cut. To keep that
//! test cheap, `fair` never cuts more than half of the sessions at once:
//! behind a drop-tail queue of up to one BDP, a queue of ours never asks
//! for more.
//! The cut stands (no re-base) when our goodput was still within the
//! crowding share of its best when the cut was decided: a longer path
//! costs window-limited sessions goodput, while a queue others keep (or
//! ours, still growing) leaves it; two copies that cut together would
//! otherwise each read the other's queue as a longer path, re-base and
//! climb. It stands too when each session has lost more than
//! [`WINDOW_KEPT`] of the bytes it had in flight at the best goodput: a
//! longer path keeps the windows (the same bytes over a longer round trip),
//! others taking share cut them (one of four copies whose goodput fell as
//! the others grew re-based on their queue and climbed to 10 sessions).
//! The test also waits for an interval without losses (a
//! queue that overflowed stays as deep however many of the sessions
//! that fill it are ours), so on a path with random loss `fair` does not
//! re-base: after a delay step there it holds the sessions it cut to.
//! `polite` does not do this: it yields to a queue whoever keeps it, so
//! after a lasting rise of the path's delay it stays at few sessions.
//! When `fair`'s test after a cut finds the queue as deep while our goodput
//! stayed near its best, the queue is someone else's (loss-based flows
//! keep it full whatever we do): the path is marked shared, and from then
//! on `fair` cuts on the queue alone, at most half the sessions at a time,
//! without the path-change test, until the path shows room again. Against
//! four cubic flows 5 of ours otherwise held an 80 ms queue for 34 s, each
//! moving more than 4 had early on, so no crowding showed.
//!
//! A queue above the allowed one that `fair` cannot place (each session
//! still moves as much as with fewer: a server's pace, or others yielding
//! to us) is probed after [`PROBE_AFTER`] settled intervals at one N: a
//! quarter of the sessions goes, and the next settled interval tells. A
//! queue that stayed is someone else's (the path is marked shared, as
//! above); one that fell with goodput held was ours and too deep (the
//! ceiling stays); one that fell with our goodput is a server's pace
//! (the probe is taken back and not made again on this path).
//!
//! When whoever kept the queue leaves (another copy ends, the flows stop),
//! the queue goes while our N stays: a queue of more than a quarter of the
//! allowed one stood at this N for two settled intervals, and then two in
//! a row, without losses and with demand enough to fill the sessions, show
//! room. The governor then lifts its ceiling, forgets what it measured
//! beside the others, and has the tuner search again
//! ([`Governor::take_restart`]), from the first ceiling of the cuts made
//! against that queue, or upwards from N where none holds (a search that
//! ended beside another copy holds its N when that copy ends: with
//! window-limited sessions its goodput does not move). Raising a ceiling
//! a quarter at a time after clean intervals took 11 s, at 0.7 of the
//! link, for three copies at one session each when a fourth ended.
//!
//! Copies that cut together also raise together, and two raises bring
//! back a queue one would not: the wait before a raise has a random part,
//! up to as long again, drawn from [`GovernorConfig::stagger_seed`] (the
//! driver seeds it from the process and the clock; tests pass their own,
//! and 0 means none).
//!
//! Sans-I/O: fed with [`PathObservation`]s, it answers ceilings.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Most the wait before raising the ceiling again grows to, in multiples
/// of [`GovernorConfig::release_after`], after raises that were refuted.
pub const RELEASE_BACKOFF_MAX: usize = 8;

/// How wanblk shares the path with other traffic (`--share`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShareMode {
    /// Yield to other traffic: keep the standing queue our sessions add
    /// near zero (at most 5 % of the base RTT, or 10 ms).
    Polite,
    /// Stop adding sessions once the path is full: allow a standing queue
    /// of a quarter of the base RTT (or 10 ms), so a window-limited flow
    /// sharing the path keeps at least 0.8 of its rate.
    #[default]
    Fair,
    /// No ceiling: the tuner takes whatever more sessions bring, even
    /// from other flows.
    Greedy,
}

impl ShareMode {
    /// Its name on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ShareMode::Polite => "polite",
            ShareMode::Fair => "fair",
            ShareMode::Greedy => "greedy",
        }
    }
}

impl fmt::Display for ShareMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A share mode name that is none of `polite`, `fair`, `greedy`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected polite, fair or greedy, got {0:?}")]
pub struct UnknownShareMode(String);

impl FromStr for ShareMode {
    type Err = UnknownShareMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "polite" => Ok(ShareMode::Polite),
            "fair" => Ok(ShareMode::Fair),
            "greedy" => Ok(ShareMode::Greedy),
            _ => Err(UnknownShareMode(s.to_string())),
        }
    }
}

/// The governor's thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GovernorConfig {
    /// The mode.
    pub mode: ShareMode,
    /// Standing queue always allowed, seconds (RTT noise on short paths).
    pub queue_floor_s: f64,
    /// Standing queue allowed as a share of the base RTT.
    pub queue_share: f64,
    /// Clean intervals at the ceiling before it is raised again.
    pub release_after: usize,
    /// Fewest sessions the ceiling allows.
    pub n_min: usize,
    /// `fair` lowers the ceiling only when the goodput per session at N is
    /// below this share of what it was at a smaller N (more sessions
    /// crowd each other instead of filling idle capacity); `polite` acts on
    /// the queue alone.
    pub crowding: f64,
    /// Consecutive full intervals (N may differ) before the ceiling is
    /// lowered, so one interval of a session still ramping up does not.
    pub confirm: usize,
    /// Below this base RTT (a LAN, loopback) the governor stays out: a
    /// server's pacing or a disk moves the RTT far more than any queue.
    pub min_base_s: f64,
    /// `fair` counts the path as ours alone (no cut) while our goodput is
    /// at least this share of our best on it, and a smaller N carried
    /// most of that best with no queue (see [`Governor::observe`]).
    pub alone_share: f64,
    /// Seeds the random part of the wait before a raise (0: none, every
    /// wait is exactly `release_after` times the backoff). Copies that
    /// cut together would otherwise raise together, and two raises bring
    /// back the queue one would not (see [`Governor::observe`]).
    pub stagger_seed: u64,
}

impl GovernorConfig {
    /// The thresholds of `mode` (see [`ShareMode`]).
    pub fn new(mode: ShareMode) -> GovernorConfig {
        GovernorConfig {
            mode,
            queue_floor_s: 0.010,
            queue_share: match mode {
                ShareMode::Polite => 0.05,
                ShareMode::Fair | ShareMode::Greedy => 0.25,
            },
            release_after: 4,
            n_min: 1,
            crowding: 0.85,
            confirm: 2,
            min_base_s: 0.001,
            alone_share: 0.97,
            stagger_seed: 0,
        }
    }

    /// The standing queue allowed on a path of base RTT `base_s`, seconds.
    pub fn allowed_queue_s(&self, base_s: f64) -> f64 {
        self.queue_floor_s.max(self.queue_share * base_s)
    }
}

/// What one measured interval showed about the path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathObservation {
    /// End of the interval, seconds since the start.
    pub t_s: f64,
    /// Active sessions during the interval.
    pub n: usize,
    /// Median smoothed RTT of the active sessions at the end, seconds.
    pub rtt_s: f64,
    /// Smallest RTT any session has seen, seconds (`tcpi_min_rtt`; 0:
    /// unknown).
    pub min_rtt_s: f64,
    /// Goodput of all our sessions over the interval, bytes per second.
    pub goodput_bytes_per_s: f64,
    /// The interval was a warm-up (N had just changed): nothing is decided
    /// from it.
    pub discarded: bool,
    /// Segments lost during the interval, as our sessions saw them: those
    /// they retransmitted, and those that reached them out of order (where
    /// they receive, the peer's losses): a drop-tail queue that overflowed
    /// (or random loss).
    pub losses: u64,
    /// Fewer requests were waiting than the sessions could carry (the
    /// copy's tail, a slow source): what the RTT shows is our demand, not
    /// the path ([`IntervalSample::demand_limited`](crate::IntervalSample::demand_limited)).
    pub demand_limited: bool,
}

/// The last lowering of the ceiling, kept until a settled interval at the
/// lower N shows whether the queue was ours (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cut {
    /// Active sessions in the interval that decided it.
    n: usize,
    /// The median smoothed RTT then, seconds.
    rtt_s: f64,
    /// Our goodput then, bytes per second.
    goodput_bytes_per_s: f64,
    /// Intervals with losses waited through since.
    lossy_waits: u8,
    /// A probe ([`PROBE_AFTER`]): taken back if the sessions it took away
    /// were carrying their share; the ceiling before it.
    probe: Option<Option<usize>>,
}

/// `fair` reads the path as ours alone only if a smaller N carried this
/// share of our best goodput with no queue: at most the rest of the path
/// was anyone else's (a window-limited flow present from the start keeps
/// no queue beside a few of our sessions, but leaves them short of what
/// more sessions then take from it).
const ALONE_ROOMY_SHARE: f64 = 0.95;

/// A standing queue this short (seconds) is the RTT's noise: the path has
/// room, and the ceiling may rise (see [`Governor::observe`]).
pub const ROOM_QUEUE_S: f64 = 0.002;

/// Settled intervals in a row, without losses, that must show room at
/// an N where a queue stood before the governor takes it that whoever
/// kept the queue left (see [`Governor::observe`]).
const KEEPER_LEFT_ROOM: usize = 2;

/// A queue above this share of the allowed one (and twice
/// [`ROOM_QUEUE_S`]) stands for [`Governor::observe`]'s test that whoever
/// kept it left: two copies of 5 sessions each, where 9 fill the path,
/// keep 11 ms of 100 (a quarter of the 25 allowed is 6).
const STOOD_SHARE: f64 = 0.25;

/// A path change is taken only while each session still has at least this
/// share of the bytes in flight it had in the interval of the best goodput
/// (see [`Governor::observe`]).
const WINDOW_KEPT: f64 = 0.7;

/// Settled intervals in a row at one N, without losses, with a queue above
/// the allowed one that `fair` could not place (each session still moved
/// as much as with fewer), after which it takes a quarter of the sessions
/// away to see whose queue it is: four copies, 2026-11-29, one of which
/// held 6 sessions against a 40-100 ms queue for 15 s while the other
/// three, which had found the queue someone else's, cut to 1 and 2 (its
/// sessions moved more as theirs yielded, so it never read crowding).
const PROBE_AFTER: usize = 6;

/// Intervals with losses a cut's test waits through (holding the
/// ceiling) before it is given up.
const LOSSY_WAITS: u8 = 3;

/// One change of the ceiling, for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CeilingChange {
    /// When, seconds since the start.
    pub t_s: f64,
    /// Active sessions in the interval that decided it.
    pub n: usize,
    /// The new ceiling (`null`: none).
    #[serde(deserialize_with = "Option::deserialize")]
    pub ceiling: Option<usize>,
    /// Standing queue seen (smoothed RTT above the base RTT), ms.
    pub queue_ms: f64,
    /// The path's base RTT, ms.
    pub base_rtt_ms: f64,
}

/// One interval as the governor read it, for the report: what it was
/// given and what it made of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GovernorReading {
    /// End of the interval, seconds since the start.
    pub t_s: f64,
    /// Active sessions during the interval.
    pub n: usize,
    /// The active sessions' median smoothed RTT at the end, ms.
    pub rtt_ms: f64,
    /// The smallest RTT any session has seen, ms (0: unknown).
    pub min_rtt_ms: f64,
    /// The base RTT the queue was read against, ms (0: none yet).
    pub base_rtt_ms: f64,
    /// Goodput of all our sessions over the interval, Mbit/s.
    pub goodput_mbps: f64,
    /// Segments lost (retransmitted or received out of order).
    pub losses: u64,
    /// A warm-up: nothing was decided from it.
    pub discarded: bool,
    /// Short of demand (the copy's tail, a slow source).
    pub demand_limited: bool,
    /// The path was read as kept full by someone else.
    pub shared: bool,
    /// The ceiling on N after this interval (`null`: none).
    #[serde(deserialize_with = "Option::deserialize")]
    pub ceiling: Option<usize>,
}

/// Most readings a governor keeps for the report (the first ones; a copy
/// of hours at half a second per interval would keep tens of thousands).
pub const READINGS_MAX: usize = 4096;

/// The governor. See the module docs.
#[derive(Debug, Clone)]
pub struct Governor {
    config: GovernorConfig,
    base_s: Option<f64>,
    /// Best goodput per session seen at each N (settled intervals).
    per_session: std::collections::BTreeMap<usize, f64>,
    ceiling: Option<usize>,
    clean: usize,
    /// Best goodput (bytes per second) of each N in a settled interval
    /// with no queue (at most half the allowed one) on this path.
    roomy: std::collections::BTreeMap<usize, f64>,
    /// Consecutive full intervals so far, all at `full_n` sessions.
    full: usize,
    full_n: Option<usize>,
    /// The last cut, until the queue it aimed at was seen to shrink or not.
    cut: Option<Cut>,
    /// The base RTT was re-taken after a path change: it follows the
    /// smoothed RTTs only (the sessions' `tcpi_min_rtt` is the old path's).
    rebased: bool,
    /// After a re-base: a settled interval whose RTT read below the base,
    /// waiting for a second one to confirm it.
    low: Option<f64>,
    /// Best goodput of all our sessions in a settled interval on this
    /// path (the old path's after a re-base, until the next settled
    /// interval), bytes per second.
    best_bytes_per_s: f64,
    /// Bytes each session had in flight (goodput per session x RTT) in
    /// the interval of `best_bytes_per_s`.
    best_window_bytes: f64,
    /// After a re-base: the N the search should start again from.
    restart: Option<usize>,
    /// The ceiling before the last raise, until a cut refutes the raise
    /// or another raise confirms it.
    raised_from: Option<usize>,
    /// Our goodput in the interval that decided the last cut, until the
    /// next raise (see [`Governor::observe`]: a cut that overshot).
    cut_goodput: Option<f64>,
    /// A cut's test found the queue as deep after our N fell: someone
    /// else keeps it (a loss-based flow fills the queue whatever we do).
    /// `fair` then cuts on the queue alone, as `polite` does, until the
    /// path shows room again; the path-change test is not made meanwhile.
    shared: bool,
    /// The N of the last settled interval, and whether a queue of more
    /// than [`STOOD_SHARE`] of the allowed one stood at that N since it
    /// was taken, for [`KEEPER_LEFT_ROOM`] intervals in a row (counted in
    /// `stood_run`).
    queue_n: Option<usize>,
    stood: bool,
    stood_run: usize,
    /// Settled intervals in a row without losses that showed room at
    /// `queue_n` after a queue stood there.
    room_run: usize,
    /// The first ceiling of the cuts since the last lift: where the
    /// search starts again once whoever kept the queue left.
    lift_to: Option<usize>,
    /// Settled intervals in a row at `unplaced_n` with a queue `fair`
    /// could not place (see [`PROBE_AFTER`]).
    unplaced: usize,
    unplaced_n: Option<usize>,
    /// A probe found the sessions it took away carrying their share: no
    /// more probes on this path.
    probe_refuted: bool,
    /// State of the raise wait's random part (xorshift; 0: none).
    stagger: u64,
    /// Intervals added to the current raise wait.
    raise_extra: usize,
    /// Multiplies `release_after`: doubles each time a raise is refuted
    /// (up to [`RELEASE_BACKOFF_MAX`]), back to 1 when one holds.
    release_backoff: usize,
    changes: Vec<CeilingChange>,
    readings: Vec<GovernorReading>,
    /// Settled intervals in a row with no standing queue and demand
    /// enough to fill the sessions (see [`Governor::empty_intervals`]).
    empty: usize,
    /// Times `empty` went back to 0.
    empty_resets: u64,
    /// The host budget room was last asked under, and `empty` (with
    /// `empty_resets`) when it last changed ([`Governor::room_under`]).
    room_at: Option<(Option<usize>, u64, usize)>,
}

impl Governor {
    /// A governor with no ceiling yet.
    pub fn new(config: GovernorConfig) -> Governor {
        Governor {
            base_s: None,
            per_session: std::collections::BTreeMap::new(),
            ceiling: None,
            clean: 0,
            empty: 0,
            empty_resets: 0,
            room_at: None,
            full: 0,
            full_n: None,
            roomy: std::collections::BTreeMap::new(),
            cut: None,
            rebased: false,
            low: None,
            best_bytes_per_s: 0.0,
            best_window_bytes: 0.0,
            restart: None,
            raised_from: None,
            cut_goodput: None,
            shared: false,
            queue_n: None,
            stood: false,
            stood_run: 0,
            room_run: 0,
            lift_to: None,
            unplaced: 0,
            unplaced_n: None,
            probe_refuted: false,
            stagger: config.stagger_seed,
            raise_extra: 0,
            release_backoff: 1,
            changes: Vec::new(),
            readings: Vec::new(),
            config,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &GovernorConfig {
        &self.config
    }

    /// The ceiling on N now (`None`: none).
    pub fn ceiling(&self) -> Option<usize> {
        self.ceiling
    }

    /// The path's base RTT so far, seconds.
    pub fn base_rtt_s(&self) -> Option<f64> {
        self.base_s
    }

    /// The base RTT re-taken after a path change (seconds; `None` until
    /// then): what the controller's standing-queue signal should measure
    /// from ([`Controller::set_path_base_rtt`](crate::Controller::set_path_base_rtt)).
    pub fn path_base_rtt_s(&self) -> Option<f64> {
        if self.rebased { self.base_s } else { None }
    }

    /// After the ceiling was lifted, once: the N the tuner's search should
    /// start again from. After a re-base it is the N that carries the best
    /// goodput seen before the change at the per-session goodput measured
    /// after it (a longer path with the same bottleneck needs that many of
    /// the same windows), and never below the N before the cut. After
    /// whoever kept the queue left, it is the first ceiling of the cuts
    /// made against that queue. The search then refines it; if the
    /// bottleneck changed too, it finds that.
    pub fn take_restart(&mut self) -> Option<usize> {
        self.restart.take()
    }

    /// Settled intervals in a row with no standing queue (at most a
    /// quarter of what the mode allows, or the RTT's noise) and demand
    /// enough to fill the sessions: the path is not full at these N. The
    /// host's coordinator grows a budget on it
    /// ([`crate::share::HostBudget`]). None on a path whose base RTT is
    /// below [`GovernorConfig::min_base_s`], where a queue cannot be read.
    pub fn empty_intervals(&self) -> usize {
        self.empty
    }

    /// Whether interval `o` lost segments while the path showed no standing
    /// queue (its last measured interval was empty): random loss, and the
    /// path is not full at this N (see
    /// [`settled_point`](crate::share::settled_point)).
    pub fn lossy_room(&self, o: &PathObservation) -> bool {
        o.losses > 0 && self.empty > 0
    }

    /// Whether a copy at `n` sessions under the host's `ceiling` has room
    /// to report to the host's coordinator: its N within a quarter of the
    /// ceiling (the tuner's search under it is noisy on a lossy path), and
    /// the path not full for `release_after` intervals in a row
    /// ([`empty_intervals`](Self::empty_intervals)) since the path's host
    /// `budget` last changed. No ceiling, no room.
    ///
    /// Counted from the budget's last change: the coordinator grows a
    /// budget on fresh reports, and intervals under the old one say
    /// nothing of the new one. Counted over changes, the copies reported
    /// room again on their first interval after a growth and, taking each
    /// raised grant at once, climbed together a session or two an
    /// interval: two copies of a server rate-limited to 240 Mbit/s, each
    /// allowed 8, grew the budget 4, 5, 6, 7, 9, 11 in 0.7 s and ran 8 + 8;
    /// on the share path with 0.01 % loss it grew 14, 17, 21 within 0.5 s.
    /// Not counted from changes of N (the copies' own searches under their
    /// ceilings move N, and the budget then waited 20 s for its next
    /// growth), nor of the ceiling (the coordinator's turns move a session
    /// between copies under one budget, and a simulated loss path held at
    /// 20 where 25 fill it).
    pub fn room_under(&mut self, n: usize, ceiling: Option<usize>, budget: Option<usize>) -> bool {
        let (resets, empty) = (self.empty_resets, self.empty);
        let from = match self.room_at {
            Some((b, r, e)) if b == budget => {
                if r == resets {
                    e
                } else {
                    0
                }
            }
            _ => {
                self.room_at = Some((budget, resets, empty));
                empty
            }
        };
        ceiling.is_some_and(|c| n * 4 >= c * 3) && empty.saturating_sub(from) >= self.config.release_after
    }

    /// Every change of the ceiling so far.
    pub fn changes(&self) -> &[CeilingChange] {
        &self.changes
    }

    /// Another copy of this host on the same path ended (the host's
    /// coordinator counts one copy fewer): the queue it kept is gone, and
    /// a ceiling cut against it would hold this copy at a fraction of the
    /// path while the governor's raises add a quarter at a time (two
    /// copies sharing the host's budget, stop 29: the one left raised
    /// 1 -> 2 -> 3 -> 4 over 13 s at 0.5-0.7 of the link). The ceiling is
    /// lifted, the per-session history measured beside the other copy is
    /// forgotten, and the tuner searches above its N again. Returns the
    /// new ceiling (`None`) if there was one.
    pub fn other_copy_left(&mut self, t_s: f64) -> Option<Option<usize>> {
        self.forget_path_history();
        self.ceiling.take()?;
        self.changes.push(CeilingChange {
            t_s,
            n: 0,
            ceiling: None,
            queue_ms: 0.0,
            base_rtt_ms: self.base_s.unwrap_or(0.0) * 1e3,
        });
        Some(None)
    }

    /// Another copy of this host on the same path gave up a session for
    /// this one (the host coordinator's turns: the sessions the copies'
    /// governors hold together stay as they are, and move between the
    /// copies): at `n` sessions, the ceiling rises to `to` if it was
    /// lower. Not a raise the queue could refute: the path carries as many
    /// sessions as before. Returns the new ceiling if it changed.
    pub fn hand_over(&mut self, n: usize, to: usize, t_s: f64) -> Option<Option<usize>> {
        self.ceiling.filter(|c| *c < to)?;
        self.ceiling = Some(to);
        self.full = 0;
        self.clean = 0;
        self.changes.push(CeilingChange {
            t_s,
            n,
            ceiling: Some(to),
            queue_ms: 0.0,
            base_rtt_ms: self.base_s.unwrap_or(0.0) * 1e3,
        });
        Some(Some(to))
    }

    /// What each interval showed the governor, in order (at most
    /// [`READINGS_MAX`], the first ones).
    pub fn readings(&self) -> &[GovernorReading] {
        &self.readings
    }

    /// Takes one interval; returns the new ceiling when it changed
    /// (`Some(None)`: removed). Greedy never sets one.
    pub fn observe(&mut self, o: &PathObservation) -> Option<Option<usize>> {
        let answer = self.read(o);
        if self.readings.len() < READINGS_MAX {
            let ms = |s: f64| if s.is_finite() { s * 1e3 } else { 0.0 };
            self.readings.push(GovernorReading {
                t_s: o.t_s,
                n: o.n,
                rtt_ms: ms(o.rtt_s),
                min_rtt_ms: ms(o.min_rtt_s),
                base_rtt_ms: self.base_s.map_or(0.0, ms),
                goodput_mbps: if o.goodput_bytes_per_s.is_finite() {
                    o.goodput_bytes_per_s * 8e-6
                } else {
                    0.0
                },
                losses: o.losses,
                discarded: o.discarded,
                demand_limited: o.demand_limited,
                shared: self.shared,
                ceiling: self.ceiling,
            });
        }
        answer
    }

    /// [`observe`](Self::observe)'s decision.
    fn read(&mut self, o: &PathObservation) -> Option<Option<usize>> {
        let valid = |x: f64| x.is_finite() && x > 0.0;
        if self.rebased {
            self.lower_rebased_base(o);
        } else {
            for rtt in [o.min_rtt_s, o.rtt_s] {
                if valid(rtt) {
                    self.base_s = Some(self.base_s.map_or(rtt, |b| b.min(rtt)));
                    break;
                }
            }
        }
        let (Some(base), true) = (self.base_s, valid(o.rtt_s)) else { return None };
        if !o.discarded && o.n > 0 {
            // Below `min_base_s` a server's pace moves the RTT more than a
            // queue does, so no interval shows room: a host budget grown on
            // such "room" let two copies of a rate-limited server on
            // loopback climb together past what one copy needs (CI saw 5 + 5
            // where 9 is the bound by design).
            let empty = !o.demand_limited
                && base >= self.config.min_base_s
                && o.rtt_s - base <= (self.config.allowed_queue_s(base) / 4.0).max(ROOM_QUEUE_S);
            if empty {
                self.empty += 1;
            } else {
                self.empty = 0;
                self.empty_resets += 1;
            }
        }
        if o.discarded || o.n == 0 || self.config.mode == ShareMode::Greedy || base < self.config.min_base_s {
            return None;
        }
        if let Some(rebase) = self.path_changed(o, base) {
            return rebase;
        }
        if o.goodput_bytes_per_s.is_finite() && o.goodput_bytes_per_s > self.best_bytes_per_s {
            self.best_bytes_per_s = o.goodput_bytes_per_s;
            self.best_window_bytes = window_bytes(o);
        }
        let base = self.base_s.unwrap_or(base);
        let queue = (o.rtt_s - base).max(0.0);
        let allowed = self.config.allowed_queue_s(base);
        let per_session = o.goodput_bytes_per_s / o.n as f64;
        // Per-session goodput fell as N rose: the extra sessions took
        // their share from the others (ours or other traffic's), they
        // did not fill idle capacity.
        if queue <= ROOM_QUEUE_S {
            // Room: whoever kept the queue has left.
            self.shared = false;
        }
        if self.keeper_left(o, queue, allowed) {
            self.after_keeper_left(o);
            return self.set_ceiling(o, None, queue, base);
        }
        // A shared path needs no more evidence: against flows that keep
        // the queue full, each of ours moves as much as with fewer only
        // because the queue is theirs (four cubic flows: 5 of ours held an
        // 80 ms queue for 34 s, each moving more than 4 had early on).
        let crowded = self.shared
            || per_session.is_finite()
                && self.per_session.range(..o.n).any(|(_, best)| per_session < best * self.config.crowding);
        if per_session.is_finite() && per_session > 0.0 {
            let best = self.per_session.entry(o.n).or_insert(per_session);
            *best = best.max(per_session);
        }
        if queue <= allowed / 2.0 && o.goodput_bytes_per_s.is_finite() {
            let g = self.roomy.entry(o.n).or_insert(o.goodput_bytes_per_s);
            *g = g.max(o.goodput_bytes_per_s);
        }
        // Alone on the path: a smaller N carried most of our best with no
        // queue, and we still carry our best. The queue is ours and no one
        // else's rate depends on it: no cut (alone, 5 sessions on the quick
        // path keep 20-31 ms, around the 25 ms `fair` allows, and a cut to
        // 4 cost 4 % of the link). A competitor present from the start
        // keeps a queue at every N; one that arrives takes share from us.
        let alone = self.config.mode == ShareMode::Fair
            && self.roomy.range(..o.n).any(|(_, g)| *g >= self.best_bytes_per_s * ALONE_ROOMY_SHARE)
            && o.goodput_bytes_per_s >= self.best_bytes_per_s * self.config.alone_share;
        let full = queue > allowed && !alone && (crowded || self.config.mode == ShareMode::Polite);
        // Full intervals in a row at this N: a queue seen at a larger N
        // (or the first interval after leaving it, while that N's queue
        // drains) does not confirm one at this N.
        self.full = if !full {
            0
        } else if self.full_n == Some(o.n) {
            self.full + 1
        } else {
            1
        };
        self.full_n = Some(o.n);
        // A raise adds at least one session's window (RTT / N of queue on
        // a full path): worth trying while the path shows room (no queue
        // beyond the RTT's noise), or while one more window would still
        // fit within what the mode allows. Alone at the knee a path is
        // full with a few ms of queue, and one window more is the queue
        // the last cut took away (4 sessions at 100 ms: 3 ms; 5: 50 ms).
        let room = queue <= ROOM_QUEUE_S || queue + o.rtt_s / o.n as f64 <= allowed;
        let new = if queue <= allowed / 2.0 && room {
            // Room to spare: other traffic may have left.
            self.clean += 1;
            if self.clean == 1 {
                self.raise_extra = self.draw(self.config.release_after * self.release_backoff);
            }
            let c = self.ceiling.filter(|c| o.n >= *c)?;
            if self.raised_from.is_some() && self.clean >= self.config.release_after {
                // The last raise held: the path had room for it.
                self.raised_from = None;
                self.release_backoff = 1;
            }
            // The cut overshot: the queue is gone and our goodput fell by
            // more than the crowding share with it, so the sessions left
            // carry less than the path holds (their windows did not stay
            // as the estimate assumed: alone, 5 sessions with a 57 ms
            // queue were cut to 3, which moved 710 Mbit/s of 956 on an
            // empty queue, 2026-11-27). Raise at once.
            let overshot = queue <= ROOM_QUEUE_S
                && self.cut_goodput.is_some_and(|g| o.goodput_bytes_per_s < g * self.config.crowding);
            // The random part of the wait: copies that cut together and
            // raise together bring back the queue either raise alone would
            // not (two copies at 2 + 2 sessions on the share bench's path
            // moved 0.93 of it; both raised to 3, the queue rose to 40 ms,
            // and both were cut back, twice).
            if !overshot && self.clean < self.config.release_after * self.release_backoff + self.raise_extra {
                return None;
            }
            self.clean = 0;
            self.raised_from = Some(c);
            self.cut_goodput = None;
            Some(c + (c / 4).max(1))
        } else if queue <= allowed {
            // Full, within what the mode allows: stay.
            self.clean = 0;
            return None;
        } else if !crowded && self.config.mode != ShareMode::Polite {
            // A queue, but each session still moves as much as with fewer:
            // more N still adds capacity (the RTT grew with the server's
            // pace, not with a queue we share), or others yield to us.
            // After a while, a probe tells which (`path_changed`).
            self.clean = 0;
            if !self.probe_due(o, alone) {
                return None;
            }
            let target = (o.n * 3 / 4).clamp(self.config.n_min.max(1), o.n - 1);
            let before = self.ceiling;
            let answer =
                self.set_ceiling(o, Some(self.ceiling.map_or(target, |c| c.min(target))), queue, base);
            if let Some(cut) = self.cut.as_mut() {
                cut.probe = Some(before);
            }
            return answer;
        } else if self.full < self.config.confirm {
            self.clean = 0;
            return None;
        } else {
            self.clean = 0;
            // The sessions that would carry the same windows with only
            // the allowed queue standing.
            let fill = (o.n as f64 * (base + allowed) / o.rtt_s).floor() as usize;
            // `fair` cuts at most by half at a time: behind a drop-tail
            // queue of up to one BDP a queue of ours never asks for more
            // (RTT at most twice the base), so a deeper cut means a longer
            // path or someone else's queue, and half the sessions are
            // enough to tell which (see `path_changed`) at half the cost.
            let fill = match self.config.mode {
                ShareMode::Fair => fill.max(o.n.div_ceil(2)),
                _ => fill,
            };
            let target = fill.max(self.config.n_min);
            if target >= o.n && self.ceiling.is_none_or(|c| c >= o.n) {
                // Our N is within what the path holds: the queue is not ours.
                return None;
            }
            Some(self.ceiling.map_or(target, |c| c.min(target.max(self.config.n_min))))
        };
        self.set_ceiling(o, new, queue, base)
    }

    /// Takes `new` as the ceiling decided from `o` (with `queue` standing
    /// above `base`, seconds), and records the change; returns what
    /// [`observe`](Self::observe) returns (`None`: no change).
    fn set_ceiling(
        &mut self,
        o: &PathObservation,
        new: Option<usize>,
        queue: f64,
        base: f64,
    ) -> Option<Option<usize>> {
        if new == self.ceiling {
            return None;
        }
        if let (Some(c), Some(from)) = (new, self.raised_from)
            && c <= from
        {
            // The raise is refuted: the queue came back with the
            // sessions it let in, so it was ours (alone on the path, a
            // few loss-based sessions keep one). Wait longer before
            // the next raise instead of cycling at the knee, where
            // each cut costs a drain.
            self.raised_from = None;
            self.release_backoff = (self.release_backoff * 2).min(RELEASE_BACKOFF_MAX);
        }
        if self.ceiling.is_none() {
            self.lift_to = new;
        }
        if new.is_some_and(|c| c < o.n) {
            self.cut_goodput = Some(o.goodput_bytes_per_s);
            self.cut = Some(Cut {
                n: o.n,
                rtt_s: o.rtt_s,
                goodput_bytes_per_s: o.goodput_bytes_per_s,
                lossy_waits: 0,
                probe: None,
            });
        }
        self.ceiling = new;
        self.changes.push(CeilingChange {
            t_s: o.t_s,
            n: o.n,
            ceiling: new,
            queue_ms: queue * 1e3,
            base_rtt_ms: base * 1e3,
        });
        Some(new)
    }

    /// Forgets what was measured on the path as it was (after a re-base,
    /// or when another copy left it): the per-session and no-queue
    /// goodputs, the best goodput, the counts towards a cut or a raise, the
    /// pending cut and raise, and the raise backoff.
    fn forget_path_history(&mut self) {
        self.per_session.clear();
        self.roomy.clear();
        self.best_bytes_per_s = 0.0;
        self.best_window_bytes = 0.0;
        self.full = 0;
        self.clean = 0;
        self.cut = None;
        self.cut_goodput = None;
        self.raised_from = None;
        self.shared = false;
        self.queue_n = None;
        self.stood = false;
        self.stood_run = 0;
        self.room_run = 0;
        self.lift_to = None;
        self.release_backoff = 1;
        self.unplaced = 0;
        self.unplaced_n = None;
        self.probe_refuted = false;
    }

    /// Counts an interval whose queue `fair` could not place (see
    /// [`PROBE_AFTER`]); whether a probe is due now. Never alone on the
    /// path, with losses, short of demand, at one session, or once a probe
    /// was refuted on this path; never at or below `n_min` (so the probe's
    /// target, a quarter fewer, is always in `n_min..n`).
    fn probe_due(&mut self, o: &PathObservation, alone: bool) -> bool {
        let eligible = self.config.mode == ShareMode::Fair
            && !alone
            && !self.probe_refuted
            && o.losses == 0
            && !o.demand_limited
            && o.n > self.config.n_min.max(1)
            && self.cut.is_none();
        if !eligible {
            self.unplaced = 0;
            return false;
        }
        self.unplaced = if self.unplaced_n == Some(o.n) { self.unplaced + 1 } else { 1 };
        self.unplaced_n = Some(o.n);
        if self.unplaced < PROBE_AFTER {
            return false;
        }
        self.unplaced = 0;
        true
    }

    /// Whether whoever kept the queue has left: at the N of this interval
    /// a queue of more than a quarter of the allowed one stood (two
    /// settled intervals in a row), and since then
    /// [`KEEPER_LEFT_ROOM`] settled intervals in a row, without losses
    /// and not short of demand, showed room. Our N did not change, so the
    /// queue that went was not ours to drain: another copy ended, or
    /// flows that kept it full did. (A queue of ours overflowing empties
    /// too, but with losses.)
    fn keeper_left(&mut self, o: &PathObservation, queue: f64, allowed: f64) -> bool {
        if self.queue_n != Some(o.n) {
            self.queue_n = Some(o.n);
            self.stood = false;
            self.stood_run = 0;
            self.room_run = 0;
        }
        if queue > (allowed * STOOD_SHARE).max(2.0 * ROOM_QUEUE_S) {
            self.stood_run += 1;
            self.stood |= self.stood_run >= KEEPER_LEFT_ROOM;
            self.room_run = 0;
            return false;
        }
        self.stood_run = 0;
        if !(self.stood && queue <= ROOM_QUEUE_S && o.losses == 0 && !o.demand_limited) {
            self.room_run = 0;
            return false;
        }
        self.room_run += 1;
        self.room_run >= KEEPER_LEFT_ROOM
    }

    /// After [`keeper_left`](Self::keeper_left): a ceiling cut against the
    /// queue that went is lifted and the history measured beside it is
    /// forgotten, as when the host's coordinator says another copy left
    /// ([`other_copy_left`](Self::other_copy_left)), and the search starts
    /// again ([`take_restart`](Self::take_restart)): from the first ceiling
    /// of those cuts when that is above N, else upwards from N. The
    /// ceiling's raises add a quarter at a time after clean intervals:
    /// four copies at 1 session each, when one of them ended, took 11 s to
    /// go back to 3 sessions at 0.7 of the link (share bench, stop 38); and
    /// a search that ended beside another copy holds its N when the copy
    /// ends (its goodput rises a little, or not at all with
    /// window-limited sessions: nothing for the tuner to see). The caller
    /// then lifts the ceiling.
    fn after_keeper_left(&mut self, o: &PathObservation) {
        let to = self.lift_to.filter(|c| *c > o.n);
        self.forget_path_history();
        self.restart = Some(to.unwrap_or(o.n));
    }

    /// A whole number in `0..=most` from the stagger seed (0 without one).
    fn draw(&mut self, most: usize) -> usize {
        if self.stagger == 0 {
            return 0;
        }
        // xorshift64*
        self.stagger ^= self.stagger >> 12;
        self.stagger ^= self.stagger << 25;
        self.stagger ^= self.stagger >> 27;
        let x = self.stagger.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 33) as usize % (most + 1)
    }

    /// After a re-base the base follows the sessions' median smoothed RTT,
    /// which one interval can read low (sessions just opened, a warm-up):
    /// it falls only when two settled intervals in a row read below it,
    /// and then to the higher of the two.
    fn lower_rebased_base(&mut self, o: &PathObservation) {
        let Some(base) = self.base_s else { return };
        if o.discarded || !(o.rtt_s.is_finite() && o.rtt_s > 0.0) {
            return;
        }
        if o.rtt_s >= base {
            self.low = None;
            return;
        }
        match self.low.take() {
            Some(prev) => self.base_s = Some(prev.max(o.rtt_s)),
            None => self.low = Some(o.rtt_s),
        }
    }

    /// After a cut, whether the queue it aimed at was ours (see the module
    /// docs). `Some(answer)` when this interval decided that it was not:
    /// the RTT is the path's, the base and the per-session history are
    /// taken again and the ceiling is lifted (`answer` is what
    /// [`observe`](Self::observe) returns).
    fn path_changed(&mut self, o: &PathObservation, base: f64) -> Option<Option<Option<usize>>> {
        let cut = self.cut?;
        if self.config.mode != ShareMode::Fair || o.n > cut.n * 3 / 4 {
            // Too few sessions taken away to tell yet.
            return None;
        }
        // A longer path costs window-limited sessions goodput (the same
        // windows over a longer round trip), so a cut decided while our
        // goodput was still near its best cut a queue someone else keeps
        // (or ours, still growing), not a longer path: two copies started
        // together cut at the same time and each saw the other's queue
        // stay; without this both re-based and climbed to 32 sessions.
        self.cut = None;
        if self.shared {
            // The queue is someone else's (below): no path to re-take.
            return None;
        }
        // Our goodput fell, but a longer path leaves each session its
        // window (the same bytes in flight over a longer round trip),
        // while others taking share take it (their losses cut our
        // congestion windows): four copies, stop 39, one whose goodput
        // fell from 249 to 169 Mbit/s as the others grew, with each
        // session's bytes in flight halved, read the others' queue as a
        // longer path, re-based on it and climbed to 10 sessions. A probe
        // asks only whose queue it is, never whether the path changed.
        let windows_kept = window_bytes(o) >= self.best_window_bytes * WINDOW_KEPT;
        if cut.probe.is_some()
            || cut.goodput_bytes_per_s >= self.best_bytes_per_s * self.config.crowding
            || !windows_kept
        {
            // The cut stands. A queue that stayed as deep (with no losses
            // to say it overflowed) is someone else's. An interval with
            // losses cannot tell: the test waits for one without, as
            // below (four copies, stop 39: the one copy whose first
            // interval after its cut had losses never tested again and
            // held 5 sessions against an 80-98 ms queue for 20 s while
            // the other three cut to 1 and 2).
            if o.losses > 0 {
                self.wait_past_losses(cut);
                return None;
            }
            if queue_stayed(&cut, o, base) {
                self.shared = true;
                return None;
            }
            if let Some(before) = cut.probe
                && o.goodput_bytes_per_s < cut.goodput_bytes_per_s * self.config.crowding
            {
                // A probe found the queue ours, and the sessions it took
                // away carried their share (a server's pace, not a
                // queue): take it back and do not probe this path again.
                self.probe_refuted = true;
                self.cut_goodput = None;
                let queue = (o.rtt_s - base).max(0.0);
                return Some(self.set_ceiling(o, before, queue, base));
            }
            // Ours, and fewer sessions carry as much: the ceiling stays.
            return None;
        }
        // A queue that overflowed (losses) is as deep as it can be, so it
        // stays however many of the sessions that fill it are ours: hold,
        // and wait a few intervals for one without losses (a delay
        // step itself can cost a few); then give the test up.
        if o.losses > 0 {
            return self.wait_past_losses(cut).then_some(None);
        }
        if !queue_stayed(&cut, o, base) {
            return None;
        }
        self.base_s = Some(o.rtt_s);
        self.rebased = true;
        self.low = None;
        let per_session = o.goodput_bytes_per_s / o.n as f64;
        let refill = self.best_bytes_per_s / per_session;
        let refill = if refill.is_finite() && refill > 0.0 { refill.ceil().min(1e6) as usize } else { 0 };
        self.restart = Some(refill.max(cut.n));
        self.forget_path_history();
        let lifted = self.ceiling.take().map(|_| None);
        self.changes.push(CeilingChange {
            t_s: o.t_s,
            n: o.n,
            ceiling: None,
            queue_ms: 0.0,
            base_rtt_ms: o.rtt_s * 1e3,
        });
        Some(lifted)
    }

    /// After `cut`, an interval with losses cannot tell whose queue it
    /// is: the cut's test is kept for the next interval, at most
    /// [`LOSSY_WAITS`] times. Whether it was kept.
    fn wait_past_losses(&mut self, cut: Cut) -> bool {
        if cut.lossy_waits >= LOSSY_WAITS {
            return false;
        }
        self.cut = Some(Cut { lossy_waits: cut.lossy_waits + 1, ..cut });
        true
    }
}

/// Bytes each session of `o` had in flight: its goodput per session times
/// its RTT (0 where unknown).
fn window_bytes(o: &PathObservation) -> f64 {
    let w = o.goodput_bytes_per_s / o.n as f64 * o.rtt_s;
    if w.is_finite() { w.max(0.0) } else { 0.0 }
}

/// After `cut`, whether `o` (with fewer sessions) shows the RTT fell by
/// less than half of what a queue of ours would have. A queue of ours
/// shrinks with N: window-limited sessions move their windows every RTT,
/// so the RTT falls about in proportion to N, down to the base.
fn queue_stayed(cut: &Cut, o: &PathObservation, base: f64) -> bool {
    let expected = base.max(cut.rtt_s * o.n as f64 / cut.n as f64);
    let fell = cut.rtt_s - o.rtt_s;
    cut.rtt_s - expected > 0.0 && fell < (cut.rtt_s - expected) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mode`, lowering the ceiling on the first full interval.
    fn one(mode: ShareMode) -> GovernorConfig {
        GovernorConfig { confirm: 1, ..GovernorConfig::new(mode) }
    }

    #[test]
    fn one_full_interval_is_not_enough_by_default() {
        let mut g = Governor::new(GovernorConfig::new(ShareMode::Fair));
        assert_eq!(g.observe(&obs(8, 100.5)), None);
        assert_eq!(g.observe(&obs(16, 210.0)), None, "a session may still be ramping up");
        assert_eq!(g.observe(&obs(16, 100.5)), None, "it was");
        assert_eq!(g.observe(&obs(16, 210.0)), None);
        assert_eq!(g.observe(&obs(16, 210.0)), Some(Some(9)), "confirmed");
        // At the new N the count starts again: the first interval may
        // still hold the queue of the 16.
        assert_eq!(g.observe(&obs(9, 160.0)), None, "16's queue draining");
        assert_eq!(g.observe(&obs(9, 160.0)), Some(Some(7)), "9 x 125 / 160, confirmed at 9");
    }

    #[test]
    fn a_path_under_a_millisecond_never_reads_room() {
        // Loopback to a rate-limited server: the RTT stays at its base
        // whatever N does, which says nothing of the path's capacity.
        let mut g = Governor::new(GovernorConfig::new(ShareMode::Fair));
        let lan = |n: usize| PathObservation { rtt_s: 0.0002, min_rtt_s: 0.0001, ..obs(n, 0.2) };
        for _ in 0..3 * g.config().release_after {
            assert_eq!(g.observe(&lan(4)), None);
        }
        assert_eq!(g.empty_intervals(), 0);
        assert!(!g.room_under(4, Some(4), Some(8)), "no room, so no budget grows on it");
    }

    #[test]
    fn empty_intervals_count_queue_free_intervals_in_a_row() {
        // Greedy too: the host's budget grows on it in every mode.
        for mode in [ShareMode::Fair, ShareMode::Greedy] {
            let mut g = Governor::new(GovernorConfig::new(mode));
            g.observe(&obs(8, 100.0));
            g.observe(&obs(8, 105.0));
            assert_eq!(g.empty_intervals(), 2, "5 ms is within a quarter of the 25 ms fair allows");
            g.observe(&obs(8, 120.0));
            assert_eq!(g.empty_intervals(), 0, "a queue");
            g.observe(&obs(8, 100.5));
            g.observe(&obs(10, 100.5));
            assert_eq!(g.empty_intervals(), 2, "the path's state, whatever our N");
            g.observe(&PathObservation { discarded: true, ..obs(10, 150.0) });
            assert_eq!(g.empty_intervals(), 2, "a discarded interval says nothing");
            g.observe(&PathObservation { demand_limited: true, ..obs(10, 100.5) });
            assert_eq!(g.empty_intervals(), 0, "sessions without demand do not show the path");
            let release = g.config().release_after;
            let b = Some(16);
            assert!(!g.room_under(6, Some(8), b), "counted from the budget's first interval");
            for _ in 0..release {
                g.observe(&obs(6, 100.5));
            }
            assert!(g.room_under(6, Some(8), b), "6 of a ceiling of 8, {release} empty intervals");
            assert!(!g.room_under(5, Some(8), b), "more than a quarter under the ceiling");
            assert!(g.room_under(7, Some(9), b), "N and ceiling moved under the same budget: still counted");
            assert!(!g.room_under(6, None, b), "no ceiling, no room");
            // A new budget counts again from its first interval.
            let b = Some(20);
            assert!(!g.room_under(7, Some(9), b), "intervals under the old budget say nothing of this one");
            for i in 1..=release {
                g.observe(&obs(7, 100.5));
                assert_eq!(g.room_under(7, Some(9), b), i == release, "{i} intervals under the new budget");
            }
            // A queue in between starts the count again.
            g.observe(&obs(7, 120.0));
            g.observe(&obs(7, 100.5));
            assert!(!g.room_under(7, Some(9), b));
        }
    }

    /// `n` sessions at `rtt_ms` moving `mbit` Mbit/s together.
    fn at(n: usize, rtt_ms: f64, mbit: f64) -> PathObservation {
        PathObservation { goodput_bytes_per_s: mbit * 1e6 / 8.0, ..obs(n, rtt_ms) }
    }

    fn obs(n: usize, rtt_ms: f64) -> PathObservation {
        // Window-limited sessions on a 100 ms path: each moves 1 MB per
        // RTT, so per-session goodput falls as the RTT grows.
        let goodput_bytes_per_s = n as f64 * 1e6 / (rtt_ms / 1e3);
        PathObservation {
            t_s: 0.0,
            n,
            rtt_s: rtt_ms / 1e3,
            min_rtt_s: 0.1,
            goodput_bytes_per_s,
            discarded: false,
            losses: 0,
            demand_limited: false,
        }
    }

    #[test]
    fn names_round_trip_and_bad_names_are_named() {
        for m in [ShareMode::Polite, ShareMode::Fair, ShareMode::Greedy] {
            assert_eq!(m.as_str().parse::<ShareMode>(), Ok(m));
        }
        assert_eq!("FAIR".parse::<ShareMode>(), Ok(ShareMode::Fair));
        let e = "nice".parse::<ShareMode>().unwrap_err().to_string();
        assert!(e.contains("polite, fair or greedy") && e.contains("nice"), "{e}");
        assert_eq!(ShareMode::default(), ShareMode::Fair);
    }

    #[test]
    fn no_queue_no_ceiling() {
        let mut g = Governor::new(one(ShareMode::Polite));
        for n in [4, 8, 16] {
            assert_eq!(g.observe(&obs(n, 100.5)), None);
        }
        assert_eq!(g.ceiling(), None);
    }

    #[test]
    fn a_standing_queue_sets_the_ceiling_where_the_path_is_full() {
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&obs(8, 100.5)), None, "no queue at 8");
        // 16 sessions with RTT 210 ms on a 100 ms path: 16 x 125 / 210 = 9.5.
        assert_eq!(g.observe(&obs(16, 210.0)), Some(Some(9)));
        // A warm-up decides nothing.
        assert_eq!(g.observe(&PathObservation { discarded: true, ..obs(10, 300.0) }), None);
        // The ceiling only falls while the queue stands: 9 x 125 / 150.
        assert_eq!(g.observe(&obs(9, 150.0)), Some(Some(7)));
        assert_eq!(g.ceiling(), Some(7));
        assert_eq!(g.changes().len(), 2);
        assert!((g.changes()[0].queue_ms - 110.0).abs() < 1e-6);
    }

    #[test]
    fn a_ceiling_cut_beside_another_copy_is_lifted_when_it_leaves() {
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&obs(1, 120.0)), None);
        assert_eq!(g.observe(&obs(3, 160.0)), Some(Some(2)), "crowded against 1, a 60 ms queue");
        assert_eq!(g.other_copy_left(20.0), Some(None));
        assert_eq!(g.ceiling(), None);
        assert_eq!(g.changes().last().map(|c| c.ceiling), Some(None));
        // Nothing to lift a second time.
        assert_eq!(g.other_copy_left(21.0), None);
    }

    #[test]
    fn a_cut_that_empties_the_path_and_costs_goodput_is_raised_at_once() {
        // Alone at 100 ms (2026-11-27): 5 sessions moved 956 Mbit/s with a
        // 57 ms queue; 5 x 125 / 157 cut to 3, which moved 710 on an empty
        // queue (their windows did not stay): raised to 4 at once.
        // (Here 4 sessions carry 905 with room, 0.947 of the best: the
        // path is not known to be ours alone; see the test below.)
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&at(4, 100.5, 905.0)), None);
        assert_eq!(g.observe(&at(5, 157.0, 956.0)), Some(Some(3)));
        assert_eq!(g.observe(&at(3, 100.2, 710.0)), Some(Some(4)));
        // At 4 the path is full again (3 ms): held.
        for _ in 0..100 {
            assert_eq!(g.observe(&at(4, 103.0, 915.0)), None);
        }
        // A cut that left a queue (another flow's) or cost little waits
        // for clean intervals as before.
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&at(3, 115.0, 713.0)), None);
        assert_eq!(g.observe(&at(4, 129.0, 740.0)), Some(Some(3)));
        assert_eq!(g.observe(&at(3, 106.0, 713.0)), None, "6 ms of queue: held");
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&at(4, 100.5, 905.0)), None);
        assert_eq!(g.observe(&at(5, 157.0, 956.0)), Some(Some(3)));
        assert_eq!(g.observe(&at(3, 100.2, 900.0)), None, "the same goodput: no overshoot");
    }

    #[test]
    fn alone_on_the_path_fair_leaves_its_own_queue_and_cuts_once_someone_takes_share() {
        // The quick path: 4 sessions carry 915 with room, 5 the 956 with a
        // queue of 25-57 ms. Nobody else is there: no cut.
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&at(4, 100.5, 915.0)), None);
        for rtt in [126.0, 131.0, 157.0, 140.0] {
            assert_eq!(g.observe(&at(5, rtt, 956.0)), None, "{rtt} ms");
        }
        // A flow arrives and takes a fifth: the queue is shared now.
        assert_eq!(g.observe(&at(5, 160.0, 760.0)), Some(Some(3)));
        // The quick backup (stop 29): 4 with room at 916, 8 with room at
        // 939 (a larger N with room says nothing about 5), then 5 at 956
        // with 26 ms: ours alone.
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&at(4, 105.4, 916.0)), None);
        assert_eq!(g.observe(&at(8, 112.4, 939.0)), None);
        assert_eq!(g.observe(&at(5, 125.7, 961.7)), None);
        assert_eq!(g.observe(&at(5, 125.7, 956.0)), None);
        // A window-limited flow present from the start: a few sessions of
        // ours had room but carried less than 0.95 of what more take.
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&at(2, 101.0, 440.0)), None);
        assert_eq!(g.observe(&at(4, 130.0, 700.0)), Some(Some(3)));
    }

    #[test]
    fn a_longer_path_is_taken_as_the_new_base_once_fewer_sessions_leave_the_rtt_as_it_was() {
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&obs(4, 100.5)), None);
        // The path's RTT steps from 100 to 400 ms; the sessions' smallest
        // RTT still says 100 ms: 8 x 125 / 400 = 2.5, but `fair` takes at
        // most half of the sessions away at once.
        assert_eq!(g.observe(&obs(8, 400.0)), Some(Some(4)));
        assert_eq!(g.path_base_rtt_s(), None);
        assert_eq!(g.take_restart(), None);
        // With 4 sessions the RTT has not moved: it is the path's.
        assert_eq!(g.observe(&obs(4, 400.0)), Some(None), "the ceiling is lifted");
        assert_eq!(g.base_rtt_s(), Some(0.4));
        // The search starts again where the old path's best goodput (4
        // sessions at 100.5 ms: 39.8 MB/s) is carried at 2.5 MB/s per
        // session, once.
        assert_eq!(g.take_restart(), Some(16));
        assert_eq!(g.take_restart(), None);
        assert_eq!(g.path_base_rtt_s(), Some(0.4));
        assert_eq!(g.changes().last().map(|c| c.base_rtt_ms), Some(400.0));
        // More sessions on the longer path: no queue, no ceiling, although
        // every session moves a quarter of what it did on the short path.
        for n in [4, 8, 16, 32] {
            assert_eq!(g.observe(&obs(n, 400.5)), None, "{n}");
        }
        // A queue on the new path is still seen once it costs us goodput
        // (not ours alone any more): 48 x 500 / 400.
        let crowded = PathObservation { goodput_bytes_per_s: 40e6, ..obs(48, 600.0) };
        assert_eq!(g.observe(&crowded), Some(Some(40)));
        // One interval reading low (a warm-up, sessions just opened) does
        // not move the re-taken base; two settled ones in a row do.
        assert_eq!(g.observe(&PathObservation { discarded: true, ..obs(40, 320.0) }), None);
        assert_eq!(g.observe(&obs(40, 330.0)), None);
        assert_eq!(g.base_rtt_s(), Some(0.4));
        assert_eq!(g.observe(&obs(40, 300.0)), None);
        assert_eq!(g.base_rtt_s(), Some(0.33));
    }

    #[test]
    fn a_queue_that_shrinks_with_n_keeps_the_base() {
        let mut g = Governor::new(one(ShareMode::Fair));
        // 8 with room at 0.9 of what 16 carry: not ours alone.
        assert_eq!(g.observe(&PathObservation { goodput_bytes_per_s: 72e6, ..obs(8, 100.5) }), None);
        assert_eq!(g.observe(&obs(16, 200.0)), Some(Some(10)));
        // 10 sessions: the RTT fell with N (16 -> 10 takes 200 to 125 ms).
        assert_eq!(g.observe(&obs(10, 125.0)), None);
        assert_eq!(g.base_rtt_s(), Some(0.1));
        assert_eq!(g.path_base_rtt_s(), None);
        assert_eq!(g.ceiling(), Some(10));
    }

    #[test]
    fn a_path_change_is_told_only_from_a_cut_that_cost_goodput_and_a_clean_interval() {
        // The path's RTT steps from 100 to 200 ms under 8 sessions (their
        // goodput halves), `fair` cuts to 8 x 125 / 200 = 5, and the RTT
        // stays: a longer path.
        let cut = |g: &mut Governor| {
            assert_eq!(g.observe(&obs(4, 100.5)), None);
            assert_eq!(g.observe(&obs(8, 100.5)), None);
            assert_eq!(g.observe(&obs(8, 200.0)), Some(Some(5)));
        };
        let mut g = Governor::new(one(ShareMode::Fair));
        cut(&mut g);
        assert_eq!(g.observe(&obs(5, 200.0)), Some(None));
        assert_eq!(g.path_base_rtt_s(), Some(0.2));
        // The smoothed RTT still climbing to the new path's after the cut
        // (the quick profile's 100 -> 400 ms step: 227 ms at the cut, 333
        // after it): a longer path too.
        let mut g = Governor::new(one(ShareMode::Fair));
        cut(&mut g);
        assert_eq!(g.observe(&obs(5, 300.0)), Some(None));
        assert_eq!(g.path_base_rtt_s(), Some(0.3));
        // Retransmits after the cut: the queue may be at its limit. The
        // ceiling holds until a clean interval decides.
        let lossy = |n, rtt| PathObservation { losses: 3, ..obs(n, rtt) };
        let mut g = Governor::new(one(ShareMode::Fair));
        cut(&mut g);
        assert_eq!(g.observe(&lossy(5, 200.0)), None, "held");
        assert_eq!(g.observe(&lossy(5, 200.0)), None, "held");
        assert_eq!(g.observe(&obs(5, 200.0)), Some(None));
        assert_eq!(g.path_base_rtt_s(), Some(0.2));
        // Losses that last: the test is given up, the queue cut again.
        let mut g = Governor::new(one(ShareMode::Fair));
        cut(&mut g);
        for _ in 0..LOSSY_WAITS {
            assert_eq!(g.observe(&lossy(5, 200.0)), None, "held");
        }
        assert_eq!(g.observe(&lossy(5, 200.0)), Some(Some(3)));
        assert_eq!(g.path_base_rtt_s(), None);
        // A queue someone else keeps while our goodput stays near its best
        // (the best so far was 2 sessions' 19.9 MB/s; 8 move 40 MB/s now,
        // each less than one of the 2 did; the share bench's two copies):
        // not a path to fill. The cut stands and the queue is cut again.
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&obs(2, 100.5)), None);
        assert_eq!(g.observe(&obs(8, 200.0)), Some(Some(5)));
        assert_eq!(g.observe(&obs(5, 200.0)), Some(Some(3)));
        assert_eq!(g.path_base_rtt_s(), None);
        // Our goodput fell as others took share (one of four copies, stop
        // 39): 4 sessions moved 400 Mbit/s at 150 ms (1.9 MB in flight
        // each); 8 move 250 at 200 ms, cut to 5; 5 move 160 at 195 ms (0.8
        // MB each). A longer path would have left each session its window:
        // the queue is someone else's, not a path to re-base on.
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&at(4, 150.0, 400.0)), None);
        assert_eq!(g.observe(&at(8, 200.0, 250.0)), Some(Some(5)));
        assert_eq!(g.observe(&at(5, 195.0, 160.0)), Some(Some(3)), "the queue is cut again, not re-based on");
        assert_eq!(g.path_base_rtt_s(), None);
    }

    #[test]
    fn a_queue_others_keep_full_is_cut_on_alone_once_a_cut_left_it() {
        // Four cubic flows keep the queue full from the start (the share
        // bench, stop 36): 4 of ours move 269 Mbit/s early on, 8 move 373
        // (each less: a cut to 8 x 125 / 196 = 5), and then 5 hold the
        // 80 ms queue while their windows grow, each moving more than the
        // early 4 did: no crowding to see.
        let run = |g: &mut Governor| {
            assert_eq!(g.observe(&at(4, 160.0, 269.0)), None);
            assert_eq!(g.observe(&at(8, 185.0, 373.0)), None, "one full interval");
            assert_eq!(g.observe(&at(8, 196.0, 370.0)), Some(Some(5)));
            let mut ceilings = Vec::new();
            for mbit in [400.0, 412.0, 425.0, 421.0, 428.0, 430.0, 440.0, 445.0] {
                let n = g.ceiling().unwrap();
                if let Some(c) = g.observe(&at(n, 186.0, mbit * n as f64 / 5.0)) {
                    ceilings.push(c);
                }
            }
            ceilings
        };
        let mut g = Governor::new(GovernorConfig::new(ShareMode::Fair));
        let cuts = run(&mut g);
        // The cut's test saw the queue stay (186 ms after 196, where a
        // queue of ours would have fallen to 122): someone else's. From
        // then on the queue alone cuts, by at most half each time.
        assert_eq!(cuts.first(), Some(&Some(3)), "{cuts:?}");
        assert!(g.ceiling().is_some_and(|c| c <= 2), "{cuts:?}");
        assert_eq!(g.path_base_rtt_s(), None, "not taken for a longer path");
        // Once the path shows room the flag is gone: a queue needs the
        // crowding evidence again.
        let n = g.ceiling().unwrap();
        assert_eq!(g.observe(&at(n, 100.5, 300.0)), None);
        assert!(!g.shared);
    }

    #[test]
    fn when_the_queue_others_kept_goes_the_ceiling_is_lifted_and_the_search_restarts() {
        // Polite cuts on the queue alone: 16 -> 8 (the first ceiling),
        // then 8 -> 4; at 4 a queue of 8 ms stands (within the 10 ms
        // allowed: no cut), kept by someone else.
        let cut_to_4 = || {
            let mut g = Governor::new(one(ShareMode::Polite));
            assert_eq!(g.observe(&obs(8, 100.5)), None);
            assert_eq!(g.observe(&obs(16, 210.0)), Some(Some(8)));
            assert_eq!(g.observe(&obs(8, 200.0)), Some(Some(4)));
            assert_eq!(g.observe(&obs(4, 108.0)), None);
            assert_eq!(g.observe(&obs(4, 108.0)), None);
            g
        };
        let mut g = cut_to_4();
        // It ends: one interval of room is not enough, two are.
        assert_eq!(g.observe(&obs(4, 100.5)), None);
        assert_eq!(g.observe(&obs(4, 100.5)), Some(None));
        assert_eq!(g.ceiling(), None);
        assert_eq!(g.take_restart(), Some(8), "from the first ceiling of the cuts");
        assert_eq!(g.take_restart(), None, "once");
        assert_eq!(g.changes().last().map(|c| (c.n, c.ceiling)), Some((4, None)));
        // Room with losses: a queue that overflowed and emptied (ours, too).
        let mut g = cut_to_4();
        assert_eq!(g.observe(&obs(4, 100.5)), None);
        assert_eq!(g.observe(&PathObservation { losses: 3, ..obs(4, 100.5) }), None);
        assert_eq!(g.observe(&obs(4, 100.5)), None, "the count starts again");
        assert_eq!(g.observe(&obs(4, 100.5)), Some(None));
        // Room at another N than the one the queue stood at: our own N
        // moved, so the queue may have been ours.
        let mut g = cut_to_4();
        assert_eq!(g.observe(&obs(3, 100.5)), None);
        assert_eq!(g.observe(&obs(3, 100.5)), None);
        assert_eq!(g.ceiling(), Some(4));
        // No queue ever stood at this N: nothing left.
        let mut g = Governor::new(one(ShareMode::Polite));
        assert_eq!(g.observe(&obs(16, 210.0)), Some(Some(8)));
        for _ in 0..3 {
            assert_eq!(g.observe(&obs(8, 100.5)), None);
        }
        assert_eq!(g.ceiling(), Some(8));
        // Nor for one interval only (the RTT's noise).
        let mut g = Governor::new(one(ShareMode::Polite));
        assert_eq!(g.observe(&obs(16, 210.0)), Some(Some(8)));
        for rtt in [108.0, 100.5, 100.5, 100.5] {
            assert_eq!(g.observe(&obs(8, rtt)), None);
        }
        assert_eq!(g.take_restart(), None);
        // With no ceiling (a search that ended beside another copy, 5 + 5
        // sessions where 9 fill the path): the search starts again above
        // the N held.
        let mut g = Governor::new(one(ShareMode::Fair));
        for rtt in [111.0, 111.0, 100.5] {
            assert_eq!(g.observe(&obs(5, rtt)), None);
        }
        assert_eq!(g.take_restart(), None);
        assert_eq!(g.observe(&obs(5, 100.5)), None, "no ceiling to lift");
        assert_eq!(g.take_restart(), Some(5));
        assert!(g.changes().is_empty());
    }

    #[test]
    fn raises_wait_a_random_part_that_differs_between_seeds() {
        // Alone at the knee (as below): cut 5 -> 4, then the queue goes.
        let release = GovernorConfig::new(ShareMode::Fair).release_after;
        let wait = |seed: u64| {
            let mut g = Governor::new(GovernorConfig { stagger_seed: seed, ..one(ShareMode::Fair) });
            assert_eq!(g.observe(&obs(4, 100.5)), None);
            assert_eq!(g.observe(&obs(5, 150.0)), Some(Some(4)));
            (1..=100).find(|_| g.observe(&obs(4, 101.5)).is_some()).unwrap()
        };
        assert_eq!(wait(0), release, "no seed: exactly release_after");
        let waits: std::collections::BTreeSet<usize> = (1..=16).map(wait).collect();
        assert!(waits.iter().all(|w| (release..=2 * release).contains(w)), "{waits:?}");
        assert!(waits.len() >= 3, "{waits:?}");
    }

    #[test]
    fn the_shared_test_waits_for_an_interval_without_losses() {
        // As above, but the first interval after the cut lost segments
        // (the queue overflowed): the test waits for the next one.
        let mut g = Governor::new(GovernorConfig::new(ShareMode::Fair));
        assert_eq!(g.observe(&at(4, 160.0, 269.0)), None);
        assert_eq!(g.observe(&at(8, 185.0, 373.0)), None);
        assert_eq!(g.observe(&at(8, 196.0, 370.0)), Some(Some(5)));
        assert_eq!(g.observe(&PathObservation { losses: 900, ..at(5, 196.0, 400.0) }), None);
        assert!(!g.shared, "an interval with losses cannot tell");
        assert_eq!(g.observe(&at(5, 190.0, 405.0)), None);
        assert!(g.shared, "the next one without losses does");
        // Three lossy intervals at most: then the test is given up.
        let mut g = Governor::new(GovernorConfig::new(ShareMode::Fair));
        assert_eq!(g.observe(&at(4, 160.0, 269.0)), None);
        assert_eq!(g.observe(&at(8, 185.0, 373.0)), None);
        assert_eq!(g.observe(&at(8, 196.0, 370.0)), Some(Some(5)));
        for _ in 0..=LOSSY_WAITS {
            g.observe(&PathObservation { losses: 900, ..at(5, 196.0, 400.0) });
        }
        g.observe(&at(5, 190.0, 405.0));
        assert!(!g.shared, "given up");
    }

    #[test]
    fn the_search_restarts_where_the_old_best_is_carried() {
        // The best goodput on the old path: 8 sessions' 79.6 MB/s. On the
        // longer one 16 move 2.5 MB/s each: 32 of them carry it.
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&obs(4, 100.5)), None);
        assert_eq!(g.observe(&obs(8, 100.5)), None);
        assert_eq!(g.observe(&obs(16, 400.0)), Some(Some(8)));
        assert_eq!(g.observe(&obs(8, 400.0)), Some(None));
        assert_eq!(g.take_restart(), Some(32));
    }

    #[test]
    fn a_full_path_is_not_raised_into_the_queue_the_cut_took_away() {
        // Alone at 100 ms: 5 sessions keep 50 ms of queue, 4 keep 3 ms,
        // and one more window (103 / 4 = 26 ms) would pass the 25 ms
        // allowed: the ceiling stays at 4 however long the path stays so.
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&obs(4, 100.5)), None);
        assert_eq!(g.observe(&obs(5, 150.0)), Some(Some(4)));
        for _ in 0..100 {
            assert_eq!(g.observe(&obs(4, 103.0)), None);
        }
        // The queue goes (the other traffic that kept it left, or the
        // path got faster): the path has room, and the ceiling rises.
        let release = GovernorConfig::new(ShareMode::Fair).release_after;
        for _ in 0..release - 1 {
            assert_eq!(g.observe(&obs(4, 101.5)), None);
        }
        assert_eq!(g.observe(&obs(4, 101.5)), Some(Some(5)));
        // With more sessions one window is a smaller queue: 16 sessions
        // with 10 ms (10 + 110 / 16 = 17 ms) may still rise.
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&obs(8, 100.5)), None);
        assert_eq!(g.observe(&obs(20, 155.0)), Some(Some(16)));
        for _ in 0..release - 1 {
            assert_eq!(g.observe(&obs(16, 110.0)), None);
        }
        assert_eq!(g.observe(&obs(16, 110.0)), Some(Some(20)));
    }

    #[test]
    fn a_raise_that_brings_the_queue_back_waits_longer_before_the_next() {
        // Alone at the knee: 4 sessions keep no queue, 5 keep 40 ms.
        let mut g = Governor::new(one(ShareMode::Fair));
        let release = GovernorConfig::new(ShareMode::Fair).release_after;
        assert_eq!(g.observe(&obs(4, 100.5)), None);
        assert_eq!(g.observe(&obs(5, 140.0)), Some(Some(4)));
        let clean_until_raised = |g: &mut Governor| {
            let mut clean = 0;
            loop {
                clean += 1;
                if let Some(c) = g.observe(&obs(4, 100.5)) {
                    assert_eq!(c, Some(5));
                    return clean;
                }
                assert!(clean < 100, "never raised");
            }
        };
        assert_eq!(clean_until_raised(&mut g), release);
        // The raise let the queue back in: cut again, and the next raise
        // waits twice as long, then four times...
        assert_eq!(g.observe(&obs(5, 140.0)), Some(Some(4)));
        assert_eq!(clean_until_raised(&mut g), 2 * release);
        assert_eq!(g.observe(&obs(5, 140.0)), Some(Some(4)));
        assert_eq!(clean_until_raised(&mut g), 4 * release);
        // ...until a raise holds (the path had room at 5: the other
        // traffic left): then the wait is back to its start.
        for _ in 0..release - 1 {
            assert_eq!(g.observe(&obs(5, 100.5)), None);
        }
        assert_eq!(g.observe(&obs(5, 100.5)), Some(Some(6)));
        for _ in 0..release - 1 {
            assert_eq!(g.observe(&obs(6, 100.5)), None);
        }
        assert_eq!(g.observe(&obs(6, 100.5)), Some(Some(7)));
    }

    #[test]
    fn polite_keeps_yielding_to_a_queue_whoever_keeps_it() {
        let mut g = Governor::new(one(ShareMode::Polite));
        assert_eq!(g.observe(&obs(4, 100.5)), None);
        assert_eq!(g.observe(&obs(8, 400.0)), Some(Some(2)));
        assert_eq!(g.observe(&obs(2, 400.0)), Some(Some(1)));
        assert_eq!(g.path_base_rtt_s(), None);
    }

    #[test]
    fn polite_allows_less_queue_than_fair() {
        let mut fair = Governor::new(one(ShareMode::Fair));
        let mut polite = Governor::new(one(ShareMode::Polite));
        assert_eq!(fair.observe(&obs(8, 118.0)), None, "18 ms is within a quarter of 100 ms");
        assert_eq!(polite.observe(&obs(8, 118.0)), Some(Some(7)), "8 x 105 / 118 = 7.1");
    }

    #[test]
    fn greedy_never_sets_a_ceiling() {
        let mut g = Governor::new(GovernorConfig::new(ShareMode::Greedy));
        for n in [4, 16, 64] {
            assert_eq!(g.observe(&obs(n, 400.0)), None);
        }
        assert_eq!(g.ceiling(), None);
        assert_eq!(g.base_rtt_s(), Some(0.1));
    }

    #[test]
    fn the_ceiling_rises_again_after_clean_intervals_at_it() {
        let mut g = Governor::new(one(ShareMode::Fair));
        assert_eq!(g.observe(&obs(8, 100.5)), None);
        assert_eq!(g.observe(&obs(16, 250.0)), Some(Some(8)));
        for _ in 0..3 {
            assert_eq!(g.observe(&obs(8, 101.0)), None);
        }
        assert_eq!(g.observe(&obs(8, 101.0)), Some(Some(10)));
    }

    #[test]
    fn fair_ignores_a_queue_while_sessions_do_not_crowd_each_other() {
        // A server that paces each connection: the RTT grows, but every
        // added session adds as much goodput as the others carry.
        let mut g = Governor::new(one(ShareMode::Fair));
        for n in [1, 2, 4, 8, 16] {
            let o =
                PathObservation { goodput_bytes_per_s: n as f64 * 50e6, ..obs(n, 110.0 + n as f64 * 10.0) };
            assert_eq!(g.observe(&o), None, "{n}");
        }
        let mut polite = Governor::new(one(ShareMode::Polite));
        let o = PathObservation { goodput_bytes_per_s: 16.0 * 50e6, ..obs(16, 270.0) };
        assert!(polite.observe(&o).is_some(), "polite acts on the queue alone");
    }

    #[test]
    fn a_queue_that_cannot_be_placed_is_probed_by_taking_a_quarter_away() {
        // Others yield to us: our sessions move as much per session as
        // ever while a 50 ms queue stands (four copies, three of which
        // had cut). After PROBE_AFTER such intervals a quarter goes; the
        // queue stays: someone else's, cut on from then on.
        let mut g = Governor::new(one(ShareMode::Fair));
        for i in 0..PROBE_AFTER - 1 {
            assert_eq!(g.observe(&at(4, 150.0, 400.0)), None, "{i}");
        }
        assert_eq!(g.observe(&at(4, 150.0, 400.0)), Some(Some(3)), "the probe");
        assert_eq!(g.observe(&at(3, 150.0, 390.0)), Some(Some(2)), "someone else's queue");
        assert_eq!(g.path_base_rtt_s(), None);
        // A server's pace: the RTT grows with N, but every session adds
        // its share. The probe costs a quarter of the goodput: it is taken
        // back and not made again on this path.
        let mut g = Governor::new(one(ShareMode::Fair));
        let paced = |n: usize| PathObservation {
            goodput_bytes_per_s: n as f64 * 50e6,
            ..obs(n, 110.0 + n as f64 * 10.0)
        };
        for i in 0..PROBE_AFTER - 1 {
            assert_eq!(g.observe(&paced(16)), None, "{i}");
        }
        assert_eq!(g.observe(&paced(16)), Some(Some(12)), "the probe");
        assert_eq!(g.observe(&paced(12)), Some(None), "taken back");
        for i in 0..3 * PROBE_AFTER {
            assert_eq!(g.observe(&paced(16)), None, "{i}");
        }
        // Never at or below n_min (the probe's target would be under it).
        let mut g = Governor::new(GovernorConfig { n_min: 4, ..one(ShareMode::Fair) });
        for i in 0..3 * PROBE_AFTER {
            assert_eq!(g.observe(&at(4, 150.0, 400.0)), None, "{i}");
        }
        // Intervals with losses do not count towards a probe.
        let mut g = Governor::new(one(ShareMode::Fair));
        for i in 0..3 * PROBE_AFTER {
            let o = PathObservation { losses: if i % 2 == 0 { 5 } else { 0 }, ..at(4, 150.0, 400.0) };
            assert_eq!(g.observe(&o), None, "{i}");
        }
    }

    #[test]
    fn polite_against_a_full_queue_falls_to_n_min() {
        let mut g = Governor::new(one(ShareMode::Polite));
        let mut n = 16;
        for _ in 0..10 {
            if let Some(Some(c)) = g.observe(&obs(n, 200.0)) {
                n = c;
            }
        }
        assert_eq!(g.ceiling(), Some(1));
    }

    #[test]
    fn a_short_path_is_left_alone() {
        let mut g = Governor::new(one(ShareMode::Polite));
        let o = PathObservation { min_rtt_s: 0.00002, ..obs(8, 16.0) };
        assert_eq!(g.observe(&o), None, "16 ms over a 20 us path is the server's pace, not a queue");
    }

    #[test]
    fn bad_rtts_are_ignored() {
        let mut g = Governor::new(one(ShareMode::Fair));
        for rtt in [f64::NAN, -1.0, 0.0, f64::INFINITY] {
            let o = PathObservation {
                t_s: 0.0,
                n: 8,
                rtt_s: rtt,
                min_rtt_s: rtt,
                goodput_bytes_per_s: rtt,
                discarded: false,
                losses: 0,
                demand_limited: false,
            };
            assert_eq!(g.observe(&o), None);
        }
        assert_eq!(g.base_rtt_s(), None);
    }
}
