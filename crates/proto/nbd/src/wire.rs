//! Every NBD wire type, each implementing [`Codec`]. Section names refer to
//! the NBD spec (`doc/proto.md`).

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use crate::codec::{Codec, DecodeError, Reader, put_string};
use crate::consts::*;

/// The server's first message (spec "Newstyle negotiation" / "Oldstyle negotiation").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Greeting {
    /// NBDMAGIC, IHAVEOPT, handshake flags.
    Newstyle {
        /// Handshake flags (`FLAG_FIXED_NEWSTYLE`, `FLAG_NO_ZEROES`).
        flags: u16,
    },
    /// NBDMAGIC, oldstyle magic, size, flags, 124 zero bytes: no options.
    Oldstyle {
        /// Export size.
        size: u64,
        /// Transmission flags (the low 16 bits of the 32-bit field).
        flags: u32,
    },
}

impl Greeting {
    /// Wire length of an oldstyle greeting.
    pub const OLDSTYLE_LEN: usize = 8 + 8 + 8 + 4 + 124;
    /// Wire length of a newstyle greeting.
    pub const NEWSTYLE_LEN: usize = 18;
}

impl Codec for Greeting {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64(NBDMAGIC);
        match *self {
            Greeting::Newstyle { flags } => {
                out.put_u64(IHAVEOPT);
                out.put_u16(flags);
            }
            Greeting::Oldstyle { size, flags } => {
                out.put_u64(OLDSTYLE_MAGIC);
                out.put_u64(size);
                out.put_u32(flags);
                out.put_bytes(0, 124);
            }
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.magic64(NBDMAGIC)?;
        match r.u64()? {
            IHAVEOPT => Ok(Greeting::Newstyle { flags: r.u16()? }),
            OLDSTYLE_MAGIC => {
                let size = r.u64()?;
                let flags = r.u32()?;
                r.take(124)?;
                Ok(Greeting::Oldstyle { size, flags })
            }
            got => Err(DecodeError::BadMagic { what: r.what(), expected: IHAVEOPT, got }),
        }
    }
}

/// The client's flags after the greeting (spec "Client flags").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFlags(pub u32);

impl Codec for ClientFlags {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u32(self.0);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(ClientFlags(r.u32()?))
    }
}

/// The header of an option request: IHAVEOPT, option, length (spec "Option haggling").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    /// Option code (`opt::*`).
    pub option: u32,
    /// Length of the option data that follows.
    pub length: u32,
}

impl OptionHeader {
    /// Wire length.
    pub const LEN: usize = 16;
}

impl Codec for OptionHeader {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64(IHAVEOPT);
        out.put_u32(self.option);
        out.put_u32(self.length);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.magic64(IHAVEOPT)?;
        Ok(OptionHeader { option: r.u32()?, length: r.u32()? })
    }
}

/// The header of an option reply (spec "Option reply").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionReplyHeader {
    /// The option this answers.
    pub option: u32,
    /// Reply type (`rep::*`).
    pub reply: u32,
    /// Length of the reply data that follows.
    pub length: u32,
}

impl OptionReplyHeader {
    /// Wire length.
    pub const LEN: usize = 20;
}

impl Codec for OptionReplyHeader {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64(OPT_REPLY_MAGIC);
        out.put_u32(self.option);
        out.put_u32(self.reply);
        out.put_u32(self.length);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.magic64(OPT_REPLY_MAGIC)?;
        Ok(OptionReplyHeader { option: r.u32()?, reply: r.u32()?, length: r.u32()? })
    }
}

/// The server's answer to NBD_OPT_EXPORT_NAME: size and transmission flags
/// (the 124 zero bytes that may follow are not part of this value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportNameReply {
    /// Export size.
    pub size: u64,
    /// Transmission flags.
    pub flags: u16,
}

impl ExportNameReply {
    /// Wire length without the zero padding.
    pub const LEN: usize = 10;
}

impl Codec for ExportNameReply {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64(self.size);
        out.put_u16(self.flags);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(ExportNameReply { size: r.u64()?, flags: r.u16()? })
    }
}

/// Data of NBD_OPT_INFO and NBD_OPT_GO: an export name and the information
/// types requested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    /// Export name ("" is the default export).
    pub name: String,
    /// Requested `info::*` types.
    pub requests: Vec<u16>,
}

