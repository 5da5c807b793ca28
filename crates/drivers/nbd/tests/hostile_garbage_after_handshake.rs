//! Garbage right after the handshake fails the session with a protocol error.

mod common;

use common::hostile::*;
use common::*;
use tokio::io::AsyncWriteExt;
use wanblk_blockdev::{Endpoint, ErrorKind};

#[tokio::test]
async fn garbage_after_the_handshake_is_a_protocol_error() {
    let server = hostile(true, |mut s| async move {
        s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await.unwrap();
        linger(s).await;
    })
    .await;
    let uri = server.uri.clone();
    let sess = connect(&uri).await;
    let e = within(10, sess.read(8192, 4096)).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Protocol(_)), "{e}");
    assert_eq!(e.endpoint, uri);
    assert_eq!(e.offset, Some(8192));
    drop(sess);
    server.finish().await;
}
