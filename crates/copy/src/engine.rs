//! The copy loop: plan the source into data and zero pieces, keep enough
//! pieces in flight to fill every session slot, account what is done,
//! checkpoint it into the journal, stop cleanly when asked, flush, and
//! read the destination back with `verify`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use wanblk_blockdev::{Endpoint, EndpointError};

use crate::journal::Journal;
use crate::plan::{Piece, PieceKind, Planner};
use crate::rate::{HORIZON, RateLimit};
use crate::verify::{self, Check, VerifyOutcome};

/// How to copy.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Largest read or write the engine issues: pieces of the image are
    /// at most this long.
    pub max_request_bytes: u32,
    /// Compute the sha256 of the whole image (holes as zeroes), in offset
    /// order (`--checksum`).
    pub checksum: bool,
    /// After the copy (and its flush), read the destination back and
    /// compare it with what was read from the source (`--verify`).
    pub verify: bool,
    /// The destination already reads as zeroes: skip holes and zero chunks.
    pub destination_is_zero: bool,
    /// Detect holes (block status) and all-zero chunks and turn them into
    /// zeroing requests instead of data writes.
    pub sparse: bool,
    /// Flush the destination at the end (and before every journal
    /// checkpoint), so what is reported copied is on stable storage.
    pub flush: bool,
    /// Upper bound on bytes read but not yet written (memory bound).
    pub max_in_flight_bytes: u64,
    /// Copy only the first `length` bytes of the source.
    pub length: Option<u64>,
    /// Stop issuing new pieces at this time and finish with what is done
    /// (a time-boxed copy, for benchmarks): the outcome then reports
    /// `complete: false`.
    pub stop_at: Option<Instant>,
    /// After a stop or an error, how long pieces in flight may take to
    /// finish; the rest is abandoned (copied again by a resumed run).
    pub settle: Duration,
    /// With a journal: flush and record completed ranges at least this
    /// often...
    pub checkpoint_interval: Duration,
    /// ...and whenever this many bytes completed since the last checkpoint.
    pub checkpoint_bytes: u64,
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
            checksum: false,
            verify: false,
            destination_is_zero: false,
            sparse: true,
            flush: true,
            max_in_flight_bytes: 1 << 30,
            length: None,
            stop_at: None,
            settle: Duration::from_secs(10),
            checkpoint_interval: Duration::from_secs(5),
            checkpoint_bytes: 512 << 20,
            rate: None,
            in_order: false,
        }
    }
}

/// Live counters of a running copy, readable from other tasks (progress bar,
/// goodput monitor).
#[derive(Debug, Default)]
pub struct Progress {
    /// Bytes of the image finished (data written, zeroes written or
    /// skipped, ranges an earlier run copied).
    pub done: AtomicU64,
    /// Bytes carried as data (read from the source and written to the destination).
    pub data: AtomicU64,
    /// Bytes turned into zeroing requests on the destination.
    pub zeroed: AtomicU64,
    /// Bytes skipped because the destination already reads as zero.
    pub skipped: AtomicU64,
    /// Bytes an earlier run copied (from the journal), not copied again.
    pub resumed: AtomicU64,
    /// Total bytes to copy.
    pub total: AtomicU64,
}

/// What a finished copy did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CopyOutcome {
    /// Bytes of the image copied: the source size (or `length`) when
    /// complete, else the contiguous prefix copied when it stopped.
    pub bytes: u64,
    /// Bytes carried as data.
    pub data_bytes: u64,
    /// Bytes written as zeroing requests.
    pub zero_bytes: u64,
    /// Bytes skipped (destination already zero).
    pub skipped_bytes: u64,
    /// Bytes an earlier run copied (journal), not copied again.
    pub resumed_bytes: u64,
    /// sha256 (hex) of the image in offset order, holes as zeroes, with
    /// `checksum` (of the copied prefix when stopped early).
    pub sha256: Option<String>,
    /// Every byte was copied.
    pub complete: bool,
    /// The copy was stopped (by `stop_at` or the stop signal) before it
    /// was complete.
    pub interrupted: bool,
    /// The destination was flushed after the last write.
    pub flushed: bool,
    /// The most bytes the copy had read and not yet written at once.
    pub max_in_flight_bytes: u64,
    /// The read-back, with `verify` (only after a complete copy).
    pub verify: Option<VerifyOutcome>,
}

