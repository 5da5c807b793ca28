//! `wanblk info` against real servers, text and JSON: what nbdinfo says
//! about the same export (size, block sizes, multi-conn, read-only), the
//! allocation of a sparse image, the exports of `--list`, and iSCSI
//! discovery with LUN capacities from tgtd.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn info(args: &[&str]) -> String {
    let out = wanblk_testkit::run_with_timeout(wanblk().arg("info").args(args), Duration::from_secs(60));
    assert!(out.status.success(), "wanblk info {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn info_json(args: &[&str]) -> serde_json::Value {
    let mut a = vec!["--json"];
    a.extend(args);
    let text = info(&a);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

/// nbdinfo's own view of `uri`.
fn nbdinfo(uri: &str) -> serde_json::Value {
    wanblk_testkit::require_tool("nbdinfo", "libnbd-bin");
    let text = wanblk_testkit::run(Command::new("nbdinfo").arg("--json").arg(uri));
    serde_json::from_str(&text).expect("nbdinfo --json")
}

/// The fields wanblk and nbdinfo both report agree.
fn agrees_with_nbdinfo(ours: &serde_json::Value, uri: &str) {
    let theirs = nbdinfo(uri);
    let export = &theirs["exports"][0];
    assert_eq!(ours["schema_version"], 1);
    assert_eq!(ours["protocol"], "nbd");
    assert_eq!(ours["size"], export["export-size"], "{ours}\n{theirs}");
    assert_eq!(ours["multi_conn"], export["can_multi_conn"], "{ours}\n{theirs}");
    assert_eq!(ours["read_only"], export["is_read_only"], "{ours}\n{theirs}");
    assert_eq!(ours["can_flush"], export["can_flush"], "{ours}\n{theirs}");
    assert_eq!(ours["can_trim"], export["can_trim"], "{ours}\n{theirs}");
    for (mine, nbdinfo_key) in [("minimum", "block_size_minimum"), ("maximum", "block_size_maximum")] {
        if let Some(v) = export.get(nbdinfo_key) {
            assert_eq!(&ours["block_sizes"][mine], v, "{mine}: {ours}\n{theirs}");
        }
    }
}

/// A 64 MiB image with data in its first 4 MiB and at 32 MiB, holes elsewhere.
fn sparse_image(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::FileExt;
    let p = dir.join("sparse.img");
    sparse_file(&p, 64 << 20);
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    let mut data = vec![0u8; 4 << 20];
    wanblk_testkit::fill_blocks(&mut data, 0, 7);
    f.write_all_at(&data, 0).unwrap();
    f.write_all_at(&data[..1 << 20], 32 << 20).unwrap();
    p
}

#[test]
fn nbdkit_export_in_text_and_json() {
    let dir = tempdir();
    let (_nbdkit, uri) = peers::nbdkit(dir.path(), &["memory", "100M"]);
    let j = info_json(&[&uri]);
    agrees_with_nbdinfo(&j, &uri);
    assert_eq!(j["size"], 100u64 << 20);
    // An empty memory disk is all holes, scanned to the end.
    let a = &j["allocation"];
    assert_eq!(a["complete"], true, "{j}");
    assert_eq!(a["scanned_bytes"], 100u64 << 20);
    assert_eq!(a["data_bytes"], 0, "{j}");
    let text = info(&[&uri]);
    assert!(text.contains("size:            104857600 (100.0 MiB)"), "{text}");
    assert!(text.contains("multi-conn:      yes"), "{text}");
    assert!(text.contains("allocation:") && text.contains("whole store"), "{text}");
}

#[test]
fn qemu_nbd_export_with_allocation() {
    let dir = tempdir();
    let img = sparse_image(dir.path());
    let (_q, uri) = peers::qemu_nbd(dir.path(), &img);
    let j = info_json(&[&uri]);
    agrees_with_nbdinfo(&j, &uri);
    let a = &j["allocation"];
    assert_eq!(a["complete"], true, "{j}");
    assert_eq!(a["data_bytes"], 5u64 << 20, "the two data runs: {j}");
    let holes = a["hole_bytes"].as_u64().unwrap() + a["zero_bytes"].as_u64().unwrap();
    assert_eq!(holes, 59u64 << 20, "{j}");
    assert_eq!(j["nbd"]["structured_replies"], true);
    assert!(info(&[&uri]).contains("data 5242880 (5.0 MiB)"));
    // A scan with no time does not run; the rest is there.
    let j = info_json(&["--scan-time", "0", &uri]);
    assert!(j["allocation"].is_null(), "{j}");
}

#[test]
fn list_exports_of_an_nbd_server() {
    let dir = tempdir();
    let img = sparse_image(dir.path());
    let sock = dir.path().join("named.sock");
    wanblk_testkit::require_tool("qemu-nbd", "qemu-utils");
    let _q = wanblk_testkit::Peer::spawn(
        "qemu-nbd",
        Command::new("qemu-nbd")
            .args(["-f", "raw", "-t", "-r", "-x", "backup-7", "-D", "nightly backup", "-k"])
            .arg(&sock)
            .arg(&img),
    );
    wanblk_testkit::wait_for_path(&sock, Duration::from_secs(10));
    let server = format!("nbd+unix:///?socket={}", sock.display());
    let j = info_json(&["--list", &server]);
    let exports = j["exports"].as_array().expect("exports");
    assert_eq!(exports.len(), 1, "{j}");
    assert_eq!(exports[0]["name"], "backup-7");
    assert_eq!(exports[0]["description"], "nightly backup");
    assert_eq!(exports[0]["size"], 64u64 << 20);
    assert_eq!(exports[0]["read_only"], true);
    let text = info(&["--list", &server]);
    assert!(text.contains("export \"backup-7\"") && text.contains("nightly backup"), "{text}");
    // The URI it lists opens the export.
    let one = exports[0]["uri"].as_str().unwrap();
    assert_eq!(info_json(&[one])["size"], 64u64 << 20);
}

#[test]
fn iscsi_lun_and_discovery_from_tgtd() {
    let tgt = wanblk_testkit::tgt::Tgt::start();
    let file = tgt.file("lun.img", 48 << 20);
    tgt.target(1, "iqn.2024-01.test:info-a", &file, Some(4096), false);
    let file2 = tgt.file("lun2.img", 16 << 20);
    tgt.target(2, "iqn.2024-01.test:info-b", &file2, None, false);
    let uri = tgt.uri("iqn.2024-01.test:info-a");

    let j = info_json(&[&uri]);
    assert_eq!(j["protocol"], "iscsi");
    assert_eq!(j["size"], 48u64 << 20, "{j}");
    assert_eq!(j["block_sizes"]["minimum"], 4096, "{j}");
    assert_eq!(j["iscsi"]["block_length"], 4096);
    assert_eq!(j["iscsi"]["lun"], 1);
    assert_eq!(j["multi_conn"], true);
    let text = info(&[&uri]);
    assert!(
        text.contains("block length:    4096") && text.contains("target:          iqn.2024-01.test:info-a"),
        "{text}"
    );

    let portal = format!("iscsi://{}:{}", tgt.addr, tgt.port);
    let j = info_json(&["--list", &portal]);
    let targets = j["targets"].as_array().expect("targets");
    let find = |name: &str| {
        targets.iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("{name} not listed: {j}"))
    };
    let a = find("iqn.2024-01.test:info-a");
    assert!(a["portals"].as_array().is_some_and(|p| !p.is_empty()), "{j}");
    let lun1 = a["luns"].as_array().unwrap().iter().find(|l| l["lun"] == 1).expect("LUN 1 reported");
    assert_eq!(lun1["size"], 48u64 << 20);
    assert_eq!(lun1["block_length"], 4096);
    // tgt's LUN 0 is its controller, not a disk: named as such.
    let lun0 = a["luns"].as_array().unwrap().iter().find(|l| l["lun"] == 0).expect("LUN 0 reported");
    assert!(lun0["error"].as_str().is_some_and(|e| e.contains("not a block device")), "{j}");
    let b = find("iqn.2024-01.test:info-b");
    let lun1 = b["luns"].as_array().unwrap().iter().find(|l| l["lun"] == 1).expect("LUN 1 of b");
    assert_eq!(lun1["size"], 16u64 << 20);
    let text = info(&["--list", &portal]);
    assert!(text.contains("target iqn.2024-01.test:info-b") && text.contains("lun 1: iscsi://"), "{text}");
}

