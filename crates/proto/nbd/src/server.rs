//! The server side: handshake (spec "Fixed newstyle negotiation", "Option
//! haggling", NBD_OPT_STARTTLS per "TLS support") answered on its own from
//! a list of exports, then request
//! decoding with bounds and reply encoding, simple or structured
//! (spec "Transmission phase").
//!
//! The greeting is queued when the machine is created. Feed the client's
//! bytes to [`Server::handle_input`] / [`Server::handle_input_buf`], send what
//! [`Server::poll_transmit`] yields, act on [`Server::poll_event`], and answer
//! each [`ServerRequest`] with the `reply_*` methods in any order.

use std::collections::VecDeque;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::codec::{Codec, Reader};
use crate::consts::*;
use crate::error::ProtocolError;
use crate::output::OutQueue;
use crate::wire::*;

/// Context id this server gives `base:allocation`.
pub const BASE_ALLOCATION_ID: u32 = 1;

/// One export the server offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportConfig {
    /// Export name.
    pub name: String,
    /// Description (sent for NBD_INFO_DESCRIPTION and NBD_OPT_LIST when non-empty).
    pub description: String,
    /// Size in bytes.
    pub size: u64,
    /// Transmission flags to advertise (`tflags::*`; HAS_FLAGS is added).
    pub flags: u16,
    /// Block size constraints to advertise and enforce.
    pub block_sizes: BlockSizes,
    /// Offer the `base:allocation` metadata context.
    pub base_allocation: bool,
}

/// Whether the server offers TLS (spec "TLS support").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsPolicy {
    /// NBD_OPT_STARTTLS is answered NBD_REP_ERR_UNSUP.
    #[default]
    Off,
    /// NBD_OPT_STARTTLS is accepted; clients may also stay in clear text.
    Optional,
    /// Forced TLS (spec "Forced TLS"): every option but NBD_OPT_STARTTLS and
    /// NBD_OPT_ABORT is answered NBD_REP_ERR_TLS_REQD until TLS is up, and
    /// NBD_OPT_EXPORT_NAME before TLS closes the connection.
    Required,
}

/// Server configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerConfig {
    /// The exports; "" selects the first one unless an export is named "".
    pub exports: Vec<ExportConfig>,
    /// Accept NBD_OPT_STRUCTURED_REPLY.
    pub structured_replies: bool,
    /// Whether NBD_OPT_STARTTLS is offered or required.
    pub tls: TlsPolicy,
}

/// A decoded, validated request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerRequest {
    /// Cookie to answer with.
    pub cookie: u64,
    /// The command (never `Disc` or `Unsupported`).
    pub command: Command,
    /// Command flags (`cflags::*`), already checked.
    pub flags: u16,
    /// Offset.
    pub offset: u64,
    /// Length.
    pub length: u32,
    /// A WRITE's payload (empty otherwise).
    pub data: Bytes,
}

impl ServerRequest {
    /// Whether command flag `flag` is set.
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// What the server reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// The client entered transmission on export `export` (index in the config).
    Selected {
        /// Index of the export.
        export: usize,
        /// Structured replies are in use.
        structured_replies: bool,
        /// `base:allocation` was negotiated.
        base_allocation: bool,
    },
    /// A request to serve; answer it with one of the `reply_*` methods.
    Request(ServerRequest),
    /// NBD_OPT_STARTTLS was acknowledged (spec "NBD_OPT_STARTTLS"): send
    /// what [`Server::poll_transmit`] holds in clear text, run the TLS
    /// handshake as the server on the same connection, then call
    /// [`Server::tls_established`] and go on over TLS. No input is taken
    /// until then.
    StartTls,
    /// The connection should close once the transmit queue is drained
    /// (NBD_CMD_DISC, NBD_OPT_ABORT, unknown export name).
    Close(&'static str),
}

/// One chunk of a read reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadChunk {
    /// Data at an absolute offset.
    Data(u64, Bytes),
    /// A run of zeroes at an absolute offset.
    Hole(u64, u32),
}

