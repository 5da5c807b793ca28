//! Tuner parameters: the paper's (BDL-APT, Table 1) and ours.

use serde::{Deserialize, Serialize};

use crate::golden::{golden_probe_bound, knee_probe_bound};
use crate::model::ModelConfig;

/// The largest `n_max` accepted: far beyond any useful session count, and
/// small enough that every count is exact as an `f64`.
pub const MAX_SESSIONS: usize = 1 << 16;

/// Why a [`TunerConfig`] (or [`RetuneConfig`]) was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// `n_min` must be at least 1.
    #[error("n_min must be at least 1")]
    ZeroMin,
    /// `n_min <= n_max <= MAX_SESSIONS` must hold.
    #[error("session range {n_min}..={n_max} is empty or above {MAX_SESSIONS}")]
    BadRange {
        /// The configured lower bound.
        n_min: usize,
        /// The configured upper bound.
        n_max: usize,
    },
    /// `n0` must lie in `n_min..=n_max`.
    #[error("n0 = {n0} is outside {n_min}..={n_max}")]
    StartOutOfRange {
        /// The configured start.
        n0: usize,
        /// The configured lower bound.
        n_min: usize,
        /// The configured upper bound.
        n_max: usize,
    },
    /// `alpha` must be finite and greater than 1.
    #[error("alpha = {0} must be finite and greater than 1")]
    BadAlpha(f64),
    /// `tolerance` must be finite and in `0.0..1.0`.
    #[error("tolerance = {0} must be finite and in [0, 1)")]
    BadTolerance(f64),
    /// `samples_per_point` must be at least 1.
    #[error("samples_per_point must be at least 1")]
    ZeroSamples,
    /// The re-tuning threshold must be finite and positive.
    #[error("retune threshold = {0} must be finite and positive")]
    BadRetuneThreshold(f64),
    /// The re-tuning trigger needs at least one interval.
    #[error("retune consecutive must be at least 1")]
    ZeroRetuneConsecutive,
    /// The resampling margin must be finite and non-negative.
    #[error("resample margin = {0} must be finite and non-negative")]
    BadResampleMargin(f64),
    /// The model's jump factor must be finite and at least 1.
    #[error("model jump = {0} must be finite and at least 1")]
    BadJump(f64),
}

/// When to start searching again after convergence (not in the paper, which
/// lists it as future work).
///
/// While holding at the converged N the tuner tracks the goodput level there
/// (the mean of the first [`LEVEL_SAMPLES`](crate::tuner::LEVEL_SAMPLES)
/// samples, then frozen). If `consecutive` samples in a row all lie more
/// than `threshold` (relative) away from that level on the same side, the
/// path has changed: the tuner restarts the bracket search from the current
/// N, upward first and, if the first step up is not better, downward by
/// dividing by alpha.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RetuneConfig {
    /// Relative change of goodput that counts as a deviation (0.2 = 20 %).
    pub threshold: f64,
    /// How many deviating intervals in a row trigger a new search.
    pub consecutive: u32,
}

impl Default for RetuneConfig {
    /// 20 % for 3 intervals in a row.
    fn default() -> Self {
        RetuneConfig { threshold: 0.2, consecutive: 3 }
    }
}

/// More samples for close calls: after `samples_per_point` samples, if the
/// point's mean lies within a relative margin of the goodput it is compared
/// against, keep measuring it, up to `max_samples` samples in all. Clear
/// decisions stay cheap; only the ones noise could flip cost more intervals.
///
/// The margin is `min(margin, 2.5 sigma)`, where sigma is the tuner's running
/// estimate of the relative noise of one sample (from consecutive samples at
/// the same N, see [`TuningReport::noise_estimate`](crate::TuningReport));
/// until it has one, `margin`. On a quiet path resampling thus stops after
/// a couple of points. Whatever the estimate, a narrow win (better than the
/// reference by less than twice the tolerance) is measured again before it
/// counts: a single mistimed interval must not move the search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ResampleConfig {
    /// Relative distance from the reference that counts as close.
    pub margin: f64,
    /// Most samples per point.
    pub max_samples: u32,
    /// Moves need a difference beyond the measured noise (see
    /// [`Tuner`](crate::Tuner)): with the noise estimate, a point is better
    /// (or still on a plateau) only by more than [`NOISE_SIGMAS`](crate::NOISE_SIGMAS)
    /// standard errors of the difference of the two means beyond the
    /// tolerance, and whatever the estimate, a win by less than
    /// [`CONFIRM_WIN`](crate::CONFIRM_WIN) is measured again. Off: the
    /// tolerance alone decides.
    #[serde(default)]
    pub beyond_noise: bool,
}

