//! The server closing with requests pending fails every one of them.

mod common;

use std::sync::Arc;

use common::hostile::*;
use common::*;
use wanblk_blockdev::{Endpoint, ErrorKind};

#[tokio::test]
async fn closing_mid_transfer_fails_all_pending_requests() {
    let server = hostile(true, |mut s| async move {
        // Take eight requests, answer none, hang up.
        for _ in 0..8 {
            read_request(&mut s).await;
        }
    })
    .await;
    let uri = server.uri.clone();
    let sess = Arc::new(connect(&uri).await);
    let tasks: Vec<_> = (0..8u64)
        .map(|i| {
            let s = sess.clone();
            tokio::spawn(async move { (i, s.read(i * 65536, 65536).await) })
        })
        .collect();
    for t in tasks {
        let (i, r) = within(10, t).await.unwrap();
        let e = r.unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Io(_)), "{e}");
        assert_eq!((e.endpoint.as_str(), e.offset), (uri.as_str(), Some(i * 65536)));
    }
    // Nothing hangs afterwards either.
    assert!(within(5, sess.read(0, 1)).await.is_err());
    within(5, sess.close()).await.unwrap();
    drop(sess);
    server.finish().await;
}
