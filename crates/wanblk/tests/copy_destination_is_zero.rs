//! `--destination-is-zero`: holes and zero blocks of the source are skipped
//! instead of zeroed on the destination. Shown on an NBD export that holds
//! junk: without the flag the export ends up equal to the source (zeroes
//! written); with it, the junk stays exactly where the source reads as
//! zero and everything else is the source's data.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use common::*;
use sha2::{Digest, Sha256};

const SIZE: u64 = 16 << 20;
const MIB: u64 = 1 << 20;
const JUNK: u8 = 0x5a;

/// A sparse source: random data (every block carrying its offset) in
/// [0, 2M) and [6M, 7M), zeroes written out in [9M, 10M), holes elsewhere.
/// Returns its bytes.
fn sparse_source(path: &Path) -> Vec<u8> {
    let mut f = std::fs::File::create(path).unwrap();
    f.set_len(SIZE).unwrap();
    for (at, len, data) in [(0, 2 * MIB, true), (6 * MIB, MIB, true), (9 * MIB, MIB, false)] {
        let bytes = if data {
            wanblk_testkit::block_data(at, len as usize, 0xd12).to_vec()
        } else {
            vec![0; len as usize]
        };
        f.seek(SeekFrom::Start(at)).unwrap();
        f.write_all(&bytes).unwrap();
    }
    f.sync_all().unwrap();
    std::fs::read(path).unwrap()
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Copies `src` to a qemu-nbd export of a file full of junk; returns the
/// report and the file's bytes afterwards.
fn copy_onto_junk(dir: &Path, name: &str, src: &Path, extra: &[&str]) -> (serde_json::Value, Vec<u8>) {
    let disk = dir.join(format!("{name}.img"));
    std::fs::write(&disk, vec![JUNK; SIZE as usize]).unwrap();
    let (_q, uri) = peers::qemu_nbd(dir, &disk);
    let rep = dir.join(format!("{name}.json"));
    let mut args = vec![src.to_str().unwrap(), &uri, "-C", "2", "--flush", "--report", rep.to_str().unwrap()];
    args.extend(extra);
    copy_ok(&args);
    (report(&rep), std::fs::read(&disk).unwrap())
}

#[test]
fn zero_ranges_are_skipped_only_with_the_flag() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let source = sparse_source(&src);
    let data = 3 * MIB;

    // Without the flag: an existing export is not known to be zero, so
    // every zero range is zeroed there.
    let (r, got) = copy_onto_junk(dir.path(), "zeroed", &src, &[]);
    assert_eq!(sha(&got), sha(&source), "the export equals the source");
    assert_eq!(r["data_bytes"], data, "{r}");
    assert_eq!(r["zero_bytes"], SIZE - data, "the zero ranges were zeroed: {r}");
    assert_eq!(r["skipped_bytes"], 0, "{r}");

    // With it: the zero ranges are left alone, so the junk stays there.
    let (r, got) = copy_onto_junk(dir.path(), "skipped", &src, &["--destination-is-zero"]);
    assert_eq!(r["data_bytes"], data, "{r}");
    assert_eq!(r["zero_bytes"], 0, "nothing zeroed: {r}");
    assert_eq!(r["skipped_bytes"], SIZE - data, "the zero ranges were skipped: {r}");
    let expected: Vec<u8> = source
        .chunks(512)
        .flat_map(|b| if b.iter().all(|&x| x == 0) { vec![JUNK; b.len()] } else { b.to_vec() })
        .collect();
    assert_eq!(sha(&got), sha(&expected), "the source's data where it has data, untouched junk elsewhere");
}
