//! Login failures are clear errors naming the endpoint: an unknown target
//! IQN, nothing listening, a bad URI, a bad `--iscsi-param`.

mod common;

use common::{Tgt, within};
use wanblk_blockdev::{Connector, ErrorKind};
use wanblk_iscsi::{IscsiConnector, IscsiOptions};

#[tokio::test]
async fn unknown_target_iqn() {
    let tgt = Tgt::start();
    let file = tgt.file("lun.img", 1 << 20);
    tgt.target(1, "iqn.2024-01.test:exists", &file, None, false);
    let c = IscsiConnector::parse(&tgt.uri("iqn.2024-01.test:missing")).unwrap();
    let e = within(30, c.connect()).await.err().unwrap();
    assert!(matches!(e.kind, ErrorKind::Server { code: 0x0203, .. }), "{e}");
    assert!(e.to_string().contains("target not found"), "{e}");
    assert!(e.endpoint.contains("iqn.2024-01.test:missing"), "{e}");
}

#[tokio::test]
async fn nothing_listening() {
    let port = wanblk_testkit::free_port();
    let c = IscsiConnector::parse(&format!("iscsi://127.0.0.1:{port}/iqn.2024-01.test:x/1")).unwrap();
    let e = within(30, c.connect()).await.err().unwrap();
    assert!(matches!(e.kind, ErrorKind::Io(_)), "{e}");
}

#[test]
fn bad_uris_and_params() {
    for (uri, what) in [
        ("iscsi://h/iqn.x", "LUN"),
        ("iscsi://h:99999/iqn.x/1", "port"),
        ("http://h/iqn.x/1", "not an iSCSI URI"),
        ("iscsi://u%topsecret@/iqn.x/1", "host"),
    ] {
        let e = IscsiConnector::parse(uri).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Config(_)), "{uri}: {e}");
        assert!(e.to_string().contains(what), "{uri}: {e}");
        assert!(!e.to_string().contains("topsecret"), "{e}");
    }
    let params = vec![("MaxBurstLength".to_string(), "12".to_string())];
    let e =
        IscsiConnector::new("iscsi://h/iqn.x/1", IscsiOptions { params, ..Default::default() }).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Config(_)), "{e}");
    assert!(e.to_string().contains("MaxBurstLength"), "{e}");
}
