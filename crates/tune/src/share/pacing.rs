//! Ensemble pacing (`--ensemble-pacing`, off by default): one rate budget
//! for the N sessions once the path is full and shared (Fair-TCP's
//! ensemble, in user space).
//!
//! Independent TCP flows of one copy each probe for more and take turns
//! losing; when the share governor has found the path full and shared (it
//! holds a ceiling on N), the sessions are instead paced together at the
//! aggregate's measured goodput plus [`HEADROOM`], split evenly between
//! the active sessions by the pool (`SO_MAX_PACING_RATE`), so they move at
//! one fair rate instead of fighting. The rate follows each interval's
//! goodput (up by at most the headroom per interval); when the ceiling is
//! lifted the pacing ends. Pacing shapes what we send: it acts on writes
//! (a backup), not on what a server sends us.
//!
//! Sans-I/O: fed with each interval's state, it answers the rate cap.

/// How far above the measured goodput the ensemble is paced, so it can
/// follow a path that frees up.
pub const HEADROOM: f64 = 1.10;

/// Changes smaller than this share of the rate are not applied.
const HYSTERESIS: f64 = 0.05;

/// The ensemble's rate cap. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct EnsemblePacer {
    rate: Option<u64>,
}

impl EnsemblePacer {
    /// Not pacing.
    pub fn new() -> EnsemblePacer {
        EnsemblePacer::default()
    }

    /// The cap now, bytes per second.
    pub fn rate(&self) -> Option<u64> {
        self.rate
    }

    /// One interval: whether the path is full and shared (the governor
    /// holds a ceiling), the ensemble's goodput (bytes per second) and the
    /// user's cap (`--rate`). Returns the new cap when it changed
    /// (`Some(None)`: the user's cap or none again).
    pub fn observe(&mut self, shared: bool, goodput: f64, user_cap: Option<u64>) -> Option<Option<u64>> {
        let paced = (shared && goodput.is_finite() && goodput > 0.0).then_some((goodput * HEADROOM) as u64);
        let new = match (paced, user_cap) {
            (Some(p), Some(u)) => Some(p.min(u)),
            (p, u) => p.or(u),
        };
        super::update(&mut self.rate, new, HYSTERESIS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paces_only_while_the_path_is_full_and_shared() {
        let mut p = EnsemblePacer::new();
        assert_eq!(p.observe(false, 1e8, None), None, "alone: no pacing");
        assert_eq!(p.observe(true, 1e8, None), Some(Some(110_000_000)));
        assert_eq!(p.observe(true, 1.02e8, None), None, "within the hysteresis");
        assert_eq!(p.observe(true, 1.2e8, None), Some(Some(132_000_000)), "follows the goodput");
        assert_eq!(p.observe(true, 1.2e8, Some(50_000_000)), Some(Some(50_000_000)), "never above --rate");
        assert_eq!(p.observe(false, 1.2e8, Some(50_000_000)), None, "the user's cap stays");
        assert_eq!(p.observe(false, 1.2e8, None), Some(None));
        assert_eq!(p.observe(true, f64::NAN, None), None, "no goodput, no pacing");
    }
}
