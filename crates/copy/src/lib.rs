//! The copy engine behind `wanblk copy`: moves a whole image from one
//! [`Endpoint`](wanblk_blockdev::Endpoint) to another.
//!
//! - [`engine`]: plans the source into data and zero pieces (block status,
//!   all-zero detection), keeps every session slot busy, tracks the
//!   contiguous frontier of finished bytes, and hashes the image in offset
//!   order when asked.
//! - [`progress`]: the terminal progress bar (completed bytes, rate, ETA,
//!   active sessions).
//! - [`report`]: the JSON report.
//! - [`rate`]: `--rate`, when each piece may start.
//! - [`stream`]: a source that can only be read once, in order (standard
//!   input), copied piece by piece as it arrives.
//!
//! The engine knows nothing of protocols or sessions: parallelism comes
//! from the endpoints (a [`Pool`](wanblk_blockdev::pool::Pool) carries
//! pieces over N sessions) and the `slots` callback that says how many
//! requests they can take.

pub mod engine;
pub mod progress;
pub mod rate;
pub mod report;
pub mod stream;

pub use engine::{CopyError, CopyOptions, CopyOutcome, Progress, copy};
pub use rate::RateLimit;
pub use report::{Report, ReportError, Sample, StoreReport, TuningReport};
pub use stream::copy_from_stream;
