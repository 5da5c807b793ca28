//! The SCSI commands this initiator issues (SPC-4, SBC-3), the parsers of
//! their answers, and sense data decoding (fixed and descriptor formats).

use std::fmt;

/// A 16-byte CDB (shorter CDBs are zero-padded; the length is implied by the opcode).
pub type Cdb = [u8; 16];

/// SCSI status codes (SAM-5).
pub mod status {
    /// GOOD.
    pub const GOOD: u8 = 0x00;
    /// CHECK CONDITION: sense data follows.
    pub const CHECK_CONDITION: u8 = 0x02;
    /// CONDITION MET.
    pub const CONDITION_MET: u8 = 0x04;
    /// BUSY.
    pub const BUSY: u8 = 0x08;
    /// RESERVATION CONFLICT.
    pub const RESERVATION_CONFLICT: u8 = 0x18;
    /// TASK SET FULL.
    pub const TASK_SET_FULL: u8 = 0x28;
    /// ACA ACTIVE.
    pub const ACA_ACTIVE: u8 = 0x30;
    /// TASK ABORTED.
    pub const TASK_ABORTED: u8 = 0x40;
}

/// Operation codes.
pub mod op {
    /// TEST UNIT READY.
    pub const TEST_UNIT_READY: u8 = 0x00;
    /// INQUIRY.
    pub const INQUIRY: u8 = 0x12;
    /// UNMAP.
    pub const UNMAP: u8 = 0x42;
    /// READ(16).
    pub const READ_16: u8 = 0x88;
    /// WRITE(16).
    pub const WRITE_16: u8 = 0x8a;
    /// SYNCHRONIZE CACHE(16).
    pub const SYNCHRONIZE_CACHE_16: u8 = 0x91;
    /// WRITE SAME(16).
    pub const WRITE_SAME_16: u8 = 0x93;
    /// SERVICE ACTION IN(16) (READ CAPACITY(16) is service action 0x10).
    pub const SERVICE_ACTION_IN_16: u8 = 0x9e;
    /// REPORT LUNS.
    pub const REPORT_LUNS: u8 = 0xa0;
}

/// Sense keys (SPC-4 section 4.5.6).
pub mod sense_key {
    /// NO SENSE.
    pub const NO_SENSE: u8 = 0x0;
    /// NOT READY.
    pub const NOT_READY: u8 = 0x2;
    /// ILLEGAL REQUEST.
    pub const ILLEGAL_REQUEST: u8 = 0x5;
    /// UNIT ATTENTION.
    pub const UNIT_ATTENTION: u8 = 0x6;
    /// DATA PROTECT.
    pub const DATA_PROTECT: u8 = 0x7;
    /// ABORTED COMMAND.
    pub const ABORTED_COMMAND: u8 = 0xb;
}

/// A command that ended with `status` (and sense key `key`) may succeed if
/// sent again: BUSY, TASK SET FULL, TASK ABORTED, or CHECK CONDITION with
/// UNIT ATTENTION, NOT READY or ABORTED COMMAND (SAM-5 section 5.3, SPC-4
/// section 4.5.6). MEDIUM ERROR, HARDWARE ERROR, ILLEGAL REQUEST, DATA
/// PROTECT and the rest are permanent.
pub fn is_transient(status: u8, key: Option<u8>) -> bool {
    match status {
        status::BUSY | status::TASK_SET_FULL | status::TASK_ABORTED => true,
        status::CHECK_CONDITION => {
            matches!(key, Some(sense_key::UNIT_ATTENTION | sense_key::NOT_READY | sense_key::ABORTED_COMMAND))
        }
        _ => false,
    }
}

/// A SCSI answer too short or malformed to use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScsiError {
    /// The data is shorter than the fields needed.
    #[error("{what} data too short: {len} bytes")]
    Short {
        /// Which answer.
        what: &'static str,
        /// Bytes received.
        len: usize,
    },
    /// A field has an unusable value.
    #[error("{what}: {message}")]
    Invalid {
        /// Which answer.
        what: &'static str,
        /// What is wrong.
        message: String,
    },
}

fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}
fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn be64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_be_bytes(a)
}

/// TEST UNIT READY.
pub fn test_unit_ready() -> Cdb {
    [0; 16]
}

/// INQUIRY: standard data (`page` None) or a VPD page.
pub fn inquiry(page: Option<u8>, alloc_len: u16) -> Cdb {
    let mut c = [0u8; 16];
    c[0] = op::INQUIRY;
    if let Some(p) = page {
        c[1] = 1; // EVPD
        c[2] = p;
    }
    c[3..5].copy_from_slice(&alloc_len.to_be_bytes());
    c
}

/// READ CAPACITY(16).
pub fn read_capacity16(alloc_len: u32) -> Cdb {
    let mut c = [0u8; 16];
    c[0] = op::SERVICE_ACTION_IN_16;
    c[1] = 0x10;
    c[10..14].copy_from_slice(&alloc_len.to_be_bytes());
    c
}

/// REPORT LUNS (SPC-4 section 6.33), SELECT REPORT 0: every logical unit
/// the initiator may address.
pub fn report_luns(alloc_len: u32) -> Cdb {
    let mut c = [0u8; 16];
    c[0] = op::REPORT_LUNS;
    c[6..10].copy_from_slice(&alloc_len.to_be_bytes());
    c
}

/// Most LUNs [`parse_report_luns`] returns (the LUN numbers this initiator
/// addresses are 0..16383).
pub const MAX_REPORTED_LUNS: usize = 16384;

/// The LUN numbers of a REPORT LUNS answer, in its order: peripheral
/// (`00b`) and flat space (`01b`) addressing, the two forms LUN numbers
/// below 16384 take; entries in other forms are skipped. A list longer
/// than the data (the allocation length cut it) yields what is there.
///
/// # Errors
/// Data shorter than the 8-byte header, or a list length that is not a
/// multiple of 8.
pub fn parse_report_luns(b: &[u8]) -> Result<Vec<u16>, ScsiError> {
    const WHAT: &str = "REPORT LUNS";
    if b.len() < 8 {
        return Err(ScsiError::Short { what: WHAT, len: b.len() });
    }
    let list_len = be32(b, 0) as usize;
    if !list_len.is_multiple_of(8) {
        return Err(ScsiError::Invalid {
            what: WHAT,
            message: format!("LUN list length {list_len} is not a multiple of 8"),
        });
    }
    let entries = (list_len / 8).min((b.len() - 8) / 8).min(MAX_REPORTED_LUNS);
    let mut luns = Vec::with_capacity(entries);
    for e in b[8..8 + entries * 8].chunks_exact(8) {
        match e[0] >> 6 {
            0b00 if e[0] == 0 => luns.push(u16::from(e[1])),
            0b01 => luns.push(u16::from(e[0] & 0x3f) << 8 | u16::from(e[1])),
            _ => {}
        }
    }
    Ok(luns)
}

