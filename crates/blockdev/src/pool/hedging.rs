//! Hedging (see [`Hedge`]): idle sessions duplicate requests that have been
//! in flight on another session far longer than usual.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::config::Hedge;
use super::queue::{Job, Op, Reply};
use super::{Shared, lock};

/// A request executing on a session, as seen by idle sessions looking for
/// stragglers.
pub(super) struct Running {
    id: u64,
    session: usize,
    op: Op,
    reply: Arc<Reply>,
    started: Instant,
    hedged: bool,
}

/// How often an idle worker looks for stragglers while the queue is empty.
pub(super) const HEDGE_POLL: Duration = Duration::from_millis(100);
/// A request is a straggler after 4 x the mean completion time, clamped to
/// [HEDGE_MIN, HEDGE_MAX]. The cap matters at the end of a copy: the mean
/// then includes queueing behind each session's own requests, and the last
/// requests of a starved connection could otherwise hold the copy for many
/// seconds while the other sessions sit idle (hedging only runs on idle
/// sessions, so duplicates cost bandwidth nobody else is using).
const HEDGE_MIN: Duration = Duration::from_millis(500);
const HEDGE_MAX: Duration = Duration::from_secs(2);

impl Shared {
    /// Hedging applies to this operation.
    pub(super) fn hedgeable(&self, op: &Op) -> bool {
        match (self.config.hedge, op) {
            (Hedge::Off, _) => false,
            (_, Op::Read { .. }) => true,
            (Hedge::ReadsAndWrites, Op::Write { .. }) => true,
            _ => false,
        }
    }

    /// Records that `job` started on `session` (if it may be hedged);
    /// returns the id to pass to [`finished`](Self::finished).
    pub(super) fn started(&self, session: usize, job: &Job, at: Instant) -> u64 {
        let id = self.next_running_id.fetch_add(1, Ordering::Relaxed);
        if self.hedgeable(&job.op) {
            lock(&self.running).push(Running {
                id,
                session,
                op: job.op.clone(),
                reply: Arc::clone(&job.reply),
                started: at,
                hedged: job.hedge,
            });
        }
        id
    }

    /// The request `id` finished after `took`; a completion that moved
    /// `payload` bytes (more than 0) counts in the mean completion time.
    pub(super) fn finished(&self, id: u64, payload: u64, took: Duration) {
        lock(&self.running).retain(|r| r.id != id);
        if payload > 0 {
            let us = took.as_micros().min(u128::from(u64::MAX)) as u64;
            let old = self.mean_us.load(Ordering::Relaxed);
            let mean = if old == 0 { us } else { old - old / 8 + us / 8 };
            self.mean_us.store(mean, Ordering::Relaxed);
        }
    }

    /// The oldest straggler running on another session than `mine`, marked
    /// hedged and returned as a job to duplicate.
    pub(super) fn straggler(&self, mine: usize) -> Option<Job> {
        let mean = Duration::from_micros(self.mean_us.load(Ordering::Relaxed));
        let limit = (mean * 4).clamp(HEDGE_MIN, HEDGE_MAX);
        let now = Instant::now();
        let mut running = lock(&self.running);
        let r = running
            .iter_mut()
            .filter(|r| {
                !r.hedged && r.session != mine && now.duration_since(r.started) > limit && !r.reply.is_done()
            })
            .filter(|r| self.hedgeable(&r.op))
            .min_by_key(|r| r.started)?;
        r.hedged = true;
        self.hedged.fetch_add(1, Ordering::Relaxed);
        self.faults.retried.fetch_add(1, Ordering::Relaxed);
        Some(Job {
            op: r.op.clone(),
            reply: Arc::clone(&r.reply),
            attempts: 0,
            fresh_from: 0,
            hedge: true,
            ahead: false,
            transient: 0,
        })
    }
}
