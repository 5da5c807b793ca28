//! A scripted fake target breaks the protocol in one way per test; each
//! breach is a clear `EndpointError` naming the endpoint and offset, and
//! nothing hangs or panics.

mod common;

use common::{FakeConn, FakeTarget, within};
use wanblk_blockdev::{Endpoint, EndpointError, ErrorKind};
use wanblk_iscsi::IscsiConnector;
use wanblk_iscsi_proto::pdu::{BHS_LEN, DataIn, Header, R2t, RESERVED_TAG, Reject};

/// Runs one READ of 4096 bytes at 8192 against a target that logs in,
/// serves the probe, then does `misbehave` with the READ command.
async fn read_against(
    misbehave: impl FnOnce(&mut FakeConn, wanblk_iscsi_proto::pdu::ScsiCommand) + Send + 'static,
) -> EndpointError {
    let fake = FakeTarget::spawn(move |c| {
        c.login();
        if let Some((cmd, _)) = c.serve_probe(1 << 16) {
            misbehave(c, cmd);
        }
    });
    let conn = IscsiConnector::parse(&fake.uri()).unwrap();
    let ep = within(20, conn.connect_endpoint()).await.unwrap();
    let e = within(20, ep.read(8192, 4096)).await.unwrap_err();
    eprintln!("{e}");
    assert!(e.endpoint.contains(&format!("127.0.0.1:{}", fake.port)), "{e}");
    assert_eq!(e.offset, Some(8192), "{e}");
    // The endpoint stays usable for error reporting: later calls fail fast.
    let later = within(20, ep.read(0, 512)).await;
    assert!(later.is_err() || matches!(e.kind, ErrorKind::Server { .. }));
    drop(ep);
    fake.finish().await;
    e
}

fn protocol(e: &EndpointError, needle: &str) {
    assert!(matches!(e.kind, ErrorKind::Protocol(_)), "{e}");
    assert!(e.to_string().contains(needle), "{e} should mention {needle:?}");
}

#[tokio::test]
async fn pdu_with_wrong_length() {
    // An R2T must not carry data; this one claims a 16-byte data segment.
    let e = read_against(|c, cmd| {
        let h = Header::R2t(R2t {
            lun: cmd.lun,
            itt: cmd.itt,
            ttt: 5,
            stat_sn: c.stat_sn,
            exp_cmd_sn: cmd.cmd_sn + 1,
            max_cmd_sn: cmd.cmd_sn + 8,
            r2t_sn: 0,
            buffer_offset: 0,
            desired_len: 512,
        });
        let mut raw = c.codec.encode(&h, bytes::Bytes::new()).to_vec();
        raw[7] = 16;
        raw.extend_from_slice(&[0u8; 16]);
        c.send_raw(&raw);
    })
    .await;
    protocol(&e, "data segment");
}

#[tokio::test]
async fn unknown_opcode() {
    let e = read_against(|c, _cmd| {
        let mut raw = [0u8; BHS_LEN];
        raw[0] = 0x1c;
        c.send_raw(&raw);
    })
    .await;
    protocol(&e, "unknown opcode 0x1c");
}

#[tokio::test]
async fn reject_of_the_command() {
    let e = read_against(|c, cmd| {
        let mut rejected = [0u8; BHS_LEN];
        rejected[0] = 0x01;
        rejected[16..20].copy_from_slice(&cmd.itt.to_be_bytes());
        let h = Header::Reject(Reject {
            reason: 0x09,
            stat_sn: c.stat_sn,
            exp_cmd_sn: cmd.cmd_sn + 1,
            max_cmd_sn: cmd.cmd_sn + 8,
            data_sn: 0,
        });
        c.send(h, &rejected);
        // Keep the connection up: a Reject fails the command, not the connection.
        let _ = c.recv();
    })
    .await;
    protocol(&e, "invalid PDU field");
}

#[tokio::test]
async fn data_beyond_expected_length() {
    let e = read_against(|c, cmd| {
        let h = Header::DataIn(DataIn {
            final_: true,
            ack: false,
            overflow: false,
            underflow: false,
            has_status: true,
            status: 0,
            lun: cmd.lun,
            itt: cmd.itt,
            ttt: RESERVED_TAG,
            stat_sn: c.stat_sn,
            exp_cmd_sn: cmd.cmd_sn + 1,
            max_cmd_sn: cmd.cmd_sn + 8,
            data_sn: 0,
            buffer_offset: 0,
            residual: 0,
        });
        c.send(h, &vec![7u8; 8192]);
    })
    .await;
    protocol(&e, "beyond expected transfer length");
}

#[tokio::test]
async fn unknown_task_tag() {
    let e = read_against(|c, cmd| {
        c.data_in_good(&wanblk_iscsi_proto::pdu::ScsiCommand { itt: cmd.itt ^ 0x5555, ..cmd }, &[0u8; 512]);
    })
    .await;
    protocol(&e, "unknown initiator task tag");
}

#[tokio::test]
async fn data_sn_out_of_order() {
    let e = read_against(|c, cmd| {
        let h = Header::DataIn(DataIn {
            final_: false,
            ack: false,
            overflow: false,
            underflow: false,
            has_status: false,
            status: 0,
            lun: cmd.lun,
            itt: cmd.itt,
            ttt: RESERVED_TAG,
            stat_sn: 0,
            exp_cmd_sn: cmd.cmd_sn + 1,
            max_cmd_sn: cmd.cmd_sn + 8,
            data_sn: 3,
            buffer_offset: 0,
            residual: 0,
        });
        c.send(h, &[1u8; 512]);
    })
    .await;
    protocol(&e, "DataSN 3 where 0 was due");
}

