//! A server answering a large read with one-byte chunks: the client stops
//! it at the chunk bound (memory stays proportional to the request, not one
//! map entry per byte) with a protocol error naming the bound, and the
//! session closes, so the server's writes fail.

mod common;

use common::hostile::*;
use common::*;
use tokio::io::AsyncWriteExt;
use wanblk_blockdev::{Endpoint, ErrorKind};
use wanblk_nbd_proto::client::max_reply_chunks;
use wanblk_nbd_proto::consts::chunk;

/// The largest request the hostile server allows.
const LEN: u32 = 1 << 20;
/// Chunks the server tries to send: far more than the bound, and than
/// socket buffers hold (about 40 MiB of chunks).
const TRIES: u32 = 1 << 21;

#[tokio::test]
async fn one_byte_chunks_stop_at_the_bound() {
    let max = max_reply_chunks(LEN);
    let (sent_tx, sent_rx) = tokio::sync::oneshot::channel();
    let server = hostile(true, move |mut s| async move {
        let r = read_request(&mut s).await;
        assert_eq!(r.length, LEN);
        // One byte at offsets that never touch (no two chunks merge), never
        // DONE, until the client hangs up.
        let mut sent = 0u32;
        'send: for batch in 0..TRIES / 1024 {
            let mut buf = Vec::with_capacity(1024 * 21);
            for i in 0..1024 {
                let off = r.offset + u64::from(batch * 1024 + i) % u64::from(LEN / 2) * 2;
                let mut payload = off.to_be_bytes().to_vec();
                payload.push(0xA5);
                buf.extend(chunk(0, chunk::OFFSET_DATA, r.cookie, &payload));
            }
            if s.write_all(&buf).await.is_err() {
                break 'send;
            }
            sent += 1024;
        }
        let _ = sent_tx.send(sent);
        linger(s).await;
    })
    .await;
    let uri = server.uri.clone();
    let sess = connect(&uri).await;
    let e = within(30, sess.read(0, LEN)).await.unwrap_err();
    match &e.kind {
        ErrorKind::Protocol(m) => {
            assert!(m.contains(&format!("more than {max} chunks")), "{e}");
        }
        k => panic!("{k:?}"),
    }
    assert_eq!((e.endpoint.as_str(), e.offset), (uri.as_str(), Some(0)));
    drop(sess);
    // The client hung up: the server could not send all it wanted.
    let sent = within(30, sent_rx).await.unwrap();
    assert!(sent < TRIES, "the server sent all {sent} chunks: the client kept reading");
    server.finish().await;
}
