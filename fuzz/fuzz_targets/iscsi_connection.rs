//! Arbitrary target bytes into a full-feature connection with a read, a
//! write and a ping in flight.
//!
//! The body is `wanblk_iscsi_proto::fuzzing::connection`, which the seed replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wanblk_iscsi_proto::fuzzing::connection(data);
});
