//! The workers: one per request slot of each session, pulling requests
//! from the shared queue while the session is active.
//!
//! Each request gets a deadline ([`RetryPolicy::io_timeout`](super::RetryPolicy::io_timeout)):
//! past it the session is taken for stuck, retired (its requests given up
//! and sent again elsewhere) and replaced. A connection failure retires
//! the session the same way. A transient server error sends the request
//! again after a short wait, a few times; any other answer is the
//! caller's.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::config::Hedge;
use super::hedging::HEDGE_POLL;
use super::ledger::Data;
use super::queue::{Done, Job, Op, execute};
use super::send_room;
use super::{Session, Shared, lock};
use crate::endpoint::{EndpointError, Result};

impl Shared {
    /// Slot `slot` of `session` may take work: the session is active and
    /// the slot is within the depth asked for ([`Pool::set_depth`](super::Pool::set_depth)).
    fn slot_open(&self, session: &Session, slot: usize) -> bool {
        session.active.load(Ordering::SeqCst) && slot < self.depth.load(Ordering::SeqCst)
    }

    /// How long a slot of `session`, which has requests in flight, waits
    /// before it looks for work again when the session has no room to send
    /// ([`send_room`]); `None` when it may take work.
    fn send_wait(&self, session: &Session) -> Option<Duration> {
        let b = session.endpoint.send_backlog().filter(|b| !send_room::has_room(b))?;
        Some(send_room::poll(&b))
    }

    /// How long `op` may take before its session is taken for stuck.
    pub(super) fn deadline(&self, op: &Op) -> Option<Duration> {
        match op {
            Op::Flush => self.config.retry.flush_timeout(),
            _ => self.config.retry.io_timeout,
        }
    }

    /// Runs `op` on `ep` within its deadline; `Err(None)` when the deadline passed.
    pub(super) async fn run(
        &self,
        ep: &dyn crate::endpoint::Endpoint,
        op: &Op,
    ) -> std::result::Result<Done, Option<EndpointError>> {
        let r = match self.deadline(op) {
            Some(d) => match tokio::time::timeout(d, execute(ep, op)).await {
                Ok(r) => r,
                Err(_) => return Err(None),
            },
            None => execute(ep, op).await,
        };
        r.map_err(Some)
    }

    /// The error of a request that passed its deadline on a session.
    pub(super) fn timed_out(&self, op: &Op) -> EndpointError {
        self.faults.timeouts.fetch_add(1, Ordering::Relaxed);
        let d = self.deadline(op).unwrap_or_default();
        EndpointError::io(&self.name, op.offset(), format!("no answer within {d:?} (the request deadline)"))
    }

    /// Keeps an acknowledged write until a flush covers it.
    fn keep(self: &Arc<Self>, session: &Session, op: &Op) {
        if !self.can_flush {
            return;
        }
        let (offset, len, data) = match op {
            Op::Write { offset, data, fua: false } => (*offset, data.len() as u64, Data::Bytes(data.clone())),
            Op::Zero { offset, len, may_trim } => (*offset, *len, Data::Zero { may_trim: *may_trim }),
            _ => return,
        };
        let seq = self.acks.fetch_add(1, Ordering::SeqCst) + 1;
        let held = {
            let mut l = lock(&self.ledger);
            l.record(offset, len, session.index, seq, data);
            l.held()
        };
        if held > self.config.retry.unflushed_limit && !self.self_flushing.swap(true, Ordering::SeqCst) {
            self.flush_in_background();
        }
    }

    /// A transient server error: queue `job` again after a growing wait,
    /// or answer with `err` once it had its share of retries.
    fn retry_transient(self: &Arc<Self>, job: Job, err: EndpointError) {
        if job.transient >= self.config.retry.transient_retries {
            job.reply.deliver(Err(err));
            return;
        }
        self.faults.transient.fetch_add(1, Ordering::Relaxed);
        self.faults.retried.fetch_add(1, Ordering::Relaxed);
        tracing::debug!("retrying after a transient error: {err}");
        let wait = Duration::from_millis(20u64 << job.transient.min(6));
        let this = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            this.push(Job { transient: job.transient + 1, hedge: false, ..job }, true);
        });
    }
}

