//! Property tests: any input, any valid configuration.

use proptest::prelude::*;
use wanblk_tune::{
    ModelConfig, Phase, ResampleConfig, RetuneConfig, Sample, SampleUse, Signals, Tuner, TunerConfig,
    golden_probe_bound,
};

fn config() -> impl Strategy<Value = TunerConfig> {
    (
        1usize..6,
        0usize..200,
        any::<prop::sample::Index>(),
        1.01f64..4.0,
        prop_oneof![Just(0.0), 0.0f64..0.5],
        1u32..4,
        prop::option::of((0.0f64..0.5, 1u32..5)),
        any::<bool>(),
        prop::option::of((0.01f64..1.0, 1u32..5)),
        any::<bool>(),
        prop::option::of(1.0f64..8.0),
    )
        .prop_map(|(n_min, extra, start, alpha, tolerance, spp, rs, discard, rt, knee, jump)| {
            let n_max = n_min + extra;
            TunerConfig {
                n0: n_min + start.index(extra + 1),
                alpha,
                n_min,
                n_max,
                tolerance,
                samples_per_point: spp,
                resample: rs.map(|(margin, max_samples)| ResampleConfig {
                    margin,
                    max_samples,
                    beyond_noise: true,
                }),
                discard_after_change: discard,
                retune: rt.map(|(threshold, consecutive)| RetuneConfig { threshold, consecutive }),
                plateau_knee: knee,
                model: jump.map(|jump| ModelConfig { jump, ..ModelConfig::default() }),
            }
        })
}

fn signals() -> impl Strategy<Value = Signals> {
    prop::option::of(any::<bool>())
        .prop_map(|standing_queue| Signals { standing_queue, ..Signals::default() })
}

fn goodput() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0f64..1e10,
        1 => Just(0.0),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => -1e10f64..0.0,
        1 => Just(f64::MAX),
        1 => Just(f64::MIN_POSITIVE),
    ]
}

fn duration() -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => 0.001f64..10.0,
        1 => Just(0.0),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(-1.0),
        1 => Just(f64::MAX),
    ]
}

proptest! {
    /// Never panics, always answers within [n_min, n_max], and every
    /// golden-section episode ends within `golden_probe_bound` of its first
    /// bracket's width, whatever the samples.
    #[test]
    fn any_samples_keep_the_tuner_sane(
        cfg in config(),
        samples in prop::collection::vec((goodput(), duration(), 0u8..20, signals()), 0..300),
    ) {
        let mut t = Tuner::new(cfg.clone()).unwrap();
        let mut episode: Option<(usize, usize)> = None; // (bound, probes so far)
        for (g, d, wrong, signals) in samples {
            // Now and then a sample for the wrong N.
            let n = if wrong == 0 { t.current() + 1 } else { t.current() };
            let before = t.phase();
            let step = t.observe_with(Sample { n, goodput_bytes_per_s: g, duration_s: d }, signals);
            prop_assert!((cfg.n_min..=cfg.n_max).contains(&step.next_n), "{step:?}");
            prop_assert_eq!(step.next_n, t.current());
            prop_assert_eq!(step.phase, t.phase());
            if before == Phase::Golden && step.sample == SampleUse::Used {
                let (bound, probes) = episode.as_mut().unwrap();
                *probes += 1;
                prop_assert!(*probes <= *bound, "{} probes > bound {}", probes, bound);
            }
            if step.phase == Phase::Golden && before != Phase::Golden {
                let b = *t.report().bracket_history.last().unwrap();
                episode = Some((golden_probe_bound(b.r - b.l), 0));
            }
            if step.phase != Phase::Golden && before == Phase::Golden {
                episode = None;
            }
        }
        let r = t.report();
        prop_assert!(r.final_n.is_none_or(|n| (cfg.n_min..=cfg.n_max).contains(&n)));
        serde_json::to_string(&r).unwrap();
    }

    /// With valid samples only, the first search converges within
    /// `max_search_intervals()`.
    #[test]
    fn valid_samples_converge_within_the_bound(
        cfg in config(),
        samples in prop::collection::vec((0.0f64..1e10, signals()), 1000),
    ) {
        let mut t = Tuner::new(cfg.clone()).unwrap();
        let bound = cfg.max_search_intervals();
        let mut converged_at = None;
        for (i, (g, signals)) in samples.into_iter().enumerate() {
            let n = t.current();
            t.observe_with(Sample { n, goodput_bytes_per_s: g, duration_s: 1.0 }, signals);
            if t.converged().is_some() {
                converged_at = Some(i + 1);
                break;
            }
        }
        prop_assert!(converged_at.is_some_and(|i| i <= bound), "{converged_at:?} > {bound}");
    }
}

/// One interval as the share governor may be given it, garbage included.
fn observation() -> impl Strategy<Value = wanblk_tune::share::PathObservation> {
    let rtt = prop_oneof![
        8 => 0.0005f64..2.0,
        1 => Just(0.0),
        1 => Just(f64::NAN),
        1 => Just(-0.1),
        1 => Just(f64::INFINITY),
    ];
    let goodput =
        prop_oneof![8 => 0.0f64..2e9, 1 => Just(f64::NAN), 1 => Just(-5.0), 1 => Just(f64::INFINITY)];
    (0usize..80, rtt.clone(), rtt, goodput, 0u64..10_000, any::<bool>(), any::<bool>(), 0.0f64..1e4).prop_map(
        |(n, rtt_s, min_rtt_s, goodput_bytes_per_s, losses, discarded, demand_limited, t_s)| {
            wanblk_tune::share::PathObservation {
                t_s,
                n,
                rtt_s,
                min_rtt_s,
                goodput_bytes_per_s,
                discarded,
                losses: if losses < 7_000 { 0 } else { losses },
                demand_limited,
            }
        },
    )
}

proptest! {
    /// The share governor never panics, never sets a ceiling below its
    /// `n_min`, and keeps at most `READINGS_MAX` readings, whatever it is fed.
    #[test]
    fn any_observations_keep_the_governor_sane(
        mode in prop_oneof![
            Just(wanblk_tune::share::ShareMode::Polite),
            Just(wanblk_tune::share::ShareMode::Fair),
            Just(wanblk_tune::share::ShareMode::Greedy),
        ],
        n_min in 1usize..8,
        seed in any::<u64>(),
        obs in prop::collection::vec(observation(), 1..200),
    ) {
        let cfg = wanblk_tune::share::GovernorConfig {
            n_min,
            confirm: 1,
            stagger_seed: seed,
            ..wanblk_tune::share::GovernorConfig::new(mode)
        };
        let mut g = wanblk_tune::share::Governor::new(cfg);
        for o in &obs {
            g.observe(o);
            if let Some(c) = g.ceiling() {
                prop_assert!(c >= n_min, "ceiling {c} below n_min {n_min}");
            }
            let _ = g.take_restart();
        }
        prop_assert!(g.readings().len() <= wanblk_tune::share::governor::READINGS_MAX);
    }
}
