//! The NBD server front end: serves any [`Endpoint`] (a memory store, a
//! file, the block device layer...) over TCP and Unix sockets, in clear
//! text or TLS.
//!
//! Each connection first runs the handshake on the whole stream, one
//! option at a time (every reply is sent before the next option is read,
//! so a client that does not read cannot make replies pile up), upgrading
//! the stream to TLS after NBD_OPT_STARTTLS; it must finish within
//! [`ServeOptions::handshake_timeout`]. In transmission the sans-I/O
//! [`wanblk_nbd_proto::Server`] runs under a mutex: a reader task decodes
//! requests and spawns one task per request (at most
//! [`ServeOptions::max_in_flight`] per connection), each task calls the
//! backend and queues its reply, and a writer task sends replies in the
//! order they complete with vectored writes (read data is never copied).
//! The reader stops reading (and starting decoded requests) while more
//! than [`ServeOptions::max_queued_bytes`] of replies wait to be sent, so a
//! client that pipelines reads and never reads its socket holds at most
//! that plus the requests in flight; with [`ServeOptions::idle_timeout`] it
//! is dropped when it reads nothing for that long.
//!
//! The accept loop keeps at most [`ServeOptions::max_connections`]
//! connections: at the limit the oldest connection still in its handshake
//! is dropped to make room (idle connects cannot lock clients out), or the
//! new one is refused when every connection is past its handshake. When
//! the process runs out of descriptors (EMFILE) it backs off up to a
//! second, warning once.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::{AbortHandle, JoinSet};
use wanblk_blockdev::{Endpoint, EndpointError, ErrorKind};
use wanblk_nbd_proto::client::BlockSizes;
use wanblk_nbd_proto::consts::{DEFAULT_MAX_PAYLOAD, STATE_HOLE, STATE_ZERO, cflags, tflags};
use wanblk_nbd_proto::server::TlsPolicy;
use wanblk_nbd_proto::{
    BlockDescriptor, Command, ExportConfig, NbdError, ReadChunk, Server, ServerConfig, ServerEvent,
    ServerRequest,
};

use crate::io::write_all_segments;
use crate::stream::{ReadHalf, Stream, WriteHalf};
use crate::tls::ServerTls;

/// How an export is served.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Export name ("" also selects it, as the default export).
    pub export_name: String,
    /// Export description (NBD_INFO_DESCRIPTION, NBD_OPT_LIST).
    pub description: String,
    /// Refuse writes, trims and zeroes (NBD_FLAG_READ_ONLY).
    pub read_only: bool,
    /// Accept NBD_OPT_STRUCTURED_REPLY.
    pub structured_replies: bool,
    /// Send zero runs of reads as NBD_REPLY_TYPE_OFFSET_HOLE, from the
    /// backend's block status (costs one block status call per read).
    pub sparse_reads: bool,
    /// Requests served concurrently per connection.
    pub max_in_flight: usize,
    /// Read and write payload bytes held per connection at once (bounds the
    /// memory a client can make the server hold; at least one maximum
    /// request always fits).
    pub max_in_flight_bytes: usize,
    /// How long shutdown waits for connections to finish their requests.
    pub shutdown_grace: Duration,
    /// Options of accepted TCP connections (congestion control, buffers,
    /// keepalive); the namespace's defaults when unset.
    pub tcp: wanblk_sys::tcp::TcpOptions,
    /// Offer TLS with these certificates (NBD_OPT_STARTTLS).
    pub tls: Option<ServerTls>,
    /// With [`ServeOptions::tls`]: refuse clients that do not start TLS.
    pub tls_required: bool,
    /// Connections held at once (handshaking ones are dropped first to
    /// make room, see the module docs).
    pub max_connections: usize,
    /// A connection must reach transmission within this.
    pub handshake_timeout: Duration,
    /// Close a connection in transmission with no request in flight and
    /// nothing received for this long, or whose replies wait unread for
    /// this long (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Reply bytes waiting to be sent above which a connection's requests
    /// are no longer read (at least one maximum reply always fits).
    pub max_queued_bytes: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            export_name: String::new(),
            description: String::new(),
            read_only: false,
            structured_replies: true,
            sparse_reads: false,
            max_in_flight: 64,
            max_in_flight_bytes: 256 << 20,
            shutdown_grace: Duration::from_secs(5),
            tcp: wanblk_sys::tcp::TcpOptions::default(),
            tls: None,
            tls_required: false,
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: None,
            max_queued_bytes: 64 << 20,
        }
    }
}

