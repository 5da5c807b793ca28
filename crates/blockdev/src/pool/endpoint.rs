//! The pool as an [`Endpoint`]: callers' ranges are cut into requests of
//! the current request size and queued; block status and flush go to the
//! side session.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};

use super::queue::{Done, Op};
use super::reconnect::end_session;
use super::{Pool, lock};
use crate::endpoint::{Capabilities, Endpoint, EndpointError, Extent, Result, TcpInfo};

fn unexpected(name: &str) -> EndpointError {
    EndpointError::io(name, None, "internal error: unexpected completion kind")
}

impl Pool {
    /// A read cut into requests, queued as demand or as read-ahead.
    async fn read_as(&self, offset: u64, len: u32, ahead: bool) -> Result<Bytes> {
        self.check(offset, len.into())?;
        let parts = futures::future::try_join_all(
            self.cut(offset, len.into())
                .map(|(o, n)| self.submit_as(Op::Read { offset: o, len: n as u32 }, ahead)),
        )
        .await?;
        let mut parts = parts.into_iter().map(|d| match d {
            Done::Data(b) => Ok(b),
            _ => Err(unexpected(&self.shared.name)),
        });
        if parts.len() == 1 {
            return parts.next().unwrap_or_else(|| Err(unexpected(&self.shared.name)));
        }
        let mut out = BytesMut::with_capacity(len as usize);
        for p in parts {
            out.extend_from_slice(&p?);
        }
        Ok(out.freeze())
    }

    fn check(&self, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(EndpointError::config(
                &self.shared.name,
                Some(offset),
                format!("request of {len} bytes is beyond the end of the store ({} bytes)", self.size),
            )),
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Let idle workers exit; sessions close when their last Arc drops.
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.roles.send_modify(|g| *g += 1);
        self.shared.queue_ready.notify_waiters();
    }
}

#[async_trait]
impl Endpoint for Pool {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn capabilities(&self) -> Capabilities {
        self.caps
    }

    fn serial(&self) -> Option<String> {
        self.serial.clone()
    }

    fn preferred_read_bytes(&self) -> Option<u32> {
        Some(self.request_bytes().max(1))
    }

    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        self.read_as(offset, len, false).await
    }

    async fn read_ahead(&self, offset: u64, len: u32) -> Result<Bytes> {
        self.read_as(offset, len, true).await
    }

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<()> {
        self.check(offset, data.len() as u64)?;
        self.shared.ledger_room().await?;
        futures::future::try_join_all(self.cut(offset, data.len() as u64).map(|(o, n)| {
            let part = data.slice((o - offset) as usize..(o - offset + n) as usize);
            self.submit(Op::Write { offset: o, data: part, fua })
        }))
        .await?;
        Ok(())
    }

    async fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<()> {
        self.check(offset, len)?;
        // Zeroing moves no payload: larger requests are fine, but still
        // bounded so a huge range does not occupy one session for long.
        let step = u64::from(self.shared.config.max_request_bytes).max(64 << 20);
        let mut jobs = Vec::new();
        let mut pos = offset;
        while pos < offset + len {
            let n = (offset + len - pos).min(step);
            jobs.push(self.submit(Op::Zero { offset: pos, len: n, may_trim }));
            pos += n;
        }
        futures::future::try_join_all(jobs).await?;
        Ok(())
    }

    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.check(offset, len)?;
        self.submit(Op::Trim { offset, len }).await?;
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        // Every session that acknowledged writes since its last flush is
        // flushed (see flush.rs). Without such writes, one flush on the
        // side session covers whatever else there is (with multi-connection
        // consistency a flush on any session covers all of them).
        if !self.shared.flush_sessions().await? {
            self.submit_side(Op::Flush).await?;
        }
        Ok(())
    }

    async fn block_status(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        self.check(offset, len)?;
        match self.submit_side(Op::BlockStatus { offset, len }).await? {
            Done::Extents(e) => Ok(e),
            _ => Err(unexpected(&self.shared.name)),
        }
    }

    async fn close(&self) -> Result<()> {
        if self.shared.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.close_side().await;
        self.shared.roles.send_modify(|g| *g += 1);
        self.shared.queue_ready.notify_waiters();
        self.shared.openings_done().await;
        let sessions: Vec<_> = lock(&self.shared.sessions).clone();
        // Each session ends cleanly (NBD_CMD_DISC, iSCSI logout) once its
        // requests finished, or is aborted if that takes longer than
        // CLOSE_BOUND: close never waits forever. A session whose requests
        // in flight nobody needs any more (the originals of stragglers a
        // hedge already answered) is aborted instead: on a lossy path such
        // an original can need many seconds more at a few Mbit/s (cubic at
        // 0.1 % loss: a 12 s copy exited after 22 s, CLOSE_BOUND later).
        // Aborting is bounded and polite (NBD: NBD_CMD_DISC and at most a
        // second of the server's answers; iSCSI: ABORT TASK, then logout).
        futures::future::join_all(sessions.iter().filter(|s| !s.failed.load(Ordering::SeqCst)).map(|s| {
            let in_flight = s.in_flight.load(Ordering::SeqCst);
            let unwanted = in_flight > 0 && self.shared.unwanted_in_flight(s.index) >= in_flight;
            if unwanted {
                tracing::debug!(
                    "{}: session {} has only unwanted requests in flight ({in_flight}); aborting it",
                    self.shared.name,
                    s.index
                );
            }
            end_session(Arc::clone(&s.endpoint), unwanted)
        }))
        .await;
        Ok(())
    }

    fn tcp_info(&self) -> Vec<TcpInfo> {
        self.snapshot().sessions.into_iter().flat_map(|s| s.tcp).collect()
    }

    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        Pool::peer_addr(self)
    }
}
