//! Arbitrary server bytes into the NBD client's transmission phase, with a
//! request of every kind in flight.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wanblk_fuzz::nbd::{client_with_requests, pieces};

fuzz_target!(|data: &[u8]| {
    let mut c = client_with_requests();
    for p in pieces(data) {
        if c.handle_input(p).is_err() {
            break;
        }
        while c.poll_event().is_some() {}
    }
});
