//! A flow-level simulation bench: N window-limited TCP flows sharing one
//! drop-tail bottleneck, driven through the real [`Tuner`] and
//! [`IntervalPolicy`] in simulated time. Deterministic: noise comes from a
//! seeded [`SplitMix64`].
//!
//! [`SessionSim`] goes one level down: the pools' sessions one by one on a
//! [`FlowModel`] path (slow start, draining, per-session limits, TCP and
//! completion counters), to drive the whole [`Controller`](crate::Controller).
//!
//! These are models for testing the search, not an emulator: the emulator is
//! `wanblk-netem`.

use serde::Serialize;

mod sessions;

pub use sessions::SessionSim;

use crate::config::{ConfigError, TunerConfig};
use crate::control::{QUEUE_MIN, QUEUE_SHARE};
use crate::interval::{INITIAL_WINDOW_BYTES, IntervalPolicy, PathSnapshot};
use crate::model::Signals;
use crate::tuner::{Sample, Step, Tuner};

/// SplitMix64 (Steele, Lea and Flood): a tiny, fast, seeded generator,
/// good enough for simulation noise and trivially reproducible.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Approximately standard normal: the sum of 12 uniforms minus 6
    /// (mean 0, variance 1, bounded by +-6). Only additions, so results are
    /// identical on every platform.
    pub fn next_normal(&mut self) -> f64 {
        (0..12).map(|_| self.next_f64()).sum::<f64>() - 6.0
    }
}

/// What the bench needs to know about a simulated path. [`FlowModel`] is the
/// standard one; tests implement it for synthetic curves.
pub trait PathModel {
    /// Steady-state goodput with `n` sessions, bytes per second.
    fn goodput(&self, n: usize) -> f64;
    /// Round-trip time with `n` sessions, seconds.
    fn rtt_with(&self, n: usize) -> f64;
    /// Per-session window in bytes, if the driver would know it.
    fn window_bytes(&self) -> Option<u64> {
        None
    }
    /// How long a newly started session needs before it delivers, seconds.
    fn slow_start_s(&self, _n: usize) -> f64 {
        0.0
    }
    /// Whether `n` sessions keep a standing queue, as the controller would
    /// tell from their RTT ([`Signals`]); `None` if the model cannot say.
    fn standing_queue(&self, _n: usize) -> Option<bool> {
        None
    }
    /// The path's base RTT over the RTT with `n` sessions
    /// ([`Signals::base_share`]); `None` if the model cannot say.
    fn base_share(&self, _n: usize) -> Option<f64> {
        None
    }
}

/// The best fixed N in `1..=n_max` by exhaustive search (the smallest on
/// ties) and its goodput.
pub fn best_fixed(model: &impl PathModel, n_max: usize) -> (usize, f64) {
    (1..=n_max.max(1)).fold((1, model.goodput(1)), |best, n| {
        let g = model.goodput(n);
        if g > best.1 { (n, g) } else { best }
    })
}

/// N TCP flows on one bottleneck.
///
/// With `BDP = C * RTT` and `x = N * W` bytes in flight offered by N flows of
/// window `W`:
///
/// ```text
/// G(N) = min(x / RTT, C)                       if x <= BDP + B   (no loss)
/// G(N) = C / (1 + beta * (x / (BDP + B) - 1))  otherwise         (overflow)
/// then G(N) /= 1 + gamma * (N - 1)                               (per-flow cost)
/// ```
///
/// Below the BDP the flows are window-limited; up to BDP + B the drop-tail
/// buffer absorbs the excess as queueing delay; beyond it the buffer
/// overflows and losses and timeouts cost goodput in proportion to the
/// overflow ratio (`beta`). `gamma` is the per-session cost (CPU, request
/// scheduling, competition between the flows), so that on the plateau
/// fewer sessions are slightly better and very large N is worse.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FlowModel {
    /// `C`: bottleneck capacity in bytes per second.
    pub capacity_bytes_per_s: f64,
    /// Base round-trip time in seconds (no queueing).
    pub rtt_s: f64,
    /// `W`: per-flow window limit (socket buffer) in bytes.
    pub window_bytes: f64,
    /// `B`: drop-tail buffer at the bottleneck in bytes.
    pub buffer_bytes: f64,
    /// `beta`: goodput loss per unit of overflow ratio.
    pub loss_penalty: f64,
    /// `gamma`: relative cost of each session beyond the first.
    pub per_flow_overhead: f64,
}

impl FlowModel {
    /// A path of `mbit_s` Mbit/s and `rtt_ms` ms with `window` bytes per
    /// flow, a 500-packet (750 kB) buffer as in iSCSI-APT's Table I,
    /// `beta = 0.5` and `gamma = 0.001`.
    pub fn new(mbit_s: f64, rtt_ms: f64, window: f64) -> Self {
        FlowModel {
            capacity_bytes_per_s: mbit_s * 1e6 / 8.0,
            rtt_s: rtt_ms / 1e3,
            window_bytes: window,
            buffer_bytes: 500.0 * 1500.0,
            loss_penalty: 0.5,
            per_flow_overhead: 0.001,
        }
    }

