//! A sparse in-memory store: the backend of the embedded target.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};

use super::check_range;
use crate::endpoint::{Capabilities, Endpoint, Extent, Result};

/// Bytes per page of the store. Pages are allocated on first write.
const PAGE: u64 = 64 * 1024;
/// Lock shards, so concurrent requests on different pages rarely contend.
const SHARDS: usize = 64;

/// What never-written bytes read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Zeroes, reported as holes by block status (a sparse, empty disk).
    Zero,
    /// Deterministic pseudo-random bytes derived from `seed` and the offset,
    /// reported as data: a "full" disk of any size that costs no memory
    /// until written (like the seeds' virtual storage device, but readable
    /// back and verifiable).
    Random {
        /// Seed of the generator.
        seed: u64,
    },
}

/// A memory-backed store with 64 KiB pages allocated on write.
#[derive(Debug)]
pub struct MemoryEndpoint {
    name: String,
    size: u64,
    fill: Fill,
    shards: Box<[Mutex<Pages>]>,
    /// Accept and drop writes (a benchmark sink that never fills memory).
    discard_writes: bool,
}

/// Written pages of one shard, by page index.
type Pages = HashMap<u64, Box<[u8]>>;

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64: a small, fast, well-mixed generator for the random fill.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(GOLDEN);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Fill {
    /// Writes the never-written content of page `page` into `out`, starting
    /// `skip` bytes into the page.
    fn fill(self, page: u64, skip: usize, out: &mut [u8]) {
        match self {
            Fill::Zero => out.fill(0),
            Fill::Random { seed } => {
                // The page is a stream of 8-byte words; word k comes from
                // splitmix64 at state base + k * GOLDEN, so any sub-range can
                // start generating at its first word.
                let base = seed ^ page.wrapping_mul(0xd6e8_feb8_6659_fd93);
                let first_word = skip / 8;
                let mut state = base.wrapping_add((first_word as u64).wrapping_mul(GOLDEN));
                let mut pos = first_word * 8;
                let mut written = 0usize;
                while written < out.len() {
                    let word = splitmix64(&mut state).to_le_bytes();
                    let lo = skip.saturating_sub(pos);
                    let take = (8 - lo).min(out.len() - written);
                    out[written..written + take].copy_from_slice(&word[lo..lo + take]);
                    written += take;
                    pos += 8;
                }
            }
        }
    }
}

impl MemoryEndpoint {
    /// A store of `size` bytes whose unwritten bytes read as `fill`.
    pub fn new(name: impl Into<String>, size: u64, fill: Fill) -> Self {
        MemoryEndpoint {
            name: name.into(),
            size,
            fill,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            discard_writes: false,
        }
    }

    /// A store whose reads come from `fill` and whose writes, zeroes and
    /// trims are checked and then dropped: the seeds' "virtual storage
    /// device" for benchmarks, which never grows in memory. Data written
    /// does not read back.
    pub fn sink(name: impl Into<String>, size: u64, fill: Fill) -> Self {
        MemoryEndpoint { discard_writes: true, ..Self::new(name, size, fill) }
    }

    /// Bytes of memory held by written pages.
    pub fn allocated_bytes(&self) -> u64 {
        self.shards.iter().map(|s| lock(s).len() as u64 * PAGE).sum()
    }

    fn shard(&self, page: u64) -> &Mutex<Pages> {
        &self.shards[(page % SHARDS as u64) as usize]
    }

    fn page_len(&self, page: u64) -> usize {
        (self.size - page * PAGE).min(PAGE) as usize
    }

