//! How a [`Pool`](super::Pool) is shaped.

/// How a [`Pool`](super::Pool) is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Sessions opened (and active) at start; fewer when the store accepts
    /// fewer.
    pub initial_sessions: usize,
    /// Most sessions the pool will ever open.
    pub max_sessions: usize,
    /// Most requests in flight per session (the controller may use fewer).
    pub max_depth: usize,
    /// Largest request on the wire, bytes (lowered to fit the store's block
    /// sizes; the controller may use smaller ones).
    pub max_request_bytes: u32,
    /// Replacement sessions the pool may open after connection failures.
    pub max_reconnects: usize,
    /// Which straggling requests idle sessions may duplicate.
    pub hedge: Hedge,
}

/// Hedging: when the queue is empty and a session has a free slot, it may
/// run a copy of a request that has been in flight on another session far
/// longer than usual (a stalled connection, e.g. in retransmission
/// backoff); the first copy to complete answers. Reads are always safe to
/// duplicate. Writes are safe only when nobody writes the same range again
/// while the first write may still be in flight (true of a copy, which
/// writes each range once; not of a file system on top of the pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hedge {
    /// Never duplicate.
    Off,
    /// Duplicate straggling reads.
    Reads,
    /// Duplicate straggling reads and writes (each range is written once).
    ReadsAndWrites,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            initial_sessions: 1,
            max_sessions: 64,
            max_depth: 4,
            max_request_bytes: 4 << 20,
            max_reconnects: 8,
            hedge: Hedge::Reads,
        }
    }
}
