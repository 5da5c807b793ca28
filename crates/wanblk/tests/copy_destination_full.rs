//! A destination file system that fills up (a small tmpfs this test
//! mounts): the copy stops with a clear error naming the offset and how
//! to resume, and exits with 1; once space is freed, the same command
//! resumes and completes (sha256). Needs root (mount).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

const IMAGE: u64 = 48 << 20;

/// A tmpfs mounted for the test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let out = wanblk_testkit::output_within(
            Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(at),
            Duration::from_secs(30),
        )
        .expect("run mount");
        assert!(out.status.success(), "mount tmpfs: {}", String::from_utf8_lossy(&out.stderr));
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = wanblk_testkit::output_within(Command::new("umount").arg(&self.0), Duration::from_secs(30));
    }
}

#[test]
fn a_full_destination_fails_clearly_and_resumes_once_there_is_room() {
    assert!(wanblk_sys::sched::geteuid() == 0, "this test mounts a tmpfs: run it as root");
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0xf011).unwrap();
    let fs = Tmpfs::mount(&dir.path().join("small"), "64M");
    let filler = fs.0.join("filler");
    std::fs::write(&filler, vec![1u8; 32 << 20]).unwrap();
    let dst = fs.0.join("out.img");
    let rep = dir.path().join("r.json");
    let args = [src.to_str().unwrap(), dst.to_str().unwrap(), "--report", rep.to_str().unwrap()];
    let (code, _, stderr) = text(&copy(&args));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(stderr.contains("at offset") && stderr.contains("to resume, run"), "{stderr}");
    assert!(fs.0.join("out.img.wanblk-journal").exists(), "the journal is kept");
    assert_eq!(report(&rep)["complete"], false);
    std::fs::remove_file(&filler).unwrap();
    let out = copy_ok(&args);
    assert!(String::from_utf8_lossy(&out.stderr).contains("resuming"));
    assert_eq!(report(&rep)["complete"], true);
    assert_eq!(sha256_file(&dst).unwrap(), sha);
    drop(fs);
}
