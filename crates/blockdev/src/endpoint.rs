//! The one trait every storage endpoint implements.
//!
//! An [`Endpoint`] is one open session to a block store: an NBD connection, an
//! iSCSI session, a local file, the `null:` sink, or the block device layer
//! itself (which stacks on top of many sessions and is an endpoint too).
//! Endpoints take `&self` in every I/O method and must accept many calls in
//! flight at once: a network session pipelines them, a local file serves them
//! with positioned I/O.
//!
//! A [`Connector`] knows how to open more sessions to the same store; the
//! session pool uses it to grow the number of parallel sessions.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

/// Block size constraints of an endpoint, in bytes (NBD_INFO_BLOCK_SIZE,
/// iSCSI block length and maximum transfer length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BlockSizes {
    /// Requests must be aligned to and a multiple of this (1 when any byte works).
    pub minimum: u32,
    /// The size the store prefers for efficiency (at least `minimum`).
    pub preferred: u32,
    /// The largest payload a single read or write may carry.
    pub maximum: u32,
}

impl Default for BlockSizes {
    fn default() -> Self {
        BlockSizes { minimum: 1, preferred: 4096, maximum: 32 * 1024 * 1024 }
    }
}

/// What an endpoint can do, as negotiated with its server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Capabilities {
    /// Writes, zeroes and trims are refused.
    pub read_only: bool,
    /// `flush` reaches stable storage (otherwise it is a no-op).
    pub can_flush: bool,
    /// Writes accept a force-unit-access flag.
    pub can_fua: bool,
    /// `trim` is supported (a hint; data may or may not read back as zero).
    pub can_trim: bool,
    /// `write_zeroes` is supported natively (otherwise it is emulated by writes).
    pub can_zero: bool,
    /// `block_status` reports real allocation (otherwise everything is data).
    pub can_block_status: bool,
    /// Several sessions to this store see one consistent image
    /// (NBD_FLAG_CAN_MULTI_CONN; always true for iSCSI sessions to one LUN and
    /// for local files). The pool opens more than one session only if set.
    pub can_multi_conn: bool,
    /// Request size limits.
    pub block_sizes: BlockSizes,
}

impl Capabilities {
    /// A writable store that supports every operation natively, with the
    /// default request sizes (the in-process stores: memory, null, files).
    pub fn everything() -> Self {
        Capabilities {
            read_only: false,
            can_flush: true,
            can_fua: true,
            can_trim: true,
            can_zero: true,
            can_block_status: true,
            can_multi_conn: true,
            block_sizes: BlockSizes::default(),
        }
    }
}

/// One run of bytes with the same allocation state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Extent {
    /// Absolute offset of the run.
    pub offset: u64,
    /// Length of the run in bytes (never zero).
    pub length: u64,
    /// The run is not allocated (a hole).
    pub hole: bool,
    /// The run reads as zeroes.
    pub zero: bool,
}

/// Counters of one TCP connection under an endpoint, read from TCP_INFO.
pub use wanblk_sys::tcp::TcpInfo;

/// What went wrong, by who is to blame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// The peer broke the protocol (garbage, unknown cookie, short reply...).
    Protocol(String),
    /// The server answered the request with an error (errno-like code and text).
    Server {
        /// Protocol error number as received (NBD error / SCSI sense key...).
        code: u32,
        /// Human-readable meaning.
        message: String,
        /// The same request may succeed if sent again (NBD EIO, ENOMEM,
        /// ESHUTDOWN; SCSI BUSY, TASK SET FULL, UNIT ATTENTION, NOT READY,
        /// ABORTED COMMAND); otherwise it is permanent (no space, out of
        /// range, read-only, not permitted...).
        transient: bool,
    },
    /// The connection closed or failed (local or remote I/O error).
    Io(String),
    /// Bad configuration or request (unsupported operation, out of range, read-only).
    Config(String),
}

/// An error from an endpoint, naming the endpoint and, where one applies,
/// the offset of the request that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointError {
    /// The endpoint's display name (URI with secrets removed).
    pub endpoint: String,
    /// Byte offset of the failed request, if the error belongs to one.
    pub offset: Option<u64>,
    /// What happened.
    pub kind: ErrorKind,
}

impl EndpointError {
    /// Builds an error for `endpoint`.
    pub fn new(endpoint: impl Into<String>, offset: Option<u64>, kind: ErrorKind) -> Self {
        EndpointError { endpoint: endpoint.into(), offset, kind }
    }