    fn bdp(&self) -> f64 {
        self.capacity_bytes_per_s * self.rtt_s
    }

    /// The best fixed N in `1..=n_max` (see [`best_fixed`]).
    pub fn best_fixed(&self, n_max: usize) -> (usize, f64) {
        best_fixed(self, n_max)
    }
}

impl PathModel for FlowModel {
    /// Steady-state goodput with `n` flows, bytes per second (0 for n = 0).
    fn goodput(&self, n: usize) -> f64 {
        if n == 0 {
            return 0.0;
        }
        let c = self.capacity_bytes_per_s;
        let x = n as f64 * self.window_bytes;
        let room = self.bdp() + self.buffer_bytes;
        let raw = if x <= room {
            (x / self.rtt_s).min(c)
        } else {
            c / (1.0 + self.loss_penalty * (x / room - 1.0))
        };
        raw / (1.0 + self.per_flow_overhead * (n - 1) as f64)
    }

    /// Round-trip time with `n` flows: base RTT plus the queueing delay of
    /// whatever the flows put in flight beyond the BDP, up to the buffer.
    fn rtt_with(&self, n: usize) -> f64 {
        let queued = (n as f64 * self.window_bytes - self.bdp()).clamp(0.0, self.buffer_bytes);
        self.rtt_s + queued / self.capacity_bytes_per_s
    }

    fn window_bytes(&self) -> Option<u64> {
        Some(self.window_bytes as u64)
    }

    /// How long a newly started flow needs in slow start when `n` flows
    /// share the path: `RTT * log2(target / IW)` with `target` its steady
    /// bytes in flight, `min(W, BDP / n)`, and IW = 14 600 bytes.
    fn slow_start_s(&self, n: usize) -> f64 {
        let target = self.window_bytes.min(self.bdp() / n.max(1) as f64);
        self.rtt_s * (target / INITIAL_WINDOW_BYTES).max(1.0).log2()
    }

    /// The controller's rule ([`Counters::standing_queue`](crate::Counters::standing_queue))
    /// on the model's RTT.
    fn standing_queue(&self, n: usize) -> Option<bool> {
        let queue = self.rtt_with(n) - self.rtt_s;
        Some(queue > (QUEUE_SHARE * self.rtt_s).max(QUEUE_MIN.as_secs_f64()))
    }

    fn base_share(&self, n: usize) -> Option<f64> {
        Some(self.rtt_s / self.rtt_with(n))
    }
}

/// Parameters of a [`Bench`] run.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchConfig {
    /// The tuner under test.
    pub tuner: TunerConfig,
    /// How the driver picks each interval.
    pub interval: IntervalPolicy,
    /// Relative standard deviation of multiplicative measurement noise
    /// (0.05 = 5 %); 0 for none.
    pub noise: f64,
    /// Seed of the noise generator.
    pub seed: u64,
    /// Request size in bytes (for the interval policy).
    pub request_bytes: u64,
    /// Model slow start of newly activated sessions: in the first
    /// [`PathModel::slow_start_s`] after N grows from `a` to `b`, goodput is
    /// `G(a)` (the old sessions alone) instead of `G(b)`. Shrinking N has no
    /// transient.
    pub slow_start: bool,
}

impl BenchConfig {
    /// `tuner` with the default interval policy, 1 MiB requests, slow start
    /// modelled, no noise.
    pub fn new(tuner: TunerConfig) -> Self {
        BenchConfig {
            tuner,
            interval: IntervalPolicy::default(),
            noise: 0.0,
            seed: 1,
            request_bytes: 1 << 20,
            slow_start: true,
        }
    }
}

/// One simulated interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SimInterval {
    /// Sessions used.
    pub n: usize,
    /// Interval length chosen by the policy, seconds.
    pub duration_s: f64,
    /// Goodput reported to the tuner (with transients and noise).
    pub measured: f64,
    /// The model's steady-state goodput at `n`.
    pub steady: f64,
    /// The tuner's answer.
    pub step: Step,
}

/// The outcome of [`Bench::run`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RunSummary {
    /// Intervals until the tuner converged (or the limit, if it did not).
    pub intervals: u64,
    /// Simulated seconds until then.
    pub elapsed_s: f64,
    /// Whether it converged within the limit.
    pub converged: bool,
    /// The N it ended at.
    pub final_n: usize,
    /// Steady-state goodput at `final_n`.
    pub final_goodput: f64,
    /// The best fixed N of the model.
    pub best_n: usize,
    /// Its goodput.
    pub best_goodput: f64,
}

impl RunSummary {
    /// `final_goodput / best_goodput`.
    pub fn ratio(&self) -> f64 {
        if self.best_goodput > 0.0 { self.final_goodput / self.best_goodput } else { 1.0 }
    }
}

