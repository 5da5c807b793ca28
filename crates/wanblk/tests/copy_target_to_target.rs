//! `wanblk copy` from one network store straight to another (the README's
//! `wanblk copy nbd://a/x nbd+unix:///y?socket=...`): NBD over TCP to NBD
//! over a Unix socket, and iSCSI to NBD. Both stores get their own pool
//! and every session of both carries data; the destination's backing file
//! is checked by sha256.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use wanblk_testkit::{Peer, free_port, require_tool, wait_for_tcp};

const SIZE: u64 = 64 << 20;

/// Copies `src_uri` to a fresh qemu-nbd export over `-C 2` and checks the
/// export's backing file, the printed sha256 and both stores' sessions.
fn copy_to_qemu_nbd(dir: &std::path::Path, src_uri: &str, sha: &str) {
    let disk = dir.join("dst.img");
    sparse_file(&disk, SIZE);
    let (_q, dst_uri) = peers::qemu_nbd(dir, &disk);
    let rep = dir.join("r.json");
    let out =
        copy_ok(&[src_uri, &dst_uri, "-C", "2", "--flush", "--checksum", "--report", rep.to_str().unwrap()]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), sha, "--checksum printed the source's sha256");
    assert_eq!(sha256_file(&disk).unwrap(), sha, "the destination store holds the source");
    let r = report(&rep);
    assert_eq!(r["complete"], true, "{r}");
    assert_eq!((r["bytes"].as_u64(), r["data_bytes"].as_u64()), (Some(SIZE), Some(SIZE)), "{r}");
    let stores = r["stores"].as_array().expect("stores");
    assert_eq!(stores.len(), 2, "two network stores, one pool each: {r}");
    for s in stores {
        let bytes: Vec<u64> =
            s["session_bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).collect();
        assert_eq!(bytes.len(), 2, "{}: 2 sessions: {bytes:?}", s["name"]);
        assert!(bytes.iter().all(|&b| b > 0), "{}: every session carried data: {bytes:?}", s["name"]);
        assert_eq!(bytes.iter().sum::<u64>(), SIZE, "{}: the sessions carried the image once", s["name"]);
    }
}

#[test]
fn nbd_over_tcp_to_nbd_over_a_unix_socket() {
    require_tool("nbdkit", "nbdkit");
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, SIZE, 0x7272).unwrap();
    let port = free_port();
    let _nbdkit = Peer::spawn(
        "nbdkit",
        Command::new("nbdkit")
            .args(["-f", "--exit-with-parent", "-r", "-i", "127.0.0.1", "-p", &port.to_string(), "file"])
            .arg(&src),
    );
    wait_for_tcp(([127, 0, 0, 1], port).into(), Duration::from_secs(10));
    copy_to_qemu_nbd(dir.path(), &format!("nbd://127.0.0.1:{port}/"), &sha);
}

#[test]
fn iscsi_to_nbd() {
    let dir = tempdir();
    let tgt = wanblk_testkit::tgt::Tgt::start();
    let lun = tgt.file("lun.img", SIZE);
    let sha = random_file(&lun, SIZE, 0x7273).unwrap();
    tgt.target(1, "iqn.2024-01.test:target-to-target", &lun, None, false);
    copy_to_qemu_nbd(dir.path(), &tgt.uri("iqn.2024-01.test:target-to-target"), &sha);
}
