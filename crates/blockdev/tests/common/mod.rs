//! A test connector whose sessions share one memory store, with
//! per-session failure injection and gates: a gated session holds its
//! requests until the test opens the gate, and the connector reports what
//! every session started, holds and completed, so tests order events with
//! signals instead of sleeps (a sleep that is long enough on an idle
//! machine is not on a busy one).
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::watch;
use wanblk_blockdev::local::{Fill, MemoryEndpoint};
use wanblk_blockdev::{Capabilities, Connector, Endpoint, EndpointError, Extent, Result, SendBacklog};

/// How long a test waits for an event before it fails (far longer than
/// any event takes, even on a busy machine: only a bug reaches it).
pub const WAIT: Duration = Duration::from_secs(30);

/// Runs `f` with the [`WAIT`] limit; a hang fails the test, naming `what`.
pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f).await.unwrap_or_else(|_| panic!("{what}: not within {WAIT:?}"))
}

/// A gate that requests of gated sessions wait at: closed until the test
/// opens it (and it can close again).
pub struct Gate(watch::Sender<bool>);

impl Gate {
    /// A closed gate.
    pub fn new() -> Arc<Gate> {
        Arc::new(Gate(watch::Sender::new(false)))
    }

    /// Lets every waiting and later request through.
    pub fn open(&self) {
        self.0.send_replace(true);
    }

    /// Holds later requests again.
    pub fn close(&self) {
        self.0.send_replace(false);
    }

    async fn pass(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|open| *open).await;
    }
}

/// How the n-th opened session behaves.
#[derive(Clone, Default)]
pub struct Behaviour {
    /// Every read, write and zeroing takes this long.
    pub delay: Option<Duration>,
    /// Fail with an I/O error (connection dropped) after this many requests.
    pub fail_after: Option<usize>,
    /// Every request (flush and block status too) waits until this gate
    /// is open.
    pub gate: Option<Arc<Gate>>,
    /// `close` waits for the requests in flight, as a real session's does
    /// (by default it returns at once); `abort` fails them either way.
    pub close_waits: bool,
    /// What `send_backlog` reports (`None`: unknown, always room).
    pub backlog: Option<SendBacklog>,
}

impl Behaviour {
    /// A session whose requests wait at `gate`.
    pub fn gated(gate: &Arc<Gate>) -> Behaviour {
        Behaviour { gate: Some(Arc::clone(gate)), ..Default::default() }
    }
}

/// What the sessions did, by session (in the order they were opened).
#[derive(Default)]
struct Counts {
    /// Requests started (reads, writes, zeroing).
    started: Vec<usize>,
    /// Requests started and not finished (held at a gate, delayed).
    running: Vec<usize>,
    /// Payload bytes of completed reads and writes.
    completed: Vec<u64>,
    /// Connection failures injected.
    failures: usize,
    /// `close` and `abort` calls, by session.
    closes: Vec<usize>,
    aborts: Vec<usize>,
}

/// The sessions' shared view of what happened, with a signal on change.
#[derive(Default)]
struct Probe {
    counts: Mutex<Counts>,
    changed: watch::Sender<u64>,
}

impl Probe {
    fn update(&self, session: usize, f: impl FnOnce(&mut Counts, usize)) {
        {
            let mut guard = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let c = &mut *guard;
            for v in [&mut c.started, &mut c.running, &mut c.closes, &mut c.aborts] {
                if v.len() <= session {
                    v.resize(session + 1, 0);
                }
            }
            if c.completed.len() <= session {
                c.completed.resize(session + 1, 0);
            }
            f(c, session);
        }
        self.changed.send_modify(|g| *g += 1);
    }
}

pub struct TestConnector {
    pub store: Arc<MemoryEndpoint>,
    pub behaviours: Vec<Behaviour>,
    pub opened: AtomicUsize,
    pub multi_conn: bool,
    pub refuse_after: Option<usize>,
    /// Largest read or write any session was asked for.
    pub largest_request: Arc<AtomicUsize>,
    /// Most requests one session had running at once.
    pub peak_per_session: Arc<AtomicUsize>,
    /// The pacing rate each session was last given (by session index).
    pub pacing: Arc<Mutex<Vec<Option<u64>>>>,
    probe: Arc<Probe>,
}

