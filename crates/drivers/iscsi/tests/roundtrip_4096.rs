//! A LUN of 4096-byte blocks: block size from READ CAPACITY(16), unaligned
//! requests refused with a configuration error, aligned ones round trip.

mod common;

use common::{Tgt, file_bytes, pattern, within};
use wanblk_blockdev::{Endpoint, ErrorKind};
use wanblk_iscsi::IscsiConnector;

#[tokio::test]
async fn round_trip_4096_byte_blocks() {
    let tgt = Tgt::start();
    let file = tgt.file("lun.img", 32 << 20);
    tgt.target(1, "iqn.2024-01.test:rt4k", &file, Some(4096), false);
    let c = IscsiConnector::parse(&tgt.uri("iqn.2024-01.test:rt4k")).unwrap();
    let ep = within(30, c.connect_endpoint()).await.unwrap();
    assert_eq!(ep.block_len(), 4096);
    assert_eq!(ep.size(), 32 << 20);
    for (off, len) in [(512u64, 4096u32), (0, 512), (4096, 6144)] {
        let e = ep.read(off, len).await.unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Config(_)), "{e}");
        assert_eq!(e.offset, Some(off));
        assert!(e.to_string().contains("iscsi://127.0.0.1"), "{e}");
    }
    let e = ep.write(32 << 20, pattern(4096, 0), false).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Config(_)), "beyond the end: {e}");
    let data = pattern(3 << 20, 9);
    within(30, ep.write(8192, data.clone(), true)).await.unwrap();
    assert!(within(30, ep.read(8192, 3 << 20)).await.unwrap() == data);
    assert!(file_bytes(&file, 8192, 3 << 20) == data[..]);
    within(30, ep.close()).await.unwrap();
}
