//! Arbitrary client bytes into the NBD server's transmission phase; every
//! decoded request is answered so reply encoding runs too.
//!
//! The body is `wanblk_nbd_proto::fuzzing::server_requests`, which the seed replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wanblk_nbd_proto::fuzzing::server_requests(data);
});
