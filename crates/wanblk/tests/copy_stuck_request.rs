//! A server that never answers one request (an nbdkit shell plugin whose
//! read of one offset hangs for 12 s, far past the request deadline): the
//! copy sends the request again on another session, replaces the stuck
//! session, completes with the right data (sha256), and nothing hangs,
//! closing included.

mod common;

use std::time::Duration;

use common::*;

const IMAGE: u64 = 16 << 20;

const PLUGIN: &str = r#"#!/bin/sh
case "$1" in
  thread_model) echo parallel ;;
  get_size) stat -c %s "$IMG" ;;
  can_write|can_flush|can_multi_conn) exit 0 ;;
  pread)
    if [ "$4" = "$STUCK_AT" ] && mkdir "$MARK" 2>/dev/null; then sleep 12; fi
    dd if="$IMG" iflag=skip_bytes,count_bytes skip="$4" count="$3" status=none ;;
  pwrite) dd of="$IMG" oflag=seek_bytes conv=notrunc seek="$4" status=none ;;
  flush) exit 0 ;;
  *) exit 2 ;;
esac
"#;

#[test]
fn a_request_that_is_never_answered_is_sent_again() {
    let dir = tempdir();
    let img = dir.path().join("img");
    let sha = random_file(&img, IMAGE, 0x57c).unwrap();
    let plugin = dir.path().join("plugin.sh");
    std::fs::write(&plugin, PLUGIN).unwrap();
    let sock = dir.path().join("nbdkit.sock");
    let stuck_at = (3u64 << 20).to_string();
    let mark = dir.path().join("stuck-once");
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "chmod +x {p} && exec nbdkit -f --exit-with-parent -U {s} sh {p}",
            p = plugin.display(),
            s = sock.display()
        ))
        .env("IMG", &img)
        .env("STUCK_AT", &stuck_at)
        .env("MARK", &mark);
    wanblk_testkit::require_tool("nbdkit", "nbdkit");
    let _nbdkit = wanblk_testkit::Peer::spawn("nbdkit sh", &mut cmd);
    wanblk_testkit::wait_for_path(&sock, Duration::from_secs(10));
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let out_img = dir.path().join("out.img");
    let rep = dir.path().join("r.json");
    let started = std::time::Instant::now();
    let out = copy_within(
        &[
            &uri,
            out_img.to_str().unwrap(),
            "-C",
            "2",
            "--request-size",
            "1M",
            "--io-timeout",
            "3s",
            "--report",
            rep.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    let (code, _, stderr) = text(&out);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(mark.exists(), "the read at {stuck_at} was asked for, and held");
    let r = report(&rep);
    assert!(r["faults"]["retried_requests"].as_u64().unwrap() >= 1, "the held read was sent again: {r}");
    assert_eq!(sha256_file(&out_img).unwrap(), sha, "the copy is the source");
    eprintln!("done in {:.1} s (the held read would have taken 12 s)", started.elapsed().as_secs_f64());
}
