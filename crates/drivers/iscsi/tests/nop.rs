//! tgtd pings idle connections with NOP-In (nop_interval) and drops those
//! that do not answer (nop_count); the initiator answers, so a connection
//! idle for several intervals still works.

mod common;

use common::{Tgt, pattern, within};
use wanblk_blockdev::Endpoint;
use wanblk_iscsi::IscsiConnector;

#[tokio::test]
async fn target_pings_are_answered() {
    let tgt = Tgt::start();
    let file = tgt.file("lun.img", 4 << 20);
    tgt.target(1, "iqn.2024-01.test:nop", &file, None, false);
    tgt.set(1, "nop_interval", "1");
    tgt.set(1, "nop_count", "2");
    let ep = within(30, IscsiConnector::parse(&tgt.uri("iqn.2024-01.test:nop")).unwrap().connect_endpoint())
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let d = pattern(65536, 8);
    within(30, ep.write(0, d.clone(), false)).await.unwrap();
    assert!(within(30, ep.read(0, 65536)).await.unwrap() == d);
    within(30, ep.close()).await.unwrap();
}
