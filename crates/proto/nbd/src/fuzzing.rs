//! Fuzz bodies: one function per NBD target of the cargo-fuzz workspace in
//! `fuzz/` (which enables the `fuzzing` feature and calls them), and the
//! test that replays every committed seed of those targets
//! (`fuzz/seeds/<target>/*`) through the same functions on stable Rust, so
//! CI runs the corpus without a fuzzer. Not part of the crate's API.
//!
//! A body may panic only when this crate is wrong: every input is the
//! peer's, and a peer gets a typed error, never a panic. A body returns the
//! first error the machine reported, so the replay can check that every
//! seed named `bad_*` is refused and every other seed is not.

use bytes::{BufMut, Bytes, BytesMut};

use crate::consts::{FLAG_C_FIXED_NEWSTYLE, FLAG_C_NO_ZEROES, tflags};
use crate::server::TlsPolicy;
use crate::{
    BlockDescriptor, BlockSizes, Client, ClientConfig, Command, ExportConfig, Goal, NbdError, ReadChunk,
    Request, Server, ServerConfig, ServerEvent,
};

/// A fuzz body: `Err` with the machine's error message when it refused the input.
pub type Body = fn(&[u8]) -> Result<(), String>;

/// Every NBD fuzz target: its name in `fuzz/Cargo.toml` and its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("nbd_client_handshake", client_handshake),
    ("nbd_client_replies", client_replies),
    ("nbd_server_options", server_options),
    ("nbd_server_requests", server_requests),
];

/// Arbitrary server bytes into the client handshake; the first byte picks
/// the goal (GO, INFO or LIST) and, from 0x80 to 0xbf, NBD_OPT_STARTTLS
/// first, with pieces of `(byte & 0x3f) + 1` bytes (the TLS handshake is
/// taken as done between two pieces).
pub fn client_handshake(data: &[u8]) -> Result<(), String> {
    let first = data.first().copied().unwrap_or(0);
    let goal = match first % 3 {
        0 => Goal::Go,
        1 => Goal::Info,
        _ => Goal::List,
    };
    let tls = (0x80..0xc0).contains(&first);
    let mut c = Client::new(ClientConfig { export_name: "disk".into(), goal, tls, ..Default::default() });
    let step = if tls { usize::from(first & 0x3f) + 1 } else { usize::from(first).max(1) };
    for p in data.get(1..).unwrap_or_default().chunks(step) {
        c.handle_input(p).map_err(|e| e.to_string())?;
        while c.poll_transmit().is_some() {}
        while let Some(ev) = c.poll_event() {
            if ev == crate::Event::StartTls {
                c.tls_established();
            }
        }
    }
    Ok(())
}

/// Arbitrary server bytes into the client's transmission phase, with a
/// request of every kind in flight, fed as a socket driver does: read data
/// the client lends a buffer for goes straight into it.
pub fn client_replies(data: &[u8]) -> Result<(), String> {
    let mut c = client_with_requests();
    let mut staging = BytesMut::new();
    for mut p in pieces(data) {
        while !p.is_empty() {
            let lent = if staging.is_empty() { c.lend_payload() } else { None };
            if let Some(mut l) = lent {
                let n = l.want().min(p.len());
                l.room().put_slice(&p[..n]);
                p = &p[n..];
                c.return_payload(l).map_err(|e| e.to_string())?;
            } else {
                staging.extend_from_slice(p);
                p = &[];
                c.handle_input_buf(&mut staging).map_err(|e| e.to_string())?;
            }
            while c.poll_event().is_some() {}
        }
    }
    Ok(())
}

/// Arbitrary client bytes into the server's option haggling.
pub fn server_options(data: &[u8]) -> Result<(), String> {
    let mut s = server_in_options();
    for p in pieces(data) {
        s.handle_input(p).map_err(|e| e.to_string())?;
        while s.poll_transmit().is_some() {}
        while let Some(ev) = s.poll_event() {
            if ev == ServerEvent::StartTls {
                s.tls_established();
            }
        }
    }
    Ok(())
}