impl Codec for InfoRequest {
    fn encode(&self, out: &mut BytesMut) {
        put_string(out, &self.name);
        out.put_u16(self.requests.len() as u16);
        for q in &self.requests {
            out.put_u16(*q);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = r.u32()? as usize;
        let name = r.string(n, MAX_STRING)?;
        let count = r.u16()? as usize;
        if count * 2 > r.remaining() {
            return Err(DecodeError::Truncated { what: r.what(), needed: count * 2 - r.remaining() });
        }
        let mut requests = Vec::with_capacity(count);
        for _ in 0..count {
            requests.push(r.u16()?);
        }
        Ok(InfoRequest { name, requests })
    }
}

/// Block size constraints (spec "Block size constraints"): what
/// NBD_INFO_BLOCK_SIZE carries, or the spec's defaults when a server does
/// not send it. The client's [`Negotiated`](crate::Negotiated) caps the
/// maximum at its own limit; the server advertises and enforces them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSizes {
    /// Minimum block size (alignment of every request).
    pub minimum: u32,
    /// Preferred block size.
    pub preferred: u32,
    /// Maximum payload of a read or write.
    pub maximum: u32,
}

/// One NBD_REP_INFO payload (spec "NBD_OPT_INFO and NBD_OPT_GO").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Info {
    /// NBD_INFO_EXPORT.
    Export {
        /// Export size.
        size: u64,
        /// Transmission flags.
        flags: u16,
    },
    /// NBD_INFO_NAME.
    Name(String),
    /// NBD_INFO_DESCRIPTION.
    Description(String),
    /// NBD_INFO_BLOCK_SIZE.
    BlockSize {
        /// Minimum block size.
        minimum: u32,
        /// Preferred block size.
        preferred: u32,
        /// Maximum payload size.
        maximum: u32,
    },
    /// An information type this crate does not know (ignored by clients).
    Unknown(u16),
}

impl Codec for Info {
    fn encode(&self, out: &mut BytesMut) {
        match self {
            Info::Export { size, flags } => {
                out.put_u16(info::EXPORT);
                out.put_u64(*size);
                out.put_u16(*flags);
            }
            Info::Name(s) => {
                out.put_u16(info::NAME);
                out.put_slice(s.as_bytes());
            }
            Info::Description(s) => {
                out.put_u16(info::DESCRIPTION);
                out.put_slice(s.as_bytes());
            }
            Info::BlockSize { minimum, preferred, maximum } => {
                out.put_u16(info::BLOCK_SIZE);
                out.put_u32(*minimum);
                out.put_u32(*preferred);
                out.put_u32(*maximum);
            }
            Info::Unknown(t) => out.put_u16(*t),
        }
    }

    /// Decodes one info payload; the reader must span exactly the reply data.
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let v = match r.u16()? {
            info::EXPORT => {
                let size = r.u64()?;
                let flags = r.u16()?;
                Info::Export { size, flags }
            }
            info::NAME => {
                let n = r.remaining();
                Info::Name(r.string(n, MAX_STRING)?)
            }
            info::DESCRIPTION => {
                let n = r.remaining();
                Info::Description(r.string(n, MAX_STRING)?)
            }
            info::BLOCK_SIZE => Info::BlockSize { minimum: r.u32()?, preferred: r.u32()?, maximum: r.u32()? },
            t => {
                r.rest();
                Info::Unknown(t)
            }
        };
        Ok(v)
    }
}

/// Data of NBD_OPT_LIST_META_CONTEXT / NBD_OPT_SET_META_CONTEXT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaContextRequest {
    /// Export the contexts are for.
    pub export: String,
    /// Queries (e.g. "base:allocation").
    pub queries: Vec<String>,
}

impl Codec for MetaContextRequest {
    fn encode(&self, out: &mut BytesMut) {
        put_string(out, &self.export);
        out.put_u32(self.queries.len() as u32);
        for q in &self.queries {
            put_string(out, q);
        }
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = r.u32()? as usize;
        let export = r.string(n, MAX_STRING)?;
        let count = r.u32()? as usize;
        // Each query takes at least 4 bytes: bound the allocation by the input.
        if count > r.remaining() / 4 {
            return Err(DecodeError::Truncated { what: r.what(), needed: count * 4 - r.remaining() });
        }
        let mut queries = Vec::with_capacity(count);
        for _ in 0..count {
            let n = r.u32()? as usize;
            queries.push(r.string(n, MAX_STRING)?);
        }
        Ok(MetaContextRequest { export, queries })
    }
}

/// Data of NBD_REP_META_CONTEXT: a context id and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaContextReply {
    /// The id the server will use in block status chunks.
    pub id: u32,
    /// The context's name.
    pub name: String,
}

