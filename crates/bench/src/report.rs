//! Reading the JSON report of `wanblk copy --report`, and formatting
//! optional figures as table cells: shared by every benchmark suite.

/// Steady goodput (Mbit/s) from a report: the duration-weighted mean of
/// the samples that start at or after `from_s`, discarded ones left out.
pub(crate) fn steady_after(report: &serde_json::Value, from_s: f64) -> Option<f64> {
    let (mut bits, mut secs) = (0.0, 0.0);
    for s in report["samples"].as_array()? {
        let (t, d, g) = (s["t_s"].as_f64()?, s["duration_s"].as_f64()?, s["goodput_mbps"].as_f64()?);
        if t - d >= from_s && !s["discarded"].as_bool().unwrap_or(false) {
            bits += g * d;
            secs += d;
        }
    }
    (secs > 0.0).then(|| bits / secs)
}

/// Seconds into the copy at which the tuner last converged (the end of the
/// interval it names), if it did.
pub(crate) fn converged_at_s(report: &serde_json::Value) -> Option<f64> {
    let i = report["tuning"]["converged_at_interval"].as_u64()?;
    report["samples"].as_array()?.get(i.saturating_sub(1) as usize)?["t_s"].as_f64()
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
mod tests {
    use super::*;

    #[test]
    fn steady_skips_warmup_and_discarded() {
        let r = serde_json::json!({"samples": [
            {"t_s": 1.0, "duration_s": 1.0, "goodput_mbps": 10.0},
            {"t_s": 2.0, "duration_s": 1.0, "goodput_mbps": 100.0},
            {"t_s": 3.0, "duration_s": 1.0, "goodput_mbps": 500.0, "discarded": true},
            {"t_s": 4.0, "duration_s": 1.0, "goodput_mbps": 200.0},
        ]});
        assert_eq!(steady_after(&r, 1.0), Some(150.0));
        assert_eq!(steady_after(&r, 10.0), None);
    }

    #[test]
    fn convergence_time_is_the_named_interval_end() {
        let r = serde_json::json!({
            "tuning": {"converged_at_interval": 2},
            "samples": [{"t_s": 0.5}, {"t_s": 1.25}, {"t_s": 2.0}],
        });
        assert_eq!(converged_at_s(&r), Some(1.25));
        assert_eq!(converged_at_s(&serde_json::json!({"tuning": {}})), None);
        assert_eq!(cell(Some(1.234), 2), "1.23");
        assert_eq!(cell(None, 2), "-");
        assert_eq!((csv_cell(Some(2.0)), csv_cell(None)), ("2.000".into(), String::new()));
    }
}
