//! The NBD client endpoint: [`NbdConnector`] opens [`NbdSession`]s.
//!
//! A session is one connection with a writer task and a reader task around
//! the sans-I/O [`wanblk_nbd_proto::Client`], shared under a mutex that is
//! held only to queue a request or to decode replies (never across I/O):
//!
//! ```text
//!  callers ──send_request──▶ Client (mutex) ──poll_transmit──▶ writer task ──writev──▶ socket
//!  callers ◀──oneshot────── reader task ◀──handle_input_buf── socket (read_buf into BytesMut)
//! ```
//!
//! Many requests from many tasks are in flight at once and complete in any
//! order. When the connection dies or the server breaks the protocol, every
//! pending request fails with that error and later requests fail at once.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use wanblk_blockdev::{
    BlockSizes, Capabilities, Connector, Endpoint, EndpointError, ErrorKind, Extent, Result, SendBacklog,
    TcpInfo,
};
use wanblk_nbd_proto::consts::{DEFAULT_MAX_PAYLOAD, STATE_HOLE, STATE_ZERO, tflags};
use wanblk_nbd_proto::{
    Client, ClientConfig, ClientError, Command, Event, Goal, Negotiated, Reply, ReplyData, Request,
    RequestError,
};

use crate::io::write_all_segments;
use crate::stream::Stream;
use crate::tls::{ClientTls, TlsClientOptions, TlsError};
use crate::uri::{NbdUri, Transport, UriError};

/// Why a connector cannot be made. The message is the doc comment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The URI is malformed.
    #[error(transparent)]
    Uri(#[from] UriError),
    /// The TLS settings cannot be loaded.
    #[error("{uri}: TLS: {source}")]
    Tls {
        /// The URI (without secrets).
        uri: String,
        /// What is wrong.
        source: TlsError,
    },
}

/// Options of NBD client sessions.
#[derive(Debug, Clone)]
pub struct NbdOptions {
    /// Export name; overrides the URI's when set.
    pub export_name: Option<String>,
    /// Ask for structured replies (needed for block status and sparse reads).
    pub structured_replies: bool,
    /// Ask for the `base:allocation` context (block status).
    pub block_status: bool,
    /// Options of every TCP connection (congestion control, buffers, keepalive).
    pub tcp: wanblk_sys::tcp::TcpOptions,
    /// Limit for connecting and the handshake.
    pub connect_timeout: Duration,
    /// The largest read/write this client sends, whatever the server allows.
    pub max_payload: u32,
    /// Send the handshake options back to back (saves two round trips per
    /// connection); see [`wanblk_nbd_proto::ClientConfig::pipeline_options`].
    pub pipeline_options: bool,
    /// TLS settings for `nbds://` URIs (the URI's `tls-*` parameters
    /// override these); unused for `nbd://`.
    pub tls: TlsClientOptions,
}

impl Default for NbdOptions {
    fn default() -> Self {
        NbdOptions {
            export_name: None,
            structured_replies: true,
            block_status: true,
            tcp: wanblk_sys::tcp::TcpOptions::default(),
            connect_timeout: Duration::from_secs(30),
            max_payload: DEFAULT_MAX_PAYLOAD,
            pipeline_options: true,
            tls: TlsClientOptions::default(),
        }
    }
}

/// Opens NBD sessions to one export.
#[derive(Debug, Clone)]
pub struct NbdConnector {
    uri: NbdUri,
    name: String,
    opts: NbdOptions,
    /// Loaded once for every session of an `nbds://` URI.
    tls: Option<ClientTls>,
}

impl NbdConnector {
    /// A connector for `uri` (`nbd://host[:port]/export`,
    /// `nbd+unix:///export?socket=PATH`, or their TLS forms `nbds://`,
    /// `nbds+unix://`).
    ///
    /// # Errors
    /// [`ConfigError`] for a malformed URI or TLS settings that cannot be
    /// loaded (missing or unreadable certificates, PSK).
    pub fn new(uri: &str, opts: NbdOptions) -> std::result::Result<Self, ConfigError> {
        Self::from_uri(uri.parse()?, opts)
    }

