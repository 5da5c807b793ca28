//! A source that can be read only once, in order: standard input (`-`).
//!
//! Its size is unknown until it ends, so the copy reads it piece by piece
//! and writes each piece to the destination as it arrives (up to as many
//! writes in flight as the destination's sessions take), and stops at the
//! end of the input or of the destination, whichever comes first. Pieces
//! that read as zeroes become zeroing requests, or nothing on a
//! destination that already reads as zeroes, as in [`crate::copy`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinSet;
use wanblk_blockdev::{Endpoint, EndpointError};

use crate::engine::{CopyError, CopyOptions, CopyOutcome, Finished, Frontier, Progress, is_zero, zero_range};
use crate::plan::{Piece, PieceKind};
use crate::rate::HORIZON;

/// Reads up to `len` bytes, fewer only at the end of the input.
async fn read_full<R: AsyncRead + Unpin>(input: &mut R, len: usize) -> std::io::Result<BytesMut> {
    let mut buf = BytesMut::with_capacity(len);
    while buf.len() < len {
        let mut limited = (&mut *input).take((len - buf.len()) as u64);
        if limited.read_buf(&mut buf).await? == 0 {
            break;
        }
    }
    Ok(buf)
}

/// Writes one piece read from the input.
async fn write_piece(
    dst: Arc<dyn Endpoint>,
    piece: Piece,
    data: bytes::Bytes,
    opts: Arc<CopyOptions>,
    progress: Arc<Progress>,
    start_at: Option<tokio::time::Instant>,
) -> Result<Finished, EndpointError> {
    if let Some(t) = start_at {
        tokio::time::sleep_until(t).await;
    }
    match piece.kind {
        PieceKind::Zero if opts.destination_is_zero => {
            progress.skipped.fetch_add(piece.len, Ordering::Relaxed);
        }
        PieceKind::Zero => {
            zero_range(&*dst, piece.offset, piece.len, u64::from(opts.max_request_bytes.max(1))).await?;
            progress.zeroed.fetch_add(piece.len, Ordering::Relaxed);
        }
        PieceKind::Data => {
            dst.write(piece.offset, data, false).await?;
            progress.data.fetch_add(piece.len, Ordering::Relaxed);
        }
        // A stream has no journal: nothing was copied before.
        PieceKind::Done => {}
    }
    progress.done.fetch_add(piece.len, Ordering::Relaxed);
    // The input is hashed as it is read, not here.
    Ok(Finished { data: None, check: None })
}

/// How long a failed stream copy waits for the writes already in flight.
const SETTLE: Duration = Duration::from_secs(10);

/// After a failure: collects the writes still in flight for up to
/// [`SETTLE`], then abandons the rest.
async fn settle(tasks: &mut JoinSet<(Piece, Result<Finished, EndpointError>)>, frontier: &mut Frontier) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    while let Ok(Some(joined)) = tokio::time::timeout_at(deadline, tasks.join_next()).await {
        if let Ok((piece, Ok(done))) = joined {
            frontier.finish(piece, done.data);
        }
    }
    tasks.abort_all();
}