/// Serves one backend to any number of NBD clients.
pub struct NbdServer {
    backend: Arc<dyn Endpoint>,
    opts: ServeOptions,
    cfg: ServerConfig,
    stats: Arc<Stats>,
}

/// Connection counters.
#[derive(Debug, Default)]
struct Stats {
    open: AtomicUsize,
    refused: AtomicU64,
    evicted: AtomicU64,
}

impl std::fmt::Debug for NbdServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NbdServer").field("backend", &self.backend.name()).field("cfg", &self.cfg).finish()
    }
}

/// Maps a backend error to the NBD error number a client sees.
pub fn nbd_error(e: &EndpointError) -> NbdError {
    match &e.kind {
        ErrorKind::Server { code, .. } => match NbdError::from_code(*code) {
            NbdError::Other(_) => NbdError::Io,
            known => known,
        },
        ErrorKind::Config(m) => {
            let m = m.to_ascii_lowercase();
            if m.contains("read-only") || m.contains("read only") {
                NbdError::Perm
            } else if m.contains("beyond") || m.contains("no space") {
                NbdError::NoSpc
            } else {
                NbdError::Inval
            }
        }
        ErrorKind::Io(m) => {
            let m = m.to_ascii_lowercase();
            if m.contains("no space") || m.contains("quota") || m.contains("too large") {
                NbdError::NoSpc
            } else if m.contains("permission denied")
                || m.contains("not permitted")
                || m.contains("read-only")
            {
                NbdError::Perm
            } else {
                NbdError::Io
            }
        }
        ErrorKind::Protocol(_) => NbdError::Io,
    }
}

impl NbdServer {
    /// A server for `backend`. Capabilities and block sizes come from the
    /// backend; the maximum payload is capped at 32 MiB.
    pub fn new(backend: Arc<dyn Endpoint>, opts: ServeOptions) -> Arc<Self> {
        let caps = backend.capabilities();
        let mut flags = tflags::SEND_FLUSH | tflags::SEND_FUA | tflags::SEND_WRITE_ZEROES;
        if caps.can_trim {
            flags |= tflags::SEND_TRIM;
        }
        if caps.can_multi_conn {
            flags |= tflags::CAN_MULTI_CONN;
        }
        if opts.structured_replies {
            flags |= tflags::SEND_DF;
        }
        if opts.read_only || caps.read_only {
            flags |= tflags::READ_ONLY;
        }
        let bs = caps.block_sizes;
        let minimum = bs.minimum.max(1);
        let maximum = bs.maximum.clamp(minimum, DEFAULT_MAX_PAYLOAD);
        let export = ExportConfig {
            name: opts.export_name.clone(),
            description: opts.description.clone(),
            size: backend.size(),
            flags,
            block_sizes: BlockSizes {
                minimum,
                preferred: bs.preferred.clamp(minimum.max(512), maximum.max(512)),
                maximum: maximum - maximum % minimum,
            },
            base_allocation: true,
        };
        let tls = match (&opts.tls, opts.tls_required) {
            (None, _) => TlsPolicy::Off,
            (Some(_), false) => TlsPolicy::Optional,
            (Some(_), true) => TlsPolicy::Required,
        };
        let cfg = ServerConfig { exports: vec![export], structured_replies: opts.structured_replies, tls };
        Arc::new(NbdServer { backend, opts, cfg, stats: Arc::default() })
    }

    /// The export as advertised.
    pub fn export(&self) -> &ExportConfig {
        &self.cfg.exports[0]
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.stats.open.load(Ordering::Relaxed)
    }

    /// Connections refused or dropped in their handshake to make room
    /// (`--max-connections`), since the server started.
    pub fn turned_away(&self) -> u64 {
        self.stats.refused.load(Ordering::Relaxed) + self.stats.evicted.load(Ordering::Relaxed)
    }

