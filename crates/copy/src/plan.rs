//! Planning: the source cut into pieces of data, zeroes, or ranges an
//! earlier run already copied (from the journal), in offset order.

use std::collections::VecDeque;

use wanblk_blockdev::{Endpoint, EndpointError, Extent};

use crate::ranges::RangeSet;

/// What a piece of the image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PieceKind {
    /// Read from the source, written to the destination.
    Data,
    /// Zeroes: a zeroing request (or nothing, on a destination known zero).
    Zero,
    /// Copied and flushed by an earlier run (the journal says so): no
    /// write; read from the source only to hash it.
    Done,
}

/// One unit of work.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Piece {
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) kind: PieceKind,
}

/// The size the copy reads pieces in from `src`: its preferred read size
/// ([`Endpoint::preferred_read_bytes`], a session pool's request size now)
/// when that is smaller than `request`, else `request`. The planner cuts
/// read pieces to it, and whoever counts the pieces that keep the sessions
/// busy must count in it too.
pub fn read_piece_bytes(src: &dyn Endpoint, request: u64) -> u64 {
    src.preferred_read_bytes().map_or(request, |b| u64::from(b).clamp(1, request.max(1)))
}

/// Bytes from `pos` to the next multiple of `step` or to `end`, whichever
/// comes first (`pos < end`, `step > 0`).
fn to_boundary(pos: u64, end: u64, step: u64) -> u64 {
    (pos / step).saturating_add(1).saturating_mul(step).min(end) - pos
}

/// Plans the source in windows, asking block status when useful, and
/// marks what the journal holds as [`PieceKind::Done`].
pub(crate) struct Planner {
    size: u64,
    pos: u64,
    request: u64,
    window: u64,
    use_block_status: bool,
    /// Done pieces are read (to hash or verify them): cut them like data.
    read_done: bool,
    done: RangeSet,
    pending: VecDeque<Piece>,
}

impl Planner {
    pub(crate) fn new(
        size: u64,
        request: u64,
        use_block_status: bool,
        done: RangeSet,
        read_done: bool,
    ) -> Self {
        Planner {
            size,
            pos: 0,
            request,
            window: (request * 64).max(256 << 20),
            use_block_status,
            read_done,
            done,
            pending: Default::default(),
        }
    }

    /// Splits `[offset, offset+len)` of `kind` into pieces ending on
    /// request-size boundaries (so requests stay aligned to block sizes),
    /// the parts the journal holds as done pieces.
    pub(crate) fn push_run(&mut self, offset: u64, len: u64, kind: PieceKind) {
        for (o, l, done) in self.done.split(offset, len) {
            let k = if done { PieceKind::Done } else { kind };
            self.push_cut(o, l, k);
        }
    }

    fn push_cut(&mut self, offset: u64, len: u64, kind: PieceKind) {
        let end = offset + len;
        // Zero runs need no payload: larger pieces, fewer requests; done
        // runs that nobody reads need no requests at all.
        let step = match kind {
            PieceKind::Data => self.request,
            PieceKind::Zero => self.request.max(64 << 20),
            PieceKind::Done if self.read_done => self.request,
            PieceKind::Done => u64::MAX,
        };
        let mut pos = offset;
        while pos < end {
            let n = to_boundary(pos, end, step);
            self.pending.push_back(Piece { offset: pos, len: n, kind });
            pos += n;
        }
    }

