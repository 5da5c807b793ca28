//! The client side: handshake (spec "Fixed newstyle negotiation", "Option
//! haggling") and transmission (spec "Transmission phase").
//!
//! Bytes from the server go in through [`Client::handle_input`] (copying) or
//! [`Client::handle_input_buf`] (zero-copy: complete frames are split off the
//! caller's buffer and read data is handed out as [`Bytes`] slices of it).
//! Bytes for the server come out of [`Client::poll_transmit`] as segments to
//! write in order (a WRITE's payload is its own segment, never copied), and
//! what happened comes out of [`Client::poll_event`].

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::codec::{Codec, DecodeError, Reader};
use crate::consts::*;
use crate::error::{ClientError, ProtocolError, RequestError};
use crate::wire::*;

/// What the client handshake is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    /// Enter transmission with NBD_OPT_GO (falling back to NBD_OPT_EXPORT_NAME).
    Go,
    /// Query the export with NBD_OPT_INFO, then NBD_OPT_ABORT.
    Info,
    /// List exports with NBD_OPT_LIST, then NBD_OPT_ABORT.
    List,
}

/// Client configuration.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Export name ("" is the server's default export).
    pub export_name: String,
    /// Ask for structured replies (NBD_OPT_STRUCTURED_REPLY).
    pub structured_replies: bool,
    /// Ask for the `base:allocation` metadata context (needs structured replies).
    pub block_status: bool,
    /// The largest read/write payload this side will use, whatever the
    /// server allows (the spec's never-a-DoS size by default, 32 MiB).
    pub max_payload: u32,
    /// What the handshake is for.
    pub goal: Goal,
    /// Send NBD_OPT_STRUCTURED_REPLY, NBD_OPT_SET_META_CONTEXT and
    /// NBD_OPT_GO/INFO back to back and read their replies in order, instead
    /// of waiting a round trip for each (2 fewer round trips per connection
    /// on a long-fat network). Servers read options one at a time, so this
    /// is safe; turn it off for a server that is not.
    pub pipeline_options: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            export_name: String::new(),
            structured_replies: true,
            block_status: true,
            max_payload: DEFAULT_MAX_PAYLOAD,
            goal: Goal::Go,
            pipeline_options: true,
        }
    }
}

/// Block size constraints (NBD_INFO_BLOCK_SIZE or the spec's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSizes {
    /// Minimum block size (alignment of every request).
    pub minimum: u32,
    /// Preferred block size.
    pub preferred: u32,
    /// Maximum payload of a read or write, after the client's own cap.
    pub maximum: u32,
}

/// What the handshake agreed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The export name used.
    pub export_name: String,
    /// Export size in bytes.
    pub size: u64,
    /// Transmission flags (`tflags::*`).
    pub flags: u16,
    /// Block size constraints.
    pub block_sizes: BlockSizes,
    /// Whether the server sent NBD_INFO_BLOCK_SIZE.
    pub block_sizes_from_server: bool,
    /// Structured replies are in use.
    pub structured_replies: bool,
    /// Context id of `base:allocation`, if negotiated.
    pub base_allocation: Option<u32>,
    /// The server did not support NBD_OPT_GO and NBD_OPT_EXPORT_NAME was used.
    pub used_export_name: bool,
    /// The server spoke oldstyle negotiation.
    pub oldstyle: bool,
    /// Export description, if the server sent one.
    pub description: Option<String>,
}

impl Negotiated {
    /// Whether transmission flag `flag` is set.
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }

    /// The export is read-only.
    pub fn read_only(&self) -> bool {
        self.has(tflags::READ_ONLY)
    }
}

/// A request to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// NBD_CMD_READ.
    Read {
        /// Offset.
        offset: u64,
        /// Length.
        length: u32,
    },
    /// NBD_CMD_WRITE.
    Write {
        /// Offset.
        offset: u64,
        /// Payload (sent as its own transmit segment).
        data: Bytes,
        /// NBD_CMD_FLAG_FUA.
        fua: bool,
    },
    /// NBD_CMD_FLUSH.
    Flush,
    /// NBD_CMD_TRIM.
    Trim {
        /// Offset.
        offset: u64,
        /// Length.
        length: u32,
        /// NBD_CMD_FLAG_FUA.
        fua: bool,
    },
    /// NBD_CMD_WRITE_ZEROES.
    WriteZeroes {
        /// Offset.
        offset: u64,
        /// Length.
        length: u32,
        /// NBD_CMD_FLAG_NO_HOLE: the server must not punch a hole.
        no_hole: bool,
        /// NBD_CMD_FLAG_FUA.
        fua: bool,
    },
    /// NBD_CMD_BLOCK_STATUS for `base:allocation`.
    BlockStatus {
        /// Offset.
        offset: u64,
        /// Length.
        length: u32,
        /// NBD_CMD_FLAG_REQ_ONE.
        req_one: bool,
    },
}

/// An error the server returned for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// The error number.
    pub error: NbdError,
    /// The server's message (structured replies only; may be empty).
    pub message: String,
    /// Where the error occurred (NBD_REPLY_TYPE_ERROR_OFFSET).
    pub offset: Option<u64>,
}

/// The successful result of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyData {
    /// A command without reply data.
    None,
    /// A read's data, exactly the requested length (holes zero-filled).
    Read(Bytes),
    /// Block status descriptors for `base:allocation`, starting at the request offset.
    BlockStatus(Vec<BlockDescriptor>),
}