#[test]
fn iscsi_with_an_initiator_acl_and_mutual_chap() {
    use std::os::unix::fs::PermissionsExt;
    const IQN: &str = "iqn.2024-01.test:info-chap";
    const ALLOWED: &str = "iqn.2024-01.test:info-host";
    let tgt = wanblk_testkit::tgt::Tgt::start();
    let file = tgt.file("lun.img", 8 << 20);
    tgt.target(1, IQN, &file, None, false);
    tgt.allow_only_initiator(1, ALLOWED);
    tgt.chap(1, "alice", "in/it@Secret-1");
    tgt.chap_outgoing(1, "tgt-out", "TargetSecret-2");
    let dir = tempdir();
    let secret = |name: &str, s: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, s).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p.to_str().unwrap().to_string()
    };
    let (mine, theirs) = (secret("mine", "in/it@Secret-1"), secret("theirs", "TargetSecret-2"));
    let addr = format!("127.0.0.1:{}", tgt.port);
    let ident = ["--initiator-name", ALLOWED, "--secret-file", &mine];
    let mutual = ["--target-user", "tgt-out", "--target-secret-file", &theirs];

    let lun = format!("iscsi://alice@{addr}/{IQN}/1");
    let mut args = vec![lun.as_str()];
    args.extend(ident.iter().chain(&mutual));
    assert_eq!(info_json(&args)["size"], 8u64 << 20);
    // Without the secret the login fails and says so.
    let out = wanblk_testkit::run_with_timeout(
        wanblk().args(["info", &lun, "--initiator-name", ALLOWED]),
        Duration::from_secs(60),
    );
    assert!(!out.status.success(), "logged in without the secret");

    // Discovery, then each target's login with the same identity.
    let portal = format!("iscsi://alice@{addr}");
    let mut args = vec!["--list", portal.as_str()];
    args.extend(ident.iter().chain(&mutual));
    let j = info_json(&args);
    let t = j["targets"].as_array().and_then(|t| t.iter().find(|t| t["name"] == IQN));
    let t = t.unwrap_or_else(|| panic!("{IQN} not listed: {j}"));
    let l1 = t["luns"].as_array().and_then(|l| l.iter().find(|l| l["lun"] == 1));
    assert_eq!(l1.unwrap_or_else(|| panic!("no LUN 1: {j}"))["size"], 8u64 << 20, "{j}");
    assert!(!j.to_string().contains("Secret"), "a secret shows: {j}");
}