    /// Calls `f(page, offset_in_page, range_in_buffer)` for each page piece
    /// of `[offset, offset+len)`.
    fn for_pages(offset: u64, len: u64, mut f: impl FnMut(u64, usize, std::ops::Range<usize>)) {
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let page = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let n = ((PAGE - pos % PAGE).min(end - pos)) as usize;
            let at = (pos - offset) as usize;
            f(page, in_page, at..at + n);
            pos += n as u64;
        }
    }

    fn write_bytes(&self, offset: u64, data: &[u8]) {
        Self::for_pages(offset, data.len() as u64, |page, in_page, r| {
            let mut shard = lock(self.shard(page));
            let buf = shard.entry(page).or_insert_with(|| {
                let mut b = vec![0u8; self.page_len(page)].into_boxed_slice();
                self.fill.fill(page, 0, &mut b);
                b
            });
            buf[in_page..in_page + r.len()].copy_from_slice(&data[r]);
        });
    }

    fn zero_bytes(&self, offset: u64, len: u64) {
        Self::for_pages(offset, len, |page, in_page, r| {
            let whole = in_page == 0 && r.len() == self.page_len(page);
            let mut shard = lock(self.shard(page));
            if whole && self.fill == Fill::Zero {
                shard.remove(&page);
                return;
            }
            let buf = shard.entry(page).or_insert_with(|| {
                let mut b = vec![0u8; self.page_len(page)].into_boxed_slice();
                self.fill.fill(page, 0, &mut b);
                b
            });
            buf[in_page..in_page + r.len()].fill(0);
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave a page half-typed in a way
    // that matters more than the panic itself; keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl Endpoint for MemoryEndpoint {
    fn name(&self) -> &str {
        &self.name
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::everything()
    }

    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        check_range(&self.name, self.size, offset, len.into())?;
        let mut out = BytesMut::zeroed(len as usize);
        Self::for_pages(offset, len.into(), |page, in_page, r| {
            let shard = lock(self.shard(page));
            match shard.get(&page) {
                Some(buf) => out[r.clone()].copy_from_slice(&buf[in_page..in_page + r.len()]),
                None => {
                    drop(shard);
                    self.fill.fill(page, in_page, &mut out[r]);
                }
            }
        });
        Ok(out.freeze())
    }

    async fn write(&self, offset: u64, data: Bytes, _fua: bool) -> Result<()> {
        check_range(&self.name, self.size, offset, data.len() as u64)?;
        if !self.discard_writes {
            self.write_bytes(offset, &data);
        }
        Ok(())
    }

    async fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool) -> Result<()> {
        check_range(&self.name, self.size, offset, len)?;
        if !self.discard_writes {
            self.zero_bytes(offset, len);
        }
        Ok(())
    }

    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        check_range(&self.name, self.size, offset, len)?;
        // Trim is advisory; only a zero-filled store can drop whole pages
        // without changing what they read as.
        if self.fill == Fill::Zero && !self.discard_writes {
            Self::for_pages(offset, len, |page, in_page, r| {
                if in_page == 0 && r.len() == self.page_len(page) {
                    lock(self.shard(page)).remove(&page);
                }
            });
        }
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        Ok(())
    }

    async fn block_status(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        check_range(&self.name, self.size, offset, len)?;
        let mut out: Vec<Extent> = Vec::new();
        Self::for_pages(offset, len, |page, _, r| {
            let hole = self.fill == Fill::Zero && !lock(self.shard(page)).contains_key(&page);
            let piece = Extent { offset: offset + r.start as u64, length: r.len() as u64, hole, zero: hole };
            match out.last_mut() {
                Some(last) if last.hole == hole => last.length += piece.length,
                _ => out.push(piece),
            }
        });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    #[test]
    fn unwritten_zero_store_is_one_hole_and_reads_zero() {
        block_on(async {
            let m = MemoryEndpoint::new("mem", 10 * PAGE + 7, Fill::Zero);
            assert_eq!(m.read(5, 100).await.unwrap(), vec![0u8; 100]);
            let e = m.block_status(0, m.size()).await.unwrap();
            assert_eq!(e, vec![Extent { offset: 0, length: 10 * PAGE + 7, hole: true, zero: true }]);
        });
    }

    #[test]
    fn writes_read_back_across_page_boundaries() {
        block_on(async {
            let m = MemoryEndpoint::new("mem", 4 * PAGE, Fill::Zero);
            let data: Vec<u8> = (0..PAGE as usize + 300).map(|i| (i % 251) as u8).collect();
            m.write(PAGE - 150, Bytes::from(data.clone()), false).await.unwrap();
            assert_eq!(m.read(PAGE - 150, data.len() as u32).await.unwrap(), data);
            let e = m.block_status(0, 4 * PAGE).await.unwrap();
            assert_eq!(e.len(), 2, "{e:?}");
            assert!(!e[0].hole && e[0].length == 3 * PAGE);
            assert!(e[1].hole);
            m.write_zeroes(PAGE, PAGE, true).await.unwrap();
            assert_eq!(m.read(PAGE, 10).await.unwrap(), vec![0u8; 10]);
            assert_eq!(m.allocated_bytes(), 2 * PAGE);
        });
    }

    #[test]
    fn random_fill_is_deterministic_for_any_subrange() {
        block_on(async {
            let m = MemoryEndpoint::new("mem", 3 * PAGE, Fill::Random { seed: 7 });
            let all = m.read(0, (3 * PAGE) as u32).await.unwrap();
            for (off, len) in [(0u64, 1u32), (3, 13), (PAGE - 5, 11), (2 * PAGE + 9, 100)] {
                let part = m.read(off, len).await.unwrap();
                assert_eq!(part, all[off as usize..off as usize + len as usize]);
            }
            assert_ne!(all[..64], [0u8; 64]);
            // A partial write keeps the fill around it.
            m.write(PAGE + 10, Bytes::from_static(b"abc"), false).await.unwrap();
            let after = m.read(PAGE, 20).await.unwrap();
            assert_eq!(&after[10..13], b"abc");
            assert_eq!(after[..10], all[PAGE as usize..PAGE as usize + 10]);
            assert!(m.block_status(0, 3 * PAGE).await.unwrap().iter().all(|e| !e.hole));
        });
    }

    #[test]
    fn a_sink_drops_writes() {
        block_on(async {
            let m = MemoryEndpoint::sink("sink", 4 * PAGE, Fill::Random { seed: 3 });
            let before = m.read(0, 100).await.unwrap();
            m.write(0, Bytes::from(vec![0u8; 100]), false).await.unwrap();
            m.write_zeroes(0, 4 * PAGE, false).await.unwrap();
            assert_eq!(m.read(0, 100).await.unwrap(), before);
            assert_eq!(m.allocated_bytes(), 0);
            assert!(m.write(4 * PAGE, Bytes::from_static(b"x"), false).await.is_err(), "still range-checked");
        });
    }

    #[test]
    fn out_of_range_is_a_config_error() {
        block_on(async {
            let m = MemoryEndpoint::new("mem", 100, Fill::Zero);
            let e = m.read(90, 20).await.unwrap_err();
            assert!(matches!(e.kind, crate::ErrorKind::Config(_)));
            assert_eq!(e.offset, Some(90));
            assert!(m.write(u64::MAX, Bytes::from_static(b"x"), false).await.is_err());
        });
    }
}
