//! `wanblk serve` in front of an iSCSI remote (the README's `wanblk serve
//! iscsi://san/iqn.x:disk/1 --socket /run/disk.sock`): a local NBD client
//! (nbdcopy) writes and reads the LUN through the front end; what it wrote
//! lands in tgtd's backing file.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use wanblk_testkit::{Peer, run, wait_for_path};

const SIZE: u64 = 64 << 20;

#[test]
fn nbd_clients_reach_an_iscsi_lun_through_serve() {
    let dir = tempdir();
    let tgt = wanblk_testkit::tgt::Tgt::start();
    let lun = tgt.file("lun.img", SIZE);
    tgt.target(1, "iqn.2024-01.test:serve", &lun, None, false);
    let sock = dir.path().join("front.sock");
    let mut serve = Command::new(env!("CARGO_BIN_EXE_wanblk"));
    serve.args(["serve", &tgt.uri("iqn.2024-01.test:serve"), "-C", "2", "--socket"]).arg(&sock);
    let mut serve = Peer::spawn("wanblk serve", serve.stdout(std::process::Stdio::null()));
    wait_for_path(&sock, Duration::from_secs(20));
    let front = format!("nbd+unix:///?socket={}", sock.display());

    let info = run(Command::new("nbdinfo").args(["--json", &front]));
    let json: serde_json::Value = serde_json::from_str(&info).expect("nbdinfo JSON");
    assert_eq!(json["exports"][0]["export-size"], SIZE, "the LUN's size: {json}");

    let src = dir.path().join("data.img");
    let sha = random_file(&src, SIZE, 0x5e5e).unwrap();
    peers::nbdcopy(src.to_str().unwrap(), &front, &["--flush"]);
    assert_eq!(sha256_file(&lun).unwrap(), sha, "after the flush the LUN holds what the client wrote");
    let through = dir.path().join("through.img");
    peers::nbdcopy(&front, through.to_str().unwrap(), &[]);
    assert_eq!(sha256_file(&through).unwrap(), sha, "read back through the front end");
    // SIGTERM: serve writes back what is pending and exits cleanly.
    serve.stop();
    assert_eq!(sha256_file(&lun).unwrap(), sha, "the LUN after serve stopped");
}
