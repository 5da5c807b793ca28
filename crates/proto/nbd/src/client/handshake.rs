//! The client handshake (spec "Handshake"): the server's greeting
//! ("Oldstyle negotiation", "Newstyle negotiation", "Fixed newstyle
//! negotiation"), then option haggling ("Option haggling", "Option types")
//! until NBD_OPT_GO / NBD_OPT_EXPORT_NAME enters transmission, or
//! NBD_OPT_INFO / NBD_OPT_LIST end with NBD_OPT_ABORT ("Termination of the
//! session during option haggling").
//!
//! With [`ClientConfig::tls`] the first option is NBD_OPT_STARTTLS (spec
//! "TLS support", "NBD_OPT_STARTTLS"): once the server acknowledges it the
//! handshake pauses ([`Progress::StartTls`]) while the driver runs TLS on
//! the connection, and option haggling starts over inside TLS.
//!
//! Options go out back to back when [`ClientConfig::pipeline_options`] is
//! set (the replies come in order, so [`OptState`] just advances), one round
//! trip each otherwise.

use bytes::{Buf, BufMut, BytesMut};

use crate::codec::{Codec, Reader};
use crate::consts::*;
use crate::error::{ClientError, ProtocolError};
use crate::output::OutQueue;
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
    /// Upgrade the connection with NBD_OPT_STARTTLS before any other option,
    /// and fail if the server cannot (TLS is required, never optional: a
    /// client that falls back to clear text can be downgraded by anyone on
    /// the path, spec "Downgrade attacks").
    pub tls: bool,
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
            tls: false,
        }
    }
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

/// Limits the number of exports collected from NBD_OPT_LIST.
const MAX_LISTED_EXPORTS: usize = 10_000;

/// The option whose reply is awaited, one variant per option (spec
/// "Option types"); replies to pipelined options arrive in this order.
#[derive(Debug)]
enum OptState {
    /// NBD_OPT_STARTTLS sent (spec "NBD_OPT_STARTTLS").
    StartTls,
    /// NBD_OPT_STRUCTURED_REPLY sent (spec "NBD_OPT_STRUCTURED_REPLY").
    StructuredReply,
    /// NBD_OPT_SET_META_CONTEXT sent (spec "NBD_OPT_SET_META_CONTEXT");
    /// collecting NBD_REP_META_CONTEXT.
    SetMetaContext,
    /// NBD_OPT_GO or NBD_OPT_INFO sent (spec "NBD_OPT_INFO and NBD_OPT_GO");
    /// collecting NBD_REP_INFO.
    GoInfo {
        /// Which of the two.
        option: u32,
    },
    /// NBD_OPT_LIST sent (spec "NBD_OPT_LIST"); collecting NBD_REP_SERVER.
    List {
        /// Exports received so far.
        exports: Vec<ServerReply>,
    },
}

/// The handshake's phases.
#[derive(Debug)]
enum State {
    /// Waiting for the server's greeting (spec "Oldstyle negotiation",
    /// "Newstyle negotiation").
    Greeting,
    /// Haggling options, waiting for the reply to one (spec "Fixed newstyle
    /// negotiation", "Option haggling").
    Options(OptState),
    /// NBD_OPT_EXPORT_NAME sent: waiting for size and flags, which are not
    /// an option reply (spec "Newstyle negotiation").
    ExportName,
    /// NBD_OPT_STARTTLS acknowledged: the driver runs the TLS handshake;
    /// no input is expected until it calls `tls_established`.
    AwaitTls,
    /// The handshake is over (transmission entered, or NBD_OPT_ABORT sent).
    Done,
}

/// What one step of the handshake did.
#[derive(Debug)]
pub(super) enum Progress {
    /// A frame was consumed; call again.
    Continue,
    /// More input is needed.
    Wait,
    /// The server acknowledged NBD_OPT_STARTTLS: run TLS, then call
    /// [`Handshake::tls_established`].
    StartTls,
    /// Transmission begins with what was agreed ([`Goal::Go`]).
    Ready(Negotiated),
    /// The export's information ([`Goal::Info`]); NBD_OPT_ABORT is queued.
    Info(Negotiated),
    /// The server's exports ([`Goal::List`]); NBD_OPT_ABORT is queued.
    Exports(Vec<ServerReply>),
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

/// The client side of the handshake.
#[derive(Debug)]
pub(super) struct Handshake {
    cfg: ClientConfig,
    state: State,
    gathered: Gathered,
    /// Total bytes the frame being received needs.
    pub(super) wanted: usize,
}

impl Handshake {
    pub(super) fn new(cfg: ClientConfig) -> Self {
        Handshake {
            cfg,
            state: State::Greeting,
            gathered: Gathered::default(),
            wanted: Greeting::NEWSTYLE_LEN,
        }
    }