fn lba_cdb(opcode: u8, flags: u8, lba: u64, blocks: u32) -> Cdb {
    let mut c = [0u8; 16];
    c[0] = opcode;
    c[1] = flags;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

/// READ(16).
pub fn read16(lba: u64, blocks: u32) -> Cdb {
    lba_cdb(op::READ_16, 0, lba, blocks)
}

/// WRITE(16), with the FUA bit when `fua`.
pub fn write16(lba: u64, blocks: u32, fua: bool) -> Cdb {
    lba_cdb(op::WRITE_16, if fua { 0x08 } else { 0 }, lba, blocks)
}

/// SYNCHRONIZE CACHE(16) of `blocks` blocks at `lba` (0 blocks: to the end).
pub fn synchronize_cache16(lba: u64, blocks: u32) -> Cdb {
    lba_cdb(op::SYNCHRONIZE_CACHE_16, 0, lba, blocks)
}

/// WRITE SAME(16) of one block of data-out to `blocks` blocks; with
/// `unmap` the target may deallocate them instead.
pub fn write_same16(lba: u64, blocks: u32, unmap: bool) -> Cdb {
    lba_cdb(op::WRITE_SAME_16, if unmap { 0x08 } else { 0 }, lba, blocks)
}

/// UNMAP with a parameter list of `param_len` bytes.
pub fn unmap(param_len: u16) -> Cdb {
    let mut c = [0u8; 16];
    c[0] = op::UNMAP;
    c[7..9].copy_from_slice(&param_len.to_be_bytes());
    c
}

/// The UNMAP parameter list for `(lba, blocks)` descriptors (SBC-3 section 5.28.2).
pub fn unmap_parameters(ranges: &[(u64, u32)]) -> Vec<u8> {
    let desc_len = ranges.len() * 16;
    let mut v = Vec::with_capacity(8 + desc_len);
    v.extend_from_slice(&((desc_len + 6) as u16).to_be_bytes());
    v.extend_from_slice(&(desc_len as u16).to_be_bytes());
    v.extend_from_slice(&[0; 4]);
    for &(lba, n) in ranges {
        v.extend_from_slice(&lba.to_be_bytes());
        v.extend_from_slice(&n.to_be_bytes());
        v.extend_from_slice(&[0; 4]);
    }
    v
}

/// Standard INQUIRY data (SPC-4 section 6.6.2), the fields used here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inquiry {
    /// Peripheral qualifier (0: a device is connected).
    pub qualifier: u8,
    /// Peripheral device type (0: direct access block device).
    pub device_type: u8,
    /// T10 vendor identification.
    pub vendor: String,
    /// Product identification.
    pub product: String,
    /// Product revision level.
    pub revision: String,
}

fn ascii(b: &[u8]) -> String {
    String::from_utf8_lossy(b).trim().to_string()
}

/// Parses standard INQUIRY data.
///
/// # Errors
/// [`ScsiError::Short`] under 36 bytes.
pub fn parse_inquiry(b: &[u8]) -> Result<Inquiry, ScsiError> {
    if b.len() < 36 {
        return Err(ScsiError::Short { what: "INQUIRY", len: b.len() });
    }
    Ok(Inquiry {
        qualifier: b[0] >> 5,
        device_type: b[0] & 0x1f,
        vendor: ascii(&b[8..16]),
        product: ascii(&b[16..32]),
        revision: ascii(&b[32..36]),
    })
}

/// The payload of a VPD page after checking its header.
fn vpd_payload(page: u8, b: &[u8]) -> Result<&[u8], ScsiError> {
    if b.len() < 4 {
        return Err(ScsiError::Short { what: "VPD page", len: b.len() });
    }
    if b[1] != page {
        return Err(ScsiError::Invalid {
            what: "VPD page",
            message: format!("asked {page:#04x}, got {:#04x}", b[1]),
        });
    }
    let n = usize::from(be16(b, 2));
    Ok(&b[4..(4 + n).min(b.len())])
}

/// Parses the Supported VPD Pages page (0x00).
///
/// # Errors
/// Short or mismatched page.
pub fn parse_supported_vpd(b: &[u8]) -> Result<Vec<u8>, ScsiError> {
    Ok(vpd_payload(0x00, b)?.to_vec())
}

