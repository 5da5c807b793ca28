//! `--verify` reads the destination back after the copy and compares it
//! with what was read from the source. A destination that changes a byte
//! behind wanblk's back (an nbdkit shell plugin that, after one write,
//! overwrites one byte of its file) is caught: the copy exits with 1
//! naming the exact offset. An honest destination verifies. Both end with
//! a sha256 comparison of the target's file.

mod common;

use std::time::Duration;

use common::*;

const IMAGE: u64 = 8 << 20;

const PLUGIN: &str = r#"#!/bin/sh
case "$1" in
  thread_model) echo parallel ;;
  get_size) stat -c %s "$IMG" ;;
  can_write|can_flush|can_multi_conn) exit 0 ;;
  pread) dd if="$IMG" iflag=skip_bytes,count_bytes skip="$4" count="$3" status=none ;;
  pwrite)
    dd of="$IMG" oflag=seek_bytes conv=notrunc seek="$4" status=none
    if [ "$4" = "$BAD_WRITE" ]; then
      printf "$BAD_BYTE" | dd of="$IMG" oflag=seek_bytes conv=notrunc seek="$BAD_AT" status=none
    fi ;;
  flush) exit 0 ;;
  *) exit 2 ;;
esac
"#;

/// nbdkit serving `img` through the plugin; with `bad` = (offset, byte),
/// the write that starts at the 1 MiB block holding `offset` is followed
/// by that byte written at `offset`.
fn serve(
    dir: &std::path::Path,
    img: &std::path::Path,
    bad: Option<(u64, u8)>,
) -> (wanblk_testkit::Peer, String) {
    wanblk_testkit::require_tool("nbdkit", "nbdkit");
    let plugin = dir.join("plugin.sh");
    std::fs::write(&plugin, PLUGIN).unwrap();
    let sock = dir.join(format!("nbdkit-{}.sock", bad.is_some()));
    let (write, at, byte) = match bad {
        Some((o, b)) => ((o / (1 << 20) * (1 << 20)).to_string(), o.to_string(), format!("\\{b:03o}")),
        None => ("none".into(), "0".into(), String::new()),
    };
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "chmod +x {p} && exec nbdkit -f --exit-with-parent -U {s} sh {p}",
            p = plugin.display(),
            s = sock.display()
        ))
        .env("IMG", img)
        .env("BAD_WRITE", write)
        .env("BAD_AT", at)
        .env("BAD_BYTE", byte);
    let peer = wanblk_testkit::Peer::spawn("nbdkit sh", &mut cmd);
    wanblk_testkit::wait_for_path(&sock, Duration::from_secs(10));
    (peer, format!("nbd+unix:///?socket={}", sock.display()))
}

#[test]
fn verify_catches_a_byte_changed_behind_our_back() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0x7e21).unwrap();
    let bad_at: u64 = (5 << 20) + 4321;
    let original = std::fs::read(&src).unwrap()[bad_at as usize];
    let disk = dir.path().join("disk.img");
    sparse_file(&disk, IMAGE);
    let (_nbdkit, uri) = serve(dir.path(), &disk, Some((bad_at, !original)));
    let rep = dir.path().join("r.json");
    let args =
        [src.to_str().unwrap(), &uri, "--request-size", "1M", "--verify", "--report", rep.to_str().unwrap()];
    let (code, _, stderr) = text(&copy(&args));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(&format!("differs from the source at offset {bad_at}")), "{stderr}");
    let r = report(&rep);
    assert_eq!(r["verify"]["first_bad_offset"], bad_at, "{r}");
    assert_ne!(sha256_file(&disk).unwrap(), sha, "the target's file really differs");
}

#[test]
fn an_honest_destination_verifies() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0x7e22).unwrap();
    let disk = dir.path().join("disk.img");
    sparse_file(&disk, IMAGE);
    let (_nbdkit, uri) = serve(dir.path(), &disk, None);
    let rep = dir.path().join("r.json");
    let out = copy_ok(&[src.to_str().unwrap(), &uri, "--verify", "--report", rep.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("verified"));
    let r = report(&rep);
    assert_eq!(
        (r["verify"]["checked_bytes"].as_u64(), r["verify"]["first_bad_offset"].is_null()),
        (Some(IMAGE), true),
        "{r}"
    );
    assert_eq!(sha256_file(&disk).unwrap(), sha);
}
