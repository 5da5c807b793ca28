//! NBD machines driven to the phase a target fuzzes.

use bytes::Bytes;
use wanblk_nbd_proto::client::BlockSizes;
use wanblk_nbd_proto::consts::{FLAG_C_FIXED_NEWSTYLE, FLAG_C_NO_ZEROES, tflags};
use wanblk_nbd_proto::{Client, ClientConfig, ExportConfig, Request, Server, ServerConfig};

/// The server configuration every target uses.
pub fn server_config() -> ServerConfig {
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
    }
}

/// Splits fuzz input into pieces at the positions its first byte picks, so
/// partial frames are exercised.
pub fn pieces(data: &[u8]) -> Vec<&[u8]> {
    let Some((&step, rest)) = data.split_first() else { return vec![] };
    let step = usize::from(step).max(1);
    rest.chunks(step).collect()
}

/// A client and a server in transmission with structured replies and
/// `base:allocation`, handshake done in memory.
pub fn connected_pair() -> (Client, Server) {
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
/// (cookies 1..=7).
pub fn client_with_requests() -> Client {
    let (mut c, _) = connected_pair();
    let reqs = [
        Request::Read { offset: 0, length: 64 },
        Request::Read { offset: 4096, length: 4096 },
        Request::Write { offset: 0, data: Bytes::from_static(b"abcd"), fua: true },
        Request::Flush,
        Request::Trim { offset: 0, length: 512, fua: false },
        Request::WriteZeroes { offset: 512, length: 512, no_hole: true, fua: false },
        Request::BlockStatus { offset: 0, length: 8192, req_one: false },
    ];
    for r in reqs {
        c.send_request(r).expect("request");
    }
    while c.poll_transmit().is_some() {}
    c
}

/// A server that has read the client flags (option haggling).
pub fn server_in_options() -> Server {
    let mut s = Server::new(server_config());
    s.handle_input(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes()).expect("flags");
    while s.poll_transmit().is_some() {}
    s
}

/// A server in transmission.
pub fn server_in_transmission() -> Server {
    let (_, mut s) = connected_pair();
    while s.poll_transmit().is_some() {}
    s
}
