//! iSCSI PDUs: the 48-byte Basic Header Segment (BHS), additional header
//! segments (AHS), the data segment with its padding, and the optional
//! CRC32C header and data digests (RFC 7143 section 11).
//!
//! Every header type implements [`BhsCodec`]: `write` fills a 48-byte BHS,
//! `read` parses one and returns a typed [`PduError`] for anything malformed.
//! [`Codec`] frames whole PDUs out of a byte buffer, checks digests and bounds
//! the data segment by the `MaxRecvDataSegmentLength` this side declared, so
//! nothing the peer sends can make it allocate more than that.

use bytes::{Buf, Bytes, BytesMut};

use crate::digest;
use crate::error::PduError;

/// Length of the Basic Header Segment (RFC 7143 section 11.2).
pub const BHS_LEN: usize = 48;
/// The reserved task tag `0xffffffff` (RFC 7143 section 11.2.1.8).
pub const RESERVED_TAG: u32 = 0xffff_ffff;
/// Largest total AHS length in bytes (the 8-bit TotalAHSLength counts words).
pub const MAX_AHS_LEN: usize = 255 * 4;
/// Largest value of the 24-bit DataSegmentLength field.
pub const MAX_DATA_SEGMENT: u32 = 0x00ff_ffff;

/// PDU opcodes (RFC 7143 section 11.2.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// NOP-Out (initiator).
    NopOut = 0x00,
    /// SCSI Command (initiator).
    ScsiCommand = 0x01,
    /// SCSI Task Management Function Request (initiator).
    TaskMgmtRequest = 0x02,
    /// Login Request (initiator).
    LoginRequest = 0x03,
    /// Text Request (initiator).
    TextRequest = 0x04,
    /// SCSI Data-Out (initiator).
    DataOut = 0x05,
    /// Logout Request (initiator).
    LogoutRequest = 0x06,
    /// SNACK Request (initiator).
    SnackRequest = 0x10,
    /// NOP-In (target).
    NopIn = 0x20,
    /// SCSI Response (target).
    ScsiResponse = 0x21,
    /// SCSI Task Management Function Response (target).
    TaskMgmtResponse = 0x22,
    /// Login Response (target).
    LoginResponse = 0x23,
    /// Text Response (target).
    TextResponse = 0x24,
    /// SCSI Data-In (target).
    DataIn = 0x25,
    /// Logout Response (target).
    LogoutResponse = 0x26,
    /// Ready To Transfer (target).
    R2t = 0x31,
    /// Asynchronous Message (target).
    AsyncMessage = 0x32,
    /// Reject (target).
    Reject = 0x3f,
}

impl Opcode {
    /// Maps the six opcode bits; `None` for values RFC 7143 does not define.
    pub fn from_u8(v: u8) -> Option<Opcode> {
        use Opcode::*;
        Some(match v & 0x3f {
            0x00 => NopOut,
            0x01 => ScsiCommand,
            0x02 => TaskMgmtRequest,
            0x03 => LoginRequest,
            0x04 => TextRequest,
            0x05 => DataOut,
            0x06 => LogoutRequest,
            0x10 => SnackRequest,
            0x20 => NopIn,
            0x21 => ScsiResponse,
            0x22 => TaskMgmtResponse,
            0x23 => LoginResponse,
            0x24 => TextResponse,
            0x25 => DataIn,
            0x26 => LogoutResponse,
            0x31 => R2t,
            0x32 => AsyncMessage,
            0x3f => Reject,
            _ => return None,
        })
    }
}

/// Login stages (CSG/NSG, RFC 7143 section 11.12.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// 0: SecurityNegotiation.
    Security,
    /// 1: LoginOperationalNegotiation.
    Operational,
    /// 3: FullFeaturePhase.
    FullFeature,
}

impl Stage {
    fn bits(self) -> u8 {
        match self {
            Stage::Security => 0,
            Stage::Operational => 1,
            Stage::FullFeature => 3,
        }
    }

    fn from_bits(v: u8) -> Result<Stage, PduError> {
        match v & 3 {
            0 => Ok(Stage::Security),
            1 => Ok(Stage::Operational),
            3 => Ok(Stage::FullFeature),
            v => Err(PduError::InvalidField { field: "login stage", value: u32::from(v) }),
        }
    }
}

fn get16(b: &[u8; BHS_LEN], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}
fn get32(b: &[u8; BHS_LEN], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn get64(b: &[u8; BHS_LEN], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_be_bytes(a)
}
fn put16(b: &mut [u8; BHS_LEN], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_be_bytes());
}
fn put32(b: &mut [u8; BHS_LEN], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_be_bytes());
}
fn put64(b: &mut [u8; BHS_LEN], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_be_bytes());
}

/// Encodes and decodes one header type to and from a BHS. `write` leaves
/// TotalAHSLength and DataSegmentLength (bytes 4..8) to the [`Codec`].
pub trait BhsCodec: Sized {
    /// The opcode this header carries.
    const OPCODE: Opcode;
    /// Fills `b` (already zeroed) with this header.
    fn write(&self, b: &mut [u8; BHS_LEN]);
    /// Parses a BHS whose opcode is [`Self::OPCODE`].
    ///
    /// # Errors
    /// A typed [`PduError`] for any invalid field.
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError>;
}

/// NOP-Out (RFC 7143 section 11.18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NopOut {
    /// I bit.
    pub immediate: bool,
    /// Logical unit number (copied from a NOP-In being answered).
    pub lun: u64,
    /// Initiator task tag, or [`RESERVED_TAG`] when answering a NOP-In.
    pub itt: u32,
    /// Target transfer tag copied from the NOP-In, or [`RESERVED_TAG`].
    pub ttt: u32,
    /// CmdSN.
    pub cmd_sn: u32,
    /// ExpStatSN.
    pub exp_stat_sn: u32,
}