    /// A connector for a parsed URI.
    ///
    /// # Errors
    /// As [`NbdConnector::new`].
    pub fn from_uri(mut uri: NbdUri, opts: NbdOptions) -> std::result::Result<Self, ConfigError> {
        if let Some(e) = &opts.export_name {
            uri.export = e.clone();
        }
        let name = uri.to_string();
        let tls = match &uri.tls {
            None => None,
            Some(t) => {
                let host = match &uri.transport {
                    Transport::Tcp { host, .. } => Some(host.as_str()),
                    Transport::Unix(_) => None,
                };
                let o = t.over(&opts.tls);
                Some(
                    ClientTls::new(&o, host)
                        .map_err(|source| ConfigError::Tls { uri: name.clone(), source })?,
                )
            }
        };
        Ok(NbdConnector { name, uri, opts, tls })
    }

    /// The URI sessions connect to.
    pub fn uri(&self) -> &NbdUri {
        &self.uri
    }

    /// Opens one session.
    ///
    /// # Errors
    /// An [`EndpointError`] naming the URI: `Io` if the connection fails or
    /// times out, `Protocol` if the server breaks the handshake, `Config` if
    /// it refuses the export or the socket options.
    pub async fn open(&self) -> Result<NbdSession> {
        let name = self.name.clone();
        let timeout = self.opts.connect_timeout;
        match tokio::time::timeout(timeout, self.open_inner()).await {
            Ok(r) => r,
            Err(_) => Err(EndpointError::io(
                name,
                None,
                format!("connect and handshake timed out after {timeout:?}"),
            )),
        }
    }

    /// Asks for the export's size, flags and block sizes with NBD_OPT_INFO
    /// (no transmission; the connection ends with NBD_OPT_ABORT).
    ///
    /// # Errors
    /// As [`NbdConnector::open`].
    pub async fn info(&self) -> Result<Negotiated> {
        match self.with_timeout(self.query(Goal::Info)).await? {
            Event::Info(n) => Ok(n),
            _ => Err(EndpointError::protocol(&self.name, None, "unexpected handshake result")),
        }
    }

    /// Lists the server's exports (name, description) with NBD_OPT_LIST.
    ///
    /// # Errors
    /// As [`NbdConnector::open`].
    pub async fn list_exports(&self) -> Result<Vec<(String, String)>> {
        match self.with_timeout(self.query(Goal::List)).await? {
            Event::Exports(v) => Ok(v.into_iter().map(|e| (e.name, e.description)).collect()),
            _ => Err(EndpointError::protocol(&self.name, None, "unexpected handshake result")),
        }
    }

    async fn with_timeout<T>(&self, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let timeout = self.opts.connect_timeout;
        tokio::time::timeout(timeout, f).await.unwrap_or_else(|_| {
            Err(EndpointError::io(
                &self.name,
                None,
                format!("connect and handshake timed out after {timeout:?}"),
            ))
        })
    }

    fn client(&self, goal: Goal) -> Client {
        Client::new(ClientConfig {
            export_name: self.uri.export.clone(),
            structured_replies: self.opts.structured_replies,
            block_status: self.opts.block_status && self.opts.structured_replies,
            max_payload: self.opts.max_payload,
            goal,
            pipeline_options: self.opts.pipeline_options,
            tls: self.tls.is_some(),
        })
    }

    async fn query(&self, goal: Goal) -> Result<Event> {
        let mut client = self.client(goal);
        let s = self.connect().await?;
        let (ev, mut s, _) = handshake(s, &mut client, &self.name, self.tls.as_ref()).await?;
        finish_query(&mut s, &mut client).await;
        Ok(ev)
    }

    /// Connects the socket (TCP with the TCP options applied, or Unix).
    async fn connect(&self) -> Result<Stream> {
        let name = &self.name;
        let cannot = |e| EndpointError::io(name, None, format!("cannot connect: {e}"));
        match &self.uri.transport {
            Transport::Tcp { host, port } => {
                let s = tokio::net::TcpStream::connect((host.as_str(), *port)).await.map_err(cannot)?;
                wanblk_sys::tcp::apply(s.as_fd(), &self.opts.tcp)
                    .map_err(|e| EndpointError::config(name, None, format!("socket options: {e}")))?;
                Ok(s.into())
            }
            Transport::Unix(path) => Ok(tokio::net::UnixStream::connect(path).await.map_err(cannot)?.into()),
        }
    }

