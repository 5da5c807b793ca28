//! iSCSI PDUs: the 48-byte Basic Header Segment (BHS), additional header
//! segments (AHS), the data segment with its padding, and the optional
//! CRC32C header and data digests (RFC 7143 section 11).
//!
//! Every header type implements [`BhsCodec`]: `write` fills a 48-byte BHS,
//! `read` parses one and returns a typed
//! [`PduError`](crate::error::PduError) for anything malformed. [`Codec`]
//! frames whole PDUs out of a byte buffer, checks digests and bounds the data
//! segment by the `MaxRecvDataSegmentLength` this side declared, so nothing
//! the peer sends can make it allocate more than that.
//!
//! Files: [`bhs`] (the BHS layout and the [`BhsCodec`] trait), `initiator`
//! and `target` (one header type per PDU, by sender), `header` (the
//! [`Header`] enum over them) and `framer` ([`Codec`], [`Pdu`], [`OutPdu`]).
//! Everything is re-exported here.

pub mod bhs;
mod framer;
mod header;
mod initiator;
mod target;

pub use self::bhs::{BHS_LEN, BhsCodec, MAX_AHS_LEN, MAX_DATA_SEGMENT, RESERVED_TAG, Stage};
pub use self::framer::{Codec, OutPdu, Pdu};
pub use self::header::Header;
pub use self::initiator::{
    DataOut, LoginRequest, LogoutRequest, NopOut, ScsiCommand, TaskMgmtRequest, TextRequest, logout_reason,
    tmf,
};
pub use self::target::{
    AsyncMessage, DataIn, LoginResponse, LogoutResponse, NopIn, R2t, Reject, ScsiResponse, TaskMgmtResponse,
    TextResponse, reject_reason_text,
};
pub use crate::opcode::Opcode;
