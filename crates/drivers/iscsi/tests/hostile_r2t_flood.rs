//! A target flooding R2Ts for the same range (each 48-byte R2T would make
//! a naive initiator queue the range's Data-Out again): the write fails
//! with a protocol error naming the bad R2T, and the initiator never sends
//! more Data-Out than the write holds.

mod common;

use common::{FakeTarget, pattern, within};
use wanblk_blockdev::{Endpoint, ErrorKind};
use wanblk_iscsi::IscsiConnector;
use wanblk_iscsi_proto::pdu::{Header, R2t};

const LEN: u32 = 1 << 20;
const FLOOD: u32 = 1000;

/// Floods one WRITE with R2Ts for one range; returns the error and the
/// Data-Out bytes the target received. `max_outstanding`: the
/// MaxOutstandingR2T the target answers (RFC default 1 if `None`).
async fn flood(max_outstanding: Option<&'static str>) -> (wanblk_blockdev::EndpointError, u64) {
    let (tx, rx) = std::sync::mpsc::channel();
    let fake = FakeTarget::spawn(move |c| {
        if let Some(n) = max_outstanding {
            c.answers.push(("MaxOutstandingR2T".into(), n.into()));
        }
        c.login();
        let Some((cmd, immediate)) = c.serve_probe(1 << 16) else { return };
        assert!(cmd.write, "expected the WRITE");
        let start = u32::try_from(immediate.len()).unwrap();
        // The same 64 KiB over and over, each R2T with the next R2TSN.
        for sn in 0..FLOOD {
            c.send(
                Header::R2t(R2t {
                    lun: cmd.lun,
                    itt: cmd.itt,
                    ttt: 0x100 + sn,
                    stat_sn: c.stat_sn,
                    exp_cmd_sn: cmd.cmd_sn + 1,
                    max_cmd_sn: cmd.cmd_sn + 8,
                    r2t_sn: sn,
                    buffer_offset: start,
                    desired_len: 65536,
                }),
                &[],
            );
        }
        // Everything the initiator sends until it hangs up.
        let mut data_out = u64::from(start);
        while let Some(p) = c.recv() {
            if let Header::DataOut(_) = p.header {
                data_out += p.data.len() as u64;
            }
        }
        tx.send(data_out).unwrap();
    });
    let conn = IscsiConnector::parse(&fake.uri()).unwrap();
    let ep = within(20, conn.connect_endpoint()).await.unwrap();
    let e = within(20, ep.write(0, pattern(LEN as usize, 7), false)).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Protocol(_)), "{e}");
    assert!(e.to_string().contains("bad R2T"), "{e}");
    assert_eq!(e.offset, Some(0), "{e}");
    drop(ep);
    fake.finish().await;
    let sent = rx.recv().unwrap();
    assert!(sent <= u64::from(LEN), "the initiator sent {sent} bytes of Data-Out for a {LEN}-byte write");
    eprintln!("{e}; {sent} bytes of Data-Out sent for {FLOOD} R2Ts");
    (e, sent)
}

#[tokio::test]
async fn more_r2ts_than_max_outstanding_are_refused() {
    let (e, _) = flood(None).await;
    // Which check refuses the second R2T depends on whether the first
    // one's Data-Out had all left when it was read: still outstanding (one
    // too many), or done (its range asked for again). Both end the write.
    let s = e.to_string();
    assert!(s.contains("MaxOutstandingR2T=1") || s.contains("already sent or requested"), "{e}");
}

#[tokio::test]
async fn an_r2t_for_a_range_already_requested_is_refused() {
    // Room for several R2Ts at once: the repeat of the range is what fails.
    let (e, _) = flood(Some("8")).await;
    assert!(e.to_string().contains("already sent or requested"), "{e}");
}
