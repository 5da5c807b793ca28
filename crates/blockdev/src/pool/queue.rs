//! The shared work queue: the requests callers submit, waiting for a free
//! session slot, and where each one's answer goes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::{Pool, Shared, lock};
use crate::endpoint::{Endpoint, EndpointError, Extent, Result};

/// One operation on the store.
#[derive(Debug, Clone)]
pub(super) enum Op {
    Read { offset: u64, len: u32 },
    Write { offset: u64, data: Bytes, fua: bool },
    Zero { offset: u64, len: u64, may_trim: bool },
    Trim { offset: u64, len: u64 },
    Flush,
    BlockStatus { offset: u64, len: u64 },
}

impl Op {
    pub(super) fn offset(&self) -> Option<u64> {
        match self {
            Op::Read { offset, .. }
            | Op::Write { offset, .. }
            | Op::Zero { offset, .. }
            | Op::Trim { offset, .. }
            | Op::BlockStatus { offset, .. } => Some(*offset),
            Op::Flush => None,
        }
    }

    /// Payload bytes it carries (reads and writes; 0 for the others).
    pub(super) fn payload(&self) -> u64 {
        match self {
            Op::Read { len, .. } => u64::from(*len),
            Op::Write { data, .. } => data.len() as u64,
            _ => 0,
        }
    }
}

/// What a completed operation returns.
pub(super) enum Done {
    Data(Bytes),
    Unit,
    Extents(Vec<Extent>),
}

/// Where a request's result goes; shared by the copies of a hedged request.
pub(super) struct Reply {
    pub(super) tx: Mutex<Option<oneshot::Sender<Result<Done>>>>,
    /// Copies of the request executing now.
    pub(super) running: AtomicUsize,
}

impl Reply {
    pub(super) fn new(tx: oneshot::Sender<Result<Done>>) -> Arc<Reply> {
        Arc::new(Reply { tx: Mutex::new(Some(tx)), running: AtomicUsize::new(0) })
    }

    pub(super) fn is_done(&self) -> bool {
        lock(&self.tx).is_none()
    }

    /// Nobody needs this request's answer any more: a copy of it already
    /// answered, or its caller stopped waiting (the gathering of a hedged
    /// request's parts, once the original answered).
    pub(super) fn unwanted(&self) -> bool {
        lock(&self.tx).as_ref().is_none_or(oneshot::Sender::is_closed)
    }

    /// Delivers `r` unless a copy already did; true if this call delivered.
    pub(super) fn deliver(&self, r: Result<Done>) -> bool {
        match lock(&self.tx).take() {
            Some(tx) => {
                let _ = tx.send(r);
                true
            }
            None => false,
        }
    }
}

/// One request waiting in the queue, and where its result goes.
pub(super) struct Job {
    pub(super) op: Op,
    pub(super) reply: Arc<Reply>,
    /// Sessions it broke so far (see [`Shared::session_failed`]).
    pub(super) attempts: u32,
    /// Sessions with an index at or above this one were opened after the
    /// request's last connection failure (0: it had none).
    pub(super) fresh_from: usize,
    /// This is the duplicate of a straggler.
    pub(super) hedge: bool,
    /// A part of a straggler's duplicate: its answer goes to the task that
    /// puts the parts together, which counts the request as completed.
    pub(super) part: bool,
    /// Read-ahead: served after every demand request waiting.
    pub(super) ahead: bool,
    /// Transient server errors it got so far.
    pub(super) transient: u32,
}

impl Job {
    /// A request never tried yet, answered through `reply` (read-ahead if
    /// `ahead`).
    pub(super) fn new(op: Op, reply: Arc<Reply>, ahead: bool) -> Job {
        Job { op, reply, attempts: 0, fresh_from: 0, hedge: false, part: false, ahead, transient: 0 }
    }
}

impl Shared {
    /// Queues `job` (at the front if `front`); once the pool gave up, it
    /// fails at once.
    pub(super) fn push(&self, job: Job, front: bool) {
        if let Some(e) = self.dead() {
            let e = match job.op.offset() {
                Some(o) => e.at(o),
                None => e,
            };
            job.reply.deliver(Err(e));
            return;
        }
        {
            let mut q = lock(if job.ahead { &self.ahead } else { &self.queue });
            if front { q.push_front(job) } else { q.push_back(job) }
        }
        self.queue_ready.notify_one();
    }

    /// The next request, waiting for one; `None` once the pool closed.
    pub(super) async fn pop(&self) -> Option<Job> {
        loop {
            let notified = self.queue_ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(j) = lock(&self.queue).pop_front() {
                return Some(j);
            }
            if let Some(j) = lock(&self.ahead).pop_front() {
                return Some(j);
            }
            if self.closed.load(Ordering::SeqCst) {
                return None;
            }
            notified.await;
        }
    }

    /// No session can serve anymore: fail everything queued.
    pub(super) fn fail_all(&self, err: EndpointError) {
        let mut jobs: Vec<Job> = lock(&self.queue).drain(..).collect();
        jobs.extend(lock(&self.ahead).drain(..));
        for j in jobs {
            let e = match j.op.offset() {
                Some(o) => err.clone().at(o),
                None => err.clone(),
            };
            j.reply.deliver(Err(e));
        }
    }
}

impl Pool {
    /// Queues `op` and waits for its result.
    pub(super) async fn submit(&self, op: Op) -> Result<Done> {
        self.submit_as(op, false).await
    }

    /// Queues `op` (behind every demand request if `ahead`) and waits for its result.
    pub(super) async fn submit_as(&self, op: Op, ahead: bool) -> Result<Done> {
        let (tx, rx) = oneshot::channel();
        self.shared.push(Job::new(op, Reply::new(tx), ahead), false);
        rx.await
            .unwrap_or_else(|_| Err(EndpointError::io(&self.shared.name, None, "the session pool shut down")))
    }

    /// Cuts `[offset, offset+len)` into requests of the current request size.
    pub(super) fn cut(&self, offset: u64, len: u64) -> impl Iterator<Item = (u64, u64)> + use<> {
        let step = u64::from(self.request_bytes().max(1));
        let end = offset + len;
        let mut pos = offset;
        std::iter::from_fn(move || {
            if pos >= end {
                return None;
            }
            let n = (end - pos).min(step);
            let r = (pos, n);
            pos += n;
            Some(r)
        })
    }
}

/// Runs `op` on one endpoint.
pub(super) async fn execute(ep: &dyn Endpoint, op: &Op) -> Result<Done> {
    Ok(match op {
        Op::Read { offset, len } => Done::Data(ep.read(*offset, *len).await?),
        Op::Write { offset, data, fua } => {
            ep.write(*offset, data.clone(), *fua).await?;
            Done::Unit
        }
        Op::Zero { offset, len, may_trim } => {
            ep.write_zeroes(*offset, *len, *may_trim).await?;
            Done::Unit
        }
        Op::Trim { offset, len } => {
            ep.trim(*offset, *len).await?;
            Done::Unit
        }
        Op::Flush => {
            ep.flush().await?;
            Done::Unit
        }
        Op::BlockStatus { offset, len } => Done::Extents(ep.block_status(*offset, *len).await?),
    })
}
