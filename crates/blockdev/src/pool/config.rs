//! How a [`Pool`](super::Pool) is shaped, and how it rides out failures.

use std::time::Duration;

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
    /// Which straggling requests idle sessions may duplicate.
    pub hedge: Hedge,
    /// Reconnecting, retrying and deadlines.
    pub retry: RetryPolicy,
    /// [`Pool::open`](super::Pool::open) returns once the first session is
    /// up and opens the other initial ones in the background, so work
    /// starts three round trips (their handshakes) sooner; a tuned N,
    /// whose first interval is a warm-up anyway. Otherwise it waits for
    /// all of them, and a fixed N starts with all N.
    pub background_initial: bool,
}

/// How a pool rides out failures: sessions that fail are replaced,
/// pacing the attempts with exponential backoff and jitter for up to
/// `retry_for` of failed attempts in a row; requests of a failed session
/// are sent again; transient server errors are retried a few times;
/// requests past their deadline are sent again on another session and the
/// stuck session is replaced; writes acknowledged but not yet flushed are
/// kept, and sent again if their session fails before a flush covers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Keep trying to open sessions this long after the first of a run of
    /// failed attempts; then requests fail (if no session is left).
    pub retry_for: Duration,
    /// Wait after the first failed attempt; it doubles after each further
    /// one, up to `backoff_max`, each wait drawn between half and all of it.
    pub backoff_min: Duration,
    /// The longest wait between attempts.
    pub backoff_max: Duration,
    /// How often one request is sent again after transient server errors.
    pub transient_retries: u32,
    /// How often one request is sent again after the session carrying it
    /// failed (a request that breaks every session it touches must end).
    pub max_attempts: u32,
    /// A request with no answer after this long is sent again on another
    /// session, and its session is replaced (flushes get 4 times as long);
    /// `None`: wait forever.
    pub io_timeout: Option<Duration>,
    /// Bytes of acknowledged, unflushed writes the pool keeps (to send
    /// again after a failure) before it flushes by itself; at twice this,
    /// new writes wait for that flush.
    pub unflushed_limit: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retry_for: Duration::from_secs(300),
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(5),
            transient_retries: 5,
            max_attempts: 8,
            io_timeout: Some(Duration::from_secs(60)),
            unflushed_limit: 512 << 20,
        }
    }
}

impl RetryPolicy {
    /// The deadline of a flush: 4 x `io_timeout` (a flush may write back a
    /// large cache).
    pub fn flush_timeout(&self) -> Option<Duration> {
        self.io_timeout.map(|t| t * 4)
    }
}

/// Hedging: when the queue is empty and a session has nothing in flight, it
/// may run a copy of a request that has been in flight on another session
/// far longer than usual (a stalled connection, e.g. in retransmission
/// backoff; a large one in parts over several idle sessions); the first
/// copy to complete answers. (A busy session's free slot does not: the
/// copy would wait behind that session's own requests.) Reads are always safe to
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
            hedge: Hedge::Reads,
            retry: RetryPolicy::default(),
            background_initial: false,
        }
    }
}