impl BhsCodec for NopOut {
    const OPCODE: Opcode = Opcode::NopOut;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8 | if self.immediate { 0x40 } else { 0 };
        b[1] = 0x80;
        put64(b, 8, self.lun);
        put32(b, 16, self.itt);
        put32(b, 20, self.ttt);
        put32(b, 24, self.cmd_sn);
        put32(b, 28, self.exp_stat_sn);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        Ok(NopOut {
            immediate: b[0] & 0x40 != 0,
            lun: get64(b, 8),
            itt: get32(b, 16),
            ttt: get32(b, 20),
            cmd_sn: get32(b, 24),
            exp_stat_sn: get32(b, 28),
        })
    }
}

/// SCSI Command (RFC 7143 section 11.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScsiCommand {
    /// I bit.
    pub immediate: bool,
    /// F bit: no unsolicited Data-Out follows.
    pub final_: bool,
    /// R bit: data flows from the target.
    pub read: bool,
    /// W bit: data flows to the target.
    pub write: bool,
    /// Task attributes (0 untagged, 1 simple, 2 ordered, 3 head of queue, 4 ACA).
    pub attr: u8,
    /// Logical unit number (encoded).
    pub lun: u64,
    /// Initiator task tag.
    pub itt: u32,
    /// Expected Data Transfer Length.
    pub expected_len: u32,
    /// CmdSN.
    pub cmd_sn: u32,
    /// ExpStatSN.
    pub exp_stat_sn: u32,
    /// Command descriptor block (up to 16 bytes here; longer CDBs need an AHS).
    pub cdb: [u8; 16],
}

impl BhsCodec for ScsiCommand {
    const OPCODE: Opcode = Opcode::ScsiCommand;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8 | if self.immediate { 0x40 } else { 0 };
        b[1] = (self.attr & 7)
            | if self.final_ { 0x80 } else { 0 }
            | if self.read { 0x40 } else { 0 }
            | if self.write { 0x20 } else { 0 };
        put64(b, 8, self.lun);
        put32(b, 16, self.itt);
        put32(b, 20, self.expected_len);
        put32(b, 24, self.cmd_sn);
        put32(b, 28, self.exp_stat_sn);
        b[32..48].copy_from_slice(&self.cdb);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        let mut cdb = [0u8; 16];
        cdb.copy_from_slice(&b[32..48]);
        Ok(ScsiCommand {
            immediate: b[0] & 0x40 != 0,
            final_: b[1] & 0x80 != 0,
            read: b[1] & 0x40 != 0,
            write: b[1] & 0x20 != 0,
            attr: b[1] & 7,
            lun: get64(b, 8),
            itt: get32(b, 16),
            expected_len: get32(b, 20),
            cmd_sn: get32(b, 24),
            exp_stat_sn: get32(b, 28),
            cdb,
        })
    }
}

/// Login Request (RFC 7143 section 11.12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginRequest {
    /// T bit: the initiator is ready to move to `nsg`.
    pub transit: bool,
    /// C bit: the text continues in the next PDU.
    pub cont: bool,
    /// Current stage.
    pub csg: Stage,
    /// Next stage (meaningful with `transit`).
    pub nsg: Stage,
    /// Version-max.
    pub version_max: u8,
    /// Version-min.
    pub version_min: u8,
    /// Initiator session id.
    pub isid: [u8; 6],
    /// Target session identifying handle (0 for a new session).
    pub tsih: u16,
    /// Initiator task tag.
    pub itt: u32,
    /// Connection id.
    pub cid: u16,
    /// CmdSN.
    pub cmd_sn: u32,
    /// ExpStatSN.
    pub exp_stat_sn: u32,
}

impl BhsCodec for LoginRequest {
    const OPCODE: Opcode = Opcode::LoginRequest;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8 | 0x40;
        b[1] = if self.transit { 0x80 } else { 0 }
            | if self.cont { 0x40 } else { 0 }
            | (self.csg.bits() << 2)
            | if self.transit { self.nsg.bits() } else { 0 };
        b[2] = self.version_max;
        b[3] = self.version_min;
        b[8..14].copy_from_slice(&self.isid);
        put16(b, 14, self.tsih);
        put32(b, 16, self.itt);
        put16(b, 20, self.cid);
        put32(b, 24, self.cmd_sn);
        put32(b, 28, self.exp_stat_sn);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        let mut isid = [0u8; 6];
        isid.copy_from_slice(&b[8..14]);
        let transit = b[1] & 0x80 != 0;
        Ok(LoginRequest {
            transit,
            cont: b[1] & 0x40 != 0,
            csg: Stage::from_bits(b[1] >> 2)?,
            nsg: if transit { Stage::from_bits(b[1])? } else { Stage::Security },
            version_max: b[2],
            version_min: b[3],
            isid,
            tsih: get16(b, 14),
            itt: get32(b, 16),
            cid: get16(b, 20),
            cmd_sn: get32(b, 24),
            exp_stat_sn: get32(b, 28),
        })
    }
}

/// Text Request (RFC 7143 section 11.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextRequest {
    /// I bit.
    pub immediate: bool,
    /// F bit: the last PDU of this text request.
    pub final_: bool,
    /// C bit: the text continues in the next PDU.
    pub cont: bool,
    /// Logical unit number.
    pub lun: u64,
    /// Initiator task tag.
    pub itt: u32,
    /// Target transfer tag ([`RESERVED_TAG`] to start a new exchange).
    pub ttt: u32,
    /// CmdSN.
    pub cmd_sn: u32,
    /// ExpStatSN.
    pub exp_stat_sn: u32,
}

