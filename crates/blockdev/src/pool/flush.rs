//! Flushing a pool: once the writes of failed sessions were sent again, one
//! flush on the least busy session covers every write acknowledged before
//! it was sent (the pool has several sessions only with multi-connection
//! consistency; see ledger.rs). A session that fails during its flush is
//! retired like any other (its writes sent again) and the flush starts
//! over; it returns only when every acknowledged write is covered by a
//! flush that succeeded.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::queue::Op;
use super::{Shared, lock};
use crate::endpoint::{EndpointError, Result};

/// Rounds a flush may take (each after sessions failed) before giving up.
const MAX_ROUNDS: usize = 32;

impl Shared {
    /// Waits until no write is being sent again; the first of them that
    /// failed, if any.
    pub(super) async fn resend_wait(&self) -> Result<()> {
        loop {
            let changed = self.ledger_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(e) = lock(&self.resend_error).take() {
                return Err(e);
            }
            if self.resending.load(Ordering::SeqCst) == 0 {
                return Ok(());
            }
            changed.await;
        }
    }

    /// Flushes the acknowledged, unflushed writes (see the module docs).
    /// `Ok(false)` when there were none: the caller flushes some session
    /// anyway.
    pub(super) async fn flush_sessions(self: &Arc<Self>) -> Result<bool> {
        let mut flushed_any = false;
        for _ in 0..MAX_ROUNDS {
            self.resend_wait().await?;
            if let Some(e) = self.dead() {
                return Err(e);
            }
            let seq = self.acks.load(Ordering::SeqCst);
            if !lock(&self.ledger).holds_upto(seq) {
                return Ok(flushed_any);
            }
            // One flush covers them all (see ledger.rs): on the session with
            // the least in flight, so it does not wait behind a slow
            // session's queued data (at the end of a backup over a lossy
            // path, flushing every session that held writes waited 17 s for
            // the slowest one's send buffer).
            let session = lock(&self.sessions)
                .iter()
                .filter(|s| !s.failed.load(Ordering::SeqCst))
                .min_by_key(|s| s.in_flight.load(Ordering::Relaxed))
                .cloned();
            let Some(s) = session else {
                // Every session is being retired: the writes come back to be
                // sent again; let that happen.
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                continue;
            };
            match self.run(&*s.endpoint, &Op::Flush).await {
                Ok(_) => {
                    lock(&self.ledger).clear_upto(seq);
                    flushed_any = true;
                }
                Err(None) => {
                    let e = self.timed_out(&Op::Flush);
                    self.retire(&s, &e, true);
                }
                Err(Some(e)) if e.is_connection() => self.retire(&s, &e, false),
                Err(Some(e)) if e.is_transient() => {
                    self.faults.transient.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("flush: {e}; trying again");
                }
                Err(Some(e)) => return Err(e),
            }
            self.ledger_changed.notify_waiters();
        }
        Err(EndpointError::io(&self.name, None, format!("the flush failed {MAX_ROUNDS} times in a row")))
    }

    /// The pool holds more unflushed writes than its limit: flush in the
    /// background (new writes wait at twice the limit).
    pub(super) fn flush_in_background(self: &Arc<Self>) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(e) = this.flush_sessions().await {
                tracing::warn!("{}: flushing acknowledged writes failed: {e}", this.name);
                if !e.is_connection() {
                    lock(&this.resend_error).get_or_insert(e);
                }
            }
            this.self_flushing.store(false, Ordering::SeqCst);
            this.ledger_changed.notify_waiters();
        });
    }

    /// Waits while the pool holds more than twice its limit of unflushed
    /// writes (a flush it started is making room).
    pub(super) async fn ledger_room(&self) -> Result<()> {
        let limit = self.config.retry.unflushed_limit.saturating_mul(2);
        loop {
            let changed = self.ledger_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(e) = self.dead() {
                return Err(e);
            }
            if lock(&self.ledger).held() <= limit || !self.self_flushing.load(Ordering::SeqCst) {
                return Ok(());
            }
            changed.await;
        }
    }
}
