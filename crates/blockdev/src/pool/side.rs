//! The side session: small requests (block status, flush) must not wait
//! behind megabytes of data queued on a slow connection (a block status
//! reply stuck behind a stalled session's reads starves the whole copy).
//! They go to one more session, opened on first use, that carries no bulk
//! data, when the store allows more than one session; otherwise, or once
//! it failed, they share the work queue.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Pool;
use super::queue::{Done, Op, execute};
use crate::endpoint::{Endpoint, ErrorKind, Result};

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

    /// Runs `op` on the side session, falling back to the work queue if
    /// there is none or it fails with an I/O error.
    pub(super) async fn submit_side(&self, op: Op) -> Result<Done> {
        if let Some(ep) = self.side().await {
            match execute(&*ep, &op).await {
                Err(e) if matches!(e.kind, ErrorKind::Io(_)) => {
                    self.shared.side_failed.store(true, Ordering::Relaxed);
                    self.shared.note(format!("side session failed: {e}; using the data sessions"));
                }
                r => return r,
            }
        }
        self.submit(op).await
    }

    /// Closes the side session, if one was opened.
    pub(super) async fn close_side(&self) {
        if let Some(Some(ep)) = self.shared.side.get() {
            let _ = ep.close().await;
        }
    }
}