/// Parses the Unit Serial Number VPD page (0x80, SPC-4 section 7.8.17):
/// the LUN's serial as text, without the padding spaces and NULs. `None`
/// when the target reports an empty serial (nothing to identify it by).
///
/// # Errors
/// Short or mismatched page, or a serial that is not printable ASCII.
pub fn parse_unit_serial(b: &[u8]) -> Result<Option<String>, ScsiError> {
    let p = vpd_payload(0x80, b)?;
    let pad = |c: &u8| *c == 0 || c.is_ascii_whitespace();
    let text = match (p.iter().position(|c| !pad(c)), p.iter().rposition(|c| !pad(c))) {
        (Some(first), Some(last)) => &p[first..=last],
        _ => &[],
    };
    if let Some(bad) = text.iter().find(|c| !(c.is_ascii_graphic() || **c == b' ')) {
        return Err(ScsiError::Invalid {
            what: "Unit Serial Number VPD",
            message: format!("byte {bad:#04x} is not printable ASCII"),
        });
    }
    Ok((!text.is_empty()).then(|| String::from_utf8_lossy(text).into_owned()))
}

/// The Block Limits VPD page (0xb0, SBC-3 section 6.6.4), in blocks; 0 means "not reported".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockLimits {
    /// Optimal transfer length granularity.
    pub optimal_granularity: u16,
    /// Maximum transfer length.
    pub max_transfer: u32,
    /// Optimal transfer length.
    pub optimal_transfer: u32,
    /// Maximum UNMAP LBA count.
    pub max_unmap_lba_count: u32,
    /// Maximum UNMAP block descriptor count.
    pub max_unmap_descriptors: u32,
    /// Optimal unmap granularity.
    pub unmap_granularity: u32,
    /// Maximum WRITE SAME length.
    pub max_write_same: u64,
}

/// Parses the Block Limits VPD page.
///
/// # Errors
/// Short or mismatched page.
pub fn parse_block_limits(b: &[u8]) -> Result<BlockLimits, ScsiError> {
    let p = vpd_payload(0xb0, b)?;
    // Page bytes 4.. are payload offsets 0..; the fields sit at page offsets.
    let at32 = |o: usize| if p.len() >= o - 4 + 4 { be32(p, o - 4) } else { 0 };
    Ok(BlockLimits {
        optimal_granularity: if p.len() >= 4 { be16(p, 2) } else { 0 },
        max_transfer: at32(8),
        optimal_transfer: at32(12),
        max_unmap_lba_count: at32(20),
        max_unmap_descriptors: at32(24),
        unmap_granularity: at32(28),
        max_write_same: if p.len() >= 40 { be64(p, 32) } else { 0 },
    })
}

/// The Logical Block Provisioning VPD page (0xb2, SBC-3 section 6.6.6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Provisioning {
    /// LBPU: UNMAP is supported.
    pub unmap: bool,
    /// LBPWS: WRITE SAME(16) with UNMAP is supported.
    pub write_same16_unmap: bool,
    /// LBPWS10: WRITE SAME(10) with UNMAP is supported.
    pub write_same10_unmap: bool,
    /// LBPRZ: unmapped blocks read as zeroes.
    pub reads_zero: bool,
    /// Provisioning type (0 full, 1 resource, 2 thin).
    pub provisioning_type: u8,
}

/// Parses the Logical Block Provisioning VPD page.
///
/// # Errors
/// Short or mismatched page.
pub fn parse_provisioning(b: &[u8]) -> Result<Provisioning, ScsiError> {
    let p = vpd_payload(0xb2, b)?;
    if p.len() < 3 {
        return Err(ScsiError::Short { what: "Logical Block Provisioning VPD", len: b.len() });
    }
    Ok(Provisioning {
        unmap: p[1] & 0x80 != 0,
        write_same16_unmap: p[1] & 0x40 != 0,
        write_same10_unmap: p[1] & 0x20 != 0,
        reads_zero: p[1] & 0x04 != 0,
        provisioning_type: p[2] & 7,
    })
}

/// READ CAPACITY(16) data (SBC-3 section 5.16.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Number of logical blocks.
    pub blocks: u64,
    /// Logical block length in bytes.
    pub block_len: u32,
    /// Logical blocks per physical block, as a power of two.
    pub blocks_per_physical_exp: u8,
    /// LBPME: logical block provisioning management is enabled.
    pub provisioning: bool,
    /// LBPRZ: unmapped blocks read as zeroes.
    pub reads_zero: bool,
}

