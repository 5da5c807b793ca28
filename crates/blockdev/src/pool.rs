//! The session pool: the block device layer of seed 000, section 4.
//!
//! A [`Pool`] keeps up to `max_sessions` sessions open to one store and
//! carries block I/O over the *active* ones. It is itself an [`Endpoint`]:
//! callers read and write ranges of any size; the pool splits them into
//! chunks of `request_size` bytes and queues the chunks on one shared work
//! queue. Every active session runs `depth` workers, and a worker takes the
//! next chunk as soon as it is free (*work pulling*), so a slow or stalled
//! connection only holds the chunks it already took, never a fixed stripe of
//! the address space as RAID-0 striping would.
//!
//! The number of active sessions can change at any time ([`Pool::set_active`]):
//! sessions beyond it stay connected but idle, and a deactivated session
//! finishes the requests it already took before it idles. More sessions are
//! opened lazily when the active count grows past the open ones.
//!
//! Small control requests (block status, flush) must not wait behind
//! megabytes of data queued on a slow connection: a block status reply
//! stuck behind a stalled session's reads starves the whole copy. They go
//! to a separate *control session*, opened on first use, that carries no
//! bulk data (when the store allows more than one session; otherwise they
//! share the work queue).
//!
//! A session whose connection fails (an I/O error, not a protocol or server
//! error) is retired; its chunk is requeued for the others and a replacement
//! session is opened, a bounded number of times. Goodput is measured from
//! completions: [`Pool::completed_bytes`] counts payload bytes of finished
//! reads and writes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use tokio::sync::{Notify, oneshot, watch};

use crate::endpoint::{Capabilities, Connector, Endpoint, EndpointError, ErrorKind, Extent, Result, TcpInfo};

/// How a [`Pool`] is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Sessions active at start (and opened at start).
    pub initial_sessions: usize,
    /// Most sessions the pool will ever open.
    pub max_sessions: usize,
    /// Requests in flight per session.
    pub depth: usize,
    /// Bytes per chunk (the size of one request on the wire).
    pub request_size: u32,
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
            depth: 4,
            request_size: 4 << 20,
            max_reconnects: 8,
            hedge: Hedge::Reads,
        }
    }
}

/// A snapshot of the pool's sessions.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Payload bytes of completed reads and writes since the pool opened.
    pub completed_bytes: u64,
    /// Sessions the pool is asked to keep active.
    pub active: usize,
    /// Sessions open (active or idle), not counting failed ones.
    pub open: usize,
    /// Chunks waiting in the queue.
    pub queued: usize,
    /// Chunks in flight on sessions.
    pub in_flight: usize,
    /// Sessions retired after a connection failure.
    pub failed_sessions: usize,
    /// Straggling requests duplicated on another session.
    pub hedged: u64,
    /// Hedged requests the duplicate answered first.
    pub hedges_won: u64,
}

/// A pool's state at one moment ([`Pool::snapshot`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    /// Every session the pool opened, failed ones included.
    pub sessions: Vec<SessionSnapshot>,
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

/// Where a chunk's result goes; shared by the copies of a hedged chunk.
struct Reply {
    tx: Mutex<Option<oneshot::Sender<Result<Done>>>>,
    /// Copies of the chunk executing now.
    running: AtomicUsize,
}

impl Reply {
    fn new(tx: oneshot::Sender<Result<Done>>) -> Arc<Reply> {
        Arc::new(Reply { tx: Mutex::new(Some(tx)), running: AtomicUsize::new(0) })
    }

    fn is_done(&self) -> bool {
        lock(&self.tx).is_none()
    }

    /// Delivers `r` unless a copy already did; true if this call delivered.
    fn deliver(&self, r: Result<Done>) -> bool {
        match lock(&self.tx).take() {
            Some(tx) => {
                let _ = tx.send(r);
                true
            }
            None => false,
        }
    }
}