    /// Consumes one frame from `buf` if it is complete.
    pub(super) fn step(&mut self, buf: &mut BytesMut, out: &mut OutQueue) -> Result<Progress, ClientError> {
        match self.state {
            State::Greeting => self.on_greeting(buf, out),
            State::ExportName => self.on_export_name_reply(buf),
            State::Options(_) => self.on_option_reply(buf, out),
            State::AwaitTls if buf.is_empty() => Ok(Progress::Wait),
            // Bytes in clear text after the ACK would be taken as if they
            // came over TLS (an injection on the path).
            State::AwaitTls => {
                Err(ProtocolError::Unexpected("data after the NBD_OPT_STARTTLS reply in clear text").into())
            }
            State::Done => Err(ProtocolError::Unexpected("input after the handshake ended").into()),
        }
    }

    fn on_greeting(&mut self, buf: &mut BytesMut, out: &mut OutQueue) -> Result<Progress, ClientError> {
        if buf.len() < 16 {
            self.wanted = Greeting::NEWSTYLE_LEN;
            return Ok(Progress::Wait);
        }
        let need = if buf[8..16] == OLDSTYLE_MAGIC.to_be_bytes() {
            Greeting::OLDSTYLE_LEN
        } else {
            Greeting::NEWSTYLE_LEN
        };
        if buf.len() < need {
            self.wanted = need;
            return Ok(Progress::Wait);
        }
        let frame = buf.split_to(need);
        let g = Greeting::decode_exact(&frame, "server greeting").map_err(ProtocolError::from)?;
        match g {
            Greeting::Oldstyle { size, flags } => {
                if self.cfg.tls {
                    return Err(ClientError::Unsupported(
                        "oldstyle server cannot do TLS (NBD_OPT_STARTTLS needs fixed newstyle)".into(),
                    ));
                }
                if self.cfg.goal != Goal::Go {
                    return Err(ClientError::Unsupported(
                        "oldstyle server cannot list or describe exports".into(),
                    ));
                }
                self.gathered.export = Some((size, flags as u16));
                self.finish_go(true)
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
                if self.cfg.tls && !fixed {
                    return Err(ClientError::Unsupported(
                        "server does not speak fixed newstyle, so it cannot do TLS".into(),
                    ));
                }
                out.frame(|b| ClientFlags(cflags).encode(b));
                if self.cfg.tls {
                    queue_option(out, opt::STARTTLS, &[]);
                    self.state = State::Options(OptState::StartTls);
                } else if !fixed {
                    // Plain newstyle: only NBD_OPT_EXPORT_NAME is safe to send.
                    if self.cfg.goal != Goal::Go {
                        return Err(ClientError::Unsupported("server does not speak fixed newstyle".into()));
                    }
                    self.send_export_name(out);
                } else {
                    self.start_options(out);
                }
                Ok(Progress::Continue)
            }
        }
    }

    /// The TLS handshake after [`Progress::StartTls`] succeeded: option
    /// haggling starts over TLS.
    pub(super) fn tls_established(&mut self, out: &mut OutQueue) {
        if matches!(self.state, State::AwaitTls) {
            self.wanted = OptionReplyHeader::LEN;
            self.start_options(out);
        }
    }

    /// Whether the handshake waits for the driver's TLS handshake.
    pub(super) fn awaiting_tls(&self) -> bool {
        matches!(self.state, State::AwaitTls)
    }

