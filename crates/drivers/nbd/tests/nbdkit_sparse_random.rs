//! nbdkit's sparse-random plugin: block status and structured (hole) reads
//! against a reference copy made by nbdcopy.

mod common;

use common::*;
use wanblk_blockdev::Endpoint;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_status_and_reads_match_nbdcopy_reference() {
    wanblk_testkit::require_tool("nbdcopy", "libnbd-bin");
    let dir = wanblk_testkit::tempdir();
    let (_peer, uri) = nbdkit(dir.path(), &["sparse-random", "size=32M", "seed=42", "percent=30"]);
    let reference = dir.path().join("ref.img");
    wanblk_testkit::run(std::process::Command::new("nbdcopy").arg(&uri).arg(&reference));
    let want = std::fs::read(&reference).unwrap();
    let s = connect(&uri).await;
    assert!(s.capabilities().can_block_status);
    // Walk the whole disk by block status; holes must read as zero and data must match.
    let size = s.size();
    let mut pos = 0;
    let mut holes = 0;
    let mut data = 0;
    while pos < size {
        let ext = within(10, s.block_status(pos, size - pos)).await.unwrap();
        assert_eq!(ext[0].offset, pos);
        for e in ext {
            let mut o = e.offset;
            while o < e.offset + e.length {
                let n = (e.offset + e.length - o).min(4 << 20);
                let got = s.read(o, n as u32).await.unwrap();
                assert!(got[..] == want[o as usize..(o + n) as usize], "bytes at {o} differ");
                if e.zero {
                    assert!(got.iter().all(|b| *b == 0), "zero extent at {o} reads non-zero");
                }
                o += n;
            }
            if e.hole {
                holes += 1;
            } else {
                data += 1;
            }
            pos = e.offset + e.length;
        }
    }
    assert!(holes > 0 && data > 0, "holes {holes}, data {data}");
}