    /// Accepts TCP connections until `shutdown` resolves, then lets the
    /// connections finish their requests (up to the grace period) and returns.
    ///
    /// # Errors
    /// An accept error that is not transient.
    pub async fn serve_tcp(
        self: &Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        self.serve_loop(
            || async {
                let (s, peer) = listener.accept().await?;
                if let Err(e) = wanblk_sys::tcp::apply(std::os::fd::AsFd::as_fd(&s), &self.opts.tcp) {
                    tracing::warn!("{peer}: {e}");
                }
                Ok((Stream::from(s), peer.to_string()))
            },
            shutdown,
        )
        .await
    }

    /// Accepts Unix socket connections until `shutdown` resolves (as [`NbdServer::serve_tcp`]).
    ///
    /// # Errors
    /// An accept error that is not transient.
    pub async fn serve_unix(
        self: &Arc<Self>,
        listener: tokio::net::UnixListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        self.serve_loop(
            || async {
                let (s, _) = listener.accept().await?;
                Ok((Stream::from(s), "unix".to_string()))
            },
            shutdown,
        )
        .await
    }

    async fn serve_loop<F, Fut>(
        self: &Arc<Self>,
        mut accept: F,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = io::Result<(Stream, String)>>,
    {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut conns = JoinSet::new();
        // Connections still in their handshake, oldest first.
        let handshaking: Handshaking = Arc::default();
        let mut next_id = 0u64;
        let mut backoff = Backoff::default();
        tokio::pin!(shutdown);
        let result = loop {
            tokio::select! {
                _ = &mut shutdown => break Ok(()),
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
                r = accept() => match r {
                    Ok((stream, peer)) => {
                        backoff.reset();
                        if self.stats.open.load(Ordering::SeqCst) >= self.opts.max_connections.max(1) {
                            let oldest = lock(&handshaking).pop_first();
                            match oldest {
                                Some((_, (h, evicted))) => {
                                    evicted.store(true, Ordering::SeqCst);
                                    h.abort();
                                    self.stats.open.fetch_sub(1, Ordering::SeqCst);
                                    self.stats.evicted.fetch_add(1, Ordering::Relaxed);
                                    tracing::debug!("dropped the oldest connection in its handshake to make room");
                                }
                                None => {
                                    self.stats.refused.fetch_add(1, Ordering::Relaxed);
                                    tracing::warn!(
                                        peer,
                                        "refusing a connection: {} connections are open (--max-connections)",
                                        self.opts.max_connections
                                    );
                                    drop(stream);
                                    continue;
                                }
                            }
                        }
                        self.stats.open.fetch_add(1, Ordering::SeqCst);
                        let id = next_id;
                        next_id += 1;
                        let evicted = Arc::new(AtomicBool::new(false));
                        let counted = Counted {
                            stats: self.stats.clone(),
                            handshaking: handshaking.clone(),
                            id,
                            evicted: evicted.clone(),
                        };
                        let this = self.clone();
                        let stop = stop_rx.clone();
                        let hs = handshaking.clone();
                        // Registered before the task can leave its handshake.
                        let mut registry = lock(&handshaking);
                        let handle = conns.spawn(async move {
                            let _counted = counted;
                            let past_handshake = || {
                                lock(&hs).remove(&id);
                            };
                            if let Err(e) = this.serve_connection(stream, &peer, stop, past_handshake).await {
                                tracing::warn!(peer, "NBD connection ended with an error: {e}");
                            }
                        });
                        registry.insert(id, (handle, evicted));
                    }
                    Err(e) if is_out_of_descriptors(&e) => {
                        // Give connections time to close instead of spinning.
                        let (wait, first) = backoff.next();
                        if first {
                            tracing::warn!("accept failed: {e}; backing off (up to 1 s) until descriptors free up");
                        }
                        tokio::time::sleep(wait).await;
                    }
                    Err(e) if is_transient(&e) => tracing::debug!("accept failed: {e}"),
                    Err(e) => break Err(e),
                },
            }
        };
        let _ = stop_tx.send(true);
        let drain = async { while conns.join_next().await.is_some() {} };
        if tokio::time::timeout(self.opts.shutdown_grace, drain).await.is_err() {
            conns.abort_all();
        }
        result
    }

    /// Serves one connection until the client disconnects, breaks the
    /// protocol, times out, or `stop` turns true (then requests in flight
    /// complete before the connection closes). `transmitting` is called
    /// once the handshake is over.
    async fn serve_connection(
        self: Arc<Self>,
        stream: Stream,
        peer: &str,
        mut stop: watch::Receiver<bool>,
        transmitting: impl FnOnce(),
    ) -> io::Result<()> {
        let hs = tokio::time::timeout(self.opts.handshake_timeout, self.handshake(stream, peer));
        let (machine, stream, buf, events) = tokio::select! {
            r = hs => match r {
                Ok(Ok(Some(h))) => h,
                Ok(Ok(None)) => return Ok(()),
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no transmission after {:?} (--handshake-timeout)", self.opts.handshake_timeout),
                    ))
                }
            },
            _ = stop.wait_for(|s| *s) => return Ok(()),
        };
        transmitting();
        let (r, w) = stream.split();
        self.transmission(machine, r, w, buf, events, stop).await
    }

    /// The handshake, one option at a time; `None` when the client left
    /// before transmission (NBD_OPT_ABORT, LIST/INFO done, disconnect).
    async fn handshake(&self, mut s: Stream, peer: &str) -> io::Result<Option<Handshaken>> {
        let mut m = Server::new(self.cfg.clone());
        if self.opts.tls.as_ref().is_some_and(ServerTls::restricts_clients) {
            m.deny("this export needs TLS with an allowed client certificate");
        }
        let mut buf = BytesMut::with_capacity(4096);
        let mut segs = Vec::new();
        loop {
            segs.extend(std::iter::from_fn(|| m.poll_transmit()));
            write_all_segments(&mut s, &mut segs).await?;
            let mut events = Vec::new();
            while let Some(ev) = m.poll_event() {
                match ev {
                    ServerEvent::StartTls => {
                        let Some(tls) = &self.opts.tls else {
                            return Err(io::Error::other("STARTTLS acknowledged without TLS configured"));
                        };
                        s = s
                            .accept_tls(tls)
                            .await
                            .map_err(|e| io::Error::new(e.kind(), format!("TLS handshake failed: {e}")))?;
                        match tls.check_client(s.peer_certificates()) {
                            Ok(()) => m.allow(),
                            Err(why) => {
                                tracing::warn!(peer, "{why}");
                                m.deny(why);
                            }
                        }
                        m.tls_established();
                    }
                    ServerEvent::Close(why) => {
                        tracing::debug!(peer, "handshake ended: {why}");
                        segs.extend(std::iter::from_fn(|| m.poll_transmit()));
                        let _ = write_all_segments(&mut s, &mut segs).await;
                        let _ = s.shutdown().await;
                        return Ok(None);
                    }
                    ev => events.push(ev),
                }
            }
            if m.is_transmission() {
                return Ok(Some((m, s, buf, events)));
            }
            if buf.capacity() - buf.len() < 1024 {
                buf.reserve(m.bytes_wanted().saturating_sub(buf.len()).clamp(4096, 1 << 20));
            }
            if s.read_buf(&mut buf).await? == 0 {
                return Ok(None);
            }
            m.handle_input_buf(&mut buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        }
    }

    /// The transmission phase: a reader (this task), request tasks and a writer.
    async fn transmission(
        self: Arc<Self>,
        machine: Server,
        mut r: ReadHalf,
        w: WriteHalf,
        mut buf: BytesMut,
        first: Vec<ServerEvent>,
        mut stop: watch::Receiver<bool>,
    ) -> io::Result<()> {
        let conn = Arc::new(Conn {
            machine: Mutex::new(machine),
            wake: Notify::new(),
            drained: Notify::new(),
            in_writer: AtomicUsize::new(0),
            finished: std::sync::atomic::AtomicBool::new(false),
            failed: std::sync::atomic::AtomicBool::new(false),
        });
        let writer = tokio::spawn(conn_writer(conn.clone(), w));
        let permits = Arc::new(Semaphore::new(self.opts.max_in_flight.max(1)));
        // Payload budget in units of BUDGET_UNIT bytes.
        let max_units = self.budget_units();
        let budget = Arc::new(Semaphore::new(max_units as usize));
        let max_queued = self.opts.max_queued_bytes.max(self.export().block_sizes.maximum as usize + 4096);
        let max_permits = self.opts.max_in_flight.max(1);
        let mut result = Ok(());
        let mut events = first;
        'conn: loop {
            for ev in events.drain(..) {
                match ev {
                    ServerEvent::Selected { .. } | ServerEvent::StartTls => {}
                    ServerEvent::Close(_) => break 'conn,
                    ServerEvent::Request(req) => {
                        // One read decodes many requests: the bound holds
                        // between any two of them, not only between reads.
                        match wait_for_room(&conn, max_queued, self.opts.idle_timeout, &mut stop).await {
                            Ok(true) => {}
                            Ok(false) => break 'conn,
                            Err(e) => {
                                result = Err(e);
                                break 'conn;
                            }
                        }
                        let permit = permits.clone().acquire_owned().await.expect("semaphore never closed");
                        let units = match req.command {
                            Command::Read | Command::Write => {
                                (req.length.div_ceil(BUDGET_UNIT)).clamp(1, max_units)
                            }
                            _ => 1,
                        };
                        let bytes =
                            budget.clone().acquire_many_owned(units).await.expect("semaphore never closed");
                        let this = self.clone();
                        let conn = conn.clone();
                        tokio::spawn(async move {
                            this.handle(&conn, req).await;
                            conn.wake.notify_one();
                            drop((permit, bytes));
                        });
                    }
                }
            }
            // Replies the client has not read yet: stop reading requests
            // until the writer has sent enough of them.
            match wait_for_room(&conn, max_queued, self.opts.idle_timeout, &mut stop).await {
                Ok(true) => {}
                Ok(false) => break 'conn,
                Err(e) => {
                    result = Err(e);
                    break 'conn;
                }
            }
            let want = conn.lock().bytes_wanted();
            let need = want.saturating_sub(buf.len()).max(64 * 1024);
            if buf.capacity() - buf.len() < need {
                buf.reserve(need.max(256 * 1024));
            }
            let idle = self.opts.idle_timeout.filter(|_| permits.available_permits() == max_permits);
            let read = async {
                match idle {
                    Some(t) => tokio::time::timeout(t, r.read_buf(&mut buf)).await.unwrap_or_else(|_| {
                        Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("idle for {t:?} (--idle-timeout)"),
                        ))
                    }),
                    None => r.read_buf(&mut buf).await,
                }
            };
            let n = tokio::select! {
                r = read => r,
                _ = stop.wait_for(|s| *s) => break 'conn,
            };
            match n {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
            {
                let mut m = conn.lock();
                if let Err(e) = m.handle_input_buf(&mut buf) {
                    result = Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string()));
                    break;
                }
                events.extend(std::iter::from_fn(|| m.poll_event()));
            }
            conn.wake.notify_one();
        }
        // Let requests in flight finish, then let the writer drain and close.
        let max = u32::try_from(max_permits).unwrap_or(u32::MAX);
        let _all = permits.acquire_many(max).await;
        let _all_bytes = budget.acquire_many(max_units).await;
        conn.finished.store(true, std::sync::atomic::Ordering::SeqCst);
        conn.wake.notify_one();
        if result.is_err() {
            // The writer may be stuck on a client that reads nothing.
            writer.abort();
        }
        let _ = writer.await;
        result
    }

    fn budget_units(&self) -> u32 {
        let max_request = self.export().block_sizes.maximum.div_ceil(BUDGET_UNIT);
        let budget = u32::try_from(self.opts.max_in_flight_bytes / BUDGET_UNIT as usize).unwrap_or(u32::MAX);
        budget.max(max_request).max(1)
    }

    async fn handle(&self, conn: &Conn, req: ServerRequest) {
        let cookie = req.cookie;
        match self.execute(conn, &req).await {
            Ok(()) => {}
            Err(e) => {
                let code = nbd_error(&e);
                tracing::debug!("request {:?} at {} failed: {e}", req.command, req.offset);
                conn.lock().reply_error(cookie, code, &e.to_string());
            }
        }
    }

    async fn execute(&self, conn: &Conn, req: &ServerRequest) -> Result<(), EndpointError> {
        let b = &self.backend;
        let fua = req.has(cflags::FUA);
        match req.command {
            Command::Read => {
                let data = b.read(req.offset, req.length).await?;
                if data.len() != req.length as usize {
                    return Err(EndpointError::io(
                        b.name(),
                        Some(req.offset),
                        "backend returned a short read",
                    ));
                }
                let structured = conn.lock().structured_replies();
                if self.opts.sparse_reads && structured && !req.has(cflags::DF) {
                    let extents = b.block_status(req.offset, req.length.into()).await.unwrap_or_default();
                    if extents.iter().any(|e| e.zero) {
                        let chunks = read_chunks(req.offset, data, &extents);
                        conn.lock().reply_read_chunks(req.cookie, chunks);
                        return Ok(());
                    }
                }
                conn.lock().reply_read(req.cookie, req.offset, data);
            }
            Command::Write => {
                b.write(req.offset, req.data.clone(), fua).await?;
                conn.lock().reply_ok(req.cookie);
            }
            Command::Flush => {
                b.flush().await?;
                conn.lock().reply_ok(req.cookie);
            }
            Command::Trim => {
                b.trim(req.offset, req.length.into()).await?;
                if fua {
                    b.flush().await?;
                }
                conn.lock().reply_ok(req.cookie);
            }
            Command::WriteZeroes => {
                b.write_zeroes(req.offset, req.length.into(), !req.has(cflags::NO_HOLE)).await?;
                if fua {
                    b.flush().await?;
                }
                conn.lock().reply_ok(req.cookie);
            }
            Command::BlockStatus => {
                let extents = b.block_status(req.offset, req.length.into()).await?;
                let mut descs: Vec<BlockDescriptor> = Vec::new();
                let end = req.offset + u64::from(req.length);
                for e in extents {
                    let start = e.offset.max(req.offset);
                    let stop = (e.offset + e.length).min(end);
                    if stop <= start {
                        continue;
                    }
                    let flags = if e.hole { STATE_HOLE } else { 0 } | if e.zero { STATE_ZERO } else { 0 };
                    descs.push(BlockDescriptor { length: (stop - start) as u32, flags });
                    if req.has(cflags::REQ_ONE) || descs.len() >= 1 << 20 {
                        break;
                    }
                }
                if descs.is_empty() {
                    return Err(EndpointError::io(b.name(), Some(req.offset), "backend returned no extents"));
                }
                conn.lock().reply_block_status(req.cookie, descs);
            }
            _ => conn.lock().reply_error(req.cookie, NbdError::Inval, "command not supported"),
        }
        Ok(())
    }
}

