//! Fuzz bodies: one function per iSCSI target of the cargo-fuzz workspace
//! in `fuzz/` (which enables the `fuzzing` feature and calls them), and the
//! test that replays every committed seed of those targets
//! (`fuzz/seeds/<target>/*`) through the same functions on stable Rust, so
//! CI runs the corpus without a fuzzer; and the property tests of the SCSI
//! parsers and of discovery, which feed the same bodies arbitrary and
//! shaped input. Not part of the crate's API.
//!
//! A body may panic only when this crate is wrong: every input is the
//! target's, and a target gets a typed error, never a panic. A body returns
//! the first error the machine reported, so the replay can check that every
//! seed named `bad_*` is refused and every other seed (except `odd_*`,
//! malformed input the parsers tolerate) is not.

use bytes::{Bytes, BytesMut};

use crate::discovery::{Discovery, DiscoveryStep};
use crate::error::CommandError;
use crate::keys::{Negotiation, Params, long_fat_network_offer};
use crate::login::{Auth, Login, LoginConfig, LoginOutcome, LoginStep, TargetAuth};
use crate::pdu::Codec;
use crate::scsi::{self, Sense};
use crate::{CmdWindow, Command, Connection, DataDir, text};

/// A fuzz body: `Err` with the machine's error message when it refused the input.
pub type Body = fn(&[u8]) -> Result<(), String>;

/// Every iSCSI fuzz target: its name in `fuzz/Cargo.toml` and its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("iscsi_pdu_decoder", pdu_decoder),
    ("iscsi_text_keys", text_keys),
    ("iscsi_login", login),
    ("iscsi_connection", connection),
    ("iscsi_scsi", scsi_parsers),
    ("iscsi_discovery", discovery),
];

/// Arbitrary bytes into the PDU framer (BHS, AHS, padding, CRC32C digests),
/// then every typed header decoder. The first byte picks the digests and a
/// small MaxRecvDataSegmentLength so length checks are hit. A decoded PDU
/// re-encodes to one that decodes the same.
pub fn pdu_decoder(data: &[u8]) -> Result<(), String> {
    let Some((&flags, rest)) = data.split_first() else { return Ok(()) };
    let codec = Codec {
        header_digest: flags & 1 != 0,
        data_digest: flags & 2 != 0,
        max_recv_data: if flags & 4 != 0 { 512 } else { 1 << 16 },
    };
    let mut buf = BytesMut::from(rest);
    while let Some(pdu) = codec.decode(&mut buf).map_err(|e| e.to_string())? {
        let out = codec.encode(&pdu.header, pdu.data.clone());
        let mut again = BytesMut::from(&out.to_vec()[..]);
        if let Ok(Some(p2)) = codec.decode(&mut again) {
            assert_eq!(p2.header, pdu.header);
            assert_eq!(p2.data, pdu.data);
        }
    }
    Ok(())
}

/// Arbitrary bytes as login text: the key=value parser, the operational
/// negotiation checking them as the target's answers (leading and added
/// connections), then the numeric, boolean and binary value parsers. What
/// parses encodes back to the same text.
pub fn text_keys(data: &[u8]) -> Result<(), String> {
    let pairs = text::parse(data).map_err(|e| e.to_string())?;
    let mut refused = None;
    for leading in [true, false] {
        let mut n = Negotiation::new(&long_fat_network_offer(4), leading);
        let r = n.handle(&pairs).and_then(|()| {
            let _ = n.take_replies();
            n.finish(Some(&Params::default()))
        });
        if let (Err(e), true) = (r, leading) {
            refused = Some(e.to_string());
        }
    }
    for (k, v) in &pairs {
        let _ = text::parse_number(k, v);
        let _ = text::parse_bool(k, v);
        let _ = text::parse_binary(k, v);
    }
    assert_eq!(text::parse(&text::encode(&pairs)).ok(), Some(pairs));
    refused.map_or(Ok(()), Err)
}