/// One chunk of work and where its result goes.
struct Job {
    op: Op,
    reply: Arc<Reply>,
    attempts: u32,
    /// This is the duplicate of a straggler.
    hedge: bool,
}

/// A chunk executing on a session, as seen by idle sessions looking for
/// stragglers.
struct Running {
    id: u64,
    session: usize,
    op: Op,
    reply: Arc<Reply>,
    started: std::time::Instant,
    hedged: bool,
}

/// How often an idle worker looks for stragglers while the queue is empty.
const HEDGE_POLL: std::time::Duration = std::time::Duration::from_millis(100);
/// A request is a straggler after 4 x the mean completion time, clamped to
/// [HEDGE_MIN, HEDGE_MAX]. The cap matters at the end of a copy: the mean
/// then includes queueing behind each session's own requests, and the last
/// requests of a starved connection could otherwise hold the copy for many
/// seconds while the other sessions sit idle (hedging only runs on idle
/// sessions, so duplicates cost bandwidth nobody else is using).
const HEDGE_MIN: std::time::Duration = std::time::Duration::from_millis(500);
const HEDGE_MAX: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Debug, Clone)]
enum Op {
    Read { offset: u64, len: u32 },
    Write { offset: u64, data: Bytes, fua: bool },
    Zero { offset: u64, len: u64, may_trim: bool },
    Trim { offset: u64, len: u64 },
    Flush,
    BlockStatus { offset: u64, len: u64 },
}

impl Op {
    fn offset(&self) -> Option<u64> {
        match self {
            Op::Read { offset, .. }
            | Op::Write { offset, .. }
            | Op::Zero { offset, .. }
            | Op::Trim { offset, .. }
            | Op::BlockStatus { offset, .. } => Some(*offset),
            Op::Flush => None,
        }
    }
}

enum Done {
    Data(Bytes),
    Unit,
    Extents(Vec<Extent>),
}

struct Session {
    index: usize,
    endpoint: Arc<dyn Endpoint>,
    /// Takes new chunks (one of the first `active` alive sessions).
    active: AtomicBool,
    /// Connection failed; workers have exited or will.
    failed: AtomicBool,
    in_flight: AtomicUsize,
    completed_bytes: AtomicU64,
}

struct Shared {
    name: String,
    connector: Arc<dyn Connector>,
    config: PoolConfig,
    max_sessions: usize,
    queue: Mutex<VecDeque<Job>>,
    queue_ready: Notify,
    sessions: Mutex<Vec<Arc<Session>>>,
    /// Bumped whenever session roles change; workers wait on it while idle.
    roles: watch::Sender<u64>,
    want_active: AtomicUsize,
    /// Request slots each active session uses (1..=config.depth); the
    /// tuning loop lowers it so a deactivated session has less to drain.
    want_depth: AtomicUsize,
    /// Bytes per request on the wire now (at most the request size): the
    /// tuning loop shrinks it when each session's share of the path is
    /// small, so a session's requests in flight stay near its share of the
    /// bandwidth-delay product.
    split: std::sync::atomic::AtomicU32,
    /// The store's block size minimum (every split is a multiple of it).
    block_min: u32,
    connecting: AtomicUsize,
    completed_bytes: AtomicU64,
    closed: AtomicBool,
    notes: Mutex<Vec<String>>,
    /// The most recent connection failure, quoted if reconnecting fails too.
    last_failure: Mutex<Option<EndpointError>>,
    /// Chunks executing now (for hedging).
    running: Mutex<Vec<Running>>,
    next_running_id: AtomicU64,
    /// Mean completion time of data chunks, microseconds (EWMA, 1/8).
    mean_us: AtomicU64,
    hedged: AtomicU64,
    hedges_won: AtomicU64,
    /// The control session (None inside: could not be opened, or failed).
    control: tokio::sync::OnceCell<Option<Arc<dyn Endpoint>>>,
    control_failed: AtomicBool,
}

