//! Arbitrary client bytes into the NBD server's option haggling.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wanblk_fuzz::nbd::{pieces, server_in_options};

fuzz_target!(|data: &[u8]| {
    let mut s = server_in_options();
    for p in pieces(data) {
        if s.handle_input(p).is_err() {
            break;
        }
        while s.poll_transmit().is_some() {}
        while s.poll_event().is_some() {}
    }
});
