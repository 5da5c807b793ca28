//! The session pool: the block device layer of BDL-APT, section 4.
//!
//! A [`Pool`] keeps up to `max_sessions` sessions open to one store and
//! carries block I/O over the *active* ones. It is itself an [`Endpoint`]:
//! callers read and write ranges of any size; the pool cuts them into
//! requests of the current request size ([`Pool::set_request_bytes`]) and
//! queues them on one shared work queue (`queue.rs`). Every active session
//! runs one worker per request slot (`worker.rs`, at most the depth, see
//! [`Pool::set_depth`]), and a worker takes the next request as soon as it
//! is free (*work pulling*), so a slow or stalled connection only holds the
//! requests it already took, never a fixed stripe of the address space as
//! RAID-0 striping would.
//!
//! The number of active sessions can change at any time ([`Pool::set_active`]):
//! sessions beyond it stay connected but idle, and a deactivated session
//! finishes the requests it already took before it idles (it *drains*).
//! More sessions are opened lazily when the active count grows past the
//! open ones (`reconnect.rs`).
//!
//! The pool decides nothing about N, request sizes or depth: it applies
//! what the controller decides and refuses values outside its limits; it
//! reports what the controller needs in a [`PoolSnapshot`].
//!
//! - `config.rs`: [`PoolConfig`] and [`Hedge`].
//! - `queue.rs`: the work queue, the operations and where results go.
//! - `worker.rs`: the per-slot work loop.
//! - `hedging.rs`: duplicating stragglers on idle sessions ([`Hedge`]).
//! - `reconnect.rs`: active roles, opening sessions, retiring failed ones.
//! - `backoff.rs`: when to try opening a session again (sans-I/O).
//! - `ledger.rs`: acknowledged writes no flush covers yet.
//! - `flush.rs`: flushing them (one flush, on the least busy session).
//! - `side.rs`: the side session for block status and flush.
//! - `endpoint.rs`: the [`Endpoint`] implementation.
//! - `snapshot.rs`: [`PoolSnapshot`] and [`Faults`].
//!
//! Failures ([`RetryPolicy`]): a session whose connection fails (an I/O
//! error, not a protocol or server error), or whose request gets no
//! answer within the deadline, is retired; its requests are queued again
//! for the others, the writes it acknowledged since its last flush are
//! sent again, and a replacement session is opened. Openings that fail
//! are paced with exponential backoff and jitter, one at a time, for up
//! to `retry_for`; only then, with no session left, do requests fail.
//! While no session works, requests wait. Transient server errors (NBD
//! EIO, SCSI BUSY...) are retried a few times; permanent ones are
//! answered at once.
//!
//! Goodput is measured from completions: [`Pool::completed_bytes`] counts
//! payload bytes of finished reads and writes.

mod backoff;
mod config;
mod endpoint;
mod flush;
mod hedging;
mod ledger;
mod queue;
mod reconnect;
mod send_room;
mod side;
mod snapshot;
mod worker;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};

pub use config::{Hedge, PoolConfig, RetryPolicy};
pub use snapshot::{Faults, PoolSnapshot, SessionSnapshot};

use crate::endpoint::{Capabilities, Connector, Endpoint, EndpointError, Result};
use hedging::Running;
use queue::Job;

/// The pool's record of one session.
struct Session {
    index: usize,
    endpoint: Arc<dyn Endpoint>,
    /// Takes new requests (one of the first `active` healthy sessions).
    active: AtomicBool,
    /// Connection failed; workers have exited or will.
    failed: AtomicBool,
    in_flight: AtomicUsize,
    completed_bytes: AtomicU64,
    /// A request of this session completed (it works, not only connects).
    proven: AtomicBool,
}

/// Counters of what went wrong (see [`Faults`]).
#[derive(Default)]
struct FaultCounters {
    reconnects: AtomicU64,
    retried: AtomicU64,
    transient: AtomicU64,
    timeouts: AtomicU64,
    resent_bytes: AtomicU64,
    /// Session failures not yet made good by a new session.
    to_replace: AtomicUsize,
}

/// Time with no working session.
#[derive(Default)]
struct Outage {
    since: Option<Instant>,
    total: Duration,
}