#[tokio::test]
async fn bad_data_digest() {
    let fake = FakeTarget::spawn(|c| {
        c.answers = vec![("DataDigest".into(), "CRC32C".into())];
        c.login();
        let Some((cmd, _)) = c.serve_probe(1 << 16) else { return };
        let stat = c.stat_sn;
        let h = Header::DataIn(DataIn {
            final_: true,
            ack: false,
            overflow: false,
            underflow: false,
            has_status: true,
            status: 0,
            lun: cmd.lun,
            itt: cmd.itt,
            ttt: RESERVED_TAG,
            stat_sn: stat,
            exp_cmd_sn: cmd.cmd_sn + 1,
            max_cmd_sn: cmd.cmd_sn + 8,
            data_sn: 0,
            buffer_offset: 0,
            residual: 0,
        });
        let mut raw = c.codec.encode(&h, bytes::Bytes::from(vec![9u8; 4096])).to_vec();
        let n = raw.len();
        raw[n - 1] ^= 0xff; // corrupt the data digest
        c.send_raw(&raw);
    });
    let params = vec![("DataDigest".to_string(), "CRC32C".to_string())];
    let conn = IscsiConnector::new(&fake.uri(), wanblk_iscsi::IscsiOptions { params, ..Default::default() })
        .unwrap();
    let ep = within(20, conn.connect_endpoint()).await.unwrap();
    assert!(ep.params().data_digest);
    let e = within(20, ep.read(8192, 4096)).await.unwrap_err();
    protocol(&e, "data digest mismatch");
    assert_eq!(e.offset, Some(8192));
    drop(ep);
    fake.finish().await;
}

#[tokio::test]
async fn check_condition_with_sense() {
    let e = read_against(|c, cmd| {
        // MEDIUM ERROR, unrecovered read error, descriptor format with the LBA.
        let mut sense = vec![0x72, 0x03, 0x11, 0x00, 0, 0, 0, 12, 0x00, 0x0a, 0x80, 0];
        sense.extend_from_slice(&16u64.to_be_bytes());
        c.response(&cmd, 2, &sense);
    })
    .await;
    assert!(matches!(e.kind, ErrorKind::Server { code: 3, .. }), "{e}");
    assert!(
        e.to_string().contains("MEDIUM ERROR") && e.to_string().contains("unrecovered read error"),
        "{e}"
    );
}

#[tokio::test]
async fn unit_attention_is_retried_once() {
    let fake = FakeTarget::spawn(|c| {
        c.login();
        let Some((cmd, _)) = c.serve_probe(1 << 16) else { return };
        let ua = [0x70, 0, 0x06, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x29, 0, 0, 0, 0, 0];
        c.response(&cmd, 2, &ua);
        let Some((again, _)) = c.serve_probe(1 << 16) else { return };
        assert_eq!(again.cdb, cmd.cdb, "the same command is retried");
        c.data_in_good(&again, &vec![0xabu8; 4096]);
        let _ = c.recv();
    });
    let conn = IscsiConnector::parse(&fake.uri()).unwrap();
    let ep = within(20, conn.connect_endpoint()).await.unwrap();
    let d = within(20, ep.read(8192, 4096)).await.unwrap();
    assert!(d.iter().all(|&b| b == 0xab));
    drop(ep);
    // The script checked that the same command was retried.
    fake.finish().await;
}

#[tokio::test]
async fn target_closes_mid_command() {
    let e = read_against(|c, _cmd| {
        let _ = c.stream.shutdown(std::net::Shutdown::Both);
    })
    .await;
    assert!(matches!(e.kind, ErrorKind::Io(_)), "{e}");
    assert!(e.to_string().contains("closed"), "{e}");
}

#[tokio::test]
async fn login_reject_and_garbage() {
    let fake = FakeTarget::spawn(|c| {
        let _ = c.recv();
        c.send_raw(b"HTTP/1.1 400 Bad Request\r\n\r\nthis is not an iSCSI target at all....");
    });
    let conn = IscsiConnector::parse(&fake.uri()).unwrap();
    let e = within(20, conn.connect_endpoint()).await.unwrap_err();
    eprintln!("{e}");
    assert!(matches!(e.kind, ErrorKind::Protocol(_)), "{e}");
    fake.finish().await;
}

#[tokio::test]
async fn silent_target_times_out() {
    // The target reads the login request and never answers: it waits
    // until the initiator gives up and closes the connection.
    let fake = FakeTarget::spawn(|c| {
        assert!(c.recv().is_some(), "a login request");
        assert!(c.recv().is_none(), "the initiator sent more than its login request");
    });
    let conn = IscsiConnector::new(
        &fake.uri(),
        wanblk_iscsi::IscsiOptions { login_timeout: std::time::Duration::from_secs(1), ..Default::default() },
    )
    .unwrap();
    let e = within(20, conn.connect_endpoint()).await.unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Io(_)) && e.to_string().contains("timed out"), "{e}");
    fake.finish().await;
}
