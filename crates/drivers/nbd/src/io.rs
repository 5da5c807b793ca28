//! Socket helpers shared by the client and the server: writing queued
//! segments with vectored writes. (TCP options: `wanblk_sys::tcp::apply`.)

use std::io::IoSlice;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Most segments handed to one `writev`.
const MAX_IOV: usize = 64;

/// Writes every segment in order with vectored writes (no copying of
/// payloads), then flushes.
pub(crate) async fn write_all_segments<W: AsyncWrite + Unpin>(
    w: &mut W,
    segs: &mut Vec<Bytes>,
) -> std::io::Result<()> {
    let mut first = 0;
    while first < segs.len() {
        let n = {
            let slices: Vec<IoSlice<'_>> =
                segs[first..].iter().take(MAX_IOV).map(|b| IoSlice::new(b)).collect();
            w.write_vectored(&slices).await?
        };
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let mut left = n;
        while left > 0 {
            let seg = &mut segs[first];
            if seg.len() <= left {
                left -= seg.len();
                first += 1;
            } else {
                seg.advance(left);
                left = 0;
            }
        }
    }
    segs.clear();
    // TLS: a write the socket could not take whole leaves records in the
    // TLS session's buffer; without a flush the peer waits for them forever
    // (plain TCP: nothing to do).
    w.flush().await
}
