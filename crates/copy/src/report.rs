//! The JSON report written by `wanblk copy --report FILE`, and read back
//! by the benchmarks ([`Report::from_json`]).
//!
//! # Schema versions
//!
//! `schema_version` names the layout. Readers ignore fields they do not
//! know, so a field may be added within a version; a field removed or
//! renamed, or one whose type or meaning changes, bumps the version.
//!
//! - **1** (no `schema_version` field): written before this type could be
//!   read back; `tuning` was free-form JSON and readers picked fields out
//!   of it, taking a missing one for 0.
//! - **2**: adds `schema_version`; `tuning` is the tuner's
//!   [`TuningReport`] and each sample a [`Sample`], both typed. Every
//!   field is required when read: an optional one is written as `null`,
//!   never left out, so a missing field is an error, not a silent 0. The
//!   other fields are those of version 1, unchanged.
//! - **3**: adds `stores`, one [`StoreReport`] per network store in the
//!   order opened, with the payload bytes each session carried
//!   (`session_bytes`), so a report shows how many sessions really
//!   carried data, not only how many were asked for (`connections`).
//! - **4**: each sample gains `connect_wait_s` (seconds waited for new
//!   sessions to connect before the warm-up), `busy` (share of the
//!   interval the sessions had requests to carry), `demand_limited` (the
//!   application, not the path, limited goodput: not a tuning input) and
//!   `standing_queue` (the RTT stood above its minimum: a full path); the
//!   report gains `timing` (`time_to_95pct_s`, `time_to_final_n_s`,
//!   `capacity_mbps`, `demand_limited_s`: see [`Timing`]) and `progress`
//!   (bytes moved over time). The demand-vs-capacity view is `busy` and
//!   `demand_limited` per sample against `capacity_mbps`, with
//!   `demand_limited_s` in all.
//! - **5**: `sha256` is written with `--checksum` (it was `--verify`);
//!   adds `resumed_bytes`, `interrupted`, `flushed`,
//!   `max_in_flight_bytes`, `verify` (the read-back), `faults` (what went
//!   wrong on the way and was survived) and `journal`.

use serde::{Deserialize, Serialize};

/// One goodput measurement interval (`t_s`, `n`, `goodput_mbps` and more).
pub use wanblk_tune::IntervalSample as Sample;
/// One point of the progress trace.
pub use wanblk_tune::ProgressPoint;
/// How fast the copy reached the path.
pub use wanblk_tune::Timing;
/// The tuner's record with `--connections auto`.
pub use wanblk_tune::TuningReport;
/// How the sessions shared the path: per-session totals and fairness.
pub use wanblk_tune::share::ShareReport;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 5;

