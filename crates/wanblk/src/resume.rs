//! Resuming copies: where the journal lives, what identifies a copy, and
//! the command that resumes one.
//!
//! A copy to a regular file keeps its journal beside it
//! (`FILE.wanblk-journal`, next to `FILE.wanblk-part` for a new file);
//! `--state FILE` puts it anywhere, for any destination (network stores
//! and block devices included). Running the same command again finds the
//! journal, checks that source and destination are the ones it was
//! written for, and copies only what is missing.

use std::path::{Path, PathBuf};

use anyhow::Context;
use sha2::{Digest, Sha256};
use wanblk_blockdev::Endpoint;
use wanblk_copy::journal::{Decoded, sample_offsets};
use wanblk_copy::{Identity, Journal, StoreIdentity};

use crate::exit;
use crate::location::Location;

/// What the user asked about resuming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Resume if a matching journal exists, else start (the default).
    Auto,
    /// A journal must exist and match (`--resume`).
    Resume,
    /// Start over, discarding any journal (`--restart`).
    Restart,
}

/// The journal of a copy to `dst`: `--state` if given, else beside a
/// regular destination file; `None` when there is nowhere to keep one.
pub(crate) fn journal_path(dst: &Location, state: Option<&Path>) -> Option<PathBuf> {
    if let Some(s) = state {
        return Some(s.to_path_buf());
    }
    match dst {
        Location::File(p) => {
            let regular = match std::fs::metadata(p) {
                Ok(m) => m.is_file(),
                Err(_) => true, // a new file
            };
            regular.then(|| {
                let mut name = p.file_name().map(|n| n.to_os_string()).unwrap_or_default();
                name.push(".wanblk-journal");
                p.with_file_name(name)
            })
        }
        _ => None,
    }
}

/// sha256 (hex) of the blocks of `src` that [`sample_offsets`] names.
///
/// # Errors
/// A read fails.
pub(crate) async fn sample(src: &dyn Endpoint, bytes: u64) -> anyhow::Result<String> {
    let block = 64 << 10;
    let mut h = Sha256::new();
    for (o, l) in sample_offsets(bytes, block) {
        let b = src.read(o, l as u32).await.context("reading sample blocks to identify it for resuming")?;
        h.update(&b);
    }
    Ok(hex::encode(h.finalize()))
}

/// The identity of a copy of `bytes` bytes from `src` to the destination
/// `dst` (a store, or a new file not yet created).
pub(crate) async fn identity(src: &dyn Endpoint, bytes: u64, dst: StoreIdentity) -> anyhow::Result<Identity> {
    Ok(Identity {
        source: StoreIdentity { name: src.name().to_string(), size: src.size(), serial: src.serial() },
        destination: dst,
        bytes,
        sample_sha256: sample(src, bytes).await?,
    })
}

/// What to do about a journal, decided before the destination is opened.
pub(crate) enum Plan {
    /// No journal (nowhere to keep one).
    None,
    /// Start a new journal at this path (an old one is replaced).
    Fresh(PathBuf),
    /// Continue this journal.
    Resume(PathBuf, Decoded),
}

/// Decides between a fresh start and a resume for the copy `now`, with
/// the journal at `path`.
///
/// # Errors
/// A usage error ([`exit::USAGE`]) when `--resume` finds no journal, or the
/// journal was written for another copy or is not readable.
pub(crate) fn plan(path: Option<PathBuf>, mode: Mode, now: &Identity) -> anyhow::Result<Plan> {
    let Some(path) = path else {
        if mode == Mode::Resume {
            return Err(exit::usage(
                "--resume: this destination keeps no journal by itself; name one with --state FILE",
            ));
        }
        return Ok(Plan::None);
    };
    if mode == Mode::Restart {
        return Ok(Plan::Fresh(path));
    }
    let loaded = Journal::load(&path).map_err(|e| {
        exit::usage(format!("{e}; run with --restart to start over (or remove {})", path.display()))
    })?;
    match loaded {
        None if mode == Mode::Resume => {
            Err(exit::usage(format!("--resume: no journal at {}: nothing to resume", path.display())))
        }
        None => Ok(Plan::Fresh(path)),
        Some(d) => match d.identity.mismatch(now) {
            Some(why) => Err(exit::usage(format!(
                "journal {} was written for another copy ({why}); run with --restart to start over, or remove it",
                path.display()
            ))),
            None => Ok(Plan::Resume(path, d)),
        },
    }
}

/// Quotes `s` for a POSIX shell if it needs it.
fn quote(s: &str) -> String {
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain { s.to_string() } else { format!("'{}'", s.replace('\'', "'\\''")) }
}

/// The command that resumes this copy: the command line as given, without
/// `--restart` and `--stop-after`.
pub(crate) fn resume_command() -> String {
    let mut out = Vec::new();
    let mut args = std::env::args();
    let mut skip_value = false;
    if let Some(prog) = args.next() {
        out.push(quote(&prog));
    }
    for a in args {
        if skip_value {
            skip_value = false;
            continue;
        }
        if a == "--restart" || a.starts_with("--stop-after=") {
            continue;
        }
        if a == "--stop-after" {
            skip_value = true;
            continue;
        }
        out.push(quote(&a));
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote("nbd://h:10809/x"), "nbd://h:10809/x");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn journals_live_beside_files() {
        let p = journal_path(&Location::File("/tmp/nonexistent-dir/x.img".into()), None);
        assert_eq!(p, Some(PathBuf::from("/tmp/nonexistent-dir/x.img.wanblk-journal")));
        assert_eq!(journal_path(&Location::Null(None), None), None);
        assert_eq!(journal_path(&Location::Remote("nbd://h/x".into()), None), None);
        assert_eq!(
            journal_path(&Location::Remote("nbd://h/x".into()), Some(Path::new("/s"))),
            Some(PathBuf::from("/s"))
        );
        // A block device keeps none unless asked.
        if Path::new("/dev/null").exists() {
            assert_eq!(journal_path(&Location::File("/dev/null".into()), None), None);
        }
    }
}
