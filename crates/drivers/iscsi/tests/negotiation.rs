//! Long-fat-network negotiation: against tgt's defaults the initiator gets
//! what tgt allows; with tgt's limits raised it gets InitialR2T=No,
//! ImmediateData=Yes and 16 MiB bursts; `--iscsi-param` overrides win.

mod common;

use common::{Tgt, pattern, within};
use wanblk_blockdev::Endpoint;
use wanblk_iscsi::{IscsiConnector, IscsiOptions};

#[tokio::test]
async fn tgt_defaults_then_raised_then_overridden() {
    let tgt = Tgt::start();
    let file = tgt.file("lun.img", 16 << 20);
    tgt.target(1, "iqn.2024-01.test:neg", &file, None, false);
    let uri = tgt.uri("iqn.2024-01.test:neg");

    let ep = within(30, IscsiConnector::parse(&uri).unwrap().connect_endpoint()).await.unwrap();
    let p = ep.params();
    assert!(p.initial_r2t, "tgt default InitialR2T=Yes wins (OR): {p:?}");
    assert!(p.immediate_data);
    assert_eq!((p.first_burst, p.max_burst, p.max_outstanding_r2t), (65536, 262144, 1));
    assert_eq!(p.max_send_data_segment, 8192, "tgt's own MaxRecvDataSegmentLength");
    assert_eq!(p.max_recv_data_segment, wanblk_iscsi_proto::keys::DEFAULT_RECV_SEGMENT, "ours, declared");
    // Writes larger than the first burst go through R2Ts.
    let d = pattern(4 << 20, 3);
    within(30, ep.write(0, d.clone(), false)).await.unwrap();
    assert!(within(30, ep.read(0, 4 << 20)).await.unwrap() == d);
    within(30, ep.close()).await.unwrap();

    tgt.lfn(1);
    let ep = within(30, IscsiConnector::parse(&uri).unwrap().connect_endpoint()).await.unwrap();
    let p = ep.params();
    assert!(!p.initial_r2t && p.immediate_data, "{p:?}");
    assert_eq!((p.first_burst, p.max_burst, p.max_outstanding_r2t), (16_777_215, 16_777_215, 16));
    assert_eq!(p.max_send_data_segment, 16_777_215);
    assert_eq!(ep.max_request_bytes(), 4 << 20);
    let d = pattern(8 << 20, 4);
    within(30, ep.write(4 << 20, d.clone(), true)).await.unwrap();
    assert!(within(30, ep.read(4 << 20, 8 << 20)).await.unwrap() == d);
    within(30, ep.close()).await.unwrap();

    let params = vec![
        ("MaxBurstLength".to_string(), "65536".to_string()),
        ("FirstBurstLength".to_string(), "8192".to_string()),
        ("InitialR2T".to_string(), "Yes".to_string()),
        ("MaxRecvDataSegmentLength".to_string(), "65536".to_string()),
    ];
    let c =
        IscsiConnector::new(&uri, IscsiOptions { params, max_request_bytes: 1 << 20, ..Default::default() })
            .unwrap();
    let ep = within(30, c.connect_endpoint()).await.unwrap();
    let p = ep.params();
    assert!(p.initial_r2t);
    assert_eq!((p.first_burst, p.max_burst, p.max_recv_data_segment), (8192, 65536, 65536));
    assert_eq!(ep.max_request_bytes(), 1 << 20);
    let d = pattern(3 << 20, 5);
    within(30, ep.write(0, d.clone(), false)).await.unwrap();
    assert!(within(30, ep.read(0, 3 << 20)).await.unwrap() == d);
    within(30, ep.close()).await.unwrap();
}
