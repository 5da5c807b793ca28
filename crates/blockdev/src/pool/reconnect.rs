//! Sessions joining and leaving: adding an opened session, giving the
//! first N healthy ones the active role, opening more when there are too
//! few, and retiring a session that failed: its requests are queued
//! again, the writes it acknowledged since its last flush are sent again,
//! and a replacement is opened.
//!
//! Openings that fail are paced ([`Backoff`](super::backoff::Backoff)):
//! after a failed attempt, one attempt at a time, each after an
//! exponentially growing, jittered wait, until one opens a session that
//! then completes a request, or the run of failures lasted
//! [`RetryPolicy::retry_for`](super::RetryPolicy::retry_for). Then, with
//! no session left, the pool is dead: every waiting and later request
//! fails with the last error.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::ledger::{Data, Entry};
use super::queue::{Job, Op, Reply};
use super::worker::worker;
use super::{Session, Shared, lock};
use crate::endpoint::{Endpoint, EndpointError};

/// How long a session may take to close (or to give up its requests)
/// before the pool drops it anyway.
pub(super) const CLOSE_BOUND: Duration = Duration::from_secs(10);

/// Ends a retired or closing session in bounded time: `close` (which lets
/// requests in flight finish), or `abort` first when it is stuck, and
/// `abort` if closing takes longer than [`CLOSE_BOUND`].
pub(super) async fn end_session(ep: Arc<dyn Endpoint>, stuck: bool) {
    if stuck {
        let _ = tokio::time::timeout(CLOSE_BOUND, ep.abort()).await;
        return;
    }
    if tokio::time::timeout(CLOSE_BOUND, ep.close()).await.is_err() {
        tracing::debug!("{}: a session did not close within {CLOSE_BOUND:?}; aborting it", ep.name());
        let _ = tokio::time::timeout(CLOSE_BOUND, ep.abort()).await;
    }
}

impl Shared {
    /// Adds an opened session (idle until [`rebalance`](Self::rebalance)
    /// makes it active) with one worker per request slot.
    pub(super) fn add_session(this: &Arc<Shared>, endpoint: Arc<dyn Endpoint>) {
        let session = {
            let mut sessions = lock(&this.sessions);
            let s = Arc::new(Session {
                index: sessions.len(),
                endpoint,
                active: AtomicBool::new(false),
                failed: AtomicBool::new(false),
                in_flight: AtomicUsize::new(0),
                completed_bytes: AtomicU64::new(0),
                proven: AtomicBool::new(false),
            });
            sessions.push(Arc::clone(&s));
            s
        };
        // A working session again: the outage (if any) is over.
        let mut o = lock(&this.outage);
        if let Some(since) = o.since.take() {
            o.total += since.elapsed();
        }
        drop(o);
        if this
            .faults
            .to_replace
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            this.faults.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        for slot in 0..this.config.max_depth {
            tokio::spawn(worker(Arc::clone(this), Arc::clone(&session), slot));
        }
    }

    /// Healthy and failed sessions.
    pub(super) fn health(&self) -> (usize, usize) {
        let sessions = lock(&self.sessions);
        let healthy = sessions.iter().filter(|s| !s.failed.load(Ordering::SeqCst)).count();
        (healthy, sessions.len() - healthy)
    }

    /// A request of `session` completed: after a run of failed openings,
    /// the store works again.
    pub(super) fn proven(&self, session: &Session) {
        if !session.proven.swap(true, Ordering::Relaxed) {
            let mut b = lock(&self.backoff);
            if b.failing() {
                b.succeeded();
            }
        }
    }

