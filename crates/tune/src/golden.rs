//! The integer golden-section step of APT, equations (1)-(4) of BDL-APT
//! (BDL-APT, section 4.4), as pure functions on a [`Bracket`].

use serde::{Deserialize, Serialize};

/// The golden-section fraction nu = (3 - sqrt 5) / 2 of equation (1).
///
/// Written out because `f64::sqrt` is not `const`; a unit test checks it.
pub const NU: f64 = 0.381_966_011_250_105_1;

/// A bracket (l, m, r) of connection counts with l <= m <= r.
///
/// `m` is the best point measured so far; `l` and `r` are exclusive ends:
/// points measured no better than `m`, or bounds of the search range that
/// are never probed (`l = n_min - 1` while nothing below `m` has been
/// measured, `r = m = n_max` when the bracket search reached `n_max` still
/// rising). The search only probes integers strictly between `l` and `r`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bracket {
    /// Exclusive lower end.
    pub l: usize,
    /// The best point so far.
    pub m: usize,
    /// Exclusive upper end.
    pub r: usize,
}

impl Bracket {
    /// The next connection count to measure, from equation (1):
    /// `int(l + (m - l) nu)` if `m - l > r - m`, else `int(m + (r - m) nu)`,
    /// with `int` rounding to the nearest integer.
    ///
    /// Returns `None` when the bracket has no integer left to probe, i.e. no
    /// integer strictly between `l` and `r` other than `m`; the search then
    /// ends at `m`. For integer brackets equation (1) yields `l`, `m` or `r`
    /// exactly when no such integer exists (the unit test
    /// `degenerate_iff_exhausted` checks every shape up to width 400), so
    /// returning `None` on a degenerate answer can never skip a candidate,
    /// and the search can never loop on a point it already knows.
    pub fn probe(&self) -> Option<usize> {
        let (l, m, r) = (self.l, self.m, self.r);
        if !(l <= m && m <= r) {
            return None;
        }
        let left = m - l;
        let right = r - m;
        let n = if left > right { l.checked_add(round_nu(left))? } else { m.checked_add(round_nu(right))? };
        (l < n && n < r && n != m).then_some(n)
    }

    /// Equations (2)-(4): the bracket after measuring `n` (the value
    /// [`probe`](Self::probe) returned); `better` says whether G(n) beat G(m).
    ///
    /// Better: `(m, n, r)` if `m < n`, else `(l, n, m)`. Not better:
    /// `(l, m, n)` if `m < n`, else `(n, m, r)`.
    pub fn update(&self, n: usize, better: bool) -> Bracket {
        let Bracket { l, m, r } = *self;
        match (better, m < n) {
            (true, true) => Bracket { l: m, m: n, r },
            (true, false) => Bracket { l, m: n, r: m },
            (false, true) => Bracket { l, m, r: n },
            (false, false) => Bracket { l: n, m, r },
        }
    }

    /// How many integers strictly between `l` and `r`, other than `m`, are
    /// still to be probed (the search's potential: every step lowers it).
    pub fn untested(&self) -> usize {
        let inner = self.r.saturating_sub(self.l).saturating_sub(1);
        if self.l < self.m && self.m < self.r { inner - 1 } else { inner }
    }
}

/// `int(x * nu)` for a non-negative integer distance `x`.
fn round_nu(x: usize) -> usize {
    // x <= n_max <= MAX_SESSIONS, far inside f64's exact integer range.
    (x as f64 * NU).round() as usize
}

/// Upper bound on the number of golden-section probes for a bracket whose
/// ends are `width = r - l` apart, whatever the measurements say:
/// `ceil(2 log2(width)) + 1` probes, and 0 below width 2.
///
/// That is more than textbook golden-section search (log_phi(width)):
/// when `m - l > r - m`, equation (1) puts the probe at `l + (m - l) nu`,
/// measured from the outer end `l`, where the textbook places it at
/// `m - (m - l) nu`, so an adversarial goodput sequence can shrink the
/// bracket by only about sqrt 2 per probe. We keep equation (1) as the
/// paper writes it. The unit test `golden_bound_holds_exhaustively`
/// computes the exact worst case over every bracket shape of width up to
/// 400 and checks this formula against it (17 probes at width 400; an
/// offline check to width 1500 found at most 2.03 log2(width)).
pub fn golden_probe_bound(width: usize) -> usize {
    if width < 2 {
        return 0;
    }
    (2.0 * (width as f64).log2()).ceil() as usize + 1
}