    /// A protocol violation by the peer.
    pub fn protocol(endpoint: impl Into<String>, offset: Option<u64>, msg: impl Into<String>) -> Self {
        Self::new(endpoint, offset, ErrorKind::Protocol(msg.into()))
    }

    /// A local or transport I/O failure.
    pub fn io(endpoint: impl Into<String>, offset: Option<u64>, err: impl fmt::Display) -> Self {
        Self::new(endpoint, offset, ErrorKind::Io(err.to_string()))
    }

    /// A configuration or usage error.
    pub fn config(endpoint: impl Into<String>, offset: Option<u64>, msg: impl Into<String>) -> Self {
        Self::new(endpoint, offset, ErrorKind::Config(msg.into()))
    }

    /// The server refused the request for a reason that may pass: sending
    /// it again may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self.kind, ErrorKind::Server { transient: true, .. })
    }

    /// The connection failed (closed, reset, timed out): the request may
    /// succeed on another session.
    pub fn is_connection(&self) -> bool {
        matches!(self.kind, ErrorKind::Io(_))
    }

    /// Returns the same error attached to `offset` if it had none.
    pub fn at(mut self, offset: u64) -> Self {
        self.offset.get_or_insert(offset);
        self
    }
}

impl fmt::Display for EndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.endpoint)?;
        if let Some(o) = self.offset {
            write!(f, " at offset {o}")?;
        }
        write!(f, ": {}", self.kind)
    }
}

