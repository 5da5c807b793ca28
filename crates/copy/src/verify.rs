//! `--verify`: after the copy and its flush, the destination is read back
//! (in parallel, through the same pools) and compared piece by piece with
//! what was read from the source while copying: a sha256 per data piece,
//! zeroes for zero pieces. Ranges an earlier run copied (resumed) were not
//! read this time: they are compared with a fresh read of the source.
//!
//! A mismatch names the first bad byte: the piece that differs is read
//! again from the source and compared byte by byte.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::task::JoinSet;
use wanblk_blockdev::{Endpoint, EndpointError};

/// What a piece of the destination must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Data with this sha256.
    Sha256([u8; 32]),
    /// Zeroes.
    Zero,
    /// The same bytes as the source (not read during this copy).
    Source,
}

/// What verification found.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct VerifyOutcome {
    /// Bytes of the destination read back and compared.
    pub checked_bytes: u64,
    /// The lowest offset where the destination differs from the source
    /// (`None`: it does not).
    #[serde(deserialize_with = "Option::deserialize")]
    pub first_bad_offset: Option<u64>,
    /// Seconds the read-back took.
    pub seconds: f64,
}

pub(crate) fn digest(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

/// Index of the first byte where `a` and `b` differ (the shorter length if
/// one is a prefix of the other).
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y).or((a.len() != b.len()).then(|| a.len().min(b.len())))
}

async fn read_all(
    ep: &dyn Endpoint,
    offset: u64,
    len: u64,
    request: u64,
) -> Result<Vec<Bytes>, EndpointError> {
    let mut parts = Vec::new();
    let mut pos = offset;
    while pos < offset + len {
        let n = (offset + len - pos).min(request);
        parts.push(ep.read(pos, n as u32).await?);
        pos += n;
    }
    Ok(parts)
}

/// Checks one piece; returns the first bad offset in it, if any.
async fn check_piece(
    src: Arc<dyn Endpoint>,
    dst: Arc<dyn Endpoint>,
    offset: u64,
    len: u64,
    check: Check,
    request: u64,
) -> Result<Option<u64>, EndpointError> {
    let got = read_all(&*dst, offset, len, request).await?;
    let bad_at = |i: usize| Some(offset + i as u64);
    match check {
        Check::Zero => {
            let mut pos = 0usize;
            for p in &got {
                if let Some(i) = p.iter().position(|b| *b != 0) {
                    return Ok(bad_at(pos + i));
                }
                pos += p.len();
            }
            Ok(None)
        }
        Check::Sha256(want) => {
            let mut h = Sha256::new();
            for p in &got {
                h.update(p);
            }
            if <[u8; 32]>::from(h.finalize()) == want {
                return Ok(None);
            }
            // Find the byte: compare with the source read again.
            let fresh = read_all(&*src, offset, len, request).await?;
            let (a, b) = (got.concat(), fresh.concat());
            Ok(Some(first_difference(&a, &b).map_or(offset, |i| offset + i as u64)))
        }
        Check::Source => {
            let fresh = read_all(&*src, offset, len, request).await?;
            let (a, b) = (got.concat(), fresh.concat());
            Ok(first_difference(&a, &b).and_then(bad_at))
        }
    }
}

/// Reads back every piece in `checks` (offset -> (length, check)) from
/// `dst`, `parallel` pieces at a time, in offset order, and stops issuing
/// once a mismatch is found (pieces before it still finish, so the lowest
/// bad offset is reported).
///
/// # Errors
/// A read that fails.
pub(crate) async fn verify(
    src: Arc<dyn Endpoint>,
    dst: Arc<dyn Endpoint>,
    checks: &BTreeMap<u64, (u64, Check)>,
    request: u64,
    parallel: impl Fn() -> usize,
) -> Result<VerifyOutcome, EndpointError> {
    let started = Instant::now();
    let mut tasks: JoinSet<(u64, Result<Option<u64>, EndpointError>)> = JoinSet::new();
    let mut pieces = checks.iter();
    let mut checked = 0u64;
    let mut first_bad: Option<u64> = None;
    let mut exhausted = false;
    loop {
        while !exhausted && first_bad.is_none() && tasks.len() < parallel().max(1) {
            match pieces.next() {
                Some((&offset, &(len, check))) => {
                    let (s, d) = (Arc::clone(&src), Arc::clone(&dst));
                    tasks.spawn(async move { (len, check_piece(s, d, offset, len, check, request).await) });
                }
                None => exhausted = true,
            }
        }
        let Some(joined) = tasks.join_next().await else { break };
        let (len, r) =
            joined.map_err(|e| EndpointError::io(dst.name(), None, format!("verify task failed: {e}")))?;
        match r {
            Ok(None) => checked += len,
            Ok(Some(bad)) => {
                checked += len;
                first_bad = Some(first_bad.map_or(bad, |b| b.min(bad)));
            }
            Err(e) => {
                tasks.abort_all();
                return Err(e);
            }
        }
    }
    Ok(VerifyOutcome {
        checked_bytes: checked,
        first_bad_offset: first_bad,
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_difference_finds_the_byte() {
        assert_eq!(first_difference(b"abc", b"abc"), None);
        assert_eq!(first_difference(b"abc", b"abd"), Some(2));
        assert_eq!(first_difference(b"ab", b"abc"), Some(2));
    }
}