/// What the pool's handle, its workers and background tasks share.
struct Shared {
    name: String,
    connector: Arc<dyn Connector>,
    /// The configuration, with `max_request_bytes` fitted to the store.
    config: PoolConfig,
    /// Most sessions: the configured ones, or fewer if the store says so.
    max_sessions: usize,
    queue: Mutex<VecDeque<Job>>,
    /// Read-ahead requests: taken only when `queue` is empty, so a demand
    /// request never waits behind speculative ones.
    ahead: Mutex<VecDeque<Job>>,
    queue_ready: Notify,
    sessions: Mutex<Vec<Arc<Session>>>,
    /// Bumped whenever session roles change; workers wait on it while idle.
    roles: watch::Sender<u64>,
    /// Sessions asked to be active.
    active: AtomicUsize,
    /// Sessions asked to be kept open (at least `active`; the others idle,
    /// warm spares).
    open: AtomicUsize,
    /// Request slots each active session uses (1..=max_depth).
    depth: AtomicUsize,
    /// Cap on the bytes per second all active sessions together send (0:
    /// none), split evenly over them as each one's pacing rate.
    rate_cap: AtomicU64,
    /// Cap on the window each session advertises, bytes (0: none).
    window_clamp: AtomicU64,
    /// Bytes per request on the wire now (1..=max_request_bytes, a
    /// multiple of `block_min`).
    request_bytes: AtomicU32,
    /// The store's block size minimum.
    block_min: u32,
    /// The store has a volatile cache to flush: acknowledged writes are
    /// kept until a flush covers them.
    can_flush: bool,
    connecting: AtomicUsize,
    completed_bytes: AtomicU64,
    /// Microseconds open request slots of active sessions waited for work,
    /// summed over the slots (demand against capacity).
    idle_slot_us: AtomicU64,
    closed: AtomicBool,
    notes: Mutex<Vec<String>>,
    /// The most recent connection failure, quoted if reconnecting fails too.
    last_failure: Mutex<Option<EndpointError>>,
    /// Requests executing now (for hedging).
    running: Mutex<Vec<Running>>,
    /// Parts of stragglers' duplicates waiting for an idle session, each
    /// with the reply of the request it is part of.
    parts: Mutex<std::collections::VecDeque<(Arc<queue::Reply>, queue::Job)>>,
    next_running_id: AtomicU64,
    /// Mean completion time of data requests, microseconds (EWMA, 1/8).
    mean_us: AtomicU64,
    hedged: AtomicU64,
    hedges_won: AtomicU64,
    /// The side session (None inside: could not be opened).
    side: tokio::sync::OnceCell<Option<Arc<dyn Endpoint>>>,
    side_failed: AtomicBool,
    /// The side session is being opened (in the background).
    side_opening: AtomicBool,
    /// Pacing of session openings after failures.
    backoff: Mutex<backoff::Backoff>,
    /// A paced opening is scheduled or under way.
    reconnecting: AtomicBool,
    /// Gave up reconnecting with no session left: every request fails so.
    dead: Mutex<Option<EndpointError>>,
    faults: FaultCounters,
    outage: Mutex<Outage>,
    /// Acknowledged writes no flush covers yet.
    ledger: Mutex<ledger::Ledger>,
    /// Acknowledgements so far (orders the ledger's entries).
    acks: AtomicU64,
    /// Writes being sent again, and the first of them that failed.
    resending: AtomicUsize,
    resend_error: Mutex<Option<EndpointError>>,
    /// Signalled when resending ends or the ledger shrinks.
    ledger_changed: Notify,
    /// A flush the pool started by itself (the ledger grew) is running.
    self_flushing: AtomicBool,
    /// State for jitter draws.
    draws: AtomicU64,
}

impl Shared {
    fn note(&self, s: String) {
        tracing::warn!("{s}");
        lock(&self.notes).push(s);
    }