/// Splits a read's data into data and hole chunks along zero extents.
fn read_chunks(offset: u64, data: Bytes, extents: &[wanblk_blockdev::Extent]) -> Vec<ReadChunk> {
    let end = offset + data.len() as u64;
    let mut chunks = Vec::new();
    let mut pos = offset;
    for e in extents {
        let stop = (e.offset + e.length).min(end);
        if stop <= pos {
            continue;
        }
        let (a, z) = ((pos - offset) as usize, (stop - offset) as usize);
        match (e.zero, chunks.last_mut()) {
            (true, Some(ReadChunk::Hole(_, l))) => *l += (z - a) as u32,
            (true, _) => chunks.push(ReadChunk::Hole(pos, (z - a) as u32)),
            (false, _) => chunks.push(ReadChunk::Data(pos, data.slice(a..z))),
        }
        pos = stop;
    }
    if pos < end {
        chunks.push(ReadChunk::Data(pos, data.slice((pos - offset) as usize..)));
    }
    chunks
}

/// Granularity of the per-connection payload budget.
const BUDGET_UNIT: u32 = 64 * 1024;

/// A connection's state once the handshake is over.
type Handshaken = (Server, Stream, BytesMut, Vec<ServerEvent>);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Connections in their handshake by age: how to abort each, and the flag
/// saying the accept loop did (and uncounted it).
type Handshaking = Arc<Mutex<BTreeMap<u64, (AbortHandle, Arc<AtomicBool>)>>>;

