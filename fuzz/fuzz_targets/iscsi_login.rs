//! Arbitrary target bytes into the iSCSI login state machine (None and
//! CHAP, operational negotiation, MC/S).
//!
//! The body is `wanblk_iscsi_proto::fuzzing::login`, which the seed replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wanblk_iscsi_proto::fuzzing::login(data);
});