/// Parses READ CAPACITY(16) data.
///
/// # Errors
/// Short data, a zero or non-power-of-two block length, or a size overflowing u64 bytes.
pub fn parse_read_capacity16(b: &[u8]) -> Result<Capacity, ScsiError> {
    if b.len() < 32 {
        return Err(ScsiError::Short { what: "READ CAPACITY(16)", len: b.len() });
    }
    let last = be64(b, 0);
    let block_len = be32(b, 8);
    let invalid = |m: String| ScsiError::Invalid { what: "READ CAPACITY(16)", message: m };
    if block_len < 512 || !block_len.is_power_of_two() || block_len > (1 << 20) {
        return Err(invalid(format!("logical block length {block_len}")));
    }
    let blocks = last.checked_add(1).ok_or_else(|| invalid("LBA overflow".into()))?;
    if blocks.checked_mul(u64::from(block_len)).is_none() {
        return Err(invalid(format!("{blocks} blocks of {block_len} bytes overflow")));
    }
    Ok(Capacity {
        blocks,
        block_len,
        blocks_per_physical_exp: b[13] & 0x0f,
        provisioning: b[14] & 0x80 != 0,
        reads_zero: b[14] & 0x40 != 0,
    })
}

/// Decoded sense data (SPC-4 section 4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sense {
    /// Sense key.
    pub key: u8,
    /// Additional sense code.
    pub asc: u8,
    /// Additional sense code qualifier.
    pub ascq: u8,
    /// The sense was in descriptor format (0x72/0x73), else fixed (0x70/0x71).
    pub descriptor: bool,
    /// Deferred error (0x71/0x73).
    pub deferred: bool,
    /// The INFORMATION field, when valid (usually the failing LBA).
    pub information: Option<u64>,
}

impl Sense {
    /// Parses sense data in fixed or descriptor format; `None` when there
    /// is none or it is not in a known format.
    pub fn parse(b: &[u8]) -> Option<Sense> {
        let code = *b.first()? & 0x7f;
        match code {
            0x70 | 0x71 => {
                if b.len() < 14 {
                    // Some targets send just the first 8 bytes plus key.
                    if b.len() >= 3 {
                        return Some(Sense {
                            key: b[2] & 0x0f,
                            asc: 0,
                            ascq: 0,
                            descriptor: false,
                            deferred: code == 0x71,
                            information: None,
                        });
                    }
                    return None;
                }
                let valid = b[0] & 0x80 != 0;
                Some(Sense {
                    key: b[2] & 0x0f,
                    asc: b[12],
                    ascq: b[13],
                    descriptor: false,
                    deferred: code == 0x71,
                    information: valid.then(|| u64::from(be32(b, 3))),
                })
            }
            0x72 | 0x73 => {
                if b.len() < 4 {
                    return None;
                }
                let mut information = None;
                let add = usize::from(*b.get(7).unwrap_or(&0));
                let end = (8 + add).min(b.len());
                let mut i = 8;
                while i + 2 <= end {
                    let (ty, len) = (b[i], usize::from(b[i + 1]));
                    if ty == 0 && len >= 10 && i + 12 <= end && b[i + 2] & 0x80 != 0 {
                        information = Some(be64(b, i + 4));
                    }
                    i += 2 + len;
                }
                Some(Sense {
                    key: b[1] & 0x0f,
                    asc: b[2],
                    ascq: b[3],
                    descriptor: true,
                    deferred: code == 0x73,
                    information,
                })
            }
            _ => None,
        }
    }

    /// Parses the data segment of a SCSI Response: a 2-byte SenseLength,
    /// then the sense data (RFC 7143 section 11.4.7.2).
    pub fn from_response_data(data: &[u8]) -> Option<Sense> {
        if data.len() < 2 {
            return None;
        }
        let n = usize::from(be16(data, 0));
        Sense::parse(&data[2..(2 + n).min(data.len())])
    }