/// A copy that stopped on an error. The destination holds exactly the
/// pieces that completed: every byte below `contiguous` was copied, and
/// `written` bytes were copied in all (some beyond `contiguous`); the
/// journal, if any, holds those that were flushed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{error}")]
pub struct CopyError {
    /// The first error.
    pub error: EndpointError,
    /// All bytes below this offset were copied.
    pub contiguous: u64,
    /// Bytes copied in all.
    pub written: u64,
    /// The most bytes in flight at once.
    pub max_in_flight_bytes: u64,
}

/// What a piece's task hands back.
pub(crate) struct Finished {
    /// Its bytes, for the in-order checksum (`None`: zeroes, or not kept).
    pub(crate) data: Option<Bytes>,
    /// What the destination must hold there (with `verify`).
    pub(crate) check: Option<Check>,
}

/// Tracks finished pieces in offset order: the contiguous frontier, and
/// the in-order sha256 with `checksum`.
pub(crate) struct Frontier {
    pub(crate) contiguous: u64,
    pub(crate) out_of_order: BTreeMap<u64, (u64, Option<Bytes>)>,
    pub(crate) hasher: Option<Sha256>,
}

static ZEROES: [u8; 1 << 16] = [0u8; 1 << 16];

impl Frontier {
    pub(crate) fn finish(&mut self, piece: Piece, data: Option<Bytes>) {
        let keep = if self.hasher.is_some() { data } else { None };
        self.out_of_order.insert(piece.offset, (piece.len, keep));
        while let Some(entry) = self.out_of_order.first_entry() {
            if *entry.key() != self.contiguous {
                break;
            }
            let (len, data) = entry.remove();
            if let Some(h) = self.hasher.as_mut() {
                match data {
                    Some(b) => h.update(&b),
                    None => {
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

/// Zeroes a piece unless the destination is known to be zero.
async fn zero_piece(
    dst: &dyn Endpoint,
    piece: Piece,
    opts: &CopyOptions,
    progress: &Progress,
) -> Result<Finished, EndpointError> {
    if opts.destination_is_zero {
        progress.skipped.fetch_add(piece.len, Ordering::Relaxed);
    } else {
        zero_range(dst, piece.offset, piece.len, u64::from(opts.max_request_bytes)).await?;
        progress.zeroed.fetch_add(piece.len, Ordering::Relaxed);
    }
    progress.done.fetch_add(piece.len, Ordering::Relaxed);
    Ok(Finished { data: None, check: opts.verify.then_some(Check::Zero) })
}

fn check_len(src: &dyn Endpoint, piece: Piece, data: &Bytes) -> Result<(), EndpointError> {
    if data.len() as u64 != piece.len {
        return Err(EndpointError::protocol(
            src.name(),
            Some(piece.offset),
            format!("read returned {} bytes, asked for {}", data.len(), piece.len),
        ));
    }
    Ok(())
}

async fn do_piece(
    src: Arc<dyn Endpoint>,
    dst: Arc<dyn Endpoint>,
    piece: Piece,
    opts: Arc<CopyOptions>,
    progress: Arc<Progress>,
    start_at: Option<Instant>,
) -> Result<Finished, EndpointError> {
    if let Some(t) = start_at {
        tokio::time::sleep_until(t).await;
    }
    match piece.kind {
        PieceKind::Zero => return zero_piece(&*dst, piece, &opts, &progress).await,
        PieceKind::Done => {
            // Copied by an earlier run: read only to hash it in order.
            let data = if opts.checksum {
                let d = src.read(piece.offset, piece.len as u32).await?;
                check_len(&*src, piece, &d)?;
                Some(d)
            } else {
                None
            };
            progress.resumed.fetch_add(piece.len, Ordering::Relaxed);
            progress.done.fetch_add(piece.len, Ordering::Relaxed);
            return Ok(Finished { data, check: opts.verify.then_some(Check::Source) });
        }
        PieceKind::Data => {}
    }
    let data = src.read(piece.offset, piece.len as u32).await?;
    check_len(&*src, piece, &data)?;
    if opts.sparse && is_zero(&data) {
        return zero_piece(&*dst, piece, &opts, &progress).await;
    }
    let check = opts.verify.then(|| Check::Sha256(verify::digest(&data)));
    dst.write(piece.offset, data.clone(), false).await?;
    progress.data.fetch_add(piece.len, Ordering::Relaxed);
    progress.done.fetch_add(piece.len, Ordering::Relaxed);
    Ok(Finished { data: opts.checksum.then_some(data), check })
}

/// A checkpoint's flush running, with the ranges it covers.
type CheckpointTask = tokio::task::JoinHandle<Flushed>;
/// The ranges a checkpoint's flush covers, and how it went.
type Flushed = (Vec<(u64, u64)>, Result<(), EndpointError>);
/// What a piece's task hands back.
type PieceResult = (Piece, Result<Finished, EndpointError>);

/// What the loop owns besides the pieces in flight.
struct Books {
    frontier: Frontier,
    /// Pieces written this run and not yet in the journal.
    unjournaled: Vec<(u64, u64)>,
    unjournaled_bytes: u64,
    /// What the destination must hold, by piece (with `verify`).
    checks: BTreeMap<u64, (u64, Check)>,
    in_flight_bytes: u64,
    max_in_flight_bytes: u64,
    /// A flush running for a checkpoint, and the ranges it covers.
    checkpoint: Option<CheckpointTask>,
    last_checkpoint: Instant,
}

impl Books {
    /// Whether `p` holds memory while in flight (data read and not yet
    /// written; with a checksum, also the done pieces read to hash them).
    fn holds_memory(&self, p: &Piece) -> bool {
        p.kind == PieceKind::Data || (p.kind == PieceKind::Done && self.frontier.hasher.is_some())
    }

    fn finish(&mut self, piece: Piece, done: Finished) {
        if let Some(c) = done.check {
            self.checks.insert(piece.offset, (piece.len, c));
        }
        if piece.kind != PieceKind::Done {
            self.unjournaled.push((piece.offset, piece.len));
            self.unjournaled_bytes += piece.len;
        }
        self.frontier.finish(piece, done.data);
    }

    /// Starts a checkpoint (flush, then journal) when one is due.
    fn maybe_checkpoint(&mut self, dst: &Arc<dyn Endpoint>, opts: &CopyOptions, has_journal: bool) {
        let due = self.unjournaled_bytes >= opts.checkpoint_bytes
            || (self.unjournaled_bytes > 0 && self.last_checkpoint.elapsed() >= opts.checkpoint_interval);
        if !has_journal || self.checkpoint.is_some() || !due {
            return;
        }
        let ranges = std::mem::take(&mut self.unjournaled);
        self.unjournaled_bytes = 0;
        self.last_checkpoint = Instant::now();
        let (dst, flush) = (Arc::clone(dst), opts.flush);
        self.checkpoint = Some(tokio::spawn(async move {
            let r = if flush { dst.flush().await } else { Ok(()) };
            (ranges, r)
        }));
    }
}

/// Records flushed ranges in the journal.
fn journal_record(
    journal: &mut Option<&mut Journal>,
    ranges: &[(u64, u64)],
    dst: &dyn Endpoint,
) -> Result<(), EndpointError> {
    match journal {
        Some(j) => j.record(ranges).map_err(|e| EndpointError::io(dst.name(), None, e)),
        None => Ok(()),
    }
}

/// Waits for the running checkpoint, if any, and journals its ranges.
async fn finish_checkpoint(
    books: &mut Books,
    journal: &mut Option<&mut Journal>,
    dst: &dyn Endpoint,
) -> Result<(), EndpointError> {
    let Some(h) = books.checkpoint.take() else { return Ok(()) };
    match h.await {
        Ok((ranges, Ok(()))) => journal_record(journal, &ranges, dst),
        Ok((_, Err(e))) => Err(e),
        Err(e) => Err(EndpointError::io(dst.name(), None, format!("checkpoint task failed: {e}"))),
    }
}

/// Lets the pieces in flight finish for up to `settle`, then abandons the
/// rest (they were not journaled: a resumed run copies them again).
async fn settle(tasks: &mut JoinSet<PieceResult>, books: &mut Books, settle: Duration) {
    let deadline = Instant::now() + settle;
    while let Ok(Some(joined)) = tokio::time::timeout_at(deadline, tasks.join_next()).await {
        settled(books, joined);
    }
    if tasks.is_empty() {
        return;
    }
    tracing::warn!("abandoning {} requests still in flight after {settle:?}", tasks.len());
    tasks.abort_all();
    // Reap the aborted tasks here (at once: they end at their next await),
    // so the caller's loop never joins one and takes its cancellation for a
    // failed copy. One that finished before the abort is still booked.
    while let Some(joined) = tasks.join_next().await {
        settled(books, joined);
    }
}

/// Books a piece that ended while settling; a cancelled task is dropped.
fn settled(books: &mut Books, joined: Result<PieceResult, tokio::task::JoinError>) {
    if let Ok((piece, r)) = joined {
        if books.holds_memory(&piece) {
            books.in_flight_bytes -= piece.len;
        }
        if let Ok(done) = r {
            books.finish(piece, done);
        }
    }
}

/// The last checkpoint: flush what completed, journal it. After an error
/// it is `bounded` (by `settle`, at least 30 s).
async fn last_checkpoint(
    books: &mut Books,
    journal: &mut Option<&mut Journal>,
    dst: &Arc<dyn Endpoint>,
    opts: &CopyOptions,
    bounded: bool,
) -> Result<bool, EndpointError> {
    let work = async {
        finish_checkpoint(books, journal, &**dst).await?;
        if opts.flush {
            dst.flush().await?;
        }
        let ranges = std::mem::take(&mut books.unjournaled);
        books.unjournaled_bytes = 0;
        journal_record(journal, &ranges, &**dst)?;
        Ok(opts.flush)
    };
    if !bounded {
        return work.await;
    }
    match tokio::time::timeout(opts.settle.max(Duration::from_secs(30)), work).await {
        Ok(r) => r,
        Err(_) => Err(EndpointError::io(dst.name(), None, "the last flush did not finish in time")),
    }
}

/// What woke the copy loop.
enum Next {
    Joined(Result<PieceResult, tokio::task::JoinError>),
    Checkpoint(Result<Flushed, tokio::task::JoinError>),
    Stop(bool),
    Timer,
}

/// Controls of a running copy besides its options.
#[derive(Default)]
pub struct Control<'a> {
    /// Turns true to stop the copy: no new pieces are issued, those in
    /// flight get [`CopyOptions::settle`] to finish, what completed is
    /// flushed and journaled, and the outcome says `interrupted`.
    pub stop: Option<watch::Receiver<bool>>,
    /// The resume journal: its ranges are not copied again, and ranges
    /// completed now are recorded in it once flushed.
    pub journal: Option<&'a mut Journal>,
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
/// complete or fail on their own. Use [`Control::stop`] to stop cleanly.
pub async fn copy(
    src: Arc<dyn Endpoint>,
    dst: Arc<dyn Endpoint>,
    opts: CopyOptions,
    progress: Arc<Progress>,
    slots: impl Fn() -> usize,
    control: Control<'_>,
) -> Result<CopyOutcome, CopyError> {
    let Control { mut stop, mut journal } = control;
    let size = opts.length.map_or(src.size(), |l| l.min(src.size()));
    progress.total.store(size, Ordering::Relaxed);
    let mut books = Books {
        frontier: Frontier {
            contiguous: 0,
            out_of_order: BTreeMap::new(),
            hasher: opts.checksum.then(Sha256::new),
        },
        unjournaled: Vec::new(),
        unjournaled_bytes: 0,
        checks: BTreeMap::new(),
        in_flight_bytes: 0,
        max_in_flight_bytes: 0,
        checkpoint: None,
        last_checkpoint: Instant::now(),
    };
    let fail = |error: EndpointError, b: &Books, p: &Progress| CopyError {
        error,
        contiguous: b.frontier.contiguous,
        written: p.done.load(Ordering::Relaxed) - p.resumed.load(Ordering::Relaxed),
        max_in_flight_bytes: b.max_in_flight_bytes,
    };
    if dst.size() < size {
        let e = EndpointError::config(
            dst.name(),
            None,
            format!("destination is {} bytes, smaller than the source ({size} bytes)", dst.size()),
        );
        return Err(fail(e, &books, &progress));
    }
    let request = u64::from(opts.max_request_bytes.max(1));
    let use_bs = opts.sparse && src.capabilities().can_block_status;
    let done_before = journal.as_ref().map(|j| j.done().clone()).unwrap_or_default();
    let mut planner = Planner::new(size, request, use_bs, done_before, opts.checksum || opts.verify);
    let opts = Arc::new(opts);
    let has_journal = journal.is_some();
    let mut tasks: JoinSet<PieceResult> = JoinSet::new();
    let mut planned_end = 0u64;
    let mut exhausted = false;
    let mut interrupted = false;
    loop {
        if opts.stop_at.is_some_and(|t| Instant::now() >= t) || stop.as_ref().is_some_and(|s| *s.borrow()) {
            if !exhausted {
                interrupted = true;
            }
            exhausted = true;
        }
        // Fill: keep every slot busy (and one spare each), within the memory
        // bound and, when hashing, within a window past the hash frontier.
        let target = slots().max(1) * 2;
        let booked = |o: &CopyOptions| o.rate.as_ref().is_some_and(|r| r.ahead() >= HORIZON);
        while !exhausted
            && !booked(&opts)
            && tasks.len() < target
            && books.in_flight_bytes < opts.max_in_flight_bytes
            && (!(opts.checksum || opts.in_order)
                || planned_end < books.frontier.contiguous + opts.max_in_flight_bytes)
        {
            match planner.next(&*src).await {
                Ok(Some(p)) => {
                    if books.holds_memory(&p) {
                        books.in_flight_bytes += p.len;
                        books.max_in_flight_bytes = books.max_in_flight_bytes.max(books.in_flight_bytes);
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
                    settle(&mut tasks, &mut books, opts.settle).await;
                    let _ = last_checkpoint(&mut books, &mut journal, &dst, &opts, true).await;
                    return Err(fail(e, &books, &progress));
                }
            }
        }
        if tasks.is_empty() && !exhausted && booked(&opts) {
            // Booked far ahead with nothing in flight: wait for the schedule.
            tokio::time::sleep(opts.rate.as_ref().map_or(Duration::ZERO, |r| r.ahead() - HORIZON)).await;
            continue;
        }
        if interrupted && !tasks.is_empty() {
            settle(&mut tasks, &mut books, opts.settle).await;
        }
        let next = tokio::select! {
            j = tasks.join_next() => match j { Some(j) => Next::Joined(j), None => break },
            r = async { books.checkpoint.as_mut().expect("guarded").await }, if books.checkpoint.is_some() => {
                Next::Checkpoint(r)
            }
            r = async { stop.as_mut().expect("guarded").changed().await }, if stop.is_some() && !exhausted => {
                Next::Stop(r.is_ok())
            }
            _ = tokio::time::sleep_until(opts.stop_at.unwrap_or_else(Instant::now)), if opts.stop_at.is_some() && !exhausted => {
                Next::Timer
            }
        };
        let joined = match next {
            Next::Joined(j) => j,
            Next::Checkpoint(r) => {
                books.checkpoint = None;
                let r = match r {
                    Ok((ranges, Ok(()))) => journal_record(&mut journal, &ranges, &*dst),
                    Ok((_, Err(e))) => Err(e),
                    Err(e) => {
                        Err(EndpointError::io(dst.name(), None, format!("checkpoint task failed: {e}")))
                    }
                };
                if let Err(e) = r {
                    settle(&mut tasks, &mut books, opts.settle).await;
                    return Err(fail(e, &books, &progress));
                }
                continue;
            }
            Next::Stop(alive) => {
                if !alive {
                    // Nobody can ask to stop any more.
                    stop = None;
                }
                continue;
            }
            Next::Timer => continue,
        };
        let (piece, result) = match joined {
            Ok(r) => r,
            Err(e) => {
                settle(&mut tasks, &mut books, opts.settle).await;
                let err = EndpointError::io(dst.name(), None, format!("copy task failed: {e}"));
                return Err(fail(err, &books, &progress));
            }
        };
        if books.holds_memory(&piece) {
            books.in_flight_bytes -= piece.len;
        }
        match result {
            Ok(done) => {
                books.finish(piece, done);
                books.maybe_checkpoint(&dst, &opts, has_journal);
            }
            Err(e) => {
                // Stop issuing; let pieces already under way finish (their
                // data may be read and only waiting to be written) so the
                // destination, the journal and the report hold everything
                // that arrived.
                settle(&mut tasks, &mut books, opts.settle).await;
                if let Err(f) = last_checkpoint(&mut books, &mut journal, &dst, &opts, true).await {
                    tracing::warn!("after the error, flushing what was copied failed too: {f}");
                }
                return Err(fail(e.at(piece.offset), &books, &progress));
            }
        }
    }
    let flushed = match last_checkpoint(&mut books, &mut journal, &dst, &opts, interrupted).await {
        Ok(f) => f,
        Err(e) => return Err(fail(e, &books, &progress)),
    };
    let complete = books.frontier.contiguous == size;
    let verify = if opts.verify && complete {
        match verify::verify(Arc::clone(&src), Arc::clone(&dst), &books.checks, request, || {
            slots().max(1) * 2
        })
        .await
        {
            Ok(v) => Some(v),
            Err(e) => return Err(fail(e, &books, &progress)),
        }
    } else {
        None
    };
    Ok(CopyOutcome {
        complete,
        interrupted: interrupted && !complete,
        bytes: books.frontier.contiguous,
        data_bytes: progress.data.load(Ordering::Relaxed),
        zero_bytes: progress.zeroed.load(Ordering::Relaxed),
        skipped_bytes: progress.skipped.load(Ordering::Relaxed),
        resumed_bytes: progress.resumed.load(Ordering::Relaxed),
        sha256: books.frontier.hasher.take().map(|h| hex::encode(h.finalize())),
        flushed,
        max_in_flight_bytes: books.max_in_flight_bytes,
        verify,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Fault, TestStore};
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

    fn source() -> Arc<MemoryEndpoint> {
        Arc::new(MemoryEndpoint::new("src", 40 << 20, Fill::Zero))
    }

    async fn fill(src: &MemoryEndpoint) -> Bytes {
        let data: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 253) as u8 + 1).collect();
        src.write(5 << 20, Bytes::from(data), false).await.unwrap();
        src.write(30 << 20, Bytes::from(vec![0u8; 1 << 20]), false).await.unwrap(); // allocated zeroes
        src.read(0, 40 << 20).await.unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn copies_memory_to_memory_with_hash_and_holes() {
        let src = source();
        let expect = fill(&src).await;
        let dst = Arc::new(MemoryEndpoint::new("dst", 40 << 20, Fill::Random { seed: 1 }));
        let progress = Arc::new(Progress::default());
        let opts =
            CopyOptions { max_request_bytes: 1 << 20, checksum: true, verify: true, ..Default::default() };
        let out = copy(src.clone(), dst.clone(), opts, progress, || 4, Control::default()).await.unwrap();
        assert_eq!(out.bytes, 40 << 20);
        assert!(out.complete && out.flushed && !out.interrupted);
        assert_eq!(out.data_bytes, 3 << 20);
        assert_eq!(out.zero_bytes, 37 << 20);
        let whole = dst.read(0, 40 << 20).await.unwrap();
        assert!(whole == expect);
        assert_eq!(out.sha256.unwrap(), hex::encode(Sha256::digest(&expect)));
        let v = out.verify.unwrap();
        assert_eq!((v.checked_bytes, v.first_bad_offset), (40 << 20, None));
    }

    /// A time-boxed copy whose requests in flight outlast the settle time
    /// (as with many sessions on a long path) stops cleanly: the abandoned
    /// requests are not a failed copy.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_that_abandons_requests_in_flight_is_not_a_failure() {
        let src = source();
        let expect = fill(&src).await;
        let dst = Arc::new(TestStore::faulty(
            MemoryEndpoint::new("dst", 40 << 20, Fill::Zero),
            Fault::StallFrom(8 << 20),
        ));
        let opts = CopyOptions {
            max_request_bytes: 1 << 20,
            sparse: false,
            stop_at: Some(Instant::now() + Duration::from_millis(300)),
            settle: Duration::from_millis(100),
            ..Default::default()
        };
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            copy(src, dst.clone(), opts, Arc::default(), || 4, Control::default()),
        )
        .await
        .expect("the stop ends the copy")
        .unwrap_or_else(|e| panic!("a stop is not a failure: {e}"));
        assert!(!out.complete && out.bytes == 8 << 20, "{out:?}");
        let done = dst.inner.read(0, 8 << 20).await.unwrap();
        assert!(done == expect.slice(..8 << 20), "what is reported copied is in place");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn verify_names_the_first_bad_byte() {
        let src = source();
        fill(&src).await;
        let bad = (6 << 20) + 12345;
        let dst = Arc::new(TestStore::faulty(
            MemoryEndpoint::new("dst", 40 << 20, Fill::Zero),
            Fault::Corrupt(bad),
        ));
        let opts = CopyOptions { max_request_bytes: 1 << 20, verify: true, ..Default::default() };
        let out = copy(src, dst, opts, Arc::default(), || 4, Control::default()).await.unwrap();
        assert_eq!(out.verify.unwrap().first_bad_offset, Some(bad));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_journaled_copy_resumes_where_it_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let src = source();
        let expect = fill(&src).await;
        let dst = Arc::new(MemoryEndpoint::new("dst", 40 << 20, Fill::Zero));
        let id = crate::journal::Identity {
            source: crate::journal::StoreIdentity { name: "src".into(), size: 40 << 20, serial: None },
            destination: crate::journal::StoreIdentity { name: "dst".into(), size: 40 << 20, serial: None },
            bytes: 40 << 20,
            sample_sha256: String::new(),
        };
        let mut j = Journal::create(&path, id).unwrap();
        // Stopped at once: nothing or little copied, and journaled.
        let (tx, rx) = watch::channel(true);
        let opts = CopyOptions { max_request_bytes: 1 << 20, sparse: false, ..Default::default() };
        let out = copy(
            src.clone(),
            dst.clone(),
            opts.clone(),
            Arc::default(),
            || 2,
            Control { stop: Some(rx), journal: Some(&mut j) },
        )
        .await
        .unwrap();
        assert!(out.interrupted && !out.complete);
        drop(tx);
        // Pretend an earlier run copied [0, 20 MiB): the rerun must not write it.
        j.record(&[(0, 20 << 20)]).unwrap();
        dst.write_zeroes(0, 20 << 20, false).await.unwrap();
        let out = copy(
            src.clone(),
            dst.clone(),
            CopyOptions { checksum: true, ..opts },
            Arc::default(),
            || 2,
            Control { stop: None, journal: Some(&mut j) },
        )
        .await
        .unwrap();
        assert!(out.complete);
        assert_eq!(out.resumed_bytes, 20 << 20);
        assert_eq!(out.data_bytes, 20 << 20);
        // The checksum covers the whole source, journaled part included.
        assert_eq!(out.sha256.unwrap(), hex::encode(Sha256::digest(&expect)));
        assert_eq!(j.done().bytes(), 40 << 20);
        let got = dst.read(20 << 20, 20 << 20).await.unwrap();
        assert!(got == expect.slice(20 << 20..));
    }
}
