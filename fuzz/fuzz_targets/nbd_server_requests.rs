//! Arbitrary client bytes into the NBD server's transmission phase; every
//! decoded request is answered so reply encoding runs too.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use wanblk_fuzz::nbd::{pieces, server_in_transmission};
use wanblk_nbd_proto::{BlockDescriptor, Command, NbdError, ReadChunk, ServerEvent};

fuzz_target!(|data: &[u8]| {
    let mut s = server_in_transmission();
    for p in pieces(data) {
        if s.handle_input(p).is_err() {
            break;
        }
        while let Some(ev) = s.poll_event() {
            if let ServerEvent::Request(r) = ev {
                match r.command {
                    Command::Read if r.length > 1 => s.reply_read_chunks(
                        r.cookie,
                        vec![
                            ReadChunk::Data(r.offset, Bytes::from(vec![0u8; 1])),
                            ReadChunk::Hole(r.offset + 1, r.length - 1),
                        ],
                    ),
                    Command::Read => s.reply_read(r.cookie, r.offset, Bytes::from(vec![0u8; r.length as usize])),
                    Command::BlockStatus => {
                        s.reply_block_status(r.cookie, vec![BlockDescriptor { length: r.length, flags: 3 }])
                    }
                    Command::Flush => s.reply_error(r.cookie, NbdError::Io, "fuzz"),
                    _ => s.reply_ok(r.cookie),
                }
            }
        }
        while s.poll_transmit().is_some() {}
    }
});
