//! The copy loop: plan the source into data and zero pieces, keep enough
//! pieces in flight to fill every session slot, and account what is done.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::task::JoinSet;
use wanblk_blockdev::{Endpoint, EndpointError, Extent};

use crate::rate::{HORIZON, RateLimit};

/// How to copy.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Largest read or write the engine issues: pieces of the image are
    /// at most this long.
    pub max_request_bytes: u32,
    /// Compute the sha256 of the whole image (holes as zeroes), in offset order.
    pub verify: bool,
    /// The destination already reads as zeroes: skip holes and zero chunks.
    pub destination_is_zero: bool,
    /// Detect holes (block status) and all-zero chunks and turn them into
    /// zeroing requests instead of data writes.
    pub sparse: bool,
    /// Flush the destination at the end.
    pub flush: bool,
    /// Upper bound on bytes read but not yet written (memory bound).
    pub max_in_flight_bytes: u64,
    /// Copy only the first `length` bytes of the source.
    pub length: Option<u64>,
    /// Stop issuing new pieces at this time and finish with what is done
    /// (a time-boxed copy, for benchmarks): the outcome then reports
    /// `complete: false`.
    pub stop_at: Option<tokio::time::Instant>,
    /// Cap on the data moved per second (`--rate`): each data piece starts
    /// when the schedule says.
    pub rate: Option<Arc<RateLimit>>,
    /// The destination takes bytes in order only (a pipe): plan no further
    /// than `max_in_flight_bytes` past the first byte not yet written, as
    /// when hashing, so what waits for a gap stays bounded.
    pub in_order: bool,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            max_request_bytes: 4 << 20,
            verify: false,
            destination_is_zero: false,
            sparse: true,
            flush: false,
            max_in_flight_bytes: 1 << 30,
            length: None,
            stop_at: None,
            rate: None,
            in_order: false,
        }
    }
}

/// Live counters of a running copy, readable from other tasks (progress bar,
/// goodput monitor).
#[derive(Debug, Default)]
pub struct Progress {
    /// Bytes of the image finished (data written, zeroes written or skipped).
    pub done: AtomicU64,
    /// Bytes carried as data (read from the source and written to the destination).
    pub data: AtomicU64,
    /// Bytes turned into zeroing requests on the destination.
    pub zeroed: AtomicU64,
    /// Bytes skipped because the destination already reads as zero.
    pub skipped: AtomicU64,
    /// Total bytes to copy.
    pub total: AtomicU64,
}

/// What a finished copy did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CopyOutcome {
    /// Bytes of the image copied: the source size (or `length`) when
    /// complete, else the contiguous prefix copied before `stop_at`.
    pub bytes: u64,
    /// Bytes carried as data.
    pub data_bytes: u64,
    /// Bytes written as zeroing requests.
    pub zero_bytes: u64,
    /// Bytes skipped (destination already zero).
    pub skipped_bytes: u64,
    /// sha256 (hex) of the image in offset order, holes as zeroes, with
    /// `verify` (of the copied prefix when stopped early).
    pub sha256: Option<String>,
    /// Every byte was copied (false when `stop_at` cut the copy short).
    pub complete: bool,
}

/// A copy that stopped on an error. The destination holds exactly the
/// pieces that completed: every byte below `contiguous` was copied, and
/// `written` bytes were copied in all (some beyond `contiguous`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{error}")]
pub struct CopyError {
    /// The first error.
    pub error: EndpointError,
    /// All bytes below this offset were copied.
    pub contiguous: u64,
    /// Bytes copied in all.
    pub written: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PieceKind {
    Data,
    Zero,
}

/// One unit of work.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Piece {
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) kind: PieceKind,
}

/// The result of one piece: its payload (for hashing) or that it is zero.
pub(crate) enum Finished {
    Data(Bytes),
    Zero,
}

/// Plans the source in windows, asking block status when useful.
struct Planner {
    size: u64,
    pos: u64,
    request: u64,
    window: u64,
    use_block_status: bool,
    pending: std::collections::VecDeque<Piece>,
}

impl Planner {
    fn new(size: u64, request: u64, use_block_status: bool) -> Self {
        Planner {
            size,
            pos: 0,
            request,
            window: (request * 64).max(256 << 20),
            use_block_status,
            pending: Default::default(),
        }
    }

