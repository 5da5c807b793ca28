//! The tokio driver of the [`Engine`]: [`FrontEnd`] is an [`Endpoint`]
//! wrapping another one (a session pool, usually), and runs the reads and
//! writes the engine orders as tasks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use tokio::sync::{Notify, watch};
use wanblk_blockdev::{Capabilities, Endpoint, EndpointError, Extent, Result, TcpInfo};

use crate::engine::{
    Config, Engine, FetchId, FetchOrder, Part, Payload, Refused, SendOrder, Stats, WriteKind,
};

/// How often the round-trip time is read from the remote's connections.
const RTT_POLL_US: u64 = 1_000_000;
/// Times a read is planned again when a read it waited for (someone
/// else's) failed, before the failure is returned.
const READ_ATTEMPTS: usize = 4;

type FetchResult = Option<Result<Bytes>>;

struct State {
    engine: Engine,
    /// Where each read in flight publishes its result.
    slots: HashMap<FetchId, watch::Sender<FetchResult>>,
}

struct Shared {
    inner: Arc<dyn Endpoint>,
    state: Mutex<State>,
    /// A write request finished or failed (writers and flushes wait on it).
    changed: Notify,
    /// Something to send may have appeared (the flusher waits on it).
    wake: Notify,
    start: Instant,
    handle: tokio::runtime::Handle,
    closed: AtomicBool,
    last_rtt_poll: AtomicU64,
    /// The remote writes with FUA itself (not by a flush after the write).
    native_fua: bool,
    /// Write requests completed without FUA: a flush must cover them.
    unforced: AtomicU64,
    /// Flushes of the remote, one at a time; it holds how many of the
    /// `unforced` writes had completed when the last successful flush was
    /// sent (all of those are durable).
    flushed: tokio::sync::Mutex<u64>,
}

/// The block device front end: read-ahead, a block cache and write-back
/// in front of any [`Endpoint`]. It is itself an endpoint, so it can be
/// served over NBD (`wanblk serve`) or as a FUSE file (`wanblk mount`).
///
/// # Semantics
/// - A read returns the latest acknowledged write to every byte.
/// - A write is acknowledged once it is in the write-back buffer (or, with
///   [`Config::write_through`], once the remote has it). A FUA write is
///   acknowledged once it and every write before it are durable on the
///   remote.
/// - [`Endpoint::flush`] returns once every write acknowledged before it is
///   durable on the remote. A crash of the process loses only writes that
///   no completed flush covered.
/// - Durable on the remote means: written with FUA (runs sent while a
///   flush or FUA write waits go with FUA, where the remote has it), or
///   completed before a flush of the remote that succeeded. A flush of the
///   remote is sent only when some write completed without FUA since the
///   last one was sent, so an fsync after a small write costs one round
///   trip, and one with nothing new costs none.
/// - After the remote refuses a write (once the session pool's own retries
///   are exhausted), every later write and flush fails with that error.
pub struct FrontEnd {
    shared: Arc<Shared>,
    caps: Capabilities,
}

