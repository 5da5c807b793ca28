//! Pipes and image formats: `-` as standard input and output, `[ CMD ]` as
//! a local NBD server (qemu-nbd on a qcow2 file, both directions, checked
//! against qemu-img convert), the note for a qcow2 file copied raw and the
//! refusal to write raw bytes over one, and vsock's clear error.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use common::*;

const SIZE: u64 = 48 << 20;

/// A random image with a zero run in the middle; returns its sha256.
fn image(path: &Path, seed: u64) -> String {
    random_file(path, SIZE, seed).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&vec![0u8; 8 << 20], 16 << 20).unwrap();
    sha256_file(path).unwrap()
}

/// Runs a shell line (`wanblk` is the binary under test) within the copy
/// timeout; returns stdout, panicking with stderr on failure.
fn sh(line: &str) -> (String, String) {
    let line = line.replace("wanblk ", &format!("{} ", env!("CARGO_BIN_EXE_wanblk")));
    let out = wanblk_testkit::run_with_timeout(Command::new("/bin/sh").arg("-c").arg(&line), COPY_TIMEOUT);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{line} failed: {}\nstderr: {stderr}", out.status);
    (stdout, stderr)
}

fn sha_of_output(stdout: &str) -> String {
    stdout.split_whitespace().next().unwrap_or_default().to_string()
}

#[test]
fn stdin_to_an_export_and_an_export_to_stdout() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = image(&src, 0x51);
    let (_nbdkit, uri) = peers::nbdkit(dir.path(), &["memory", &SIZE.to_string()]);

    let (stdout, stderr) =
        sh(&format!("cat {} | wanblk copy - '{uri}' --no-progress --checksum", src.display()));
    assert!(stderr.contains("standard input is read in order"), "the note: {stderr}");
    assert_eq!(stdout.trim(), sha, "--checksum hashed what came through the pipe");
    let back = dir.path().join("back.img");
    peers::nbdcopy(&uri, back.to_str().unwrap(), &[]);
    assert_eq!(sha256_file(&back).unwrap(), sha, "the export holds the image");

    // To stdout: exactly the image, nothing else (progress, notes and the
    // sha256 go to stderr), with several sessions reading.
    let (stdout, stderr) =
        sh(&format!("wanblk copy '{uri}' - -C 4 --checksum --progress-interval 0.2 | sha256sum"));
    assert_eq!(sha_of_output(&stdout), sha, "stdout carried the image and only it");
    assert!(stderr.contains(&format!("wanblk: sha256 {sha}")), "{stderr}");
}

#[test]
fn stdin_needs_a_size_for_a_new_file_and_both_dashes_are_refused() {
    let dir = tempdir();
    let new = dir.path().join("new.img");
    let out = wanblk_testkit::run_with_timeout(
        wanblk().args(["copy", "-", new.to_str().unwrap()]).stdin(std::process::Stdio::null()),
        COPY_TIMEOUT,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--length SIZE"), "{err}");
    assert!(!new.exists());
    // With --length the file gets the input, up to that many bytes.
    let src = dir.path().join("src.img");
    let sha = image(&src, 0x52);
    sh(&format!("wanblk copy - {} --length {SIZE} --no-progress < {}", new.display(), src.display()));
    assert_eq!(sha256_file(&new).unwrap(), sha);
    let out = copy(&["-", "-"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("both -"));
}

fn qemu_img(args: &[&str]) {
    wanblk_testkit::require_tool("qemu-img", "qemu-utils");
    wanblk_testkit::run(Command::new("qemu-img").args(args));
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_qcow2_disk_through_qemu_nbd_equals_qemu_img_convert() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = image(&src, 0x53);
    let qcow2 = dir.path().join("disk.qcow2");
    qemu_img(&["convert", "-f", "raw", "-O", "qcow2", s(&src), s(&qcow2)]);

    // Read: the disk the qcow2 file holds, to a raw file.
    let out_raw = dir.path().join("out.raw");
    let reference = dir.path().join("reference.raw");
    qemu_img(&["convert", "-f", "qcow2", "-O", "raw", s(&qcow2), s(&reference)]);
    let report = dir.path().join("r.json");
    copy_ok(&[
        "--report",
        s(&report),
        "--",
        "[",
        "qemu-nbd",
        "-r",
        "-f",
        "qcow2",
        s(&qcow2),
        "]",
        s(&out_raw),
    ]);
    assert_eq!(sha256_file(&out_raw).unwrap(), sha256_file(&reference).unwrap(), "equals qemu-img convert");
    assert_eq!(sha256_file(&out_raw).unwrap(), sha);
    let r = common::report(&report);
    assert!(r["source"].as_str().unwrap().starts_with("[ qemu-nbd -r -f qcow2"), "{r}");
    assert_eq!(r["complete"], true);

    // Write: into a new qcow2 file through qemu-nbd, read back by qemu-img.
    let dst = dir.path().join("dst.qcow2");
    qemu_img(&["create", "-f", "qcow2", s(&dst), &SIZE.to_string()]);
    copy_ok(&["-C", "4", "--", s(&src), "[", "qemu-nbd", "-f", "qcow2", s(&dst), "]"]);
    let back = dir.path().join("back.raw");
    qemu_img(&["convert", "-f", "qcow2", "-O", "raw", s(&dst), s(&back)]);
    assert_eq!(sha256_file(&back).unwrap(), sha, "the qcow2 file holds the image");
    qemu_img(&["check", s(&dst)]);
    // qemu-img opened dst.qcow2 above, so qemu-nbd had let go of it (it
    // holds a write lock while it runs).
}

#[test]
fn a_qcow2_file_copied_raw_is_named_and_never_overwritten() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    image(&src, 0x54);
    let qcow2 = dir.path().join("disk.qcow2");
    qemu_img(&["convert", "-f", "raw", "-O", "qcow2", s(&src), s(&qcow2)]);
    let out = copy_ok(&[s(&qcow2), "null:"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("looks like a qcow2 image") && err.contains("[ qemu-nbd -r -f qcow2"), "{err}");
    let before = sha256_file(&qcow2).unwrap();
    let out = copy(&[s(&src), s(&qcow2)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("would destroy it"), "{err}");
    assert_eq!(sha256_file(&qcow2).unwrap(), before, "the qcow2 file is untouched");
}

#[test]
fn a_server_that_fails_and_vsock_are_clear_errors() {
    let out = copy(&["--", "[", "false", "]", "null:"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("[ false ] exited"), "{err}");
    let out = copy(&["nbd+vsock://3:10809/disk", "null:"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("vsock is not supported"), "{err}");
}
