//! write_zeroes through WRITE SAME(16), trim and zeroing through UNMAP on
//! a thin-provisioned LUN (Logical Block Provisioning VPD page), flush.

mod common;

use common::{Tgt, file_bytes, pattern, within};
use wanblk_blockdev::Endpoint;
use wanblk_iscsi::IscsiConnector;

#[tokio::test]
async fn zeroes_on_a_thick_lun() {
    let tgt = Tgt::start();
    let file = tgt.file("lun.img", 8 << 20);
    tgt.target(1, "iqn.2024-01.test:thick", &file, None, false);
    let ep =
        within(30, IscsiConnector::parse(&tgt.uri("iqn.2024-01.test:thick")).unwrap().connect_endpoint())
            .await
            .unwrap();
    let caps = ep.capabilities();
    assert!(!caps.can_trim, "a thick LUN has no UNMAP");
    within(30, ep.write(0, pattern(1 << 20, 1), false)).await.unwrap();
    within(60, ep.write_zeroes(4096, 65536, true)).await.unwrap();
    within(30, ep.trim(0, 4096)).await.unwrap(); // advisory: a no-op here
    within(30, ep.flush()).await.unwrap();
    let back = within(30, ep.read(0, 1 << 20)).await.unwrap();
    let mut want = pattern(1 << 20, 1).to_vec();
    want[4096..4096 + 65536].fill(0);
    assert!(back[..] == want[..]);
    assert!(file_bytes(&file, 0, 1 << 20) == want);
    within(30, ep.close()).await.unwrap();
}

#[tokio::test]
async fn unmap_on_a_thin_lun() {
    let tgt = Tgt::start();
    let file = tgt.file("lun.img", 8 << 20);
    tgt.target(1, "iqn.2024-01.test:thin", &file, Some(4096), true);
    let ep = within(30, IscsiConnector::parse(&tgt.uri("iqn.2024-01.test:thin")).unwrap().connect_endpoint())
        .await
        .unwrap();
    assert!(ep.capabilities().can_trim, "thin LUN advertises UNMAP");
    within(30, ep.write(0, pattern(2 << 20, 2), false)).await.unwrap();
    within(30, ep.trim(0, 1 << 20)).await.unwrap();
    within(30, ep.write_zeroes(1 << 20, 1 << 20, true)).await.unwrap();
    let back = within(30, ep.read(0, 2 << 20)).await.unwrap();
    assert!(back[(1 << 20)..].iter().all(|&b| b == 0), "zeroed range reads as zeroes");
    assert!(file_bytes(&file, 1 << 20, 1 << 20).iter().all(|&b| b == 0));
    within(30, ep.close()).await.unwrap();
}
