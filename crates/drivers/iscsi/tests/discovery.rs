//! SendTargets discovery against tgtd lists every target with its portal.

mod common;

use common::{Tgt, within};
use wanblk_iscsi::IscsiConnector;

#[tokio::test]
async fn send_targets_lists_all_targets() {
    let tgt = Tgt::start();
    let a = tgt.file("a.img", 1 << 20);
    let b = tgt.file("b.img", 1 << 20);
    tgt.target(1, "iqn.2024-01.test:disc-a", &a, None, false);
    tgt.target(2, "iqn.2024-01.test:disc-b", &b, None, false);
    let c = IscsiConnector::parse(&tgt.uri("iqn.2024-01.test:disc-a")).unwrap();
    let found = within(30, c.discover()).await.unwrap();
    let names: Vec<&str> = found.iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"iqn.2024-01.test:disc-a") && names.contains(&"iqn.2024-01.test:disc-b"),
        "{found:?}"
    );
    let portal = format!("127.0.0.1:{},1", tgt.port);
    assert!(found.iter().all(|t| t.addresses.contains(&portal)), "{found:?}");
}