/// Counts a connection as open until its task ends or is aborted, and
/// takes it off the handshake list.
struct Counted {
    stats: Arc<Stats>,
    handshaking: Handshaking,
    id: u64,
    evicted: Arc<AtomicBool>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        lock(&self.handshaking).remove(&self.id);
        // An evicted connection was uncounted by the accept loop already.
        if !self.evicted.load(Ordering::SeqCst) {
            self.stats.open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Exponential backoff of the accept loop: 10 ms doubling to 1 s.
#[derive(Debug, Default)]
struct Backoff {
    wait: Option<Duration>,
}

impl Backoff {
    /// The next wait, and whether it is the first of this episode.
    fn next(&mut self) -> (Duration, bool) {
        let first = self.wait.is_none();
        let w = self.wait.map_or(Duration::from_millis(10), |w| (w * 2).min(Duration::from_secs(1)));
        self.wait = Some(w);
        (w, first)
    }

    fn reset(&mut self) {
        if self.wait.take().is_some() {
            tracing::info!("accepting connections again");
        }
    }
}

fn is_out_of_descriptors(e: &io::Error) -> bool {
    e.raw_os_error().is_some_and(|c| c == 24 || c == 23 || c == 105 || c == 12) // EMFILE, ENFILE, ENOBUFS, ENOMEM
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::Interrupted
    )
}

struct Conn {
    machine: Mutex<Server>,
    wake: Notify,
    /// The writer sent something (the reader may be waiting for room).
    drained: Notify,
    /// Reply bytes the writer took from the machine and has not sent yet.
    in_writer: AtomicUsize,
    finished: std::sync::atomic::AtomicBool,
    failed: std::sync::atomic::AtomicBool,
}

impl Conn {
    fn lock(&self) -> MutexGuard<'_, Server> {
        lock(&self.machine)
    }