    /// A uniform draw in `[0, 1)` for jitter (splitmix64 over a counter
    /// seeded from the clock; no need for more).
    fn draw(&self) -> f64 {
        let mut z = self.draws.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The error every request gets once the pool gave up, if it did.
    fn dead(&self) -> Option<EndpointError> {
        lock(&self.dead).clone()
    }
}

/// The block device layer over N parallel sessions. See the module docs.
pub struct Pool {
    shared: Arc<Shared>,
    size: u64,
    caps: Capabilities,
    /// The store's serial number, from the first session.
    serial: Option<String>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("name", &self.shared.name).field("snapshot", &self.snapshot()).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    /// Opens the first session, reads the store's size and capabilities, and
    /// opens the rest of `config.initial_sessions` (as many as the store
    /// accepts) in parallel.
    ///
    /// If the store does not allow several consistent sessions
    /// (`can_multi_conn` false) the pool keeps one and records a note; the
    /// largest request is lowered to fit the store's block sizes.
    ///
    /// # Errors
    /// The first session's connection error, or a bad configuration.
    pub async fn open(connector: Arc<dyn Connector>, config: PoolConfig) -> Result<Pool> {
        let name = connector.name().to_string();
        if config.max_depth == 0
            || config.max_request_bytes == 0
            || config.max_sessions == 0
            || config.initial_sessions == 0
        {
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
        let mut max_request_bytes = config.max_request_bytes.min(bs.maximum.max(min));
        max_request_bytes -= max_request_bytes % min;
        if max_request_bytes == 0 {
            max_request_bytes = min;
        }
        if max_request_bytes != config.max_request_bytes {
            notes.push(format!(
                "{name}: request size {} adjusted to {max_request_bytes} to fit the server's block sizes",
                config.max_request_bytes
            ));
        }
        let mut caps = session_caps;
        caps.block_sizes.maximum = (1u32 << 30) - (1u32 << 30) % min;
        caps.block_sizes.preferred = max_request_bytes.max(bs.preferred);
        let size = first.size();
        let serial = first.serial();
        let (roles, _) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            name,
            connector,
            config: PoolConfig { max_request_bytes, ..config },
            max_sessions,
            queue: Mutex::new(VecDeque::new()),
            ahead: Mutex::new(VecDeque::new()),
            queue_ready: Notify::new(),
            sessions: Mutex::new(Vec::new()),
            roles,
            active: AtomicUsize::new(config.initial_sessions.min(max_sessions)),
            open: AtomicUsize::new(0),
            depth: AtomicUsize::new(config.max_depth),
            rate_cap: AtomicU64::new(0),
            window_clamp: AtomicU64::new(0),
            request_bytes: AtomicU32::new(max_request_bytes),
            block_min: min,
            can_flush: session_caps.can_flush && !session_caps.read_only,
            connecting: AtomicUsize::new(0),
            completed_bytes: AtomicU64::new(0),
            idle_slot_us: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            notes: Mutex::new(notes),
            last_failure: Mutex::new(None),
            side: tokio::sync::OnceCell::new(),
            side_failed: AtomicBool::new(false),
            side_opening: AtomicBool::new(false),
            running: Mutex::new(Vec::new()),
            parts: Mutex::new(std::collections::VecDeque::new()),
            next_running_id: AtomicU64::new(0),
            mean_us: AtomicU64::new(0),
            hedged: AtomicU64::new(0),
            hedges_won: AtomicU64::new(0),
            backoff: Mutex::new(backoff::Backoff::new(&config.retry)),
            reconnecting: AtomicBool::new(false),
            dead: Mutex::new(None),
            faults: FaultCounters::default(),
            outage: Mutex::new(Outage::default()),
            ledger: Mutex::new(ledger::Ledger::default()),
            acks: AtomicU64::new(0),
            resending: AtomicUsize::new(0),
            resend_error: Mutex::new(None),
            ledger_changed: Notify::new(),
            self_flushing: AtomicBool::new(false),
            draws: AtomicU64::new(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64),
            ),
        });
        Shared::add_session(&shared, first);
        let pool = Pool { shared, size, caps, serial };
        if pool.shared.config.background_initial {
            // The others connect while the first one works.
            pool.shared.rebalance();
            return Ok(pool);
        }
        // Open the other initial sessions now, in parallel, and wait for them
        // so a fixed-N run starts with all N.
        let want = pool.shared.active.load(Ordering::SeqCst);
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

    fn refuse(&self, what: String) -> EndpointError {
        EndpointError::config(&self.shared.name, None, what)
    }

    /// Sets the number of active sessions, opening new sessions in the
    /// background when needed.
    ///
    /// # Errors
    /// `n` outside `1..=max_sessions()` (a configuration error; nothing changes).
    pub fn set_active(&self, n: usize) -> Result<()> {
        if !(1..=self.shared.max_sessions).contains(&n) {
            return Err(
                self.refuse(format!("{n} active sessions is outside 1..={}", self.shared.max_sessions))
            );
        }
        self.shared.active.store(n, Ordering::SeqCst);
        self.shared.rebalance();
        Ok(())
    }

    /// Paces the active sessions for a cap of `bytes_per_s` on what they
    /// send together (`None` removes it): each session's pacing rate is
    /// twice its share (at most the cap; work pulling does not spread
    /// requests evenly), split again whenever the number of active sessions
    /// changes. Pacing smooths bursts and only slows what this side sends
    /// (writes): the caller holds the total at the cap by bounding how fast
    /// it asks (the copy's schedule).
    pub fn set_rate_cap(&self, bytes_per_s: Option<u64>) {
        let before = self.shared.rate_cap.swap(bytes_per_s.unwrap_or(0), Ordering::SeqCst);
        if bytes_per_s.is_none() && before > 0 {
            for s in lock(&self.shared.sessions).iter() {
                s.endpoint.set_pacing_rate(None);
            }
        }
        self.shared.rebalance();
    }

