//! A map of non-overlapping byte ranges, each holding a piece that can be
//! cut: the shape of every layer of the front end (clean cache, pending
//! writes, writes in flight, reads in flight).

use std::collections::BTreeMap;

/// A value that covers a run of bytes and can be cut into parts.
pub(crate) trait Piece: Sized {
    /// Bytes covered (never zero in a map).
    fn len(&self) -> u64;
    /// The part `[from, to)`, relative to the start of this piece.
    fn slice(&self, from: u64, to: u64) -> Self;
}

/// Non-overlapping pieces keyed by their start offset.
#[derive(Debug)]
pub(crate) struct RangeMap<T> {
    map: BTreeMap<u64, T>,
}

impl<T> Default for RangeMap<T> {
    fn default() -> Self {
        RangeMap { map: BTreeMap::new() }
    }
}

impl<T: Piece> RangeMap<T> {
    /// Number of pieces.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The piece starting at `start`.
    pub(crate) fn get(&self, start: u64) -> Option<&T> {
        self.map.get(&start)
    }

    /// The piece starting at `start`, mutably (its length must not change).
    pub(crate) fn get_mut(&mut self, start: u64) -> Option<&mut T> {
        self.map.get_mut(&start)
    }

    /// The piece that ends exactly at `end`, if any.
    pub(crate) fn ending_at(&self, end: u64) -> Option<(u64, &T)> {
        self.map.range(..end).next_back().filter(|(s, p)| *s + p.len() == end).map(|(s, p)| (*s, p))
    }

    /// Pieces overlapping `[start, end)`, in order, with their start offsets.
    pub(crate) fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = (u64, &T)> {
        let from = self
            .map
            .range(..start)
            .next_back()
            .filter(|(s, p)| *s + p.len() > start)
            .map_or(start, |(s, _)| *s);
        self.map.range(from..end.max(from)).map(|(s, p)| (*s, p))
    }

    /// True if any piece overlaps `[start, end)`.
    pub(crate) fn overlaps(&self, start: u64, end: u64) -> bool {
        start < end && self.overlapping(start, end).next().is_some()
    }

    /// Inserts `piece` at `start`. The range must be free.
    pub(crate) fn insert(&mut self, start: u64, piece: T) {
        debug_assert!(piece.len() > 0);
        debug_assert!(!self.overlaps(start, start + piece.len()), "overlapping insert at {start}");
        self.map.insert(start, piece);
    }

    /// Removes and returns the whole piece starting at `start`.
    pub(crate) fn take(&mut self, start: u64) -> Option<T> {
        self.map.remove(&start)
    }

    /// Cuts `[start, end)` out of the map. Pieces that stick out on either
    /// side keep their outer parts (the right part moves to key `end`).
    /// Returns the pieces touched as they were, so the caller can update
    /// its indexes.
    pub(crate) fn cut(&mut self, start: u64, end: u64) -> Vec<Cut<T>> {
        let keys: Vec<u64> = self.overlapping(start, end).map(|(s, _)| s).collect();
        let mut out = Vec::with_capacity(keys.len());
        for s in keys {
            let Some(p) = self.map.remove(&s) else { continue };
            let e = s + p.len();
            let left = (s < start).then(|| p.slice(0, start - s));
            let right = (e > end).then(|| p.slice(end - s, e - s));
            let kept_left = left.is_some();
            let kept_right = right.is_some();
            if let Some(l) = left {
                self.map.insert(s, l);
            }
            if let Some(r) = right {
                self.map.insert(end, r);
            }
            out.push(Cut { start: s, kept_left, kept_right, original: p });
        }
        out
    }

    /// Every piece, in order.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.map.iter().map(|(s, p)| (*s, p))
    }
}

/// One piece that [`RangeMap::cut`] touched.
#[derive(Debug)]
pub(crate) struct Cut<T> {
    /// Where the original piece started.
    pub(crate) start: u64,
    /// A left part stays at `start`.
    pub(crate) kept_left: bool,
    /// A right part stays at the end of the cut range.
    pub(crate) kept_right: bool,
    /// The piece before the cut.
    pub(crate) original: T,
}

/// Subtracts the pieces of `map` from the gaps `gaps` (sorted, disjoint):
/// calls `covered(start, end, piece_start, piece)` for each covered part
/// and returns what is left uncovered.
pub(crate) fn subtract<T: Piece>(
    map: &RangeMap<T>,
    gaps: Vec<(u64, u64)>,
    mut covered: impl FnMut(u64, u64, u64, &T),
) -> Vec<(u64, u64)> {
    let mut left = Vec::new();
    for (gs, ge) in gaps {
        let mut pos = gs;
        for (s, p) in map.overlapping(gs, ge) {
            let e = s + p.len();
            let from = s.max(gs);
            if from > pos {
                left.push((pos, from));
            }
            let to = e.min(ge);
            covered(from, to, s, p);
            pos = to;
        }
        if pos < ge {
            left.push((pos, ge));
        }
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Span(u64, char);
    impl Piece for Span {
        fn len(&self) -> u64 {
            self.0
        }
        fn slice(&self, from: u64, to: u64) -> Self {
            Span(to - from, self.1)
        }
    }

    #[test]
    fn cut_keeps_outer_parts() {
        let mut m = RangeMap::default();
        m.insert(0, Span(10, 'a'));
        m.insert(10, Span(10, 'b'));
        m.insert(30, Span(5, 'c'));
        let cuts = m.cut(5, 32);
        assert_eq!(cuts.len(), 3);
        assert_eq!(
            m.iter().map(|(s, p)| (s, p.clone())).collect::<Vec<_>>(),
            vec![(0, Span(5, 'a')), (32, Span(3, 'c'))]
        );
        assert_eq!(cuts[0].original, Span(10, 'a'));
        assert!(cuts[0].kept_left && !cuts[0].kept_right);
        assert_eq!(cuts[2].start, 30);
        assert!(cuts[2].kept_right);
    }

    #[test]
    fn subtract_reports_gaps_and_covered_parts() {
        let mut m = RangeMap::default();
        m.insert(4, Span(4, 'a'));
        m.insert(12, Span(8, 'b'));
        let mut seen = Vec::new();
        let gaps = subtract(&m, vec![(0, 14), (18, 30)], |s, e, ps, _| seen.push((s, e, ps)));
        assert_eq!(gaps, vec![(0, 4), (8, 12), (20, 30)]);
        assert_eq!(seen, vec![(4, 8, 4), (12, 14, 12), (18, 20, 12)]);
        assert!(m.overlaps(7, 8));
        assert!(!m.overlaps(8, 12));
        assert_eq!(m.ending_at(8).map(|(s, _)| s), Some(4));
    }
}