impl std::fmt::Debug for FrontEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontEnd")
            .field("inner", &self.shared.inner.name())
            .field("stats", &self.stats())
            .finish()
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn now(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Starts the reads in `orders` as tasks, each publishing into its
    /// slot (added with [`Shared::add_slots`] under the same lock that
    /// planned them).
    fn spawn_fetches(self: &Arc<Self>, orders: Vec<FetchOrder>) {
        for o in orders {
            let me = Arc::clone(self);
            self.handle.spawn(async move { me.run_fetch(o).await });
        }
    }

    /// Carries out one read: demand reads go to the remote's demand queue,
    /// read-ahead behind every demand request waiting there.
    async fn run_fetch(self: &Arc<Self>, o: FetchOrder) {
        let mut guard = FetchGuard { shared: self, id: Some(o.id) };
        let result = if o.prefetch {
            self.inner.read_ahead(o.offset, o.len).await
        } else {
            self.inner.read(o.offset, o.len).await
        };
        guard.id = None;
        self.poll_rtt();
        self.finish_fetch(o.id, result);
    }

    /// Reports the end of the read `id` to the engine, publishes its result
    /// and starts the read-ahead that made room for.
    fn finish_fetch(self: &Arc<Self>, id: FetchId, result: Result<Bytes>) {
        let (more, slot) = {
            let mut st = self.lock();
            let now = self.now();
            let more = st.engine.fetch_done(id, result.as_ref().ok(), now);
            Shared::add_slots(&mut st, &more);
            (more, st.slots.remove(&id))
        };
        if let Some(tx) = slot {
            tx.send_replace(Some(result));
        }
        self.spawn_fetches(more);
    }

    /// Registers a result slot for every order.
    fn add_slots(st: &mut State, orders: &[FetchOrder]) {
        for o in orders {
            st.slots.insert(o.id, watch::channel(None).0);
        }
    }

    fn poll_rtt(&self) {
        let now = self.now();
        let last = self.last_rtt_poll.load(Ordering::Relaxed);
        if now.saturating_sub(last) < RTT_POLL_US
            || self.last_rtt_poll.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return;
        }
        let rtt = self
            .inner
            .tcp_info()
            .iter()
            .map(|t| u64::from(if t.min_rtt_us > 0 { t.min_rtt_us } else { t.rtt_us }))
            .max();
        if let Some(rtt) = rtt.filter(|r| *r > 0) {
            self.lock().engine.observe_rtt(rtt);
        }
    }

    async fn send(self: Arc<Self>, o: SendOrder) {
        let fua = o.fua && self.native_fua;
        let result = match o.payload {
            Payload::Data(b) => self.inner.write(o.offset, b, fua).await,
            Payload::Zero { may_trim } => self.inner.write_zeroes(o.offset, o.len, may_trim).await,
            Payload::Trim => self.inner.trim(o.offset, o.len).await,
        };
        if let Err(e) = &result {
            tracing::warn!("write-back of {} bytes at {} failed: {e}", o.len, o.offset);
        } else if !fua {
            // Counted before the engine calls it written, so a flush that
            // sees it written also sees it here.
            self.unforced.fetch_add(1, Ordering::SeqCst);
        }
        {
            let mut st = self.lock();
            let now = self.now();
            st.engine.send_done(o.id, result, now);
        }
        self.poll_rtt();
        self.changed.notify_waiters();
        self.wake.notify_one();
    }

    /// Sends runs as the engine allows, until closed and idle.
    async fn flusher(self: Arc<Self>) {
        loop {
            let wake = self.wake.notified();
            tokio::pin!(wake);
            wake.as_mut().enable();
            let (orders, timeout, done) = {
                let mut st = self.lock();
                let now = self.now();
                let mut orders = Vec::new();
                while let Some(o) = st.engine.poll_send(now) {
                    orders.push(o);
                }
                let done =
                    self.closed.load(Ordering::SeqCst) && (st.engine.idle() || st.engine.failure().is_some());
                (orders, st.engine.poll_timeout(now).map(|t| t.saturating_sub(now)), done)
            };
            for o in orders {
                self.handle.spawn(Arc::clone(&self).send(o));
            }
            if done {
                return;
            }
            match timeout {
                Some(us) => {
                    let _ = tokio::time::timeout(Duration::from_micros(us.max(100)), wake).await;
                }
                None => wake.await,
            }
        }
    }

    /// Waits until every write up to `seq` is on the remote; `durable`:
    /// for a flush or a FUA write (runs sent meanwhile go with FUA).
    async fn wait_written(&self, seq: u64, durable: bool) -> Result<()> {
        struct Waiting<'a>(&'a Shared, bool);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.lock().engine.end_wait(self.1);
            }
        }
        self.lock().engine.begin_wait(durable);
        let _guard = Waiting(self, durable);
        self.wake.notify_one();
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.lock().engine.written(seq)? {
                return Ok(());
            }
            self.wake.notify_one();
            changed.await;
        }
    }
}

/// Reports a read whose future was dropped before it completed (its
/// caller went away) as failed, so the engine forgets it and whoever
/// joined it asks again.
struct FetchGuard<'a> {
    shared: &'a Arc<Shared>,
    id: Option<FetchId>,
}

impl Drop for FetchGuard<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let name = self.shared.inner.name().to_owned();
            self.shared.finish_fetch(id, Err(EndpointError::io(&name, None, "read abandoned")));
        }
    }
}

