//! Arbitrary bytes into the iSCSI PDU framer (BHS, AHS, padding, CRC32C
//! digests), then every typed header decoder. The first byte picks the
//! digests and a small MaxRecvDataSegmentLength so length checks are hit.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use wanblk_iscsi_proto::pdu::Codec;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let codec = Codec {
        header_digest: flags & 1 != 0,
        data_digest: flags & 2 != 0,
        max_recv_data: if flags & 4 != 0 { 512 } else { 1 << 16 },
    };
    let mut buf = BytesMut::from(rest);
    while let Ok(Some(pdu)) = codec.decode(&mut buf) {
        // Re-encoding a decoded PDU must decode to the same header.
        let out = codec.encode(&pdu.header, pdu.data.clone());
        let mut again = BytesMut::from(&out.to_vec()[..]);
        if let Ok(Some(p2)) = codec.decode(&mut again) {
            assert_eq!(p2.header, pdu.header);
            assert_eq!(p2.data, pdu.data);
        }
    }
});