    /// Caps the window every session advertises at `bytes` (`None` lifts
    /// it): what a server may keep in flight towards each session, so
    /// the sessions of a restore move about evenly on a shared path
    /// (the tuner's `WindowSplitter` decides it). Sessions opened
    /// later get it too.
    pub fn set_window_clamp(&self, bytes: Option<u64>) {
        let before = self.shared.window_clamp.swap(bytes.unwrap_or(0), Ordering::SeqCst);
        if bytes.is_none() && before > 0 {
            for s in lock(&self.shared.sessions).iter() {
                s.endpoint.set_window_clamp(None);
            }
        }
        self.shared.rebalance();
    }

    /// Keeps `n` sessions open, opening the missing ones in the background
    /// (in parallel); sessions beyond the active ones idle, ready to be
    /// activated without a handshake (warm spares). Sessions are never
    /// closed for a lower `n`.
    ///
    /// # Errors
    /// `n` above `max_sessions()` (a configuration error; nothing changes).
    pub fn set_open(&self, n: usize) -> Result<()> {
        if n > self.shared.max_sessions {
            return Err(self.refuse(format!("{n} open sessions is above {}", self.shared.max_sessions)));
        }
        if self.shared.open.swap(n, Ordering::SeqCst) < n {
            self.shared.rebalance();
        }
        Ok(())
    }

    /// Sets how many request slots each active session uses. A slot beyond
    /// it finishes its request, then idles. Fewer slots mean fewer bytes a
    /// session must finish when it is deactivated.
    ///
    /// # Errors
    /// `depth` outside `1..=max_depth` of the configuration.
    pub fn set_depth(&self, depth: usize) -> Result<()> {
        let max = self.shared.config.max_depth;
        if !(1..=max).contains(&depth) {
            return Err(self.refuse(format!("depth {depth} is outside 1..={max}")));
        }
        if self.shared.depth.swap(depth, Ordering::SeqCst) != depth {
            self.shared.roles.send_modify(|g| *g += 1);
            self.shared.queue_ready.notify_waiters();
        }
        Ok(())
    }

    /// Sets the bytes per request on the wire: callers' reads and writes
    /// are cut into requests this size.
    ///
    /// # Errors
    /// `bytes` above [`max_request_bytes`](Self::max_request_bytes), zero,
    /// or not a multiple of the store's block size.
    pub fn set_request_bytes(&self, bytes: u32) -> Result<()> {
        let (max, align) = (self.max_request_bytes(), self.shared.block_min);
        if bytes == 0 || bytes > max || !bytes.is_multiple_of(align) {
            return Err(self.refuse(format!(
                "request size {bytes} is not a multiple of {align} bytes between {align} and {max}"
            )));
        }
        self.shared.request_bytes.store(bytes, Ordering::SeqCst);
        Ok(())
    }

    /// Bytes per request on the wire now.
    pub fn request_bytes(&self) -> u32 {
        self.shared.request_bytes.load(Ordering::SeqCst)
    }

    /// Largest request on the wire (the configured one, fitted to the store).
    pub fn max_request_bytes(&self) -> u32 {
        self.shared.config.max_request_bytes
    }

    /// Most sessions this pool may open (after the store's limits).
    pub fn max_sessions(&self) -> usize {
        self.shared.max_sessions
    }

    /// Bytes the active sessions carry when every slot is busy: active
    /// sessions x depth x request size. A caller that keeps much more
    /// queued only makes the queue longer: a deactivated session or a new
    /// request size then takes effect later.
    pub fn capacity_bytes(&self) -> u64 {
        let sh = &self.shared;
        sh.active.load(Ordering::SeqCst) as u64
            * sh.depth.load(Ordering::SeqCst) as u64
            * u64::from(self.request_bytes())
    }

    /// Payload bytes of completed reads and writes (goodput numerator).
    pub fn completed_bytes(&self) -> u64 {
        self.shared.completed_bytes.load(Ordering::Relaxed)
    }

    /// Notes about adjustments the pool made (clamped sessions, request size...).
    pub fn notes(&self) -> Vec<String> {
        lock(&self.shared.notes).clone()
    }
}