impl FrontEnd {
    /// Puts a front end in front of `inner`. Must be called inside a tokio
    /// runtime: its tasks run there.
    pub fn new(inner: Arc<dyn Endpoint>, cfg: Config) -> FrontEnd {
        let mut caps = inner.capabilities();
        let native_fua = caps.can_fua;
        // Flush and FUA are implemented here (on top of the remote's flush,
        // when it has one). All clients share this one cache, so they see
        // one consistent image.
        caps.can_flush = true;
        caps.can_fua = true;
        caps.can_multi_conn = true;
        caps.block_sizes.maximum = caps.block_sizes.maximum.min(32 << 20);
        let shared = Arc::new(Shared {
            state: Mutex::new(State { engine: Engine::new(cfg, inner.size()), slots: HashMap::new() }),
            inner,
            changed: Notify::new(),
            wake: Notify::new(),
            start: Instant::now(),
            handle: tokio::runtime::Handle::current(),
            closed: AtomicBool::new(false),
            last_rtt_poll: AtomicU64::new(0),
            native_fua,
            unforced: AtomicU64::new(0),
            flushed: tokio::sync::Mutex::new(0),
        });
        shared.handle.spawn(Arc::clone(&shared).flusher());
        let edges = {
            let mut st = shared.lock();
            let now = shared.now();
            let orders = st.engine.prefetch_edges(now);
            Shared::add_slots(&mut st, &orders);
            orders
        };
        shared.spawn_fetches(edges);
        FrontEnd { shared, caps }
    }

    /// Counters of the cache, the read-ahead and the write-back.
    pub fn stats(&self) -> Stats {
        self.shared.lock().engine.stats()
    }

    /// The endpoint behind the front end.
    pub fn inner(&self) -> &Arc<dyn Endpoint> {
        &self.shared.inner
    }

    fn check(&self, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size() => Ok(()),
            _ => Err(EndpointError::config(
                self.name(),
                Some(offset),
                format!("request of {len} bytes is beyond the end of the store ({} bytes)", self.size()),
            )),
        }
    }

    fn check_write(&self, offset: u64, len: u64) -> Result<()> {
        if self.caps.read_only {
            return Err(EndpointError::config(self.name(), Some(offset), "the store is read-only"));
        }
        self.check(offset, len)
    }

    /// Buffers a write (waiting for room), then waits as FUA or
    /// write-through require.
    async fn write_kind(&self, offset: u64, len: u64, kind: WriteKind, fua: bool) -> Result<()> {
        let sh = &self.shared;
        let seq = loop {
            let changed = sh.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let r = {
                let mut st = sh.lock();
                let now = sh.now();
                st.engine.write(offset, len, kind.clone(), now)
            };
            match r {
                Ok(seq) => break seq,
                Err(Refused::Failed(e)) => return Err(e.at(offset)),
                Err(Refused::Full) => {
                    sh.wake.notify_one();
                    changed.await;
                }
            }
        };
        sh.wake.notify_one();
        let write_through = sh.lock().engine.config().write_through;
        if fua || write_through {
            sh.wait_written(seq, fua).await.map_err(|e| e.at(offset))?;
            if fua {
                self.flush_remote().await?;
            }
        }
        Ok(())
    }

    /// Makes every write completed so far durable: a flush of the remote,
    /// unless every one of them went with FUA or completed before a flush
    /// already sent (NBD's and SCSI's flush covers the writes completed
    /// before it). An fsync after a small write sent with FUA then costs
    /// one round trip, not two, and an fsync with nothing new costs none.
    async fn flush_remote(&self) -> Result<()> {
        let sh = &self.shared;
        if !sh.inner.capabilities().can_flush {
            return Ok(());
        }
        let mut flushed = sh.flushed.lock().await;
        let done = sh.unforced.load(Ordering::SeqCst);
        if done <= *flushed {
            return Ok(());
        }
        if let Err(e) = sh.inner.flush().await {
            sh.lock().engine.fail(e.clone());
            return Err(e);
        }
        *flushed = done;
        Ok(())
    }
}

impl Drop for FrontEnd {
    fn drop(&mut self) {
        // The flusher finishes what is pending, then ends.
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.wake.notify_one();
    }
}

#[async_trait]
impl Endpoint for FrontEnd {
    fn name(&self) -> &str {
        self.shared.inner.name()
    }

    fn size(&self) -> u64 {
        self.shared.inner.size()
    }

    fn capabilities(&self) -> Capabilities {
        self.caps
    }

