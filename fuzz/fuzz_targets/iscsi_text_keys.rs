//! Arbitrary bytes as login text: the key=value parser, then the operational
//! negotiation checking them as the target's answers (leading and added
//! connections), then the numeric, boolean and binary value parsers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wanblk_iscsi_proto::keys::{Negotiation, Params, long_fat_network_offer};
use wanblk_iscsi_proto::text;

fuzz_target!(|data: &[u8]| {
    let Ok(pairs) = text::parse(data) else { return };
    for leading in [true, false] {
        let mut n = Negotiation::new(&long_fat_network_offer(4), leading);
        if n.handle(&pairs).is_ok() {
            let _ = n.take_replies();
            let _ = n.finish(Some(&Params::default()));
        }
    }
    for (k, v) in &pairs {
        let _ = text::parse_number(k, v);
        let _ = text::parse_bool(k, v);
        let _ = text::parse_binary(k, v);
    }
    // Encoding what was parsed parses back the same.
    assert_eq!(text::parse(&text::encode(&pairs)).ok(), Some(pairs));
});