    /// Splits `[offset, offset+len)` of `kind` into pieces ending on
    /// request-size boundaries (so requests stay aligned to block sizes).
    fn push_run(&mut self, offset: u64, len: u64, kind: PieceKind) {
        let end = offset + len;
        let mut pos = offset;
        // Zero runs need no payload: larger pieces, fewer requests.
        let step = if kind == PieceKind::Zero { self.request.max(64 << 20) } else { self.request };
        while pos < end {
            let boundary = (pos / step + 1) * step;
            let n = boundary.min(end) - pos;
            self.pending.push_back(Piece { offset: pos, len: n, kind });
            pos += n;
        }
    }

    async fn next(&mut self, src: &dyn Endpoint) -> Result<Option<Piece>, EndpointError> {
        loop {
            if let Some(p) = self.pending.pop_front() {
                return Ok(Some(p));
            }
            if self.pos >= self.size {
                return Ok(None);
            }
            let len = self.window.min(self.size - self.pos);
            if !self.use_block_status {
                self.push_run(self.pos, len, PieceKind::Data);
                self.pos += len;
                continue;
            }
            let extents = src.block_status(self.pos, len).await?;
            let covered = self.take_extents(&extents, len)?;
            if covered == 0 {
                return Err(EndpointError::protocol(
                    src.name(),
                    Some(self.pos),
                    "block status returned no extent for the range",
                ));
            }
            self.pos += covered;
        }
    }

    /// Validates extents for the window starting at `self.pos` and turns them
    /// into pieces; returns the bytes covered.
    fn take_extents(&mut self, extents: &[Extent], len: u64) -> Result<u64, EndpointError> {
        let mut at = self.pos;
        let end = self.pos + len;
        for e in extents {
            if e.offset != at || e.length == 0 || e.offset + e.length > end {
                // Treat a malformed map as data from here: correct, only slower.
                tracing::warn!("ignoring a malformed block status map at offset {at}: {e:?}");
                break;
            }
            let kind = if e.zero { PieceKind::Zero } else { PieceKind::Data };
            self.push_run(at, e.length, kind);
            at += e.length;
        }
        Ok(at - self.pos)
    }
}

/// Tracks finished pieces in offset order: the contiguous frontier, and
/// the in-order sha256 when verifying.
pub(crate) struct Frontier {
    pub(crate) contiguous: u64,
    pub(crate) out_of_order: BTreeMap<u64, (u64, Option<Finished>)>,
    pub(crate) hasher: Option<Sha256>,
}

static ZEROES: [u8; 1 << 16] = [0u8; 1 << 16];

impl Frontier {
    pub(crate) fn finish(&mut self, piece: Piece, result: Finished) {
        let keep = self.hasher.is_some().then_some(result);
        self.out_of_order.insert(piece.offset, (piece.len, keep));
        while let Some(entry) = self.out_of_order.first_entry() {
            if *entry.key() != self.contiguous {
                break;
            }
            let (len, data) = entry.remove();
            if let Some(h) = self.hasher.as_mut() {
                match data {
                    Some(Finished::Data(b)) => h.update(&b),
                    _ => {
                        let mut left = len;
                        while left > 0 {
                            let n = left.min(ZEROES.len() as u64) as usize;
                            h.update(&ZEROES[..n]);
                            left -= n as u64;
                        }
                    }
                }
            }
            self.contiguous += len;
        }
    }
}

pub(crate) fn is_zero(b: &[u8]) -> bool {
    let mut chunks = b.chunks_exact(16);
    let wide = chunks.by_ref().all(|c| u128::from_ne_bytes(c.try_into().unwrap_or([1; 16])) == 0);
    wide && chunks.remainder().iter().all(|&x| x == 0)
}

/// Zeroes `[offset, offset+len)` on `dst`, natively if it can, else by
/// writing zero buffers.
pub(crate) async fn zero_range(
    dst: &dyn Endpoint,
    offset: u64,
    len: u64,
    request: u64,
) -> Result<(), EndpointError> {
    if dst.capabilities().can_zero {
        return dst.write_zeroes(offset, len, true).await;
    }
    let buf = Bytes::from(vec![0u8; len.min(request) as usize]);
    let mut pos = offset;
    while pos < offset + len {
        let n = (offset + len - pos).min(request);
        dst.write(pos, buf.slice(..n as usize), false).await?;
        pos += n;
    }
    Ok(())
}