impl Codec for MetaContextReply {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u32(self.id);
        out.put_slice(self.name.as_bytes());
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let id = r.u32()?;
        let n = r.remaining();
        Ok(MetaContextReply { id, name: r.string(n, MAX_STRING)? })
    }
}

/// Data of NBD_REP_SERVER (an answer to NBD_OPT_LIST): a name and a description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerReply {
    /// Export name.
    pub name: String,
    /// Description (may be empty).
    pub description: String,
}

impl Codec for ServerReply {
    fn encode(&self, out: &mut BytesMut) {
        put_string(out, &self.name);
        out.put_slice(self.description.as_bytes());
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = r.u32()? as usize;
        let name = r.string(n, MAX_STRING)?;
        let n = r.remaining();
        Ok(ServerReply { name, description: r.string(n, MAX_STRING)? })
    }
}

/// An option reply's error text (the data of an NBD_REP_ERR_* reply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorText(pub String);

impl Codec for ErrorText {
    fn encode(&self, out: &mut BytesMut) {
        out.put_slice(self.0.as_bytes());
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let bytes = r.rest();
        let bytes = &bytes[..bytes.len().min(MAX_STRING)];
        Ok(ErrorText(String::from_utf8_lossy(bytes).into_owned()))
    }
}

/// A transmission command (spec "Request types"), every wire value mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// NBD_CMD_READ.
    Read,
    /// NBD_CMD_WRITE.
    Write,
    /// NBD_CMD_DISC.
    Disc,
    /// NBD_CMD_FLUSH.
    Flush,
    /// NBD_CMD_TRIM.
    Trim,
    /// NBD_CMD_CACHE.
    Cache,
    /// NBD_CMD_WRITE_ZEROES.
    WriteZeroes,
    /// NBD_CMD_BLOCK_STATUS.
    BlockStatus,
    /// A command this crate does not know.
    Unsupported(u16),
}

impl From<u16> for Command {
    fn from(v: u16) -> Self {
        match v {
            cmd::READ => Command::Read,
            cmd::WRITE => Command::Write,
            cmd::DISC => Command::Disc,
            cmd::FLUSH => Command::Flush,
            cmd::TRIM => Command::Trim,
            cmd::CACHE => Command::Cache,
            cmd::WRITE_ZEROES => Command::WriteZeroes,
            cmd::BLOCK_STATUS => Command::BlockStatus,
            v => Command::Unsupported(v),
        }
    }
}

impl From<Command> for u16 {
    fn from(c: Command) -> u16 {
        match c {
            Command::Read => cmd::READ,
            Command::Write => cmd::WRITE,
            Command::Disc => cmd::DISC,
            Command::Flush => cmd::FLUSH,
            Command::Trim => cmd::TRIM,
            Command::Cache => cmd::CACHE,
            Command::WriteZeroes => cmd::WRITE_ZEROES,
            Command::BlockStatus => cmd::BLOCK_STATUS,
            Command::Unsupported(v) => v,
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Read => f.write_str("NBD_CMD_READ"),
            Command::Write => f.write_str("NBD_CMD_WRITE"),
            Command::Disc => f.write_str("NBD_CMD_DISC"),
            Command::Flush => f.write_str("NBD_CMD_FLUSH"),
            Command::Trim => f.write_str("NBD_CMD_TRIM"),
            Command::Cache => f.write_str("NBD_CMD_CACHE"),
            Command::WriteZeroes => f.write_str("NBD_CMD_WRITE_ZEROES"),
            Command::BlockStatus => f.write_str("NBD_CMD_BLOCK_STATUS"),
            Command::Unsupported(v) => write!(f, "command {v}"),
        }
    }
}

/// An NBD error number (spec "Error values"), every wire value mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NbdError {
    /// NBD_EPERM (1).
    Perm,
    /// NBD_EIO (5).
    Io,
    /// NBD_ENOMEM (12).
    NoMem,
    /// NBD_EINVAL (22).
    Inval,
    /// NBD_ENOSPC (28).
    NoSpc,
    /// NBD_EOVERFLOW (75).
    Overflow,
    /// NBD_ENOTSUP (95).
    NotSup,
    /// NBD_ESHUTDOWN (108).
    Shutdown,
    /// A value the spec does not define (treated like EINVAL by clients).
    Other(u32),
}

