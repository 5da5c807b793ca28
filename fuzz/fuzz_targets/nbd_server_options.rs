//! Arbitrary client bytes into the NBD server's option haggling.
//!
//! The body is `wanblk_nbd_proto::fuzzing::server_options`, which the seed replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wanblk_nbd_proto::fuzzing::server_options(data);
});
