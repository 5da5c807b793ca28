//! `wanblk copy` both directions against tgtd LUNs of 512-byte and
//! 4096-byte blocks, with a request size that is not a multiple of 4096
//! (the pool fits requests to the LUN's block size): 256 MiB of random
//! data checked by sha256, over 2 sessions.

mod common;
use common::*;

fn with_block_size(block: u32) {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0xb10c + u64::from(block)).unwrap();
    let lun = iscsi_lun(&format!("iqn.2024-01.test:copy-bs{block}"), Some(block));
    iscsi_round_trip(dir.path(), &src, &sha, &lun, 2, &["--request-size", "1000K"]);
    let show = lun.tgt.tgtadm(&["--op", "show", "--mode", "target"]);
    let lun1 = show.split("LUN: 1").nth(1).unwrap_or_default();
    assert!(lun1.contains(&format!("Block size: {block}\n")), "the LUN has {block}-byte blocks:\n{show}");
    for which in ["backup", "restore"] {
        let r = report(&dir.path().join(format!("{which}.json")));
        let rs = r["request_size"].as_u64().unwrap();
        assert!(
            rs.is_multiple_of(u64::from(block)) && rs <= 1_024_000,
            "{which}: request size {rs} fitted to {block}"
        );
    }
}

#[test]
fn blocks_of_512_bytes() {
    with_block_size(512);
}

#[test]
fn blocks_of_4096_bytes() {
    with_block_size(4096);
}