impl NbdError {
    /// The wire value.
    pub fn code(self) -> u32 {
        match self {
            NbdError::Perm => 1,
            NbdError::Io => 5,
            NbdError::NoMem => 12,
            NbdError::Inval => 22,
            NbdError::NoSpc => 28,
            NbdError::Overflow => 75,
            NbdError::NotSup => 95,
            NbdError::Shutdown => 108,
            NbdError::Other(v) => v,
        }
    }

    /// The same request may succeed if sent again (a passing I/O error,
    /// memory pressure, a server shutting down for a restart); the others
    /// (permission, invalid request, no space, out of range, unsupported)
    /// fail again.
    pub fn is_transient(self) -> bool {
        matches!(self, NbdError::Io | NbdError::NoMem | NbdError::Shutdown)
    }

    /// Maps a wire value.
    pub fn from_code(v: u32) -> Self {
        match v {
            1 => NbdError::Perm,
            5 => NbdError::Io,
            12 => NbdError::NoMem,
            22 => NbdError::Inval,
            28 => NbdError::NoSpc,
            75 => NbdError::Overflow,
            95 => NbdError::NotSup,
            108 => NbdError::Shutdown,
            v => NbdError::Other(v),
        }
    }
}

impl fmt::Display for NbdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NbdError::Perm => f.write_str("operation not permitted (NBD_EPERM)"),
            NbdError::Io => f.write_str("input/output error (NBD_EIO)"),
            NbdError::NoMem => f.write_str("cannot allocate memory (NBD_ENOMEM)"),
            NbdError::Inval => f.write_str("invalid argument (NBD_EINVAL)"),
            NbdError::NoSpc => f.write_str("no space left on device (NBD_ENOSPC)"),
            NbdError::Overflow => f.write_str("value too large (NBD_EOVERFLOW)"),
            NbdError::NotSup => f.write_str("operation not supported (NBD_ENOTSUP)"),
            NbdError::Shutdown => f.write_str("server is shutting down (NBD_ESHUTDOWN)"),
            NbdError::Other(v) => write!(f, "unknown error {v}"),
        }
    }
}

/// A request header (spec "Request message"); a WRITE's data follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Command flags (`cflags::*`).
    pub flags: u16,
    /// The command.
    pub command: Command,
    /// Cookie (a.k.a. handle) echoed in the reply.
    pub cookie: u64,
    /// Byte offset.
    pub offset: u64,
    /// Byte length.
    pub length: u32,
}

impl Codec for RequestHeader {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u32(REQUEST_MAGIC);
        out.put_u16(self.flags);
        out.put_u16(self.command.into());
        out.put_u64(self.cookie);
        out.put_u64(self.offset);
        out.put_u32(self.length);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.magic32(REQUEST_MAGIC)?;
        Ok(RequestHeader {
            flags: r.u16()?,
            command: Command::from(r.u16()?),
            cookie: r.u64()?,
            offset: r.u64()?,
            length: r.u32()?,
        })
    }
}

/// A simple reply header (spec "Simple reply message"); a successful READ's data follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimpleReplyHeader {
    /// Error number, 0 for success.
    pub error: u32,
    /// Cookie of the request.
    pub cookie: u64,
}

impl Codec for SimpleReplyHeader {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u32(SIMPLE_REPLY_MAGIC);
        out.put_u32(self.error);
        out.put_u64(self.cookie);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.magic32(SIMPLE_REPLY_MAGIC)?;
        Ok(SimpleReplyHeader { error: r.u32()?, cookie: r.u64()? })
    }
}

/// A structured reply chunk header (spec "Structured reply chunk message").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Flags (`REPLY_FLAG_DONE`).
    pub flags: u16,
    /// Chunk type (`chunk::*`).
    pub kind: u16,
    /// Cookie of the request.
    pub cookie: u64,
    /// Payload length.
    pub length: u32,
}

impl ChunkHeader {
    /// Whether this is the last chunk of its reply.
    pub fn done(&self) -> bool {
        self.flags & REPLY_FLAG_DONE != 0
    }
}

impl Codec for ChunkHeader {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u32(STRUCTURED_REPLY_MAGIC);
        out.put_u16(self.flags);
        out.put_u16(self.kind);
        out.put_u64(self.cookie);
        out.put_u32(self.length);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.magic32(STRUCTURED_REPLY_MAGIC)?;
        Ok(ChunkHeader { flags: r.u16()?, kind: r.u16()?, cookie: r.u64()?, length: r.u32()? })
    }
}

