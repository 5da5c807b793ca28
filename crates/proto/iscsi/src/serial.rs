//! Serial number arithmetic for 32-bit sequence numbers (RFC 1982, used by
//! RFC 7143 section 4.2.2.1 for CmdSN, StatSN, DataSN and R2TSN).

/// `a < b` in serial number arithmetic.
pub fn lt(a: u32, b: u32) -> bool {
    a != b && b.wrapping_sub(a) < 0x8000_0000
}

/// `a <= b` in serial number arithmetic.
pub fn le(a: u32, b: u32) -> bool {
    a == b || lt(a, b)
}

/// `a > b` in serial number arithmetic.
pub fn gt(a: u32, b: u32) -> bool {
    lt(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps() {
        assert!(lt(1, 2));
        assert!(lt(u32::MAX, 0));
        assert!(gt(0, u32::MAX));
        assert!(le(5, 5));
        assert!(!lt(5, 5));
        assert!(lt(0xffff_fff0, 0x10));
    }
}
