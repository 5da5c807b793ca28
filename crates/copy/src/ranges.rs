//! [`RangeSet`]: a set of byte ranges, adjacent and overlapping ones
//! merged. The journal keeps the ranges a copy completed in one; the
//! engine subtracts them from what it still has to copy.

use std::collections::BTreeMap;

/// Byte ranges `[start, end)`, merged, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// start -> end, disjoint and never adjacent.
    map: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// The empty set.
    pub fn new() -> RangeSet {
        RangeSet::default()
    }

    /// Adds `[start, start + len)`.
    pub fn insert(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        let mut from = start;
        let mut to = start.saturating_add(len);
        // A range that starts at or before `from` and reaches it merges.
        if let Some((&s, &e)) = self.map.range(..=from).next_back()
            && e >= from
        {
            from = s;
            to = to.max(e);
        }
        // Ranges that start within [from, to] merge.
        let inside: Vec<u64> = self.map.range(from..=to).map(|(&s, _)| s).collect();
        for s in inside {
            if let Some(e) = self.map.remove(&s) {
                to = to.max(e);
            }
        }
        self.map.insert(from, to);
    }

    /// Adds every range of `other`.
    pub fn extend(&mut self, other: &RangeSet) {
        for (s, e) in other.iter() {
            self.insert(s, e - s);
        }
    }

    /// Bytes covered.
    pub fn bytes(&self) -> u64 {
        self.map.iter().map(|(s, e)| e - s).sum()
    }

    /// No range.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of (merged) ranges.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The ranges as `(start, end)`, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.map.iter().map(|(&s, &e)| (s, e))
    }

    /// Every byte of `[start, start + len)` is in the set.
    pub fn contains(&self, start: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        match self.map.range(..=start).next_back() {
            Some((_, &e)) => e >= start.saturating_add(len),
            None => false,
        }
    }

    /// `[start, start + len)` cut into runs inside (`true`) and outside
    /// (`false`) the set, in order.
    pub fn split(&self, start: u64, len: u64) -> Vec<(u64, u64, bool)> {
        let end = start.saturating_add(len);
        let mut out = Vec::new();
        if end <= start {
            return out;
        }
        let mut pos = start;
        // The range that may cover `start`, then those starting inside.
        let first = self.map.range(..=start).next_back().map(|(&s, &e)| (s, e));
        let rest = self.map.range(start.saturating_add(1)..end).map(|(&s, &e)| (s, e));
        for (s, e) in first.into_iter().chain(rest) {
            if e <= pos || s >= end {
                continue;
            }
            let s = s.max(pos);
            if s > pos {
                out.push((pos, s - pos, false));
            }
            let e = e.min(end);
            out.push((s, e - s, true));
            pos = e;
        }
        if pos < end {
            out.push((pos, end - pos, false));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn merges_adjacent_and_overlapping() {
        let mut r = RangeSet::new();
        r.insert(10, 10);
        r.insert(30, 10);
        r.insert(20, 10);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(10, 40)]);
        r.insert(0, 5);
        r.insert(2, 100);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0, 102)]);
        assert_eq!(r.bytes(), 102);
        assert!(r.contains(0, 102) && !r.contains(0, 103) && r.contains(50, 0));
    }

    #[test]
    fn splits_into_inside_and_outside() {
        let mut r = RangeSet::new();
        r.insert(10, 10);
        r.insert(40, 10);
        assert_eq!(
            r.split(0, 60),
            vec![(0, 10, false), (10, 10, true), (20, 20, false), (40, 10, true), (50, 10, false)]
        );
        assert_eq!(r.split(15, 30), vec![(15, 5, true), (20, 20, false), (40, 5, true)]);
        assert_eq!(r.split(20, 5), vec![(20, 5, false)]);
        assert_eq!(r.split(12, 2), vec![(12, 2, true)]);
    }

    proptest! {
        /// The set holds exactly the bytes inserted, and `split` covers the
        /// asked range in order with the right membership.
        #[test]
        fn matches_a_bitmap(ops in proptest::collection::vec((0u64..200, 0u64..40), 0..30),
                            q in (0u64..220, 0u64..60)) {
            let mut r = RangeSet::new();
            let mut bits = [false; 300];
            for (s, l) in ops {
                r.insert(s, l);
                for b in &mut bits[s as usize..(s + l) as usize] { *b = true; }
            }
            prop_assert_eq!(r.bytes(), bits.iter().filter(|b| **b).count() as u64);
            let runs = r.split(q.0, q.1);
            let mut pos = q.0;
            for (s, l, inside) in runs {
                prop_assert_eq!(s, pos);
                prop_assert!(l > 0);
                for i in s..s + l { prop_assert_eq!(bits[i as usize], inside); }
                pos += l;
            }
            prop_assert_eq!(pos, q.0 + q.1);
            // Merged: no two ranges touch.
            let v: Vec<_> = r.iter().collect();
            for w in v.windows(2) { prop_assert!(w[0].1 < w[1].0); }
        }
    }
}