/// Parameters of the [`Tuner`](crate::Tuner).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TunerConfig {
    /// Initial number of sessions N0.
    pub n0: usize,
    /// Multiplicative increase factor of the bracket search (> 1). Each step
    /// goes to `round(alpha * N)`, and at least to `N + 1`.
    pub alpha: f64,
    /// Smallest N the tuner may answer (>= 1).
    pub n_min: usize,
    /// Largest N the tuner may answer (the number of sessions the driver can
    /// open); the bracket search is clamped there.
    pub n_max: usize,
    /// Relative epsilon for comparing goodputs; 0 is the paper's strict `>`.
    ///
    /// A goodput within `tolerance` of the reference (G(m), or the previous
    /// point of the bracket search) counts as not better: `better` means
    /// `G > G_ref * (1 + tolerance)`. So the bracket search stops climbing
    /// once doubling N gains less than `tolerance`, and the golden-section
    /// search keeps m unless a probe clearly beats it. Ties thus go to fewer
    /// sessions on the way up (less CPU, friendlier to other traffic), at a
    /// cost of at most about `tolerance` of goodput.
    ///
    /// The one place a tie goes *down* is the downward bracket search of
    /// re-tuning: there N / alpha counts as better unless it is worse by
    /// more than `tolerance` (`G > G_ref * (1 - tolerance)`), the reference
    /// staying the best level seen so that ties cannot chain into a drift.
    pub tolerance: f64,
    /// Measurements averaged (weighted by duration) per point before a
    /// decision; the paper uses 1.
    pub samples_per_point: u32,
    /// Extra samples for close calls; `None` in the paper.
    pub resample: Option<ResampleConfig>,
    /// Ignore the first measurement after N changed (TCP slow start of new
    /// sessions, request pipelines filling up). The initial N0 counts as a
    /// change. The paper does not discard.
    pub discard_after_change: bool,
    /// Re-tuning after convergence; `None` holds the converged N forever.
    pub retune: Option<RetuneConfig>,
    /// Knee search on a plateau (ours; off in the paper). When the bracket
    /// search stopped on a tie (G(r) within `tolerance` of G(m): more
    /// sessions gave nothing) and the first golden probe above m is not
    /// better either, goodput is flat above m, and the golden-section search
    /// would spend its probes on a plateau. Instead bisect (l, m] for the
    /// fewest sessions that stay within `tolerance` of G(m): about
    /// log2(m - l) probes, and the answer is the knee, not a point in the
    /// middle of the plateau (fewer sessions: less CPU, fairer to others).
    pub plateau_knee: bool,
    /// Model-informed search (ours; off in the paper, see
    /// [`crate::model`]): while the path has room the bracket search
    /// steps by `jump` instead of alpha, a step that lands on a full path
    /// ends it, and the knee search probes the model's lower bound on the
    /// knee first. Uses the [`Signals`](crate::Signals) given with each
    /// sample when there are any.
    #[serde(deserialize_with = "Option::deserialize")]
    pub model: Option<ModelConfig>,
}

impl TunerConfig {
    /// The paper's behaviour exactly: the Table 1 parameters of BDL-APT
    /// (N0 = 4, alpha = 2, at most 128 sessions), strict comparisons, one
    /// measurement per point, nothing discarded, no re-tuning.
    ///
    /// The worked example of section 4.4 starts at N0 = 1 instead:
    /// `TunerConfig { n0: 1, ..TunerConfig::paper() }`.
    pub fn paper() -> Self {
        TunerConfig {
            n0: 4,
            alpha: 2.0,
            n_min: 1,
            n_max: 128,
            tolerance: 0.0,
            samples_per_point: 1,
            resample: None,
            discard_after_change: false,
            retune: None,
            plateau_knee: false,
            model: None,
        }
    }

