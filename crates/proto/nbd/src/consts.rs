//! Numbers of the NBD protocol (`doc/proto.md` of the NetworkBlockDevice
//! project), named as in the spec.

/// "NBDMAGIC": first 8 bytes the server sends (spec "Handshake").
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": newstyle magic in the greeting and before every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Oldstyle greeting magic (spec "Oldstyle negotiation").
pub const OLDSTYLE_MAGIC: u64 = 0x0000_4202_8186_1253;
/// Magic of every option reply (spec "Option reply").
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a request (spec "Request message").
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply (spec "Simple reply message").
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk (spec "Structured reply chunk message").
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Handshake flag: the server speaks fixed newstyle.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the server can omit the 124 zero bytes after EXPORT_NAME.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: the client speaks fixed newstyle.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: the server must omit the 124 zero bytes after EXPORT_NAME.
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

/// Transmission flags (spec "Transmission flags").
pub mod tflags {
    /// Always set by servers that send flags.
    pub const HAS_FLAGS: u16 = 1 << 0;
    /// The export is read-only.
    pub const READ_ONLY: u16 = 1 << 1;
    /// NBD_CMD_FLUSH is supported.
    pub const SEND_FLUSH: u16 = 1 << 2;
    /// NBD_CMD_FLAG_FUA is supported.
    pub const SEND_FUA: u16 = 1 << 3;
    /// The export has rotational characteristics.
    pub const ROTATIONAL: u16 = 1 << 4;
    /// NBD_CMD_TRIM is supported.
    pub const SEND_TRIM: u16 = 1 << 5;
    /// NBD_CMD_WRITE_ZEROES is supported.
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    /// NBD_CMD_FLAG_DF is supported.
    pub const SEND_DF: u16 = 1 << 7;
    /// Several connections to this export see one consistent image.
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
    /// NBD_CMD_RESIZE is supported.
    pub const SEND_RESIZE: u16 = 1 << 9;
    /// NBD_CMD_CACHE is supported.
    pub const SEND_CACHE: u16 = 1 << 10;
    /// NBD_CMD_FLAG_FAST_ZERO is supported.
    pub const SEND_FAST_ZERO: u16 = 1 << 11;
}

/// Option codes (spec "Option types").
pub mod opt {
    /// NBD_OPT_EXPORT_NAME.
    pub const EXPORT_NAME: u32 = 1;
    /// NBD_OPT_ABORT.
    pub const ABORT: u32 = 2;
    /// NBD_OPT_LIST.
    pub const LIST: u32 = 3;
    /// NBD_OPT_STARTTLS.
    pub const STARTTLS: u32 = 5;
    /// NBD_OPT_INFO.
    pub const INFO: u32 = 6;
    /// NBD_OPT_GO.
    pub const GO: u32 = 7;
    /// NBD_OPT_STRUCTURED_REPLY.
    pub const STRUCTURED_REPLY: u32 = 8;
    /// NBD_OPT_LIST_META_CONTEXT.
    pub const LIST_META_CONTEXT: u32 = 9;
    /// NBD_OPT_SET_META_CONTEXT.
    pub const SET_META_CONTEXT: u32 = 10;
    /// NBD_OPT_EXTENDED_HEADERS (not supported here).
    pub const EXTENDED_HEADERS: u32 = 11;
}

/// Option reply types (spec "Option reply types").
pub mod rep {
    /// NBD_REP_ACK.
    pub const ACK: u32 = 1;
    /// NBD_REP_SERVER.
    pub const SERVER: u32 = 2;
    /// NBD_REP_INFO.
    pub const INFO: u32 = 3;
    /// NBD_REP_META_CONTEXT.
    pub const META_CONTEXT: u32 = 4;
    /// Bit 31 marks error replies.
    pub const ERR_BIT: u32 = 1 << 31;
    /// NBD_REP_ERR_UNSUP.
    pub const ERR_UNSUP: u32 = ERR_BIT | 1;
    /// NBD_REP_ERR_POLICY.
    pub const ERR_POLICY: u32 = ERR_BIT | 2;
    /// NBD_REP_ERR_INVALID.
    pub const ERR_INVALID: u32 = ERR_BIT | 3;
    /// NBD_REP_ERR_PLATFORM.
    pub const ERR_PLATFORM: u32 = ERR_BIT | 4;
    /// NBD_REP_ERR_TLS_REQD.
    pub const ERR_TLS_REQD: u32 = ERR_BIT | 5;
    /// NBD_REP_ERR_UNKNOWN.
    pub const ERR_UNKNOWN: u32 = ERR_BIT | 6;
    /// NBD_REP_ERR_SHUTDOWN.
    pub const ERR_SHUTDOWN: u32 = ERR_BIT | 7;
    /// NBD_REP_ERR_BLOCK_SIZE_REQD.
    pub const ERR_BLOCK_SIZE_REQD: u32 = ERR_BIT | 8;
    /// NBD_REP_ERR_TOO_BIG.
    pub const ERR_TOO_BIG: u32 = ERR_BIT | 9;
}