    /// UNIT ATTENTION: the command was not executed and may be retried.
    pub fn is_unit_attention(&self) -> bool {
        self.key == sense_key::UNIT_ATTENTION
    }

    /// ILLEGAL REQUEST with INVALID COMMAND OPERATION CODE or INVALID FIELD IN CDB:
    /// the target does not support the command as sent.
    pub fn is_unsupported(&self) -> bool {
        self.key == sense_key::ILLEGAL_REQUEST && matches!((self.asc, self.ascq), (0x20, 0) | (0x24, 0))
    }

    /// The sense key's name.
    pub fn key_name(&self) -> &'static str {
        match self.key {
            0x0 => "NO SENSE",
            0x1 => "RECOVERED ERROR",
            0x2 => "NOT READY",
            0x3 => "MEDIUM ERROR",
            0x4 => "HARDWARE ERROR",
            0x5 => "ILLEGAL REQUEST",
            0x6 => "UNIT ATTENTION",
            0x7 => "DATA PROTECT",
            0x8 => "BLANK CHECK",
            0x9 => "VENDOR SPECIFIC",
            0xa => "COPY ABORTED",
            0xb => "ABORTED COMMAND",
            0xd => "VOLUME OVERFLOW",
            0xe => "MISCOMPARE",
            _ => "RESERVED",
        }
    }

    /// A description of the additional sense code, for the common ones.
    pub fn asc_text(&self) -> Option<&'static str> {
        Some(match (self.asc, self.ascq) {
            (0x04, _) => "logical unit not ready",
            (0x0c, _) => "write error",
            (0x11, _) => "unrecovered read error",
            (0x1a, 0) => "parameter list length error",
            (0x20, 0) => "invalid command operation code",
            (0x21, 0) => "logical block address out of range",
            (0x24, 0) => "invalid field in CDB",
            (0x25, 0) => "logical unit not supported",
            (0x26, 0) => "invalid field in parameter list",
            (0x27, _) => "write protected",
            (0x29, _) => "power on, reset, or bus device reset occurred",
            (0x2a, _) => "parameters changed",
            (0x3a, _) => "medium not present",
            (0x3f, 0x0e) => "reported LUNs data has changed",
            (0x44, 0) => "internal target failure",
            _ => return None,
        })
    }
}