/// Server phases (spec "Protocol phases": "Handshake" -> "Transmission").
#[derive(Debug)]
enum Phase {
    /// Greeting sent, waiting for the client flags (spec "Newstyle
    /// negotiation", "Fixed newstyle negotiation").
    ClientFlags,
    /// Option haggling (spec "Option haggling", "Option types");
    /// `discard` bytes of an oversized option are skipped.
    Options {
        /// Bytes of an oversized option still to skip.
        discard: u64,
    },
    /// NBD_OPT_STARTTLS acknowledged; the driver runs the TLS handshake
    /// (spec "NBD_OPT_STARTTLS"). The client must send nothing before it.
    AwaitTls,
    /// Transmission on an export (spec "Transmission", "Request message").
    Transmission {
        /// Index of the export in the configuration.
        export: usize,
    },
    /// Closed after NBD_CMD_DISC, NBD_OPT_ABORT or a fatal error (spec
    /// "Termination of the session during option haggling", "Terminating
    /// the transmission phase").
    Closed,
}

/// The NBD server state machine for one connection.
#[derive(Debug)]
pub struct Server {
    cfg: ServerConfig,
    phase: Phase,
    no_zeroes: bool,
    structured: bool,
    /// Export name the `base:allocation` context was set for.
    meta_for: Option<String>,
    base_allocation: bool,
    inbuf: BytesMut,
    out: OutQueue,
    events: VecDeque<ServerEvent>,
    wanted: usize,
    /// TLS is up on this connection.
    tls_active: bool,
    /// Why every export is refused to this client (NBD_REP_ERR_POLICY).
    denied: Option<String>,
}

impl Server {
    /// A server machine with its greeting queued.
    pub fn new(cfg: ServerConfig) -> Self {
        let mut s = Server {
            cfg,
            phase: Phase::ClientFlags,
            no_zeroes: false,
            structured: false,
            meta_for: None,
            base_allocation: false,
            inbuf: BytesMut::new(),
            out: OutQueue::default(),
            events: VecDeque::new(),
            wanted: 4,
            tls_active: false,
            denied: None,
        };
        s.out.frame(|b| Greeting::Newstyle { flags: FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES }.encode(b));
        s
    }

    /// Feeds bytes from the client (copied into an internal buffer).
    ///
    /// # Errors
    /// A [`ProtocolError`] when the client broke the protocol; the
    /// connection must then be closed.
    pub fn handle_input(&mut self, data: &[u8]) -> Result<(), ProtocolError> {
        let mut buf = std::mem::take(&mut self.inbuf);
        buf.extend_from_slice(data);
        let r = self.handle_input_buf(&mut buf);
        self.inbuf = buf;
        r
    }

    /// Consumes every complete frame at the front of `buf` (WRITE payloads
    /// are split off without copying), leaving a partial frame in place.
    ///
    /// # Errors
    /// A [`ProtocolError`] when the client broke the protocol.
    pub fn handle_input_buf(&mut self, buf: &mut BytesMut) -> Result<(), ProtocolError> {
        loop {
            let r = match self.phase {
                Phase::ClientFlags => self.on_client_flags(buf),
                Phase::Options { discard } if discard > 0 => {
                    let n = (discard.min(buf.len() as u64)) as usize;
                    buf.advance(n);
                    self.phase = Phase::Options { discard: discard - n as u64 };
                    Ok(n > 0)
                }
                Phase::Options { .. } => self.on_option(buf),
                // Bytes sent between STARTTLS and the TLS handshake would be
                // taken as if they came over TLS (spec "NBD_OPT_STARTTLS").
                Phase::AwaitTls if buf.is_empty() => Ok(false),
                Phase::AwaitTls => {
                    Err(ProtocolError::Unexpected("data after NBD_OPT_STARTTLS in clear text"))
                }
                Phase::Transmission { export } => self.on_request(buf, export),
                Phase::Closed => {
                    buf.clear();
                    Ok(false)
                }
            };
            match r {
                Ok(true) => continue,
                Ok(false) => return Ok(()),
                Err(e) => {
                    self.phase = Phase::Closed;
                    return Err(e);
                }
            }
        }
    }

    /// Total bytes the frame being received needs (for buffer sizing).
    pub fn bytes_wanted(&self) -> usize {
        self.wanted
    }