/// One request slot of one session: pulls requests while the session is
/// active, and duplicates stragglers of other sessions when the queue is
/// empty (see [`Hedge`]).
pub(super) async fn worker(shared: Arc<Shared>, session: Arc<Session>, slot: usize) {
    let mut roles = shared.roles.subscribe();
    let hedging = shared.config.hedge != Hedge::Off;
    loop {
        if shared.closed.load(Ordering::SeqCst) || session.failed.load(Ordering::SeqCst) {
            return;
        }
        if !shared.slot_open(&session, slot) {
            if roles.changed().await.is_err() {
                return;
            }
            continue;
        }
        if session.in_flight.load(Ordering::Relaxed) > 0
            && let Some(wait) = shared.send_wait(&session)
        {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                r = roles.changed() => if r.is_err() { return },
            }
            continue;
        }
        let waiting = Instant::now();
        let job = tokio::select! {
            j = shared.pop() => match j { Some(j) => j, None => return },
            r = roles.changed() => { if r.is_err() { return } continue }
            _ = tokio::time::sleep(HEDGE_POLL), if hedging => {
                match shared.straggler(session.index, session.in_flight.load(Ordering::Relaxed) == 0) {
                    Some(j) => j,
                    None => {
                        shared.idle_slot_us.fetch_add(waiting.elapsed().as_micros() as u64, Ordering::Relaxed);
                        continue;
                    }
                }
            }
        };
        // An open slot with nothing to do: demand, not the path, set the pace.
        shared.idle_slot_us.fetch_add(waiting.elapsed().as_micros() as u64, Ordering::Relaxed);
        if !shared.slot_open(&session, slot) || session.failed.load(Ordering::SeqCst) {
            if !job.hedge {
                shared.push(job, true);
            }
            continue;
        }
        if job.reply.is_done() {
            continue;
        }
        // The slots of one session wait for work together; the others may
        // have taken theirs while this one waited. Claimed first, so two
        // slots taking work at once cannot both see the session empty.
        let others = session.in_flight.fetch_add(1, Ordering::Relaxed);
        if !job.hedge
            && others > 0
            && let Some(wait) = shared.send_wait(&session)
        {
            session.in_flight.fetch_sub(1, Ordering::Relaxed);
            shared.push(job, true);
            tokio::time::sleep(wait).await;
            continue;
        }
        let started = Instant::now();
        let id = shared.started(session.index, &job, started);
        job.reply.running.fetch_add(1, Ordering::SeqCst);
        let r = shared.run(&*session.endpoint, &job.op).await;
        session.in_flight.fetch_sub(1, Ordering::Relaxed);
        job.reply.running.fetch_sub(1, Ordering::SeqCst);
        let payload = job.op.payload();
        // Only completions count in the mean completion time.
        shared.finished(id, if r.is_ok() { payload } else { 0 }, started.elapsed());
        if r.is_err() && shared.closed.load(Ordering::SeqCst) && job.reply.unwanted() {
            // A straggler nobody needs, cut off when the pool closed (see
            // `close`): not a session failure.
            return;
        }
        let r: Result<Done> = match r {
            Ok(d) => Ok(d),
            Err(None) => {
                let e = shared.timed_out(&job.op);
                shared.session_failed(&session, job, e, true);
                return;
            }
            Err(Some(e)) => Err(e),
        };
        match r {
            Err(e) if e.is_connection() => {
                shared.session_failed(&session, job, e, false);
                return;
            }
            Ok(done) => {
                shared.proven(&session);
                shared.keep(&session, &job.op);
                // Count before answering, so a caller that reads the
                // counters after its request returns sees this one.
                if let Some(tx) = lock(&job.reply.tx).take() {
                    session.completed_bytes.fetch_add(payload, Ordering::Relaxed);
                    if !job.part {
                        shared.completed_bytes.fetch_add(payload, Ordering::Relaxed);
                    }
                    if job.hedge && !job.part {
                        shared.hedges_won.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = tx.send(Ok(done));
                }
            }
            Err(e) => {
                // A protocol or server error: the answer, unless a copy of
                // the request is still running and may succeed.
                if job.reply.running.load(Ordering::SeqCst) > 0 || job.reply.is_done() {
                    continue;
                }
                if e.is_transient() {
                    shared.retry_transient(job, e);
                } else {
                    job.reply.deliver(Err(e));
                }
            }
        }
    }
}