/// Arbitrary client bytes into the server's transmission phase; every
/// decoded request is answered, so reply encoding runs too.
pub fn server_requests(data: &[u8]) -> Result<(), String> {
    let mut s = server_in_transmission();
    for p in pieces(data) {
        s.handle_input(p).map_err(|e| e.to_string())?;
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
                    Command::Read => {
                        s.reply_read(r.cookie, r.offset, Bytes::from(vec![0u8; r.length as usize]))
                    }
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
    Ok(())
}

/// The server configuration every target uses.
fn server_config() -> ServerConfig {
    ServerConfig {
        exports: vec![ExportConfig {
            name: "disk".into(),
            description: "fuzz".into(),
            size: 1 << 20,
            flags: tflags::SEND_FLUSH
                | tflags::SEND_FUA
                | tflags::SEND_TRIM
                | tflags::SEND_WRITE_ZEROES
                | tflags::SEND_DF
                | tflags::CAN_MULTI_CONN,
            block_sizes: BlockSizes { minimum: 1, preferred: 4096, maximum: 65536 },
            base_allocation: true,
        }],
        structured_replies: true,
        tls: TlsPolicy::Optional,
    }
}

/// Splits fuzz input into pieces of the size its first byte picks, so
/// partial frames are exercised.
fn pieces(data: &[u8]) -> Vec<&[u8]> {
    let Some((&step, rest)) = data.split_first() else { return vec![] };
    let step = usize::from(step).max(1);
    rest.chunks(step).collect()
}

/// A client and a server in transmission with structured replies and
/// `base:allocation`, handshake done in memory.
fn connected_pair() -> (Client, Server) {
    let mut c = Client::new(ClientConfig { export_name: "disk".into(), ..Default::default() });
    let mut s = Server::new(server_config());
    for _ in 0..16 {
        while let Some(b) = s.poll_transmit() {
            c.handle_input(&b).expect("handshake");
        }
        while let Some(b) = c.poll_transmit() {
            s.handle_input(&b).expect("handshake");
        }
        while s.poll_event().is_some() {}
        if c.is_transmission() {
            break;
        }
    }
    while c.poll_event().is_some() {}
    assert!(c.is_transmission());
    (c, s)
}

/// A client in transmission with one request of every kind in flight
/// (cookies 1..=8; 8 reads into a buffer that holds a byte already).
fn client_with_requests() -> Client {
    let (mut c, _) = connected_pair();
    let reqs = [
        Request::Read { offset: 0, length: 64 },
        Request::Read { offset: 4096, length: 4096 },
        Request::Write { offset: 0, data: Bytes::from_static(b"abcd"), fua: true },
        Request::Flush,
        Request::Trim { offset: 0, length: 512, fua: false },
        Request::WriteZeroes { offset: 512, length: 512, no_hole: true, fua: false },
        Request::BlockStatus { offset: 0, length: 8192, req_one: false },
        Request::ReadInto { offset: 8192, length: 512, buf: BytesMut::from(&b"x"[..]) },
    ];
    for r in reqs {
        c.send_request(r).expect("request");
    }
    while c.poll_transmit().is_some() {}
    c
}

/// A server that has read the client flags (option haggling).
fn server_in_options() -> Server {
    let mut s = Server::new(server_config());
    s.handle_input(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes()).expect("flags");
    while s.poll_transmit().is_some() {}
    s
}

/// A server in transmission.
fn server_in_transmission() -> Server {
    let (_, mut s) = connected_pair();
    while s.poll_transmit().is_some() {}
    s
}

#[cfg(test)]
mod tests {
    include!("../../shared-tests/fuzz_replay.rs");

    #[test]
    fn every_seed_replays_without_a_panic() {
        replay_seeds(super::TARGETS);
    }

    #[test]
    fn every_nbd_fuzz_target_is_replayed() {
        targets_are_replayed("nbd_", super::TARGETS);
    }
}
