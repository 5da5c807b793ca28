//! A LUN on tgt's null backing store (what the iSCSI benchmark uses):
//! 1 TiB whatever the path says, writes accepted and dropped, reads
//! answered with the right length, for 512- and 4096-byte blocks.

mod common;

use common::{Tgt, pattern, within};
use wanblk_blockdev::Endpoint;
use wanblk_iscsi::IscsiConnector;
use wanblk_testkit::tgt::NULL_LUN_SIZE;

#[tokio::test]
async fn null_store_accepts_io_anywhere() {
    let tgt = Tgt::start();
    tgt.null_target(1, "iqn.2024-01.test:null512", None);
    tgt.null_target(2, "iqn.2024-01.test:null4k", Some(4096));
    tgt.lfn(1);
    for (iqn, block) in [("iqn.2024-01.test:null512", 512), ("iqn.2024-01.test:null4k", 4096)] {
        let c = IscsiConnector::parse(&tgt.uri(iqn)).unwrap();
        let ep = within(30, c.connect_endpoint()).await.unwrap();
        assert_eq!(ep.size(), NULL_LUN_SIZE, "{iqn}");
        assert_eq!(ep.block_len(), block, "{iqn}");
        // The contents of reads are unspecified: tgt sends its buffer as
        // it is (zeroes when freshly mapped, an earlier command's bytes
        // when reused).
        for off in [0, NULL_LUN_SIZE - (8 << 20)] {
            within(30, ep.write(off, pattern(4 << 20, off), false)).await.unwrap();
            assert_eq!(within(30, ep.read(off, 4 << 20)).await.unwrap().len(), 4 << 20, "{iqn}");
        }
        within(30, ep.close()).await.unwrap();
    }
}
