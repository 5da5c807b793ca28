//! Error types, one per layer: framing ([`PduError`]), text keys
//! ([`TextError`]), login ([`LoginError`]), a full-feature connection
//! ([`ConnError`], fatal to the connection) and one command
//! ([`CommandError`], fatal to that command only).

use crate::opcode::Opcode;
use crate::scsi::Sense;

/// A malformed PDU: the peer broke the framing rules of RFC 7143 section 11.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PduError {
    /// The opcode is not defined by RFC 7143.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// The opcode is defined but this initiator never expects it.
    #[error("opcode {0:?} is not supported by this initiator")]
    UnsupportedOpcode(Opcode),
    /// The data segment is longer than declared MaxRecvDataSegmentLength or
    /// than the PDU type allows.
    #[error("{opcode:?} data segment of {len} bytes exceeds the limit of {max} bytes")]
    DataSegmentTooLong {
        /// The PDU's opcode.
        opcode: Opcode,
        /// DataSegmentLength as received.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// The data segment has a length this PDU type cannot have.
    #[error("{opcode:?} PDU with a data segment of wrong length {len}")]
    BadLength {
        /// The PDU's opcode.
        opcode: Opcode,
        /// DataSegmentLength as received.
        len: u32,
    },
    /// The CRC32C header digest does not match.
    #[error("header digest mismatch: computed {expected:#010x}, received {received:#010x}")]
    HeaderDigest {
        /// Computed digest.
        expected: u32,
        /// Digest on the wire.
        received: u32,
    },
    /// The CRC32C data digest does not match.
    #[error("data digest mismatch: computed {expected:#010x}, received {received:#010x}")]
    DataDigest {
        /// Computed digest.
        expected: u32,
        /// Digest on the wire.
        received: u32,
    },
    /// A header field has a value the PDU type forbids.
    #[error("invalid {field}: {value:#x}")]
    InvalidField {
        /// What the field is.
        field: &'static str,
        /// The value received.
        value: u32,
    },
}

/// Malformed `key=value` text (RFC 7143 section 6.1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    /// A text item has no `=`.
    #[error("text item without '=': {0:?}")]
    MissingEquals(String),
    /// A key is empty, too long (over 63 bytes) or has characters outside the allowed set.
    #[error("invalid key name {0:?}")]
    BadKey(String),
    /// A value is longer than allowed.
    #[error("value of {key} is {len} bytes long, over the limit")]
    ValueTooLong {
        /// The key.
        key: String,
        /// The value's length.
        len: usize,
    },
    /// The text is not UTF-8.
    #[error("text is not UTF-8")]
    NotUtf8,
    /// The text (possibly over several PDUs) is larger than this side accepts.
    #[error("text of {0} bytes exceeds the limit")]
    TooLong(usize),
    /// A numeric or boolean value does not parse or is out of range.
    #[error("bad value {value:?} for {key}")]
    BadValue {
        /// The key.
        key: String,
        /// The value received.
        value: String,
    },
}

/// Why a login (RFC 7143 section 6) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoginError {
    /// The target sent a malformed PDU.
    #[error(transparent)]
    Pdu(#[from] PduError),
    /// The target sent malformed text.
    #[error(transparent)]
    Text(#[from] TextError),
    /// The target answered with a PDU other than a Login Response.
    #[error("expected a Login Response, received {0:?}")]
    Unexpected(Opcode),
    /// The target rejected a login PDU.
    #[error("target rejected the login request: {0}")]
    Rejected(&'static str),
    /// The target refused the login with a status (RFC 7143 section 11.13.5).
    #[error("login refused by the target: {message} (status class {class:#04x}, detail {detail:#04x})")]
    Status {
        /// Status-Class.
        class: u8,
        /// Status-Detail.
        detail: u8,
        /// Meaning of the status.
        message: &'static str,
    },
    /// The target redirects elsewhere (not followed).
    #[error("target redirects the login to {0}")]
    Redirect(String),
    /// Authentication could not proceed (unsupported method, bad challenge...).
    #[error("authentication: {0}")]
    Auth(String),
    /// The target asks for authentication and we have no CHAP user.
    #[error(
        "target requires authentication (AuthMethod={0}); give a CHAP user in the URI (iscsi://USER@host/...) and its secret with --secret-file"
    )]
    AuthRequired(String),
    /// Mutual CHAP: the target did not prove it knows its secret, or
    /// answered as another user. It is not the target we meant to reach.
    #[error("the target failed mutual CHAP: {0}")]
    TargetAuth(String),
    /// The negotiation broke the rules of RFC 7143 section 6.2 or 13.
    #[error("negotiation of {key}: {message}")]
    Negotiation {
        /// The key.
        key: String,
        /// What went wrong.
        message: String,
    },
    /// The target broke the login sequence (tags, stages, ISID...).
    #[error("login protocol error: {0}")]
    Protocol(String),
    /// Bad local configuration (names, overrides).
    #[error("login configuration: {0}")]
    Config(String),
}