/// The block device layer over N parallel sessions. See the module docs.
pub struct Pool {
    shared: Arc<Shared>,
    size: u64,
    caps: Capabilities,
    request_size: u32,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("name", &self.shared.name).field("stats", &self.stats()).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    /// Opens the first session, reads the store's size and capabilities, and
    /// opens the rest of `config.initial_sessions` in parallel.
    ///
    /// If the store does not allow several consistent sessions
    /// (`can_multi_conn` false) the pool keeps one and records a note.
    ///
    /// # Errors
    /// The first session's connection error, or a bad configuration.
    pub async fn open(connector: Arc<dyn Connector>, config: PoolConfig) -> Result<Pool> {
        let name = connector.name().to_string();
        if config.depth == 0 || config.request_size == 0 || config.max_sessions == 0 {
            return Err(EndpointError::config(
                &name,
                None,
                "depth, request size and sessions must be at least 1",
            ));
        }
        let first = connector.connect().await?;
        let session_caps = first.capabilities();
        let mut notes = Vec::new();
        let mut max_sessions = config.max_sessions;
        if let Some(limit) = connector.max_sessions().filter(|l| *l < max_sessions) {
            notes.push(format!("{name}: the store accepts at most {limit} sessions"));
            max_sessions = limit.max(1);
        }
        if !session_caps.can_multi_conn && max_sessions > 1 {
            notes.push(format!(
                "{name}: the server does not advertise multi-connection consistency (CAN_MULTI_CONN); using 1 session"
            ));
            max_sessions = 1;
        }
        let bs = session_caps.block_sizes;
        let min = bs.minimum.max(1);
        let mut request_size = config.request_size.min(bs.maximum.max(min));
        request_size -= request_size % min;
        if request_size == 0 {
            request_size = min;
        }
        if request_size != config.request_size {
            notes.push(format!(
                "{name}: request size {} adjusted to {request_size} to fit the server's block sizes",
                config.request_size
            ));
        }
        let mut caps = session_caps;
        caps.block_sizes.maximum = (1u32 << 30) - (1u32 << 30) % min;
        caps.block_sizes.preferred = request_size.max(bs.preferred);
        let size = first.size();
        let (roles, _) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            name,
            connector,
            config: PoolConfig { request_size, ..config },
            max_sessions,
            queue: Mutex::new(VecDeque::new()),
            queue_ready: Notify::new(),
            sessions: Mutex::new(Vec::new()),
            roles,
            want_active: AtomicUsize::new(config.initial_sessions.clamp(1, max_sessions)),
            want_depth: AtomicUsize::new(config.depth),
            split: std::sync::atomic::AtomicU32::new(request_size),
            block_min: min,
            connecting: AtomicUsize::new(0),
            completed_bytes: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            notes: Mutex::new(notes),
            last_failure: Mutex::new(None),
            control: tokio::sync::OnceCell::new(),
            control_failed: AtomicBool::new(false),
            running: Mutex::new(Vec::new()),
            next_running_id: AtomicU64::new(0),
            mean_us: AtomicU64::new(0),
            hedged: AtomicU64::new(0),
            hedges_won: AtomicU64::new(0),
        });
        Shared::add_session(&shared, first);
        let pool = Pool { shared, size, caps, request_size };
        // Open the other initial sessions now, in parallel, and wait for them
        // so a fixed-N run starts with all N.
        let want = pool.shared.want_active.load(Ordering::SeqCst);
        let opens = (1..want).map(|_| pool.shared.connector.connect());
        for r in futures::future::join_all(opens).await {
            match r {
                Ok(ep) => Shared::add_session(&pool.shared, ep),
                Err(e) => pool.shared.note(format!("could not open an extra session: {e}")),
            }
        }
        pool.shared.rebalance();
        Ok(pool)
    }

    /// Sets the number of active sessions (clamped to `1..=max_sessions`),
    /// opening new sessions in the background when needed. Returns the
    /// clamped value.
    pub fn set_active(&self, n: usize) -> usize {
        let n = n.clamp(1, self.shared.max_sessions);
        self.shared.want_active.store(n, Ordering::SeqCst);
        self.shared.rebalance();
        n
    }

    /// Sets how many request slots each active session uses (clamped to
    /// `1..=depth` of the configuration) and returns the clamped value. A
    /// slot beyond it finishes its request, then idles. Fewer slots mean
    /// fewer bytes a session must finish when it is deactivated.
    pub fn set_depth(&self, d: usize) -> usize {
        let d = d.clamp(1, self.shared.config.depth);
        if self.shared.want_depth.swap(d, Ordering::SeqCst) != d {
            self.shared.roles.send_modify(|g| *g += 1);
            self.shared.queue_ready.notify_waiters();
        }
        d
    }

    /// Sets the bytes per request on the wire (callers' reads and writes
    /// are cut into pieces this size): clamped to the pool's request size
    /// and rounded down to the store's block size minimum. Returns the
    /// value used.
    pub fn set_split(&self, bytes: u32) -> u32 {
        let min = self.shared.block_min.max(1);
        let mut b = bytes.clamp(min, self.request_size);
        b -= b % min;
        let b = if b == 0 { self.request_size } else { b };
        self.shared.split.store(b, Ordering::SeqCst);
        b
    }

    /// Bytes per request on the wire now.
    pub fn split(&self) -> u32 {
        self.shared.split.load(Ordering::SeqCst)
    }

    /// Most request slots a session may use (`depth` of the configuration).
    pub fn max_depth(&self) -> usize {
        self.shared.config.depth
    }

    /// Request slots each active session uses now.
    pub fn depth(&self) -> usize {
        self.shared.want_depth.load(Ordering::SeqCst)
    }

    /// The active session count asked for (sessions still opening included).
    pub fn active(&self) -> usize {
        self.shared.want_active.load(Ordering::SeqCst)
    }

    /// Most sessions this pool may open (after the store's limits).
    pub fn max_sessions(&self) -> usize {
        self.shared.max_sessions
    }

    /// Bytes per chunk on the wire.
    pub fn request_size(&self) -> u32 {
        self.request_size
    }

    /// How many `request_size` pieces a caller should have outstanding to
    /// keep every request slot of the active sessions busy: active sessions
    /// x slots per session, in requests of the current split size, counted
    /// in pieces of the full request size (at least 1). A caller that keeps
    /// many more queued only makes the queue longer: a deactivated session
    /// or a new split size takes effect later.
    pub fn slots(&self) -> usize {
        let bytes = self.active() as u64 * self.depth() as u64 * u64::from(self.split());
        bytes.div_ceil(u64::from(self.request_size.max(1))).max(1) as usize
    }

    /// Payload bytes of completed reads and writes (goodput numerator).
    pub fn completed_bytes(&self) -> u64 {
        self.shared.completed_bytes.load(Ordering::Relaxed)
    }

    /// Notes about adjustments the pool made (clamped sessions, request size...).
    pub fn notes(&self) -> Vec<String> {
        lock(&self.shared.notes).clone()
    }

    /// A snapshot of the pool's state.
    pub fn stats(&self) -> PoolStats {
        let sessions = lock(&self.shared.sessions);
        PoolStats {
            completed_bytes: self.completed_bytes(),
            active: self.active(),
            open: sessions.iter().filter(|s| !s.failed.load(Ordering::Relaxed)).count(),
            queued: lock(&self.shared.queue).len(),
            in_flight: sessions.iter().map(|s| s.in_flight.load(Ordering::Relaxed)).sum(),
            failed_sessions: sessions.iter().filter(|s| s.failed.load(Ordering::Relaxed)).count(),
            hedged: self.shared.hedged.load(Ordering::Relaxed),
            hedges_won: self.shared.hedges_won.load(Ordering::Relaxed),
        }
    }

    /// Everything the pool can say about itself now, in plain values: its
    /// limits, the request shape in use, and every session it opened.
    pub fn snapshot(&self) -> PoolSnapshot {
        let sessions: Vec<_> = lock(&self.shared.sessions).clone();
        PoolSnapshot {
            completed_bytes: self.completed_bytes(),
            active: self.active(),
            max_sessions: self.shared.max_sessions,
            max_request_bytes: self.request_size,
            request_align: self.shared.block_min.max(1),
            max_depth: self.shared.config.depth,
            request_bytes: self.split(),
            depth: self.depth(),
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

    /// Deactivated sessions that still have requests in flight: they finish
    /// what they took before going idle, and until then their bytes still
    /// count in the pool's goodput.
    pub fn draining(&self) -> usize {
        lock(&self.shared.sessions)
            .iter()
            .filter(|s| !s.failed.load(Ordering::Relaxed))
            .filter(|s| !s.active.load(Ordering::Relaxed) && s.in_flight.load(Ordering::Relaxed) > 0)
            .count()
    }

    /// TCP_INFO of every open session, with its index and whether it is active.
    pub fn session_tcp_info(&self) -> Vec<(usize, bool, Vec<TcpInfo>)> {
        let sessions: Vec<_> = lock(&self.shared.sessions).clone();
        sessions
            .iter()
            .filter(|s| !s.failed.load(Ordering::Relaxed))
            .map(|s| (s.index, s.active.load(Ordering::Relaxed), s.endpoint.tcp_info()))
            .collect()
    }

    /// Completed payload bytes per open session, by index.
    pub fn session_completed_bytes(&self) -> Vec<(usize, u64)> {
        lock(&self.shared.sessions)
            .iter()
            .map(|s| (s.index, s.completed_bytes.load(Ordering::Relaxed)))
            .collect()
    }

    /// The control session, opened on first use; `None` when the store
    /// allows only one session or the control session could not be used.
    async fn control(&self) -> Option<Arc<dyn Endpoint>> {
        if self.shared.max_sessions < 2 || self.shared.control_failed.load(Ordering::Relaxed) {
            return None;
        }
        let shared = &self.shared;
        shared
            .control
            .get_or_init(|| async {
                match shared.connector.connect().await {
                    Ok(ep) => Some(ep),
                    Err(e) => {
                        shared.note(format!(
                            "no control session ({e}); control requests share the data sessions"
                        ));
                        None
                    }
                }
            })
            .await
            .clone()
    }

    /// Runs a control request on the control session, falling back to the
    /// work queue if there is none or it fails with an I/O error.
    async fn submit_control(&self, op: Op) -> Result<Done> {
        if let Some(ep) = self.control().await {
            match execute(&*ep, &op).await {
                Err(e) if matches!(e.kind, ErrorKind::Io(_)) => {
                    self.shared.control_failed.store(true, Ordering::Relaxed);
                    self.shared.note(format!("control session failed: {e}; using the data sessions"));
                }
                r => return r,
            }
        }
        self.submit(op).await
    }

    async fn submit(&self, op: Op) -> Result<Done> {
        let (tx, rx) = oneshot::channel();
        self.shared.push(Job { op, reply: Reply::new(tx), attempts: 0, hedge: false }, false);
        rx.await
            .unwrap_or_else(|_| Err(EndpointError::io(&self.shared.name, None, "the session pool shut down")))
    }

    /// Splits `[offset, offset+len)` into request-size chunks.
    fn chunks(&self, offset: u64, len: u64) -> impl Iterator<Item = (u64, u64)> + use<> {
        let rs = u64::from(self.split().max(1));
        let end = offset + len;
        let mut pos = offset;
        std::iter::from_fn(move || {
            if pos >= end {
                return None;
            }
            let n = (end - pos).min(rs);
            let r = (pos, n);
            pos += n;
            Some(r)
        })
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

impl Shared {
    fn note(&self, s: String) {
        tracing::warn!("{s}");
        lock(&self.notes).push(s);
    }

    fn push(&self, job: Job, front: bool) {
        {
            let mut q = lock(&self.queue);
            if front { q.push_front(job) } else { q.push_back(job) }
        }
        self.queue_ready.notify_one();
    }

    async fn pop(&self) -> Option<Job> {
        loop {
            let notified = self.queue_ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(j) = lock(&self.queue).pop_front() {
                return Some(j);
            }
            if self.closed.load(Ordering::SeqCst) {
                return None;
            }
            notified.await;
        }
    }

    fn add_session(this: &Arc<Shared>, endpoint: Arc<dyn Endpoint>) {
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
        for slot in 0..this.config.depth {
            tokio::spawn(worker(Arc::clone(this), Arc::clone(&session), slot));
        }
    }

    /// Slot `slot` of `session` may take work: the session is active and
    /// the slot is within the depth asked for ([`Pool::set_depth`]).
    fn slot_open(&self, session: &Session, slot: usize) -> bool {
        session.active.load(Ordering::SeqCst) && slot < self.want_depth.load(Ordering::SeqCst)
    }

    /// Marks the first `want_active` healthy sessions active and the rest
    /// idle, and opens more sessions when there are too few.
    fn rebalance(self: &Arc<Self>) {
        let want = self.want_active.load(Ordering::SeqCst);
        let (healthy, failed) = {
            let sessions = lock(&self.sessions);
            let mut n = 0;
            for s in sessions.iter() {
                let ok = !s.failed.load(Ordering::SeqCst);
                s.active.store(ok && n < want, Ordering::SeqCst);
                if ok {
                    n += 1;
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
        let missing = want.saturating_sub(healthy + connecting);
        for _ in 0..missing {
            if self.closed.load(Ordering::SeqCst) {
                break;
            }
            self.connecting.fetch_add(1, Ordering::SeqCst);
            let this = Arc::clone(self);
            tokio::spawn(async move {
                let r = this.connector.connect().await;
                this.connecting.fetch_sub(1, Ordering::SeqCst);
                match r {
                    Ok(ep) if !this.closed.load(Ordering::SeqCst) => {
                        Shared::add_session(&this, ep);
                        this.rebalance();
                    }
                    Ok(ep) => {
                        let _ = ep.close().await;
                    }
                    Err(e) => {
                        // Keep what is open; settle the target to what we have.
                        this.note(format!("could not open another session: {e}"));
                        let healthy =
                            lock(&this.sessions).iter().filter(|s| !s.failed.load(Ordering::SeqCst)).count();
                        let settle = healthy.max(1);
                        if this.want_active.load(Ordering::SeqCst) > settle && healthy > 0 {
                            this.want_active.store(settle, Ordering::SeqCst);
                            this.rebalance();
                        } else if healthy == 0 {
                            let err = match lock(&this.last_failure).clone() {
                                Some(f) => EndpointError::io(
                                    &this.name,
                                    None,
                                    format!(
                                        "{} (and reconnecting failed: {})",
                                        f.kind.detail(),
                                        e.kind.detail()
                                    ),
                                ),
                                None => e,
                            };
                            this.fail_all(err);
                        }
                    }
                }
            });
        }
    }

    /// Hedging applies to this operation.
    fn hedgeable(&self, op: &Op) -> bool {
        match (self.config.hedge, op) {
            (Hedge::Off, _) => false,
            (_, Op::Read { .. }) => true,
            (Hedge::ReadsAndWrites, Op::Write { .. }) => true,
            _ => false,
        }
    }

    /// The oldest straggler running on another session than `mine`, marked
    /// hedged and returned as a job to duplicate.
    fn straggler(&self, mine: usize) -> Option<Job> {
        let mean = std::time::Duration::from_micros(self.mean_us.load(Ordering::Relaxed));
        let limit = (mean * 4).clamp(HEDGE_MIN, HEDGE_MAX);
        let now = std::time::Instant::now();
        let mut running = lock(&self.running);
        let r = running
            .iter_mut()
            .filter(|r| {
                !r.hedged && r.session != mine && now.duration_since(r.started) > limit && !r.reply.is_done()
            })
            .filter(|r| self.hedgeable(&r.op))
            .min_by_key(|r| r.started)?;
        r.hedged = true;
        self.hedged.fetch_add(1, Ordering::Relaxed);
        Some(Job { op: r.op.clone(), reply: Arc::clone(&r.reply), attempts: 0, hedge: true })
    }

    /// No session can serve anymore: fail everything queued.
    fn fail_all(&self, err: EndpointError) {
        let jobs: Vec<Job> = lock(&self.queue).drain(..).collect();
        for j in jobs {
            let e = match j.op.offset() {
                Some(o) => err.clone().at(o),
                None => err.clone(),
            };
            j.reply.deliver(Err(e));
        }
    }

    /// A session's connection failed while it carried `job`.
    fn session_failed(self: &Arc<Self>, session: &Session, job: Job, err: EndpointError) {
        *lock(&self.last_failure) = Some(err.clone());
        if !session.failed.swap(true, Ordering::SeqCst) {
            self.note(format!("session {} failed: {err}", session.index));
            let ep = Arc::clone(&session.endpoint);
            tokio::spawn(async move {
                let _ = ep.close().await;
            });
        }
        let (healthy, failed) = {
            let sessions = lock(&self.sessions);
            let healthy = sessions.iter().filter(|s| !s.failed.load(Ordering::SeqCst)).count();
            (healthy, sessions.len() - healthy)
        };
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

/// One request slot of one session: pulls chunks while the session is
/// active, and duplicates stragglers of other sessions when the queue is
/// empty (see [`Hedge`]).
async fn worker(shared: Arc<Shared>, session: Arc<Session>, slot: usize) {
    let mut roles = shared.roles.subscribe();
    let hedging = shared.config.hedge != Hedge::Off;
    loop {
        if shared.closed.load(Ordering::SeqCst) || session.failed.load(Ordering::SeqCst) {
            return;
        }
        if !shared.slot_open(&session, slot) {
            if roles.changed().await.is_err() {
                return;
            }
            continue;
        }
        let job = tokio::select! {
            j = shared.pop() => match j { Some(j) => j, None => return },
            r = roles.changed() => { if r.is_err() { return } continue }
            _ = tokio::time::sleep(HEDGE_POLL), if hedging => {
                match shared.straggler(session.index) {
                    Some(j) => j,
                    None => continue,
                }
            }
        };
        if !shared.slot_open(&session, slot) || session.failed.load(Ordering::SeqCst) {
            if !job.hedge {
                shared.push(job, true);
            }
            continue;
        }
        if job.reply.is_done() {
            continue;
        }
        let id = shared.next_running_id.fetch_add(1, Ordering::Relaxed);
        let started = std::time::Instant::now();
        if shared.hedgeable(&job.op) {
            lock(&shared.running).push(Running {
                id,
                session: session.index,
                op: job.op.clone(),
                reply: Arc::clone(&job.reply),
                started,
                hedged: job.hedge,
            });
        }
        job.reply.running.fetch_add(1, Ordering::SeqCst);
        session.in_flight.fetch_add(1, Ordering::Relaxed);
        let r = execute(&*session.endpoint, &job.op).await;
        session.in_flight.fetch_sub(1, Ordering::Relaxed);
        job.reply.running.fetch_sub(1, Ordering::SeqCst);
        lock(&shared.running).retain(|r| r.id != id);
        match r {
            Err(e) if matches!(e.kind, ErrorKind::Io(_)) => {
                shared.session_failed(&session, job, e);
                return;
            }
            Ok(done) => {
                let n = match &job.op {
                    Op::Read { len, .. } => u64::from(*len),
                    Op::Write { data, .. } => data.len() as u64,
                    _ => 0,
                };
                if n > 0 {
                    let us = started.elapsed().as_micros().min(u128::from(u64::MAX)) as u64;
                    let old = shared.mean_us.load(Ordering::Relaxed);
                    let mean = if old == 0 { us } else { old - old / 8 + us / 8 };
                    shared.mean_us.store(mean, Ordering::Relaxed);
                }
                // Count before answering, so a caller that reads the
                // counters after its request returns sees this one.
                if let Some(tx) = lock(&job.reply.tx).take() {
                    session.completed_bytes.fetch_add(n, Ordering::Relaxed);
                    shared.completed_bytes.fetch_add(n, Ordering::Relaxed);
                    if job.hedge {
                        shared.hedges_won.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = tx.send(Ok(done));
                }
            }
            Err(e) => {
                // A protocol or server error: the answer, unless a copy of
                // the chunk is still running and may succeed.
                if job.reply.running.load(Ordering::SeqCst) == 0 {
                    job.reply.deliver(Err(e));
                }
            }
        }
    }
}

async fn execute(ep: &dyn Endpoint, op: &Op) -> Result<Done> {
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

impl Drop for Pool {
    fn drop(&mut self) {
        // Let idle workers exit; sessions close when their last Arc drops.
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.roles.send_modify(|g| *g += 1);
        self.shared.queue_ready.notify_waiters();
    }
}

fn unexpected(name: &str) -> EndpointError {
    EndpointError::io(name, None, "internal error: unexpected completion kind")
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

    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        self.check(offset, len.into())?;
        let parts = futures::future::try_join_all(
            self.chunks(offset, len.into()).map(|(o, n)| self.submit(Op::Read { offset: o, len: n as u32 })),
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

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<()> {
        self.check(offset, data.len() as u64)?;
        futures::future::try_join_all(self.chunks(offset, data.len() as u64).map(|(o, n)| {
            let piece = data.slice((o - offset) as usize..(o - offset + n) as usize);
            self.submit(Op::Write { offset: o, data: piece, fua })
        }))
        .await?;
        Ok(())
    }

    async fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<()> {
        self.check(offset, len)?;
        // Zeroing moves no payload: larger pieces are fine, but still bounded
        // so a huge request does not occupy one session for long.
        let piece = u64::from(self.request_size).max(64 << 20);
        let mut jobs = Vec::new();
        let mut pos = offset;
        while pos < offset + len {
            let n = (offset + len - pos).min(piece);
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
        // With multi-connection consistency a flush on any session covers
        // the writes completed on all of them.
        self.submit_control(Op::Flush).await?;
        Ok(())
    }

    async fn block_status(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        self.check(offset, len)?;
        match self.submit_control(Op::BlockStatus { offset, len }).await? {
            Done::Extents(e) => Ok(e),
            _ => Err(unexpected(&self.shared.name)),
        }
    }

    async fn close(&self) -> Result<()> {
        if let Some(Some(ep)) = self.shared.control.get() {
            let _ = ep.close().await;
        }
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.roles.send_modify(|g| *g += 1);
        self.shared.queue_ready.notify_waiters();
        let sessions: Vec<_> = lock(&self.shared.sessions).clone();
        let results = futures::future::join_all(
            sessions.iter().filter(|s| !s.failed.load(Ordering::SeqCst)).map(|s| {
                let ep = Arc::clone(&s.endpoint);
                async move { ep.close().await }
            }),
        )
        .await;
        results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
    }

    fn tcp_info(&self) -> Vec<TcpInfo> {
        self.session_tcp_info().into_iter().flat_map(|(_, _, v)| v).collect()
    }
}