    async fn open_inner(&self) -> Result<NbdSession> {
        let name = &self.name;
        let mut client = self.client(Goal::Go);
        let s = self.connect().await?;
        let (ev, s, buf) = handshake(s, &mut client, name, self.tls.as_ref()).await?;
        let neg = match ev {
            Event::Ready(n) => n,
            _ => return Err(EndpointError::protocol(name, None, "unexpected handshake result")),
        };
        let fd = s.tcp_fd();
        let (r, w) = s.split();
        Ok(NbdSession::start(name.clone(), client, neg, fd, r, w, buf))
    }
}

#[async_trait]
impl Connector for NbdConnector {
    fn name(&self) -> &str {
        &self.name
    }

    async fn connect(&self) -> Result<Arc<dyn Endpoint>> {
        Ok(Arc::new(self.open().await?))
    }
}

fn handshake_error(name: &str, e: ClientError) -> EndpointError {
    match e {
        ClientError::Protocol(p) => EndpointError::protocol(name, None, format!("handshake: {p}")),
        e => EndpointError::config(name, None, e.to_string()),
    }
}

/// Sends NBD_OPT_ABORT (queued by the client) and closes; errors do not matter any more.
async fn finish_query<S: AsyncWrite + Unpin>(s: &mut S, client: &mut Client) {
    let mut segs: Vec<Bytes> = std::iter::from_fn(|| client.poll_transmit()).collect();
    let _ = write_all_segments(s, &mut segs).await;
    let _ = s.shutdown().await;
}

/// Runs the handshake on `s` until it ends (Ready, Info or Exports),
/// upgrading the stream to TLS when the server acknowledges
/// NBD_OPT_STARTTLS; returns that event, the stream and any bytes read
/// past the handshake.
async fn handshake(
    mut s: Stream,
    client: &mut Client,
    name: &str,
    tls: Option<&ClientTls>,
) -> Result<(Event, Stream, BytesMut)> {
    let mut buf = BytesMut::with_capacity(8192);
    let mut segs = Vec::new();
    loop {
        segs.extend(std::iter::from_fn(|| client.poll_transmit()));
        if !segs.is_empty() {
            write_all_segments(&mut s, &mut segs).await.map_err(|e| EndpointError::io(name, None, e))?;
        }
        match client.poll_event() {
            Some(Event::StartTls) => {
                let Some(tls) = tls else {
                    return Err(EndpointError::protocol(name, None, "TLS started without being asked"));
                };
                // The machine checked that nothing followed the ACK.
                s = s.connect_tls(tls).await.map_err(|e| {
                    EndpointError::new(name, None, ErrorKind::Config(crate::tls::explain(&e, &tls.trust)))
                })?;
                client.tls_established();
                continue;
            }
            Some(ev) => return Ok((ev, s, buf)),
            None => {}
        }
        let n = s.read_buf(&mut buf).await.map_err(|e| {
            if s.is_tls() {
                EndpointError::new(name, None, ErrorKind::Config(crate::tls::explain(&e, "the CA")))
            } else {
                EndpointError::io(name, None, e)
            }
        })?;
        if n == 0 {
            let why = if s.is_tls() {
                "server closed the TLS connection during the handshake (did it refuse our client certificate, or the export?)"
            } else {
                "server closed the connection during the handshake (unknown export, or not an NBD server?)"
            };
            return Err(EndpointError::io(name, None, why));
        }
        client.handle_input_buf(&mut buf).map_err(|e| handshake_error(name, e))?;
    }
}

type Outcome = std::result::Result<ReplyData, EndpointError>;

struct Waiter {
    tx: oneshot::Sender<Outcome>,
    offset: Option<u64>,
}