/// Information types of NBD_REP_INFO (spec "NBD_OPT_INFO and NBD_OPT_GO").
pub mod info {
    /// NBD_INFO_EXPORT: size and transmission flags.
    pub const EXPORT: u16 = 0;
    /// NBD_INFO_NAME.
    pub const NAME: u16 = 1;
    /// NBD_INFO_DESCRIPTION.
    pub const DESCRIPTION: u16 = 2;
    /// NBD_INFO_BLOCK_SIZE.
    pub const BLOCK_SIZE: u16 = 3;
}

/// Command types (spec "Request types").
pub mod cmd {
    /// NBD_CMD_READ.
    pub const READ: u16 = 0;
    /// NBD_CMD_WRITE.
    pub const WRITE: u16 = 1;
    /// NBD_CMD_DISC.
    pub const DISC: u16 = 2;
    /// NBD_CMD_FLUSH.
    pub const FLUSH: u16 = 3;
    /// NBD_CMD_TRIM.
    pub const TRIM: u16 = 4;
    /// NBD_CMD_CACHE.
    pub const CACHE: u16 = 5;
    /// NBD_CMD_WRITE_ZEROES.
    pub const WRITE_ZEROES: u16 = 6;
    /// NBD_CMD_BLOCK_STATUS.
    pub const BLOCK_STATUS: u16 = 7;
}

/// Command flags (spec "Command flags").
pub mod cflags {
    /// NBD_CMD_FLAG_FUA.
    pub const FUA: u16 = 1 << 0;
    /// NBD_CMD_FLAG_NO_HOLE.
    pub const NO_HOLE: u16 = 1 << 1;
    /// NBD_CMD_FLAG_DF.
    pub const DF: u16 = 1 << 2;
    /// NBD_CMD_FLAG_REQ_ONE.
    pub const REQ_ONE: u16 = 1 << 3;
    /// NBD_CMD_FLAG_FAST_ZERO.
    pub const FAST_ZERO: u16 = 1 << 4;
}

/// Structured reply chunk types (spec "Structured reply types").
pub mod chunk {
    /// NBD_REPLY_TYPE_NONE.
    pub const NONE: u16 = 0;
    /// NBD_REPLY_TYPE_OFFSET_DATA.
    pub const OFFSET_DATA: u16 = 1;
    /// NBD_REPLY_TYPE_OFFSET_HOLE.
    pub const OFFSET_HOLE: u16 = 2;
    /// NBD_REPLY_TYPE_BLOCK_STATUS.
    pub const BLOCK_STATUS: u16 = 5;
    /// Bit 15 marks error chunks.
    pub const ERR_BIT: u16 = 1 << 15;
    /// NBD_REPLY_TYPE_ERROR.
    pub const ERROR: u16 = ERR_BIT | 1;
    /// NBD_REPLY_TYPE_ERROR_OFFSET.
    pub const ERROR_OFFSET: u16 = ERR_BIT | 2;
}

/// Structured reply flag NBD_REPLY_FLAG_DONE: last chunk of a reply.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;

/// `base:allocation` state bit: the extent is a hole.
pub const STATE_HOLE: u32 = 1 << 0;
/// `base:allocation` state bit: the extent reads as zeroes.
pub const STATE_ZERO: u32 = 1 << 1;
/// The one metadata context this crate speaks.
pub const BASE_ALLOCATION: &str = "base:allocation";

/// Default maximum payload when none was negotiated, and the size the spec
/// says is never a denial of service (2^25).
pub const DEFAULT_MAX_PAYLOAD: u32 = 1 << 25;
/// Largest option request or option reply payload accepted (names,
/// descriptions and contexts are at most 4096 bytes each).
pub const MAX_OPTION_PAYLOAD: u32 = 64 * 1024;
/// Largest string (export name, description, error message) in the protocol.
pub const MAX_STRING: usize = 4096;
/// Largest block status chunk the spec lets a server send (2^20 extents).
pub const MAX_BLOCK_STATUS_CHUNK: u32 = 4 + 8 * (1 << 20);
/// Structured reply chunks every request may have on top of the ones its
/// length allows (errors, a hole and data at either end, block status).
pub const CHUNK_ALLOWANCE: u32 = 16;
/// A reply may have one more chunk per this many bytes of the request: a
/// server splitting a read at 512-byte extents stays within the bound, a
/// server sending one-byte chunks does not (see
/// [`max_reply_chunks`](crate::client::max_reply_chunks)).
pub const MIN_AVERAGE_CHUNK: u32 = 512;
/// Size of a request header.
pub const REQUEST_HEADER_LEN: usize = 28;
/// Size of a simple reply header.
pub const SIMPLE_REPLY_HEADER_LEN: usize = 16;
/// Size of a structured reply chunk header.
pub const STRUCTURED_REPLY_HEADER_LEN: usize = 20;
