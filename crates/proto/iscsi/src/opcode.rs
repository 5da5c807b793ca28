//! PDU opcodes (RFC 7143 section 11.2.1.2), in a module of their own so
//! that the error types can name them without depending on the PDU codec.

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
