//! The connection driven by an in-memory target: exact PDU sequences, no
//! sockets, no clock.

use super::*;
use crate::error::PduError;
use crate::pdu::{LogoutResponse, Opcode, ScsiCommand};
use crate::scsi;

fn params() -> Params {
    Params {
        initial_r2t: false,
        immediate_data: true,
        first_burst: 8192,
        max_burst: 8192,
        max_send_data_segment: 4096,
        max_recv_data_segment: 65536,
        max_outstanding_r2t: 2,
        ..Params::default()
    }
}

/// The in-memory target side: decodes what the initiator sent.
struct Target {
    codec: Codec,
    stat_sn: u32,
}

impl Target {
    fn new() -> Target {
        Target {
            codec: Codec { header_digest: false, data_digest: false, max_recv_data: 1 << 24 },
            stat_sn: 100,
        }
    }

    fn drain(&self, c: &mut Connection) -> Vec<Pdu> {
        self.drain_n(c, usize::MAX)
    }

    /// The first `n` PDUs queued (all of them if fewer).
    fn drain_n(&self, c: &mut Connection, n: usize) -> Vec<Pdu> {
        let mut b = BytesMut::new();
        for _ in 0..n {
            let Some(p) = c.poll_transmit() else { break };
            b.extend_from_slice(&p.to_vec());
        }
        let mut v = Vec::new();
        while let Some(p) = self.codec.decode(&mut b).unwrap() {
            v.push(p);
        }
        assert!(b.is_empty());
        v
    }

    fn bytes(&self, h: Header, data: &[u8]) -> BytesMut {
        BytesMut::from(&self.codec.encode(&h, Bytes::copy_from_slice(data)).to_vec()[..])
    }

    fn data_in(&mut self, itt: u32, sn: u32, off: u32, data: &[u8], status: bool) -> BytesMut {
        let stat_sn = self.stat_sn;
        if status {
            self.stat_sn += 1;
        }
        self.bytes(
            Header::DataIn(DataIn {
                final_: status,
                ack: false,
                overflow: false,
                underflow: false,
                has_status: status,
                status: 0,
                lun: 0,
                itt,
                ttt: RESERVED_TAG,
                stat_sn,
                exp_cmd_sn: 1,
                max_cmd_sn: 10,
                data_sn: sn,
                buffer_offset: off,
                residual: 0,
            }),
            data,
        )
    }

    fn response(&mut self, itt: u32, status: u8, sense: &[u8]) -> BytesMut {
        let stat_sn = self.stat_sn;
        self.stat_sn += 1;
        let mut d = Vec::new();
        if !sense.is_empty() {
            d.extend_from_slice(&(sense.len() as u16).to_be_bytes());
            d.extend_from_slice(sense);
        }
        self.bytes(
            Header::ScsiResponse(ScsiResponse {
                bidi_overflow: false,
                bidi_underflow: false,
                overflow: false,
                underflow: false,
                response: 0,
                status,
                itt,
                snack_tag: 0,
                stat_sn,
                exp_cmd_sn: 2,
                max_cmd_sn: 20,
                exp_data_sn: 0,
                bidi_residual: 0,
                residual: 0,
            }),
            &d,
        )
    }
}

fn read_cmd(len: u32) -> Command {
    Command { cdb: scsi::read16(0, len / 512), dir: DataDir::Read(len) }
}

fn completed(c: &mut Connection) -> Vec<(u32, Result<Outcome, CommandError>)> {
    let mut v = Vec::new();
    while let Some(e) = c.poll_event() {
        if let Event::Completed { itt, result } = e {
            v.push((itt, result));
        }
    }
    v
}