    /// Reply bytes not yet sent to the client.
    fn queued(&self) -> usize {
        self.lock().queued_bytes() + self.in_writer.load(Ordering::SeqCst)
    }
}

/// Waits until at most `max_queued` reply bytes wait to be sent (or the
/// writer failed: the connection is ending). `Ok(false)` when the server
/// stops; an error when the writer sent nothing for `idle` (a client that
/// does not read its replies is dropped like an idle one).
async fn wait_for_room(
    conn: &Conn,
    max_queued: usize,
    idle: Option<Duration>,
    stop: &mut watch::Receiver<bool>,
) -> io::Result<bool> {
    loop {
        let drained = conn.drained.notified();
        if conn.queued() <= max_queued || conn.failed.load(Ordering::SeqCst) {
            return Ok(true);
        }
        let unread = async {
            match idle {
                Some(t) => {
                    tokio::time::sleep(t).await;
                    t
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = drained => {}
            _ = stop.wait_for(|s| *s) => return Ok(false),
            t = unread => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the client read no reply for {t:?} (--idle-timeout)"),
                ));
            }
        }
    }
}

async fn conn_writer<W: AsyncWrite + Unpin>(conn: Arc<Conn>, mut w: W) {
    let mut segs: Vec<Bytes> = Vec::new();
    loop {
        let finished = conn.finished.load(std::sync::atomic::Ordering::SeqCst);
        {
            let mut m = conn.lock();
            segs.extend(std::iter::from_fn(|| m.poll_transmit()));
            conn.in_writer.store(segs.iter().map(Bytes::len).sum(), Ordering::SeqCst);
        }
        if segs.is_empty() {
            if finished {
                break;
            }
            conn.wake.notified().await;
            continue;
        }
        let r = write_all_segments(&mut w, &mut segs).await;
        conn.in_writer.store(0, Ordering::SeqCst);
        conn.drained.notify_waiters();
        if r.is_err() {
            conn.failed.store(true, std::sync::atomic::Ordering::SeqCst);
            conn.drained.notify_waiters();
            // Keep draining so request tasks never block on a dead socket.
            while !conn.finished.load(std::sync::atomic::Ordering::SeqCst) {
                conn.lock().poll_transmit();
                conn.wake.notified().await;
            }
            return;
        }
    }
    let _ = w.shutdown().await;
}
