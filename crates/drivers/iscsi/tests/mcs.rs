//! Multiple connections per session: the first connect logs in the leading
//! connection, three more join the same session (same ISID and TSIH, new
//! CIDs); all four write and read concurrently with a shared CmdSN window
//! (write data solicited by R2T, InitialR2T=Yes);
//! closing logs each connection out after its commands finish.

mod common;

use std::sync::Arc;

use common::{Tgt, file_bytes, pattern, within};
use wanblk_blockdev::{Connector, Endpoint};
use wanblk_iscsi::{IscsiConnector, IscsiOptions, Mode};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_connections_one_session() {
    let tgt = Tgt::start();
    let size = 64u64 << 20;
    let file = tgt.file("lun.img", size);
    tgt.target(1, "iqn.2024-01.test:mcs", &file, None, false);
    tgt.lfn(1);
    tgt.set(1, "MaxConnections", "8");
    let c = IscsiConnector::new(
        &tgt.uri("iqn.2024-01.test:mcs"),
        IscsiOptions { mode: Mode::Mcs, ..Default::default() },
    )
    .unwrap();
    assert_eq!(c.max_sessions(), None, "unknown before the first login");
    let mut eps = Vec::new();
    for _ in 0..4 {
        eps.push(within(30, c.connect_endpoint()).await.unwrap());
    }
    assert_eq!(c.max_sessions(), Some(8));
    let cids: Vec<u16> = eps.iter().map(|e| e.cid()).collect();
    assert_eq!(cids, vec![0, 1, 2, 3]);
    // The target offers InitialR2T=No (`lfn`); an MC/S session still sends
    // write data only when the target asks for it (see the crate's docs).
    assert!(eps.iter().all(|e| e.params().initial_r2t));
    // One I_T nexus (session) with four connections on the target.
    let show = tgt.tgtadm(&["--op", "show", "--mode", "target"]);
    assert_eq!(show.matches("I_T nexus:").count(), 1, "{show}");
    let sid = show.split("I_T nexus: ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().to_string();
    let conns = tgt.tgtadm(&["--op", "show", "--mode", "conn", "--tid", "1", "--sid", &sid]);
    assert_eq!(conns.matches("Connection:").count(), 4, "{conns}");

    let chunk = 4u64 << 20;
    let mut tasks = Vec::new();
    for (i, ep) in eps.iter().enumerate() {
        let ep = Arc::clone(ep);
        tasks.push(tokio::spawn(async move {
            let mut off = i as u64 * chunk;
            while off < size {
                let data = pattern(chunk as usize, off + 1);
                ep.write(off, data.clone(), false).await.unwrap();
                assert!(ep.read(off, chunk as u32).await.unwrap() == data);
                off += chunk * 4;
            }
        }));
    }
    for t in tasks {
        within(120, t).await.unwrap();
    }
    within(30, eps[0].flush()).await.unwrap();
    for off in (0..size).step_by(chunk as usize) {
        assert!(
            file_bytes(&file, off, chunk as usize) == pattern(chunk as usize, off + 1)[..],
            "file differs at {off}"
        );
    }
    // Close the leading connection first: the others keep working.
    within(30, eps[0].close()).await.unwrap();
    let d = pattern(4096, 5);
    within(30, eps[2].write(0, d.clone(), false)).await.unwrap();
    assert!(within(30, eps[3].read(0, 4096)).await.unwrap() == d);
    for ep in &eps[1..] {
        within(30, ep.close()).await.unwrap();
    }
    // A new connect after all closed starts a new session.
    let again = within(30, c.connect_endpoint()).await.unwrap();
    assert!(within(30, again.read(0, 4096)).await.unwrap() == d);
    within(30, again.close()).await.unwrap();
}

#[tokio::test]
async fn target_limit_on_connections_is_a_clear_error() {
    let tgt = Tgt::start();
    let file = tgt.file("lun.img", 8 << 20);
    tgt.target(1, "iqn.2024-01.test:mcs1", &file, None, false);
    // tgt's default MaxConnections is 1.
    let c = IscsiConnector::new(
        &tgt.uri("iqn.2024-01.test:mcs1"),
        IscsiOptions { mode: Mode::Mcs, ..Default::default() },
    )
    .unwrap();
    let first = within(30, c.connect_endpoint()).await.unwrap();
    assert_eq!(c.max_sessions(), Some(1));
    // tgt itself does not enforce MaxConnections; the initiator does.
    let e = within(30, c.connect_endpoint()).await.unwrap_err();
    assert!(matches!(e.kind, wanblk_blockdev::ErrorKind::Config(_)), "{e}");
    assert!(e.to_string().contains("MaxConnections"), "{e}");
    assert!(first.read(0, 512).await.is_ok());
    within(30, first.close()).await.unwrap();
}
