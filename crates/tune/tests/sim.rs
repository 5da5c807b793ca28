//! The tuner against the flow model of `wanblk_tune::sim`, in simulated time.
//!
//! `cargo test -p wanblk-tune --release grid -- --nocapture` prints the
//! convergence table of the (capacity, RTT, window) grid.

use wanblk_tune::sim::{Bench, BenchConfig, FlowModel, PathModel, RunSummary, best_fixed};
use wanblk_tune::{Phase, TunerConfig};

const N_MAX: usize = 128;

fn grid() -> Vec<(String, FlowModel)> {
    let mut cells = Vec::new();
    for c in [200.0, 1000.0, 10_000.0] {
        for rtt in [10.0, 20.0, 50.0, 100.0, 200.0] {
            for (w, wname) in [(65_536.0, "64K"), (524_288.0, "512K"), (4_194_304.0, "4M")] {
                let name = format!("{c:>5} Mb/s {rtt:>3} ms {wname:>4}");
                cells.push((name, FlowModel::new(c, rtt, w)));
            }
        }
    }
    cells
}

fn run(tuner: &TunerConfig, model: &impl PathModel, noise: f64, seed: u64) -> RunSummary {
    let mut cfg = BenchConfig::new(tuner.clone());
    cfg.noise = noise;
    cfg.seed = seed;
    Bench::new(cfg).unwrap().run(model, 1000)
}

/// Every cell, paper and robust settings, without and with 5 % noise (slow
/// start of new sessions modelled throughout). Asserts for the robust
/// settings: convergence within `max_search_intervals()`; without noise,
/// final goodput within 5 % of the best fixed N in every cell; with noise,
/// in at least 90 % of (cell, seed) runs over 10 seeds per cell.
#[test]
fn grid_convergence() {
    let cells = grid();
    let paper = TunerConfig::paper();
    let robust = TunerConfig::default();
    let bound = robust.max_search_intervals() as u64;

    let interior = cells
        .iter()
        .filter(|(_, m)| {
            let (n, _) = m.best_fixed(N_MAX);
            n > 1 && n < N_MAX
        })
        .count();
    println!("interior optimum (1 < best N < {N_MAX}) in {interior} of {} cells", cells.len());
    assert!(interior * 2 > cells.len(), "the grid must mostly have interior optima");

    println!(
        "{:<24} {:>4} | {:^23} | {:^23} | {:^23} | {:^23}",
        "cell", "best", "paper, no noise", "paper, 5 % noise", "robust, no noise", "robust, 5 % noise"
    );
    println!("{:<24} {:>4} |{}", "", "N", " int     s    N  ratio |".repeat(4));
    let mut noisy_ok = 0;
    let mut noisy_runs = 0;
    let mut worst_noisy = f64::INFINITY;
    for (i, (name, model)) in cells.iter().enumerate() {
        let (best_n, _) = model.best_fixed(N_MAX);
        let mut line = format!("{name:<24} {best_n:>4} |");
        for (cfg, noise) in [(&paper, 0.0), (&paper, 0.05), (&robust, 0.0), (&robust, 0.05)] {
            let r = run(cfg, model, noise, i as u64);
            line +=
                &format!(" {:>3} {:>5.1} {:>4} {:>6.3} |", r.intervals, r.elapsed_s, r.final_n, r.ratio());
        }
        println!("{line}");

        let r = run(&robust, model, 0.0, 0);
        assert!(r.converged && r.intervals <= bound, "{name}: {r:?} (bound {bound})");
        assert!(r.ratio() >= 0.95, "{name}: {r:?}");
        for seed in 0..10 {
            let r = run(&robust, model, 0.05, 100 * seed + i as u64);
            assert!(r.converged && r.intervals <= bound, "{name}: {r:?} (bound {bound})");
            noisy_runs += 1;
            noisy_ok += usize::from(r.ratio() >= 0.95);
            worst_noisy = worst_noisy.min(r.ratio());
        }
    }
    let rate = noisy_ok as f64 / noisy_runs as f64;
    println!(
        "robust bound {bound} intervals; with 5 % noise {noisy_ok}/{noisy_runs} runs within 5 % \
         ({:.1} %), worst ratio {worst_noisy:.3}",
        rate * 100.0
    );
    assert!(rate >= 0.9, "{rate}");
}

/// A smooth concave curve, the shape of measured aggregate goodput vs N:
/// saturating rise N / (N + k), per-session cost 1 / (1 + gamma N), optimum
/// at sqrt(k / gamma) = 40, and a broad top (within 5 % from 22 to 72).
struct Smooth;

impl PathModel for Smooth {
    fn goodput(&self, n: usize) -> f64 {
        let n = n as f64;
        1e8 * n / (n + 8.0) / (1.0 + 0.005 * n)
    }
    fn rtt_with(&self, _n: usize) -> f64 {
        0.1
    }
}

