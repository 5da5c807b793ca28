//! A reply with a cookie that was never sent fails pending requests.

mod common;

use common::hostile::*;
use common::*;
use tokio::io::AsyncWriteExt;
use wanblk_blockdev::{Endpoint, ErrorKind};

#[tokio::test]
async fn unknown_cookie_is_a_protocol_error() {
    let server = hostile(true, |mut s| async move {
        let r = read_request(&mut s).await;
        s.write_all(&simple(r.cookie ^ 0xdead_0000, 0)).await.unwrap();
        linger(s).await;
    })
    .await;
    let uri = server.uri.clone();
    let sess = connect(&uri).await;
    let e = within(10, sess.flush()).await.unwrap_err();
    match &e.kind {
        ErrorKind::Protocol(m) => assert!(m.contains("unknown cookie"), "{e}"),
        k => panic!("{k:?}"),
    }
    assert_eq!(e.endpoint, uri);
    drop(sess);
    server.finish().await;
}
