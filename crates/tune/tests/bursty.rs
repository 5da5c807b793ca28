//! The controller against a bursty, rate-limited server in simulated time:
//! nbdkit's `rate` filter (400 Mbit/s in all, 100 Mbit/s per connection,
//! so the best N is 4) releases whole replies, and on a busy host holds
//! them back for tens of milliseconds now and then. Samples of the
//! automatic interval (0.25 s on loopback) then vary by about +-20 %
//! around the path's rate, and a search that takes one lucky sample for a
//! gain climbs past the knee. Each run is deterministic (a seed per run).
//!
//! `cargo test -p wanblk-tune --test bursty -- --nocapture` prints what
//! every run ended at.

use std::time::{Duration, Instant};

use wanblk_tune::sim::{FlowModel, SessionSim};
use wanblk_tune::{
    Controller, ControllerConfig, Decision, IntervalChoice, IntervalPolicy, Parallelism, PoolLimits,
    ResampleConfig, TunerConfig,
};

const MIB: u32 = 1 << 20;
/// Per-connection and total limits, bytes per second.
const PER_SESSION: f64 = 100e6 / 8.0;
const TOTAL_MBIT: f64 = 400.0;
/// The best N: the fewest sessions that carry the total.
const KNEE: usize = 4;
/// Seeds per case.
const SEEDS: u64 = 20;

fn limits() -> PoolLimits {
    PoolLimits { max_sessions: 16, max_request_bytes: 4 * MIB, request_align: 512, max_depth: 4 }
}

/// Loopback (0.1 ms) with a rate-limited server whose replies come in
/// bursts: holds of up to 100 ms, one every 150 ms on average.
fn server(seed: u64) -> SessionSim {
    let path = FlowModel {
        loss_penalty: 0.0,
        per_flow_overhead: 0.0,
        ..FlowModel::new(TOTAL_MBIT, 0.1, 64.0 * 1_048_576.0)
    };
    SessionSim::new(path, limits(), Instant::now())
        .with_session_limit(PER_SESSION)
        .with_bursts(seed, 0.1, 0.15)
}

/// `wanblk copy -C auto` on two cores: the automatic interval, at least
/// 0.25 s.
fn auto(tuner: TunerConfig) -> ControllerConfig {
    ControllerConfig {
        interval: IntervalChoice::Auto(IntervalPolicy { min_interval_s: 0.25, ..IntervalPolicy::default() }),
        cores: 2,
        ..ControllerConfig::new(Parallelism::Tuned(tuner))
    }
}

/// The controller before: no halves rule, and a tuner without
/// noise-aware comparisons.
fn old() -> ControllerConfig {
    let d = TunerConfig::default();
    let rs = d.resample.map(|r| ResampleConfig { beyond_noise: false, ..r });
    let tuner = TunerConfig { resample: rs, ..d };
    ControllerConfig { halves_agree: 0.0, ..auto(tuner) }
}

fn run(
    config: ControllerConfig,
    sim: &mut SessionSim,
    until_s: f64,
    mut at: impl FnMut(&mut SessionSim),
) -> Controller {
    sim.apply(Decision { active: 1, open: 1, request_bytes: MIB, depth: 4 });
    sim.advance_to(sim.now() + Duration::from_millis(10));
    let mut c = Controller::new(config, &sim.counters(), sim.now()).unwrap();
    sim.apply(c.decision());
    while sim.elapsed_s() < until_s {
        let t = c.poll_timeout();
        sim.advance_to(t);
        at(sim);
        if let Some(d) = c.on_timeout(t, &sim.counters()) {
            sim.apply(d);
        }
    }
    c
}

fn trail(c: &Controller) -> Vec<(usize, u32)> {
    c.samples().iter().filter(|s| !s.discarded).map(|s| (s.n, s.goodput_mbps.round() as u32)).collect()
}

/// The simulated server is as noisy as the real one: at a fixed N = 4,
/// 0.25 s samples lie up to 20 % and more away from the path's rate.
#[test]
fn the_bursty_server_is_noisy() {
    let mut spread = 0.0f64;
    for seed in 0..4 {
        let mut sim = server(seed);
        let config = ControllerConfig {
            interval: IntervalChoice::Fixed(Duration::from_millis(250)),
            ..ControllerConfig::new(Parallelism::Fixed(KNEE))
        };
        let c = run(config, &mut sim, 20.0, |_| {});
        let steady = sim.steady_goodput(KNEE) * 8.0 / 1e6;
        for s in c.samples().iter().skip(2) {
            spread = spread.max((s.goodput_mbps / steady - 1.0).abs());
        }
    }
    println!("largest deviation of a 0.25 s sample: {:.0} %", 100.0 * spread);
    assert!(spread >= 0.2, "the server is not bursty: {spread}");
}

/// Every seed ends at the knee or a little above it (at most 1.5 x);
/// the tuner without noise-aware comparisons does not.
#[test]
fn a_bursty_server_ends_at_the_knee() {
    let band = KNEE..=KNEE * 3 / 2;
    let ends_with = |config: ControllerConfig| -> Vec<(u64, usize)> {
        (0..SEEDS)
            .map(|seed| {
                let mut sim = server(seed);
                let c = run(config.clone(), &mut sim, 20.0, |_| {});
                let n = c.tuner().unwrap().current();
                if !band.contains(&n) {
                    println!("seed {seed}: N = {n}: {:?}", trail(&c));
                }
                (seed, n)
            })
            .collect()
    };
    let now = ends_with(auto(TunerConfig::default()));
    println!("noise-aware: {now:?}");
    let off: Vec<_> = now.iter().filter(|(_, n)| !band.contains(n)).collect();
    assert!(off.is_empty(), "outside {band:?}: {off:?}");
    let before = ends_with(old());
    println!("before: {before:?}");
    assert!(before.iter().any(|(_, n)| !band.contains(n)), "the check above cannot fail");
}

/// The per-connection limit halves at 12 s (the best N becomes 8): every
/// seed searches again and ends at the new knee (at most 1.5 x).
#[test]
fn a_bursty_server_is_tuned_again_when_its_limit_falls() {
    let knee = 2 * KNEE;
    let band = knee..=knee * 3 / 2;
    let mut off = Vec::new();
    for seed in 0..SEEDS {
        let mut sim = server(seed);
        let c = run(auto(TunerConfig::default()), &mut sim, 30.0, |sim| {
            if sim.elapsed_s() >= 12.0 {
                sim.set_session_limit(PER_SESSION / 2.0);
            }
        });
        let n = c.tuner().unwrap().current();
        if !band.contains(&n) {
            println!("seed {seed}: N = {n}: {:?}", trail(&c));
            off.push((seed, n));
        }
    }
    assert!(off.is_empty(), "outside {band:?}: {off:?}");
    // A tuner that never searches again stays at the old knee.
    let mut sim = server(0);
    let still = TunerConfig { retune: None, ..TunerConfig::default() };
    let c = run(auto(still), &mut sim, 30.0, |sim| {
        if sim.elapsed_s() >= 12.0 {
            sim.set_session_limit(PER_SESSION / 2.0);
        }
    });
    let n = c.tuner().unwrap().current();
    assert!(!band.contains(&n), "the check above cannot fail: N = {n}");
}