/// Most probes the knee search (bisection of `(l, m]`, see
/// [`TunerConfig::plateau_knee`](crate::TunerConfig)) needs for a width
/// `m - l`: ceil(log2(width)).
pub(crate) fn knee_probe_bound(width: usize) -> usize {
    if width < 2 {
        return 0;
    }
    (usize::BITS - (width - 1).leading_zeros()) as usize
}

/// The next knee probe between `lo` (exclusive, worse) and `hi` (on the
/// plateau), or `None` when no integer is left between them.
pub(crate) fn knee_probe(lo: usize, hi: usize) -> Option<usize> {
    (hi > lo.saturating_add(1)).then(|| lo + (hi - lo) / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knee_bisection_stays_within_its_bound() {
        for width in 1..300usize {
            // Worst case either way: always "tie" or always "worse".
            for tie in [true, false] {
                let (mut lo, mut hi, mut probes) = (100, 100 + width, 0);
                while let Some(p) = knee_probe(lo, hi) {
                    assert!(lo < p && p < hi);
                    if tie {
                        hi = p
                    } else {
                        lo = p
                    }
                    probes += 1;
                }
                assert!(probes <= knee_probe_bound(width), "width {width}: {probes}");
            }
        }
        assert_eq!(knee_probe_bound(8), 3);
        assert_eq!(knee_probe_bound(9), 4);
        assert_eq!(knee_probe(8, 16), Some(12));
        assert_eq!(knee_probe(8, 9), None);
    }

    #[test]
    fn nu_constant_matches_definition() {
        assert!((NU - (3.0 - 5f64.sqrt()) / 2.0).abs() < 1e-15);
    }

    /// Exact worst-case number of probes, over every possible outcome
    /// sequence, for a bracket with `m - l = a`, `r - m = b` (equation (1) is
    /// translation invariant, so the shape is all that matters).
    fn worst_table(max_width: usize) -> Vec<Vec<u8>> {
        let mut t = vec![vec![0u8; max_width + 1]; max_width + 1];
        // A successor of (a, b) has a smaller width, or the same width and
        // fewer untested points (l == m, probe better): fill by width, and
        // within a width by untested count.
        for w in 0..=max_width {
            let mut order: Vec<usize> = (0..=w).collect();
            order.sort_by_key(|&a| {
                let b = w - a;
                Bracket { l: 0, m: a, r: w }.untested() * 1000 + b
            });
            for a in order {
                let b = w - a;
                let br = Bracket { l: 0, m: a, r: w };
                let v = match br.probe() {
                    None => 0,
                    Some(n) => {
                        let s1 = br.update(n, true);
                        let s2 = br.update(n, false);
                        let f = |s: Bracket| t[s.m - s.l][s.r - s.m];
                        1 + f(s1).max(f(s2))
                    }
                };
                t[a][b] = v;
            }
        }
        t
    }

    #[test]
    fn degenerate_iff_exhausted() {
        for w in 0..=400usize {
            for a in 0..=w {
                let br = Bracket { l: 1000, m: 1000 + a, r: 1000 + w };
                assert_eq!(br.probe().is_none(), br.untested() == 0, "{br:?}");
                if let Some(n) = br.probe() {
                    for better in [false, true] {
                        let next = br.update(n, better);
                        assert!(next.untested() < br.untested(), "{br:?} -> {next:?}");
                        assert!(next.l <= next.m && next.m <= next.r);
                    }
                }
            }
        }
    }

    #[test]
    fn golden_bound_holds_exhaustively() {
        let max = 400;
        let t = worst_table(max);
        let mut worst_by_width = vec![0u8; max + 1];

        for (a, row) in t.iter().enumerate() {
            for (b, &v) in row.iter().enumerate().take(max + 1 - a) {
                let w = a + b;
                worst_by_width[w] = worst_by_width[w].max(v);
                assert!(
                    usize::from(v) <= golden_probe_bound(w),
                    "shape ({a},{b}) needs {v} > bound {}",
                    golden_probe_bound(w)
                );
            }
        }
        // The bound is not loose by more than four probes anywhere, and the
        // worst case really is above log_phi: about 2 log2(width).
        for (w, &v) in worst_by_width.iter().enumerate().skip(2) {
            assert!(golden_probe_bound(w) <= usize::from(v) + 4, "width {w}: worst {v}");
        }
        assert_eq!(worst_by_width[400], 17);
    }
}
