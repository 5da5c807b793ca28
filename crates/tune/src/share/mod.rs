//! Sharing the path: how wanblk's own sessions split what they carry
//! (monitoring, fairness), and how the ensemble behaves towards other
//! traffic and other copies on the same host.
//!
//! Everything here is sans-I/O: the driver passes per-session cumulative
//! TCP counters and the time in, and gets rows, summaries and ceilings on
//! N out.
//!
//! - [`SessionMeter`]: per-session goodput, congestion window, RTT,
//!   retransmits and share of the bytes over the last period (the live
//!   table of `--sessions-view`), and the totals for the report
//!   ([`ShareReport`]).
//! - [`Governor`]: competition-aware tuning. From the standing queue the
//!   sessions see (smoothed RTT above the path's base RTT) it estimates how
//!   many of our sessions the path needs to be full, and keeps the tuner at
//!   or below that ([`ShareMode`]), so more sessions are not added once
//!   the path is full and extra goodput could only come from other flows.
//! - [`host`]: several copies on one host: the coordinator's protocol
//!   (one ASCII line per message) and [`HostBudget`], which splits the N
//!   one copy needs between the copies sharing a path.
//! - [`EnsemblePacer`]: with `--ensemble-pacing`, one paced rate for the
//!   N sessions while the path is full and shared.
//! - [`WindowSplitter`]: while the path is full and shared, one receive
//!   window clamp for the N sessions, near their mean window.

pub mod governor;
pub mod host;
mod meter;
pub mod pacing;
pub mod window;

pub use governor::{CeilingChange, Governor, GovernorConfig, GovernorReading, PathObservation, ShareMode};
pub use host::{CopiesSeen, CopyReport, Grant, HostBudget, Restart, restart_after, settled_point};
pub use meter::{SessionMeter, SessionReport, SessionRow, SessionSample, ShareReport, median, render_table};
pub use pacing::EnsemblePacer;
pub use window::WindowSplitter;

/// Takes `new` as the value of a cap held in `held` unless both are set
/// and within `hysteresis` (a share of the held value) of each other.
/// Returns the new value when it changed (`Some(None)`: removed).
fn update(held: &mut Option<u64>, new: Option<u64>, hysteresis: f64) -> Option<Option<u64>> {
    let close = match (new, *held) {
        (Some(a), Some(b)) => (a as f64 - b as f64).abs() <= hysteresis * b as f64,
        (None, None) => true,
        _ => false,
    };
    if close {
        return None;
    }
    *held = new;
    Some(new)
}

/// Jain's fairness index of `xs`: (sum x)^2 / (n x sum x^2); 1 = equal
/// shares, 1/n = one of them carried everything. `None` for fewer than two
/// values or all zero.
pub fn jain(xs: &[f64]) -> Option<f64> {
    let sum: f64 = xs.iter().sum();
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    (xs.len() > 1 && sq > 0.0 && sum.is_finite()).then(|| sum * sum / (xs.len() as f64 * sq))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn jain_of_equal_and_starved_shares() {
        assert_eq!(jain(&[5.0, 5.0, 5.0]), Some(1.0));
        let one = jain(&[9.0, 0.0, 0.0]).unwrap();
        assert!((one - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(jain(&[3.0]), None);
        assert_eq!(jain(&[0.0, 0.0]), None);
    }

    proptest! {
        #[test]
        fn jain_lies_between_one_over_n_and_one(xs in proptest::collection::vec(0.0f64..1e12, 2..64)) {
            if let Some(j) = jain(&xs) {
                let n = xs.len() as f64;
                prop_assert!(j >= 1.0 / n - 1e-9 && j <= 1.0 + 1e-9, "{j}");
            }
        }
    }
}
