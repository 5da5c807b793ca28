//! `--stop-after SECS`: a time-boxed copy stops issuing requests, finishes
//! what it started and ends incomplete: it exits 0 (the stop was asked
//! for) but says on stderr that it stopped early and where the bytes are,
//! the report says `"complete": false`, a new destination keeps its
//! .wanblk-part name, and what it holds is exactly the source's data at
//! the right offsets (every other block still a hole).

mod common;

use common::*;
use sha2::{Digest, Sha256};
use wanblk_testkit::data::BLOCK;
use wanblk_testkit::{check_blocks, free_port, require_tool};

const SIZE: u64 = 64 << 20;
const SEED: u64 = 0x570b;

#[test]
fn a_stopped_copy_is_incomplete_and_keeps_its_part_file() {
    require_tool("nbdkit", "nbdkit");
    let dir = tempdir();
    let src = dir.path().join("src.img");
    random_file(&src, SIZE, SEED).unwrap();
    let port = free_port();
    // 50 Mbit/s: the whole image would take over 10 s.
    let (_nbdkit, nbdkit_uri) =
        peers::nbdkit_tcp(port, &["-r", "--filter=rate", "file", src.to_str().unwrap(), "rate=50M"]);
    let (dst, rep) = (dir.path().join("dst.img"), dir.path().join("r.json"));
    // Small requests, so what is in flight at the stop finishes soon.
    let out = copy(&[
        &nbdkit_uri,
        dst.to_str().unwrap(),
        "-C",
        "2",
        "-R",
        "2",
        "--request-size",
        "256K",
        "--stop-after",
        "1",
        "--report",
        rep.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "a time-boxed copy that stopped as asked exits 0: {}\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains("stopped early (--stop-after), copied"),
        "stderr says it stopped early: {stderr}"
    );
    assert!(stderr.contains("dst.img.wanblk-part holds them"), "stderr says where the bytes are: {stderr}");

    let r = report(&rep);
    assert_eq!(r["complete"], false, "{r}");
    let data = r["data_bytes"].as_u64().unwrap();
    assert!(data > 0 && data < SIZE, "some, not all, was copied: {r}");
    assert!(!dst.exists(), "the destination is not renamed into place");
    let part = dir.path().join("dst.img.wanblk-part");
    let held = std::fs::read(&part).expect("the .wanblk-part file stays");
    assert_eq!(held.len() as u64, SIZE, "{}", part.display());

    // Every block is the source's own or still a hole; as many bytes of
    // data as the report says.
    let mut copied = 0u64;
    let mut expected = Vec::with_capacity(held.len());
    for (i, b) in held.chunks(BLOCK as usize).enumerate() {
        let at = i as u64 * BLOCK;
        if b.iter().all(|&x| x == 0) {
            expected.extend_from_slice(b);
        } else {
            check_blocks(b, at, SEED).unwrap_or_else(|e| panic!("block at {at}: {e}"));
            expected.extend_from_slice(&wanblk_testkit::block_data(at, b.len(), SEED));
            copied += BLOCK;
        }
    }
    assert_eq!(copied, data, "the part file holds exactly the data the report counts");
    assert_eq!(
        hex::encode(Sha256::digest(&held)),
        hex::encode(Sha256::digest(&expected)),
        "the part file is the source where it was copied"
    );
}