fn success_rate(cfg: &TunerConfig, model: &impl PathModel, noise: f64, seeds: u64) -> (f64, f64) {
    let (mut ok, mut intervals) = (0, 0);
    for seed in 0..seeds {
        let mut b = BenchConfig::new(cfg.clone());
        b.noise = noise;
        b.seed = seed;
        b.slow_start = false;
        let r = Bench::new(b).unwrap().run(model, 1000);
        ok += usize::from(r.ratio() >= 0.95);
        intervals += r.intervals;
    }
    (ok as f64 / seeds as f64, intervals as f64 / seeds as f64)
}

/// Noise alone (no slow-start transient): how often each setting ends
/// within 5 % of the optimum, over 200 seeds.
#[test]
fn noise_robust_beats_paper() {
    let paper = TunerConfig::paper();
    let robust = TunerConfig::default();
    for noise in [0.05, 0.10] {
        let (p, pi) = success_rate(&paper, &Smooth, noise, 200);
        let (r, ri) = success_rate(&robust, &Smooth, noise, 200);
        println!(
            "smooth curve, {:.0} % noise: paper {:.1} % ({pi:.1} intervals), robust {:.1} % \
             ({ri:.1} intervals)",
            noise * 100.0,
            p * 100.0,
            r * 100.0
        );
        assert!(r > p, "robust {r} paper {p}");
        if noise == 0.05 {
            assert!(r >= 0.9, "{r}");
        }
    }

    // The flow model's sharp knee (linear ramp, then buffer overflow) is the
    // hard case: neighbours of the optimum differ by about the noise.
    let knee = FlowModel::new(1000.0, 100.0, 524_288.0);
    for noise in [0.05, 0.10] {
        let (p, pi) = success_rate(&paper, &knee, noise, 200);
        let (r, ri) = success_rate(&robust, &knee, noise, 200);
        println!(
            "flow model 1 Gb/s 100 ms 512K, {:.0} % noise: paper {:.1} % ({pi:.1} intervals), \
             robust {:.1} % ({ri:.1} intervals)",
            noise * 100.0,
            p * 100.0,
            r * 100.0
        );
        assert!(r >= p, "robust {r} paper {p}");
    }
}

/// With slow start modelled and no noise, discarding the first interval
/// after a change is what keeps the search on track.
#[test]
fn discard_matters_under_slow_start() {
    let paper = TunerConfig::paper();
    let with_discard = TunerConfig { discard_after_change: true, ..TunerConfig::paper() };
    let mut paper_ok = 0;
    let mut discard_ok = 0;
    for (_, model) in grid() {
        paper_ok += usize::from(run(&paper, &model, 0.0, 0).ratio() >= 0.95);
        discard_ok += usize::from(run(&with_discard, &model, 0.0, 0).ratio() >= 0.95);
    }
    println!("within 5 % of best: paper {paper_ok}/45, paper + discard {discard_ok}/45");
    assert_eq!(discard_ok, 45);
    assert!(paper_ok <= 35, "{paper_ok}");
}

/// Steps on `model` until the tuner has re-converged after at least one
/// re-tune, returning the number of intervals it took.
fn reconverge(bench: &mut Bench, model: &FlowModel, limit: u64) -> u64 {
    let retunes = bench.tuner().report().retunes;
    for i in 1..=limit {
        bench.step(model);
        let t = bench.tuner();
        if t.report().retunes > retunes && t.phase() == Phase::Converged {
            return i;
        }
    }
    panic!("no re-convergence within {limit} intervals: {:?}", bench.tuner().report());
}

#[test]
fn retune_follows_a_moving_optimum() {
    // 1 Gbit/s, 25 ms, 512 KiB windows: optimum 6. The route changes to
    // 84 ms: optimum 21. Then cross traffic leaves 140 Mbit/s: optimum 3.
    let a = FlowModel::new(1000.0, 25.0, 524_288.0);
    let b = FlowModel::new(1000.0, 84.0, 524_288.0);
    let c = FlowModel::new(140.0, 84.0, 524_288.0);
    assert_eq!(best_fixed(&a, N_MAX).0, 6);
    assert_eq!(best_fixed(&b, N_MAX).0, 21);
    assert_eq!(best_fixed(&c, N_MAX).0, 3);
    for noise in [0.0, 0.03] {
        let mut cfg = BenchConfig::new(TunerConfig::default());
        cfg.noise = noise;
        let mut bench = Bench::new(cfg).unwrap();
        let first = bench.run(&a, 200);
        assert!(first.converged && first.ratio() >= 0.95, "{first:?}");
        for _ in 0..20 {
            bench.step(&a);
        }
        assert_eq!(bench.tuner().report().retunes, 0, "no re-tune while the path is steady");
        for (model, best) in [(&b, 21), (&c, 3)] {
            let took = reconverge(&mut bench, model, 100);
            let n = bench.tuner().current();
            let ratio = model.goodput(n) / best_fixed(model, N_MAX).1;
            println!(
                "noise {noise}: optimum moved to {best}: re-converged at N = {n} ({ratio:.3}) after {took} intervals"
            );
            assert!(ratio >= 0.95, "N = {n}, ratio {ratio}");
            assert!(took <= 60, "{took}");
        }
    }
}
