//! Arbitrary server bytes into the NBD client handshake.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wanblk_fuzz::nbd::pieces;
use wanblk_nbd_proto::{Client, ClientConfig, Goal};

fuzz_target!(|data: &[u8]| {
    let goal = match data.first().map(|b| b % 3) {
        Some(0) => Goal::Go,
        Some(1) => Goal::Info,
        _ => Goal::List,
    };
    let mut c = Client::new(ClientConfig { export_name: "disk".into(), goal, ..Default::default() });
    for p in pieces(data) {
        if c.handle_input(p).is_err() {
            break;
        }
        while c.poll_transmit().is_some() {}
        while c.poll_event().is_some() {}
    }
});
