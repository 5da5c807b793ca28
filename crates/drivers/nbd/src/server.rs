//! The NBD server front end: serves any [`Endpoint`] (a memory store, a
//! file, the block device layer...) over TCP and Unix sockets.
//!
//! Each connection runs the sans-I/O [`wanblk_nbd_proto::Server`] under a
//! mutex: a reader task decodes requests and spawns one task per request
//! (at most [`ServeOptions::max_in_flight`] per connection), each task calls
//! the backend and queues its reply, and a writer task sends replies in the
//! order they complete with vectored writes (read data is never copied).

use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinSet;
use wanblk_blockdev::{Endpoint, EndpointError, ErrorKind};
use wanblk_nbd_proto::client::BlockSizes;
use wanblk_nbd_proto::consts::{DEFAULT_MAX_PAYLOAD, STATE_HOLE, STATE_ZERO, cflags, tflags};
use wanblk_nbd_proto::{
    BlockDescriptor, Command, ExportConfig, NbdError, ReadChunk, Server, ServerConfig, ServerEvent,
    ServerRequest,
};

use crate::io::write_all_segments;

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
        }
    }
}

/// Serves one backend to any number of NBD clients.
pub struct NbdServer {
    backend: Arc<dyn Endpoint>,
    opts: ServeOptions,
    cfg: ServerConfig,
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
        let cfg = ServerConfig { exports: vec![export], structured_replies: opts.structured_replies };
        Arc::new(NbdServer { backend, opts, cfg })
    }

    /// The export as advertised.
    pub fn export(&self) -> &ExportConfig {
        &self.cfg.exports[0]
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
                let (r, w) = s.into_split();
                Ok((Box::new(r) as BoxRead, Box::new(w) as BoxWrite, peer.to_string()))
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
                let (r, w) = s.into_split();
                Ok((Box::new(r) as BoxRead, Box::new(w) as BoxWrite, "unix".to_string()))
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
        Fut: Future<Output = io::Result<(BoxRead, BoxWrite, String)>>,
    {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut conns = JoinSet::new();
        tokio::pin!(shutdown);
        let result = loop {
            tokio::select! {
                _ = &mut shutdown => break Ok(()),
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
                r = accept() => match r {
                    Ok((r, w, peer)) => {
                        let this = self.clone();
                        let stop = stop_rx.clone();
                        conns.spawn(async move {
                            if let Err(e) = this.serve_connection(r, w, stop).await {
                                tracing::warn!(peer, "NBD connection ended with an error: {e}");
                            }
                        });
                    }
                    Err(e) if is_transient(&e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
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

    /// Serves one connection (any byte stream) until the client disconnects,
    /// breaks the protocol, or `stop` turns true (then requests in flight
    /// complete before the connection closes).
    ///
    /// # Errors
    /// The client's protocol error or the socket's I/O error.
    pub async fn serve_connection<R, W>(
        self: Arc<Self>,
        mut r: R,
        w: W,
        mut stop: watch::Receiver<bool>,
    ) -> io::Result<()>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let conn = Arc::new(Conn {
            machine: Mutex::new(Server::new(self.cfg.clone())),
            wake: Notify::new(),
            finished: std::sync::atomic::AtomicBool::new(false),
            failed: std::sync::atomic::AtomicBool::new(false),
        });
        let writer = tokio::spawn(conn_writer(conn.clone(), w));
        let permits = Arc::new(Semaphore::new(self.opts.max_in_flight.max(1)));
        // Payload budget in units of BUDGET_UNIT bytes.
        let max_units = self.budget_units();
        let budget = Arc::new(Semaphore::new(max_units as usize));
        let mut buf = BytesMut::with_capacity(256 * 1024);
        let mut result = Ok(());
        'conn: loop {
            let want = conn.lock().bytes_wanted();
            let need = want.saturating_sub(buf.len()).max(64 * 1024);
            if buf.capacity() - buf.len() < need {
                buf.reserve(need.max(256 * 1024));
            }
            let n = tokio::select! {
                r = r.read_buf(&mut buf) => r,
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
            let events: Vec<ServerEvent> = {
                let mut m = conn.lock();
                if let Err(e) = m.handle_input_buf(&mut buf) {
                    result = Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string()));
                    break;
                }
                std::iter::from_fn(|| m.poll_event()).collect()
            };
            conn.wake.notify_one();
            for ev in events {
                match ev {
                    ServerEvent::Selected { .. } => {}
                    ServerEvent::Close(_) => break 'conn,
                    ServerEvent::Request(req) => {
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
        }
        // Let requests in flight finish, then let the writer drain and close.
        let max = u32::try_from(self.opts.max_in_flight.max(1)).unwrap_or(u32::MAX);
        let _all = permits.acquire_many(max).await;
        let _all_bytes = budget.acquire_many(max_units).await;
        conn.finished.store(true, std::sync::atomic::Ordering::SeqCst);
        conn.wake.notify_one();
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

type BoxRead = Box<dyn AsyncRead + Unpin + Send>;
type BoxWrite = Box<dyn AsyncWrite + Unpin + Send>;

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::Interrupted
    ) || e.raw_os_error().is_some_and(|c| c == 24 || c == 23) // EMFILE, ENFILE
}

struct Conn {
    machine: Mutex<Server>,
    wake: Notify,
    finished: std::sync::atomic::AtomicBool,
    failed: std::sync::atomic::AtomicBool,
}

impl Conn {
    fn lock(&self) -> MutexGuard<'_, Server> {
        self.machine.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn conn_writer<W: AsyncWrite + Unpin>(conn: Arc<Conn>, mut w: W) {
    let mut segs: Vec<Bytes> = Vec::new();
    loop {
        let finished = conn.finished.load(std::sync::atomic::Ordering::SeqCst);
        {
            let mut m = conn.lock();
            segs.extend(std::iter::from_fn(|| m.poll_transmit()));
        }
        if segs.is_empty() {
            if finished {
                break;
            }
            conn.wake.notified().await;
            continue;
        }
        if write_all_segments(&mut w, &mut segs).await.is_err() {
            conn.failed.store(true, std::sync::atomic::Ordering::SeqCst);
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