/// An error that ends a full-feature-phase connection: the target broke the
/// protocol, and every command in flight on the connection fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnError {
    /// A malformed PDU.
    #[error(transparent)]
    Pdu(#[from] PduError),
    /// A PDU names a task this connection does not have.
    #[error("{opcode:?} names unknown initiator task tag {itt:#010x}")]
    UnknownItt {
        /// The PDU's opcode.
        opcode: Opcode,
        /// The tag.
        itt: u32,
    },
    /// A PDU this initiator cannot receive in the full feature phase.
    #[error("unexpected {0:?} in the full feature phase")]
    Unexpected(Opcode),
    /// A Data-In PDU is out of sequence.
    #[error("task {itt:#010x}: DataSN {received} where {expected} was due")]
    DataSn {
        /// The task.
        itt: u32,
        /// Expected DataSN.
        expected: u32,
        /// Received DataSN.
        received: u32,
    },
    /// A Data-In PDU is not at the next offset (DataPDUInOrder=Yes).
    #[error("task {itt:#010x}: Data-In at buffer offset {received} where {expected} was due")]
    BufferOffset {
        /// The task.
        itt: u32,
        /// Expected offset.
        expected: u32,
        /// Received offset.
        received: u32,
    },
    /// Data-In or an R2T beyond the command's expected transfer length.
    #[error(
        "task {itt:#010x}: {what} at offset {offset} length {len} beyond expected transfer length {expected}"
    )]
    BeyondTransferLength {
        /// The task.
        itt: u32,
        /// "Data-In" or "R2T".
        what: &'static str,
        /// Offset.
        offset: u32,
        /// Length.
        len: u32,
        /// The command's expected data transfer length.
        expected: u32,
    },
    /// An R2T broke the rules of RFC 7143 section 11.8.
    #[error("task {itt:#010x}: bad R2T: {message}")]
    BadR2t {
        /// The task.
        itt: u32,
        /// What is wrong.
        message: String,
    },
    /// A response does not fit its command (status for a task with data still due...).
    #[error("task {itt:#010x}: {message}")]
    BadResponse {
        /// The task.
        itt: u32,
        /// What is wrong.
        message: String,
    },
    /// The target announced it drops the connection or session (Async Message).
    #[error("target drops the connection (async event {0})")]
    TargetDrop(u8),
    /// The transport failed or closed.
    #[error("connection closed: {0}")]
    Closed(String),
    /// The connection was logged out.
    #[error("connection is logged out")]
    LoggedOut,
}

/// Why one command failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// The command ended with a SCSI status other than GOOD.
    #[error("SCSI status {status:#04x} ({})", sense.as_ref().map_or_else(|| "no sense data".to_string(), |s| s.to_string()))]
    Status {
        /// SCSI status.
        status: u8,
        /// Decoded sense data (CHECK CONDITION).
        sense: Option<Sense>,
    },
    /// The iSCSI layer reported a target failure (SCSI Response with response != 0).
    #[error("iSCSI response {0:#04x}: target failure")]
    TargetFailure(u8),
    /// The target rejected the command PDU.
    #[error("target rejected the command: {0}")]
    Rejected(&'static str),
    /// The target returned less data than asked for.
    #[error("short transfer: {received} of {expected} bytes")]
    Short {
        /// Bytes received.
        received: u32,
        /// Bytes asked for.
        expected: u32,
    },
    /// The command was aborted (ABORT TASK, RFC 7143 section 11.5.1): the
    /// target will not complete it.
    #[error("the command was aborted ({0})")]
    Aborted(&'static str),
    /// The connection failed before the command completed.
    #[error(transparent)]
    Connection(#[from] ConnError),
}
