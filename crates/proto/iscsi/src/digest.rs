//! CRC32C header and data digests (RFC 7143 section 13.1, appendix B of RFC
//! 3720 for test vectors). The digest travels little-endian on the wire.

/// CRC32C (Castagnoli) of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Continues a CRC32C over more bytes.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}