impl BhsCodec for TextRequest {
    const OPCODE: Opcode = Opcode::TextRequest;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8 | if self.immediate { 0x40 } else { 0 };
        b[1] = if self.final_ { 0x80 } else { 0 } | if self.cont { 0x40 } else { 0 };
        put64(b, 8, self.lun);
        put32(b, 16, self.itt);
        put32(b, 20, self.ttt);
        put32(b, 24, self.cmd_sn);
        put32(b, 28, self.exp_stat_sn);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        Ok(TextRequest {
            immediate: b[0] & 0x40 != 0,
            final_: b[1] & 0x80 != 0,
            cont: b[1] & 0x40 != 0,
            lun: get64(b, 8),
            itt: get32(b, 16),
            ttt: get32(b, 20),
            cmd_sn: get32(b, 24),
            exp_stat_sn: get32(b, 28),
        })
    }
}

/// SCSI Data-Out (RFC 7143 section 11.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataOut {
    /// F bit: the last PDU of this sequence.
    pub final_: bool,
    /// Logical unit number.
    pub lun: u64,
    /// Initiator task tag.
    pub itt: u32,
    /// Target transfer tag from the R2T, or [`RESERVED_TAG`] for unsolicited data.
    pub ttt: u32,
    /// ExpStatSN.
    pub exp_stat_sn: u32,
    /// DataSN within this sequence.
    pub data_sn: u32,
    /// Offset of this data in the command's buffer.
    pub buffer_offset: u32,
}

impl BhsCodec for DataOut {
    const OPCODE: Opcode = Opcode::DataOut;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8;
        b[1] = if self.final_ { 0x80 } else { 0 };
        put64(b, 8, self.lun);
        put32(b, 16, self.itt);
        put32(b, 20, self.ttt);
        put32(b, 28, self.exp_stat_sn);
        put32(b, 36, self.data_sn);
        put32(b, 40, self.buffer_offset);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        Ok(DataOut {
            final_: b[1] & 0x80 != 0,
            lun: get64(b, 8),
            itt: get32(b, 16),
            ttt: get32(b, 20),
            exp_stat_sn: get32(b, 28),
            data_sn: get32(b, 36),
            buffer_offset: get32(b, 40),
        })
    }
}

/// Logout reason codes (RFC 7143 section 11.14.1).
pub mod logout_reason {
    /// Close the session: all connections are closed.
    pub const CLOSE_SESSION: u8 = 0;
    /// Close the connection named by CID.
    pub const CLOSE_CONNECTION: u8 = 1;
    /// Remove the connection for recovery.
    pub const REMOVE_FOR_RECOVERY: u8 = 2;
}

/// Logout Request (RFC 7143 section 11.14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogoutRequest {
    /// I bit.
    pub immediate: bool,
    /// Reason code ([`logout_reason`]).
    pub reason: u8,
    /// Initiator task tag.
    pub itt: u32,
    /// Connection id to close (reasons 1 and 2).
    pub cid: u16,
    /// CmdSN.
    pub cmd_sn: u32,
    /// ExpStatSN.
    pub exp_stat_sn: u32,
}

impl BhsCodec for LogoutRequest {
    const OPCODE: Opcode = Opcode::LogoutRequest;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8 | if self.immediate { 0x40 } else { 0 };
        b[1] = 0x80 | (self.reason & 0x7f);
        put32(b, 16, self.itt);
        put16(b, 20, self.cid);
        put32(b, 24, self.cmd_sn);
        put32(b, 28, self.exp_stat_sn);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        Ok(LogoutRequest {
            immediate: b[0] & 0x40 != 0,
            reason: b[1] & 0x7f,
            itt: get32(b, 16),
            cid: get16(b, 20),
            cmd_sn: get32(b, 24),
            exp_stat_sn: get32(b, 28),
        })
    }
}

/// NOP-In (RFC 7143 section 11.19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NopIn {
    /// Logical unit number.
    pub lun: u64,
    /// Initiator task tag (of the NOP-Out answered), or [`RESERVED_TAG`].
    pub itt: u32,
    /// Target transfer tag: not [`RESERVED_TAG`] when the target wants an answer.
    pub ttt: u32,
    /// StatSN.
    pub stat_sn: u32,
    /// ExpCmdSN.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN.
    pub max_cmd_sn: u32,
}

impl BhsCodec for NopIn {
    const OPCODE: Opcode = Opcode::NopIn;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8;
        b[1] = 0x80;
        put64(b, 8, self.lun);
        put32(b, 16, self.itt);
        put32(b, 20, self.ttt);
        put32(b, 24, self.stat_sn);
        put32(b, 28, self.exp_cmd_sn);
        put32(b, 32, self.max_cmd_sn);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        Ok(NopIn {
            lun: get64(b, 8),
            itt: get32(b, 16),
            ttt: get32(b, 20),
            stat_sn: get32(b, 24),
            exp_cmd_sn: get32(b, 28),
            max_cmd_sn: get32(b, 32),
        })
    }
}

/// SCSI Response (RFC 7143 section 11.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScsiResponse {
    /// o bit: bidirectional read residual overflow.
    pub bidi_overflow: bool,
    /// u bit: bidirectional read residual underflow.
    pub bidi_underflow: bool,
    /// O bit: residual overflow.
    pub overflow: bool,
    /// U bit: residual underflow.
    pub underflow: bool,
    /// iSCSI response (0 = command completed at target).
    pub response: u8,
    /// SCSI status (valid when `response` is 0).
    pub status: u8,
    /// Initiator task tag.
    pub itt: u32,
    /// SNACK tag.
    pub snack_tag: u32,
    /// StatSN.
    pub stat_sn: u32,
    /// ExpCmdSN.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN.
    pub max_cmd_sn: u32,
    /// ExpDataSN.
    pub exp_data_sn: u32,
    /// Bidirectional read residual count.
    pub bidi_residual: u32,
    /// Residual count.
    pub residual: u32,
}

