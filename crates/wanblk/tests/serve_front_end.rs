//! `wanblk serve`: local NBD clients (nbdcopy, nbdinfo) use a remote store
//! through the session pool; what they write lands on the remote store.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use wanblk_testkit::{Peer, run, wait_for_path};

#[test]
fn nbd_clients_read_and_write_through_the_pool() {
    let dir = tempdir();
    let (_nbdkit, remote) = peers::nbdkit(dir.path(), &["memory", "256M"]);
    let sock = dir.path().join("front.sock");
    let mut serve = Command::new(env!("CARGO_BIN_EXE_wanblk"));
    serve.args(["serve", &remote, "-C", "4", "--socket"]).arg(&sock);
    let _serve = Peer::spawn("wanblk serve", serve.stdout(std::process::Stdio::null()));
    wait_for_path(&sock, Duration::from_secs(20));
    let front = format!("nbd+unix:///?socket={}", sock.display());

    let info = run(Command::new("nbdinfo").args(["--json", &front]));
    let json: serde_json::Value = serde_json::from_str(&info).expect("nbdinfo JSON");
    assert_eq!(json["exports"][0]["export-size"], 256u64 << 20, "{json}");

    let src = dir.path().join("data.img");
    let sha = random_file(&src, 256 << 20, 99).unwrap();
    // --flush: the front end acknowledges writes once cached; the flush
    // returns when the remote has them.
    peers::nbdcopy(src.to_str().unwrap(), &front, &["--connections=4", "--flush"]);
    let through = dir.path().join("through.img");
    peers::nbdcopy(&front, through.to_str().unwrap(), &[]);
    assert_eq!(sha256_file(&through).unwrap(), sha, "read back through the front end");
    let direct = dir.path().join("direct.img");
    peers::nbdcopy(&remote, direct.to_str().unwrap(), &[]);
    assert_eq!(sha256_file(&direct).unwrap(), sha, "the remote store holds what was written");
}