struct State {
    client: Client,
    waiters: HashMap<u64, Waiter>,
    /// Why the connection is unusable, once it is.
    dead: Option<ErrorKind>,
    /// close() or drop: no new requests.
    closing: bool,
    /// The writer shuts the socket down once its queue is empty.
    shutdown: bool,
    writer_exited: bool,
    reader_exited: bool,
    /// Bytes the writer took from `client` and has not yet written into
    /// the socket (see [`Endpoint::send_backlog`]).
    writing: u64,
}

struct Shared {
    name: String,
    neg: Negotiated,
    caps: Capabilities,
    tcp: Option<OwnedFd>,
    st: Mutex<State>,
    wake_writer: Notify,
    idle: Notify,
    writer_done: Notify,
    reader_done: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fails every pending request with `kind` and refuses later ones.
    fn fail_all(&self, kind: ErrorKind) {
        let waiters: Vec<Waiter> = {
            let mut st = self.lock();
            if st.dead.is_none() {
                st.dead = Some(kind.clone());
            }
            st.waiters.drain().map(|(_, w)| w).collect()
        };
        for w in waiters {
            let _ = w.tx.send(Err(EndpointError::new(&self.name, w.offset, kind.clone())));
        }
        self.idle.notify_waiters();
        self.wake_writer.notify_one();
    }
}

/// One NBD connection: an [`Endpoint`] that pipelines requests.
pub struct NbdSession {
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
}

impl std::fmt::Debug for NbdSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NbdSession")
            .field("name", &self.shared.name)
            .field("negotiated", &self.shared.neg)
            .finish()
    }
}

fn capabilities(neg: &Negotiated) -> Capabilities {
    Capabilities {
        read_only: neg.read_only(),
        can_flush: neg.has(tflags::SEND_FLUSH),
        can_fua: neg.has(tflags::SEND_FUA),
        can_trim: neg.has(tflags::SEND_TRIM),
        can_zero: neg.has(tflags::SEND_WRITE_ZEROES),
        can_block_status: neg.base_allocation.is_some(),
        can_multi_conn: neg.has(tflags::CAN_MULTI_CONN),
        block_sizes: BlockSizes {
            minimum: neg.block_sizes.minimum,
            preferred: neg.block_sizes.preferred,
            maximum: neg.block_sizes.maximum,
        },
    }
}

impl NbdSession {
    fn start(
        name: String,
        client: Client,
        neg: Negotiated,
        tcp: Option<OwnedFd>,
        r: crate::stream::ReadHalf,
        w: crate::stream::WriteHalf,
        buf: BytesMut,
    ) -> NbdSession {
        let shared = Arc::new(Shared {
            name,
            caps: capabilities(&neg),
            neg,
            tcp,
            st: Mutex::new(State {
                client,
                waiters: HashMap::new(),
                dead: None,
                closing: false,
                shutdown: false,
                writer_exited: false,
                writing: 0,
                reader_exited: false,
            }),
            wake_writer: Notify::new(),
            idle: Notify::new(),
            writer_done: Notify::new(),
            reader_done: Notify::new(),
        });
        tokio::spawn(writer(shared.clone(), w));
        let reading = shared.clone();
        let reader = tokio::spawn(async move {
            reader(reading.clone(), r, buf).await;
            reading.lock().reader_exited = true;
            reading.reader_done.notify_waiters();
        });
        NbdSession { shared, reader }
    }

    /// What the handshake agreed on.
    pub fn negotiated(&self) -> &Negotiated {
        &self.shared.neg
    }

    fn config_err(&self, offset: Option<u64>, msg: impl Into<String>) -> EndpointError {
        EndpointError::config(&self.shared.name, offset, msg)
    }