/// A complete reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The request's cookie.
    pub cookie: u64,
    /// The request's command.
    pub command: Command,
    /// The request's offset.
    pub offset: u64,
    /// The request's length.
    pub length: u32,
    /// The outcome.
    pub result: Result<ReplyData, ServerError>,
}

/// What the client reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake finished and transmission began ([`Goal::Go`]).
    Ready(Negotiated),
    /// The export's information ([`Goal::Info`]); the client sent NBD_OPT_ABORT.
    Info(Negotiated),
    /// The server's exports ([`Goal::List`]); the client sent NBD_OPT_ABORT.
    Exports(Vec<ServerReply>),
    /// A request completed.
    Reply(Reply),
}

/// Limits the number of exports collected from NBD_OPT_LIST.
const MAX_LISTED_EXPORTS: usize = 10_000;

/// Option-phase sub-states, one per option in flight (spec "Option haggling").
#[derive(Debug)]
enum OptState {
    /// NBD_OPT_STRUCTURED_REPLY sent.
    StructuredReply,
    /// NBD_OPT_SET_META_CONTEXT sent.
    SetMetaContext,
    /// NBD_OPT_GO or NBD_OPT_INFO sent; collecting NBD_REP_INFO.
    GoInfo { option: u32 },
    /// NBD_OPT_LIST sent; collecting NBD_REP_SERVER.
    List { exports: Vec<ServerReply> },
    /// NBD_OPT_EXPORT_NAME sent; waiting for size and flags (not an option reply).
    ExportName,
}

/// The connection phases (spec "Handshake" -> "Option haggling" -> "Transmission").
#[derive(Debug)]
enum Phase {
    /// Waiting for the server's greeting (spec "Newstyle negotiation").
    Greeting,
    /// Haggling options.
    Options(OptState),
    /// Transmission phase (spec "Transmission").
    Transmission(Transmission),
    /// NBD_OPT_ABORT or NBD_CMD_DISC sent, or the handshake ended without transmission.
    Closed,
    /// A fatal error happened; the error is repeated on further input.
    Failed(ClientError),
}

/// Handshake results gathered so far.
#[derive(Debug, Default)]
struct Gathered {
    no_zeroes: bool,
    structured: bool,
    base_allocation: Option<u32>,
    export: Option<(u64, u16)>,
    block_size: Option<(u32, u32, u32)>,
    description: Option<String>,
    used_export_name: bool,
    /// Options were sent back to back; replies only advance the state.
    pipelined: bool,
    /// NBD_OPT_SET_META_CONTEXT was sent in the pipeline.
    meta_sent: bool,
}

/// The NBD client state machine.
#[derive(Debug)]
pub struct Client {
    cfg: ClientConfig,
    phase: Phase,
    gathered: Gathered,
    inbuf: BytesMut,
    out_hdr: BytesMut,
    out: VecDeque<Bytes>,
    events: VecDeque<Event>,
    wanted: usize,
}

impl Client {
    /// A client that waits for the server's greeting.
    pub fn new(cfg: ClientConfig) -> Self {
        Client {
            cfg,
            phase: Phase::Greeting,
            gathered: Gathered::default(),
            inbuf: BytesMut::new(),
            out_hdr: BytesMut::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            wanted: Greeting::NEWSTYLE_LEN,
        }
    }

    /// Feeds bytes received from the server (copied into an internal buffer).
    ///
    /// # Errors
    /// The first fatal error; the same error is returned for any later input.
    pub fn handle_input(&mut self, data: &[u8]) -> Result<(), ClientError> {
        let mut buf = std::mem::take(&mut self.inbuf);
        buf.extend_from_slice(data);
        let r = self.handle_input_buf(&mut buf);
        self.inbuf = buf;
        r
    }

    /// Consumes every complete frame at the front of `buf`, leaving a partial
    /// frame in place for the next call. Read data is split off `buf` without
    /// copying. Use [`Client::bytes_wanted`] to size the next read.
    ///
    /// # Errors
    /// The first fatal error; the same error is returned for any later input.
    pub fn handle_input_buf(&mut self, buf: &mut BytesMut) -> Result<(), ClientError> {
        if let Phase::Failed(e) = &self.phase {
            return Err(e.clone());
        }
        loop {
            match self.step(buf) {
                Ok(true) => continue,
                Ok(false) => return Ok(()),
                Err(e) => {
                    self.phase = Phase::Failed(e.clone());
                    return Err(e);
                }
            }
        }
    }

    /// How many bytes the frame being received needs in total (at least the
    /// bytes already buffered plus one), to size buffer reservations.
    pub fn bytes_wanted(&self) -> usize {
        self.wanted
    }

