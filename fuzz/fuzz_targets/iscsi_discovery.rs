//! Arbitrary target bytes into the SendTargets discovery exchange.
//!
//! The body is `wanblk_iscsi_proto::fuzzing::discovery`, which the seed replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wanblk_iscsi_proto::fuzzing::discovery(data);
});