/// Everything a finished (or failed) copy reports.
///
/// Optional fields are required when read (`null` when absent): see the
/// [module docs](self).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Layout of this report: [`SCHEMA_VERSION`] when written by this build.
    pub schema_version: u32,
    /// Source URI (secrets removed).
    pub source: String,
    /// Destination URI (secrets removed).
    pub destination: String,
    /// Bytes of the image (the source size).
    pub bytes: u64,
    /// Wall-clock seconds of the copy (connections open to last completion).
    pub seconds: f64,
    /// Data bytes moved (read and written) x 8 / seconds / 10^6. Holes and
    /// zero runs turned into zeroing requests are not counted.
    pub goodput_mbps: f64,
    /// Bytes carried as data.
    pub data_bytes: u64,
    /// Bytes zeroed on the destination without carrying data.
    pub zero_bytes: u64,
    /// Bytes skipped because the destination already reads as zero.
    pub skipped_bytes: u64,
    /// Active sessions at the end.
    pub connections: usize,
    /// Most requests in flight per session (`--requests`, the pools'
    /// `max_depth`).
    pub requests: usize,
    /// Largest request, bytes (`--request-size` fitted to the stores: the
    /// pools' `max_request_bytes`, the copy's piece size); the controller
    /// may use smaller ones (each sample's `request_bytes`).
    pub request_size: u32,
    /// Goodput per monitoring interval.
    pub samples: Vec<Sample>,
    /// Per network store (empty without one): what each session carried.
    pub stores: Vec<StoreReport>,
    /// sha256 of the image in offset order (holes hashed as zeroes), with `--checksum`.
    #[serde(deserialize_with = "Option::deserialize")]
    pub sha256: Option<String>,
    /// Every byte was copied (false after `--stop-after`, an interruption
    /// or an error).
    pub complete: bool,
    /// Bytes an earlier run copied (from the journal), not copied again.
    pub resumed_bytes: u64,
    /// Stopped before the end (a signal, or `--stop-after`).
    pub interrupted: bool,
    /// The destination was flushed to stable storage after the last write.
    pub flushed: bool,
    /// The most bytes read and not yet written at once: what an
    /// interrupted run may have to send again when resumed.
    pub max_in_flight_bytes: u64,
    /// The read-back of the destination, with `--verify`.
    #[serde(deserialize_with = "Option::deserialize")]
    pub verify: Option<crate::VerifyOutcome>,
    /// What went wrong on the way and was survived.
    pub faults: Faults,
    /// The resume journal (removed when the copy completes).
    #[serde(deserialize_with = "Option::deserialize")]
    pub journal: Option<String>,
    /// The tuner's record with `--connections auto`.
    #[serde(deserialize_with = "Option::deserialize")]
    pub tuning: Option<TuningReport>,
    /// How fast the copy reached the path (with a network store): time
    /// to 95 % of `capacity_mbps`, time until N was final, what the path
    /// carried, and seconds limited by demand rather than the path.
    #[serde(deserialize_with = "Option::deserialize")]
    pub timing: Option<Timing>,
    /// Bytes moved over time (the controller's trace; empty without a
    /// network store).
    pub progress: Vec<ProgressPoint>,
    /// CPU seconds this process spent in user mode during the copy.
    pub cpu_user_s: f64,
    /// CPU seconds this process spent in the kernel during the copy.
    pub cpu_system_s: f64,
    /// Adjustments and warnings.
    pub notes: Vec<String>,
    /// The error that stopped the copy, if it failed.
    #[serde(deserialize_with = "Option::deserialize")]
    pub error: Option<String>,
    /// How the sessions shared the path: the share mode, the per-interval
    /// Jain index of the active sessions (median, lowest), what each
    /// session carried, ceilings on N, copies sharing the host.
    pub share: ShareReport,
}

/// What the sessions to one network store carried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreReport {
    /// The store (URI without secrets).
    pub name: String,
    /// Payload bytes of the reads and writes each session completed, by
    /// session index in the order opened (failed sessions included).
    pub session_bytes: Vec<u64>,
    /// Sessions retired after their connection failed.
    pub failed_sessions: usize,
}

/// Faults a copy survived: sessions that failed and were replaced,
/// requests issued again, time without any session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Faults {
    /// Sessions that failed (connection lost or stuck past the request
    /// deadline) and were replaced.
    pub reconnects: u64,
    /// Requests issued again: after their session failed, after their
    /// deadline, after a transient server error, or as the duplicate of a
    /// straggling request on an idle session.
    pub retried_requests: u64,
    /// Transient server errors (EIO, ESHUTDOWN, BUSY, TASK SET FULL, UNIT
    /// ATTENTION...) that were retried.
    pub transient_errors: u64,
    /// Requests that passed their deadline (`--io-timeout`).
    pub timeouts: u64,
    /// Bytes of acknowledged writes sent again because the session that
    /// carried them failed before a flush covered them.
    pub resent_bytes: u64,
    /// Seconds a store had no working session (waiting to reconnect).
    pub outage_s: f64,
}