/// Copies `input` (named `name` in errors) to the start of `dst`, in
/// order, until the input ends, `opts.length` bytes were copied, or the
/// destination is full.
///
/// `slots` says how many requests the destination's sessions take now;
/// the loop keeps twice that many writes in flight.
///
/// # Errors
/// Reading the input fails; a write fails; or the input holds more bytes
/// than the destination (and no `opts.length` said to copy only the
/// first ones). The error says how much of the destination was written.
///
/// # Cancel safety
/// Dropping the future stops reading and issuing; writes already sent
/// complete or fail on their own.
pub async fn copy_from_stream<R: AsyncRead + Unpin>(
    mut input: R,
    name: &str,
    dst: Arc<dyn Endpoint>,
    opts: CopyOptions,
    progress: Arc<Progress>,
    slots: impl Fn() -> usize,
) -> Result<CopyOutcome, CopyError> {
    let limit = opts.length.map_or(dst.size(), |l| l.min(dst.size()));
    progress.total.store(limit, Ordering::Relaxed);
    let mut frontier = Frontier { contiguous: 0, out_of_order: BTreeMap::new(), hasher: None };
    let mut hasher = opts.checksum.then(Sha256::new);
    let fail = |error: EndpointError, f: &Frontier, p: &Progress| CopyError {
        error,
        contiguous: f.contiguous,
        written: p.done.load(Ordering::Relaxed),
        // Not tracked: a stream cannot be resumed.
        max_in_flight_bytes: 0,
    };
    let request = u64::from(opts.max_request_bytes.max(1));
    let opts = Arc::new(opts);
    let mut tasks: JoinSet<(Piece, Result<Finished, EndpointError>)> = JoinSet::new();
    let mut in_flight_bytes = 0u64;
    let mut pos = 0u64;
    let mut ended = false;
    let mut stopped = false;
    loop {
        let target = slots().max(1) * 2;
        if opts.stop_at.is_some_and(|t| tokio::time::Instant::now() >= t) {
            stopped = !ended && pos < limit;
        }
        let booked = |o: &CopyOptions| o.rate.as_ref().is_some_and(|r| r.ahead() >= HORIZON);
        while !ended
            && !stopped
            && !booked(&opts)
            && pos < limit
            && tasks.len() < target
            && in_flight_bytes < opts.max_in_flight_bytes
        {
            let want = request.min(limit - pos) as usize;
            let data = match read_full(&mut input, want).await {
                Ok(d) => d.freeze(),
                Err(e) => {
                    settle(&mut tasks, &mut frontier).await;
                    return Err(fail(EndpointError::io(name, Some(pos), e), &frontier, &progress));
                }
            };
            if data.len() < want {
                ended = true;
            }
            if data.is_empty() {
                break;
            }
            if let Some(h) = hasher.as_mut() {
                h.update(&data);
            }
            let kind = if opts.sparse && is_zero(&data) { PieceKind::Zero } else { PieceKind::Data };
            let piece = Piece { offset: pos, len: data.len() as u64, kind };
            pos += piece.len;
            in_flight_bytes += piece.len;
            let start_at =
                opts.rate.as_ref().filter(|_| kind == PieceKind::Data).map(|r| r.reserve(piece.len));
            let (d, o, pr) = (Arc::clone(&dst), Arc::clone(&opts), Arc::clone(&progress));
            tasks.spawn(async move { (piece, write_piece(d, piece, data, o, pr, start_at).await) });
        }
        if tasks.is_empty() && !ended && !stopped && pos < limit && booked(&opts) {
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
        in_flight_bytes -= piece.len;
        match result {
            Ok(done) => frontier.finish(piece, done.data),
            Err(e) => {
                settle(&mut tasks, &mut frontier).await;
                return Err(fail(e.at(piece.offset), &frontier, &progress));
            }
        }
    }
    if !ended && !stopped && pos == limit && opts.length.is_none() {
        // The destination is full: the input must have ended too.
        match read_full(&mut input, 1).await {
            Ok(more) if !more.is_empty() => {
                let msg = format!(
                    "the input holds more than the destination's {limit} bytes (give --length to copy only the first bytes)"
                );
                return Err(fail(EndpointError::config(name, Some(limit), msg), &frontier, &progress));
            }
            Ok(_) => {}
            Err(e) => return Err(fail(EndpointError::io(name, Some(pos), e), &frontier, &progress)),
        }
    }
    if opts.flush
        && let Err(e) = dst.flush().await
    {
        return Err(fail(e, &frontier, &progress));
    }
    progress.total.store(pos, Ordering::Relaxed);
    let complete = !stopped && frontier.contiguous == pos;
    Ok(CopyOutcome {
        complete,
        interrupted: stopped && !complete,
        bytes: frontier.contiguous,
        data_bytes: progress.data.load(Ordering::Relaxed),
        zero_bytes: progress.zeroed.load(Ordering::Relaxed),
        skipped_bytes: progress.skipped.load(Ordering::Relaxed),
        resumed_bytes: 0,
        sha256: hasher.map(|h| hex::encode(h.finalize())),
        flushed: opts.flush,
        max_in_flight_bytes: 0,
        verify: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use wanblk_blockdev::local::{Fill, MemoryEndpoint};

    fn opts() -> CopyOptions {
        CopyOptions { max_request_bytes: 1 << 16, checksum: true, ..CopyOptions::default() }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_shorter_than_the_destination_fills_its_start() {
        let mut input: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8 + 1).collect();
        input[131_072..262_144].fill(0);
        let dst = Arc::new(MemoryEndpoint::new("dst", 1 << 20, Fill::Random { seed: 3 }));
        let before = dst.read(0, 1 << 20).await.unwrap();
        let progress = Arc::new(Progress::default());
        let out = copy_from_stream(&input[..], "-", dst.clone(), opts(), progress, || 4).await.unwrap();
        assert!(out.complete);
        assert_eq!(out.bytes, input.len() as u64);
        assert_eq!(out.sha256.unwrap(), hex::encode(Sha256::digest(&input)));
        assert!(out.zero_bytes > 0, "a zero run became zeroing requests");
        let after = dst.read(0, 1 << 20).await.unwrap();
        assert_eq!(&after[..input.len()], &input[..]);
        assert_eq!(
            &after[input.len()..],
            &before[input.len()..],
            "bytes past the input are left as they were"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_longer_than_the_destination_is_an_error_unless_cut() {
        let input = vec![7u8; 200_000];
        let dst = Arc::new(MemoryEndpoint::new("dst", 100_000, Fill::Zero));
        let progress = Arc::new(Progress::default());
        let e = copy_from_stream(&input[..], "-", dst.clone(), opts(), progress, || 4).await.unwrap_err();
        assert!(e.to_string().contains("more than the destination's 100000 bytes"), "{e}");
        assert_eq!(e.contiguous, 100_000, "what fits was written");

        let cut = CopyOptions { length: Some(50_000), ..opts() };
        let progress = Arc::new(Progress::default());
        let out = copy_from_stream(&input[..], "-", dst.clone(), cut, progress, || 4).await.unwrap();
        assert_eq!(out.bytes, 50_000);
        assert_eq!(dst.read(0, 50_000).await.unwrap(), Bytes::from(vec![7u8; 50_000]));
    }
}
