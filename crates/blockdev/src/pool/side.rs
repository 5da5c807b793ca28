//! The side session: small requests (block status, flush) must not wait
//! behind megabytes of data queued on a slow connection (a block status
//! reply stuck behind a stalled session's reads starves the whole copy).
//! They go to one more session, opened on first use, that carries no bulk
//! data, when the store allows more than one session; otherwise, while it
//! connects, or once it failed, they share the work queue.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::queue::{Done, Op};
use super::reconnect::end_session;
use super::{Pool, Shared, lock};
use crate::endpoint::{Endpoint, Result};

impl Pool {
    /// The side session; `None` when the store allows only one session or
    /// the side session could not be used. The first use opens it (in the
    /// background). Until it is open, a request the data sessions could
    /// answer at once (nothing queued or running on them: the first block
    /// status of a copy) takes the work queue instead of waiting for a
    /// whole handshake, three round trips, before the first read; one
    /// that would wait behind data waits for the side session.
    async fn side(&self) -> Option<Arc<dyn Endpoint>> {
        if self.shared.max_sessions < 2 || self.shared.side_failed.load(Ordering::Relaxed) {
            return None;
        }
        if let Some(side) = self.shared.side.get() {
            return side.clone();
        }
        if !self.shared.side_opening.swap(true, Ordering::Relaxed) {
            let shared = Arc::clone(&self.shared);
            tokio::spawn(async move {
                let side = shared.side.get_or_init(|| connect_side(&shared)).await;
                // The pool closed while it connected: nobody will close it.
                if let Some(ep) = side
                    && shared.closed.load(Ordering::SeqCst)
                {
                    end_session(Arc::clone(ep), false).await;
                }
            });
        }
        let idle = lock(&self.shared.queue).is_empty()
            && lock(&self.shared.ahead).is_empty()
            && lock(&self.shared.sessions).iter().all(|s| s.in_flight.load(Ordering::Relaxed) == 0);
        if idle {
            return None;
        }
        self.shared.side.get_or_init(|| connect_side(&self.shared)).await.clone()
    }

    /// Runs `op` on the side session (within its deadline, transient
    /// errors retried), falling back to the work queue (where the workers
    /// retry and reconnect) if there is none, or once it failed.
    pub(super) async fn submit_side(&self, op: Op) -> Result<Done> {
        if let Some(ep) = self.side().await {
            let mut transient = 0;
            loop {
                match self.shared.run(&*ep, &op).await {
                    Ok(d) => return Ok(d),
                    Err(Some(e))
                        if e.is_transient() && transient < self.shared.config.retry.transient_retries =>
                    {
                        transient += 1;
                        self.shared.faults.transient.fetch_add(1, Ordering::Relaxed);
                        self.shared.faults.retried.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(std::time::Duration::from_millis(20u64 << transient)).await;
                    }
                    Err(Some(e)) if !e.is_connection() => return Err(e),
                    r => {
                        let e = match r {
                            Err(Some(e)) => e,
                            _ => self.shared.timed_out(&op),
                        };
                        if !self.shared.side_failed.swap(true, Ordering::Relaxed) {
                            self.shared.note(format!("side session failed: {e}; using the data sessions"));
                            tokio::spawn(end_session(ep, true));
                        }
                        break;
                    }
                }
            }
        }
        self.submit(op).await
    }

    /// Closes the side session, if one was opened (bounded in time).
    pub(super) async fn close_side(&self) {
        if let Some(Some(ep)) = self.shared.side.get()
            && !self.shared.side_failed.load(Ordering::Relaxed)
        {
            end_session(Arc::clone(ep), false).await;
        }
    }
}

/// Opens the side session; `None` (and a note) when it cannot be.
async fn connect_side(shared: &Shared) -> Option<Arc<dyn Endpoint>> {
    match shared.connector.connect().await {
        Ok(ep) => Some(ep),
        Err(e) => {
            shared.note(format!("no side session ({e}); block status and flush share the data sessions"));
            None
        }
    }
}
