//! Arbitrary server bytes into the NBD client's transmission phase, with a
//! request of every kind in flight.
//!
//! The body is `wanblk_nbd_proto::fuzzing::client_replies`, which the seed replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wanblk_nbd_proto::fuzzing::client_replies(data);
});
