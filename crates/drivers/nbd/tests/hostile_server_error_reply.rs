//! Server error replies (simple and structured) become `ErrorKind::Server`
//! with the NBD error number, and the session stays usable.

mod common;

use common::hostile::*;
use common::*;
use tokio::io::AsyncWriteExt;
use wanblk_blockdev::{Endpoint, ErrorKind};
use wanblk_nbd_proto::Codec;
use wanblk_nbd_proto::consts::{REPLY_FLAG_DONE, chunk};
use wanblk_nbd_proto::wire::ErrorChunk;

#[tokio::test]
async fn error_replies_are_server_errors() {
    let server = hostile(true, |mut s| async move {
        let r = read_request(&mut s).await;
        let e = ErrorChunk { error: 28, message: "full".into() }.to_bytes();
        s.write_all(&chunk(REPLY_FLAG_DONE, chunk::ERROR, r.cookie, &e)).await.unwrap();
        let r = read_request(&mut s).await;
        s.write_all(&simple(r.cookie, 5)).await.unwrap();
        let r = read_request(&mut s).await;
        s.write_all(&simple(r.cookie, 0)).await.unwrap();
        linger(s).await;
    })
    .await;
    let uri = server.uri.clone();
    let sess = connect(&uri).await;
    let e = within(10, sess.write(4096, bytes::Bytes::from_static(b"abc"), false)).await.unwrap_err();
    assert!(
        matches!(&e.kind, ErrorKind::Server { code: 28, message, transient: false } if message.contains("full")),
        "{e}"
    );
    assert_eq!(e.offset, Some(4096));
    let e = within(10, sess.write(8192, bytes::Bytes::from_static(b"abc"), false)).await.unwrap_err();
    assert!(matches!(&e.kind, ErrorKind::Server { code: 5, .. }), "{e}");
    within(10, sess.flush()).await.unwrap();
    drop(sess);
    server.finish().await;
}
