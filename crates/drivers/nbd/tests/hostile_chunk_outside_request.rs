//! A structured read chunk outside the request is a protocol error.

mod common;

use common::hostile::*;
use common::*;
use tokio::io::AsyncWriteExt;
use wanblk_blockdev::{Endpoint, ErrorKind};
use wanblk_nbd_proto::consts::{REPLY_FLAG_DONE, chunk};

#[tokio::test]
async fn chunk_outside_the_request_is_a_protocol_error() {
    let server = hostile(true, |mut s| async move {
        let r = read_request(&mut s).await;
        let mut payload = (r.offset + 4096).to_be_bytes().to_vec();
        payload.extend(vec![1u8; r.length as usize]);
        s.write_all(&chunk(REPLY_FLAG_DONE, chunk::OFFSET_DATA, r.cookie, &payload)).await.unwrap();
        linger(s).await;
    })
    .await;
    let uri = server.uri.clone();
    let sess = connect(&uri).await;
    let e = within(10, sess.read(1 << 20, 8192)).await.unwrap_err();
    match &e.kind {
        ErrorKind::Protocol(m) => assert!(m.contains("outside the request"), "{e}"),
        k => panic!("{k:?}"),
    }
    assert_eq!((e.endpoint.as_str(), e.offset), (uri.as_str(), Some(1 << 20)));
    drop(sess);
    server.finish().await;
}