    /// Sends one request and waits for its reply.
    async fn call(&self, req: Request) -> Result<ReplyData> {
        let offset = match &req {
            Request::Read { offset, .. }
            | Request::ReadInto { offset, .. }
            | Request::Write { offset, .. }
            | Request::Trim { offset, .. }
            | Request::WriteZeroes { offset, .. }
            | Request::BlockStatus { offset, .. } => Some(*offset),
            Request::Flush => None,
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.shared.lock();
            // The connection's own failure first: it says why.
            if let Some(kind) = &st.dead {
                return Err(EndpointError::new(&self.shared.name, offset, kind.clone()));
            }
            // A connection error, not a refusal: the pool retires a failed
            // session (closing it) while its other slots may still be
            // sending, and their requests belong on another session.
            if st.closing {
                return Err(EndpointError::io(&self.shared.name, offset, "session is closed"));
            }
            let cookie = st.client.send_request(req).map_err(|e| match e {
                RequestError::NotReady(_) => EndpointError::io(&self.shared.name, offset, e),
                e => self.config_err(offset, e.to_string()),
            })?;
            st.waiters.insert(cookie, Waiter { tx, offset });
        }
        self.shared.wake_writer.notify_one();
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(EndpointError::io(&self.shared.name, offset, "connection task ended")),
        }
    }

    /// Splits `[offset, offset+len)` into steps a u32 length can carry.
    fn steps(&self, offset: u64, len: u64) -> impl Iterator<Item = (u64, u32)> + use<> {
        const STEP: u64 = 1 << 30; // a multiple of every legal minimum block size
        let end = offset.saturating_add(len);
        (0..len.div_ceil(STEP)).map(move |i| {
            let o = offset + i * STEP;
            (o, (end - o).min(STEP) as u32)
        })
    }
}

impl Drop for NbdSession {
    fn drop(&mut self) {
        {
            let mut st = self.shared.lock();
            if !st.closing {
                st.closing = true;
                let _ = st.client.disconnect();
            }
            st.shutdown = true;
        }
        self.shared.wake_writer.notify_one();
        self.reader.abort();
    }
}

async fn writer<W: AsyncWrite + Unpin>(shared: Arc<Shared>, mut w: W) {
    let mut segs: Vec<Bytes> = Vec::new();
    loop {
        let (shutdown, dead) = {
            let mut st = shared.lock();
            segs.extend(std::iter::from_fn(|| st.client.poll_transmit()));
            st.writing = segs.iter().map(|b| b.len() as u64).sum();
            (st.shutdown, st.dead.is_some())
        };
        if dead && !shutdown {
            break;
        }
        if segs.is_empty() {
            if shutdown {
                let _ = w.shutdown().await;
                break;
            }
            shared.wake_writer.notified().await;
            continue;
        }
        if let Err(e) = write_all_segments(&mut w, &mut segs).await {
            shared.fail_all(ErrorKind::Io(format!("write failed: {e}")));
            break;
        }
    }
    shared.lock().writer_exited = true;
    shared.writer_done.notify_waiters();
}

/// How long an aborted session reads what the server still sends before
/// it drops the connection (see `abort`).
const ABORT_DRAIN: Duration = Duration::from_secs(1);

/// Smallest free space to read into.
const READ_CHUNK: usize = 256 * 1024;

async fn reader<R: AsyncRead + Unpin>(shared: Arc<Shared>, mut r: R, mut buf: BytesMut) {
    let mut done: Vec<(Waiter, Reply)> = Vec::new();
    loop {
        // Read data due next goes from the socket straight into its
        // request's buffer; everything else through `buf`.
        let lent = shared.lock().client.lend_payload();
        let read = if let Some(mut lent) = lent {
            let mut got = Ok(1);
            while lent.want() > 0 && matches!(got, Ok(n) if n > 0) {
                got = r.read_buf(&mut lent.room()).await;
            }
            let returned = shared.lock().client.return_payload(lent);
            if let Err(e) = returned {
                shared.fail_all(ErrorKind::Protocol(protocol_message(e)));
                return;
            }
            got
        } else {
            let want = shared.lock().client.bytes_wanted();
            let need = want.saturating_sub(buf.len()).max(READ_CHUNK / 4);
            if buf.capacity() - buf.len() < need {
                buf.reserve(need.max(READ_CHUNK));
            }
            r.read_buf(&mut buf).await
        };
        match read {
            Ok(0) => {
                shared.fail_all(ErrorKind::Io("server closed the connection".into()));
                return;
            }
            Err(e) => {
                shared.fail_all(ErrorKind::Io(format!("read failed: {e}")));
                return;
            }
            Ok(_) => {}
        }
        let idle = {
            let mut st = shared.lock();
            if let Err(e) = st.client.handle_input_buf(&mut buf) {
                drop(st);
                shared.fail_all(ErrorKind::Protocol(protocol_message(e)));
                return;
            }
            while let Some(ev) = st.client.poll_event() {
                if let Event::Reply(reply) = ev
                    && let Some(w) = st.waiters.remove(&reply.cookie)
                {
                    done.push((w, reply));
                }
            }
            st.waiters.is_empty()
        };
        for (w, reply) in done.drain(..) {
            let out = reply.result.map_err(|e| {
                let mut message = e.error.to_string();
                if !e.message.is_empty() {
                    message = format!("{message}: {}", e.message);
                }
                if let Some(o) = e.offset {
                    message = format!("{message} (at offset {o})");
                }
                EndpointError::new(
                    &shared.name,
                    w.offset,
                    ErrorKind::Server { code: e.error.code(), message, transient: e.error.is_transient() },
                )
            });
            let _ = w.tx.send(out);
        }
        if idle {
            shared.idle.notify_waiters();
        }
    }
}