    fn start_options(&mut self, out: &mut OutQueue) {
        match self.cfg.goal {
            Goal::List => {
                queue_option(out, opt::LIST, &[]);
                self.state = State::Options(OptState::List { exports: Vec::new() });
            }
            Goal::Go | Goal::Info if self.cfg.pipeline_options => {
                self.gathered.pipelined = true;
                let mut first = None;
                if self.cfg.structured_replies {
                    queue_option(out, opt::STRUCTURED_REPLY, &[]);
                    first = Some(OptState::StructuredReply);
                    if self.cfg.block_status {
                        self.queue_meta_context(out);
                        self.gathered.meta_sent = true;
                    }
                }
                let option = self.queue_go_info(out);
                self.state = State::Options(first.unwrap_or(OptState::GoInfo { option }));
            }
            Goal::Go | Goal::Info => {
                if self.cfg.structured_replies {
                    queue_option(out, opt::STRUCTURED_REPLY, &[]);
                    self.state = State::Options(OptState::StructuredReply);
                } else {
                    self.after_structured(out);
                }
            }
        }
    }

    fn queue_meta_context(&mut self, out: &mut OutQueue) {
        let req = MetaContextRequest {
            export: self.cfg.export_name.clone(),
            queries: vec![BASE_ALLOCATION.to_string()],
        };
        queue_option(out, opt::SET_META_CONTEXT, &req.to_bytes());
    }

    fn queue_go_info(&mut self, out: &mut OutQueue) -> u32 {
        let option = self.go_option();
        let mut requests = vec![info::BLOCK_SIZE];
        if self.cfg.goal == Goal::Info {
            requests.push(info::DESCRIPTION);
        }
        let data = InfoRequest { name: self.cfg.export_name.clone(), requests }.to_bytes();
        queue_option(out, option, &data);
        option
    }

    /// After the reply to NBD_OPT_STRUCTURED_REPLY.
    fn after_structured(&mut self, out: &mut OutQueue) {
        if self.gathered.pipelined {
            self.state = State::Options(if self.gathered.meta_sent {
                OptState::SetMetaContext
            } else {
                OptState::GoInfo { option: self.go_option() }
            });
        } else if self.gathered.structured && self.cfg.block_status {
            self.queue_meta_context(out);
            self.state = State::Options(OptState::SetMetaContext);
        } else {
            self.send_go_info(out);
        }
    }

    fn go_option(&self) -> u32 {
        if self.cfg.goal == Goal::Info { opt::INFO } else { opt::GO }
    }

    /// After the reply to NBD_OPT_SET_META_CONTEXT (or instead of it).
    fn send_go_info(&mut self, out: &mut OutQueue) {
        let option = if self.gathered.pipelined { self.go_option() } else { self.queue_go_info(out) };
        self.state = State::Options(OptState::GoInfo { option });
    }

    fn send_export_name(&mut self, out: &mut OutQueue) {
        queue_option(out, opt::EXPORT_NAME, self.cfg.export_name.as_bytes());
        self.gathered.used_export_name = true;
        self.state = State::ExportName;
    }

    fn on_export_name_reply(&mut self, buf: &mut BytesMut) -> Result<Progress, ClientError> {
        let need = ExportNameReply::LEN + if self.gathered.no_zeroes { 0 } else { 124 };
        if buf.len() < need {
            self.wanted = need;
            return Ok(Progress::Wait);
        }
        let frame = buf.split_to(need);
        let r = ExportNameReply::decode(&mut Reader::new(&frame, "NBD_OPT_EXPORT_NAME reply"))
            .map_err(ProtocolError::from)?;
        self.gathered.export = Some((r.size, r.flags));
        self.finish_go(false)
    }

