//! What the pool reports about itself, in plain values: what the
//! controller needs (limits, request shape, per-session counters) and what
//! a report shows (bytes per session, failures, hedging).

use std::sync::atomic::Ordering;

use super::{Pool, lock};
use crate::endpoint::TcpInfo;

/// A pool's state at one moment ([`Pool::snapshot`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolSnapshot {
    /// Payload bytes of completed reads and writes since the pool opened.
    pub completed_bytes: u64,
    /// Sessions the pool is asked to keep active.
    pub active: usize,
    /// Most sessions the pool may open (after the store's limits).
    pub max_sessions: usize,
    /// Largest request on the wire (configured, fitted to the store).
    pub max_request_bytes: u32,
    /// Request sizes are multiples of this (the store's block size).
    pub request_align: u32,
    /// Most requests in flight per session.
    pub max_depth: usize,
    /// Bytes per request on the wire now.
    pub request_bytes: u32,
    /// Requests in flight per active session now.
    pub depth: usize,
    /// Requests waiting in the queue.
    pub queued: usize,
    /// Microseconds open request slots of active sessions waited for work
    /// since the pool opened, summed over the slots.
    pub idle_slot_us: u64,
    /// Straggling requests duplicated on another session.
    pub hedged: u64,
    /// Hedged requests the duplicate answered first.
    pub hedges_won: u64,
    /// Sessions asked to be kept open (warm spares included).
    pub open_target: usize,
    /// Sessions being opened now (connecting, logging in).
    pub connecting: usize,
    /// What went wrong so far, and was ridden out.
    pub faults: Faults,
    /// Every session the pool opened, failed ones included.
    pub sessions: Vec<SessionSnapshot>,
}

/// What went wrong in a pool, and was ridden out (see
/// [`RetryPolicy`](super::RetryPolicy)).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Failed sessions replaced by new ones.
    pub reconnects: u64,
    /// Requests sent again: after their session failed or passed the
    /// deadline, after a transient server error, or as the duplicate of a
    /// straggler (hedging).
    pub retried_requests: u64,
    /// Transient server errors retried.
    pub transient_errors: u64,
    /// Requests (flushes included) that passed their deadline.
    pub timeouts: u64,
    /// Bytes of acknowledged writes sent again because their session
    /// failed before a flush covered them.
    pub resent_bytes: u64,
    /// Time with no working session, seconds (so far).
    pub outage_s: f64,
    /// No working session now, and trying to open one.
    pub reconnecting: bool,
    /// Acknowledged writes no flush covers yet, bytes.
    pub unflushed_bytes: u64,
}

impl Faults {
    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &Faults) {
        self.reconnects += o.reconnects;
        self.retried_requests += o.retried_requests;
        self.transient_errors += o.transient_errors;
        self.timeouts += o.timeouts;
        self.resent_bytes += o.resent_bytes;
        self.outage_s += o.outage_s;
        self.reconnecting |= o.reconnecting;
        self.unflushed_bytes += o.unflushed_bytes;
    }
}

/// One session of a [`PoolSnapshot`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionSnapshot {
    /// Index in the pool (in the order opened).
    pub index: usize,
    /// Takes new requests.
    pub active: bool,
    /// Its connection failed; it was retired.
    pub failed: bool,
    /// Requests it carries now.
    pub in_flight: usize,
    /// Payload bytes of the reads and writes it completed.
    pub completed_bytes: u64,
    /// TCP_INFO of its connections (empty without TCP, or once failed).
    pub tcp: Vec<TcpInfo>,
}

impl PoolSnapshot {
    /// Sessions open (not failed).
    pub fn open(&self) -> usize {
        self.sessions.iter().filter(|s| !s.failed).count()
    }

    /// Sessions retired after a connection failure.
    pub fn failed(&self) -> usize {
        self.sessions.iter().filter(|s| s.failed).count()
    }

    /// Requests in flight on all sessions.
    pub fn in_flight(&self) -> usize {
        self.sessions.iter().map(|s| s.in_flight).sum()
    }

    /// Deactivated open sessions that still carry requests: they finish
    /// what they took before going idle, and until then their bytes still
    /// count in the pool's goodput.
    pub fn draining(&self) -> usize {
        self.sessions.iter().filter(|s| !s.failed && !s.active && s.in_flight > 0).count()
    }
}

impl Pool {
    /// What went wrong so far (see [`Faults`]).
    pub fn faults(&self) -> Faults {
        let sh = &self.shared;
        let f = &sh.faults;
        let (outage_s, down) = {
            let o = lock(&sh.outage);
            let now = o.since.map_or(std::time::Duration::ZERO, |s| s.elapsed());
            ((o.total + now).as_secs_f64(), o.since.is_some())
        };
        Faults {
            reconnects: f.reconnects.load(Ordering::Relaxed),
            retried_requests: f.retried.load(Ordering::Relaxed),
            transient_errors: f.transient.load(Ordering::Relaxed),
            timeouts: f.timeouts.load(Ordering::Relaxed),
            resent_bytes: f.resent_bytes.load(Ordering::Relaxed),
            outage_s,
            reconnecting: down && sh.dead().is_none(),
            unflushed_bytes: lock(&sh.ledger).held(),
        }
    }

    /// The TCP peer of the first working session that has one (see
    /// [`Endpoint::peer_addr`](crate::Endpoint::peer_addr)).
    pub fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        let sessions: Vec<_> = lock(&self.shared.sessions).clone();
        sessions.iter().filter(|s| !s.failed.load(Ordering::Relaxed)).find_map(|s| s.endpoint.peer_addr())
    }

    /// Everything the pool can say about itself now (see [`PoolSnapshot`]).
    pub fn snapshot(&self) -> PoolSnapshot {
        let sh = &self.shared;
        let sessions: Vec<_> = lock(&sh.sessions).clone();
        PoolSnapshot {
            completed_bytes: self.completed_bytes(),
            active: sh.active.load(Ordering::SeqCst),
            max_sessions: sh.max_sessions,
            max_request_bytes: sh.config.max_request_bytes,
            request_align: sh.block_min,
            max_depth: sh.config.max_depth,
            request_bytes: self.request_bytes(),
            depth: sh.depth.load(Ordering::SeqCst),
            queued: lock(&sh.queue).len() + lock(&sh.ahead).len(),
            idle_slot_us: sh.idle_slot_us.load(Ordering::Relaxed),
            hedged: sh.hedged.load(Ordering::Relaxed),
            hedges_won: sh.hedges_won.load(Ordering::Relaxed),
            open_target: sh.open.load(Ordering::Relaxed).max(sh.active.load(Ordering::SeqCst)),
            connecting: sh.connecting.load(Ordering::SeqCst),
            faults: self.faults(),
            sessions: sessions
                .iter()
                .map(|s| {
                    let failed = s.failed.load(Ordering::Relaxed);
                    SessionSnapshot {
                        index: s.index,
                        active: s.active.load(Ordering::Relaxed),
                        failed,
                        in_flight: s.in_flight.load(Ordering::Relaxed),
                        completed_bytes: s.completed_bytes.load(Ordering::Relaxed),
                        tcp: if failed { Vec::new() } else { s.endpoint.tcp_info() },
                    }
                })
                .collect(),
        }
    }
}
