//! One TCP connection in the full feature phase, driven by two tokio tasks
//! around the sans-I/O [`Connection`]: a reader that feeds received bytes
//! to it and completes waiting commands, and a writer that drains its
//! queued PDUs to the socket. Commands are matched by initiator task tag,
//! so many are in flight at once.
//!
//! When the connection fails (EOF, I/O error, protocol violation, or a
//! target that stays silent through a NOP ping) every pending command fails
//! with the cause; nothing waits forever. [`Link::abort`] gives up on the
//! commands in flight (ABORT TASK, then logout) in bounded time.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Notify, oneshot};
use wanblk_iscsi_proto::{CmdWindow, Command, CommandError, ConnError, Connection, Event, Outcome};

/// The session-wide command window and the wake-up for commands waiting
/// for it to open. One per session; shared by the connections of an MC/S
/// session.
pub(crate) struct Window {
    pub(crate) w: Mutex<CmdWindow>,
    pub(crate) opened: Notify,
    /// The session's connections, to fail them all together (see [`Link::fail`]).
    members: Mutex<Vec<Weak<Link>>>,
}

impl Window {
    pub(crate) fn new(w: CmdWindow) -> Arc<Window> {
        Arc::new(Window { w: Mutex::new(w), opened: Notify::new(), members: Mutex::new(Vec::new()) })
    }

    /// Some connection of the session is alive (for adding connections).
    pub(crate) fn healthy(&self) -> bool {
        self.members().iter().filter_map(Weak::upgrade).any(|l| !l.failed.load(Ordering::SeqCst))
    }

    fn members(&self) -> MutexGuard<'_, Vec<Weak<Link>>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, CmdWindow> {
        self.w.lock().unwrap_or_else(|e| e.into_inner())
    }
}

type Waiter = oneshot::Sender<Result<Outcome, CommandError>>;

struct Inner {
    conn: Connection,
    waiters: HashMap<u32, Waiter>,
    logout: Option<oneshot::Sender<u8>>,
}

/// Timing of the liveness check.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Liveness {
    /// Silence after which a NOP-Out ping is sent.
    pub(crate) ping_after: Duration,
    /// Silence after which the connection is declared dead.
    pub(crate) dead_after: Duration,
}

/// A running full-feature connection.
pub(crate) struct Link {
    inner: Mutex<Inner>,
    window: Arc<Window>,
    tx_wake: Notify,
    idle: Notify,
    /// A task management request was answered.
    tmf_done: Notify,
    fd: OwnedFd,
    closed: AtomicBool,
    failed: AtomicBool,
    /// Bytes of the batch the writer took and has not yet written into
    /// the socket (see [`Link::unsent_bytes`]).
    writing: AtomicU64,
}

impl Link {
    /// Starts the reader and writer tasks on `stream` (logged in), with
    /// bytes already read past the final Login Response in `leftover`.
    pub(crate) fn spawn(
        stream: TcpStream,
        conn: Connection,
        window: Arc<Window>,
        leftover: BytesMut,
        liveness: Liveness,
    ) -> std::io::Result<Arc<Link>> {
        let fd = stream.as_fd().try_clone_to_owned()?;
        let (rd, wr) = stream.into_split();
        let link = Arc::new(Link {
            inner: Mutex::new(Inner { conn, waiters: HashMap::new(), logout: None }),
            window,
            tx_wake: Notify::new(),
            idle: Notify::new(),
            tmf_done: Notify::new(),
            fd,
            closed: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            writing: AtomicU64::new(0),
        });
        {
            let mut m = link.window.members();
            m.retain(|w| w.strong_count() > 0);
            m.push(Arc::downgrade(&link));
        }
        tokio::spawn(reader(Arc::clone(&link), rd, leftover, liveness));
        tokio::spawn(writer(Arc::clone(&link), wr));
        Ok(link)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The socket, for TCP_INFO.
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The error that ended the connection, if any.
    pub(crate) fn error(&self) -> Option<ConnError> {
        self.lock().conn.error().cloned()
    }

    /// The negotiated values.
    pub(crate) fn params(&self) -> wanblk_iscsi_proto::Params {
        self.lock().conn.params().clone()
    }

    /// Bytes queued and not yet written into the socket: the connection's
    /// queue and the writer's batch in hand.
    pub(crate) fn unsent_bytes(&self) -> u64 {
        self.lock().conn.queued_bytes() + self.writing.load(Ordering::Relaxed)
    }

    /// Commands in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.lock().conn.in_flight()
    }