impl BhsCodec for ScsiResponse {
    const OPCODE: Opcode = Opcode::ScsiResponse;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8;
        b[1] = 0x80
            | if self.bidi_overflow { 0x10 } else { 0 }
            | if self.bidi_underflow { 0x08 } else { 0 }
            | if self.overflow { 0x04 } else { 0 }
            | if self.underflow { 0x02 } else { 0 };
        b[2] = self.response;
        b[3] = self.status;
        put32(b, 16, self.itt);
        put32(b, 20, self.snack_tag);
        put32(b, 24, self.stat_sn);
        put32(b, 28, self.exp_cmd_sn);
        put32(b, 32, self.max_cmd_sn);
        put32(b, 36, self.exp_data_sn);
        put32(b, 40, self.bidi_residual);
        put32(b, 44, self.residual);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        let r = ScsiResponse {
            bidi_overflow: b[1] & 0x10 != 0,
            bidi_underflow: b[1] & 0x08 != 0,
            overflow: b[1] & 0x04 != 0,
            underflow: b[1] & 0x02 != 0,
            response: b[2],
            status: b[3],
            itt: get32(b, 16),
            snack_tag: get32(b, 20),
            stat_sn: get32(b, 24),
            exp_cmd_sn: get32(b, 28),
            max_cmd_sn: get32(b, 32),
            exp_data_sn: get32(b, 36),
            bidi_residual: get32(b, 40),
            residual: get32(b, 44),
        };
        if r.overflow && r.underflow {
            return Err(PduError::InvalidField { field: "SCSI Response O and U bits both set", value: 1 });
        }
        Ok(r)
    }
}

/// Login Response (RFC 7143 section 11.13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginResponse {
    /// T bit: the target moves to `nsg`.
    pub transit: bool,
    /// C bit: the text continues in the next PDU.
    pub cont: bool,
    /// Current stage.
    pub csg: Stage,
    /// Next stage (meaningful with `transit`).
    pub nsg: Stage,
    /// Version-max.
    pub version_max: u8,
    /// Version-active.
    pub version_active: u8,
    /// Initiator session id (echoed).
    pub isid: [u8; 6],
    /// Target session identifying handle.
    pub tsih: u16,
    /// Initiator task tag (echoed).
    pub itt: u32,
    /// StatSN.
    pub stat_sn: u32,
    /// ExpCmdSN.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN.
    pub max_cmd_sn: u32,
    /// Status-Class (0 success, 1 redirection, 2 initiator error, 3 target error).
    pub status_class: u8,
    /// Status-Detail.
    pub status_detail: u8,
}

impl BhsCodec for LoginResponse {
    const OPCODE: Opcode = Opcode::LoginResponse;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8;
        b[1] = if self.transit { 0x80 } else { 0 }
            | if self.cont { 0x40 } else { 0 }
            | (self.csg.bits() << 2)
            | if self.transit { self.nsg.bits() } else { 0 };
        b[2] = self.version_max;
        b[3] = self.version_active;
        b[8..14].copy_from_slice(&self.isid);
        put16(b, 14, self.tsih);
        put32(b, 16, self.itt);
        put32(b, 24, self.stat_sn);
        put32(b, 28, self.exp_cmd_sn);
        put32(b, 32, self.max_cmd_sn);
        b[36] = self.status_class;
        b[37] = self.status_detail;
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        let mut isid = [0u8; 6];
        isid.copy_from_slice(&b[8..14]);
        let transit = b[1] & 0x80 != 0;
        // A failed login response may carry any stage bits; do not reject it
        // for that, so the status reaches the caller.
        let failed = b[36] != 0;
        let stage = |v: u8| {
            if failed { Ok(Stage::from_bits(v).unwrap_or(Stage::Security)) } else { Stage::from_bits(v) }
        };
        Ok(LoginResponse {
            transit,
            cont: b[1] & 0x40 != 0,
            csg: stage(b[1] >> 2)?,
            nsg: if transit { stage(b[1])? } else { Stage::Security },
            version_max: b[2],
            version_active: b[3],
            isid,
            tsih: get16(b, 14),
            itt: get32(b, 16),
            stat_sn: get32(b, 24),
            exp_cmd_sn: get32(b, 28),
            max_cmd_sn: get32(b, 32),
            status_class: b[36],
            status_detail: b[37],
        })
    }
}

/// Text Response (RFC 7143 section 11.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextResponse {
    /// F bit: the last response of this exchange.
    pub final_: bool,
    /// C bit: the text continues in the next PDU.
    pub cont: bool,
    /// Logical unit number.
    pub lun: u64,
    /// Initiator task tag (echoed).
    pub itt: u32,
    /// Target transfer tag: to be echoed to get the rest of a long answer.
    pub ttt: u32,
    /// StatSN.
    pub stat_sn: u32,
    /// ExpCmdSN.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN.
    pub max_cmd_sn: u32,
}

impl BhsCodec for TextResponse {
    const OPCODE: Opcode = Opcode::TextResponse;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8;
        b[1] = if self.final_ { 0x80 } else { 0 } | if self.cont { 0x40 } else { 0 };
        put64(b, 8, self.lun);
        put32(b, 16, self.itt);
        put32(b, 20, self.ttt);
        put32(b, 24, self.stat_sn);
        put32(b, 28, self.exp_cmd_sn);
        put32(b, 32, self.max_cmd_sn);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        let r = TextResponse {
            final_: b[1] & 0x80 != 0,
            cont: b[1] & 0x40 != 0,
            lun: get64(b, 8),
            itt: get32(b, 16),
            ttt: get32(b, 20),
            stat_sn: get32(b, 24),
            exp_cmd_sn: get32(b, 28),
            max_cmd_sn: get32(b, 32),
        };
        if r.final_ && r.cont {
            return Err(PduError::InvalidField { field: "Text Response F and C bits both set", value: 1 });
        }
        Ok(r)
    }
}

