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

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A writer like a TLS stream over a full socket: it takes a few bytes
    /// per call into its own buffer and hands them on ("sends") only when
    /// flushed.
    #[derive(Default)]
    struct Buffering {
        held: Vec<u8>,
        sent: Vec<u8>,
    }

    impl AsyncWrite for Buffering {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let n = buf.len().min(7);
            self.held.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            let held = std::mem::take(&mut self.held);
            self.sent.extend_from_slice(&held);
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            self.poll_flush(cx)
        }
    }

    #[tokio::test]
    async fn every_segment_is_sent_in_order_and_nothing_stays_held() {
        let mut w = Buffering::default();
        let data: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; usize::from(i % 13) + 1]).collect();
        let mut segs: Vec<Bytes> = data.iter().cloned().map(Bytes::from).collect();
        write_all_segments(&mut w, &mut segs).await.unwrap();
        assert!(segs.is_empty());
        assert_eq!(w.sent, data.concat(), "all bytes reach the peer, in order");
        assert!(
            w.held.is_empty(),
            "nothing is left in the writer's buffer (a TLS peer would wait for it forever)"
        );
    }
}
