//! A block device as source and destination of `wanblk copy` (the README's
//! `wanblk copy /dev/vdb iscsi://...`): a loop device over a file, written
//! in place from an NBD export, then read back to another NBD export.
//! Needs root (loop devices); the device is always detached.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use wanblk_testkit::{require_tool, run};

const SIZE: u64 = 32 << 20;

/// A loop device over a file, detached when dropped.
struct Loop {
    dev: PathBuf,
}

impl Loop {
    fn attach(file: &Path) -> Loop {
        assert!(wanblk_sys::sched::geteuid() == 0, "the block device tests need root (loop devices)");
        require_tool("losetup", "mount");
        let dev = run(std::process::Command::new("losetup").args(["-f", "--show"]).arg(file));
        let dev = PathBuf::from(dev.trim());
        assert!(dev.starts_with("/dev/"), "losetup printed {dev:?}");
        Loop { dev }
    }

    fn path(&self) -> &str {
        self.dev.to_str().unwrap()
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let out = wanblk_testkit::run_with_timeout(
            std::process::Command::new("losetup").arg("-d").arg(&self.dev),
            std::time::Duration::from_secs(30),
        );
        if !out.status.success() {
            eprintln!("losetup -d {}: {}", self.dev.display(), String::from_utf8_lossy(&out.stderr));
        }
    }
}

#[test]
fn a_loop_device_as_destination_and_source() {
    let dir = tempdir();
    let backing = dir.path().join("backing.img");
    sparse_file(&backing, SIZE);
    // Junk first, so a range the copy skipped would show.
    std::fs::write(&backing, vec![0xa5; SIZE as usize]).unwrap();
    let dev = Loop::attach(&backing);

    // NBD -> the device, written in place.
    let src = dir.path().join("src.img");
    let sha = random_file(&src, SIZE, 0xb10c).unwrap();
    let (_src_nbd, src_uri) = peers::nbdkit(dir.path(), &["file", src.to_str().unwrap()]);
    let rep = dir.path().join("in.json");
    copy_ok(&[&src_uri, dev.path(), "-C", "2", "--flush", "--report", rep.to_str().unwrap()]);
    let r = report(&rep);
    assert_eq!((r["complete"].as_bool(), r["bytes"].as_u64()), (Some(true), Some(SIZE)), "{r}");
    assert_eq!(r["destination"], dev.path(), "written in place, no .wanblk-part: {r}");
    assert_eq!(sha256_file(&dev.dev).unwrap(), sha, "the device holds the source");

    // The device -> NBD.
    let disk = dir.path().join("dst.img");
    sparse_file(&disk, SIZE);
    let (_q, dst_uri) = peers::qemu_nbd(dir.path(), &disk);
    let out = copy_ok(&[dev.path(), &dst_uri, "-C", "2", "--verify", "--checksum", "--flush"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), sha, "--checksum hashed the device");
    assert_eq!(sha256_file(&disk).unwrap(), sha, "the export holds the device's contents");
    drop(dev);
    assert_eq!(sha256_file(&backing).unwrap(), sha, "the loop device's file holds the source");
}
