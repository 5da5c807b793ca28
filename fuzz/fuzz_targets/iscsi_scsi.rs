//! Arbitrary bytes into the SCSI parsers: sense data, INQUIRY and VPD
//! pages, READ CAPACITY(16); CDB fields read back.
//!
//! The body is `wanblk_iscsi_proto::fuzzing::scsi_parsers`, which the seed replay
//! test also runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wanblk_iscsi_proto::fuzzing::scsi_parsers(data);
});
