//! Headers of the PDUs a target sends (RFC 7143 sections 11.4, 11.7, 11.8,
//! 11.9, 11.11, 11.13, 11.15, 11.17, 11.19).

use super::bhs::*;
use crate::error::PduError;
use crate::opcode::Opcode;

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

/// Task Management Function Response (RFC 7143 section 11.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskMgmtResponse {
    /// 0 function complete, 1 task does not exist, 2 LUN does not exist,
    /// 3 task still allegiant, 4 reassignment not supported, 5 function
    /// not supported, 6 authorization failed, 255 rejected.
    pub response: u8,
    /// Initiator task tag of the request (echoed).
    pub itt: u32,
    /// StatSN.
    pub stat_sn: u32,
    /// ExpCmdSN.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN.
    pub max_cmd_sn: u32,
}

impl BhsCodec for TaskMgmtResponse {
    const OPCODE: Opcode = Opcode::TaskMgmtResponse;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8;
        b[1] = 0x80;
        b[2] = self.response;
        put32(b, 16, self.itt);
        put32(b, 24, self.stat_sn);
        put32(b, 28, self.exp_cmd_sn);
        put32(b, 32, self.max_cmd_sn);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        Ok(TaskMgmtResponse {
            response: b[2],
            itt: get32(b, 16),
            stat_sn: get32(b, 24),
            exp_cmd_sn: get32(b, 28),
            max_cmd_sn: get32(b, 32),
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
