//! One session to a LUN of 512-byte blocks: writes at several offsets and
//! sizes (one block up to several 4 MiB commands) read back and match the
//! backing file byte for byte.

mod common;

use common::{Tgt, file_bytes, pattern, within};
use wanblk_blockdev::Endpoint;
use wanblk_iscsi::IscsiConnector;

#[tokio::test]
async fn round_trip_512_byte_blocks() {
    let tgt = Tgt::start();
    let file = tgt.file("lun.img", 64 << 20);
    tgt.target(1, "iqn.2024-01.test:rt512", &file, None, false);
    let c = IscsiConnector::parse(&tgt.uri("iqn.2024-01.test:rt512")).unwrap();
    let ep = within(30, c.connect_endpoint()).await.unwrap();
    assert_eq!(ep.size(), 64 << 20);
    assert_eq!(ep.block_len(), 512);
    assert_eq!(ep.capabilities().block_sizes.minimum, 512);
    for (i, (off, len)) in [
        (0u64, 512usize),
        (512, 4096),
        (1 << 20, 4 << 20),
        (7 << 20, (9 << 20) + 512),
        ((64 << 20) - 1024, 1024),
    ]
    .into_iter()
    .enumerate()
    {
        let data = pattern(len, i as u64);
        within(30, ep.write(off, data.clone(), false)).await.unwrap();
        let back = within(30, ep.read(off, len as u32)).await.unwrap();
        assert!(back == data, "read back differs at {off}+{len}");
    }
    within(30, ep.flush()).await.unwrap();
    let info = ep.tcp_info();
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].state, 1, "ESTABLISHED");
    assert!(info[0].bytes_acked > 8 << 20, "{:?}", info[0]);
    // Byte for byte against the backing file.
    let data = pattern(4 << 20, 2);
    assert!(file_bytes(&file, 1 << 20, 4 << 20) == data[..]);
    within(30, ep.close()).await.unwrap();
    assert!(ep.read(0, 512).await.is_err(), "closed endpoint must refuse I/O");
}