    /// Checks every parameter; [`Tuner::new`](crate::Tuner::new) calls it.
    ///
    /// # Errors
    /// The first [`ConfigError`] found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.n_min == 0 {
            return Err(ConfigError::ZeroMin);
        }
        if self.n_min > self.n_max || self.n_max > MAX_SESSIONS {
            return Err(ConfigError::BadRange { n_min: self.n_min, n_max: self.n_max });
        }
        if !(self.n_min..=self.n_max).contains(&self.n0) {
            return Err(ConfigError::StartOutOfRange { n0: self.n0, n_min: self.n_min, n_max: self.n_max });
        }
        if !(self.alpha.is_finite() && self.alpha > 1.0) {
            return Err(ConfigError::BadAlpha(self.alpha));
        }
        if !(self.tolerance.is_finite() && (0.0..1.0).contains(&self.tolerance)) {
            return Err(ConfigError::BadTolerance(self.tolerance));
        }
        if self.samples_per_point == 0 {
            return Err(ConfigError::ZeroSamples);
        }
        let bad_margin = |rs: &ResampleConfig| !(rs.margin.is_finite() && rs.margin >= 0.0);
        if let Some(rs) = self.resample.filter(bad_margin) {
            return Err(ConfigError::BadResampleMargin(rs.margin));
        }
        if let Some(m) = self.model.filter(|m| !(m.jump.is_finite() && m.jump >= 1.0)) {
            return Err(ConfigError::BadJump(m.jump));
        }
        if let Some(rt) = &self.retune {
            if !(rt.threshold.is_finite() && rt.threshold > 0.0) {
                return Err(ConfigError::BadRetuneThreshold(rt.threshold));
            }
            if rt.consecutive == 0 {
                return Err(ConfigError::ZeroRetuneConsecutive);
            }
        }
        Ok(())
    }

    /// The bracket search's next N above `n`: `round(alpha * n)`, at least
    /// `n + 1`, at most `n_max`.
    pub(crate) fn up(&self, n: usize) -> usize {
        let scaled = (n as f64 * self.alpha).round();
        let next = if scaled >= self.n_max as f64 { self.n_max } else { scaled as usize };
        next.max(n.saturating_add(1)).min(self.n_max)
    }

    /// The bracket search's next N above `n` while the path has room: with
    /// the model, `round(jump * n)` (at least [`up`](Self::up)), at most
    /// `n_max`; without it, [`up`](Self::up).
    pub(crate) fn climb(&self, n: usize) -> usize {
        let up = self.up(n);
        let Some(m) = self.model else { return up };
        let scaled = (n as f64 * m.jump).round();
        let next = if scaled >= self.n_max as f64 { self.n_max } else { scaled as usize };
        next.max(up).min(self.n_max)
    }

    /// The downward bracket search's next N below `n`: `round(n / alpha)`,
    /// at most `n - 1`, at least `n_min`.
    pub(crate) fn down(&self, n: usize) -> usize {
        let scaled = (n as f64 / self.alpha).round() as usize;
        scaled.min(n.saturating_sub(1)).max(self.n_min)
    }

    /// Upper bound on the number of measured points (decisions) of the
    /// initial search, bracket plus golden section, whatever the goodputs.
    ///
    /// Computed by walking the bracket sequence N0, up(N0), ..., n_max and
    /// taking, for every place the bracket search can stop, its points plus
    /// [`golden_probe_bound`] of the resulting bracket.
    pub fn max_search_points(&self) -> usize {
        let mut seq = vec![self.n0];
        while let Some(&last) = seq.last() {
            if last >= self.n_max {
                break;
            }
            seq.push(self.climb(last));
        }
        let below = |j: usize| if j == 0 { self.n_min - 1 } else { seq[j - 1] };
        // The model's knee search misses at most twice before bisecting.
        let knee = |width: usize| knee_probe_bound(width) + if self.model.is_some() { 2 } else { 0 };
        // The model: the first point is full already, a knee search below it.
        let mut worst = if self.model.is_some() { 1 + knee(self.n0 - below(0)) } else { 0 };
        // Stops at seq[j] (not better than seq[j-1]): bracket (below(j-1), seq[j-1], seq[j]).
        for (j, &stop) in seq.iter().enumerate().skip(1) {
            let width = stop - below(j - 1);
            // A plateau turns into the knee search after one golden probe
            // (the model may skip that probe).
            let plateau = 1 + knee(seq[j - 1] - below(j - 1));
            worst = worst.max(j + 1 + golden_probe_bound(width).max(plateau));
            // The model: seq[j] better but full, a knee search between the two.
            if self.model.is_some() {
                worst = worst.max(j + 1 + knee(stop - seq[j - 1]));
            }
        }
        // Rises all the way to n_max: bracket (below(last), n_max, n_max).
        let last = seq.len() - 1;
        worst.max(seq.len() + golden_probe_bound(self.n_max - below(last)))
    }

    /// Upper bound on the number of intervals of the initial search when
    /// every sample is valid: [`max_search_points`](Self::max_search_points)
    /// times the intervals per point (`samples_per_point`, or the resampling
    /// maximum if larger, plus one discarded interval when
    /// `discard_after_change`).
    pub fn max_search_intervals(&self) -> usize {
        let samples = self.resample.map_or(0, |r| r.max_samples).max(self.samples_per_point);
        let per_point = samples as usize + usize::from(self.discard_after_change);
        self.max_search_points() * per_point
    }
}

