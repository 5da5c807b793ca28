//! `wanblk copy` both directions against nbdkit's file plugin, 1 and 4
//! connections, 256 MiB of random data checked by sha256.

mod common;
use common::*;

fn with_nbdkit(conns: usize) {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0x5eed + conns as u64).unwrap();
    let disk = dir.path().join("disk.img");
    sparse_file(&disk, IMAGE);
    let (_nbdkit, uri) = peers::nbdkit(dir.path(), &["file", disk.to_str().unwrap()]);
    round_trip(dir.path(), &src, &sha, &uri, conns);
    assert_eq!(sha256_file(&disk).unwrap(), sha, "nbdkit's backing file holds the data");
}

#[test]
fn one_connection() {
    with_nbdkit(1);
}

#[test]
fn four_connections() {
    with_nbdkit(4);
}