#[test]
fn nbds_with_the_certificates_in_the_uri_or_the_flag() {
    use wanblk_testkit::tls::Ca;
    let dir = tempdir();
    let ca = Ca::new("test CA");
    let server = ca.write_server(&dir.path().join("server"), false);
    let client = ca.write_client(&dir.path().join("client"), "info1");
    let t = target(
        dir.path(),
        "target",
        &[
            "--size",
            "24M",
            "--export",
            "disk",
            "--tls",
            "require",
            "--tls-certificates",
            server.to_str().unwrap(),
        ],
    );
    let base = format!("nbds://127.0.0.1:{}", t.port);
    let j = info_json(&[&format!("{base}/disk?tls-certificates={}", client.display())]);
    assert_eq!((j["protocol"].as_str(), j["size"].as_u64()), (Some("nbd"), Some(24 << 20)), "{j}");
    let j = info_json(&["--list", &base, "--tls-certificates", client.to_str().unwrap()]);
    let e = j["exports"].as_array().and_then(|e| e.iter().find(|e| e["name"] == "disk"));
    assert_eq!(e.unwrap_or_else(|| panic!("disk not listed: {j}"))["size"], 24u64 << 20, "{j}");
    // Without the CA that signed the server's certificate: refused.
    let out = wanblk_testkit::run_with_timeout(
        wanblk().args(["info", &format!("{base}/disk")]),
        Duration::from_secs(60),
    );
    assert!(!out.status.success(), "an untrusted certificate was accepted");
}

#[test]
fn a_local_server_and_a_qcow2_file() {
    let dir = tempdir();
    let img = sparse_image(dir.path());
    let qcow2 = dir.path().join("disk.qcow2");
    wanblk_testkit::require_tool("qemu-img", "qemu-utils");
    wanblk_testkit::run(
        Command::new("qemu-img").args(["convert", "-f", "raw", "-O", "qcow2"]).arg(&img).arg(&qcow2),
    );
    // The file itself: named as a qcow2 image.
    let j = info_json(&[qcow2.to_str().unwrap()]);
    assert_eq!(j["file"]["image_format"], "qcow2", "{j}");
    // The disk it holds, through qemu-nbd run for the command.
    let j = info_json(&["--", "[", "qemu-nbd", "-r", "-f", "qcow2", qcow2.to_str().unwrap(), "]"]);
    assert_eq!(j["size"], 64u64 << 20, "{j}");
    assert_eq!(j["allocation"]["data_bytes"], 5u64 << 20, "{j}");
    assert!(j["location"].as_str().unwrap().starts_with("[ qemu-nbd -r -f qcow2"), "{j}");
}
