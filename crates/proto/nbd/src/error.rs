//! Error types: what the peer did wrong ([`ProtocolError`]), what the client
//! handshake could not agree on ([`ClientError`]) and what a caller asked
//! for that this side refuses locally ([`RequestError`]).

use crate::codec::DecodeError;
use crate::wire::Command;

/// The peer broke the protocol. The connection cannot continue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A frame did not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A reply names a cookie that was never sent.
    #[error("reply for unknown cookie {0:#x}")]
    UnknownCookie(u64),
    /// A reply arrived for a request whose reply was already complete
    /// (duplicate DONE, or a simple reply after the last chunk).
    #[error("reply for cookie {0:#x} after its reply was complete")]
    ReplyAfterDone(u64),
    /// A chunk type that is not allowed in the reply to this command.
    #[error("structured reply chunk type {kind} is not allowed for {command}")]
    UnexpectedChunk {
        /// The command being answered.
        command: Command,
        /// The chunk type received.
        kind: u16,
    },
    /// A structured reply arrived although structured replies were not negotiated.
    #[error("structured reply chunk received but structured replies were not negotiated")]
    StructuredNotNegotiated,
    /// A simple reply arrived after structured chunks for the same request.
    #[error("simple reply for cookie {0:#x} after structured chunks")]
    SimpleAfterChunks(u64),
    /// A simple reply where only a structured reply can carry the answer.
    #[error("simple reply to {0} without an error (needs a structured reply)")]
    SimpleNotAllowed(Command),
    /// A payload length above what this side accepts.
    #[error("{what} of {len} bytes is above the limit of {max}")]
    TooLong {
        /// What carried the length.
        what: &'static str,
        /// The length received.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A read chunk or error offset outside the request.
    #[error("chunk [{offset}, +{length}) is outside the request [{req_offset}, +{req_length})")]
    ChunkOutOfRange {
        /// Chunk offset.
        offset: u64,
        /// Chunk length.
        length: u64,
        /// Request offset.
        req_offset: u64,
        /// Request length.
        req_length: u32,
    },
    /// More structured reply chunks for one request than its length allows
    /// (memory stays proportional to the request).
    #[error(
        "reply to {command} of {length} bytes (cookie {cookie:#x}) has more than {max} chunks \
         (accepted: {} plus one per {} bytes requested)",
        crate::consts::CHUNK_ALLOWANCE,
        crate::consts::MIN_AVERAGE_CHUNK
    )]
    TooManyChunks {
        /// The request's cookie.
        cookie: u64,
        /// The request's command.
        command: Command,
        /// The request's length.
        length: u32,
        /// The bound ([`max_reply_chunks`](crate::client::max_reply_chunks)).
        max: u32,
    },
    /// Two read chunks cover the same bytes.
    #[error("chunk at offset {0} overlaps an earlier chunk")]
    OverlappingChunk(u64),
    /// A NONE chunk without the DONE flag or with a payload.
    #[error("NBD_REPLY_TYPE_NONE chunk must be empty and carry the DONE flag")]
    BadNoneChunk,
    /// A successful read reply did not cover the request.
    #[error("successful read reply covers {got} of {expected} bytes")]
    LengthMismatch {
        /// Request length.
        expected: u64,
        /// Bytes covered by data and hole chunks.
        got: u64,
    },
    /// A block status chunk for a context that was not negotiated.
    #[error("block status for unknown metadata context {0}")]
    UnknownContext(u32),
    /// More than one block status chunk for the one negotiated context.
    #[error("duplicate block status chunk for context {0}")]
    DuplicateBlockStatus(u32),
    /// A block status chunk that breaks the spec's length rules.
    #[error("bad block status reply: {0}")]
    BadBlockStatus(String),
    /// A successful block status reply without a status chunk.
    #[error("successful block status reply without a status chunk")]
    MissingBlockStatus,
    /// An option reply for an option that was not asked.
    #[error("option reply for option {got} while waiting for option {expected}")]
    UnexpectedOptionReply {
        /// The option asked.
        expected: u32,
        /// The option in the reply.
        got: u32,
    },
    /// An option reply type that makes no sense for the option.
    #[error("option reply type {reply:#x} is not valid for option {option}")]
    UnexpectedReplyType {
        /// The option.
        option: u32,
        /// The reply type.
        reply: u32,
    },
    /// NBD_OPT_GO/INFO completed without NBD_INFO_EXPORT.
    #[error("server acknowledged NBD_OPT_GO/INFO without sending NBD_INFO_EXPORT")]
    MissingExportInfo,
    /// Block size constraints that break the spec.
    #[error("invalid block sizes: minimum {minimum}, preferred {preferred}, maximum {maximum}")]
    BadBlockSizes {
        /// Minimum.
        minimum: u32,
        /// Preferred.
        preferred: u32,
        /// Maximum.
        maximum: u32,
    },
    /// Bytes arrived when none were expected (e.g. before any request, after NBD_CMD_DISC).
    #[error("unexpected data from peer: {0}")]
    Unexpected(&'static str),
    /// Unknown client flags (server side).
    #[error("client sent unknown flags {0:#x}")]
    UnknownClientFlags(u32),
}

/// Why the client handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The server broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(#[from] ProtocolError),
    /// The server refused an option it must accept for us to go on.
    #[error("server refused {option}: {reply}{}", if message.is_empty() { String::new() } else { format!(" ({message})") })]
    Refused {
        /// The option's name.
        option: &'static str,
        /// The error reply's name.
        reply: String,
        /// The server's message.
        message: String,
    },
    /// The server does not speak a dialect this client does.
    #[error("unsupported server: {0}")]
    Unsupported(String),
}

/// A request this side refuses before it reaches the wire (a configuration
/// or usage error, not the peer's fault).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The connection is not in the transmission phase (handshake, closing or failed).
    #[error("connection is not ready for requests ({0})")]
    NotReady(&'static str),
    /// The export is read-only.
    #[error("export is read-only")]
    ReadOnly,
    /// The server did not advertise the command or flag.
    #[error("server does not support {0}")]
    Unsupported(&'static str),
    /// The range ends beyond the export.
    #[error("range [{offset}, +{length}) ends beyond the export size {size}")]
    OutOfRange {
        /// Offset.
        offset: u64,
        /// Length.
        length: u64,
        /// Export size.
        size: u64,
    },
    /// The payload exceeds the negotiated maximum.
    #[error("length {length} is above the negotiated maximum payload of {max}")]
    TooLarge {
        /// Requested length.
        length: u64,
        /// The maximum.
        max: u32,
    },
    /// Offset or length not a multiple of the minimum block size.
    #[error("offset {offset} / length {length} not aligned to the minimum block size {minimum}")]
    Misaligned {
        /// Offset.
        offset: u64,
        /// Length.
        length: u64,
        /// Minimum block size.
        minimum: u32,
    },
    /// A zero-length request.
    #[error("zero-length request")]
    Empty,
}