impl Default for TunerConfig {
    /// Our robust settings: the paper's N0, alpha and session range, plus a
    /// 3 % tolerance, one sample per point and up to three for a point within
    /// 10 % of its reference, the first interval after a change discarded,
    /// re-tuning on a 20 % change for 3 intervals, and the knee search on
    /// a plateau, and the model-informed search (steps of 4x while the
    /// path has room).
    fn default() -> Self {
        TunerConfig {
            tolerance: 0.03,
            samples_per_point: 1,
            resample: Some(ResampleConfig { margin: 0.1, max_samples: 3, beyond_noise: true }),
            discard_after_change: true,
            retune: Some(RetuneConfig::default()),
            plateau_knee: true,
            model: Some(ModelConfig::default()),
            ..TunerConfig::paper()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid() {
        TunerConfig::paper().validate().unwrap();
        TunerConfig::default().validate().unwrap();
    }

    #[test]
    fn rejects_bad_parameters() {
        let p = TunerConfig::paper();
        assert_eq!(TunerConfig { n_min: 0, ..p.clone() }.validate(), Err(ConfigError::ZeroMin));
        assert!(matches!(
            TunerConfig { n_max: 0, ..p.clone() }.validate(),
            Err(ConfigError::BadRange { .. })
        ));
        assert!(matches!(
            TunerConfig { n0: 200, ..p.clone() }.validate(),
            Err(ConfigError::StartOutOfRange { .. })
        ));
        for alpha in [1.0, 0.5, f64::NAN, f64::INFINITY] {
            assert!(TunerConfig { alpha, ..p.clone() }.validate().is_err());
        }
        for tolerance in [-0.1, 1.0, f64::NAN] {
            assert!(TunerConfig { tolerance, ..p.clone() }.validate().is_err());
        }
        assert!(TunerConfig { samples_per_point: 0, ..p.clone() }.validate().is_err());
        let rs = ResampleConfig { margin: -1.0, max_samples: 3, beyond_noise: true };
        assert!(TunerConfig { resample: Some(rs), ..p.clone() }.validate().is_err());
        let rt = RetuneConfig { threshold: f64::NAN, consecutive: 3 };
        assert!(TunerConfig { retune: Some(rt), ..p.clone() }.validate().is_err());
        let rt = RetuneConfig { threshold: 0.2, consecutive: 0 };
        assert!(TunerConfig { retune: Some(rt), ..p.clone() }.validate().is_err());
        for jump in [0.5, f64::NAN, f64::INFINITY] {
            let model = Some(ModelConfig { jump, ..ModelConfig::default() });
            assert!(matches!(TunerConfig { model, ..p.clone() }.validate(), Err(ConfigError::BadJump(_))));
        }
    }

    #[test]
    fn up_and_down_always_move() {
        let c = TunerConfig { alpha: 1.1, n_max: 10, ..TunerConfig::paper() };
        assert_eq!(c.up(1), 2);
        assert_eq!(c.up(9), 10);
        assert_eq!(c.up(10), 10);
        assert_eq!(c.down(10), 9);
        assert_eq!(c.down(1), 1);
        let c = TunerConfig::paper();
        assert_eq!(c.up(64), 128);
        assert_eq!(c.up(100), 128);
        assert_eq!(c.down(5), 3);
        // The model's jump: 4x, at least alpha, at most n_max.
        assert_eq!(c.climb(4), 8);
        let m = TunerConfig {
            model: Some(ModelConfig { jump: 4.0, ..ModelConfig::default() }),
            ..TunerConfig::paper()
        };
        assert_eq!((m.climb(4), m.climb(16), m.climb(64)), (16, 64, 128));
        let slow = TunerConfig {
            model: Some(ModelConfig { jump: 1.0, ..ModelConfig::default() }),
            ..TunerConfig::paper()
        };
        assert_eq!(slow.climb(4), 8);
    }

    #[test]
    fn search_bound_is_small_for_the_presets() {
        // 4, 8, ..., 128: 6 points, then golden section on at most (32, 128, 128).
        let b = TunerConfig::paper().max_search_points();
        assert!(b <= 6 + golden_probe_bound(96), "{b}");
        let d = TunerConfig::default();
        assert_eq!(d.max_search_intervals(), 4 * d.max_search_points());
        // The model's steps of 4 (4, 16, 64, 128) need fewer points.
        assert!(d.max_search_points() <= b + 4, "{}", d.max_search_points());
    }
}
