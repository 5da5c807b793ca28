//! A reply with a bad magic fails the request with a protocol error.

mod common;

use common::hostile::*;
use common::*;
use tokio::io::AsyncWriteExt;
use wanblk_blockdev::{Endpoint, ErrorKind};

#[tokio::test]
async fn bad_reply_magic_is_a_protocol_error() {
    let server = hostile(true, |mut s| async move {
        let r = read_request(&mut s).await;
        let mut reply = simple(r.cookie, 0);
        reply[0] ^= 0xff;
        s.write_all(&reply).await.unwrap();
        linger(s).await;
    })
    .await;
    let uri = server.uri.clone();
    let sess = connect(&uri).await;
    let e = within(10, sess.write(12288, bytes::Bytes::from_static(b"hello"), false)).await.unwrap_err();
    match &e.kind {
        ErrorKind::Protocol(m) => assert!(m.contains("magic"), "{e}"),
        k => panic!("{k:?}"),
    }
    assert_eq!((e.endpoint.as_str(), e.offset), (uri.as_str(), Some(12288)));
    // The session is dead: later requests fail at once with the same cause.
    let e2 = within(5, sess.read(0, 1)).await.unwrap_err();
    assert!(matches!(e2.kind, ErrorKind::Protocol(_)) && e2.offset == Some(0), "{e2}");
    drop(sess);
    server.finish().await;
}