    /// Marks the first `active` healthy sessions active and the rest idle,
    /// and opens more sessions when there are fewer than `active` (or the
    /// spares asked for, `open`): all at once normally, one at a time,
    /// paced, after failures.
    pub(super) fn rebalance(self: &Arc<Self>) {
        let want = self.active.load(Ordering::SeqCst);
        let cap = self.rate_cap.load(Ordering::SeqCst);
        // Twice each session's share (at most the whole cap): work pulling
        // does not spread requests evenly, and a session paced at exactly
        // its share would leave the cap unused while it carries two. The
        // caller's schedule of requests holds the total at the cap.
        let share = (cap > 0).then(|| (cap.saturating_mul(2) / want.max(1) as u64).clamp(1, cap));
        let clamp = self.window_clamp.load(Ordering::SeqCst);
        let healthy = {
            let sessions = lock(&self.sessions);
            let mut n = 0;
            for s in sessions.iter() {
                let ok = !s.failed.load(Ordering::SeqCst);
                s.active.store(ok && n < want, Ordering::SeqCst);
                if ok {
                    n += 1;
                    if share.is_some() {
                        s.endpoint.set_pacing_rate(share);
                    }
                    if clamp > 0 {
                        s.endpoint.set_window_clamp(Some(clamp));
                    }
                }
            }
            n
        };
        self.roles.send_modify(|g| *g += 1);
        self.queue_ready.notify_waiters();
        if self.closed.load(Ordering::SeqCst) || self.dead().is_some() {
            return;
        }
        let connecting = self.connecting.load(Ordering::SeqCst);
        let keep = want.max(self.open.load(Ordering::SeqCst)).min(self.max_sessions);
        let missing = keep.saturating_sub(healthy + connecting);
        if missing == 0 {
            return;
        }
        let now = Instant::now();
        let at = {
            let b = lock(&self.backoff);
            b.failing().then(|| b.next_at(now))
        };
        match at {
            Some(at) => {
                // After failures: one paced attempt at a time.
                if connecting == 0 && !self.reconnecting.swap(true, Ordering::SeqCst) {
                    self.connecting.fetch_add(1, Ordering::SeqCst);
                    let this = Arc::clone(self);
                    tokio::spawn(async move {
                        // Wait until `at`, or until the pool closes.
                        loop {
                            let left = at.saturating_duration_since(Instant::now());
                            if left.is_zero() || this.closed.load(Ordering::SeqCst) {
                                break;
                            }
                            tokio::time::sleep(left.min(Duration::from_millis(50))).await;
                        }
                        this.reconnecting.store(false, Ordering::SeqCst);
                        this.open_one().await;
                    });
                }
            }
            None => {
                for _ in 0..missing {
                    self.connecting.fetch_add(1, Ordering::SeqCst);
                    let this = Arc::clone(self);
                    tokio::spawn(async move { this.open_one().await });
                }
            }
        }
    }

    /// Opens one more session in the background.
    async fn open_one(self: Arc<Self>) {
        let r = if self.closed.load(Ordering::SeqCst) {
            Err(EndpointError::io(&self.name, None, "the pool is closed"))
        } else {
            self.connector.connect().await
        };
        match r {
            Ok(ep) if !self.closed.load(Ordering::SeqCst) => {
                Shared::add_session(&self, ep);
                self.connecting.fetch_sub(1, Ordering::SeqCst);
                self.rebalance();
            }
            Ok(ep) => {
                // Opened after the pool closed: end it cleanly before
                // `close` returns (it waits for openings under way).
                end_session(ep, false).await;
                self.connecting.fetch_sub(1, Ordering::SeqCst);
            }
            Err(_) if self.closed.load(Ordering::SeqCst) => {
                self.connecting.fetch_sub(1, Ordering::SeqCst);
            }
            Err(e) => {
                self.connecting.fetch_sub(1, Ordering::SeqCst);
                self.open_failed(e);
            }
        }
    }

