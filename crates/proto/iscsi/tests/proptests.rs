//! Property tests: PDUs and key=value text round-trip; arbitrary bytes into
//! every decoder and state machine never panic.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use wanblk_iscsi_proto::login::{Auth, Login, LoginConfig};
use wanblk_iscsi_proto::pdu::{BHS_LEN, Codec, Header, Pdu};
use wanblk_iscsi_proto::{CmdWindow, Command, Connection, DataDir, Params, keys, scsi, text};

fn codec(hd: bool, dd: bool) -> Codec {
    Codec { header_digest: hd, data_digest: dd, max_recv_data: 1 << 16 }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any BHS that decodes re-encodes to a PDU that decodes to the same
    /// header and data, with and without digests.
    #[test]
    fn pdu_round_trip(bhs in proptest::collection::vec(any::<u8>(), BHS_LEN), data in proptest::collection::vec(any::<u8>(), 0..600), hd: bool, dd: bool) {
        let mut b = [0u8; BHS_LEN];
        b.copy_from_slice(&bhs);
        if let Ok(h) = Header::read(&b) {
            let c = codec(hd, dd);
            let data = match h.opcode() {
                wanblk_iscsi_proto::pdu::Opcode::R2t
                | wanblk_iscsi_proto::pdu::Opcode::LogoutResponse
                | wanblk_iscsi_proto::pdu::Opcode::LogoutRequest => Vec::new(),
                wanblk_iscsi_proto::pdu::Opcode::Reject => vec![0u8; BHS_LEN],
                _ => data,
            };
            let out = c.encode(&h, Bytes::from(data.clone()));
            let wire = out.to_vec();
            prop_assert_eq!(wire.len() % 4, 0);
            let mut buf = BytesMut::from(&wire[..]);
            let pdu = c.decode(&mut buf).unwrap().unwrap();
            // A header whose reserved bits differ still reads back to the same typed header.
            prop_assert_eq!(Header::read(&{ let mut x = [0u8; BHS_LEN]; x.copy_from_slice(&wire[..BHS_LEN]); x }).unwrap(), pdu.header);
            prop_assert_eq!(pdu.header, h);
            prop_assert_eq!(&pdu.data[..], &data[..]);
            prop_assert!(buf.is_empty());
        }
    }

    /// Arbitrary bytes into the framer: an error or a PDU, never a panic,
    /// and never a buffer reservation over the declared limit.
    #[test]
    fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400), hd: bool, dd: bool) {
        let c = codec(hd, dd);
        let mut buf = BytesMut::from(&bytes[..]);
        for _ in 0..8 {
            match c.decode(&mut buf) {
                Ok(Some(_)) => continue,
                _ => break,
            }
        }
        prop_assert!(buf.capacity() <= (1 << 16) + 2048 + bytes.len());
    }

    #[test]
    fn text_round_trip(pairs in proptest::collection::vec(("[A-Za-z0-9.+@_-]{1,63}", "[^\u{0}]{0,100}"), 0..20)) {
        let enc = text::encode(&pairs);
        prop_assert_eq!(text::parse(&enc).unwrap(), pairs);
    }

    #[test]
    fn text_parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), s in ".{0,40}") {
        let _ = text::parse(&bytes);
        let _ = text::parse_number("K", &s);
        let _ = text::parse_binary("K", &s);
        let _ = text::parse_bool("K", &s);
    }

    #[test]
    fn unit_serial_reads_back_without_its_padding(serial in "[!-~]([ -~]{0,30}[!-~])?", lead in 0usize..4, tail in 0usize..4) {
        let mut body = vec![b' '; lead];
        body.extend_from_slice(serial.as_bytes());
        body.extend(std::iter::repeat_n(0u8, tail));
        let mut page = vec![0, 0x80, 0, body.len() as u8];
        page.extend_from_slice(&body);
        prop_assert_eq!(scsi::parse_unit_serial(&page).unwrap(), Some(serial));
    }

    #[test]
    fn scsi_parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
        let _ = scsi::Sense::parse(&bytes);
        let _ = scsi::Sense::from_response_data(&bytes);
        let _ = scsi::parse_inquiry(&bytes);
        let _ = scsi::parse_read_capacity16(&bytes);
        let _ = scsi::parse_block_limits(&bytes);
        let _ = scsi::parse_provisioning(&bytes);
        let _ = scsi::parse_supported_vpd(&bytes);
        let _ = scsi::parse_unit_serial(&bytes);
    }

    /// Arbitrary (framed) PDUs into the login state machine.
    #[test]
    fn login_never_panics(pdus in proptest::collection::vec((proptest::collection::vec(any::<u8>(), BHS_LEN), proptest::collection::vec(any::<u8>(), 0..200)), 1..6), chap: bool) {
        let cfg = LoginConfig {
            initiator_name: "iqn.2024-01.test:i".into(),
            target_name: Some("iqn.2024-01.test:t".into()),
            isid: [0x80, 0, 0, 0, 0, 1],
            tsih: 0,
            cid: 0,
            itt: 1,
            cmd_sn: 1,
            exp_stat_sn: 0,
            target_auth: None,
            auth: if chap { Auth::Chap { user: "u".into(), secret: b"0123456789ab".to_vec() } } else { Auth::None },
            offer: keys::long_fat_network_offer(1),
            session: None,
        };
        let (mut login, _) = Login::new(cfg).unwrap();
        for (h, d) in pdus {
            let mut b = [0u8; BHS_LEN];
            b.copy_from_slice(&h);
            b[0] = 0x23; // mostly Login Responses
            b[16..20].copy_from_slice(&1u32.to_be_bytes());
            if let Ok(header) = Header::read(&b) {
                let _ = login.handle_pdu(Pdu { header, ahs: Bytes::new(), data: Bytes::from(d) });
            }
        }
    }

    /// Arbitrary bytes into a full-feature connection with commands in flight.
    #[test]
    fn connection_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut c = Connection::new(Params::default(), 0, 0);
        let mut w = CmdWindow::new(1, 1, 10);
        c.start_command(Command { cdb: scsi::read16(0, 1), dir: DataDir::Read(512) }, 1).unwrap();
        c.start_command(Command { cdb: scsi::write16(0, 1, false), dir: DataDir::Write(Bytes::from(vec![0u8; 512])) }, 2).unwrap();
        let mut buf = BytesMut::from(&bytes[..]);
        let _ = c.handle_input(&mut buf, &mut w);
        while c.poll_transmit().is_some() {}
        while c.poll_event().is_some() {}
    }
}