/// Payload of NBD_REPLY_TYPE_OFFSET_DATA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetData {
    /// Absolute offset of the data.
    pub offset: u64,
    /// The data (at least one byte).
    pub data: Bytes,
}

impl Codec for OffsetData {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64(self.offset);
        out.put_slice(&self.data);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let offset = r.u64()?;
        let data = r.rest();
        if data.is_empty() {
            return Err(r.invalid("OFFSET_DATA chunk without data"));
        }
        Ok(OffsetData { offset, data: Bytes::copy_from_slice(data) })
    }
}

/// Payload of NBD_REPLY_TYPE_OFFSET_HOLE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetHole {
    /// Absolute offset of the hole.
    pub offset: u64,
    /// Length of the hole (nonzero).
    pub length: u32,
}

impl Codec for OffsetHole {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64(self.offset);
        out.put_u32(self.length);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let offset = r.u64()?;
        let length = r.u32()?;
        if length == 0 {
            return Err(r.invalid("OFFSET_HOLE chunk of length 0"));
        }
        Ok(OffsetHole { offset, length })
    }
}

/// One block status descriptor: a run length and its state flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockDescriptor {
    /// Length of the run (nonzero).
    pub length: u32,
    /// State flags (`STATE_HOLE`, `STATE_ZERO` for `base:allocation`).
    pub flags: u32,
}

/// Payload of NBD_REPLY_TYPE_BLOCK_STATUS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockStatusChunk {
    /// Metadata context id.
    pub context: u32,
    /// The runs, in order (at least one).
    pub descriptors: Vec<BlockDescriptor>,
}

impl Codec for BlockStatusChunk {
    fn encode(&self, out: &mut BytesMut) {
        out.put_u32(self.context);
        for d in &self.descriptors {
            out.put_u32(d.length);
            out.put_u32(d.flags);
        }
    }
    /// The reader must span exactly the chunk payload.
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let context = r.u32()?;
        let n = r.remaining();
        if n == 0 || !n.is_multiple_of(8) {
            return Err(
                r.invalid(format!("block status payload of {n} bytes is not a positive multiple of 8"))
            );
        }
        let mut descriptors = Vec::with_capacity(n / 8);
        for _ in 0..n / 8 {
            let length = r.u32()?;
            let flags = r.u32()?;
            if length == 0 {
                return Err(r.invalid("block status descriptor of length 0"));
            }
            descriptors.push(BlockDescriptor { length, flags });
        }
        Ok(BlockStatusChunk { context, descriptors })
    }
}

/// Payload of NBD_REPLY_TYPE_ERROR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorChunk {
    /// Error number (nonzero).
    pub error: u32,
    /// Human-readable message (may be empty).
    pub message: String,
}

fn decode_error_head(r: &mut Reader<'_>) -> Result<(u32, String), DecodeError> {
    let error = r.u32()?;
    if error == 0 {
        return Err(r.invalid("error chunk with error 0"));
    }
    let n = r.u16()? as usize;
    if n > r.remaining() {
        return Err(DecodeError::Truncated { what: r.what(), needed: n - r.remaining() });
    }
    let raw = r.take(n)?;
    let message = String::from_utf8_lossy(&raw[..n.min(MAX_STRING)]).into_owned();
    Ok((error, message))
}

fn encode_error_head(out: &mut BytesMut, error: u32, message: &str) {
    let msg = truncate_str(message, MAX_STRING);
    out.put_u32(error);
    out.put_u16(msg.len() as u16);
    out.put_slice(msg.as_bytes());
}

/// The longest prefix of `s` that fits in `max` bytes and ends on a char boundary.
pub(crate) fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Codec for ErrorChunk {
    fn encode(&self, out: &mut BytesMut) {
        encode_error_head(out, self.error, &self.message);
    }
    /// The reader must span exactly the chunk payload.
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let (error, message) = decode_error_head(r)?;
        Ok(ErrorChunk { error, message })
    }
}

/// Payload of NBD_REPLY_TYPE_ERROR_OFFSET.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorOffsetChunk {
    /// Error number (nonzero).
    pub error: u32,
    /// Human-readable message (may be empty).
    pub message: String,
    /// Offset where the error occurred (inside the request).
    pub offset: u64,
}

impl Codec for ErrorOffsetChunk {
    fn encode(&self, out: &mut BytesMut) {
        encode_error_head(out, self.error, &self.message);
        out.put_u64(self.offset);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let (error, message) = decode_error_head(r)?;
        Ok(ErrorOffsetChunk { error, message, offset: r.u64()? })
    }
}
