//! `wanblk copy` both directions against qemu-nbd, 1 and 4 connections,
//! 256 MiB of random data checked by sha256.

mod common;
use common::*;

fn with_qemu_nbd(conns: usize) {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0x9e40 + conns as u64).unwrap();
    let disk = dir.path().join("disk.img");
    sparse_file(&disk, IMAGE);
    let (_q, uri) = peers::qemu_nbd(dir.path(), &disk);
    round_trip(dir.path(), &src, &sha, &uri, conns);
    assert_eq!(sha256_file(&disk).unwrap(), sha, "qemu-nbd's backing file holds the data");
}

#[test]
fn one_connection() {
    with_qemu_nbd(1);
}

#[test]
fn four_connections() {
    with_qemu_nbd(4);
}
