//! `wanblk target --tls require`: libnbd's nbdinfo and nbdcopy connect with
//! `nbds://...?tls-certificates=DIR`, and so does `wanblk copy`; a wrong CA,
//! an expired certificate, a clear-text client, a PSK file and a client
//! certificate off the allow-list all fail with a clear message. No output
//! of any of it shows private key material.

mod common;

use std::process::Command;

use common::*;
use wanblk_testkit::tls::{Ca, key_material};
use wanblk_testkit::{require_tool, run_with_timeout};

const SIZE: u64 = 32 << 20;

fn nbd_tool(tool: &str, args: &[&str]) -> std::process::Output {
    require_tool(tool, "libnbd-bin");
    run_with_timeout(Command::new(tool).args(args), COPY_TIMEOUT)
}

fn keys(dirs: &[&std::path::Path]) -> Vec<String> {
    dirs.iter()
        .flat_map(|d| ["server-key.pem", "client-key.pem"].map(|k| d.join(k)))
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|pem| key_material(&pem))
        .collect()
}

#[test]
fn libnbd_and_wanblk_against_tls_require() {
    let dir = tempdir();
    let ca = Ca::new("test CA");
    let server = ca.write_server(&dir.path().join("server"), false);
    let client = ca.write_client(&dir.path().join("client"), "backup1");
    let t = target(
        dir.path(),
        "target",
        &["--size", &SIZE.to_string(), "--tls", "require", "--tls-certificates", server.to_str().unwrap()],
    );
    let mut outs = Outputs::default();
    let uri = format!("nbds://127.0.0.1:{}/?tls-certificates={}", t.port, client.display());

    let info = nbd_tool("nbdinfo", &["--json", &uri]);
    assert!(info.status.success(), "nbdinfo: {}", String::from_utf8_lossy(&info.stderr));
    let json: serde_json::Value = serde_json::from_slice(&info.stdout).expect("nbdinfo JSON");
    assert_eq!(json["exports"][0]["export-size"], SIZE, "{json}");
    outs.output("nbdinfo", &info);

    let src = dir.path().join("src.img");
    let sha = random_file(&src, SIZE, 0x7157).unwrap();
    let up = nbd_tool("nbdcopy", &["--connections=2", src.to_str().unwrap(), &uri]);
    assert!(up.status.success(), "nbdcopy: {}", String::from_utf8_lossy(&up.stderr));
    outs.output("nbdcopy up", &up);
    let back = dir.path().join("back.img");
    let down = nbd_tool("nbdcopy", &[&uri, back.to_str().unwrap()]);
    assert!(down.status.success(), "nbdcopy: {}", String::from_utf8_lossy(&down.stderr));
    assert_eq!(sha256_file(&back).unwrap(), sha, "nbdcopy read back over TLS what it wrote");
    outs.output("nbdcopy down", &down);

    // wanblk reads it too, with the certificates given in the URI.
    let mine = dir.path().join("mine.img");
    let out = copy_ok(&[&uri, mine.to_str().unwrap(), "-C", "3", "--verify"]);
    assert_eq!(sha256_file(&mine).unwrap(), sha);
    outs.output("wanblk copy", &out);

    // A clear-text client is refused, whoever it is.
    let plain = format!("nbd://127.0.0.1:{}/", t.port);
    let out = copy(&[&plain, "null:"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NBD_REP_ERR_TLS_REQD") && err.contains("use nbds://"), "{err}");
    outs.output("wanblk clear text", &out);
    let out = nbd_tool("nbdinfo", &[&plain]);
    assert!(!out.status.success(), "nbdinfo without TLS must fail");
    outs.output("nbdinfo clear text", &out);

    // Another CA's certificate is not trusted.
    let other = Ca::new("another CA").write_ca(&dir.path().join("other"));
    let out = copy(&[
        &format!("nbds://127.0.0.1:{}/", t.port),
        "null:",
        "--tls-certificates",
        other.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("certificate is not signed by the CA in"), "{err}");
    outs.output("wrong CA", &out);

    // A PSK file is refused plainly.
    let out = copy(&[&format!("nbds://127.0.0.1:{}/?tls-psk-file=/nonexistent.psk", t.port), "null:"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("TLS-PSK is not supported"));
    outs.output("psk", &out);

    drop(t);
    outs.files_in(dir.path(), &[".stderr", ".stdout"]);
    outs.assert_no_secret(&keys(&[&server, &client]));
}

#[test]
fn expired_certificate_fails_clearly() {
    let dir = tempdir();
    let ca = Ca::new("test CA");
    let server = ca.write_server(&dir.path().join("server"), true);
    let client = ca.write_ca(&dir.path().join("client"));
    let t = target(
        dir.path(),
        "expired",
        &["--size", "1M", "--tls", "require", "--tls-certificates", server.to_str().unwrap()],
    );
    let uri = format!("nbds://127.0.0.1:{}/", t.port);
    let out = copy(&[&uri, "null:", "--tls-certificates", client.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("certificate has expired"), "{err}");
    let mut outs = Outputs::default();
    outs.output("expired", &out);
    drop(t);
    outs.files_in(dir.path(), &[".stderr"]);
    outs.assert_no_secret(&keys(&[&server]));
}

#[test]
fn client_certificate_allow_list() {
    let dir = tempdir();
    let ca = Ca::new("test CA");
    let server = ca.write_server(&dir.path().join("server"), false);
    let good = ca.write_client(&dir.path().join("good"), "backup1");
    let bad = ca.write_client(&dir.path().join("bad"), "mallory");
    let none = ca.write_ca(&dir.path().join("none"));
    let t = target(
        dir.path(),
        "allow",
        &[
            "--size",
            "1M",
            "--tls",
            "require",
            "--tls-certificates",
            server.to_str().unwrap(),
            "--tls-allow",
            "CN=backup1,O=wanblk tests",
        ],
    );
    let uri = format!("nbds://127.0.0.1:{}/", t.port);
    let mut outs = Outputs::default();
    let out = copy_ok(&[&uri, "null:", "--tls-certificates", good.to_str().unwrap()]);
    outs.output("allowed", &out);
    let out = copy(&[&uri, "null:", "--tls-certificates", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NBD_REP_ERR_POLICY") && err.contains("CN=mallory") && err.contains("not allowed"),
        "{err}"
    );
    outs.output("not allowed", &out);
    let out = copy(&[&uri, "null:", "--tls-certificates", none.to_str().unwrap()]);
    assert!(!out.status.success(), "a client without a certificate must be refused");
    outs.output("no certificate", &out);
    drop(t);
    outs.files_in(dir.path(), &[".stderr"]);
    outs.assert_no_secret(&keys(&[&server, &good, &bad]));
}
