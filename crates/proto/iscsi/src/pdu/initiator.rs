//! Headers of the PDUs an initiator sends (RFC 7143 sections 11.3, 11.5,
//! 11.7, 11.10, 11.12, 11.14, 11.18).

use super::bhs::*;
use crate::error::PduError;
use crate::opcode::Opcode;

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

/// Task management function codes (RFC 7143 section 11.5.1).
pub mod tmf {
    /// ABORT TASK: abort the task whose tag is the referenced task tag.
    pub const ABORT_TASK: u8 = 1;
    /// ABORT TASK SET: abort every task of this session on the LU.
    pub const ABORT_TASK_SET: u8 = 2;
    /// LOGICAL UNIT RESET.
    pub const LOGICAL_UNIT_RESET: u8 = 5;
}

/// Task Management Function Request (RFC 7143 section 11.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskMgmtRequest {
    /// I bit.
    pub immediate: bool,
    /// The function ([`tmf`]).
    pub function: u8,
    /// Logical unit number (encoded).
    pub lun: u64,
    /// Initiator task tag of this request.
    pub itt: u32,
    /// Referenced task tag: the task to abort (ABORT TASK), else reserved.
    pub rtt: u32,
    /// CmdSN.
    pub cmd_sn: u32,
    /// ExpStatSN.
    pub exp_stat_sn: u32,
    /// RefCmdSN: the CmdSN of the task to abort (ABORT TASK).
    pub ref_cmd_sn: u32,
    /// ExpDataSN (0 unless recovering a task).
    pub exp_data_sn: u32,
}

impl BhsCodec for TaskMgmtRequest {
    const OPCODE: Opcode = Opcode::TaskMgmtRequest;
    fn write(&self, b: &mut [u8; BHS_LEN]) {
        b[0] = Self::OPCODE as u8 | if self.immediate { 0x40 } else { 0 };
        b[1] = 0x80 | (self.function & 0x7f);
        put64(b, 8, self.lun);
        put32(b, 16, self.itt);
        put32(b, 20, self.rtt);
        put32(b, 24, self.cmd_sn);
        put32(b, 28, self.exp_stat_sn);
        put32(b, 32, self.ref_cmd_sn);
        put32(b, 36, self.exp_data_sn);
    }
    fn read(b: &[u8; BHS_LEN]) -> Result<Self, PduError> {
        Ok(TaskMgmtRequest {
            immediate: b[0] & 0x40 != 0,
            function: b[1] & 0x7f,
            lun: get64(b, 8),
            itt: get32(b, 16),
            rtt: get32(b, 20),
            cmd_sn: get32(b, 24),
            exp_stat_sn: get32(b, 28),
            ref_cmd_sn: get32(b, 32),
            exp_data_sn: get32(b, 36),
        })
    }
}