    fn on_option_reply(&mut self, buf: &mut BytesMut, out: &mut OutQueue) -> Result<Progress, ClientError> {
        if buf.len() < OptionReplyHeader::LEN {
            self.wanted = OptionReplyHeader::LEN;
            return Ok(Progress::Wait);
        }
        let hdr = OptionReplyHeader::decode(&mut Reader::new(&buf[..OptionReplyHeader::LEN], "option reply"))
            .map_err(ProtocolError::from)?;
        let expected = match &self.state {
            State::Options(OptState::StartTls) => opt::STARTTLS,
            State::Options(OptState::StructuredReply) => opt::STRUCTURED_REPLY,
            State::Options(OptState::SetMetaContext) => opt::SET_META_CONTEXT,
            State::Options(OptState::GoInfo { option }) => *option,
            State::Options(OptState::List { .. }) => opt::LIST,
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
            return Ok(Progress::Wait);
        }
        let mut frame = buf.split_to(total);
        frame.advance(OptionReplyHeader::LEN);
        let data = frame.freeze();
        self.wanted = OptionReplyHeader::LEN;
        let decode = |what| Reader::new(&data, what);
        let is_err = hdr.reply & rep::ERR_BIT != 0;
        let err_text = || ErrorText::decode(&mut decode("option error")).map(|t| t.0).unwrap_or_default();
        let bad = ProtocolError::UnexpectedReplyType { option: hdr.option, reply: hdr.reply };

        let State::Options(state) = std::mem::replace(&mut self.state, State::Done) else {
            unreachable!("checked above")
        };
        match state {
            OptState::StartTls => match hdr.reply {
                rep::ACK => {
                    self.state = State::AwaitTls;
                    return Ok(Progress::StartTls);
                }
                r if r & rep::ERR_BIT != 0 => {
                    return Err(ClientError::Refused {
                        option: "NBD_OPT_STARTTLS",
                        reply: match r {
                            rep::ERR_UNSUP | rep::ERR_POLICY => {
                                format!("{} (the server does not offer TLS)", reply_name(r))
                            }
                            r => reply_name(r),
                        },
                        message: err_text(),
                    });
                }
                _ => return Err(bad.into()),
            },
            OptState::StructuredReply => {
                if hdr.reply == rep::ACK {
                    self.gathered.structured = true;
                } else if !is_err {
                    return Err(bad.into());
                }
                self.after_structured(out);
            }
            OptState::SetMetaContext => match hdr.reply {
                rep::META_CONTEXT => {
                    let m = MetaContextReply::decode_exact(&data, "NBD_REP_META_CONTEXT")
                        .map_err(ProtocolError::from)?;
                    if m.name == BASE_ALLOCATION {
                        self.gathered.base_allocation = Some(m.id);
                    }
                    self.state = State::Options(OptState::SetMetaContext);
                }
                rep::ACK => self.send_go_info(out),
                r if r & rep::ERR_BIT != 0 => {
                    self.gathered.base_allocation = None;
                    self.send_go_info(out);
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
                    self.state = State::Options(OptState::GoInfo { option });
                }
                rep::ACK => {
                    if self.gathered.export.is_none() {
                        return Err(ProtocolError::MissingExportInfo.into());
                    }
                    if option == opt::GO {
                        return self.finish_go(false);
                    }
                    let neg = self.build_negotiated(false)?;
                    queue_option(out, opt::ABORT, &[]);
                    return Ok(Progress::Info(neg));
                }
                rep::ERR_UNSUP if option == opt::GO => {
                    // The server predates NBD_OPT_GO: fall back (spec "NBD_OPT_GO").
                    self.send_export_name(out);
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
                    self.state = State::Options(OptState::List { exports });
                }
                rep::ACK => {
                    queue_option(out, opt::ABORT, &[]);
                    return Ok(Progress::Exports(exports));
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
        }
        Ok(Progress::Continue)
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

    fn finish_go(&mut self, oldstyle: bool) -> Result<Progress, ClientError> {
        let neg = self.build_negotiated(oldstyle)?;
        self.state = State::Done;
        Ok(Progress::Ready(neg))
    }
}

fn queue_option(out: &mut OutQueue, option: u32, data: &[u8]) {
    out.frame(|b| {
        OptionHeader { option, length: data.len() as u32 }.encode(b);
        b.put_slice(data);
    });
}

fn reply_name(r: u32) -> String {
    match r {
        rep::ERR_UNSUP => "NBD_REP_ERR_UNSUP".into(),
        rep::ERR_POLICY => "NBD_REP_ERR_POLICY".into(),
        rep::ERR_INVALID => "NBD_REP_ERR_INVALID".into(),
        rep::ERR_PLATFORM => "NBD_REP_ERR_PLATFORM".into(),
        rep::ERR_TLS_REQD => "NBD_REP_ERR_TLS_REQD (the server requires TLS: use nbds://)".into(),
        rep::ERR_UNKNOWN => "NBD_REP_ERR_UNKNOWN (no such export)".into(),
        rep::ERR_SHUTDOWN => "NBD_REP_ERR_SHUTDOWN".into(),
        rep::ERR_BLOCK_SIZE_REQD => "NBD_REP_ERR_BLOCK_SIZE_REQD".into(),
        rep::ERR_TOO_BIG => "NBD_REP_ERR_TOO_BIG".into(),
        r => format!("error reply {r:#x}"),
    }
}
