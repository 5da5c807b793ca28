//! The copy engine behind `wanblk copy`: moves a whole image from one
//! [`Endpoint`](wanblk_blockdev::Endpoint) to another, and survives
//! interruptions.
//!
//! - [`engine`]: keeps every session slot busy with pieces, tracks the
//!   contiguous frontier of finished bytes, hashes the image in offset
//!   order (`checksum`), checkpoints completed ranges into the journal
//!   (flush first), stops cleanly when asked, flushes at the end.
//! - `plan`: the source cut into data, zero and already-copied pieces
//!   (block status, the journal).
//! - [`journal`]: the resume journal, an append-only log of checksummed
//!   records of completed, flushed ranges, with the copy's identity.
//! - [`ranges`]: sets of byte ranges.
//! - `verify`: the read-back of the destination after the copy.
//! - [`progress`]: the terminal progress bar (completed bytes, rate, ETA,
//!   active sessions, what went wrong).
//! - [`report`]: the JSON report.
//! - [`rate`]: `--rate`, when each piece may start.
//! - [`stream`]: a source that can only be read once, in order (standard
//!   input), copied piece by piece as it arrives.
//!
//! The engine knows nothing of protocols or sessions: parallelism comes
//! from the endpoints (a [`Pool`](wanblk_blockdev::pool::Pool) carries
//! pieces over N sessions, and reconnects) and the `slots` callback that
//! says how many requests they can take.

pub mod engine;
pub mod journal;
mod plan;
pub mod progress;
pub mod ranges;
pub mod rate;
pub mod report;
pub mod stream;
#[cfg(test)]
mod testing;
mod verify;

pub use engine::{Control, CopyError, CopyOptions, CopyOutcome, Progress, copy};
pub use journal::{Identity, Journal, JournalError, StoreIdentity};
pub use plan::read_piece_bytes;
pub use ranges::RangeSet;
pub use rate::RateLimit;
pub use report::{Faults, Report, ReportError, Sample, StoreReport, TuningReport};
pub use stream::copy_from_stream;
pub use verify::VerifyOutcome;