/// Arbitrary target bytes into the login state machine (security stage with
/// AuthMethod None or CHAP, operational negotiation, continuation text).
/// The first byte picks the authentication (bit 0: CHAP; bit 3 with it:
/// mutual CHAP, the target's CHAP_N/CHAP_R checked), whether a target name
/// is given and whether the connection joins an existing session (MC/S).
pub fn login(data: &[u8]) -> Result<(), String> {
    let Some((&flags, rest)) = data.split_first() else { return Ok(()) };
    let added = flags & 2 != 0;
    let cfg = LoginConfig {
        initiator_name: "iqn.2024-01.invalid.fuzz:i".into(),
        target_name: if flags & 4 != 0 { None } else { Some("iqn.2024-01.invalid.fuzz:t".into()) },
        isid: [0x80, 0, 0, 0, 0, 1],
        tsih: if added { 7 } else { 0 },
        cid: u16::from(added),
        itt: 0x10,
        cmd_sn: 1,
        exp_stat_sn: 0,
        target_auth: (flags & 9 == 9).then(|| TargetAuth {
            user: Some("t".into()),
            secret: b"fedcba9876543210".to_vec(),
            id: 3,
            challenge: (0u8..16).collect(),
        }),
        auth: if flags & 1 != 0 {
            Auth::Chap { user: "u".into(), secret: b"0123456789abcdef".to_vec() }
        } else {
            Auth::None
        },
        offer: long_fat_network_offer(8),
        session: added.then(Params::default),
    };
    let (mut login, _first) = Login::new(cfg).map_err(|e| format!("configuration: {e}"))?;
    // Feed in pieces whose sizes come from the data itself.
    let mut buf = BytesMut::new();
    let mut rest = rest;
    while !rest.is_empty() {
        let n = (usize::from(rest[0]) + 1).min(rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        loop {
            match login.handle_input(&mut buf).map_err(|e| e.to_string())? {
                Some(LoginStep::Send(_)) => continue,
                Some(LoginStep::Done(_)) => return Ok(()),
                None => break,
            }
        }
    }
    Ok(())
}

/// Arbitrary target bytes into a full-feature connection with a read, a
/// write (immediate, unsolicited and R2T data) and a ping in flight. The
/// first byte picks InitialR2T, ImmediateData, the digests and
/// MaxOutstandingR2T; with its top bit both commands are also being
/// aborted (ABORT TASK), so task management answers are understood.
pub fn connection(data: &[u8]) -> Result<(), String> {
    let Some((&flags, rest)) = data.split_first() else { return Ok(()) };
    let params = Params {
        initial_r2t: flags & 1 != 0,
        immediate_data: flags & 2 != 0,
        header_digest: flags & 4 != 0,
        data_digest: flags & 8 != 0,
        max_outstanding_r2t: u32::from(flags >> 4).max(1),
        first_burst: 4096,
        max_burst: 8192,
        max_send_data_segment: 1024,
        max_recv_data_segment: 8192,
        ..Params::default()
    };
    let mut c = Connection::new(params, 0, 0);
    let mut w = CmdWindow::new(1, 1, 16);
    let _ = c.start_command(Command { cdb: scsi::read16(0, 16), dir: DataDir::Read(8192) }, 1);
    let _ = c.start_command(
        Command { cdb: scsi::write16(0, 32, false), dir: DataDir::Write(Bytes::from(vec![7u8; 16384])) },
        2,
    );
    let _ = c.ping(&w);
    if flags & 0x80 != 0 {
        // Task management answers become valid input too.
        let _ = c.abort_tasks(&w);
    }
    let mut buf = BytesMut::new();
    let mut data_out = 0usize;
    for piece in rest.chunks(97) {
        buf.extend_from_slice(piece);
        let r = c.handle_input(&mut buf, &mut w);
        while let Some(p) = c.poll_transmit() {
            if p.head[0] & 0x3f == crate::pdu::Opcode::DataOut as u8 {
                data_out += p.data.len();
            }
        }
        while c.poll_event().is_some() {}
        // No byte of the write goes out twice, whatever the R2Ts asked.
        assert!(data_out <= 16384, "{data_out} bytes of Data-Out for a 16384-byte write");
        r.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Arbitrary bytes into every SCSI data parser: sense data (fixed and
/// descriptor format, bare and in a SCSI Response data segment), standard
/// INQUIRY, the Supported VPD, Unit Serial Number, Block Limits and Logical
/// Block Provisioning pages, READ CAPACITY(16), REPORT LUNS. The first 13 bytes also build the LBA CDBs and
/// an UNMAP parameter list, whose fields must read back.
pub fn scsi_parsers(data: &[u8]) -> Result<(), String> {
    for sense in [Sense::parse(data), Sense::from_response_data(data)].into_iter().flatten() {
        assert!(sense.key <= 0x0f);
        let text =
            CommandError::Status { status: scsi::status::CHECK_CONDITION, sense: Some(sense) }.to_string();
        assert!(text.contains(sense.key_name()));
    }
    if let Ok(i) = scsi::parse_inquiry(data) {
        assert!(i.qualifier < 8 && i.device_type < 32);
    }
    if let Ok(pages) = scsi::parse_supported_vpd(data) {
        assert!(pages.len() + 4 <= data.len());
    }
    if let Ok(Some(serial)) = scsi::parse_unit_serial(data) {
        assert!(!serial.is_empty() && serial.len() + 4 <= data.len());
        assert!(serial.bytes().all(|c| c.is_ascii_graphic() || c == b' '));
        assert_eq!(serial.trim(), serial, "no padding is kept");
    }
    let _ = scsi::parse_block_limits(data);
    if let Ok(p) = scsi::parse_provisioning(data) {
        assert!(p.provisioning_type < 8);
    }
    if let Ok(luns) = scsi::parse_report_luns(data) {
        assert!(luns.len() <= scsi::MAX_REPORTED_LUNS && luns.len() * 8 + 8 <= data.len());
        assert!(luns.iter().all(|l| *l < 16384));
    }
    if let Ok(c) = scsi::parse_read_capacity16(data) {
        assert!(c.block_len.is_power_of_two() && c.blocks > 0);
        assert!(c.blocks.checked_mul(u64::from(c.block_len)).is_some());
    }
    if data.len() >= 13 {
        let lba = u64::from_be_bytes(data[..8].try_into().expect("8 bytes"));
        let blocks = u32::from_be_bytes(data[8..12].try_into().expect("4 bytes"));
        let flag = data[12] & 1 != 0;
        for (cdb, opcode) in [
            (scsi::read16(lba, blocks), scsi::op::READ_16),
            (scsi::write16(lba, blocks, flag), scsi::op::WRITE_16),
            (scsi::synchronize_cache16(lba, blocks), scsi::op::SYNCHRONIZE_CACHE_16),
            (scsi::write_same16(lba, blocks, flag), scsi::op::WRITE_SAME_16),
        ] {
            assert_eq!(cdb[0], opcode);
            assert_eq!(cdb[2..10], lba.to_be_bytes());
            assert_eq!(cdb[10..14], blocks.to_be_bytes());
        }
        let p = scsi::unmap_parameters(&[(lba, blocks)]);
        assert_eq!(p.len(), 24);
        assert_eq!(p[8..16], lba.to_be_bytes());
        assert_eq!(p[16..20], blocks.to_be_bytes());
    }
    // The parsers all see the same bytes, so there is no single verdict.
    Ok(())
}

/// Arbitrary target bytes into the SendTargets exchange of a discovery
/// session (RFC 7143 appendix C), through to its logout. The first byte
/// picks the digests, a small MaxRecvDataSegmentLength and the size of the
/// pieces the input arrives in.
pub fn discovery(data: &[u8]) -> Result<(), String> {
    let Some((&flags, rest)) = data.split_first() else { return Ok(()) };
    let params = Params {
        header_digest: flags & 1 != 0,
        data_digest: flags & 2 != 0,
        max_recv_data_segment: if flags & 4 != 0 { 512 } else { 8192 },
        ..Params::default()
    };
    let login = LoginOutcome { params, tsih: 1, exp_stat_sn: 2, exp_cmd_sn: 1, max_cmd_sn: 2 };
    let (mut d, _first) = Discovery::new(&login, 1, 9);
    let mut buf = BytesMut::new();
    for piece in rest.chunks(usize::from(flags >> 3) * 8 + 1) {
        buf.extend_from_slice(piece);
        loop {
            match d.handle_input(&mut buf).map_err(|e| e.to_string())? {
                Some(DiscoveryStep::Targets(targets, _)) => {
                    let text: usize = targets.iter().map(|t| t.name.len() + t.addresses.len()).sum();
                    assert!(text <= data.len(), "targets out of nowhere");
                }
                Some(DiscoveryStep::Send(_)) => {}
                Some(DiscoveryStep::LoggedOut) => return Ok(()),
                None => break,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    include!("../../shared-tests/fuzz_replay.rs");

    #[test]
    fn every_seed_replays_without_a_panic() {
        replay_seeds(super::TARGETS);
    }

    #[test]
    fn every_iscsi_fuzz_target_is_replayed() {
        targets_are_replayed("iscsi_", super::TARGETS);
    }

    proptest::proptest! {
        /// Arbitrary bytes, and bytes shaped like each answer (the format
        /// byte, page code or length field right, the rest arbitrary), into
        /// every parser: an answer or an error, never a panic (the fuzz body
        /// also checks the parsed fields stay in range).
        #[test]
        fn parsers_never_panic_on_arbitrary_or_shaped_bytes(
            shape in 0usize..8,
            head in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..16),
            rest in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        ) {
            let mut b = match shape {
                0 => vec![0x70 | (head.first().copied().unwrap_or(0) & 0x81)],
                1 => vec![0x72 | (head.first().copied().unwrap_or(0) & 0x81)],
                2 => vec![0, 0x00],
                3 => vec![0, 0xb0],
                4 => vec![0, 0xb2],
                5 => { let n = rest.len() as u16; n.to_be_bytes().to_vec() }
                _ => Vec::new(),
            };
            b.extend_from_slice(&head);
            b.extend_from_slice(&rest);
            proptest::prop_assert_eq!(super::scsi_parsers(&b), Ok(()));
            let _ = super::scsi_parsers(&rest);
        }
    }

    proptest::proptest! {
        /// Arbitrary bytes, and Text and Logout Responses with arbitrary
        /// fields and key=value text, into the discovery exchange: targets,
        /// a logout or a typed error, never a panic.
        #[test]
        fn discovery_never_panics(
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            pdus in proptest::collection::vec((0u8..4, proptest::prelude::any::<u8>(), 0u32..12, proptest::prelude::any::<u32>(),
                proptest::collection::vec(("[A-Za-z]{1,12}", "[ -~]{0,24}"), 0..6)), 0..8),
        ) {
            let _ = super::discovery(&raw);
            let mut wire = vec![0xf8u8];
            for (kind, flags, itt, ttt, pairs) in pdus {
                let text = crate::text::encode(&pairs);
                let header = match kind {
                    0 | 1 => crate::pdu::Header::TextResponse(crate::pdu::TextResponse {
                        final_: flags & 1 != 0,
                        cont: flags & 3 == 2,
                        lun: 0,
                        itt: if itt < 10 { 9 } else { itt },
                        ttt: if flags & 4 != 0 { crate::pdu::RESERVED_TAG } else { ttt },
                        stat_sn: 2,
                        exp_cmd_sn: 2,
                        max_cmd_sn: 3,
                    }),
                    2 => crate::pdu::Header::LogoutResponse(crate::pdu::LogoutResponse {
                        response: flags,
                        itt: 9 + itt % 3,
                        stat_sn: 3,
                        exp_cmd_sn: 2,
                        max_cmd_sn: 3,
                        time2wait: 0,
                        time2retain: 0,
                    }),
                    _ => crate::pdu::Header::NopIn(crate::pdu::NopIn {
                        lun: 0,
                        itt: crate::pdu::RESERVED_TAG,
                        ttt,
                        stat_sn: 2,
                        exp_cmd_sn: 2,
                        max_cmd_sn: 3,
                    }),
                };
                let data = if matches!(header, crate::pdu::Header::TextResponse(_)) { bytes::Bytes::from(text) } else { bytes::Bytes::new() };
                wire.extend_from_slice(&crate::pdu::Codec::default().encode(&header, data).to_vec());
            }
            let _ = super::discovery(&wire);
        }
    }
}