async fn do_piece(
    src: Arc<dyn Endpoint>,
    dst: Arc<dyn Endpoint>,
    piece: Piece,
    opts: Arc<CopyOptions>,
    progress: Arc<Progress>,
    start_at: Option<tokio::time::Instant>,
) -> Result<Finished, EndpointError> {
    if let Some(t) = start_at {
        tokio::time::sleep_until(t).await;
    }
    let request = u64::from(opts.max_request_bytes);
    if piece.kind == PieceKind::Zero {
        if opts.destination_is_zero {
            progress.skipped.fetch_add(piece.len, Ordering::Relaxed);
        } else {
            zero_range(&*dst, piece.offset, piece.len, request).await?;
            progress.zeroed.fetch_add(piece.len, Ordering::Relaxed);
        }
        progress.done.fetch_add(piece.len, Ordering::Relaxed);
        return Ok(Finished::Zero);
    }
    let data = src.read(piece.offset, piece.len as u32).await?;
    if data.len() as u64 != piece.len {
        return Err(EndpointError::protocol(
            src.name(),
            Some(piece.offset),
            format!("read returned {} bytes, asked for {}", data.len(), piece.len),
        ));
    }
    if opts.sparse && is_zero(&data) {
        if opts.destination_is_zero {
            progress.skipped.fetch_add(piece.len, Ordering::Relaxed);
        } else {
            zero_range(&*dst, piece.offset, piece.len, request).await?;
            progress.zeroed.fetch_add(piece.len, Ordering::Relaxed);
        }
        progress.done.fetch_add(piece.len, Ordering::Relaxed);
        return Ok(Finished::Zero);
    }
    dst.write(piece.offset, data.clone(), false).await?;
    progress.data.fetch_add(piece.len, Ordering::Relaxed);
    progress.done.fetch_add(piece.len, Ordering::Relaxed);
    Ok(Finished::Data(data))
}

/// How long a failed copy waits for pieces already in flight.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(5);

/// After a failure: collects the pieces still in flight for up to
/// [`SETTLE`], then abandons the rest.
pub(crate) async fn settle(
    tasks: &mut JoinSet<(Piece, Result<Finished, EndpointError>)>,
    frontier: &mut Frontier,
) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    while let Ok(Some(joined)) = tokio::time::timeout_at(deadline, tasks.join_next()).await {
        if let Ok((piece, Ok(done))) = joined {
            frontier.finish(piece, done);
        }
    }
    tasks.abort_all();
}

