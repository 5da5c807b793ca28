//! Arbitrary target bytes into a full-feature connection with a read, a
//! write (immediate, unsolicited and R2T data) and a ping in flight.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use wanblk_iscsi_proto::keys::Params;
use wanblk_iscsi_proto::{CmdWindow, Command, Connection, DataDir, scsi};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let params = Params {
        initial_r2t: flags & 1 != 0,
        immediate_data: flags & 2 != 0,
        header_digest: flags & 4 != 0,
        data_digest: flags & 8 != 0,
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
    let mut buf = BytesMut::new();
    for piece in rest.chunks(97) {
        buf.extend_from_slice(piece);
        let r = c.handle_input(&mut buf, &mut w);
        while c.poll_transmit().is_some() {}
        while c.poll_event().is_some() {}
        if r.is_err() {
            break;
        }
    }
});
