//! The framer: whole PDUs out of a byte stream and into segments to write
//! (RFC 7143 section 11.1), with the negotiated CRC32C digests and the data
//! segment bounded by the MaxRecvDataSegmentLength this side declared.

use bytes::{Buf, Bytes, BytesMut};

use super::bhs::{BHS_LEN, MAX_DATA_SEGMENT};
use super::header::Header;
use crate::digest;
use crate::error::PduError;
use crate::opcode::Opcode;

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
    use crate::pdu::bhs::RESERVED_TAG;
    use crate::pdu::initiator::NopOut;
    use crate::pdu::target::R2t;

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