    /// Waits (at most [`CLOSE_BOUND`]) for the sessions being opened: each
    /// is ended cleanly once open, so none is left to the process's exit
    /// (which would drop it without a disconnect).
    pub(super) async fn openings_done(&self) {
        let deadline = Instant::now() + CLOSE_BOUND;
        while self.connecting.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// An attempt to open a session failed: try again later, or give up.
    fn open_failed(self: &Arc<Self>, e: EndpointError) {
        let now = Instant::now();
        let (next, first, failing_for) = {
            let mut b = lock(&self.backoff);
            let first = !b.failing();
            // Attempts that fail together (opened at once) count once.
            let next = if first || b.next_at(now) <= now {
                b.failed(now, self.draw())
            } else {
                Some(b.next_at(now))
            };
            (next, first, b.failing_for(now))
        };
        let (healthy, _) = self.health();
        match next {
            Some(_) => {
                if first {
                    let budget = self.config.retry.retry_for;
                    self.note(format!("could not open a session ({e}); retrying for up to {budget:?}"));
                }
                tracing::debug!("{}: opening a session failed again: {e}", self.name);
                self.rebalance();
            }
            None if healthy == 0 => {
                let why = match lock(&self.last_failure).clone() {
                    Some(f) => format!("{} (and reconnecting failed: {})", f.kind.detail(), e.kind.detail()),
                    None => e.kind.detail().to_string(),
                };
                let err = EndpointError::io(
                    &self.name,
                    None,
                    format!("no session could be opened for {:.0} s: {why}", failing_for.as_secs_f64()),
                );
                self.note(format!("giving up: {err}"));
                *lock(&self.dead) = Some(err.clone());
                self.fail_all(err.clone());
                *lock(&self.resend_error) = Some(err);
                self.ledger_changed.notify_waiters();
            }
            None => {
                // Keep what is open; settle the active count to it.
                self.note(format!(
                    "could not open another session for {failing_for:.0?}: {e}; going on with {healthy}"
                ));
                lock(&self.backoff).succeeded();
                if self.active.load(Ordering::SeqCst) > healthy {
                    self.active.store(healthy, Ordering::SeqCst);
                }
                self.rebalance();
            }
        }
    }

    /// `session` failed with `err` (its connection, or its request past
    /// the deadline if `stuck`): retire it, send again the writes it
    /// acknowledged since its last flush, open a replacement. The caller
    /// queues its own request again.
    pub(super) fn retire(self: &Arc<Self>, session: &Session, err: &EndpointError, stuck: bool) {
        *lock(&self.last_failure) = Some(err.clone());
        if session.failed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.note(format!("session {} failed: {err}", session.index));
        self.faults.to_replace.fetch_add(1, Ordering::SeqCst);
        let ep = Arc::clone(&session.endpoint);
        tokio::spawn(end_session(ep, stuck));
        let lost = lock(&self.ledger).take(session.index);
        self.ledger_changed.notify_waiters();
        self.resend(lost);
        let (healthy, _) = self.health();
        if healthy == 0 {
            lock(&self.outage).since.get_or_insert_with(Instant::now);
        }
        self.rebalance();
    }

    /// A session's connection failed while it carried `job`: retire it and
    /// queue the request again.
    ///
    /// A request that breaks every session it touches must end: after
    /// `max_attempts` broken sessions it fails. Only a session opened after
    /// the request's previous connection failure counts: when a whole
    /// target goes away (killed, restarted, the path blacked out), every
    /// session dies at once, and a request queued again from the first one
    /// to notice lands on others that are already dead but not yet known
    /// to be (with many sessions and a long path, dozens in a few ms); that
    /// says nothing about the request, and it waits for a new session.
    pub(super) fn session_failed(
        self: &Arc<Self>,
        session: &Session,
        job: Job,
        err: EndpointError,
        stuck: bool,
    ) {
        self.retire(session, &err, stuck);
        if job.reply.is_done() || job.reply.running.load(Ordering::SeqCst) > 0 {
            // A copy already answered, or one is still running: it decides.
            return;
        }
        let counts = session.index >= job.fresh_from;
        let attempts = job.attempts + u32::from(counts);
        if attempts >= self.config.retry.max_attempts {
            job.reply.deliver(Err(err));
            return;
        }
        let fresh_from = lock(&self.sessions).len();
        self.faults.retried.fetch_add(1, Ordering::Relaxed);
        self.push(Job { attempts, fresh_from, hedge: false, ..job }, true);
    }

    /// Sends `entries` (writes a failed session acknowledged but no flush
    /// covered) again; a flush waits for them ([`Shared::resend_wait`]).
    pub(super) fn resend(self: &Arc<Self>, entries: Vec<(u64, Entry)>) {
        for (offset, e) in entries {
            let op = match e.data {
                Data::Bytes(data) => {
                    self.faults.resent_bytes.fetch_add(e.len, Ordering::Relaxed);
                    Op::Write { offset, data, fua: false }
                }
                Data::Zero { may_trim } => Op::Zero { offset, len: e.len, may_trim },
            };
            let (tx, rx) = tokio::sync::oneshot::channel();
            self.resending.fetch_add(1, Ordering::SeqCst);
            self.push(Job::new(op, Reply::new(tx), false), true);
            let this = Arc::clone(self);
            tokio::spawn(async move {
                let r = rx.await.unwrap_or_else(|_| {
                    Err(EndpointError::io(&this.name, Some(offset), "the session pool shut down"))
                });
                if let Err(e) = r {
                    lock(&this.resend_error).get_or_insert(e);
                }
                this.resending.fetch_sub(1, Ordering::SeqCst);
                this.ledger_changed.notify_waiters();
            });
        }
    }
}