#[test]
fn read_over_several_data_in_pdus() {
    let mut c = Connection::new(params(), encode_lun(1), 5);
    let mut w = CmdWindow::new(1, 1, 10);
    let mut t = Target::new();
    let itt = c.start_command(read_cmd(3000), w.take().unwrap()).unwrap();
    let sent = t.drain(&mut c);
    assert_eq!(sent.len(), 1);
    let Header::ScsiCommand(cmd) = sent[0].header else { panic!() };
    assert!(cmd.read && !cmd.write && cmd.final_);
    assert_eq!((cmd.expected_len, cmd.cmd_sn, cmd.exp_stat_sn, cmd.lun), (3000, 1, 5, encode_lun(1)));
    let mut b = t.data_in(itt, 0, 0, &[1; 1000], false);
    b.extend_from_slice(&t.data_in(itt, 1, 1000, &[2; 2000], true));
    // Feed one byte at a time: framing must not care.
    let mut input = BytesMut::new();
    for byte in b.iter() {
        input.extend_from_slice(&[*byte]);
        c.handle_input(&mut input, &mut w).unwrap();
    }
    let done = completed(&mut c);
    assert_eq!(done.len(), 1);
    let data = done[0].1.as_ref().unwrap().data.clone();
    assert_eq!(data.len(), 3000);
    assert!(data[..1000].iter().all(|&x| x == 1) && data[1000..].iter().all(|&x| x == 2));
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn write_with_immediate_unsolicited_and_r2t_data() {
    let mut c = Connection::new(params(), 0, 0);
    let mut w = CmdWindow::new(1, 1, 10);
    let t = Target::new();
    let data: Bytes = (0..20000u32).map(|i| i as u8).collect::<Vec<u8>>().into();
    let itt = c
        .start_command(Command { cdb: scsi::write16(0, 40, false), dir: DataDir::Write(data.clone()) }, 1)
        .unwrap();
    let sent = t.drain(&mut c);
    // Command with 4096 immediate bytes (target MRDSL), then one unsolicited
    // Data-Out up to FirstBurstLength 8192.
    assert_eq!(sent.len(), 2);
    let Header::ScsiCommand(cmd) = sent[0].header else { panic!() };
    assert!(cmd.write && !cmd.final_);
    assert_eq!(sent[0].data, data.slice(..4096));
    let Header::DataOut(d) = sent[1].header else { panic!() };
    assert_eq!((d.ttt, d.data_sn, d.buffer_offset, d.final_), (RESERVED_TAG, 0, 4096, true));
    assert_eq!(sent[1].data, data.slice(4096..8192));
    // Two R2Ts outstanding at once (MaxOutstandingR2T > 1).
    let r2t = |sn: u32, off: u32, len: u32| {
        t.bytes(
            Header::R2t(R2t {
                lun: 0,
                itt,
                ttt: 0x40 + sn,
                stat_sn: 100,
                exp_cmd_sn: 2,
                max_cmd_sn: 10,
                r2t_sn: sn,
                buffer_offset: off,
                desired_len: len,
            }),
            &[],
        )
    };
    let mut b = r2t(0, 8192, 8192);
    b.extend_from_slice(&r2t(1, 16384, 3616));
    c.handle_input(&mut b, &mut w).unwrap();
    let sent = t.drain(&mut c);
    let outs: Vec<(u32, u32, u32, bool, usize)> = sent
        .iter()
        .map(|p| match p.header {
            Header::DataOut(d) => (d.ttt, d.data_sn, d.buffer_offset, d.final_, p.data.len()),
            h => panic!("{h:?}"),
        })
        .collect();
    assert_eq!(
        outs,
        vec![(0x40, 0, 8192, false, 4096), (0x40, 1, 12288, true, 4096), (0x41, 0, 16384, true, 3616)]
    );
    assert_eq!(sent[2].data, data.slice(16384..));
    // Beyond the burst limit and beyond the transfer length are protocol errors.
    let mut bad = r2t(2, 0, 16384);
    assert!(matches!(c.handle_input(&mut bad, &mut w), Err(ConnError::BadR2t { .. })));
    let done = completed(&mut c);
    assert!(matches!(done[0].1, Err(CommandError::Connection(ConnError::BadR2t { .. }))));
}

#[test]
fn initial_r2t_without_immediate_data_sends_nothing_unsolicited() {
    let p = Params { initial_r2t: true, immediate_data: false, ..params() };
    let mut c = Connection::new(p, 0, 0);
    let t = Target::new();
    c.start_command(
        Command { cdb: scsi::write16(0, 8, false), dir: DataDir::Write(Bytes::from(vec![0u8; 4096])) },
        1,
    )
    .unwrap();
    let sent = t.drain(&mut c);
    assert_eq!(sent.len(), 1);
    assert!(sent[0].data.is_empty());
    let Header::ScsiCommand(cmd) = sent[0].header else { panic!() };
    assert!(cmd.final_);
}

#[test]
fn window_opens_and_closes() {
    let mut w = CmdWindow::new(1, 1, 2);
    assert_eq!(w.take(), Some(1));
    assert_eq!(w.take(), Some(2));
    assert_eq!(w.take(), None);
    assert_eq!(w.current(), 3);
    assert!(!w.update(2, 1), "MaxCmdSN < ExpCmdSN - 1 is ignored");
    assert!(!w.update(1, 2), "going back is ignored");
    assert!(w.update(3, 4));
    assert_eq!(w.take(), Some(3));
    // Wrap-around.
    let mut w = CmdWindow::new(u32::MAX, u32::MAX, 1);
    assert_eq!(w.take(), Some(u32::MAX));
    assert_eq!(w.take(), Some(0));
    assert_eq!(w.take(), Some(1));
    assert_eq!(w.take(), None);
}

#[test]
fn answers_target_nop_in() {
    let mut c = Connection::new(params(), 0, 7);
    let mut w = CmdWindow::new(3, 3, 10);
    let t = Target::new();
    let mut b = t.bytes(
        Header::NopIn(NopIn {
            lun: 0,
            itt: RESERVED_TAG,
            ttt: 0x99,
            stat_sn: 7,
            exp_cmd_sn: 3,
            max_cmd_sn: 12,
        }),
        b"ping",
    );
    c.handle_input(&mut b, &mut w).unwrap();
    assert_eq!(w.bounds(), (3, 12));
    let sent = t.drain(&mut c);
    let Header::NopOut(n) = sent[0].header else { panic!() };
    assert!(n.immediate);
    assert_eq!((n.itt, n.ttt, n.cmd_sn, n.exp_stat_sn), (RESERVED_TAG, 0x99, 3, 7));
    assert_eq!(&sent[0].data[..], b"ping");
    // Our own ping is answered with its ITT.
    let itt = c.ping(&w).unwrap();
    t.drain(&mut c);
    let mut b = t.bytes(
        Header::NopIn(NopIn { lun: 0, itt, ttt: RESERVED_TAG, stat_sn: 7, exp_cmd_sn: 3, max_cmd_sn: 12 }),
        &[],
    );
    c.handle_input(&mut b, &mut w).unwrap();
    assert_eq!(c.poll_event(), Some(Event::Pong { itt }));
}

#[test]
fn sense_reject_and_logout() {
    let mut c = Connection::new(params(), 0, 0);
    let mut w = CmdWindow::new(1, 1, 10);
    let mut t = Target::new();
    let a = c.start_command(read_cmd(512), w.take().unwrap()).unwrap();
    let b = c.start_command(read_cmd(512), w.take().unwrap()).unwrap();
    t.drain(&mut c);
    let ua = [0x70, 0, 0x06, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x29, 0, 0, 0, 0, 0];
    let mut input = t.response(a, status::CHECK_CONDITION, &ua);
    let mut rejected = [0u8; BHS_LEN];
    rejected[0] = Opcode::ScsiCommand as u8;
    rejected[16..20].copy_from_slice(&b.to_be_bytes());
    input.extend_from_slice(&t.bytes(
        Header::Reject(Reject { reason: 0x05, stat_sn: 102, exp_cmd_sn: 3, max_cmd_sn: 10, data_sn: 0 }),
        &rejected,
    ));
    c.handle_input(&mut input, &mut w).unwrap();
    let done = completed(&mut c);
    let Err(CommandError::Status { status: 2, sense: Some(s) }) = &done[0].1 else { panic!("{:?}", done[0]) };
    assert!(s.is_unit_attention());
    assert_eq!(done[1].1, Err(CommandError::Rejected("command not supported")));
    // Still usable after a Reject.
    c.logout(&w, true, 0).unwrap();
    let sent = t.drain(&mut c);
    let Header::LogoutRequest(l) = sent[0].header else { panic!() };
    assert!(c.start_command(read_cmd(512), 9).is_err(), "no commands while logging out");
    let mut input = t.bytes(
        Header::LogoutResponse(LogoutResponse {
            response: 0,
            itt: l.itt,
            stat_sn: 103,
            exp_cmd_sn: 3,
            max_cmd_sn: 10,
            time2wait: 0,
            time2retain: 0,
        }),
        &[],
    );
    c.handle_input(&mut input, &mut w).unwrap();
    assert_eq!(c.poll_event(), Some(Event::LoggedOut { response: 0 }));
    assert_eq!(c.error(), Some(&ConnError::LoggedOut));
}

#[test]
fn violations_fail_every_command() {
    type Case = (&'static str, fn(&mut Target, u32) -> BytesMut);
    let cases: Vec<Case> = vec![
        ("datasn", |t, itt| t.data_in(itt, 1, 0, &[0; 512], false)),
        ("offset", |t, itt| t.data_in(itt, 0, 512, &[0; 512], false)),
        ("beyond", |t, itt| t.data_in(itt, 0, 0, &[0; 1024], true)),
        ("itt", |t, itt| t.response(itt + 1000, 0, &[])),
        ("opcode", |t, _| {
            t.bytes(
                Header::ScsiCommand(ScsiCommand {
                    immediate: false,
                    final_: true,
                    read: false,
                    write: false,
                    attr: 0,
                    lun: 0,
                    itt: 1,
                    expected_len: 0,
                    cmd_sn: 0,
                    exp_stat_sn: 0,
                    cdb: [0; 16],
                }),
                &[],
            )
        }),
    ];
    for (name, make) in cases {
        let mut c = Connection::new(params(), 0, 0);
        let mut w = CmdWindow::new(1, 1, 10);
        let mut t = Target::new();
        let a = c.start_command(read_cmd(512), w.take().unwrap()).unwrap();
        let _b = c.start_command(read_cmd(512), w.take().unwrap()).unwrap();
        let mut input = make(&mut t, a);
        let e = c.handle_input(&mut input, &mut w).unwrap_err();
        let done = completed(&mut c);
        assert_eq!(done.len(), 2, "{name}: every command fails");
        for (_, r) in done {
            assert_eq!(r, Err(CommandError::Connection(e.clone())), "{name}");
        }
        assert!(c.start_command(read_cmd(512), 3).is_err());
    }
}

#[test]
fn transport_failure_fails_pending() {
    let mut c = Connection::new(params(), 0, 0);
    let a = c.start_command(read_cmd(512), 1).unwrap();
    c.fail(ConnError::Closed("reset".into()));
    let done = completed(&mut c);
    assert_eq!(done, vec![(a, Err(CommandError::Connection(ConnError::Closed("reset".into()))))]);
}

#[test]
fn early_answer_to_a_write_drops_its_queued_data() {
    let p = Params { first_burst: 16384, max_burst: 16384, ..params() };
    let mut c = Connection::new(p, 0, 0);
    let mut w = CmdWindow::new(1, 1, 10);
    let mut t = Target::new();
    let itt = c
        .start_command(
            Command { cdb: scsi::write16(0, 32, false), dir: DataDir::Write(Bytes::from(vec![1u8; 16384])) },
            1,
        )
        .unwrap();
    let other = c.start_command(read_cmd(512), 2).unwrap();
    let sense = [0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x24, 0, 0, 0, 0, 0];
    let mut input = t.response(itt, status::CHECK_CONDITION, &sense);
    c.handle_input(&mut input, &mut w).unwrap();
    assert_eq!(c.queued_bytes(), c.queued_now(), "the dropped Data-Out are no longer counted");
    let sent = t.drain(&mut c);
    let kinds: Vec<Opcode> = sent.iter().map(|p| p.header.opcode()).collect();
    assert_eq!(kinds, vec![Opcode::ScsiCommand, Opcode::ScsiCommand], "the 3 Data-Out PDUs are gone");
    assert_eq!(sent[1].header.itt(), other);
}

// ---- R2T limits against a hostile target ---------------------------------

fn r2t_bytes(t: &Target, itt: u32, sn: u32, off: u32, len: u32) -> BytesMut {
    t.bytes(
        Header::R2t(R2t {
            lun: 0,
            itt,
            ttt: 0x100 + sn,
            stat_sn: 100,
            exp_cmd_sn: 2,
            max_cmd_sn: 10,
            r2t_sn: sn,
            buffer_offset: off,
            desired_len: len,
        }),
        &[],
    )
}

/// A 64 KiB write that sends nothing unsolicited, MaxOutstandingR2T 1.
fn solicited_write(max_outstanding_r2t: u32) -> (Connection, CmdWindow, Target, u32) {
    let p = Params { initial_r2t: true, immediate_data: false, max_outstanding_r2t, ..params() };
    let mut c = Connection::new(p, 0, 0);
    let t = Target::new();
    let data = Bytes::from(vec![9u8; 65536]);
    let itt =
        c.start_command(Command { cdb: scsi::write16(0, 128, false), dir: DataDir::Write(data) }, 1).unwrap();
    t.drain(&mut c);
    (c, CmdWindow::new(1, 1, 10), t, itt)
}

fn bad_r2t_message(r: Result<(), ConnError>) -> String {
    match r {
        Err(ConnError::BadR2t { message, .. }) => message,
        r => panic!("expected a bad R2T, got {r:?}"),
    }
}

#[test]
fn an_r2t_for_a_range_already_requested_is_a_protocol_error() {
    let (mut c, mut w, t, itt) = solicited_write(1);
    c.handle_input(&mut r2t_bytes(&t, itt, 0, 0, 8192), &mut w).unwrap();
    assert_eq!(t.drain(&mut c).len(), 2, "two Data-Out PDUs of 4096 bytes");
    // The same range again (the amplification: 48 bytes in, 8 KiB out, forever).
    let m = bad_r2t_message(c.handle_input(&mut r2t_bytes(&t, itt, 1, 0, 8192), &mut w));
    assert!(m.contains("[0, 8192) asks again for [0, 8192)"), "{m}");
    assert!(t.drain(&mut c).is_empty(), "nothing more is sent");
    assert!(
        matches!(&completed(&mut c)[..], [(i, Err(CommandError::Connection(ConnError::BadR2t { .. })))] if *i == itt)
    );
}

#[test]
fn an_r2t_overlapping_unsolicited_data_is_a_protocol_error() {
    // params(): 4096 bytes immediate, unsolicited Data-Out up to 8192.
    let mut c = Connection::new(params(), 0, 0);
    let mut w = CmdWindow::new(1, 1, 10);
    let t = Target::new();
    let itt = c
        .start_command(
            Command { cdb: scsi::write16(0, 32, false), dir: DataDir::Write(Bytes::from(vec![1u8; 16384])) },
            1,
        )
        .unwrap();
    t.drain(&mut c);
    let m = bad_r2t_message(c.handle_input(&mut r2t_bytes(&t, itt, 0, 8000, 1000), &mut w));
    assert!(m.contains("asks again for [0, 8192)"), "{m}");
}

#[test]
fn max_outstanding_r2t_is_enforced_until_the_last_data_out_is_handed_out() {
    let (mut c, mut w, t, itt) = solicited_write(1);
    // Two R2Ts at once where one is allowed.
    let mut two = r2t_bytes(&t, itt, 0, 0, 8192);
    two.extend_from_slice(&r2t_bytes(&t, itt, 1, 8192, 8192));
    let m = bad_r2t_message(c.handle_input(&mut two, &mut w));
    assert!(m.contains("MaxOutstandingR2T=1"), "{m}");

    // Same, but the second comes after only part of the first R2T's data was taken.
    let (mut c, mut w, t, itt) = solicited_write(1);
    c.handle_input(&mut r2t_bytes(&t, itt, 0, 0, 8192), &mut w).unwrap();
    assert!(c.poll_transmit().is_some(), "first of two Data-Out PDUs");
    let m = bad_r2t_message(c.handle_input(&mut r2t_bytes(&t, itt, 1, 8192, 8192), &mut w));
    assert!(m.contains("MaxOutstandingR2T=1"), "{m}");

    // Once the last Data-Out of an R2T is handed out, the next R2T is fine.
    let (mut c, mut w, t, itt) = solicited_write(1);
    for sn in 0..8 {
        c.handle_input(&mut r2t_bytes(&t, itt, sn, sn * 8192, 8192), &mut w).unwrap();
        let outs = t.drain(&mut c);
        assert_eq!(outs.len(), 2);
        assert!(outs.iter().all(|p| matches!(p.header, Header::DataOut(d) if d.ttt == 0x100 + sn)));
    }
    assert!(completed(&mut c).is_empty());

    // With MaxOutstandingR2T 2, two at once are fine, a third is not.
    let (mut c, mut w, t, itt) = solicited_write(2);
    let mut three = r2t_bytes(&t, itt, 0, 0, 8192);
    three.extend_from_slice(&r2t_bytes(&t, itt, 1, 8192, 8192));
    c.handle_input(&mut three, &mut w).unwrap();
    let m = bad_r2t_message(c.handle_input(&mut r2t_bytes(&t, itt, 2, 16384, 8192), &mut w));
    assert!(m.contains("MaxOutstandingR2T=2"), "{m}");
}

#[test]
fn tiny_and_empty_r2ts_are_bounded() {
    let (mut c, mut w, t, itt) = solicited_write(1);
    // A zero length never reaches the task: the header decoder refuses it.
    let r = c.handle_input(&mut r2t_bytes(&t, itt, 0, 0, 0), &mut w);
    assert!(matches!(r, Err(ConnError::Pdu(PduError::InvalidField { value: 0, .. }))), "{r:?}");

    // One-byte R2Ts: at most max_r2ts(65536) of them for the write.
    let (mut c, mut w, t, itt) = solicited_write(1);
    let max = max_r2ts(65536);
    assert_eq!(max, R2T_ALLOWANCE + 128);
    for sn in 0..max {
        c.handle_input(&mut r2t_bytes(&t, itt, sn, sn * 2, 1), &mut w).unwrap();
        assert_eq!(t.drain(&mut c).len(), 1);
    }
    let m = bad_r2t_message(c.handle_input(&mut r2t_bytes(&t, itt, max, max * 2, 1), &mut w));
    assert!(m.contains(&format!("more than {max} R2Ts for a write of 65536 bytes")), "{m}");
}

proptest::proptest! {
    /// Whatever R2Ts a target sends, no byte of a write goes out twice, so
    /// the Data-Out a target can make this side queue is bounded by the write.
    #[test]
    fn no_byte_of_a_write_goes_out_twice(
        max_outstanding in 1u32..4,
        unsolicited in proptest::prelude::any::<bool>(),
        r2ts in proptest::collection::vec((0u32..70_000, 1u32..20_000, proptest::prelude::any::<bool>(), 0u32..8), 0..40),
    ) {
        const LEN: usize = 65536;
        let p = Params {
            initial_r2t: !unsolicited,
            immediate_data: unsolicited,
            first_burst: 8192,
            max_burst: 16384,
            max_outstanding_r2t: max_outstanding,
            ..params()
        };
        let mut c = Connection::new(p, 0, 0);
        let mut w = CmdWindow::new(1, 1, 10);
        let t = Target::new();
        let itt = c
            .start_command(Command { cdb: scsi::write16(0, 128, false), dir: DataDir::Write(Bytes::from(vec![3u8; LEN])) }, 1)
            .unwrap();
        let mut sent = vec![0u8; LEN];
        let mut count = |c: &mut Connection| {
            for pdu in t.drain(c) {
                let off = match pdu.header {
                    Header::ScsiCommand(_) => 0,
                    Header::DataOut(d) => d.buffer_offset as usize,
                    h => panic!("{h:?}"),
                };
                for b in &mut sent[off..off + pdu.data.len()] {
                    *b += 1;
                }
            }
        };
        count(&mut c);
        let mut sn = 0;
        for (off, len, drain, skew) in r2ts {
            // Mostly the right R2TSN, sometimes not.
            let this_sn = if skew == 0 { sn + 1 } else { sn };
            let r = c.handle_input(&mut r2t_bytes(&t, itt, this_sn, off, len), &mut w);
            if r.is_err() {
                break;
            }
            sn = this_sn + 1;
            proptest::prop_assert_eq!(c.queued_bytes(), c.queued_now(), "the queued count drifted");
            if drain {
                count(&mut c);
            }
        }
        count(&mut c);
        proptest::prop_assert_eq!(c.queued_bytes(), 0);
        proptest::prop_assert!(sent.iter().all(|&n| n <= 1), "a byte went out twice");
    }
}

/// ABORT TASK (RFC 7143 sections 11.5, 11.6): one immediate request per
/// command in flight, referencing its tag and CmdSN; "function complete"
/// or "task does not exist" completes the command as aborted; anything
/// else leaves it to `forget_tasks`; an answer for no request is an error.
#[test]
fn abort_task_for_every_command_in_flight() {
    let mut c = Connection::new(params(), encode_lun(1), 0);
    let mut w = CmdWindow::new(7, 7, 20);
    let mut t = Target::new();
    let a = c.start_command(read_cmd(512), w.take().unwrap()).unwrap();
    let b = c.start_command(read_cmd(1024), w.take().unwrap()).unwrap();
    let d = c.start_command(read_cmd(1536), w.take().unwrap()).unwrap();
    t.drain(&mut c);
    assert_eq!(c.abort_tasks(&w).unwrap(), 3);
    assert_eq!(c.abort_tasks(&w).unwrap(), 0, "a task is aborted once");
    let sent = t.drain(&mut c);
    let reqs: Vec<TaskMgmtRequest> = sent
        .iter()
        .map(|p| match p.header {
            Header::TaskMgmtRequest(r) => r,
            h => panic!("{h:?}"),
        })
        .collect();
    assert_eq!(reqs.iter().map(|r| (r.rtt, r.ref_cmd_sn)).collect::<Vec<_>>(), vec![(a, 7), (b, 8), (d, 9)]);
    assert!(reqs.iter().all(|r| r.immediate && r.function == tmf::ABORT_TASK && r.cmd_sn == 10));
    assert!(reqs.iter().all(|r| r.lun == encode_lun(1) && ![a, b, d].contains(&r.itt)));
    assert_eq!(c.pending_task_management(), 3);
    let answer = |t: &mut Target, itt: u32, response: u8| {
        let stat_sn = t.stat_sn;
        t.stat_sn += 1;
        t.bytes(
            Header::TaskMgmtResponse(TaskMgmtResponse {
                response,
                itt,
                stat_sn,
                exp_cmd_sn: 10,
                max_cmd_sn: 30,
            }),
            &[],
        )
    };
    let mut input = answer(&mut t, reqs[0].itt, 0);
    input.extend_from_slice(&answer(&mut t, reqs[1].itt, 1));
    input.extend_from_slice(&answer(&mut t, reqs[2].itt, 5)); // function not supported
    c.handle_input(&mut input, &mut w).unwrap();
    assert_eq!(c.pending_task_management(), 0);
    let done = completed(&mut c);
    assert_eq!(done.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![a, b]);
    assert!(done.iter().all(|(_, r)| matches!(r, Err(CommandError::Aborted(_)))));
    assert_eq!(c.in_flight(), 1, "a task the target did not abort stays");
    c.forget_tasks();
    let done = completed(&mut c);
    assert_eq!(done.len(), 1);
    assert!(matches!(done[0], (i, Err(CommandError::Aborted(_))) if i == d));
    assert_eq!(c.in_flight(), 0);
    // An answer to no request breaks the protocol.
    let mut bogus = answer(&mut t, 0x7777, 0);
    assert!(matches!(c.handle_input(&mut bogus, &mut w), Err(ConnError::UnknownItt { .. })));
}

/// A command overtakes the Data-Out queued before it on the connection
/// (in an MC/S session a command held back on one connection holds back
/// every later CmdSN on the others), while each task's own data follows
/// its command in offset order, in segments of at most `SHORT_SEGMENT`
/// however large a segment the target accepts.
#[test]
fn commands_overtake_queued_data_out() {
    let big = 16 << 20;
    let p = Params { first_burst: big, max_burst: big, max_send_data_segment: big, ..params() };
    let mut c = Connection::new(p.clone(), 0, 0).with_cid(5).with_short_segments();
    let t = Target::new();
    let write = |n: usize, seed: u8| -> Bytes {
        (0..n).map(|i| (i as u8).wrapping_add(seed)).collect::<Vec<u8>>().into()
    };
    let (a, b) = (write(1 << 20, 1), write(1 << 20, 2));
    let ia = c
        .start_command(Command { cdb: scsi::write16(0, 2048, false), dir: DataDir::Write(a.clone()) }, 1)
        .unwrap();
    // A's command and its first Data-Out go out before B is started.
    let mut first = t.drain_n(&mut c, 2);
    let ib = c
        .start_command(Command { cdb: scsi::write16(4096, 2048, false), dir: DataDir::Write(b.clone()) }, 2)
        .unwrap();
    let ic = c.start_command(Command { cdb: scsi::read16(0, 8), dir: DataDir::Read(4096) }, 3).unwrap();
    first.extend(t.drain(&mut c));
    // Task tags are unique across the session: this connection's carry its CID.
    assert!([ia, ib, ic].iter().all(|itt| itt >> 16 == 5));
    let order: Vec<(u32, u32)> = first
        .iter()
        .map(|p| match p.header {
            Header::ScsiCommand(h) => (h.itt, h.cmd_sn),
            Header::DataOut(d) => (d.itt, d.buffer_offset),
            h => panic!("{h:?}"),
        })
        .collect();
    let seg = SHORT_SEGMENT;
    let imm = SHORT_IMMEDIATE as u32;
    let mut want = vec![(ia, 1), (ia, imm), (ib, 2), (ic, 3)];
    // 1 MiB - 64 KiB of Data-Out: three full segments and one of 192 KiB.
    want.extend((1..4).map(|k| (ia, imm + k * seg)));
    want.extend((0..4).map(|k| (ib, imm + k * seg)));
    assert_eq!(order, want);
    // Every byte of each write, once, in order.
    for (itt, data) in [(ia, &a), (ib, &b)] {
        let mut got = Vec::new();
        for p in first.iter().filter(|p| p.header.itt() == itt) {
            assert!(p.data.len() <= seg as usize);
            got.extend_from_slice(&p.data);
        }
        assert_eq!(&got[..], &data[..]);
    }
    // Without short segments a write is one PDU when the target takes it.
    let mut c = Connection::new(p, 0, 0);
    c.start_command(Command { cdb: scsi::write16(0, 2048, false), dir: DataDir::Write(a.clone()) }, 1)
        .unwrap();
    let sent = t.drain(&mut c);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].data, a);
}