/// Copies all of `src` (or its first `opts.length` bytes) to the same
/// offsets of `dst`.
///
/// `slots` says how many requests the sessions can carry right now (active
/// sessions x depth); the loop keeps that many pieces in flight, plus one
/// per slot so no session waits for the planner.
///
/// # Errors
/// The first failing request, with how much of the destination is complete.
/// # Cancel safety
/// Dropping the future stops issuing new requests; requests already sent
/// complete or fail on their own.
pub async fn copy(
    src: Arc<dyn Endpoint>,
    dst: Arc<dyn Endpoint>,
    opts: CopyOptions,
    progress: Arc<Progress>,
    slots: impl Fn() -> usize,
) -> Result<CopyOutcome, CopyError> {
    let size = opts.length.map_or(src.size(), |l| l.min(src.size()));
    progress.total.store(size, Ordering::Relaxed);
    let fail = |error: EndpointError, f: &Frontier, p: &Progress| CopyError {
        error,
        contiguous: f.contiguous,
        written: p.done.load(Ordering::Relaxed),
    };
    let mut frontier =
        Frontier { contiguous: 0, out_of_order: BTreeMap::new(), hasher: opts.verify.then(Sha256::new) };
    if dst.size() < size {
        return Err(fail(
            EndpointError::config(
                dst.name(),
                None,
                format!("destination is {} bytes, smaller than the source ({size} bytes)", dst.size()),
            ),
            &frontier,
            &progress,
        ));
    }
    let request = u64::from(opts.max_request_bytes.max(1));
    let use_bs = opts.sparse && src.capabilities().can_block_status;
    let mut planner = Planner::new(size, request, use_bs);
    let opts = Arc::new(opts);
    let mut tasks: JoinSet<(Piece, Result<Finished, EndpointError>)> = JoinSet::new();
    let mut in_flight_bytes = 0u64;
    let mut planned_end = 0u64;
    let mut exhausted = false;
    loop {
        // Fill: keep every slot busy (and one spare each), within the memory
        // bound and, when hashing, within a window past the hash frontier.
        let target = slots().max(1) * 2;
        if opts.stop_at.is_some_and(|t| tokio::time::Instant::now() >= t) {
            exhausted = true;
        }
        let booked = |o: &CopyOptions| o.rate.as_ref().is_some_and(|r| r.ahead() >= HORIZON);
        while !exhausted
            && !booked(&opts)
            && tasks.len() < target
            && in_flight_bytes < opts.max_in_flight_bytes
            && (!(opts.verify || opts.in_order)
                || planned_end < frontier.contiguous + opts.max_in_flight_bytes)
        {
            match planner.next(&*src).await {
                Ok(Some(p)) => {
                    if p.kind == PieceKind::Data {
                        in_flight_bytes += p.len;
                    }
                    planned_end = p.offset + p.len;
                    let start_at =
                        opts.rate.as_ref().filter(|_| p.kind == PieceKind::Data).map(|r| r.reserve(p.len));
                    let (s, d, o, pr) =
                        (Arc::clone(&src), Arc::clone(&dst), Arc::clone(&opts), Arc::clone(&progress));
                    tasks.spawn(async move { (p, do_piece(s, d, p, o, pr, start_at).await) });
                }
                Ok(None) => exhausted = true,
                Err(e) => {
                    tasks.abort_all();
                    return Err(fail(e, &frontier, &progress));
                }
            }
        }
        if tasks.is_empty() && !exhausted && booked(&opts) {
            // Booked far ahead with nothing in flight: wait for the schedule.
            tokio::time::sleep(opts.rate.as_ref().map_or(Duration::ZERO, |r| r.ahead() - HORIZON)).await;
            continue;
        }
        let Some(joined) = tasks.join_next().await else { break };
        let (piece, result) = match joined {
            Ok(r) => r,
            Err(e) => {
                tasks.abort_all();
                let err = EndpointError::io(dst.name(), None, format!("copy task failed: {e}"));
                return Err(fail(err, &frontier, &progress));
            }
        };
        if piece.kind == PieceKind::Data {
            in_flight_bytes -= piece.len;
        }
        match result {
            Ok(done) => frontier.finish(piece, done),
            Err(e) => {
                // Stop issuing; let pieces already under way finish (their
                // data may be read and only waiting to be written) so the
                // destination and the report hold everything that arrived.
                settle(&mut tasks, &mut frontier).await;
                return Err(fail(e.at(piece.offset), &frontier, &progress));
            }
        }
    }
    if opts.flush
        && let Err(e) = dst.flush().await
    {
        return Err(fail(e, &frontier, &progress));
    }
    Ok(CopyOutcome {
        complete: frontier.contiguous == size,
        bytes: frontier.contiguous,
        data_bytes: progress.data.load(Ordering::Relaxed),
        zero_bytes: progress.zeroed.load(Ordering::Relaxed),
        skipped_bytes: progress.skipped.load(Ordering::Relaxed),
        sha256: frontier.hasher.map(|h| hex::encode(h.finalize())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wanblk_blockdev::local::{Fill, MemoryEndpoint};

    #[test]
    fn zero_detection() {
        assert!(is_zero(&[0u8; 1000]));
        let mut v = vec![0u8; 1000];
        v[999] = 1;
        assert!(!is_zero(&v));
        v[999] = 0;
        v[3] = 1;
        assert!(!is_zero(&v));
        assert!(is_zero(&[]));
    }

    #[test]
    fn planner_aligns_pieces_to_request_boundaries() {
        let mut p = Planner::new(10 << 20, 1 << 20, false);
        p.push_run(1000, 3 << 20, PieceKind::Data);
        let pieces: Vec<_> = p.pending.iter().map(|p| (p.offset, p.len)).collect();
        assert_eq!(pieces[0], (1000, (1 << 20) - 1000));
        assert!(pieces[1..].iter().all(|(o, _)| o % (1 << 20) == 0));
        assert_eq!(pieces.iter().map(|p| p.1).sum::<u64>(), 3 << 20);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn copies_memory_to_memory_with_hash_and_holes() {
        let src = Arc::new(MemoryEndpoint::new("src", 40 << 20, Fill::Zero));
        let data: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 253) as u8 + 1).collect();
        src.write(5 << 20, Bytes::from(data.clone()), false).await.unwrap();
        src.write(30 << 20, Bytes::from(vec![0u8; 1 << 20]), false).await.unwrap(); // allocated zeroes
        let dst = Arc::new(MemoryEndpoint::new("dst", 40 << 20, Fill::Random { seed: 1 }));
        let progress = Arc::new(Progress::default());
        let opts = CopyOptions { max_request_bytes: 1 << 20, verify: true, ..Default::default() };
        let out = copy(src.clone(), dst.clone(), opts, progress, || 4).await.unwrap();
        assert_eq!(out.bytes, 40 << 20);
        assert!(out.complete);
        assert_eq!(out.data_bytes, 3 << 20);
        assert_eq!(out.zero_bytes, 37 << 20);
        let whole = dst.read(0, 40 << 20).await.unwrap();
        let expect = src.read(0, 40 << 20).await.unwrap();
        assert!(whole == expect);
        assert_eq!(out.sha256.unwrap(), hex::encode(Sha256::digest(&expect)));
    }
}
