//! Test data in which misplaced bytes are visible.
//!
//! An image for a seed is a sequence of 512-byte blocks; each block holds
//! its own byte offset (u64, little endian), the seed (u64, little endian)
//! and 496 pseudo-random bytes derived from both. No two blocks of an
//! image are equal, and no block equals a block of another seed's image:
//! a chunk written or read one block off, at another chunk's place, or
//! from another test's data changes the bytes (and the sha256), and
//! [`check_blocks`] says where the misplaced block came from.
//!
//! (Data that repeats, such as a byte pattern with a period of 256 bytes,
//! hides exactly those bugs: a chunk moved by a multiple of the period
//! reads back the same.)

use bytes::Bytes;

/// The unit that carries its own offset.
pub const BLOCK: u64 = 512;

/// splitmix64: a fast, well-mixed step of a 64-bit state.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The whole block that starts at `start` (a multiple of [`BLOCK`]).
fn block(start: u64, seed: u64, out: &mut [u8; BLOCK as usize]) {
    out[..8].copy_from_slice(&start.to_le_bytes());
    out[8..16].copy_from_slice(&seed.to_le_bytes());
    let mut state = seed.wrapping_mul(0xd6e8_feb8_6659_fd93) ^ start;
    for w in out[16..].chunks_exact_mut(8) {
        w.copy_from_slice(&splitmix(&mut state).to_le_bytes());
    }
}

/// Fills `buf` with bytes `offset..offset + buf.len()` of the image for
/// `seed` (any offset and length: a part of a block is that part of it).
pub fn fill_blocks(buf: &mut [u8], offset: u64, seed: u64) {
    let mut b = [0u8; BLOCK as usize];
    let mut pos = 0usize;
    while pos < buf.len() {
        let at = offset + pos as u64;
        let start = at - at % BLOCK;
        let skip = (at - start) as usize;
        let n = (BLOCK as usize - skip).min(buf.len() - pos);
        block(start, seed, &mut b);
        buf[pos..pos + n].copy_from_slice(&b[skip..skip + n]);
        pos += n;
    }
}

/// Bytes `offset..offset + len` of the image for `seed`.
pub fn block_data(offset: u64, len: usize, seed: u64) -> Bytes {
    let mut v = vec![0u8; len];
    fill_blocks(&mut v, offset, seed);
    Bytes::from(v)
}

/// The offset and seed of the image block whose start `got` is, if any.
fn identify(got: &[u8]) -> Option<(u64, u64)> {
    let o = u64::from_le_bytes(got.get(..8)?.try_into().ok()?);
    let s = u64::from_le_bytes(got.get(8..16)?.try_into().ok()?);
    if o % BLOCK != 0 || got.len() > BLOCK as usize {
        return None;
    }
    let mut b = [0u8; BLOCK as usize];
    block(o, s, &mut b);
    (b[..got.len()] == *got).then_some((o, s))
}

/// Checks that `data` holds bytes `offset..offset + data.len()` of the
/// image for `seed`.
///
/// # Errors
/// The first block that differs, and what it holds instead: the block of
/// another offset or seed (misplaced data, named by its header), zeroes,
/// or other bytes.
pub fn check_blocks(data: &[u8], offset: u64, seed: u64) -> Result<(), String> {
    let mut want = [0u8; BLOCK as usize];
    let mut pos = 0usize;
    while pos < data.len() {
        let at = offset + pos as u64;
        let start = at - at % BLOCK;
        let skip = (at - start) as usize;
        let n = (BLOCK as usize - skip).min(data.len() - pos);
        block(start, seed, &mut want);
        let got = &data[pos..pos + n];
        if got != &want[skip..skip + n] {
            let first = got.iter().zip(&want[skip..]).position(|(a, b)| a != b).unwrap_or(0);
            let what = if got.iter().all(|&b| b == 0) {
                "zeroes".to_string()
            } else if let Some((o, s)) = identify(got).filter(|_| skip == 0) {
                let shift = i128::from(o) - i128::from(start);
                format!("the block of offset {o} (seed {s}, {shift:+} bytes away)")
            } else {
                "other bytes".to_string()
            };
            return Err(format!(
                "the block at offset {start} (seed {seed}) differs from byte {} on: it holds {what}",
                start + (skip + first) as u64
            ));
        }
        pos += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_is_unique_and_carries_its_offset_and_seed() {
        let d = block_data(0, 64 << 10, 3);
        let mut seen = std::collections::HashSet::new();
        for (i, b) in d.chunks(BLOCK as usize).enumerate() {
            assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), i as u64 * BLOCK);
            assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 3);
            assert!(seen.insert(b.to_vec()), "block {i} repeats");
        }
        assert_ne!(block_data(0, 512, 3), block_data(0, 512, 4), "seeds differ");
    }

    #[test]
    fn any_part_is_that_part_of_the_image() {
        let whole = block_data(0, 8192, 9);
        for (off, len) in [(0, 8192), (1, 100), (500, 30), (511, 2), (1000, 5000), (4096, 512)] {
            assert_eq!(block_data(off, len, 9), whole.slice(off as usize..off as usize + len), "{off}+{len}");
            check_blocks(&whole[off as usize..off as usize + len], off, 9).unwrap();
        }
    }

    #[test]
    fn a_block_out_of_place_is_named() {
        // A chunk written one block too far: the block at 1024 holds 512's.
        let mut d = block_data(0, 4096, 1).to_vec();
        d.copy_within(512..1024, 1024);
        let e = check_blocks(&d, 0, 1).unwrap_err();
        assert!(
            e.contains("block at offset 1024") && e.contains("block of offset 512 (seed 1, -512 bytes"),
            "{e}"
        );
        // Another test's data, zeroes, a flipped bit.
        let e = check_blocks(&block_data(0, 512, 2), 0, 1).unwrap_err();
        assert!(e.contains("seed 2"), "{e}");
        let e = check_blocks(&[0u8; 1024], 0, 1).unwrap_err();
        assert!(e.contains("zeroes"), "{e}");
        let mut d = block_data(0, 1024, 1).to_vec();
        d[700] ^= 1;
        let e = check_blocks(&d, 0, 1).unwrap_err();
        assert!(e.contains("block at offset 512") && e.contains("from byte 700"), "{e}");
    }
}