/// Drives a [`Tuner`] against a [`PathModel`] in simulated time.
#[derive(Debug, Clone)]
pub struct Bench {
    cfg: BenchConfig,
    tuner: Tuner,
    rng: SplitMix64,
    elapsed_s: f64,
    /// Sessions before the last increase of N (None: no transient).
    grew_from: Option<usize>,
    since_change_s: f64,
    last_measured: f64,
}

impl Bench {
    /// A bench at the tuner's N0; all N0 sessions start in slow start.
    ///
    /// # Errors
    /// [`ConfigError`] when the tuner configuration is invalid.
    pub fn new(cfg: BenchConfig) -> Result<Self, ConfigError> {
        let tuner = Tuner::new(cfg.tuner.clone())?;
        Ok(Bench {
            rng: SplitMix64::new(cfg.seed),
            tuner,
            cfg,
            elapsed_s: 0.0,
            grew_from: Some(0),
            since_change_s: 0.0,
            last_measured: 0.0,
        })
    }

    /// The tuner being driven.
    pub fn tuner(&self) -> &Tuner {
        &self.tuner
    }

    /// Simulated seconds so far.
    pub fn elapsed_s(&self) -> f64 {
        self.elapsed_s
    }

    /// Simulates one interval on `model` and feeds it to the tuner.
    pub fn step(&mut self, model: &impl PathModel) -> SimInterval {
        let n = self.tuner.current();
        let duration_s = self.cfg.interval.interval_s(&PathSnapshot {
            max_rtt_s: model.rtt_with(n),
            goodput_bytes_per_s: self.last_measured,
            sessions: n,
            request_bytes: self.cfg.request_bytes,
            window_bytes: model.window_bytes(),
            warmup: self.tuner.next_is_warmup(),
            after_decrease: self.grew_from.is_none(),
        });
        let steady = model.goodput(n);
        let mut g = steady;
        if let (true, Some(a)) = (self.cfg.slow_start, self.grew_from) {
            let ss = model.slow_start_s(n);
            let t0 = self.since_change_s;
            let overlap = (ss.min(t0 + duration_s) - t0).max(0.0);
            let frac = if duration_s > 0.0 { overlap / duration_s } else { 0.0 };
            g = frac * model.goodput(a) + (1.0 - frac) * steady;
        }
        if self.cfg.noise > 0.0 {
            g = (g * (1.0 + self.cfg.noise * self.rng.next_normal())).max(0.0);
        }
        let signals = Signals {
            standing_queue: model.standing_queue(n),
            coarse: false,
            base_share: model.base_share(n),
            losses: None,
            loss_cap: None,
            capacity: None,
        };
        let step = self.tuner.observe_with(Sample { n, goodput_bytes_per_s: g, duration_s }, signals);
        self.last_measured = g;
        self.elapsed_s += duration_s;
        self.since_change_s += duration_s;
        if step.next_n != n {
            self.grew_from = (step.next_n > n).then_some(n);
            self.since_change_s = 0.0;
        }
        SimInterval { n, duration_s, measured: g, steady, step }
    }

    /// Steps until the tuner converges or `max_intervals` have passed.
    pub fn run(&mut self, model: &impl PathModel, max_intervals: u64) -> RunSummary {
        let mut intervals = 0;
        while intervals < max_intervals && self.tuner.converged().is_none() {
            self.step(model);
            intervals += 1;
        }
        let (best_n, best_goodput) = best_fixed(model, self.cfg.tuner.n_max);
        let final_n = self.tuner.current();
        RunSummary {
            intervals,
            elapsed_s: self.elapsed_s,
            converged: self.tuner.converged().is_some(),
            final_n,
            final_goodput: model.goodput(final_n),
            best_n,
            best_goodput,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_reproducible_and_roughly_normal() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        assert_eq!(a.next_u64(), b.next_u64());
        let mut r = SplitMix64::new(42);
        let xs: Vec<f64> = (0..20_000).map(|_| r.next_normal()).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.03 && (var - 1.0).abs() < 0.05, "{mean} {var}");
    }

    #[test]
    fn model_shape() {
        // 1 Gbit/s, 50 ms, 512 KiB windows: BDP 6.25 MB = 11.9 windows.
        let m = FlowModel::new(1000.0, 50.0, 524_288.0);
        assert!(m.goodput(6) < m.goodput(12));
        let (best, g) = m.best_fixed(128);
        assert_eq!(best, 12);
        assert!(g > 0.98 * m.capacity_bytes_per_s);
        // Past BDP + B = 13.4 windows the buffer overflows.
        assert!(m.goodput(40) < 0.8 * g);
        assert!(m.goodput(128) < m.goodput(40));
        assert_eq!(m.goodput(0), 0.0);
        assert!(m.rtt_with(1) == m.rtt_s && m.rtt_with(100) > m.rtt_s);
    }
}