impl ErrorKind {
    /// The message without its category prefix.
    pub fn detail(&self) -> &str {
        match self {
            ErrorKind::Protocol(m) | ErrorKind::Io(m) | ErrorKind::Config(m) => m,
            ErrorKind::Server { message, .. } => message,
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Protocol(m) => write!(f, "protocol error: {m}"),
            ErrorKind::Server { code, message, .. } => write!(f, "server error {code}: {message}"),
            ErrorKind::Io(m) => write!(f, "I/O error: {m}"),
            ErrorKind::Config(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for EndpointError {}

/// Result alias for endpoint operations.
pub type Result<T, E = EndpointError> = std::result::Result<T, E>;

/// One open session to a block store.
///
/// All I/O methods take `&self` and may be called concurrently; network
/// endpoints pipeline them (many requests in flight, replies matched out of
/// order). Offsets and lengths must respect [`Capabilities::block_sizes`]:
/// the caller splits, the endpoint refuses what is out of range with
/// [`ErrorKind::Config`].
///
/// # Cancel safety
/// Dropping a returned future does not cancel the request on the wire; a
/// network endpoint still consumes its reply. The data of a dropped write may
/// or may not have reached the store.
#[async_trait]
pub trait Endpoint: Send + Sync {
    /// Display name: the URI with secrets removed. Used in every error.
    fn name(&self) -> &str;

    /// Size of the store in bytes.
    fn size(&self) -> u64;

    /// Negotiated capabilities.
    fn capabilities(&self) -> Capabilities;

    /// A serial number that identifies the store where the protocol gives
    /// one (an iSCSI LUN's Unit Serial Number); the resume journal checks it.
    fn serial(&self) -> Option<String> {
        None
    }

    /// The largest read this store answers with one buffer right now (the
    /// session pool: its current request size; a longer read is cut into
    /// requests whose replies are joined by a copy). A caller that cuts its
    /// reads to it saves that copy. `None`: any size.
    fn preferred_read_bytes(&self) -> Option<u32> {
        None
    }

    /// Reads `len` bytes at `offset`. Returns exactly `len` bytes or an error.
    async fn read(&self, offset: u64, len: u32) -> Result<Bytes>;

    /// Reads ahead of demand (speculative read-ahead): like
    /// [`Endpoint::read`], but an endpoint with a queue of its own (the
    /// session pool) serves it only after every demand request waiting, so
    /// read-ahead never delays a demand read. The default is a plain read.
    async fn read_ahead(&self, offset: u64, len: u32) -> Result<Bytes> {
        self.read(offset, len).await
    }

    /// Writes `data` at `offset`; with `fua` the data is on stable storage
    /// when this returns (if the endpoint supports FUA, else it flushes).
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<()>;

    /// Makes `len` bytes at `offset` read as zeroes. With `may_trim` the
    /// store may deallocate them (punch a hole) instead of writing zeroes.
    async fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<()>;

    /// Discards `len` bytes at `offset` (advisory).
    async fn trim(&self, offset: u64, len: u64) -> Result<()>;

    /// Flushes written data to stable storage.
    async fn flush(&self) -> Result<()>;

    /// Allocation state of `[offset, offset+len)`. The extents are in order,
    /// start at `offset`, and cover at least one byte; they may end before
    /// `offset+len` (the caller asks again) but never after it. Endpoints
    /// without block status return one data extent covering the range.
    async fn block_status(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        Ok(vec![Extent {
            offset,
            length: len.min(self.size().saturating_sub(offset)),
            hole: false,
            zero: false,
        }])
    }

    /// Ends the session cleanly (NBD_CMD_DISC, iSCSI logout) after the
    /// requests in flight complete. Later calls fail.
    async fn close(&self) -> Result<()> {
        Ok(())
    }

    /// Gives up on the requests in flight, in bounded time: they fail with
    /// an I/O error and the session can only be dropped afterwards. The
    /// pool calls it on a session whose request passed its deadline (the
    /// requests are sent again elsewhere) and on one that does not close
    /// in time. NBD drops the connection; iSCSI asks the target to abort
    /// each task (ABORT TASK), then logs out. Local endpoints have nothing
    /// to give up.
    async fn abort(&self) {}

    /// TCP_INFO of every TCP connection this endpoint uses (empty for local
    /// endpoints or Unix sockets).
    fn tcp_info(&self) -> Vec<TcpInfo> {
        Vec::new()
    }

    /// The address of the peer of this endpoint's (first) TCP connection,
    /// if it has one: where the path's capacity can be probed.
    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        None
    }

    /// Caps how fast this session sends, in bytes per second, on every TCP
    /// connection it uses (`SO_MAX_PACING_RATE`); `None` removes the cap.
    /// Only what we send is paced; endpoints without TCP ignore it.
    fn set_pacing_rate(&self, bytes_per_s: Option<u64>) {
        let _ = bytes_per_s;
    }

    /// How far this session's sending runs ahead of the network, if known
    /// (TCP sessions that queue their requests' bytes themselves). The
    /// pool gives a session more work only while it has room to send
    /// (`Pool`'s send room), so written data waits in the pool's queue,
    /// where any session can take it, rather than behind one session's
    /// window. `None` (the default): always room.
    fn send_backlog(&self) -> Option<SendBacklog> {
        None
    }

    /// Caps the window every TCP connection of this session advertises
    /// (`TCP_WINDOW_CLAMP`), so its peer keeps at most that many bytes in
    /// flight towards us; `None` lifts the cap. Only what we receive is
    /// held; endpoints without TCP ignore it.
    fn set_window_clamp(&self, bytes: Option<u64>) {
        let _ = bytes;
    }
}

/// How far a session's sending runs ahead of what the network takes
/// ([`Endpoint::send_backlog`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendBacklog {
    /// Bytes taken from callers and not yet sent: queued in user space, or
    /// in the socket and not yet on the wire (`tcpi_notsent_bytes`).
    pub unsent_bytes: u64,
    /// The congestion window in bytes (`tcpi_snd_cwnd x tcpi_snd_mss`):
    /// what the connection sends per round trip while it can.
    pub cwnd_bytes: u64,
    /// Smoothed round-trip time, microseconds (0: unknown).
    pub rtt_us: u32,
}

impl SendBacklog {
    /// A TCP session's backlog: `queued` bytes it holds in user space, and
    /// its socket's unsent bytes, window and RTT from `info`.
    pub fn of_tcp(queued: u64, info: &TcpInfo) -> SendBacklog {
        SendBacklog {
            unsent_bytes: queued + u64::from(info.notsent_bytes),
            cwnd_bytes: u64::from(info.snd_cwnd) * u64::from(info.snd_mss),
            rtt_us: info.rtt_us,
        }
    }
}

/// Opens sessions to one store. The pool calls [`Connector::connect`] once
/// per parallel session.
#[async_trait]
pub trait Connector: Send + Sync {
    /// Display name of the store (URI with secrets removed).
    fn name(&self) -> &str;

    /// Opens one new session.
    async fn connect(&self) -> Result<Arc<dyn Endpoint>>;

    /// The most sessions this store accepts, if known (e.g. an iSCSI target's
    /// limit); `None` when unknown.
    fn max_sessions(&self) -> Option<usize> {
        None
    }
}