    /// Issues `cmd` once the session's command window admits it, and waits
    /// for its completion.
    pub(crate) async fn execute(&self, cmd: Command) -> Result<Outcome, CommandError> {
        let rx = loop {
            let opened = self.window.opened.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            {
                let mut inner = self.lock();
                if let Some(e) = inner.conn.error() {
                    return Err(CommandError::Connection(e.clone()));
                }
                if !inner.conn.is_usable() {
                    return Err(CommandError::Connection(ConnError::LoggedOut));
                }
                // Taken CmdSNs are always sent: start_command cannot fail now.
                let sn = self.window.lock().take();
                if let Some(sn) = sn {
                    let itt = inner.conn.start_command(cmd, sn)?;
                    let (tx, rx) = oneshot::channel();
                    inner.waiters.insert(itt, tx);
                    break rx;
                }
            }
            opened.await;
        };
        self.tx_wake.notify_one();
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(CommandError::Connection(ConnError::Closed("connection task ended".into()))),
        }
    }

    /// Waits until no command is in flight, then logs out (the connection,
    /// or the whole session with `close_session`) and closes the socket.
    pub(crate) async fn logout(
        &self,
        close_session: bool,
        cid: u16,
        timeout: Duration,
    ) -> Result<(), ConnError> {
        let deadline = Instant::now() + timeout;
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.in_flight() == 0 || self.error().is_some() {
                break;
            }
            if tokio::time::timeout_at(deadline.into(), idle).await.is_err() {
                break;
            }
        }
        let rx = {
            let mut inner = self.lock();
            if let Some(e) = inner.conn.error() {
                let e = e.clone();
                drop(inner);
                self.shutdown();
                return if e == ConnError::LoggedOut { Ok(()) } else { Err(e) };
            }
            let window = *self.window.lock();
            inner.conn.logout(&window, close_session, cid)?;
            let (tx, rx) = oneshot::channel();
            inner.logout = Some(tx);
            rx
        };
        self.tx_wake.notify_one();
        let r = tokio::time::timeout_at(deadline.into(), rx).await;
        self.shutdown();
        match r {
            Ok(Ok(0)) => Ok(()),
            Ok(Ok(code)) => Err(ConnError::Closed(format!("logout response {code}"))),
            Ok(Err(_)) => {
                Err(self.error().unwrap_or(ConnError::Closed("connection ended during logout".into())))
            }
            Err(_) => Err(ConnError::Closed("no logout response".into())),
        }
    }

    /// Gives up on every command in flight, within `bound`: asks the
    /// target to abort each (ABORT TASK, RFC 7143 section 11.5) and waits
    /// for its answers, completes whatever is left as aborted, logs out
    /// (the connection, or the session with `close_session`) and closes
    /// the socket. Every waiter gets [`CommandError::Aborted`] or the
    /// connection's error.
    pub(crate) async fn abort(&self, close_session: bool, cid: u16, bound: Duration) {
        let deadline = Instant::now() + bound;
        let asked = {
            let mut inner = self.lock();
            let w = *self.window.lock();
            inner.conn.abort_tasks(&w).unwrap_or(0)
        };
        if asked > 0 {
            tracing::debug!("iSCSI: aborting {asked} task(s)");
            self.tx_wake.notify_one();
            loop {
                let done = self.tmf_done.notified();
                tokio::pin!(done);
                done.as_mut().enable();
                {
                    let inner = self.lock();
                    if inner.conn.pending_task_management() == 0 || inner.conn.error().is_some() {
                        break;
                    }
                }
                if tokio::time::timeout_at(deadline.into(), done).await.is_err() {
                    tracing::debug!("iSCSI: no answer to ABORT TASK within {bound:?}");
                    break;
                }
            }
        }
        {
            let mut inner = self.lock();
            inner.conn.forget_tasks();
            self.dispatch(&mut inner);
        }
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1));
        if let Err(e) = self.logout(close_session, cid, left).await {
            tracing::debug!("iSCSI: logout after aborting: {e}");
        }
        self.shutdown();
    }

    /// Closes the socket; the reader then fails whatever is pending.
    pub(crate) fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = socket2::SockRef::from(&self.fd).shutdown(std::net::Shutdown::Both);
        self.tx_wake.notify_one();
    }

    /// Fails the connection with `err` and completes every waiter.
    ///
    /// At ErrorRecoveryLevel 0 a connection that fails with commands in
    /// flight fails its session (RFC 7143 section 7.1.5): in an MC/S
    /// session the other connections fail too, because CmdSNs this
    /// connection took may never reach the target, which would then hold
    /// every later command of the session forever.
    fn fail(&self, err: ConnError) {
        self.fail_with(err, true);
    }

    /// [`Link::fail`]; `spread` fails the session's other connections too
    /// (with this one's error as the cause, once: not nested per sibling).
    fn fail_with(&self, err: ConnError, spread: bool) {
        if self.failed.swap(true, Ordering::SeqCst) {
            return;
        }
        let had_work = {
            let mut inner = self.lock();
            let had_work = inner.conn.in_flight() > 0 || inner.conn.has_transmit();
            inner.conn.fail(err.clone());
            self.dispatch(&mut inner);
            inner.logout.take();
            had_work
        };
        self.shutdown();
        self.window.opened.notify_waiters();
        self.idle.notify_waiters();
        if had_work && spread {
            let siblings: Vec<Arc<Link>> = self.window.members().iter().filter_map(Weak::upgrade).collect();
            for s in siblings {
                if !std::ptr::eq(Arc::as_ptr(&s), self) {
                    s.fail_with(
                        ConnError::Closed(format!("another connection of the session failed: {err}")),
                        false,
                    );
                }
            }
        }
    }

    /// Delivers the connection's events to their waiters.
    fn dispatch(&self, inner: &mut Inner) {
        while let Some(ev) = inner.conn.poll_event() {
            match ev {
                Event::Completed { itt, result } => {
                    if let Some(w) = inner.waiters.remove(&itt) {
                        let _ = w.send(result);
                    }
                }
                Event::LoggedOut { response } => {
                    if let Some(w) = inner.logout.take() {
                        let _ = w.send(response);
                    }
                }
                Event::LogoutRequested => tracing::warn!("iSCSI target asks for a logout"),
                Event::Rejected { reason } => tracing::warn!("iSCSI target rejected a PDU: {reason}"),
                Event::Pong { .. } => {}
                Event::TaskManagement { itt, task, response } => {
                    tracing::debug!(
                        "iSCSI: task management {itt:#x} for task {task:#x}: response {response}"
                    );
                    self.tmf_done.notify_waiters();
                }
            }
        }
        if inner.conn.in_flight() == 0 {
            self.idle.notify_waiters();
        }
    }
}

