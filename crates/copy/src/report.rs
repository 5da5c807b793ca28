//! The JSON report written by `wanblk copy --report FILE`.

use serde::Serialize;

/// One goodput measurement interval (`t_s`, `n`, `goodput_mbps` and more).
pub use wanblk_blockdev::control::IntervalSample as Sample;

/// Everything a finished (or failed) copy reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
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
    /// Requests in flight per session.
    pub requests: usize,
    /// Bytes per request.
    pub request_size: u32,
    /// Goodput per monitoring interval.
    pub samples: Vec<Sample>,
    /// sha256 of the image in offset order (holes hashed as zeroes), with `--verify`.
    pub sha256: Option<String>,
    /// Every byte was copied (false after `--stop-after` or an error).
    pub complete: bool,
    /// The tuner's record with `--connections auto`.
    pub tuning: Option<serde_json::Value>,
    /// CPU seconds this process spent in user mode during the copy.
    pub cpu_user_s: f64,
    /// CPU seconds this process spent in the kernel during the copy.
    pub cpu_system_s: f64,
    /// Adjustments and warnings.
    pub notes: Vec<String>,
    /// The error that stopped the copy, if it failed.
    pub error: Option<String>,
}