/// SCSI Data-In (RFC 7143 section 11.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataIn {
    /// F bit: the last PDU of this sequence.
    pub final_: bool,
    /// A bit: acknowledge requested (ErrorRecoveryLevel > 0 only).
    pub ack: bool,
    /// O bit (valid with `has_status`).
    pub overflow: bool,
    /// U bit (valid with `has_status`).
    pub underflow: bool,
    /// S bit: this PDU carries the command's status.
    pub has_status: bool,
    /// SCSI status (valid with `has_status`).
    pub status: u8,
    /// Logical unit number.
    pub lun: u64,
    /// Initiator task tag.
    pub itt: u32,
    /// Target transfer tag.
    pub ttt: u32,
    /// StatSN (valid with `has_status`).
    pub stat_sn: u32,
    /// ExpCmdSN.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN.
    pub max_cmd_sn: u32,
    /// DataSN.
    pub data_sn: u32,
    /// Offset of this data in the command's buffer.
    pub buffer_offset: u32,
    /// Residual count (valid with `has_status`).
    pub residual: u32,
}

impl BhsCodec for DataIn {
    const OPCODE: Opcode = Opcode::DataIn;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8;
        b[1] = if self.final_ { 0x80 } else { 0 }
            | if self.ack { 0x40 } else { 0 }
            | if self.overflow { 0x04 } else { 0 }
            | if self.underflow { 0x02 } else { 0 }
            | if self.has_status { 0x01 } else { 0 };
        b[3] = self.status;
        put64(b, 8, self.lun);
        put32(b, 16, self.itt);
        put32(b, 20, self.ttt);
        put32(b, 24, self.stat_sn);
        put32(b, 28, self.exp_cmd_sn);
        put32(b, 32, self.max_cmd_sn);
        put32(b, 36, self.data_sn);
        put32(b, 40, self.buffer_offset);
        put32(b, 44, self.residual);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        let r = DataIn {
            final_: b[1] & 0x80 != 0,
            ack: b[1] & 0x40 != 0,
            overflow: b[1] & 0x04 != 0,
            underflow: b[1] & 0x02 != 0,
            has_status: b[1] & 0x01 != 0,
            status: b[3],
            lun: get64(b, 8),
            itt: get32(b, 16),
            ttt: get32(b, 20),
            stat_sn: get32(b, 24),
            exp_cmd_sn: get32(b, 28),
            max_cmd_sn: get32(b, 32),
            data_sn: get32(b, 36),
            buffer_offset: get32(b, 40),
            residual: get32(b, 44),
        };
        // RFC 7143 section 11.7.3: the S bit may be set only with the F bit.
        if r.has_status && !r.final_ {
            return Err(PduError::InvalidField { field: "Data-In S bit without F bit", value: 1 });
        }
        if r.overflow && r.underflow {
            return Err(PduError::InvalidField { field: "Data-In O and U bits both set", value: 1 });
        }
        Ok(r)
    }
}

/// Logout Response (RFC 7143 section 11.15).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogoutResponse {
    /// 0 closed successfully, 1 CID not found, 2 recovery not supported, 3 cleanup failed.
    pub response: u8,
    /// Initiator task tag (echoed).
    pub itt: u32,
    /// StatSN.
    pub stat_sn: u32,
    /// ExpCmdSN.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN.
    pub max_cmd_sn: u32,
    /// Time2Wait, seconds.
    pub time2wait: u16,
    /// Time2Retain, seconds.
    pub time2retain: u16,
}

impl BhsCodec for LogoutResponse {
    const OPCODE: Opcode = Opcode::LogoutResponse;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8;
        b[1] = 0x80;
        b[2] = self.response;
        put32(b, 16, self.itt);
        put32(b, 24, self.stat_sn);
        put32(b, 28, self.exp_cmd_sn);
        put32(b, 32, self.max_cmd_sn);
        put16(b, 40, self.time2wait);
        put16(b, 42, self.time2retain);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        Ok(LogoutResponse {
            response: b[2],
            itt: get32(b, 16),
            stat_sn: get32(b, 24),
            exp_cmd_sn: get32(b, 28),
            max_cmd_sn: get32(b, 32),
            time2wait: get16(b, 40),
            time2retain: get16(b, 42),
        })
    }
}

/// Ready To Transfer (RFC 7143 section 11.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct R2t {
    /// Logical unit number.
    pub lun: u64,
    /// Initiator task tag.
    pub itt: u32,
    /// Target transfer tag, echoed in the Data-Out PDUs.
    pub ttt: u32,
    /// StatSN (the next one; not advanced).
    pub stat_sn: u32,
    /// ExpCmdSN.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN.
    pub max_cmd_sn: u32,
    /// R2TSN.
    pub r2t_sn: u32,
    /// Buffer offset of the requested data.
    pub buffer_offset: u32,
    /// Desired Data Transfer Length.
    pub desired_len: u32,
}

impl BhsCodec for R2t {
    const OPCODE: Opcode = Opcode::R2t;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8;
        b[1] = 0x80;
        put64(b, 8, self.lun);
        put32(b, 16, self.itt);
        put32(b, 20, self.ttt);
        put32(b, 24, self.stat_sn);
        put32(b, 28, self.exp_cmd_sn);
        put32(b, 32, self.max_cmd_sn);
        put32(b, 36, self.r2t_sn);
        put32(b, 40, self.buffer_offset);
        put32(b, 44, self.desired_len);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        let r = R2t {
            lun: get64(b, 8),
            itt: get32(b, 16),
            ttt: get32(b, 20),
            stat_sn: get32(b, 24),
            exp_cmd_sn: get32(b, 28),
            max_cmd_sn: get32(b, 32),
            r2t_sn: get32(b, 36),
            buffer_offset: get32(b, 40),
            desired_len: get32(b, 44),
        };
        // RFC 7143 section 11.8.6: the desired length is never 0, and the
        // target transfer tag is never the reserved tag.
        if r.desired_len == 0 {
            return Err(PduError::InvalidField { field: "R2T Desired Data Transfer Length", value: 0 });
        }
        if r.ttt == RESERVED_TAG {
            return Err(PduError::InvalidField { field: "R2T Target Transfer Tag", value: RESERVED_TAG });
        }
        Ok(r)
    }
}

