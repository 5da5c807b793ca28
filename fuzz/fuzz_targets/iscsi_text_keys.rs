//! Arbitrary bytes as login text: the key=value parser, the operational
//! negotiation and the value parsers.
//!
//! The body is `wanblk_iscsi_proto::fuzzing::text_keys`, which the seed replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wanblk_iscsi_proto::fuzzing::text_keys(data);
});
