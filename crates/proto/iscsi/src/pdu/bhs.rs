//! The Basic Header Segment (RFC 7143 section 11.2): its size, the field
//! accessors every header type uses, and the one [`BhsCodec`] trait they all
//! implement.

use crate::error::PduError;
use crate::opcode::Opcode;

/// Length of the Basic Header Segment (RFC 7143 section 11.2).
pub const BHS_LEN: usize = 48;
/// The reserved task tag `0xffffffff` (RFC 7143 section 11.2.1.8).
pub const RESERVED_TAG: u32 = 0xffff_ffff;
/// Largest total AHS length in bytes (the 8-bit TotalAHSLength counts words).
pub const MAX_AHS_LEN: usize = 255 * 4;
/// Largest value of the 24-bit DataSegmentLength field.
pub const MAX_DATA_SEGMENT: u32 = 0x00ff_ffff;

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
    pub(super) fn bits(self) -> u8 {
        match self {
            Stage::Security => 0,
            Stage::Operational => 1,
            Stage::FullFeature => 3,
        }
    }

    pub(super) fn from_bits(v: u8) -> Result<Stage, PduError> {
        match v & 3 {
            0 => Ok(Stage::Security),
            1 => Ok(Stage::Operational),
            3 => Ok(Stage::FullFeature),
            v => Err(PduError::InvalidField { field: "login stage", value: u32::from(v) }),
        }
    }
}

pub(super) fn get16(b: &[u8; BHS_LEN], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}
pub(super) fn get32(b: &[u8; BHS_LEN], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
pub(super) fn get64(b: &[u8; BHS_LEN], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_be_bytes(a)
}
pub(super) fn put16(b: &mut [u8; BHS_LEN], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_be_bytes());
}
pub(super) fn put32(b: &mut [u8; BHS_LEN], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_be_bytes());
}
pub(super) fn put64(b: &mut [u8; BHS_LEN], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_be_bytes());
}

/// Encodes and decodes one header type to and from a BHS. `write` leaves
/// TotalAHSLength and DataSegmentLength (bytes 4..8) to the [`Codec`](super::Codec).
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
