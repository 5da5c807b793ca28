//! Type=notify: `wanblk target` and `wanblk serve` tell the service
//! manager (the datagram socket in NOTIFY_SOCKET) READY=1 once they listen
//! and STOPPING=1 when SIGTERM makes them stop.

mod common;

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use common::*;

/// Runs `wanblk ARGS` with NOTIFY_SOCKET set; checks READY=1 comes while
/// it listens (its socket exists), then STOPPING=1 after SIGTERM, and a
/// clean exit.
fn notifies(args: &[&str], listen_sock: &std::path::Path, dir: &std::path::Path) {
    let notify = dir.join("notify.sock");
    let manager = UnixDatagram::bind(&notify).unwrap();
    manager.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut cmd = wanblk();
    cmd.args(args).env("NOTIFY_SOCKET", &notify).stdout(std::process::Stdio::null());
    let mut peer = wanblk_testkit::Peer::spawn("wanblk", &mut cmd);
    let mut buf = [0u8; 256];
    let n = manager.recv(&mut buf).expect("READY=1 within 30 s");
    assert_eq!(&buf[..n], b"READY=1");
    assert!(listen_sock.exists(), "ready only once listening");
    wanblk_sys::process::signal(peer.pid(), wanblk_sys::process::SIGTERM).unwrap();
    let n = manager.recv(&mut buf).expect("STOPPING=1 within 30 s");
    assert_eq!(&buf[..n], b"STOPPING=1");
    let st = peer.wait_within(Duration::from_secs(30));
    assert!(st.success(), "{st}");
}

#[test]
fn target_and_serve_notify_systemd() {
    let dir = tempdir();
    let sock = dir.path().join("t.sock");
    notifies(&["target", "--size", "16M", "--socket", sock.to_str().unwrap()], &sock, dir.path());

    let dir = tempdir();
    let (_nbdkit, uri) = peers::nbdkit(dir.path(), &["memory", "16M"]);
    let sock = dir.path().join("s.sock");
    notifies(&["serve", &uri, "--socket", sock.to_str().unwrap()], &sock, dir.path());
}