/// Asynchronous Message (RFC 7143 section 11.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncMessage {
    /// Logical unit number.
    pub lun: u64,
    /// StatSN.
    pub stat_sn: u32,
    /// ExpCmdSN.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN.
    pub max_cmd_sn: u32,
    /// AsyncEvent (0 SCSI event, 1 logout request, 2 connection drop, 3 all connections drop, 4 renegotiate).
    pub event: u8,
    /// AsyncVCode.
    pub vcode: u8,
    /// Parameter1.
    pub param1: u16,
    /// Parameter2.
    pub param2: u16,
    /// Parameter3.
    pub param3: u16,
}

impl BhsCodec for AsyncMessage {
    const OPCODE: Opcode = Opcode::AsyncMessage;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8;
        b[1] = 0x80;
        put64(b, 8, self.lun);
        put32(b, 16, RESERVED_TAG);
        put32(b, 24, self.stat_sn);
        put32(b, 28, self.exp_cmd_sn);
        put32(b, 32, self.max_cmd_sn);
        b[36] = self.event;
        b[37] = self.vcode;
        put16(b, 38, self.param1);
        put16(b, 40, self.param2);
        put16(b, 42, self.param3);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        Ok(AsyncMessage {
            lun: get64(b, 8),
            stat_sn: get32(b, 24),
            exp_cmd_sn: get32(b, 28),
            max_cmd_sn: get32(b, 32),
            event: b[36],
            vcode: b[37],
            param1: get16(b, 38),
            param2: get16(b, 40),
            param3: get16(b, 42),
        })
    }
}

/// Reject (RFC 7143 section 11.17). The data segment holds the header of the
/// rejected PDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reject {
    /// Reason code (RFC 7143 section 11.17.1).
    pub reason: u8,
    /// StatSN.
    pub stat_sn: u32,
    /// ExpCmdSN.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN.
    pub max_cmd_sn: u32,
    /// DataSN/R2TSN.
    pub data_sn: u32,
}

impl BhsCodec for Reject {
    const OPCODE: Opcode = Opcode::Reject;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8;
        b[1] = 0x80;
        b[2] = self.reason;
        put32(b, 16, RESERVED_TAG);
        put32(b, 24, self.stat_sn);
        put32(b, 28, self.exp_cmd_sn);
        put32(b, 32, self.max_cmd_sn);
        put32(b, 36, self.data_sn);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        Ok(Reject {
            reason: b[2],
            stat_sn: get32(b, 24),
            exp_cmd_sn: get32(b, 28),
            max_cmd_sn: get32(b, 32),
            data_sn: get32(b, 36),
        })
    }
}

/// Human-readable meaning of a Reject reason code.
pub fn reject_reason_text(reason: u8) -> &'static str {
    match reason {
        0x02 => "data (payload) digest error",
        0x03 => "SNACK reject",
        0x04 => "protocol error",
        0x05 => "command not supported",
        0x06 => "immediate command reject (too many immediate commands)",
        0x07 => "task in progress",
        0x08 => "invalid data ack",
        0x09 => "invalid PDU field",
        0x0a => "long operation reject (out of resources)",
        0x0b => "deprecated (negotiation reset)",
        0x0c => "waiting for logout",
        _ => "unknown reason",
    }
}

/// A typed BHS: one variant per PDU this crate speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Header {
    NopOut(NopOut),
    ScsiCommand(ScsiCommand),
    LoginRequest(LoginRequest),
    TextRequest(TextRequest),
    DataOut(DataOut),
    LogoutRequest(LogoutRequest),
    NopIn(NopIn),
    ScsiResponse(ScsiResponse),
    LoginResponse(LoginResponse),
    TextResponse(TextResponse),
    DataIn(DataIn),
    LogoutResponse(LogoutResponse),
    R2t(R2t),
    AsyncMessage(AsyncMessage),
    Reject(Reject),
}

macro_rules! header_dispatch {
    ($self:expr, $h:ident => $e:expr) => {
        match $self {
            Header::NopOut($h) => $e,
            Header::ScsiCommand($h) => $e,
            Header::LoginRequest($h) => $e,
            Header::TextRequest($h) => $e,
            Header::DataOut($h) => $e,
            Header::LogoutRequest($h) => $e,
            Header::NopIn($h) => $e,
            Header::ScsiResponse($h) => $e,
            Header::LoginResponse($h) => $e,
            Header::TextResponse($h) => $e,
            Header::DataIn($h) => $e,
            Header::LogoutResponse($h) => $e,
            Header::R2t($h) => $e,
            Header::AsyncMessage($h) => $e,
            Header::Reject($h) => $e,
        }
    };
}

fn opcode_of<T: BhsCodec>(_: &T) -> Opcode {
    T::OPCODE
}

impl Header {
    /// The opcode of this header.
    pub fn opcode(&self) -> Opcode {
        header_dispatch!(self, h => opcode_of(h))
    }

    /// Writes the BHS (TotalAHSLength and DataSegmentLength left zero).
    pub fn write(&self, b: &mut [u8; BHS_LEN]) {
        header_dispatch!(self, h => h.write(b))
    }

    /// The initiator task tag (bytes 16..20) as it is on the wire.
    pub fn itt(&self) -> u32 {
        let mut b = [0u8; BHS_LEN];
        self.write(&mut b);
        get32(&b, 16)
    }