async fn reader(link: Arc<Link>, mut rd: OwnedReadHalf, mut buf: BytesMut, live: Liveness) {
    let mut last_rx = Instant::now();
    let mut pinged = false;
    loop {
        if !buf.is_empty() {
            let opened;
            let want_tx;
            {
                let mut inner = link.lock();
                let before = link.window.lock().bounds();
                let r = {
                    let mut w = link.window.lock();
                    inner.conn.handle_input(&mut buf, &mut w)
                };
                opened = link.window.lock().bounds() != before;
                link.dispatch(&mut inner);
                want_tx = inner.conn.has_transmit();
                if let Err(e) = r {
                    drop(inner);
                    tracing::debug!("iSCSI connection failed: {e}");
                    link.fail(e);
                    return;
                }
            }
            if opened {
                link.window.opened.notify_waiters();
            }
            if want_tx {
                link.tx_wake.notify_one();
            }
        }
        if buf.capacity() - buf.len() < 64 * 1024 {
            buf.reserve(256 * 1024);
        }
        match tokio::time::timeout(live.ping_after, rd.read_buf(&mut buf)).await {
            Ok(Ok(0)) => {
                let msg = if link.closed.load(Ordering::SeqCst) {
                    "connection closed"
                } else {
                    "target closed the connection"
                };
                link.fail(ConnError::Closed(msg.into()));
                return;
            }
            Ok(Ok(_)) => {
                last_rx = Instant::now();
                pinged = false;
            }
            Ok(Err(e)) => {
                link.fail(ConnError::Closed(e.to_string()));
                return;
            }
            Err(_) => {
                if last_rx.elapsed() >= live.dead_after {
                    link.fail(ConnError::Closed(format!("target silent for {:?}", live.dead_after)));
                    return;
                }
                if !pinged {
                    pinged = true;
                    let mut inner = link.lock();
                    let w = *link.window.lock();
                    if inner.conn.ping(&w).is_ok() {
                        drop(inner);
                        link.tx_wake.notify_one();
                    }
                }
            }
        }
    }
}

/// Bytes of PDUs the writer takes from the connection at a time: a
/// command queued meanwhile waits behind at most this much (plus one PDU).
const WRITE_BATCH: usize = 256 << 10;

async fn writer(link: Arc<Link>, wr: OwnedWriteHalf) {
    let mut out = BufWriter::with_capacity(256 * 1024, wr);
    loop {
        let wake = link.tx_wake.notified();
        tokio::pin!(wake);
        wake.as_mut().enable();
        let batch: Vec<_> = {
            let mut inner = link.lock();
            let mut v = Vec::new();
            let mut bytes = 0usize;
            while bytes < WRITE_BATCH {
                match inner.conn.poll_transmit() {
                    Some(p) => {
                        bytes += p.wire_len();
                        v.push(p);
                    }
                    None => break,
                }
            }
            // Set under the lock that took them out of the queue, so a
            // reader of `unsent_bytes` never misses or doubles them.
            link.writing.store(bytes as u64, Ordering::Relaxed);
            v
        };
        if batch.is_empty() {
            if let Err(e) = out.flush().await {
                link.fail(ConnError::Closed(e.to_string()));
                return;
            }
            if link.closed.load(Ordering::SeqCst) {
                let _ = out.shutdown().await;
                return;
            }
            wake.await;
            continue;
        }
        for pdu in &batch {
            for part in pdu.parts() {
                if part.is_empty() {
                    continue;
                }
                if let Err(e) = out.write_all(part).await {
                    link.fail(ConnError::Closed(e.to_string()));
                    return;
                }
            }
        }
        link.writing.store(0, Ordering::Relaxed);
    }
}