fn protocol_message(e: ClientError) -> String {
    match e {
        ClientError::Protocol(p) => p.to_string(),
        e => e.to_string(),
    }
}

fn unexpected(name: &str, offset: Option<u64>, command: Command) -> EndpointError {
    EndpointError::protocol(name, offset, format!("unexpected reply data for {command}"))
}

#[async_trait]
impl Endpoint for NbdSession {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn size(&self) -> u64 {
        self.shared.neg.size
    }

    fn capabilities(&self) -> Capabilities {
        self.shared.caps
    }

    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        match self.call(Request::Read { offset, length: len }).await? {
            ReplyData::Read(b) => Ok(b.freeze()),
            _ => Err(unexpected(&self.shared.name, Some(offset), Command::Read)),
        }
    }

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let native_fua = fua && self.shared.caps.can_fua;
        self.call(Request::Write { offset, data, fua: native_fua }).await?;
        if fua && !native_fua && self.shared.caps.can_flush {
            self.flush().await.map_err(|e| e.at(offset))?;
        }
        Ok(())
    }

    async fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        if self.shared.caps.can_zero {
            let calls = self.steps(offset, len).map(|(o, l)| {
                self.call(Request::WriteZeroes { offset: o, length: l, no_hole: !may_trim, fua: false })
            });
            futures::future::try_join_all(calls).await?;
            return Ok(());
        }
        // Emulate with writes of a shared zero buffer.
        let chunk = u64::from(self.shared.caps.block_sizes.maximum.min(1 << 20));
        let zeroes = Bytes::from(vec![0u8; chunk as usize]);
        let end = offset.checked_add(len).ok_or_else(|| self.config_err(Some(offset), "range overflows"))?;
        let calls = (0..len.div_ceil(chunk)).map(|i| {
            let o = offset + i * chunk;
            let n = (end - o).min(chunk) as usize;
            self.write(o, zeroes.slice(..n), false)
        });
        futures::future::try_join_all(calls).await?;
        Ok(())
    }

    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        if len == 0 || !self.shared.caps.can_trim {
            return Ok(()); // advisory
        }
        let calls = self
            .steps(offset, len)
            .map(|(o, l)| self.call(Request::Trim { offset: o, length: l, fua: false }));
        futures::future::try_join_all(calls).await?;
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        if !self.shared.caps.can_flush {
            return Ok(());
        }
        self.call(Request::Flush).await.map(|_| ())
    }

    async fn block_status(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        let size = self.size();
        if offset >= size || len == 0 {
            return Err(self.config_err(Some(offset), format!("block status beyond the end ({size} bytes)")));
        }
        let len = len.min(size - offset);
        if self.shared.neg.base_allocation.is_none() {
            return Ok(vec![Extent { offset, length: len, hole: false, zero: false }]);
        }
        let min = u64::from(self.shared.caps.block_sizes.minimum);
        let step = (1u64 << 31) - (1u64 << 31) % min;
        let length = len.min(step) as u32;
        let descs = match self.call(Request::BlockStatus { offset, length, req_one: false }).await? {
            ReplyData::BlockStatus(d) => d,
            _ => return Err(unexpected(&self.shared.name, Some(offset), Command::BlockStatus)),
        };
        let end = offset + u64::from(length);
        let mut pos = offset;
        let mut out: Vec<Extent> = Vec::with_capacity(descs.len());
        for d in descs {
            let l = u64::from(d.length).min(end - pos);
            if l == 0 {
                break;
            }
            let (hole, zero) = (d.flags & STATE_HOLE != 0, d.flags & STATE_ZERO != 0);
            match out.last_mut() {
                Some(last) if last.hole == hole && last.zero == zero => last.length += l,
                _ => out.push(Extent { offset: pos, length: l, hole, zero }),
            }
            pos += l;
        }
        Ok(out)
    }

    async fn close(&self) -> Result<()> {
        {
            let mut st = self.shared.lock();
            if st.closing {
                return Ok(());
            }
            st.closing = true;
        }
        // Let the requests in flight complete (or fail with the connection).
        loop {
            let notified = self.shared.idle.notified();
            {
                let st = self.shared.lock();
                if st.waiters.is_empty() || st.dead.is_some() {
                    break;
                }
            }
            notified.await;
        }
        let notified = self.shared.writer_done.notified();
        {
            let mut st = self.shared.lock();
            if st.dead.is_none() {
                let _ = st.client.disconnect();
            }
            st.shutdown = true;
            if st.writer_exited {
                return Ok(());
            }
        }
        self.shared.wake_writer.notify_one();
        notified.await;
        Ok(())
    }

    async fn abort(&self) {
        // NBD cannot cancel a request. Every request in flight fails here at
        // once; the server is told NBD_CMD_DISC (it must still answer what it
        // holds, and may cut that short) and its answers are read and dropped
        // until it closes, for at most ABORT_DRAIN, before the connection
        // goes. Dropping it under requests the server still holds is legal
        // but makes the server's replies fail, and nbdkit 1.32 dies of that
        // when two replies fail at once (an assertion in raw_send_socket).
        let drained = self.shared.reader_done.notified();
        let alive = {
            let mut st = self.shared.lock();
            let alive = st.dead.is_none();
            if alive {
                let _ = st.client.disconnect();
            }
            st.closing = true;
            st.shutdown = true;
            alive
        };
        self.shared.fail_all(ErrorKind::Io("aborted: a request passed its deadline".into()));
        if alive && !self.shared.lock().reader_exited {
            let _ = tokio::time::timeout(ABORT_DRAIN, drained).await;
        }
        if let Some(fd) = &self.shared.tcp {
            let _ = socket2::SockRef::from(fd).shutdown(std::net::Shutdown::Both);
        }
        self.shared.wake_writer.notify_one();
        self.reader.abort();
    }

    fn tcp_info(&self) -> Vec<TcpInfo> {
        self.shared
            .tcp
            .as_ref()
            .and_then(|fd| wanblk_sys::tcp::tcp_info(fd.as_fd()).ok())
            .into_iter()
            .collect()
    }

    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        socket2::SockRef::from(self.shared.tcp.as_ref()?).peer_addr().ok()?.as_socket()
    }

    fn send_backlog(&self) -> Option<SendBacklog> {
        let fd = self.shared.tcp.as_ref()?;
        let info = wanblk_sys::tcp::tcp_info(fd.as_fd()).ok()?;
        let queued = {
            let st = self.shared.lock();
            st.client.queued_bytes() as u64 + st.writing
        };
        Some(SendBacklog::of_tcp(queued, &info))
    }

    fn set_pacing_rate(&self, bytes_per_s: Option<u64>) {
        if let Some(fd) = &self.shared.tcp
            && let Err(e) = wanblk_sys::tcp::set_max_pacing_rate(fd.as_fd(), bytes_per_s.unwrap_or(u64::MAX))
        {
            tracing::debug!("{}: pacing rate: {e}", self.shared.name);
        }
    }

    fn set_window_clamp(&self, bytes: Option<u64>) {
        if let Some(fd) = &self.shared.tcp
            && let Err(e) = wanblk_sys::tcp::set_window_clamp(fd.as_fd(), bytes)
        {
            tracing::debug!("{}: window clamp: {e}", self.shared.name);
        }
    }
}
