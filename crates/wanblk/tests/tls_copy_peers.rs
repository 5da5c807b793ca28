//! `wanblk copy nbds://...` both directions against real TLS servers:
//! nbdkit `--tls=require` with nbdkit's tls-certificates layout, and
//! qemu-nbd with `--object tls-creds-x509` (which also verifies our client
//! certificate). Certificates are made at test time; every copy is checked
//! by sha256, and no output shows private key material.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use wanblk_testkit::tls::{Ca, key_material};
use wanblk_testkit::{Peer, free_port, require_tool, wait_for_tcp};

const SIZE: u64 = 32 << 20;

/// Copies `src` to `uri` and back with `--tls-certificates client`, checks
/// both by sha256, and collects the outputs.
fn both_directions(dir: &std::path::Path, uri: &str, client: &std::path::Path, outs: &mut Outputs) -> String {
    let src = dir.join("src.img");
    let sha = random_file(&src, SIZE, 0x7155).unwrap();
    let certs = client.to_str().unwrap();
    let rep = dir.join("backup.json");
    let out = copy_ok(&[
        src.to_str().unwrap(),
        uri,
        "-C",
        "2",
        "--tls-certificates",
        certs,
        "--report",
        rep.to_str().unwrap(),
    ]);
    outs.output("backup", &out).file(&rep);
    let back = dir.join("back.img");
    let rep = dir.join("restore.json");
    let out = copy_ok(&[
        uri,
        back.to_str().unwrap(),
        "-C",
        "2",
        "--tls-certificates",
        certs,
        "--verify",
        "--checksum",
        "--report",
        rep.to_str().unwrap(),
    ]);
    outs.output("restore", &out).file(&rep);
    assert_eq!(sha256_file(&back).unwrap(), sha, "restored over TLS equals the source");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), sha);
    sha
}

fn secrets(dirs: &[&std::path::Path]) -> Vec<String> {
    let mut v = Vec::new();
    for d in dirs {
        for k in ["server-key.pem", "client-key.pem"] {
            if let Ok(pem) = std::fs::read_to_string(d.join(k)) {
                v.extend(key_material(&pem));
            }
        }
    }
    assert!(!v.is_empty());
    v
}

#[test]
fn nbdkit_tls_require() {
    require_tool("nbdkit", "nbdkit");
    let dir = tempdir();
    let ca = Ca::new("test CA");
    let server = ca.write_server(&dir.path().join("server"), false);
    let client = ca.write_ca(&dir.path().join("client"));
    let disk = dir.path().join("disk.img");
    sparse_file(&disk, SIZE);
    let port = free_port();
    let log = dir.path().join("nbdkit.stderr");
    let _nbdkit = Peer::spawn(
        "nbdkit",
        Command::new("nbdkit")
            .args(["-f", "--exit-with-parent", "-i", "127.0.0.1", "-p", &port.to_string(), "--tls=require"])
            .arg(format!("--tls-certificates={}", server.display()))
            .args(["file", disk.to_str().unwrap()])
            .stderr(std::fs::File::create(&log).unwrap()),
    );
    wait_for_tcp(([127, 0, 0, 1], port).into(), Duration::from_secs(10));
    let uri = format!("nbds://127.0.0.1:{port}/");
    let mut outs = Outputs::default();
    let sha = both_directions(dir.path(), &uri, &client, &mut outs);
    assert_eq!(sha256_file(&disk).unwrap(), sha, "nbdkit's file holds what was backed up");

    // The same server refuses clear text, and wanblk says why.
    let out = copy(&[&format!("nbd://127.0.0.1:{port}/"), "null:"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NBD_REP_ERR_TLS_REQD") && err.contains("nbds://"), "{err}");
    outs.output("clear text", &out).file(&log);
    outs.assert_no_secret(&secrets(&[&server, &client]));
}

#[test]
fn qemu_nbd_tls_creds_x509_with_client_certificate() {
    require_tool("qemu-nbd", "qemu-utils");
    let dir = tempdir();
    let ca = Ca::new("test CA");
    let server = ca.write_server(&dir.path().join("server"), false);
    let client = ca.write_client(&dir.path().join("client"), "wanblk-client");
    let disk = dir.path().join("disk.img");
    sparse_file(&disk, SIZE);
    let port = free_port();
    let log = dir.path().join("qemu-nbd.stderr");
    let _qemu = Peer::spawn(
        "qemu-nbd",
        Command::new("qemu-nbd")
            .arg("--object")
            .arg(format!("tls-creds-x509,id=tls0,endpoint=server,dir={},verify-peer=on", server.display()))
            .args(["--tls-creds", "tls0", "-f", "raw", "--shared=8", "-t", "-b", "127.0.0.1"])
            .args(["-p", &port.to_string(), disk.to_str().unwrap()])
            .stderr(std::fs::File::create(&log).unwrap()),
    );
    wait_for_tcp(([127, 0, 0, 1], port).into(), Duration::from_secs(10));
    let uri = format!("nbds://127.0.0.1:{port}/");
    let mut outs = Outputs::default();
    let sha = both_directions(dir.path(), &uri, &client, &mut outs);
    assert_eq!(sha256_file(&disk).unwrap(), sha, "qemu-nbd's file holds what was backed up");

    // Without a client certificate qemu-nbd (verify-peer=on) refuses us.
    let no_cert = ca.write_ca(&dir.path().join("no-cert"));
    let out = copy(&[&uri, "null:", "--tls-certificates", no_cert.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("TLS"), "{err}");
    outs.output("no client certificate", &out).file(&log);
    outs.assert_no_secret(&secrets(&[&server, &client]));
}
