//! `wanblk copy` both directions against nbd-server (simple replies only),
//! 1 and 4 connections, 256 MiB of random data checked by sha256.

mod common;
use common::*;

fn with_nbd_server(conns: usize) {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0x4bd5 + conns as u64).unwrap();
    let disk = dir.path().join("disk.img");
    sparse_file(&disk, IMAGE);
    let (_d, uri) = peers::nbd_server(dir.path(), &disk);
    round_trip(dir.path(), &src, &sha, &uri, conns);
    assert_eq!(sha256_file(&disk).unwrap(), sha, "nbd-server's backing file holds the data");
}

#[test]
fn one_connection() {
    with_nbd_server(1);
}

#[test]
fn four_connections() {
    with_nbd_server(4);
}
