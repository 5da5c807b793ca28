//! Reading the report of `wanblk copy --report` (typed: a missing or
//! wrong field is an error that names the run), figures from it, and
//! optional figures as table cells: shared by every benchmark suite.

use std::path::Path;

use anyhow::Context;
use wanblk_copy::Report;

/// `wanblk copy` with `args` ended as it should: success, or (with
/// `--stop-after`) stopped early, which exits with 3 (incomplete).
pub(crate) fn copy_ok(status: std::process::ExitStatus, args: &[&str]) -> bool {
    status.success() || (status.code() == Some(3) && args.contains(&"--stop-after"))
}

/// Reads the report `wanblk copy --report path` wrote for `run`.
///
/// # Errors
/// The file missing or not a report of this build's schema; the message
/// names `run` and the file.
pub(crate) fn read(path: &Path, run: &str) -> anyhow::Result<Report> {
    let bytes =
        std::fs::read(path).with_context(|| format!("{run}: reading its report {}", path.display()))?;
    Report::from_json(&bytes).with_context(|| format!("{run}: report {}", path.display()))
}

/// Steady goodput (Mbit/s) from a report: the duration-weighted mean of
/// the settled samples that start at or after `from_s`
/// ([`Sample::settled`](wanblk_copy::Sample::settled)).
pub(crate) fn steady_after(report: &Report, from_s: f64) -> Option<f64> {
    let (mut bits, mut secs) = (0.0, 0.0);
    for s in &report.samples {
        if s.t_s - s.duration_s >= from_s && s.settled() {
            bits += s.goodput_mbps * s.duration_s;
            secs += s.duration_s;
        }
    }
    (secs > 0.0).then(|| bits / secs)
}

/// Seconds into the copy at which the tuner last converged (the end of the
/// interval it names), if it did.
pub(crate) fn converged_at_s(report: &Report) -> Option<f64> {
    let i = report.tuning.as_ref()?.converged_at_interval?;
    Some(report.samples.get(usize::try_from(i.saturating_sub(1)).ok()?)?.t_s)
}

/// How `report` recovered from a path change at `at_s` seconds, read from
/// its samples rather than the tuner (the share governor's ceilings
/// restart the tuner's search, which its own re-tune count does not
/// show): the best goodput of a settled interval after the change, Mbit/s;
/// the seconds after the change until a settled interval first reached 0.9
/// of it; and the seconds after the change of the last change of N, with
/// the N it ended at. `None` without settled samples after the change.
pub(crate) fn recovery(report: &Report, at_s: f64) -> Option<(f64, f64, f64, usize)> {
    let after: Vec<&wanblk_copy::Sample> =
        report.samples.iter().filter(|s| s.t_s > at_s && s.settled()).collect();
    let best = after.iter().map(|s| s.goodput_mbps).fold(f64::NAN, f64::max);
    let reached = after.iter().find(|s| s.goodput_mbps >= 0.9 * best)?.t_s - at_s;
    let all: Vec<&wanblk_copy::Sample> = report.samples.iter().filter(|s| s.t_s > at_s).collect();
    let last =
        all.windows(2).filter(|w| w[0].n != w[1].n).map(|w| w[1].t_s).next_back().unwrap_or(at_s) - at_s;
    Some((best, reached, last, all.last()?.n))
}

/// `(t_s, value)` of every sample: goodput or N over time, for plots.
pub(crate) fn timeline(report: &Report, value: fn(&wanblk_copy::Sample) -> f64) -> Vec<(f64, f64)> {
    report.samples.iter().map(|s| (s.t_s, value(s))).collect()
}

/// `v` with `prec` decimals, or `-` when unknown.
pub(crate) fn cell(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.prec$}"))
}

