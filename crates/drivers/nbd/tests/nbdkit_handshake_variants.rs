//! nbdkit in the handshake variants a client meets: no structured replies,
//! plain (non-fixed) newstyle (EXPORT_NAME only), oldstyle, read-only.

mod common;

use bytes::Bytes;
use common::*;
use wanblk_blockdev::{Endpoint, ErrorKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_replies_with_nbdkit_no_sr() {
    let dir = wanblk_testkit::tempdir();
    let (_peer, uri) = nbdkit(dir.path(), &["--no-sr", "memory", "size=16M"]);
    let s = connect(&uri).await;
    assert!(!s.negotiated().structured_replies);
    assert!(!s.capabilities().can_block_status);
    within(30, exercise(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_name_with_plain_newstyle_nbdkit() {
    let dir = wanblk_testkit::tempdir();
    // Masking the handshake flags makes nbdkit a plain newstyle server: only
    // NBD_OPT_EXPORT_NAME may be used.
    let (_peer, uri) = nbdkit(dir.path(), &["--mask-handshake=0", "memory", "size=16M"]);
    let s = connect(&uri).await;
    assert!(s.negotiated().used_export_name);
    assert_eq!(s.size(), 16 << 20);
    within(30, exercise(&s)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oldstyle_nbdkit() {
    let dir = wanblk_testkit::tempdir();
    let (_peer, uri) = nbdkit(dir.path(), &["-o", "memory", "size=16M"]);
    let s = connect(&uri).await;
    assert!(s.negotiated().oldstyle);
    assert_eq!(s.size(), 16 << 20);
    // nbdkit 1.32 advertises FUA and FLUSH in oldstyle mode but then refuses
    // them with EINVAL (its own quirk), so this round trip avoids both.
    let data = pattern(1 << 20, 5);
    s.write(1 << 20, data.clone(), false).await.unwrap();
    assert_eq!(s.read(1 << 20, 1 << 20).await.unwrap(), data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_nbdkit_refuses_writes_locally() {
    let dir = wanblk_testkit::tempdir();
    let (_peer, uri) = nbdkit(dir.path(), &["-r", "memory", "size=16M"]);
    let s = connect(&uri).await;
    assert!(s.capabilities().read_only);
    let e = s.write(0, Bytes::from_static(b"x"), false).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Config(_)), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbdkit_block_size_filter_limits_are_honoured() {
    let dir = wanblk_testkit::tempdir();
    let (_peer, uri) = nbdkit(
        dir.path(),
        &[
            "--filter=blocksize-policy",
            "memory",
            "size=16M",
            "blocksize-minimum=512",
            "blocksize-preferred=4096",
            "blocksize-maximum=65536",
            "blocksize-error-policy=error",
        ],
    );
    let s = connect(&uri).await;
    let bs = s.capabilities().block_sizes;
    assert_eq!((bs.minimum, bs.preferred, bs.maximum), (512, 4096, 65536));
    let e = s.read(0, 131072).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Config(_)), "{e}");
    let e = s.read(1, 512).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Config(_)) && e.to_string().contains("aligned"), "{e}");
    s.write(512, pattern(65536, 1), false).await.unwrap();
    assert_eq!(s.read(512, 65536).await.unwrap(), pattern(65536, 1));
}
