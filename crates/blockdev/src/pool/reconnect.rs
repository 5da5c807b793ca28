//! Sessions joining and leaving: adding an opened session, giving the
//! first N healthy ones the active role, opening more when there are too
//! few, and retiring a session whose connection failed (its request is
//! queued again and a replacement opened, a bounded number of times).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::queue::Job;
use super::worker::worker;
use super::{Session, Shared, lock};
use crate::endpoint::{Endpoint, EndpointError};

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
            });
            sessions.push(Arc::clone(&s));
            s
        };
        for slot in 0..this.config.max_depth {
            tokio::spawn(worker(Arc::clone(this), Arc::clone(&session), slot));
        }
    }

    /// Healthy and failed sessions.
    fn health(&self) -> (usize, usize) {
        let sessions = lock(&self.sessions);
        let healthy = sessions.iter().filter(|s| !s.failed.load(Ordering::SeqCst)).count();
        (healthy, sessions.len() - healthy)
    }

    /// Marks the first `active` healthy sessions active and the rest idle,
    /// and opens more sessions when there are fewer than `active` (or the
    /// spares asked for, `open`).
    pub(super) fn rebalance(self: &Arc<Self>) {
        let want = self.active.load(Ordering::SeqCst);
        let cap = self.rate_cap.load(Ordering::SeqCst);
        // Twice each session's share (at most the whole cap): work pulling
        // does not spread requests evenly, and a session paced at exactly
        // its share would leave the cap unused while it carries two. The
        // caller's schedule of requests holds the total at the cap.
        let share = (cap > 0).then(|| (cap.saturating_mul(2) / want.max(1) as u64).clamp(1, cap));
        let (healthy, failed) = {
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
                }
            }
            (n, sessions.len() - n)
        };
        self.roles.send_modify(|g| *g += 1);
        self.queue_ready.notify_waiters();
        if failed > self.config.max_reconnects {
            // Connections keep failing: serve with what is left, open no more.
            if healthy == 0 {
                self.fail_all(EndpointError::io(
                    &self.name,
                    None,
                    format!(
                        "{failed} sessions failed; giving up after {} reconnects",
                        self.config.max_reconnects
                    ),
                ));
            }
            return;
        }
        let connecting = self.connecting.load(Ordering::SeqCst);
        let keep = want.max(self.open.load(Ordering::SeqCst)).min(self.max_sessions);
        let missing = keep.saturating_sub(healthy + connecting);
        for _ in 0..missing {
            if self.closed.load(Ordering::SeqCst) {
                break;
            }
            self.connecting.fetch_add(1, Ordering::SeqCst);
            let this = Arc::clone(self);
            tokio::spawn(async move { this.open_one().await });
        }
    }

    /// Opens one more session in the background.
    async fn open_one(self: Arc<Self>) {
        let r = self.connector.connect().await;
        self.connecting.fetch_sub(1, Ordering::SeqCst);
        match r {
            Ok(ep) if !self.closed.load(Ordering::SeqCst) => {
                Shared::add_session(&self, ep);
                self.rebalance();
            }
            Ok(ep) => {
                let _ = ep.close().await;
            }
            Err(e) => {
                // Keep what is open; settle the active count to what we have.
                self.note(format!("could not open another session: {e}"));
                let (healthy, _) = self.health();
                let settle = healthy.max(1);
                if self.active.load(Ordering::SeqCst) > settle && healthy > 0 {
                    self.active.store(settle, Ordering::SeqCst);
                    self.rebalance();
                } else if healthy == 0 {
                    let err = match lock(&self.last_failure).clone() {
                        Some(f) => EndpointError::io(
                            &self.name,
                            None,
                            format!("{} (and reconnecting failed: {})", f.kind.detail(), e.kind.detail()),
                        ),
                        None => e,
                    };
                    self.fail_all(err);
                }
            }
        }
    }

    /// A session's connection failed while it carried `job`.
    pub(super) fn session_failed(self: &Arc<Self>, session: &Session, job: Job, err: EndpointError) {
        *lock(&self.last_failure) = Some(err.clone());
        if !session.failed.swap(true, Ordering::SeqCst) {
            self.note(format!("session {} failed: {err}", session.index));
            let ep = Arc::clone(&session.endpoint);
            tokio::spawn(async move {
                let _ = ep.close().await;
            });
        }
        let (healthy, failed) = self.health();
        let give_up = healthy == 0 && failed > self.config.max_reconnects;
        if job.reply.is_done() || job.reply.running.load(Ordering::SeqCst) > 0 {
            // A copy already answered, or one is still running: it decides.
            self.rebalance();
            return;
        }
        if job.attempts >= 2 || give_up {
            job.reply.deliver(Err(err.clone()));
            if give_up {
                self.fail_all(err);
            }
            return;
        }
        self.push(Job { attempts: job.attempts + 1, hedge: false, ..job }, true);
        self.rebalance();
    }
}