/// `v` with 3 decimals for a CSV field, or an empty field when unknown.
pub(crate) fn csv_cell(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v:.3}"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use wanblk_copy::Sample;

    /// A sample ending at `t_s`, lasting `duration_s`.
    pub(crate) fn sample(t_s: f64, duration_s: f64, goodput_mbps: f64, n: usize) -> Sample {
        Sample {
            t_s,
            n,
            goodput_mbps,
            completed_mbps: goodput_mbps,
            from_tcp: true,
            fairness: None,
            retransmits: 0,
            out_of_order: 0,
            duration_s,
            rtt_ms: 100.0,
            discarded: false,
            partial: false,
            drain_wait_s: 0.0,
            connect_wait_s: 0.0,
            busy: None,
            demand_limited: false,
            ending: false,
            standing_queue: None,
            settled_mbps: None,
            loss_cap_mbps: None,
            request_bytes: 1 << 20,
            depth: 4,
        }
    }

    /// A report of a finished copy with these samples and no tuner.
    pub(crate) fn report(samples: Vec<Sample>) -> Report {
        Report {
            schema_version: wanblk_copy::report::SCHEMA_VERSION,
            source: "nbd://x/".into(),
            destination: "null:".into(),
            bytes: 1 << 30,
            seconds: 10.0,
            goodput_mbps: 858.99,
            data_bytes: 1 << 30,
            zero_bytes: 0,
            skipped_bytes: 0,
            connections: 4,
            requests: 4,
            request_size: 1 << 20,
            samples,
            stores: Vec::new(),
            sha256: None,
            complete: true,
            resumed_bytes: 0,
            interrupted: false,
            flushed: true,
            max_in_flight_bytes: 64 << 20,
            verify: None,
            faults: wanblk_copy::Faults::default(),
            journal: None,
            tuning: None,
            timing: None,
            progress: Vec::new(),
            cpu_user_s: 1.0,
            cpu_system_s: 1.0,
            notes: Vec::new(),
            error: None,
            share: wanblk_tune::share::SessionMeter::new().report("fair", &[], Vec::new(), 1),
        }
    }

    #[test]
    fn steady_skips_warmup_and_discarded() {
        let mut r = report(vec![
            sample(1.0, 1.0, 10.0, 1),
            sample(2.0, 1.0, 100.0, 1),
            sample(3.0, 1.0, 500.0, 1),
            sample(4.0, 1.0, 200.0, 1),
        ]);
        r.samples[2].discarded = true;
        assert_eq!(steady_after(&r, 1.0), Some(150.0));
        assert_eq!(steady_after(&r, 10.0), None);
        assert_eq!(timeline(&r, |s| s.goodput_mbps)[1], (2.0, 100.0));
        // Held back from the tuner only because the copy was ending: N was
        // held, the interval is as steady as any.
        r.samples[2].ending = true;
        assert_eq!(steady_after(&r, 1.0), Some(800.0 / 3.0));
    }

    #[test]
    fn convergence_time_is_the_named_interval_end() {
        let mut r =
            report(vec![sample(0.5, 0.5, 1.0, 1), sample(1.25, 0.75, 1.0, 2), sample(2.0, 0.75, 1.0, 2)]);
        assert_eq!(converged_at_s(&r), None, "no tuner");
        let tuner = wanblk_tune::Tuner::new(wanblk_tune::TunerConfig::default()).unwrap();
        let mut tuning = tuner.report();
        r.tuning = Some(tuning.clone());
        assert_eq!(converged_at_s(&r), None, "not converged");
        tuning.converged_at_interval = Some(2);
        r.tuning = Some(tuning);
        assert_eq!(converged_at_s(&r), Some(1.25));
        assert_eq!(cell(Some(1.234), 2), "1.23");
        assert_eq!(cell(None, 2), "-");
        assert_eq!((csv_cell(Some(2.0)), csv_cell(None)), ("2.000".into(), String::new()));
    }

    #[test]
    fn a_bad_report_names_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        let e = format!("{:#}", read(&path, "wanblk -C auto").unwrap_err());
        assert!(e.starts_with("wanblk -C auto: reading its report"), "{e}");
        let mut v = serde_json::to_value(report(Vec::new())).unwrap();
        v.as_object_mut().unwrap().remove("data_bytes");
        std::fs::write(&path, v.to_string()).unwrap();
        let e = format!("{:#}", read(&path, "wanblk -C 4").unwrap_err());
        assert!(e.starts_with("wanblk -C 4: report") && e.contains("missing field `data_bytes`"), "{e}");
        std::fs::write(&path, serde_json::to_string(&report(Vec::new())).unwrap()).unwrap();
        assert_eq!(read(&path, "x").unwrap(), report(Vec::new()));
    }

    #[test]
    fn recovery_after_a_change_is_read_from_the_samples() {
        let mut samples = vec![sample(10.0, 1.0, 900.0, 4), sample(31.0, 1.0, 500.0, 4)];
        samples.push(Sample { discarded: true, ..sample(32.0, 1.0, 990.0, 8) });
        samples.extend([
            sample(33.0, 1.0, 700.0, 8),
            sample(34.0, 1.0, 950.0, 16),
            sample(36.0, 1.0, 940.0, 12),
        ]);
        let (best, reached, last, n) = recovery(&report(samples), 30.0).unwrap();
        assert_eq!(best, 950.0, "a warm-up interval does not count");
        assert!((reached - 4.0).abs() < 1e-9, "{reached}");
        assert!((last - 6.0).abs() < 1e-9, "{last}");
        assert_eq!(n, 12);
        assert_eq!(recovery(&report(vec![sample(10.0, 1.0, 900.0, 4)]), 30.0), None);
    }
}