impl fmt::Display for Sense {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, ASC/ASCQ {:02x}/{:02x}", self.key_name(), self.asc, self.ascq)?;
        if let Some(t) = self.asc_text() {
            write!(f, " ({t})")?;
        }
        if let Some(i) = self.information {
            write!(f, ", information {i}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn report_luns_reads_both_address_forms() {
        let mut b = vec![0u8; 8];
        b[..4].copy_from_slice(&32u32.to_be_bytes());
        for lun in [0u16, 1, 255, 300] {
            b.extend_from_slice(&crate::encode_lun(lun).to_be_bytes());
        }
        assert_eq!(parse_report_luns(&b).unwrap(), vec![0, 1, 255, 300]);
        // A list cut by the allocation length: what is there.
        assert_eq!(parse_report_luns(&b[..8 + 16]).unwrap(), vec![0, 1]);
        // Other addressing forms are skipped; bad lengths refused.
        let mut odd = b.clone();
        odd[8] = 0xc0;
        assert_eq!(parse_report_luns(&odd).unwrap(), vec![1, 255, 300]);
        assert!(parse_report_luns(&b[..7]).is_err());
        let mut bad = b.clone();
        bad[3] = 33;
        assert!(parse_report_luns(&bad).is_err());
        let cdb = report_luns(4096);
        assert_eq!((cdb[0], &cdb[6..10]), (op::REPORT_LUNS, &4096u32.to_be_bytes()[..]));
    }

    use super::*;

    #[test]
    fn fixed_sense() {
        let mut s = [0u8; 18];
        s[0] = 0xf0;
        s[2] = 0x06;
        s[3..7].copy_from_slice(&42u32.to_be_bytes());
        s[7] = 10;
        s[12] = 0x29;
        let d = Sense::parse(&s).unwrap();
        assert!(d.is_unit_attention());
        assert_eq!(d.information, Some(42));
        assert_eq!(
            d.to_string(),
            "UNIT ATTENTION, ASC/ASCQ 29/00 (power on, reset, or bus device reset occurred), information 42"
        );
    }

    #[test]
    fn descriptor_sense() {
        let mut s = vec![0x72, 0x05, 0x21, 0x00, 0, 0, 0, 12];
        s.extend_from_slice(&[0x00, 0x0a, 0x80, 0]);
        s.extend_from_slice(&7u64.to_be_bytes());
        let d = Sense::parse(&s).unwrap();
        assert_eq!((d.key, d.asc, d.ascq, d.information, d.descriptor), (5, 0x21, 0, Some(7), true));
        let mut rsp = vec![0, s.len() as u8];
        rsp.extend_from_slice(&s);
        assert_eq!(Sense::from_response_data(&rsp), Some(d));
    }

    #[test]
    fn capacity() {
        let mut b = [0u8; 32];
        b[0..8].copy_from_slice(&1023u64.to_be_bytes());
        b[8..12].copy_from_slice(&4096u32.to_be_bytes());
        let c = parse_read_capacity16(&b).unwrap();
        assert_eq!((c.blocks, c.block_len), (1024, 4096));
        b[8..12].copy_from_slice(&1000u32.to_be_bytes());
        assert!(parse_read_capacity16(&b).is_err());
        assert!(parse_read_capacity16(&b[..8]).is_err());
    }

    #[test]
    fn cdbs() {
        let c = read16(0x0102, 8);
        assert_eq!(c[0], 0x88);
        assert_eq!(&c[2..10], &0x0102u64.to_be_bytes());
        assert_eq!(&c[10..14], &8u32.to_be_bytes());
        assert_eq!(write16(0, 1, true)[1], 0x08);
        let p = unmap_parameters(&[(5, 6)]);
        assert_eq!(p.len(), 24);
        assert_eq!(&p[0..4], &[0, 22, 0, 16]);
    }

    #[test]
    fn vpd_pages() {
        let mut b = vec![0, 0xb0, 0, 0x3c];
        b.resize(64, 0);
        b[8..12].copy_from_slice(&2048u32.to_be_bytes());
        b[20..24].copy_from_slice(&u32::MAX.to_be_bytes());
        let l = parse_block_limits(&b).unwrap();
        assert_eq!(l.max_transfer, 2048);
        assert_eq!(l.max_unmap_lba_count, u32::MAX);
        assert!(parse_block_limits(&b[..3]).is_err());
        let p = parse_provisioning(&[0, 0xb2, 0, 4, 0, 0xe4, 2, 0]).unwrap();
        assert!(p.unmap && p.write_same16_unmap && p.reads_zero);
        assert_eq!(p.provisioning_type, 2);
    }

    #[test]
    fn unit_serial() {
        let page = |serial: &[u8]| {
            let mut b = vec![0, 0x80, 0, serial.len() as u8];
            b.extend_from_slice(serial);
            b
        };
        assert_eq!(parse_unit_serial(&page(b"  beaf11\0\0")).unwrap().as_deref(), Some("beaf11"));
        assert_eq!(parse_unit_serial(&page(b"SN 42 x")).unwrap().as_deref(), Some("SN 42 x"));
        assert_eq!(parse_unit_serial(&page(b"   \0")).unwrap(), None);
        assert_eq!(parse_unit_serial(&page(b"")).unwrap(), None);
        assert!(parse_unit_serial(&page(b"ab\x01cd")).is_err());
        assert!(parse_unit_serial(&[0, 0xb0, 0, 0]).is_err(), "another page");
        assert!(parse_unit_serial(&[0, 0x80]).is_err(), "short");
    }
}
