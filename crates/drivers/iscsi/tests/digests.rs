//! CRC32C header and data digests negotiated through `--iscsi-param`
//! overrides; data round trips with both on.

mod common;

use common::{Tgt, file_bytes, pattern, within};
use wanblk_blockdev::Endpoint;
use wanblk_iscsi::{IscsiConnector, IscsiOptions};

#[tokio::test]
async fn header_and_data_digests() {
    let tgt = Tgt::start();
    let file = tgt.file("lun.img", 16 << 20);
    tgt.target(1, "iqn.2024-01.test:dg", &file, None, false);
    tgt.lfn(1);
    // tgt answers None to an offer of CRC32C unless its own setting allows it.
    tgt.set(1, "HeaderDigest", "CRC32C");
    tgt.set(1, "DataDigest", "CRC32C");
    let params = vec![
        ("HeaderDigest".to_string(), "CRC32C".to_string()),
        ("DataDigest".to_string(), "CRC32C".to_string()),
    ];
    let c =
        IscsiConnector::new(&tgt.uri("iqn.2024-01.test:dg"), IscsiOptions { params, ..Default::default() })
            .unwrap();
    let ep = within(30, c.connect_endpoint()).await.unwrap();
    let p = ep.params();
    assert!(p.header_digest && p.data_digest, "{p:?}");
    // Odd sizes exercise the padding before the data digest.
    for (off, len) in [(0u64, 512usize), (4096, 5 << 20), (12 << 20, 1536)] {
        let d = pattern(len, off);
        within(30, ep.write(off, d.clone(), false)).await.unwrap();
        assert!(within(30, ep.read(off, len as u32)).await.unwrap() == d);
        assert!(file_bytes(&file, off, len) == d[..]);
    }
    within(30, ep.close()).await.unwrap();
}