/// A login's tag lies in its own connection's range, away from the tags of
/// every other connection of the session and from the reserved tag.
#[test]
fn login_tags_stay_in_their_connections_range() {
    for cid in [0u16, 1, 5, 0x1000, 0xFFFE] {
        let tag = login_tag(cid);
        assert_eq!(tag >> 16, u32::from(cid));
        assert_ne!(tag, RESERVED_TAG);
        // The connection's first commands come from the start of the range.
        let mut c = Connection::new(params(), 0, 0).with_cid(cid);
        let itt = c.start_command(Command { cdb: scsi::read16(0, 8), dir: DataDir::Read(4096) }, 1).unwrap();
        assert_eq!(itt, u32::from(cid) << 16 | 1);
    }
}

#[test]
fn queued_bytes_count_the_pdus_not_yet_handed_out() {
    // 20000 bytes: 4096 immediate, 4096 unsolicited, 11808 waiting for R2Ts.
    let mut c = Connection::new(params(), 0, 0);
    let mut w = CmdWindow::new(1, 1, 10);
    let t = Target::new();
    assert_eq!(c.queued_bytes(), 0);
    let data = Bytes::from(vec![5u8; 20000]);
    let itt =
        c.start_command(Command { cdb: scsi::write16(0, 40, false), dir: DataDir::Write(data) }, 1).unwrap();
    let header = BHS_LEN as u64;
    assert_eq!(c.queued_bytes(), 2 * (header + 4096));
    t.drain(&mut c);
    assert_eq!(c.queued_bytes(), 0, "what no R2T asked for yet is not queued");
    let mut b = r2t_bytes(&t, itt, 0, 8192, 8192);
    c.handle_input(&mut b, &mut w).unwrap();
    // The R2T's 8192 bytes are queued as two Data-Out PDUs of 4096.
    assert_eq!(c.queued_bytes(), 2 * (header + 4096));
    t.drain_n(&mut c, 1);
    assert_eq!(c.queued_bytes(), header + 4096);
    assert_eq!(c.queued_bytes(), c.queued_now());
    // A command queued meanwhile counts too.
    c.start_command(read_cmd(512), 2).unwrap();
    assert_eq!(c.queued_bytes(), header + header + 4096);
    t.drain(&mut c);
    assert_eq!(c.queued_bytes(), 0);
    // A failed connection holds nothing.
    c.start_command(read_cmd(512), 3).unwrap();
    c.fail(ConnError::Closed("test".into()));
    assert_eq!(c.queued_bytes(), 0);
}
