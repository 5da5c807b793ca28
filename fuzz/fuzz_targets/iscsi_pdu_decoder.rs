//! Arbitrary bytes into the iSCSI PDU framer (BHS, AHS, padding, CRC32C
//! digests), then every typed header decoder.
//!
//! The body is `wanblk_iscsi_proto::fuzzing::pdu_decoder`, which the seed replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wanblk_iscsi_proto::fuzzing::pdu_decoder(data);
});
