//! [`Header`]: any BHS, typed by its opcode.

use super::bhs::{BHS_LEN, BhsCodec, get32};
use super::initiator::*;
use super::target::*;
use crate::error::PduError;
use crate::opcode::Opcode;

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
    TaskMgmtRequest(TaskMgmtRequest),
    TaskMgmtResponse(TaskMgmtResponse),
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
            Header::TaskMgmtRequest($h) => $e,
            Header::TaskMgmtResponse($h) => $e,
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
            Opcode::TaskMgmtRequest => Header::TaskMgmtRequest(TaskMgmtRequest::read(b)?),
            Opcode::TaskMgmtResponse => Header::TaskMgmtResponse(TaskMgmtResponse::read(b)?),
            Opcode::SnackRequest => {
                return Err(PduError::UnsupportedOpcode(op));
            }
        })
    }
}