    /// Parses a BHS.
    ///
    /// # Errors
    /// [`PduError::UnknownOpcode`] or [`PduError::UnsupportedOpcode`] for
    /// opcodes this crate does not speak, and field errors from the header.
    pub fn read(b: &[u8; BHS_LEN]) -> Result<Header, PduError> {
        let op = Opcode::from_u8(b[0]).ok_or(PduError::UnknownOpcode(b[0] & 0x3f))?;
        Ok(match op {
            Opcode::NopOut => Header::NopOut(NopOut::read(b)?),
            Opcode::ScsiCommand => Header::ScsiCommand(ScsiCommand::read(b)?),
            Opcode::LoginRequest => Header::LoginRequest(LoginRequest::read(b)?),
            Opcode::TextRequest => Header::TextRequest(TextRequest::read(b)?),
            Opcode::DataOut => Header::DataOut(DataOut::read(b)?),
            Opcode::LogoutRequest => Header::LogoutRequest(LogoutRequest::read(b)?),
            Opcode::NopIn => Header::NopIn(NopIn::read(b)?),
            Opcode::ScsiResponse => Header::ScsiResponse(ScsiResponse::read(b)?),
            Opcode::LoginResponse => Header::LoginResponse(LoginResponse::read(b)?),
            Opcode::TextResponse => Header::TextResponse(TextResponse::read(b)?),
            Opcode::DataIn => Header::DataIn(DataIn::read(b)?),
            Opcode::LogoutResponse => Header::LogoutResponse(LogoutResponse::read(b)?),
            Opcode::R2t => Header::R2t(R2t::read(b)?),
            Opcode::AsyncMessage => Header::AsyncMessage(AsyncMessage::read(b)?),
            Opcode::Reject => Header::Reject(Reject::read(b)?),
            Opcode::TaskMgmtRequest | Opcode::TaskMgmtResponse | Opcode::SnackRequest => {
                return Err(PduError::UnsupportedOpcode(op));
            }
        })
    }
}

/// Exact or maximum data segment lengths some PDUs must have (RFC 7143
/// section 11): `Some(max)` bounds it further than MaxRecvDataSegmentLength.
fn data_limit(op: Opcode) -> Option<u32> {
    match op {
        Opcode::R2t | Opcode::LogoutResponse | Opcode::LogoutRequest => Some(0),
        Opcode::Reject => Some(BHS_LEN as u32),
        _ => None,
    }
}

/// A decoded PDU: typed header, raw AHS and data segment (padding and
/// digests removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pdu {
    /// The typed BHS.
    pub header: Header,
    /// Additional header segments, as received (usually empty).
    pub ahs: Bytes,
    /// The data segment without padding.
    pub data: Bytes,
}

/// One encoded PDU ready to write: header part (BHS and header digest),
/// data segment (shared, not copied), then padding and data digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutPdu {
    /// BHS, AHS and header digest.
    pub head: Vec<u8>,
    /// The data segment (a slice of the caller's buffer; not copied).
    pub data: Bytes,
    /// Padding to a 4-byte boundary and the data digest.
    tail: [u8; 8],
    tail_len: u8,
}

impl OutPdu {
    /// Padding and data digest bytes.
    pub fn tail(&self) -> &[u8] {
        &self.tail[..usize::from(self.tail_len)]
    }

    /// Total bytes on the wire.
    pub fn wire_len(&self) -> usize {
        self.head.len() + self.data.len() + usize::from(self.tail_len)
    }

    /// The three parts, for a vectored write.
    pub fn parts(&self) -> [&[u8]; 3] {
        [&self.head, &self.data, self.tail()]
    }

    /// The whole PDU as one buffer (tests and small PDUs).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.wire_len());
        for p in self.parts() {
            v.extend_from_slice(p);
        }
        v
    }
}

fn pad4(n: usize) -> usize {
    (4 - n % 4) % 4
}

/// Frames, checks and encodes PDUs for one connection (RFC 7143 section
/// 11.1): digests as negotiated, data segment bounded by what this side
/// declared it can receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Codec {
    /// CRC32C header digest in use.
    pub header_digest: bool,
    /// CRC32C data digest in use.
    pub data_digest: bool,
    /// The MaxRecvDataSegmentLength this side declared: the largest data
    /// segment it accepts (and so the most the peer can make it buffer).
    pub max_recv_data: u32,
}

impl Default for Codec {
    /// No digests and the login-phase limit of 8192 bytes (RFC 7143 section 13.12).
    fn default() -> Self {
        Codec { header_digest: false, data_digest: false, max_recv_data: 8192 }
    }
}

impl Codec {
    /// Length of the whole PDU whose first 48 bytes are `bhs`.
    ///
    /// # Errors
    /// Unknown opcode, or a data segment longer than allowed.
    pub fn frame_len(&self, bhs: &[u8; BHS_LEN]) -> Result<usize, PduError> {
        let op = Opcode::from_u8(bhs[0]).ok_or(PduError::UnknownOpcode(bhs[0] & 0x3f))?;
        let ahs = usize::from(bhs[4]) * 4;
        let dsl = u32::from_be_bytes([0, bhs[5], bhs[6], bhs[7]]);
        let max = data_limit(op).unwrap_or(self.max_recv_data);
        if dsl > max {
            return Err(PduError::DataSegmentTooLong { opcode: op, len: dsl, max });
        }
        if op == Opcode::Reject && dsl != BHS_LEN as u32 {
            return Err(PduError::BadLength { opcode: op, len: dsl });
        }
        let dsl = dsl as usize;
        let mut n = BHS_LEN + ahs;
        if self.header_digest {
            n += 4;
        }
        if dsl > 0 {
            n += dsl + pad4(dsl);
            if self.data_digest {
                n += 4;
            }
        }
        Ok(n)
    }