/// A report that cannot be read as this build's [`Report`].
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The bytes are not JSON.
    #[error("not a JSON report: {0}")]
    NotJson(serde_json::Error),
    /// The report has another schema version than [`SCHEMA_VERSION`].
    #[error(
        "report schema version {}, this build reads version {SCHEMA_VERSION}{}",
        .found.map_or("1 (no schema_version field)".to_string(), |v| v.to_string()),
        if .found.is_none_or(|v| v < u64::from(SCHEMA_VERSION)) {
            " (written by an older wanblk: run the copy again)"
        } else {
            " (written by a newer wanblk)"
        }
    )]
    Version {
        /// The `schema_version` found, if any.
        found: Option<u64>,
    },
    /// A field is missing or has the wrong type (serde's message names it).
    #[error("report does not match schema version {SCHEMA_VERSION}: {0}")]
    Fields(serde_json::Error),
}

impl Report {
    /// Reads a report as written by `wanblk copy --report`.
    ///
    /// # Errors
    /// [`ReportError`]: not JSON, another schema version, or a field
    /// missing or of the wrong type.
    pub fn from_json(bytes: &[u8]) -> Result<Report, ReportError> {
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(ReportError::NotJson)?;
        // Not an object: serde says what it is instead.
        if let Some(fields) = value.as_object() {
            match fields.get("schema_version").map(serde_json::Value::as_u64) {
                None => return Err(ReportError::Version { found: None }),
                Some(Some(v)) if v != u64::from(SCHEMA_VERSION) => {
                    return Err(ReportError::Version { found: Some(v) });
                }
                // This version, or not a number (a field of the wrong type, below).
                Some(_) => {}
            }
        }
        serde_json::from_value(value).map_err(ReportError::Fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_s: f64) -> Sample {
        Sample {
            t_s,
            n: 4,
            goodput_mbps: 800.0,
            completed_mbps: 790.0,
            from_tcp: true,
            fairness: Some(0.99),
            retransmits: 3,
            out_of_order: 0,
            duration_s: 0.5,
            rtt_ms: 100.0,
            discarded: false,
            partial: false,
            drain_wait_s: 0.0,
            connect_wait_s: 0.0,
            busy: Some(0.97),
            demand_limited: false,
            ending: false,
            standing_queue: Some(true),
            settled_mbps: Some(780.0),
            loss_cap_mbps: None,
            request_bytes: 1 << 20,
            depth: 8,
        }
    }

    fn report() -> Report {
        Report {
            schema_version: SCHEMA_VERSION,
            source: "nbd://a/x".into(),
            destination: "null:".into(),
            bytes: 1 << 30,
            seconds: 12.5,
            goodput_mbps: 687.2,
            data_bytes: 1 << 30,
            zero_bytes: 0,
            skipped_bytes: 0,
            connections: 4,
            requests: 8,
            request_size: 1 << 20,
            samples: vec![sample(0.5), sample(1.0)],
            stores: vec![StoreReport {
                name: "nbd://a/x".into(),
                session_bytes: vec![1 << 28, 1 << 28, 1 << 28, 1 << 28],
                failed_sessions: 0,
            }],
            sha256: None,
            complete: true,
            resumed_bytes: 0,
            interrupted: false,
            flushed: true,
            max_in_flight_bytes: 64 << 20,
            verify: None,
            faults: Faults { reconnects: 2, outage_s: 5.5, ..Faults::default() },
            journal: None,
            tuning: None,
            timing: Some(Timing {
                time_to_95pct_s: Some(1.2),
                time_to_final_n_s: None,
                capacity_mbps: Some(800.0),
                demand_limited_s: 0.0,
            }),
            progress: vec![ProgressPoint { t_s: 0.5, bytes: 1 << 20, from_tcp: true }],
            cpu_user_s: 1.0,
            cpu_system_s: 2.0,
            notes: vec!["a note".into()],
            error: None,
            share: ShareReport {
                mode: "fair".into(),
                fairness_median: Some(0.97),
                fairness_min: None,
                fairness_intervals: 2,
                sessions: Vec::new(),
                ceilings: Vec::new(),
                host_copies: 1,
                readings: Vec::new(),
            },
        }
    }

    fn json(r: &Report) -> serde_json::Value {
        serde_json::to_value(r).unwrap()
    }

    fn read(v: &serde_json::Value) -> Result<Report, ReportError> {
        Report::from_json(v.to_string().as_bytes())
    }

    #[test]
    fn round_trips() {
        let r = report();
        assert_eq!(read(&json(&r)).unwrap(), r);
        let r = Report { sha256: Some("ab".repeat(32)), error: Some("boom".into()), ..report() };
        assert_eq!(read(&json(&r)).unwrap(), r);
    }

    #[test]
    fn a_version_1_report_is_named_as_such() {
        let mut v = json(&report());
        v.as_object_mut().unwrap().remove("schema_version");
        let e = read(&v).unwrap_err().to_string();
        assert!(e.contains("version 1") && e.contains("older wanblk"), "{e}");
        v["schema_version"] = 3.into();
        let e = read(&v).unwrap_err().to_string();
        assert!(e.contains("version 3") && e.contains("older wanblk"), "{e}");
        v["schema_version"] = 4.into();
        let e = read(&v).unwrap_err().to_string();
        assert!(e.contains("version 4") && e.contains("older wanblk"), "{e}");
        v["schema_version"] = 6.into();
        let e = read(&v).unwrap_err().to_string();
        assert!(e.contains("version 6") && e.contains("newer wanblk"), "{e}");
    }

    #[test]
    fn a_missing_or_wrong_field_is_named() {
        for field in [
            "seconds",
            "data_bytes",
            "sha256",
            "tuning",
            "error",
            "stores",
            "timing",
            "progress",
            "faults",
            "verify",
            "journal",
            "share",
        ] {
            let mut v = json(&report());
            v.as_object_mut().unwrap().remove(field);
            let e = read(&v).unwrap_err().to_string();
            assert!(e.contains(&format!("missing field `{field}`")), "{field}: {e}");
        }
        let mut v = json(&report());
        v["samples"][1].as_object_mut().unwrap().remove("fairness");
        let e = read(&v).unwrap_err().to_string();
        assert!(e.contains("missing field `fairness`"), "{e}");
        let mut v = json(&report());
        v["stores"][0].as_object_mut().unwrap().remove("session_bytes");
        let e = read(&v).unwrap_err().to_string();
        assert!(e.contains("missing field `session_bytes`"), "{e}");
        let mut v = json(&report());
        v["timing"].as_object_mut().unwrap().remove("time_to_95pct_s");
        let e = read(&v).unwrap_err().to_string();
        assert!(e.contains("missing field `time_to_95pct_s`"), "{e}");
        let mut v = json(&report());
        v["goodput_mbps"] = "fast".into();
        let e = read(&v).unwrap_err().to_string();
        assert!(e.contains("invalid type") && e.contains("fast"), "{e}");
        let mut v = json(&report());
        v["schema_version"] = "3".into();
        assert!(read(&v).unwrap_err().to_string().contains("invalid type"));
    }

    #[test]
    fn garbage_is_not_json() {
        for bad in [&b""[..], b"{\"schema_version\": 2,", b"\xff\xfe", b"[1, 2]"] {
            let e = Report::from_json(bad).unwrap_err();
            assert!(!e.to_string().is_empty());
        }
        assert!(matches!(Report::from_json(b"{\"schema_version\": 2,"), Err(ReportError::NotJson(_))));
        // JSON, but not an object.
        let e = Report::from_json(b"[1, 2]").unwrap_err();
        assert!(matches!(e, ReportError::Fields(_)) && e.to_string().contains("invalid type"), "{e}");
    }

    #[test]
    fn unknown_fields_are_ignored_within_a_version() {
        let mut v = json(&report());
        v["added_later"] = 1.into();
        assert_eq!(read(&v).unwrap(), report());
    }
}