    /// The next piece. Pieces that are read are cut further to the
    /// source's preferred read size when it is smaller than the request
    /// size (a session pool whose requests shrank as N grew), so each read
    /// is one request and its reply one buffer, not parts joined by a copy.
    pub(crate) async fn next(&mut self, src: &dyn Endpoint) -> Result<Option<Piece>, EndpointError> {
        loop {
            if let Some(p) = self.pending.pop_front() {
                let read = matches!(p.kind, PieceKind::Data) || (p.kind == PieceKind::Done && self.read_done);
                let step = read_piece_bytes(src, self.request);
                if !read || p.len <= step {
                    return Ok(Some(p));
                }
                let n = to_boundary(p.offset, p.offset + p.len, step);
                self.pending.push_front(Piece { offset: p.offset + n, len: p.len - n, kind: p.kind });
                return Ok(Some(Piece { offset: p.offset, len: n, kind: p.kind }));
            }
            if self.pos >= self.size {
                return Ok(None);
            }
            let len = self.window.min(self.size - self.pos);
            if !self.use_block_status || self.done.contains(self.pos, len) {
                self.push_run(self.pos, len, PieceKind::Data);
                self.pos += len;
                continue;
            }
            let extents = src.block_status(self.pos, len).await?;
            let covered = self.take_extents(&extents, len);
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
    pub(crate) fn take_extents(&mut self, extents: &[Extent], len: u64) -> u64 {
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
        at - self.pos
    }

    #[cfg(test)]
    pub(crate) fn pending(&self) -> Vec<(u64, u64, PieceKind)> {
        self.pending.iter().map(|p| (p.offset, p.len, p.kind)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_end_on_request_boundaries() {
        let mut p = Planner::new(10 << 20, 1 << 20, false, RangeSet::new(), false);
        p.push_run(1000, 3 << 20, PieceKind::Data);
        let pieces = p.pending();
        assert_eq!((pieces[0].0, pieces[0].1), (1000, (1 << 20) - 1000));
        assert!(pieces[1..].iter().all(|(o, _, _)| o % (1 << 20) == 0));
        assert_eq!(pieces.iter().map(|p| p.1).sum::<u64>(), 3 << 20);
    }

    async fn drain(p: &mut Planner, src: &dyn Endpoint) -> Vec<(u64, u64, PieceKind)> {
        let mut out = Vec::new();
        while let Some(x) = p.next(src).await.unwrap() {
            out.push((x.offset, x.len, x.kind));
        }
        out
    }

    #[tokio::test]
    async fn reads_follow_the_sources_preferred_size_and_zero_pieces_do_not() {
        use crate::testing::TestStore;
        use wanblk_blockdev::local::{Fill, MemoryEndpoint};
        let size = 12u64 << 20;
        let mut src = TestStore::preferring(MemoryEndpoint::new("m", size, Fill::Zero), 1 << 20);
        let mut p = Planner::new(size, 4 << 20, false, RangeSet::new(), false);
        p.push_run(4096, 5 << 20, PieceKind::Data);
        p.push_run((5 << 20) + 4096, 6 << 20, PieceKind::Zero);
        p.pos = size;
        let pieces = drain(&mut p, &src).await;
        let data: Vec<_> = pieces.iter().filter(|x| x.2 == PieceKind::Data).collect();
        // The first ends on a 1 MiB boundary, the rest start on one; none is larger.
        assert_eq!((data[0].0, data[0].1), (4096, (1 << 20) - 4096));
        assert!(data[1..].iter().all(|x| x.0 % (1 << 20) == 0 && x.1 <= 1 << 20));
        assert_eq!(data.iter().map(|x| x.1).sum::<u64>(), 5 << 20);
        // Zero pieces move no payload: still cut at the request size.
        assert!(pieces.iter().filter(|x| x.2 == PieceKind::Zero).any(|x| x.1 > 1 << 20));
        // A preference above the request size does not grow the pieces.
        src.prefer = Some(64 << 20);
        let mut p = Planner::new(size, 4 << 20, false, RangeSet::new(), false);
        p.push_run(0, size, PieceKind::Data);
        p.pos = size;
        assert!(drain(&mut p, &src).await.iter().all(|x| x.1 == 4 << 20));
    }

    #[test]
    fn journaled_ranges_become_done_pieces() {
        let mut done = RangeSet::new();
        done.insert(1 << 20, 2 << 20);
        let mut p = Planner::new(8 << 20, 1 << 20, false, done.clone(), false);
        p.push_run(0, 4 << 20, PieceKind::Data);
        assert_eq!(
            p.pending(),
            vec![
                (0, 1 << 20, PieceKind::Data),
                (1 << 20, 2 << 20, PieceKind::Done),
                (3 << 20, 1 << 20, PieceKind::Data)
            ]
        );
        // Read (hashed or verified): cut like data.
        let mut p = Planner::new(8 << 20, 1 << 20, false, done, true);
        p.push_run(0, 4 << 20, PieceKind::Data);
        assert_eq!(p.pending().iter().filter(|x| x.2 == PieceKind::Done).count(), 2);
    }
}