    /// The next segment to send.
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        self.out.poll()
    }

    /// Whether [`Server::poll_transmit`] has something.
    pub fn has_transmit(&self) -> bool {
        !self.out.is_empty()
    }

    /// Bytes queued for the client and not yet taken by
    /// [`Server::poll_transmit`] (a driver stops reading requests above its
    /// limit, so a client that does not read its replies cannot grow it).
    pub fn queued_bytes(&self) -> usize {
        self.out.len()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    /// Whether structured replies were negotiated.
    pub fn structured_replies(&self) -> bool {
        self.structured
    }

    /// Whether the connection is closed (no more input is processed).
    pub fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed)
    }

    /// Whether the client reached the transmission phase.
    pub fn is_transmission(&self) -> bool {
        matches!(self.phase, Phase::Transmission { .. })
    }

    /// The TLS handshake that followed [`ServerEvent::StartTls`] succeeded:
    /// option haggling goes on over TLS. Everything negotiated before is
    /// forgotten (spec "NBD_OPT_STARTTLS": the client must renegotiate).
    pub fn tls_established(&mut self) {
        if matches!(self.phase, Phase::AwaitTls) {
            self.tls_active = true;
            self.structured = false;
            self.base_allocation = false;
            self.meta_for = None;
            self.phase = Phase::Options { discard: 0 };
            self.wanted = OptionHeader::LEN;
        }
    }

    /// Whether TLS is up on this connection.
    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    /// Refuses every export to this client from now on: NBD_OPT_GO, INFO
    /// and LIST are answered NBD_REP_ERR_POLICY with `reason` (e.g. its
    /// certificate is not on the allow-list), NBD_OPT_EXPORT_NAME closes.
    pub fn deny(&mut self, reason: impl Into<String>) {
        self.denied = Some(reason.into());
    }

    /// Lifts [`Server::deny`].
    pub fn allow(&mut self) {
        self.denied = None;
    }

    /// Answers a request without data: success.
    pub fn reply_ok(&mut self, cookie: u64) {
        self.out.frame(|b| SimpleReplyHeader { error: 0, cookie }.encode(b));
    }

    /// Answers a request with an error (a structured ERROR chunk when
    /// structured replies are in use, else a simple reply).
    pub fn reply_error(&mut self, cookie: u64, error: NbdError, message: &str) {
        let error = if error.code() == 0 { NbdError::Io } else { error };
        if self.structured {
            let e = ErrorChunk { error: error.code(), message: truncate(message).to_string() };
            let mut p = BytesMut::new();
            e.encode(&mut p);
            self.out.frame(|b| {
                ChunkHeader { flags: REPLY_FLAG_DONE, kind: chunk::ERROR, cookie, length: p.len() as u32 }
                    .encode(b)
            });
            self.out.put_slice(&p);
        } else {
            self.out.frame(|b| SimpleReplyHeader { error: error.code(), cookie }.encode(b));
        }
    }

    /// Answers a read with its data in one piece (one OFFSET_DATA chunk, or a
    /// simple reply). The data is sent as its own segment, not copied.
    pub fn reply_read(&mut self, cookie: u64, offset: u64, data: Bytes) {
        if self.structured {
            self.out.frame(|b| {
                ChunkHeader {
                    flags: REPLY_FLAG_DONE,
                    kind: chunk::OFFSET_DATA,
                    cookie,
                    length: 8 + data.len() as u32,
                }
                .encode(b)
            });
            self.out.put_slice(&offset.to_be_bytes());
        } else {
            self.out.frame(|b| SimpleReplyHeader { error: 0, cookie }.encode(b));
        }
        self.out.payload(data);
    }

    /// Answers a read with data and hole chunks (structured replies), which
    /// must together cover the request in order; the last carries DONE.
    /// Without structured replies the chunks are assembled into one simple
    /// reply (holes as zeroes).
    pub fn reply_read_chunks(&mut self, cookie: u64, chunks: Vec<ReadChunk>) {
        if !self.structured {
            let total: usize = chunks
                .iter()
                .map(|c| match c {
                    ReadChunk::Data(_, d) => d.len(),
                    ReadChunk::Hole(_, l) => *l as usize,
                })
                .sum();
            let mut out = BytesMut::with_capacity(total);
            for c in chunks {
                match c {
                    ReadChunk::Data(_, d) => out.put_slice(&d),
                    ReadChunk::Hole(_, l) => out.put_bytes(0, l as usize),
                }
            }
            self.out.frame(|b| SimpleReplyHeader { error: 0, cookie }.encode(b));
            self.out.payload(out.freeze());
            return;
        }
        let n = chunks.len();
        if n == 0 {
            self.out.frame(|b| {
                ChunkHeader { flags: REPLY_FLAG_DONE, kind: chunk::NONE, cookie, length: 0 }.encode(b)
            });
            return;
        }
        for (i, c) in chunks.into_iter().enumerate() {
            let flags = if i + 1 == n { REPLY_FLAG_DONE } else { 0 };
            match c {
                ReadChunk::Data(offset, data) => {
                    self.out.frame(|b| {
                        ChunkHeader { flags, kind: chunk::OFFSET_DATA, cookie, length: 8 + data.len() as u32 }
                            .encode(b)
                    });
                    self.out.put_slice(&offset.to_be_bytes());
                    self.out.payload(data);
                }
                ReadChunk::Hole(offset, length) => {
                    self.out.frame(|b| {
                        ChunkHeader { flags, kind: chunk::OFFSET_HOLE, cookie, length: 12 }.encode(b)
                    });
                    self.out.frame(|b| OffsetHole { offset, length }.encode(b));
                }
            }
        }
    }

    /// Answers a block status request with `base:allocation` descriptors
    /// (at least one; the caller keeps them within the spec's length rules).
    pub fn reply_block_status(&mut self, cookie: u64, descriptors: Vec<BlockDescriptor>) {
        let s = BlockStatusChunk { context: BASE_ALLOCATION_ID, descriptors };
        let mut p = BytesMut::new();
        s.encode(&mut p);
        self.out.frame(|b| {
            ChunkHeader { flags: REPLY_FLAG_DONE, kind: chunk::BLOCK_STATUS, cookie, length: p.len() as u32 }
                .encode(b)
        });
        self.out.put_slice(&p);
    }

    fn on_client_flags(&mut self, buf: &mut BytesMut) -> Result<bool, ProtocolError> {
        if buf.len() < 4 {
            self.wanted = 4;
            return Ok(false);
        }
        let frame = buf.split_to(4);
        let f = ClientFlags::decode_exact(&frame, "client flags")?;
        if f.0 & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
            return Err(ProtocolError::UnknownClientFlags(f.0));
        }
        self.no_zeroes = f.0 & FLAG_C_NO_ZEROES != 0;
        self.phase = Phase::Options { discard: 0 };
        self.wanted = OptionHeader::LEN;
        Ok(true)
    }

    fn option_reply(&mut self, option: u32, reply: u32, data: &[u8]) {
        self.out.frame(|b| OptionReplyHeader { option, reply, length: data.len() as u32 }.encode(b));
        self.out.put_slice(data);
    }

    fn option_error(&mut self, option: u32, reply: u32, message: &str) {
        self.option_reply(option, reply, truncate(message).as_bytes());
    }

    fn find_export(&self, name: &str) -> Option<usize> {
        self.cfg
            .exports
            .iter()
            .position(|e| e.name == name)
            .or(if name.is_empty() && !self.cfg.exports.is_empty() { Some(0) } else { None })
    }

    fn on_option(&mut self, buf: &mut BytesMut) -> Result<bool, ProtocolError> {
        if buf.len() < OptionHeader::LEN {
            self.wanted = OptionHeader::LEN;
            return Ok(false);
        }
        let hdr = OptionHeader::decode(&mut Reader::new(&buf[..OptionHeader::LEN], "option request"))?;
        if hdr.length > MAX_OPTION_PAYLOAD {
            if hdr.option == opt::EXPORT_NAME {
                return Err(ProtocolError::TooLong {
                    what: "NBD_OPT_EXPORT_NAME",
                    len: hdr.length.into(),
                    max: MAX_OPTION_PAYLOAD.into(),
                });
            }
            buf.advance(OptionHeader::LEN);
            self.option_error(hdr.option, rep::ERR_TOO_BIG, "option data too large");
            self.phase = Phase::Options { discard: hdr.length.into() };
            return Ok(true);
        }
        let total = OptionHeader::LEN + hdr.length as usize;
        if buf.len() < total {
            self.wanted = total;
            return Ok(false);
        }
        buf.advance(OptionHeader::LEN);
        let data = buf.split_to(hdr.length as usize).freeze();
        self.wanted = OptionHeader::LEN;
        self.dispatch_option(hdr.option, &data);
        Ok(!matches!(self.phase, Phase::AwaitTls) || !buf.is_empty())
    }

    fn dispatch_option(&mut self, option: u32, data: &[u8]) {
        let gated = !matches!(option, opt::STARTTLS | opt::ABORT);
        if gated && self.cfg.tls == TlsPolicy::Required && !self.tls_active {
            // Spec "Forced TLS".
            if option == opt::EXPORT_NAME {
                self.phase = Phase::Closed;
                self.events.push_back(ServerEvent::Close("NBD_OPT_EXPORT_NAME before TLS (TLS is required)"));
            } else {
                self.option_error(option, rep::ERR_TLS_REQD, "TLS is required: send NBD_OPT_STARTTLS first");
            }
            return;
        }
        if let Some(reason) = self.denied.clone()
            && matches!(option, opt::EXPORT_NAME | opt::GO | opt::INFO | opt::LIST)
        {
            if option == opt::EXPORT_NAME {
                self.phase = Phase::Closed;
                self.events.push_back(ServerEvent::Close("client not allowed (NBD_OPT_EXPORT_NAME)"));
            } else {
                self.option_error(option, rep::ERR_POLICY, &reason);
            }
            return;
        }
        match option {
            opt::STARTTLS => {
                if !data.is_empty() {
                    self.option_error(option, rep::ERR_INVALID, "NBD_OPT_STARTTLS takes no data");
                } else if self.cfg.tls == TlsPolicy::Off {
                    self.option_error(option, rep::ERR_UNSUP, "TLS is not enabled on this server");
                } else if self.tls_active {
                    self.option_error(option, rep::ERR_INVALID, "TLS is already in use");
                } else {
                    self.option_reply(option, rep::ACK, &[]);
                    self.phase = Phase::AwaitTls;
                    self.events.push_back(ServerEvent::StartTls);
                }
            }
            opt::EXPORT_NAME => {
                let name = String::from_utf8_lossy(data);
                match self.find_export(&name) {
                    Some(i) => {
                        let e = &self.cfg.exports[i];
                        self.out.frame(|b| {
                            ExportNameReply { size: e.size, flags: e.flags | tflags::HAS_FLAGS }.encode(b)
                        });
                        if !self.no_zeroes {
                            self.out.put_slice(&[0; 124]);
                        }
                        self.enter_transmission(i);
                    }
                    None => {
                        // The spec leaves no way to refuse NBD_OPT_EXPORT_NAME but to close.
                        self.phase = Phase::Closed;
                        self.events.push_back(ServerEvent::Close(
                            "unknown export requested with NBD_OPT_EXPORT_NAME",
                        ));
                    }
                }
            }
            opt::ABORT => {
                self.option_reply(option, rep::ACK, &[]);
                self.phase = Phase::Closed;
                self.events.push_back(ServerEvent::Close("client sent NBD_OPT_ABORT"));
            }
            opt::LIST => {
                if !data.is_empty() {
                    self.option_error(option, rep::ERR_INVALID, "NBD_OPT_LIST takes no data");
                    return;
                }
                for i in 0..self.cfg.exports.len() {
                    let e = &self.cfg.exports[i];
                    let d =
                        ServerReply { name: e.name.clone(), description: e.description.clone() }.to_bytes();
                    self.option_reply(option, rep::SERVER, &d);
                }
                self.option_reply(option, rep::ACK, &[]);
            }
            opt::STRUCTURED_REPLY => {
                if !data.is_empty() {
                    self.option_error(option, rep::ERR_INVALID, "NBD_OPT_STRUCTURED_REPLY takes no data");
                } else if !self.cfg.structured_replies {
                    self.option_error(option, rep::ERR_UNSUP, "structured replies are disabled");
                } else {
                    self.structured = true;
                    self.option_reply(option, rep::ACK, &[]);
                }
            }
            opt::LIST_META_CONTEXT | opt::SET_META_CONTEXT => self.meta_context(option, data),
            opt::INFO | opt::GO => self.info_go(option, data),
            _ => self.option_error(option, rep::ERR_UNSUP, "option not supported"),
        }
    }

    fn meta_context(&mut self, option: u32, data: &[u8]) {
        let set = option == opt::SET_META_CONTEXT;
        if !self.structured {
            self.option_error(option, rep::ERR_INVALID, "negotiate structured replies first");
            return;
        }
        let req = match MetaContextRequest::decode_exact(data, "meta context request") {
            Ok(r) => r,
            Err(e) => {
                self.option_error(option, rep::ERR_INVALID, &e.to_string());
                return;
            }
        };
        let Some(i) = self.find_export(&req.export) else {
            self.option_error(option, rep::ERR_UNKNOWN, "no such export");
            return;
        };
        let offered = self.cfg.exports[i].base_allocation;
        let matches = |q: &str| {
            if set { q == BASE_ALLOCATION } else { q == BASE_ALLOCATION || q == "base:" }
        };
        let chosen = offered && ((!set && req.queries.is_empty()) || req.queries.iter().any(|q| matches(q)));
        if set {
            self.base_allocation = chosen;
            self.meta_for = chosen.then(|| self.cfg.exports[i].name.clone());
        }
        if chosen {
            let r = MetaContextReply {
                id: if set { BASE_ALLOCATION_ID } else { 0 },
                name: BASE_ALLOCATION.into(),
            };
            let d = r.to_bytes();
            self.option_reply(option, rep::META_CONTEXT, &d);
        }
        self.option_reply(option, rep::ACK, &[]);
    }

    fn info_go(&mut self, option: u32, data: &[u8]) {
        let req = match InfoRequest::decode_exact(data, "NBD_OPT_INFO/GO request") {
            Ok(r) => r,
            Err(e) => {
                self.option_error(option, rep::ERR_INVALID, &e.to_string());
                return;
            }
        };
        let Some(i) = self.find_export(&req.name) else {
            self.option_error(option, rep::ERR_UNKNOWN, "no such export");
            return;
        };
        let e = self.cfg.exports[i].clone();
        let infos = [
            Some(Info::Export { size: e.size, flags: e.flags | tflags::HAS_FLAGS }),
            req.requests.contains(&info::NAME).then(|| Info::Name(e.name.clone())),
            (req.requests.contains(&info::DESCRIPTION) && !e.description.is_empty())
                .then(|| Info::Description(e.description.clone())),
            Some(Info::BlockSize {
                minimum: e.block_sizes.minimum,
                preferred: e.block_sizes.preferred,
                maximum: e.block_sizes.maximum,
            }),
        ];
        for i in infos.into_iter().flatten() {
            let d = i.to_bytes();
            self.option_reply(option, rep::INFO, &d);
        }
        self.option_reply(option, rep::ACK, &[]);
        if option == opt::GO {
            self.enter_transmission(i);
        }
    }

    fn enter_transmission(&mut self, export: usize) {
        let name = &self.cfg.exports[export].name;
        if self.meta_for.as_deref() != Some(name.as_str()) {
            self.base_allocation = false;
        }
        self.phase = Phase::Transmission { export };
        self.wanted = REQUEST_HEADER_LEN;
        self.events.push_back(ServerEvent::Selected {
            export,
            structured_replies: self.structured,
            base_allocation: self.base_allocation,
        });
    }

    fn on_request(&mut self, buf: &mut BytesMut, export: usize) -> Result<bool, ProtocolError> {
        if buf.len() < REQUEST_HEADER_LEN {
            self.wanted = REQUEST_HEADER_LEN;
            return Ok(false);
        }
        let hdr = RequestHeader::decode(&mut Reader::new(&buf[..REQUEST_HEADER_LEN], "request"))?;
        let e = &self.cfg.exports[export];
        let payload = if hdr.command == Command::Write { hdr.length as usize } else { 0 };
        let hard_max = e.block_sizes.maximum.max(DEFAULT_MAX_PAYLOAD);
        if payload > hard_max as usize {
            return Err(ProtocolError::TooLong {
                what: "NBD_CMD_WRITE payload",
                len: payload as u64,
                max: hard_max.into(),
            });
        }
        let total = REQUEST_HEADER_LEN + payload;
        if buf.len() < total {
            self.wanted = total;
            return Ok(false);
        }
        self.wanted = REQUEST_HEADER_LEN;
        buf.advance(REQUEST_HEADER_LEN);
        let data = buf.split_to(payload).freeze();
        if hdr.command == Command::Disc {
            self.phase = Phase::Closed;
            self.events.push_back(ServerEvent::Close("client sent NBD_CMD_DISC"));
            return Ok(false);
        }
        match self.validate(&hdr, export) {
            Ok(()) => self.events.push_back(ServerEvent::Request(ServerRequest {
                cookie: hdr.cookie,
                command: hdr.command,
                flags: hdr.flags,
                offset: hdr.offset,
                length: hdr.length,
                data,
            })),
            Err((err, msg)) => self.reply_error(hdr.cookie, err, msg),
        }
        Ok(true)
    }

    /// Checks a request against the export (spec "Request types", "Error values").
    fn validate(&self, h: &RequestHeader, export: usize) -> Result<(), (NbdError, &'static str)> {
        let e = &self.cfg.exports[export];
        let ro = e.flags & tflags::READ_ONLY != 0;
        let allowed = match h.command {
            Command::Read => {
                if self.structured {
                    cflags::DF
                } else {
                    0
                }
            }
            Command::Write => cflags::FUA,
            Command::Flush => cflags::FUA,
            Command::Trim => cflags::FUA,
            Command::WriteZeroes => cflags::FUA | cflags::NO_HOLE,
            Command::BlockStatus => cflags::REQ_ONE,
            _ => return Err((NbdError::Inval, "command not supported")),
        };
        if h.flags & !allowed != 0 {
            return Err((NbdError::Inval, "unsupported command flags"));
        }
        if h.flags & cflags::FUA != 0 && e.flags & tflags::SEND_FUA == 0 {
            return Err((NbdError::Inval, "FUA not supported"));
        }
        let needs = |flag: u16, what| if e.flags & flag != 0 { Ok(()) } else { Err((NbdError::Inval, what)) };
        match h.command {
            Command::Flush => return needs(tflags::SEND_FLUSH, "flush not supported"),
            Command::Trim => needs(tflags::SEND_TRIM, "trim not supported")?,
            Command::WriteZeroes => needs(tflags::SEND_WRITE_ZEROES, "write zeroes not supported")?,
            Command::BlockStatus if !self.base_allocation => {
                return Err((NbdError::Inval, "no metadata context negotiated"));
            }
            _ => {}
        }
        if ro && matches!(h.command, Command::Write | Command::Trim | Command::WriteZeroes) {
            return Err((NbdError::Perm, "export is read-only"));
        }
        if h.length == 0 {
            return Err((NbdError::Inval, "zero-length request"));
        }
        let end = h.offset.checked_add(h.length.into());
        if end.is_none_or(|end| end > e.size) {
            return Err(match h.command {
                Command::Write | Command::WriteZeroes => (NbdError::NoSpc, "request ends beyond the export"),
                _ => (NbdError::Inval, "request ends beyond the export"),
            });
        }
        let min = u64::from(e.block_sizes.minimum.max(1));
        let tail = end == Some(e.size);
        if !h.offset.is_multiple_of(min) || (!u64::from(h.length).is_multiple_of(min) && !tail) {
            return Err((NbdError::Inval, "request not aligned to the minimum block size"));
        }
        if matches!(h.command, Command::Read | Command::Write) && h.length > e.block_sizes.maximum {
            return Err((NbdError::Inval, "request above the maximum payload"));
        }
        Ok(())
    }
}

fn truncate(s: &str) -> &str {
    crate::wire::truncate_str(s, MAX_STRING)
}