impl TestConnector {
    pub fn new(size: u64, behaviours: Vec<Behaviour>) -> Arc<Self> {
        Arc::new(TestConnector {
            store: Arc::new(MemoryEndpoint::new("mem", size, Fill::Zero)),
            behaviours,
            opened: AtomicUsize::new(0),
            multi_conn: true,
            refuse_after: None,
            largest_request: Arc::new(AtomicUsize::new(0)),
            peak_per_session: Arc::new(AtomicUsize::new(0)),
            pacing: Arc::new(Mutex::new(Vec::new())),
            probe: Arc::new(Probe::default()),
        })
    }

    /// The pacing rate of every session opened so far, by index.
    pub fn pacing(&self) -> Vec<Option<u64>> {
        self.pacing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn counts<T>(&self, f: impl FnOnce(&Counts) -> T) -> T {
        f(&self.probe.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Requests session `i` has started.
    pub fn started(&self, i: usize) -> usize {
        self.counts(|c| c.started.get(i).copied().unwrap_or(0))
    }

    /// Requests session `i` holds now (started, not finished).
    pub fn running(&self, i: usize) -> usize {
        self.counts(|c| c.running.get(i).copied().unwrap_or(0))
    }

    /// Payload bytes session `i` completed.
    pub fn completed(&self, i: usize) -> u64 {
        self.counts(|c| c.completed.get(i).copied().unwrap_or(0))
    }

    /// Connection failures injected so far.
    pub fn failures(&self) -> usize {
        self.counts(|c| c.failures)
    }

    /// How often session `i` was closed and aborted.
    pub fn ended(&self, i: usize) -> (usize, usize) {
        self.counts(|c| (c.closes.get(i).copied().unwrap_or(0), c.aborts.get(i).copied().unwrap_or(0)))
    }

    /// Waits until `cond` holds; it is checked whenever a session starts,
    /// finishes or fails a request.
    ///
    /// # Panics
    /// After [`WAIT`], naming `what`.
    pub async fn wait_for(&self, what: &str, cond: impl Fn(&TestConnector) -> bool) {
        let mut rx = self.probe.changed.subscribe();
        within(what, async {
            while !cond(self) {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }
}

pub struct TestSession {
    index: usize,
    store: Arc<MemoryEndpoint>,
    b: Behaviour,
    requests: AtomicUsize,
    multi_conn: bool,
    running: AtomicUsize,
    largest_request: Arc<AtomicUsize>,
    peak_per_session: Arc<AtomicUsize>,
    pacing: Arc<Mutex<Vec<Option<u64>>>>,
    probe: Arc<Probe>,
    /// Set by `abort`: held requests fail.
    aborted: watch::Sender<bool>,
}

#[async_trait]
impl Connector for TestConnector {
    fn name(&self) -> &str {
        "test://store"
    }
    async fn connect(&self) -> Result<Arc<dyn Endpoint>> {
        let n = self.opened.fetch_add(1, Ordering::SeqCst);
        if self.refuse_after.is_some_and(|r| n >= r) {
            return Err(EndpointError::io("test://store", None, "connection refused"));
        }
        let b = self.behaviours.get(n).cloned().unwrap_or_default();
        Ok(Arc::new(TestSession {
            index: n,
            store: Arc::clone(&self.store),
            b,
            requests: AtomicUsize::new(0),
            multi_conn: self.multi_conn,
            running: AtomicUsize::new(0),
            largest_request: Arc::clone(&self.largest_request),
            peak_per_session: Arc::clone(&self.peak_per_session),
            pacing: Arc::clone(&self.pacing),
            probe: Arc::clone(&self.probe),
            aborted: watch::Sender::new(false),
        }))
    }
}

impl TestSession {
    /// Every data request passes here before it reaches the store.
    async fn gate(&self, offset: u64) -> Result<()> {
        let n = self.requests.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak_per_session.fetch_max(now, Ordering::SeqCst);
        self.probe.update(self.index, |c, i| {
            c.started[i] += 1;
            c.running[i] += 1;
        });
        let mut aborted = self.aborted.subscribe();
        let cut = tokio::select! {
            () = async {
                self.hold().await;
                if let Some(d) = self.b.delay {
                    tokio::time::sleep(d).await;
                }
            } => false,
            _ = aborted.wait_for(|a| *a) => true,
        };
        self.running.fetch_sub(1, Ordering::SeqCst);
        let fail = !cut && self.b.fail_after.is_some_and(|f| n >= f);
        self.probe.update(self.index, |c, i| {
            c.running[i] -= 1;
            c.failures += usize::from(fail);
        });
        if cut {
            return Err(EndpointError::io("test://store", Some(offset), "aborted"));
        }
        if fail {
            return Err(EndpointError::io("test://store", Some(offset), "connection reset by peer"));
        }
        Ok(())
    }

    /// Waits at the session's gate, if it has one.
    async fn hold(&self) {
        if let Some(g) = &self.b.gate {
            g.pass().await;
        }
    }

    fn done(&self, bytes: usize) {
        self.probe.update(self.index, |c, i| c.completed[i] += bytes as u64);
    }
}

#[async_trait]
impl Endpoint for TestSession {
    fn name(&self) -> &str {
        "test://store"
    }
    fn send_backlog(&self) -> Option<SendBacklog> {
        self.b.backlog
    }
    async fn close(&self) -> Result<()> {
        self.probe.update(self.index, |c, i| c.closes[i] += 1);
        if self.b.close_waits {
            let mut rx = self.probe.changed.subscribe();
            while self.running.load(Ordering::SeqCst) > 0 {
                if rx.changed().await.is_err() {
                    break;
                }
            }
        }
        Ok(())
    }
    async fn abort(&self) {
        self.probe.update(self.index, |c, i| c.aborts[i] += 1);
        self.aborted.send_replace(true);
    }
    fn set_pacing_rate(&self, bytes_per_s: Option<u64>) {
        let mut p = self.pacing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if p.len() <= self.index {
            p.resize(self.index + 1, None);
        }
        p[self.index] = bytes_per_s;
    }
    fn size(&self) -> u64 {
        self.store.size()
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities { can_multi_conn: self.multi_conn, ..self.store.capabilities() }
    }
    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        self.largest_request.fetch_max(len as usize, Ordering::SeqCst);
        self.gate(offset).await?;
        let d = self.store.read(offset, len).await?;
        self.done(d.len());
        Ok(d)
    }
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<()> {
        self.largest_request.fetch_max(data.len(), Ordering::SeqCst);
        self.gate(offset).await?;
        let n = data.len();
        self.store.write(offset, data, fua).await?;
        self.done(n);
        Ok(())
    }
    async fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<()> {
        self.gate(offset).await?;
        self.store.write_zeroes(offset, len, may_trim).await
    }
    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.hold().await;
        self.store.trim(offset, len).await
    }
    async fn flush(&self) -> Result<()> {
        self.hold().await;
        self.store.flush().await
    }
    async fn block_status(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        self.hold().await;
        self.store.block_status(offset, len).await
    }
}

/// The bytes a test writes at `offset`: every 512-byte block carries its
/// own offset and `seed` (see `wanblk_testkit::data`), so a chunk that
/// lands one block off, at another chunk's place, or a chunk of another
/// write, reads back different.
pub fn data(offset: u64, len: usize, seed: u64) -> Bytes {
    wanblk_testkit::block_data(offset, len, seed)
}

/// Checks that `got` is what [`data`] wrote at `offset` with `seed`.
///
/// # Panics
/// With the first block that differs and what it holds instead (e.g. the
/// block of another offset: misplaced data).
pub fn assert_data(got: &[u8], offset: u64, seed: u64) {
    if let Err(e) = wanblk_testkit::check_blocks(got, offset, seed) {
        panic!("data read back at {offset}..{} is wrong: {e}", offset + got.len() as u64);
    }
}