    /// The next segment of bytes to send to the server.
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        if self.out.is_empty() && !self.out_hdr.is_empty() {
            return Some(self.out_hdr.split().freeze());
        }
        let seg = self.out.pop_front();
        if seg.is_some() && self.out.is_empty() && !self.out_hdr.is_empty() {
            self.out.push_back(self.out_hdr.split().freeze());
        }
        seg
    }

    /// Whether [`Client::poll_transmit`] has something.
    pub fn has_transmit(&self) -> bool {
        !self.out.is_empty() || !self.out_hdr.is_empty()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The handshake result, once in transmission.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        match &self.phase {
            Phase::Transmission(t) => Some(&t.neg),
            _ => None,
        }
    }

    /// Requests whose reply has not completed.
    pub fn in_flight(&self) -> usize {
        match &self.phase {
            Phase::Transmission(t) => t.in_flight.len(),
            _ => 0,
        }
    }

    /// Whether the connection is usable for requests.
    pub fn is_transmission(&self) -> bool {
        matches!(self.phase, Phase::Transmission(_))
    }

    /// The fatal error, if one happened.
    pub fn error(&self) -> Option<&ClientError> {
        match &self.phase {
            Phase::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// Queues a request and returns its cookie.
    ///
    /// # Errors
    /// [`RequestError`] if the request is refused locally (not connected,
    /// read-only, unsupported, out of range, above the maximum payload,
    /// misaligned); nothing is sent then.
    pub fn send_request(&mut self, req: Request) -> Result<u64, RequestError> {
        let t = match &mut self.phase {
            Phase::Transmission(t) => t,
            Phase::Failed(_) => return Err(RequestError::NotReady("connection failed")),
            Phase::Closed => return Err(RequestError::NotReady("connection closed")),
            _ => return Err(RequestError::NotReady("handshake not finished")),
        };
        let (hdr, data) = t.prepare(req)?;
        hdr.encode(&mut self.out_hdr);
        if let Some(data) = data {
            if !self.out_hdr.is_empty() {
                self.out.push_back(self.out_hdr.split().freeze());
            }
            self.out.push_back(data);
        }
        Ok(hdr.cookie)
    }

    /// Queues NBD_CMD_DISC; no request may follow. Replies to requests in
    /// flight are still processed (send this once they completed).
    ///
    /// # Errors
    /// [`RequestError::NotReady`] outside transmission.
    pub fn disconnect(&mut self) -> Result<(), RequestError> {
        match &mut self.phase {
            Phase::Transmission(t) => {
                if t.closing {
                    return Ok(());
                }
                t.closing = true;
                let cookie = t.next_cookie;
                t.next_cookie += 1;
                RequestHeader { flags: 0, command: Command::Disc, cookie, offset: 0, length: 0 }
                    .encode(&mut self.out_hdr);
                Ok(())
            }
            _ => Err(RequestError::NotReady("not in transmission")),
        }
    }

    /// Cookies, offsets and commands of every request still in flight (for
    /// failing them when the connection dies).
    pub fn pending(&self) -> Vec<(u64, Command, u64)> {
        match &self.phase {
            Phase::Transmission(t) => t.in_flight.iter().map(|(c, f)| (*c, f.command, f.offset)).collect(),
            _ => Vec::new(),
        }
    }

    fn queue_option(&mut self, option: u32, data: &[u8]) {
        OptionHeader { option, length: data.len() as u32 }.encode(&mut self.out_hdr);
        self.out_hdr.put_slice(data);
    }

    /// One step: consumes one frame if complete. Ok(false) when more input is needed.
    fn step(&mut self, buf: &mut BytesMut) -> Result<bool, ClientError> {
        match &mut self.phase {
            Phase::Greeting => self.on_greeting(buf),
            Phase::Options(OptState::ExportName) => self.on_export_name_reply(buf),
            Phase::Options(_) => self.on_option_reply(buf),
            Phase::Transmission(t) => {
                let r = t.step(buf, &mut self.events);
                self.wanted = t.wanted;
                Ok(r?)
            }
            Phase::Closed => {
                // After NBD_OPT_ABORT the server may ACK; anything else is ignored.
                buf.clear();
                Ok(false)
            }
            Phase::Failed(e) => Err(e.clone()),
        }
    }

    fn on_greeting(&mut self, buf: &mut BytesMut) -> Result<bool, ClientError> {
        if buf.len() < 16 {
            self.wanted = Greeting::NEWSTYLE_LEN;
            return Ok(false);
        }
        let need = if buf[8..16] == OLDSTYLE_MAGIC.to_be_bytes() {
            Greeting::OLDSTYLE_LEN
        } else {
            Greeting::NEWSTYLE_LEN
        };
        if buf.len() < need {
            self.wanted = need;
            return Ok(false);
        }
        let frame = buf.split_to(need);
        let g = Greeting::decode_exact(&frame, "server greeting").map_err(ProtocolError::from)?;
        match g {
            Greeting::Oldstyle { size, flags } => {
                if self.cfg.goal != Goal::Go {
                    return Err(ClientError::Unsupported(
                        "oldstyle server cannot list or describe exports".into(),
                    ));
                }
                self.gathered.export = Some((size, flags as u16));
                self.finish_go(true)?;
            }
            Greeting::Newstyle { flags } => {
                let fixed = flags & FLAG_FIXED_NEWSTYLE != 0;
                self.gathered.no_zeroes = flags & FLAG_NO_ZEROES != 0;
                let mut cflags = 0;
                if fixed {
                    cflags |= FLAG_C_FIXED_NEWSTYLE;
                }
                if self.gathered.no_zeroes {
                    cflags |= FLAG_C_NO_ZEROES;
                }
                ClientFlags(cflags).encode(&mut self.out_hdr);
                if !fixed {
                    // Plain newstyle: only NBD_OPT_EXPORT_NAME is safe to send.
                    if self.cfg.goal != Goal::Go {
                        return Err(ClientError::Unsupported("server does not speak fixed newstyle".into()));
                    }
                    self.send_export_name();
                } else {
                    self.start_options();
                }
            }
        }
        Ok(true)
    }

    fn start_options(&mut self) {
        match self.cfg.goal {
            Goal::List => {
                self.queue_option(opt::LIST, &[]);
                self.phase = Phase::Options(OptState::List { exports: Vec::new() });
            }
            Goal::Go | Goal::Info if self.cfg.pipeline_options => {
                self.gathered.pipelined = true;
                let mut first = None;
                if self.cfg.structured_replies {
                    self.queue_option(opt::STRUCTURED_REPLY, &[]);
                    first = Some(OptState::StructuredReply);
                    if self.cfg.block_status {
                        self.queue_meta_context();
                        self.gathered.meta_sent = true;
                    }
                }
                let option = self.queue_go_info();
                self.phase = Phase::Options(first.unwrap_or(OptState::GoInfo { option }));
            }
            Goal::Go | Goal::Info => {
                if self.cfg.structured_replies {
                    self.queue_option(opt::STRUCTURED_REPLY, &[]);
                    self.phase = Phase::Options(OptState::StructuredReply);
                } else {
                    self.after_structured();
                }
            }
        }
    }

    fn queue_meta_context(&mut self) {
        let req = MetaContextRequest {
            export: self.cfg.export_name.clone(),
            queries: vec![BASE_ALLOCATION.to_string()],
        };
        let data = req.to_bytes();
        self.queue_option(opt::SET_META_CONTEXT, &data);
    }

    fn queue_go_info(&mut self) -> u32 {
        let option = if self.cfg.goal == Goal::Info { opt::INFO } else { opt::GO };
        let mut requests = vec![info::BLOCK_SIZE];
        if self.cfg.goal == Goal::Info {
            requests.push(info::DESCRIPTION);
        }
        let data = InfoRequest { name: self.cfg.export_name.clone(), requests }.to_bytes();
        self.queue_option(option, &data);
        option
    }

    /// After the reply to NBD_OPT_STRUCTURED_REPLY.
    fn after_structured(&mut self) {
        if self.gathered.pipelined {
            self.phase = Phase::Options(if self.gathered.meta_sent {
                OptState::SetMetaContext
            } else {
                OptState::GoInfo { option: self.go_option() }
            });
        } else if self.gathered.structured && self.cfg.block_status {
            self.queue_meta_context();
            self.phase = Phase::Options(OptState::SetMetaContext);
        } else {
            self.send_go_info();
        }
    }

    fn go_option(&self) -> u32 {
        if self.cfg.goal == Goal::Info { opt::INFO } else { opt::GO }
    }

    /// After the reply to NBD_OPT_SET_META_CONTEXT (or instead of it).
    fn send_go_info(&mut self) {
        let option = if self.gathered.pipelined { self.go_option() } else { self.queue_go_info() };
        self.phase = Phase::Options(OptState::GoInfo { option });
    }

    fn send_export_name(&mut self) {
        let name = self.cfg.export_name.clone();
        self.queue_option(opt::EXPORT_NAME, name.as_bytes());
        self.gathered.used_export_name = true;
        self.phase = Phase::Options(OptState::ExportName);
    }

    fn on_export_name_reply(&mut self, buf: &mut BytesMut) -> Result<bool, ClientError> {
        let need = ExportNameReply::LEN + if self.gathered.no_zeroes { 0 } else { 124 };
        if buf.len() < need {
            self.wanted = need;
            return Ok(false);
        }
        let frame = buf.split_to(need);
        let r = ExportNameReply::decode(&mut Reader::new(&frame, "NBD_OPT_EXPORT_NAME reply"))
            .map_err(ProtocolError::from)?;
        self.gathered.export = Some((r.size, r.flags));
        self.finish_go(false)?;
        Ok(true)
    }

    fn on_option_reply(&mut self, buf: &mut BytesMut) -> Result<bool, ClientError> {
        if buf.len() < OptionReplyHeader::LEN {
            self.wanted = OptionReplyHeader::LEN;
            return Ok(false);
        }
        let hdr = OptionReplyHeader::decode(&mut Reader::new(&buf[..OptionReplyHeader::LEN], "option reply"))
            .map_err(ProtocolError::from)?;
        let expected = match &self.phase {
            Phase::Options(OptState::StructuredReply) => opt::STRUCTURED_REPLY,
            Phase::Options(OptState::SetMetaContext) => opt::SET_META_CONTEXT,
            Phase::Options(OptState::GoInfo { option }) => *option,
            Phase::Options(OptState::List { .. }) => opt::LIST,
            _ => return Err(ProtocolError::Unexpected("option reply outside option haggling").into()),
        };
        if hdr.option != expected {
            return Err(ProtocolError::UnexpectedOptionReply { expected, got: hdr.option }.into());
        }
        if hdr.length > MAX_OPTION_PAYLOAD {
            return Err(ProtocolError::TooLong {
                what: "option reply",
                len: hdr.length.into(),
                max: MAX_OPTION_PAYLOAD.into(),
            }
            .into());
        }
        let total = OptionReplyHeader::LEN + hdr.length as usize;
        if buf.len() < total {
            self.wanted = total;
            return Ok(false);
        }
        let mut frame = buf.split_to(total);
        frame.advance(OptionReplyHeader::LEN);
        let data = frame.freeze();
        self.wanted = OptionReplyHeader::LEN;
        let decode = |what| Reader::new(&data, what);
        let is_err = hdr.reply & rep::ERR_BIT != 0;
        let err_text = || ErrorText::decode(&mut decode("option error")).map(|t| t.0).unwrap_or_default();
        let bad = ProtocolError::UnexpectedReplyType { option: hdr.option, reply: hdr.reply };

        let phase = std::mem::replace(&mut self.phase, Phase::Closed);
        let Phase::Options(state) = phase else { unreachable!("checked above") };
        match state {
            OptState::StructuredReply => {
                if hdr.reply == rep::ACK {
                    self.gathered.structured = true;
                } else if !is_err {
                    return Err(bad.into());
                }
                self.after_structured();
            }
            OptState::SetMetaContext => match hdr.reply {
                rep::META_CONTEXT => {
                    let m = MetaContextReply::decode_exact(&data, "NBD_REP_META_CONTEXT")
                        .map_err(ProtocolError::from)?;
                    if m.name == BASE_ALLOCATION {
                        self.gathered.base_allocation = Some(m.id);
                    }
                    self.phase = Phase::Options(OptState::SetMetaContext);
                }
                rep::ACK => self.send_go_info(),
                r if r & rep::ERR_BIT != 0 => {
                    self.gathered.base_allocation = None;
                    self.send_go_info();
                }
                _ => return Err(bad.into()),
            },
            OptState::GoInfo { option } => match hdr.reply {
                rep::INFO => {
                    let i = Info::decode_exact(&data, "NBD_REP_INFO").map_err(ProtocolError::from)?;
                    match i {
                        Info::Export { size, flags } => self.gathered.export = Some((size, flags)),
                        Info::BlockSize { minimum, preferred, maximum } => {
                            self.gathered.block_size = Some((minimum, preferred, maximum))
                        }
                        Info::Description(d) => self.gathered.description = Some(d),
                        Info::Name(_) | Info::Unknown(_) => {}
                    }
                    self.phase = Phase::Options(OptState::GoInfo { option });
                }
                rep::ACK => {
                    if self.gathered.export.is_none() {
                        return Err(ProtocolError::MissingExportInfo.into());
                    }
                    if option == opt::GO {
                        self.finish_go(false)?;
                    } else {
                        let neg = self.build_negotiated(false)?;
                        self.events.push_back(Event::Info(neg));
                        self.queue_option(opt::ABORT, &[]);
                        self.phase = Phase::Closed;
                    }
                }
                rep::ERR_UNSUP if option == opt::GO => {
                    // The server predates NBD_OPT_GO: fall back (spec "NBD_OPT_GO").
                    self.send_export_name();
                }
                r if r & rep::ERR_BIT != 0 => {
                    return Err(ClientError::Refused {
                        option: if option == opt::GO { "NBD_OPT_GO" } else { "NBD_OPT_INFO" },
                        reply: reply_name(r),
                        message: err_text(),
                    });
                }
                _ => return Err(bad.into()),
            },
            OptState::List { mut exports } => match hdr.reply {
                rep::SERVER => {
                    let s =
                        ServerReply::decode_exact(&data, "NBD_REP_SERVER").map_err(ProtocolError::from)?;
                    if exports.len() >= MAX_LISTED_EXPORTS {
                        return Err(ProtocolError::TooLong {
                            what: "export list",
                            len: exports.len() as u64 + 1,
                            max: MAX_LISTED_EXPORTS as u64,
                        }
                        .into());
                    }
                    exports.push(s);
                    self.phase = Phase::Options(OptState::List { exports });
                }
                rep::ACK => {
                    self.events.push_back(Event::Exports(exports));
                    self.queue_option(opt::ABORT, &[]);
                    self.phase = Phase::Closed;
                }
                r if r & rep::ERR_BIT != 0 => {
                    return Err(ClientError::Refused {
                        option: "NBD_OPT_LIST",
                        reply: reply_name(r),
                        message: err_text(),
                    });
                }
                _ => return Err(bad.into()),
            },
            OptState::ExportName => unreachable!("handled by on_export_name_reply"),
        }
        Ok(true)
    }

    fn build_negotiated(&self, oldstyle: bool) -> Result<Negotiated, ClientError> {
        let (size, flags) = self.gathered.export.ok_or(ProtocolError::MissingExportInfo)?;
        let from_server = self.gathered.block_size.is_some();
        let (minimum, preferred, maximum) =
            self.gathered.block_size.unwrap_or((1, 4096, DEFAULT_MAX_PAYLOAD));
        let valid = minimum.is_power_of_two()
            && minimum <= 65536
            && preferred.is_power_of_two()
            && preferred >= minimum
            && maximum >= minimum;
        if !valid {
            return Err(ProtocolError::BadBlockSizes { minimum, preferred, maximum }.into());
        }
        let cap = self.cfg.max_payload.max(minimum);
        let mut max = maximum.min(cap);
        max -= max % minimum;
        let flags = if flags & tflags::HAS_FLAGS != 0 { flags } else { 0 };
        Ok(Negotiated {
            export_name: self.cfg.export_name.clone(),
            size,
            flags,
            block_sizes: BlockSizes { minimum, preferred: preferred.min(max.max(minimum)), maximum: max },
            block_sizes_from_server: from_server,
            structured_replies: self.gathered.structured,
            base_allocation: if self.gathered.structured { self.gathered.base_allocation } else { None },
            used_export_name: self.gathered.used_export_name,
            oldstyle,
            description: self.gathered.description.clone(),
        })
    }

    fn finish_go(&mut self, oldstyle: bool) -> Result<(), ClientError> {
        let neg = self.build_negotiated(oldstyle)?;
        self.events.push_back(Event::Ready(neg.clone()));
        self.wanted = SIMPLE_REPLY_HEADER_LEN;
        self.phase = Phase::Transmission(Transmission::new(neg));
        Ok(())
    }
}

fn reply_name(r: u32) -> String {
    match r {
        rep::ERR_UNSUP => "NBD_REP_ERR_UNSUP".into(),
        rep::ERR_POLICY => "NBD_REP_ERR_POLICY".into(),
        rep::ERR_INVALID => "NBD_REP_ERR_INVALID".into(),
        rep::ERR_PLATFORM => "NBD_REP_ERR_PLATFORM".into(),
        rep::ERR_TLS_REQD => "NBD_REP_ERR_TLS_REQD (the server requires TLS, which is not supported)".into(),
        rep::ERR_UNKNOWN => "NBD_REP_ERR_UNKNOWN (no such export)".into(),
        rep::ERR_SHUTDOWN => "NBD_REP_ERR_SHUTDOWN".into(),
        rep::ERR_BLOCK_SIZE_REQD => "NBD_REP_ERR_BLOCK_SIZE_REQD".into(),
        rep::ERR_TOO_BIG => "NBD_REP_ERR_TOO_BIG".into(),
        r => format!("error reply {r:#x}"),
    }
}

/// Per-request reply state.
#[derive(Debug)]
struct InFlight {
    command: Command,
    offset: u64,
    length: u32,
    req_one: bool,
    /// Structured chunks were received.
    chunked: bool,
    error: Option<ServerError>,
    /// Read: data chunks (offset relative to the request) and covered ranges.
    data: Vec<(u64, Bytes)>,
    ranges: BTreeMap<u64, u64>,
    covered: u64,
    /// Block status: the descriptors of the negotiated context.
    status: Option<Vec<BlockDescriptor>>,
}

/// The transmission phase (spec "Transmission"): request encoding and
/// reply validation.
#[derive(Debug)]
struct Transmission {
    neg: Negotiated,
    next_cookie: u64,
    in_flight: HashMap<u64, InFlight>,
    closing: bool,
    wanted: usize,
}

impl Transmission {
    fn new(neg: Negotiated) -> Self {
        Transmission { neg, next_cookie: 1, in_flight: HashMap::new(), closing: false, wanted: 16 }
    }

    fn check_range(&self, offset: u64, length: u64) -> Result<(), RequestError> {
        if length == 0 {
            return Err(RequestError::Empty);
        }
        let end = offset.checked_add(length);
        if end.is_none_or(|e| e > self.neg.size) {
            return Err(RequestError::OutOfRange { offset, length, size: self.neg.size });
        }
        let min = u64::from(self.neg.block_sizes.minimum);
        if !offset.is_multiple_of(min) || !length.is_multiple_of(min) {
            // The last partial block of an export whose size is not a multiple is allowed.
            if !(offset.is_multiple_of(min) && offset + length == self.neg.size) {
                return Err(RequestError::Misaligned {
                    offset,
                    length,
                    minimum: self.neg.block_sizes.minimum,
                });
            }
        }
        Ok(())
    }

    fn check_payload(&self, length: u64) -> Result<(), RequestError> {
        if length > u64::from(self.neg.block_sizes.maximum) {
            return Err(RequestError::TooLarge { length, max: self.neg.block_sizes.maximum });
        }
        Ok(())
    }

    fn writable(&self) -> Result<(), RequestError> {
        if self.neg.read_only() { Err(RequestError::ReadOnly) } else { Ok(()) }
    }

    fn fua_flag(&self, fua: bool) -> Result<u16, RequestError> {
        if !fua {
            return Ok(0);
        }
        if !self.neg.has(tflags::SEND_FUA) {
            return Err(RequestError::Unsupported("NBD_CMD_FLAG_FUA"));
        }
        Ok(cflags::FUA)
    }

    fn prepare(&mut self, req: Request) -> Result<(RequestHeader, Option<Bytes>), RequestError> {
        if self.closing {
            return Err(RequestError::NotReady("disconnecting"));
        }
        let (command, flags, offset, length, data, req_one) = match req {
            Request::Read { offset, length } => {
                self.check_range(offset, length.into())?;
                self.check_payload(length.into())?;
                (Command::Read, 0, offset, length, None, false)
            }
            Request::Write { offset, data, fua } => {
                self.writable()?;
                let length = data.len() as u64;
                self.check_payload(length)?;
                self.check_range(offset, length)?;
                let flags = self.fua_flag(fua)?;
                (Command::Write, flags, offset, length as u32, Some(data), false)
            }
            Request::Flush => {
                if !self.neg.has(tflags::SEND_FLUSH) {
                    return Err(RequestError::Unsupported("NBD_CMD_FLUSH"));
                }
                (Command::Flush, 0, 0, 0, None, false)
            }
            Request::Trim { offset, length, fua } => {
                self.writable()?;
                if !self.neg.has(tflags::SEND_TRIM) {
                    return Err(RequestError::Unsupported("NBD_CMD_TRIM"));
                }
                self.check_range(offset, length.into())?;
                (Command::Trim, self.fua_flag(fua)?, offset, length, None, false)
            }
            Request::WriteZeroes { offset, length, no_hole, fua } => {
                self.writable()?;
                if !self.neg.has(tflags::SEND_WRITE_ZEROES) {
                    return Err(RequestError::Unsupported("NBD_CMD_WRITE_ZEROES"));
                }
                self.check_range(offset, length.into())?;
                let flags = self.fua_flag(fua)? | if no_hole { cflags::NO_HOLE } else { 0 };
                (Command::WriteZeroes, flags, offset, length, None, false)
            }
            Request::BlockStatus { offset, length, req_one } => {
                if self.neg.base_allocation.is_none() {
                    return Err(RequestError::Unsupported(
                        "NBD_CMD_BLOCK_STATUS (base:allocation not negotiated)",
                    ));
                }
                self.check_range(offset, length.into())?;
                let flags = if req_one { cflags::REQ_ONE } else { 0 };
                (Command::BlockStatus, flags, offset, length, None, req_one)
            }
        };
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.in_flight.insert(
            cookie,
            InFlight {
                command,
                offset,
                length,
                req_one,
                chunked: false,
                error: None,
                data: Vec::new(),
                ranges: BTreeMap::new(),
                covered: 0,
                status: None,
            },
        );
        Ok((RequestHeader { flags, command, cookie, offset, length }, data))
    }

    fn unknown(&self, cookie: u64) -> ProtocolError {
        if cookie != 0 && cookie < self.next_cookie {
            ProtocolError::ReplyAfterDone(cookie)
        } else {
            ProtocolError::UnknownCookie(cookie)
        }
    }

    /// Consumes one reply frame if complete.
    fn step(&mut self, buf: &mut BytesMut, events: &mut VecDeque<Event>) -> Result<bool, ProtocolError> {
        if buf.len() < 4 {
            self.wanted = 4;
            return Ok(false);
        }
        let magic = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        match magic {
            SIMPLE_REPLY_MAGIC => self.simple(buf, events),
            STRUCTURED_REPLY_MAGIC => self.structured(buf, events),
            got => Err(DecodeError::BadMagic {
                what: "reply",
                expected: SIMPLE_REPLY_MAGIC.into(),
                got: got.into(),
            }
            .into()),
        }
    }

    fn simple(&mut self, buf: &mut BytesMut, events: &mut VecDeque<Event>) -> Result<bool, ProtocolError> {
        if buf.len() < SIMPLE_REPLY_HEADER_LEN {
            self.wanted = SIMPLE_REPLY_HEADER_LEN;
            return Ok(false);
        }
        let hdr =
            SimpleReplyHeader::decode(&mut Reader::new(&buf[..SIMPLE_REPLY_HEADER_LEN], "simple reply"))?;
        let f = self.in_flight.get(&hdr.cookie).ok_or_else(|| self.unknown(hdr.cookie))?;
        if f.chunked {
            return Err(ProtocolError::SimpleAfterChunks(hdr.cookie));
        }
        if hdr.error == 0 && f.command == Command::BlockStatus {
            return Err(ProtocolError::SimpleNotAllowed(Command::BlockStatus));
        }
        let payload = if hdr.error == 0 && f.command == Command::Read { f.length as usize } else { 0 };
        let total = SIMPLE_REPLY_HEADER_LEN + payload;
        if buf.len() < total {
            self.wanted = total;
            return Ok(false);
        }
        self.wanted = SIMPLE_REPLY_HEADER_LEN;
        buf.advance(SIMPLE_REPLY_HEADER_LEN);
        let f = self.in_flight.remove(&hdr.cookie).expect("looked up above");
        let result = if hdr.error != 0 {
            Err(ServerError { error: NbdError::from_code(hdr.error), message: String::new(), offset: None })
        } else if f.command == Command::Read {
            Ok(ReplyData::Read(buf.split_to(payload).freeze()))
        } else {
            Ok(ReplyData::None)
        };
        events.push_back(Event::Reply(Reply {
            cookie: hdr.cookie,
            command: f.command,
            offset: f.offset,
            length: f.length,
            result,
        }));
        Ok(true)
    }

    fn structured(
        &mut self,
        buf: &mut BytesMut,
        events: &mut VecDeque<Event>,
    ) -> Result<bool, ProtocolError> {
        if !self.neg.structured_replies {
            return Err(ProtocolError::StructuredNotNegotiated);
        }
        if buf.len() < STRUCTURED_REPLY_HEADER_LEN {
            self.wanted = STRUCTURED_REPLY_HEADER_LEN;
            return Ok(false);
        }
        let hdr =
            ChunkHeader::decode(&mut Reader::new(&buf[..STRUCTURED_REPLY_HEADER_LEN], "structured reply"))?;
        let context = self.neg.base_allocation;
        let f = self.in_flight.get(&hdr.cookie).ok_or_else(|| self.unknown(hdr.cookie))?;
        let unexpected = ProtocolError::UnexpectedChunk { command: f.command, kind: hdr.kind };
        let max: u32 = match hdr.kind {
            chunk::NONE => 0,
            chunk::OFFSET_DATA if f.command == Command::Read => 8 + f.length,
            chunk::OFFSET_HOLE if f.command == Command::Read => 12,
            chunk::BLOCK_STATUS if f.command == Command::BlockStatus => MAX_BLOCK_STATUS_CHUNK,
            k if k & chunk::ERR_BIT != 0 => 6 + MAX_STRING as u32 + 8,
            _ => return Err(unexpected),
        };
        if hdr.length > max {
            return Err(ProtocolError::TooLong {
                what: "structured reply chunk",
                len: hdr.length.into(),
                max: max.into(),
            });
        }
        let total = STRUCTURED_REPLY_HEADER_LEN + hdr.length as usize;
        if buf.len() < total {
            self.wanted = total;
            return Ok(false);
        }
        self.wanted = SIMPLE_REPLY_HEADER_LEN;
        let f = self.in_flight.get_mut(&hdr.cookie).expect("looked up above");
        f.chunked = true;
        buf.advance(STRUCTURED_REPLY_HEADER_LEN);
        let payload = buf.split_to(hdr.length as usize);
        let req_end = f.offset + u64::from(f.length);
        let out_of_range = |offset: u64, length: u64| ProtocolError::ChunkOutOfRange {
            offset,
            length,
            req_offset: f.offset,
            req_length: f.length,
        };
        match hdr.kind {
            chunk::NONE => {
                if !hdr.done() {
                    return Err(ProtocolError::BadNoneChunk);
                }
            }
            chunk::OFFSET_DATA => {
                if payload.len() < 9 {
                    return Err(DecodeError::Invalid {
                        what: "NBD_REPLY_TYPE_OFFSET_DATA",
                        detail: format!("payload of {} bytes", payload.len()),
                    }
                    .into());
                }
                let offset = u64::from_be_bytes(payload[..8].try_into().expect("8 bytes"));
                let len = (payload.len() - 8) as u64;
                if offset < f.offset || offset.checked_add(len).is_none_or(|e| e > req_end) {
                    return Err(out_of_range(offset, len));
                }
                let rel = offset - f.offset;
                insert_range(f, rel, len)?;
                let mut payload = payload.freeze();
                payload.advance(8);
                f.data.push((rel, payload));
            }
            chunk::OFFSET_HOLE => {
                let h = OffsetHole::decode_exact(&payload, "NBD_REPLY_TYPE_OFFSET_HOLE")?;
                let len = u64::from(h.length);
                if h.offset < f.offset || h.offset.checked_add(len).is_none_or(|e| e > req_end) {
                    return Err(out_of_range(h.offset, len));
                }
                insert_range(f, h.offset - f.offset, len)?;
            }
            chunk::BLOCK_STATUS => {
                let s = BlockStatusChunk::decode_exact(&payload, "NBD_REPLY_TYPE_BLOCK_STATUS")?;
                if Some(s.context) != context {
                    return Err(ProtocolError::UnknownContext(s.context));
                }
                if f.status.is_some() {
                    return Err(ProtocolError::DuplicateBlockStatus(s.context));
                }
                if f.req_one {
                    if s.descriptors.len() != 1 || s.descriptors[0].length > f.length {
                        return Err(ProtocolError::BadBlockStatus(
                            "REQ_ONE reply must have one descriptor within the request".into(),
                        ));
                    }
                } else {
                    let mut sum = 0u64;
                    for d in &s.descriptors[..s.descriptors.len() - 1] {
                        sum += u64::from(d.length);
                        if sum >= u64::from(f.length) {
                            return Err(ProtocolError::BadBlockStatus(
                                "descriptors continue past the requested length".into(),
                            ));
                        }
                    }
                }
                f.status = Some(s.descriptors);
            }
            chunk::ERROR_OFFSET => {
                let e = ErrorOffsetChunk::decode_exact(&payload, "NBD_REPLY_TYPE_ERROR_OFFSET")?;
                if e.offset < f.offset || e.offset >= req_end.max(f.offset + 1) {
                    return Err(out_of_range(e.offset, 1));
                }
                f.error.get_or_insert(ServerError {
                    error: NbdError::from_code(e.error),
                    message: e.message,
                    offset: Some(e.offset),
                });
            }
            _ => {
                // NBD_REPLY_TYPE_ERROR and unknown error types share the same head.
                let mut r = Reader::new(&payload, "structured error chunk");
                let e = ErrorChunk::decode(&mut r)?;
                if hdr.kind == chunk::ERROR {
                    r.finish()?;
                }
                f.error.get_or_insert(ServerError {
                    error: NbdError::from_code(e.error),
                    message: e.message,
                    offset: None,
                });
            }
        }
        if hdr.done() {
            let f = self.in_flight.remove(&hdr.cookie).expect("present");
            let result = finish(f.command, f.length, f.error, f.data, f.covered, f.status)?;
            events.push_back(Event::Reply(Reply {
                cookie: hdr.cookie,
                command: f.command,
                offset: f.offset,
                length: f.length,
                result,
            }));
        }
        Ok(true)
    }
}

fn insert_range(f: &mut InFlight, start: u64, len: u64) -> Result<(), ProtocolError> {
    let end = start + len;
    // The chunk must not overlap the closest ranges on either side.
    if let Some((_, &pend)) = f.ranges.range(..=start).next_back()
        && pend > start
    {
        return Err(ProtocolError::OverlappingChunk(f.offset + start));
    }
    if let Some((&nstart, _)) = f.ranges.range(start..).next()
        && nstart < end
    {
        return Err(ProtocolError::OverlappingChunk(f.offset + start));
    }
    f.ranges.insert(start, end);
    f.covered += len;
    Ok(())
}

fn finish(
    command: Command,
    length: u32,
    error: Option<ServerError>,
    mut data: Vec<(u64, Bytes)>,
    covered: u64,
    status: Option<Vec<BlockDescriptor>>,
) -> Result<Result<ReplyData, ServerError>, ProtocolError> {
    if let Some(e) = error {
        return Ok(Err(e));
    }
    Ok(Ok(match command {
        Command::Read => {
            if covered != u64::from(length) {
                return Err(ProtocolError::LengthMismatch { expected: length.into(), got: covered });
            }
            if data.len() == 1 && data[0].1.len() == length as usize {
                ReplyData::Read(data.pop().expect("one").1)
            } else {
                // Several chunks or holes: assemble, holes stay zero.
                let mut out = BytesMut::zeroed(length as usize);
                for (rel, d) in data {
                    out[rel as usize..rel as usize + d.len()].copy_from_slice(&d);
                }
                ReplyData::Read(out.freeze())
            }
        }
        Command::BlockStatus => ReplyData::BlockStatus(status.ok_or(ProtocolError::MissingBlockStatus)?),
        _ => ReplyData::None,
    }))
}