    /// Takes one complete PDU from the front of `buf`, or returns `None`
    /// (having reserved room for the rest) when more bytes are needed.
    ///
    /// # Errors
    /// Any malformed PDU; the connection cannot continue after one.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Pdu>, PduError> {
        if buf.len() < BHS_LEN {
            return Ok(None);
        }
        let mut bhs = [0u8; BHS_LEN];
        bhs.copy_from_slice(&buf[..BHS_LEN]);
        let total = self.frame_len(&bhs)?;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        let mut frame = buf.split_to(total).freeze();
        let ahs_len = usize::from(bhs[4]) * 4;
        let dsl = u32::from_be_bytes([0, bhs[5], bhs[6], bhs[7]]) as usize;
        if self.header_digest {
            let got = u32::from_le_bytes(
                frame[BHS_LEN + ahs_len..BHS_LEN + ahs_len + 4].try_into().unwrap_or([0; 4]),
            );
            let want = digest::crc32c(&frame[..BHS_LEN + ahs_len]);
            if got != want {
                return Err(PduError::HeaderDigest { expected: want, received: got });
            }
        }
        let header = Header::read(&bhs)?;
        let ahs = frame.slice(BHS_LEN..BHS_LEN + ahs_len);
        frame.advance(BHS_LEN + ahs_len + if self.header_digest { 4 } else { 0 });
        let data = if dsl > 0 {
            let padded = dsl + pad4(dsl);
            if self.data_digest {
                let got = u32::from_le_bytes(frame[padded..padded + 4].try_into().unwrap_or([0; 4]));
                let want = digest::crc32c(&frame[..padded]);
                if got != want {
                    return Err(PduError::DataDigest { expected: want, received: got });
                }
            }
            frame.slice(..dsl)
        } else {
            Bytes::new()
        };
        Ok(Some(Pdu { header, ahs, data }))
    }

    /// Encodes `header` with `data` (no AHS).
    ///
    /// # Panics
    /// If `data` is longer than the 24-bit DataSegmentLength allows (callers
    /// split data to the negotiated limits, which are smaller).
    pub fn encode(&self, header: &Header, data: Bytes) -> OutPdu {
        assert!(data.len() <= MAX_DATA_SEGMENT as usize, "data segment over 16 MiB");
        let mut b = [0u8; BHS_LEN];
        header.write(&mut b);
        let dsl = data.len() as u32;
        b[5..8].copy_from_slice(&dsl.to_be_bytes()[1..]);
        let mut head = Vec::with_capacity(BHS_LEN + 4);
        head.extend_from_slice(&b);
        if self.header_digest {
            head.extend_from_slice(&digest::crc32c(&b).to_le_bytes());
        }
        let mut tail = [0u8; 8];
        let mut tail_len = 0u8;
        if !data.is_empty() {
            let pad = pad4(data.len());
            tail_len = pad as u8;
            if self.data_digest {
                let d = digest::crc32c_append(digest::crc32c(&data), &[0u8; 3][..pad]);
                tail[pad..pad + 4].copy_from_slice(&d.to_le_bytes());
                tail_len += 4;
            }
        }
        OutPdu { head, data, tail, tail_len }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_headers() -> Vec<Header> {
        vec![
            Header::NopOut(NopOut {
                immediate: true,
                lun: 0,
                itt: RESERVED_TAG,
                ttt: 7,
                cmd_sn: 3,
                exp_stat_sn: 4,
            }),
            Header::R2t(R2t {
                lun: 1 << 48,
                itt: 9,
                ttt: 10,
                stat_sn: 1,
                exp_cmd_sn: 2,
                max_cmd_sn: 3,
                r2t_sn: 0,
                buffer_offset: 4096,
                desired_len: 8192,
            }),
        ]
    }

    #[test]
    fn round_trip_with_digests() {
        for hd in [false, true] {
            for dd in [false, true] {
                let codec = Codec { header_digest: hd, data_digest: dd, max_recv_data: 1 << 20 };
                for h in sample_headers() {
                    let data =
                        if h.opcode() == Opcode::R2t { Bytes::new() } else { Bytes::from_static(b"hello") };
                    let out = codec.encode(&h, data.clone());
                    let mut buf = BytesMut::from(&out.to_vec()[..]);
                    buf.extend_from_slice(b"next");
                    let pdu = codec.decode(&mut buf).unwrap().unwrap();
                    assert_eq!(pdu.header, h);
                    assert_eq!(pdu.data, data);
                    assert_eq!(&buf[..], b"next");
                }
            }
        }
    }

    #[test]
    fn rfc_digest_vector() {
        // RFC 7143 appendix / RFC 3720 B.4: 32 bytes of zeroes.
        assert_eq!(digest::crc32c(&[0u8; 32]).to_le_bytes(), [0xaa, 0x36, 0x91, 0x8a]);
    }

    #[test]
    fn bad_header_digest_is_an_error() {
        let codec = Codec { header_digest: true, data_digest: false, max_recv_data: 8192 };
        let mut v = codec.encode(&sample_headers()[0], Bytes::new()).to_vec();
        v[20] ^= 1;
        let mut buf = BytesMut::from(&v[..]);
        assert!(matches!(codec.decode(&mut buf), Err(PduError::HeaderDigest { .. })));
    }

    #[test]
    fn oversized_segment_is_refused_before_buffering() {
        let codec = Codec::default();
        let mut b = [0u8; BHS_LEN];
        b[0] = Opcode::DataIn as u8;
        b[5..8].copy_from_slice(&[0, 0x40, 0]); // 16384 > 8192
        let mut buf = BytesMut::from(&b[..]);
        assert!(matches!(codec.decode(&mut buf), Err(PduError::DataSegmentTooLong { .. })));
    }

    #[test]
    fn unknown_opcode() {
        let mut b = [0u8; BHS_LEN];
        b[0] = 0x1c;
        let mut buf = BytesMut::from(&b[..]);
        assert_eq!(Codec::default().decode(&mut buf), Err(PduError::UnknownOpcode(0x1c)));
    }
}
