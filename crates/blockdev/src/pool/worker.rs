//! The workers: one per request slot of each session, pulling requests
//! from the shared queue while the session is active.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::config::Hedge;
use super::hedging::HEDGE_POLL;
use super::queue::execute;
use super::{Session, Shared, lock};
use crate::endpoint::ErrorKind;

impl Shared {
    /// Slot `slot` of `session` may take work: the session is active and
    /// the slot is within the depth asked for ([`Pool::set_depth`](super::Pool::set_depth)).
    fn slot_open(&self, session: &Session, slot: usize) -> bool {
        session.active.load(Ordering::SeqCst) && slot < self.depth.load(Ordering::SeqCst)
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
        let waiting = Instant::now();
        let job = tokio::select! {
            j = shared.pop() => match j { Some(j) => j, None => return },
            r = roles.changed() => { if r.is_err() { return } continue }
            _ = tokio::time::sleep(HEDGE_POLL), if hedging => {
                match shared.straggler(session.index) {
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
        let started = Instant::now();
        let id = shared.started(session.index, &job, started);
        job.reply.running.fetch_add(1, Ordering::SeqCst);
        session.in_flight.fetch_add(1, Ordering::Relaxed);
        let r = execute(&*session.endpoint, &job.op).await;
        session.in_flight.fetch_sub(1, Ordering::Relaxed);
        job.reply.running.fetch_sub(1, Ordering::SeqCst);
        let payload = job.op.payload();
        // Only completions count in the mean completion time.
        shared.finished(id, if r.is_ok() { payload } else { 0 }, started.elapsed());
        match r {
            Err(e) if matches!(e.kind, ErrorKind::Io(_)) => {
                shared.session_failed(&session, job, e);
                return;
            }
            Ok(done) => {
                // Count before answering, so a caller that reads the
                // counters after its request returns sees this one.
                if let Some(tx) = lock(&job.reply.tx).take() {
                    session.completed_bytes.fetch_add(payload, Ordering::Relaxed);
                    shared.completed_bytes.fetch_add(payload, Ordering::Relaxed);
                    if job.hedge {
                        shared.hedges_won.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = tx.send(Ok(done));
                }
            }
            Err(e) => {
                // A protocol or server error: the answer, unless a copy of
                // the request is still running and may succeed.
                if job.reply.running.load(Ordering::SeqCst) == 0 {
                    job.reply.deliver(Err(e));
                }
            }
        }
    }
}
