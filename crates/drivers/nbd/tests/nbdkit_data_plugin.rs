//! Reads of a known pattern from nbdkit's data plugin, byte for byte.

mod common;

use common::*;
use wanblk_blockdev::Endpoint;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_nbdkit_data_plugin_byte_for_byte() {
    let dir = wanblk_testkit::tempdir();
    // bytes 1 2 3 at 0, 4 5 at 4096, 0xff at 1 MiB - 1; the rest zero.
    let (_peer, uri) = nbdkit(dir.path(), &["data", "1 2 3 @4096 4 5 @1048575 255", "size=1M"]);
    let s = connect(&uri).await;
    assert_eq!(s.size(), 1 << 20);
    let d = s.read(0, 1 << 20).await.unwrap();
    let mut want = vec![0u8; 1 << 20];
    want[..3].copy_from_slice(&[1, 2, 3]);
    want[4096..4098].copy_from_slice(&[4, 5]);
    want[(1 << 20) - 1] = 255;
    assert!(d == want, "data differs");
    // unaligned reads
    assert_eq!(&s.read(1, 2).await.unwrap()[..], &[2, 3]);
    assert_eq!(&s.read(4095, 4).await.unwrap()[..], &[0, 4, 5, 0]);
}
