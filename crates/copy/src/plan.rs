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
            let boundary = (pos / step).saturating_add(1).saturating_mul(step);
            let n = boundary.min(end) - pos;
            self.pending.push_back(Piece { offset: pos, len: n, kind });
            pos += n;
        }
    }

    pub(crate) async fn next(&mut self, src: &dyn Endpoint) -> Result<Option<Piece>, EndpointError> {
        loop {
            if let Some(p) = self.pending.pop_front() {
                return Ok(Some(p));
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
