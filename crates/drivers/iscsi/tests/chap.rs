//! CHAP (MD5): the initiator answers the target's challenge with the secret
//! from the URI; a wrong secret is a clear login error, not a hang.

mod common;

use common::{Tgt, pattern, within};
use wanblk_blockdev::{Connector, Endpoint, ErrorKind};
use wanblk_iscsi::IscsiConnector;

#[tokio::test]
async fn chap_success_and_wrong_secret() {
    let tgt = Tgt::start();
    let file = tgt.file("lun.img", 8 << 20);
    tgt.target(1, "iqn.2024-01.test:chap", &file, None, false);
    tgt.chap(1, "alice", "s3cret-passw0rd");
    let good = format!("iscsi://alice%s3cret-passw0rd@127.0.0.1:{}/iqn.2024-01.test:chap/1", tgt.port);
    let c = IscsiConnector::parse(&good).unwrap();
    assert!(!c.name().contains("s3cret"), "secret in the name: {}", c.name());
    let ep = within(30, c.connect_endpoint()).await.unwrap();
    assert!(!ep.name().contains("s3cret"));
    let d = pattern(8192, 1);
    within(30, ep.write(0, d.clone(), false)).await.unwrap();
    assert!(within(30, ep.read(0, 8192)).await.unwrap() == d);
    within(30, ep.close()).await.unwrap();

    let bad = format!("iscsi://alice%wrong-password@127.0.0.1:{}/iqn.2024-01.test:chap/1", tgt.port);
    let c = IscsiConnector::parse(&bad).unwrap();
    let e = within(30, c.connect()).await.err().expect("wrong secret must fail");
    assert!(matches!(e.kind, ErrorKind::Server { code: 0x0201, .. }), "{e}");
    assert!(e.to_string().contains("authentication failed"), "{e}");
    assert!(!e.to_string().contains("wrong-password"), "{e}");

    // No credentials at all for a target that requires them.
    let none = IscsiConnector::parse(&tgt.uri("iqn.2024-01.test:chap")).unwrap();
    let e = within(30, none.connect()).await.err().expect("no credentials must fail");
    assert!(matches!(e.kind, ErrorKind::Server { code: 0x0201, .. }), "{e}");
}
