//! The side session: small requests (block status, flush) must not wait
//! behind megabytes of data queued on a slow connection (a block status
//! reply stuck behind a stalled session's reads starves the whole copy).
//! They go to one more session, opened on first use, that carries no bulk
//! data, when the store allows more than one session; otherwise, or once
//! it failed, they share the work queue.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Pool;
use super::queue::{Done, Op};
use super::reconnect::end_session;
use crate::endpoint::{Endpoint, Result};

impl Pool {
    /// The side session, opened on first use; `None` when the store allows
    /// only one session or the side session could not be used.
    async fn side(&self) -> Option<Arc<dyn Endpoint>> {
        if self.shared.max_sessions < 2 || self.shared.side_failed.load(Ordering::Relaxed) {
            return None;
        }
        let shared = &self.shared;
        shared
            .side
            .get_or_init(|| async {
                match shared.connector.connect().await {
                    Ok(ep) => Some(ep),
                    Err(e) => {
                        shared.note(format!(
                            "no side session ({e}); block status and flush share the data sessions"
                        ));
                        None
                    }
                }
            })
            .await
            .clone()
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
