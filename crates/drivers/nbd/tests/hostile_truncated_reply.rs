//! A reply cut short by the server closing is an I/O error for the request.

mod common;

use common::hostile::*;
use common::*;
use tokio::io::AsyncWriteExt;
use wanblk_blockdev::{Endpoint, ErrorKind};
use wanblk_nbd_proto::consts::{REPLY_FLAG_DONE, chunk};

#[tokio::test]
async fn truncated_reply_then_close_fails_the_request() {
    let server = hostile(true, |mut s| async move {
        let r = read_request(&mut s).await;
        let mut payload = r.offset.to_be_bytes().to_vec();
        payload.extend(vec![1u8; r.length as usize]);
        let full = chunk(REPLY_FLAG_DONE, chunk::OFFSET_DATA, r.cookie, &payload);
        s.write_all(&full[..full.len() / 2]).await.unwrap();
        // close with the reply half sent
    })
    .await;
    let uri = server.uri.clone();
    let sess = connect(&uri).await;
    let e = within(10, sess.read(65536, 65536)).await.unwrap_err();
    match &e.kind {
        ErrorKind::Io(m) => assert!(m.contains("closed"), "{e}"),
        k => panic!("{k:?}"),
    }
    assert_eq!((e.endpoint.as_str(), e.offset), (uri.as_str(), Some(65536)));
    drop(sess);
    server.finish().await;
}
