//! Hedging (see [`Hedge`]): idle sessions duplicate requests that have been
//! in flight on another session far longer than usual. A large straggler is
//! duplicated in parts ([`PART_MIN`] or more each, [`PARTS_MAX`] at most)
//! that several idle sessions carry side by side; their answers are put
//! together and answer the request, unless the original answered first.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::config::Hedge;
use super::queue::{Done, Job, Op, Reply};
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

/// A straggler of at least twice this many bytes is duplicated in parts of
/// at least this size. At the end of a copy over a lossy path (1 Gbit/s,
/// 50 ms one way, 0.1 % loss: sessions at 2-9 Mbit/s each, 2-4 MiB
/// requests three or four deep) a few sessions still had megabytes queued
/// at the server while the others sat idle, and the last tenth of the copy
/// took 6-19 s; a whole duplicate is as slow on any one session of that
/// path, parts on several idle ones are not (243 MiB copies: 16.5-26 s
/// before, 9.5-12 s with parts on idle sessions only).
const PART_MIN: u32 = 256 << 10;
/// At most this many parts per straggler.
const PARTS_MAX: u32 = 8;

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

    /// How many of the requests in flight on `session` nobody needs any
    /// more ([`Reply::unwanted`]: the originals of hedged stragglers, or
    /// parts of one whose original answered). Only hedgeable requests are
    /// tracked; any other is taken as needed.
    pub(super) fn unwanted_in_flight(&self, session: usize) -> usize {
        lock(&self.running).iter().filter(|r| r.session == session && r.reply.unwanted()).count()
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

    /// For session `mine`, when it is `idle` (nothing in flight: a free
    /// slot of a busy session would queue the duplicate behind that
    /// session's own requests): a part of a straggler's duplicate waiting
    /// for an idle session, or else the oldest straggler running on
    /// another session, marked hedged and returned as a job to duplicate:
    /// the whole request, or the first of its parts (the others wait for
    /// other idle sessions).
    pub(super) fn straggler(self: &Arc<Self>, mine: usize, idle: bool) -> Option<Job> {
        if !idle {
            return None;
        }
        {
            let mut parts = lock(&self.parts);
            while let Some((parent, job)) = parts.pop_front() {
                // Dropping a part of an answered request ends its gathering.
                if !parent.is_done() {
                    return Some(job);
                }
            }
        }
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
        let (op, reply) = (r.op.clone(), Arc::clone(&r.reply));
        tracing::debug!(
            "session {mine} hedges {:?} bytes at {:?} running {:.2} s on session {}",
            op.payload(),
            op.offset(),
            now.duration_since(r.started).as_secs_f64(),
            r.session
        );
        drop(running);
        self.hedged.fetch_add(1, Ordering::Relaxed);
        self.faults.retried.fetch_add(1, Ordering::Relaxed);
        let ranges = split(&op, self.block_min);
        if ranges.len() < 2 {
            return Some(Job { hedge: true, ..Job::new(op, reply, false) });
        }
        let mut first = None;
        let mut parts = Vec::with_capacity(ranges.len());
        for (at, len) in ranges {
            let op = match &op {
                Op::Read { offset, .. } => Op::Read { offset: offset + u64::from(at), len },
                Op::Write { offset, data, fua } => Op::Write {
                    offset: offset + u64::from(at),
                    data: data.slice(at as usize..(at + len) as usize),
                    fua: *fua,
                },
                _ => unreachable!("split only cuts reads and writes"),
            };
            let (tx, rx) = tokio::sync::oneshot::channel();
            parts.push(rx);
            let job = Job { hedge: true, part: true, ..Job::new(op, Reply::new(tx), false) };
            match first {
                None => first = Some(job),
                Some(_) => lock(&self.parts).push_back((Arc::clone(&reply), job)),
            }
        }
        let this = Arc::clone(self);
        let payload = op.payload();
        let read = matches!(op, Op::Read { .. });
        tokio::spawn(async move {
            let mut data = BytesMut::with_capacity(if read { payload as usize } else { 0 });
            for rx in parts {
                // A part that failed or was dropped: the original decides.
                match rx.await {
                    Ok(Ok(Done::Data(d))) if read => data.extend_from_slice(&d),
                    Ok(Ok(Done::Unit)) if !read => {}
                    _ => return,
                }
            }
            if read && data.len() as u64 != payload {
                return;
            }
            let done = if read { Done::Data(data.freeze()) } else { Done::Unit };
            let won = reply.deliver(Ok(done));
            tracing::debug!("parts of {payload} bytes done; they answered first: {won}");
            if won {
                this.completed_bytes.fetch_add(payload, Ordering::Relaxed);
                this.hedges_won.fetch_add(1, Ordering::Relaxed);
            }
        });
        first
    }
}

/// The parts a straggler `op` is duplicated in, as (offset within it,
/// length): at least [`PART_MIN`] bytes each and a multiple of `align`, at
/// most [`PARTS_MAX`]; one part (no split) for a smaller request and for
/// other operations.
fn split(op: &Op, align: u32) -> Vec<(u32, u32)> {
    let len = match op {
        Op::Read { len, .. } => *len,
        Op::Write { data, .. } => u32::try_from(data.len()).unwrap_or(0),
        _ => return vec![(0, 0)],
    };
    let align = align.max(1);
    let parts = (len / PART_MIN).clamp(1, PARTS_MAX);
    let step = len.div_ceil(parts).div_ceil(align).saturating_mul(align).max(align);
    let mut out = Vec::new();
    let mut at = 0u32;
    while at < len {
        let take = step.min(len - at);
        out.push((at, take));
        at += take;
    }
    if out.is_empty() {
        out.push((0, len));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(len: u32) -> Op {
        Op::Read { offset: 1 << 30, len }
    }

    #[test]
    fn a_large_straggler_is_split_into_aligned_parts_that_cover_it() {
        for (len, align, parts) in [
            (2 << 20, 512, 8),
            (4 << 20, 4096, 8),
            (512 << 10, 512, 2),
            (768 << 10, 512, 3),
            (3 << 20, 3 << 20, 1),
            ((2 << 20) + 512, 512, 8),
            (511 << 10, 512, 1),
            (64 << 10, 512, 1),
        ] {
            let p = split(&read(len), align);
            assert_eq!(p.len(), parts, "{len} / {align}: {p:?}");
            let mut at = 0;
            for (o, l) in &p {
                assert_eq!(*o, at, "contiguous");
                assert!(*l > 0 && (o % align == 0), "aligned: {p:?}");
                at += l;
            }
            assert_eq!(at, len, "covers it");
            assert!(p.len() == 1 || p.iter().all(|(_, l)| *l >= PART_MIN || *l == len - p.last().unwrap().0));
        }
        assert_eq!(split(&Op::Flush, 512).len(), 1);
    }
}
