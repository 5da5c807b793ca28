//! Arbitrary server bytes into the NBD client handshake.
//!
//! The body is `wanblk_nbd_proto::fuzzing::client_handshake`, which the seed replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wanblk_nbd_proto::fuzzing::client_handshake(data);
});