    fn serial(&self) -> Option<String> {
        self.shared.inner.serial()
    }

    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        self.check(offset, len.into())?;
        if len == 0 {
            return Ok(Bytes::new());
        }
        let sh = &self.shared;
        let mut last_err = None;
        'attempt: for _ in 0..READ_ATTEMPTS {
            let (parts, mine, rx, demand, ahead) = {
                let mut st = sh.lock();
                let now = sh.now();
                let plan = st.engine.plan_read(offset, len.into(), now);
                Shared::add_slots(&mut st, &plan.fetches);
                let mine: Vec<FetchId> = plan.fetches.iter().filter(|o| !o.prefetch).map(|o| o.id).collect();
                let mut rx = HashMap::new();
                for p in &plan.parts {
                    if let Part::Wait { id, .. } = p
                        && let Some(tx) = st.slots.get(id)
                    {
                        rx.entry(*id).or_insert_with(|| tx.subscribe());
                    }
                }
                // The caller's own demand reads run right here (no task
                // hop in between); read-ahead runs as tasks.
                let (demand, ahead): (Vec<FetchOrder>, Vec<FetchOrder>) =
                    plan.fetches.into_iter().partition(|o| !o.prefetch);
                (plan.parts, mine, rx, demand, ahead)
            };
            // Polled in order: the demand reads are queued first.
            futures::future::join(
                futures::future::join_all(demand.into_iter().map(|o| sh.run_fetch(o))),
                async { sh.spawn_fetches(ahead) },
            )
            .await;
            let mut out: Vec<Bytes> = Vec::with_capacity(parts.len());
            for p in parts {
                match p {
                    Part::Data(b) => out.push(b),
                    Part::Wait { id, skip, len } => {
                        let Some(mut r) = rx.get(&id).cloned() else { continue 'attempt };
                        let got = match r.wait_for(Option::is_some).await {
                            Ok(v) => v
                                .clone()
                                .unwrap_or_else(|| Err(EndpointError::io(self.name(), None, "lost read"))),
                            Err(_) => Err(EndpointError::io(self.name(), Some(offset), "read abandoned")),
                        };
                        match got {
                            Ok(b) => out.push(b.slice(skip as usize..(skip + len) as usize)),
                            Err(e) if mine.contains(&id) => return Err(e),
                            Err(e) => {
                                // Someone else's read failed: ask again for ourselves.
                                last_err = Some(e);
                                continue 'attempt;
                            }
                        }
                    }
                }
            }
            if out.len() == 1 {
                return Ok(out.pop().unwrap_or_default());
            }
            let mut b = BytesMut::with_capacity(len as usize);
            for p in out {
                b.extend_from_slice(&p);
            }
            return Ok(b.freeze());
        }
        Err(last_err.unwrap_or_else(|| EndpointError::io(self.name(), Some(offset), "read failed")))
    }

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<()> {
        self.check_write(offset, data.len() as u64)?;
        let len = data.len() as u64;
        self.write_kind(offset, len, WriteKind::Data(data), fua).await
    }

    async fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<()> {
        self.check_write(offset, len)?;
        self.write_kind(offset, len, WriteKind::Zero { may_trim }, false).await
    }

    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.check_write(offset, len)?;
        if !self.shared.inner.capabilities().can_trim {
            return Ok(());
        }
        self.write_kind(offset, len, WriteKind::Trim, false).await
    }

    async fn flush(&self) -> Result<()> {
        let t0 = std::time::Instant::now();
        let (seq, dirty) = {
            let st = self.shared.lock();
            (st.engine.seq(), st.engine.dirty_bytes())
        };
        self.shared.wait_written(seq, true).await?;
        let written = t0.elapsed();
        let r = self.flush_remote().await;
        tracing::debug!(
            dirty,
            written_ms = written.as_secs_f64() * 1e3,
            flushed_ms = (t0.elapsed() - written).as_secs_f64() * 1e3,
            "flush"
        );
        r
    }

    async fn block_status(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        self.check(offset, len)?;
        let mut extents = self.shared.inner.block_status(offset, len).await?;
        let st = self.shared.lock();
        for e in &mut extents {
            if (e.hole || e.zero) && st.engine.dirty_overlaps(e.offset, e.offset + e.length) {
                e.hole = false;
                e.zero = false;
            }
        }
        Ok(extents)
    }

    async fn close(&self) -> Result<()> {
        let flushed = self.flush().await;
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.wake.notify_one();
        let closed = self.shared.inner.close().await;
        flushed.and(closed)
    }

    fn tcp_info(&self) -> Vec<TcpInfo> {
        self.shared.inner.tcp_info()
    }
}
