//! `wanblk mount` over an emulated WAN (200 Mbit/s, 20 ms RTT): ext4 on a
//! loop device over `MOUNTPOINT/disk`, written, synced, unmounted, mounted
//! again through a new `wanblk mount` (cold caches everywhere), read back;
//! and fsynced data surviving `kill -9` of the front end, read from the
//! remote directly. Needs root (namespaces, FUSE, loop devices).
//!
//! The target runs in the server namespace; `wanblk mount` runs in the
//! client namespace with only its network namespace changed (as `nsenter
//! --net` does), so its FUSE mount is visible to the test.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use wanblk_netem::{Scenario, Side, SysctlProfile};
use wanblk_sys::process::{SIGKILL, SIGTERM, signal};
use wanblk_testkit::require_tool;

static SERIAL: Mutex<()> = Mutex::new(());

const DISK: u64 = 512 << 20;

fn require_root() -> std::sync::MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(wanblk_sys::sched::geteuid() == 0, "the mount tests need root (FUSE, loop devices, namespaces)");
    for (tool, pkg) in
        [("losetup", "mount"), ("mkfs.ext4", "e2fsprogs"), ("ip", "iproute2"), ("iptables", "iptables")]
    {
        require_tool(tool, pkg);
    }
    assert!(Path::new("/dev/fuse").exists(), "no /dev/fuse on this machine");
    guard
}

/// Runs a command with a time limit (killed by PID after 120 s); returns
/// its stdout or panics with stderr.
fn sh(args: &[&str]) -> String {
    wanblk_testkit::run(Command::new(args[0]).args(&args[1..]))
}

/// Best-effort cleanup command (never panics; killed by PID after 30 s).
fn try_sh(args: &[&str]) {
    let _ = wanblk_testkit::output_within(Command::new(args[0]).args(&args[1..]), Duration::from_secs(30));
}

/// A process of ours, stopped by PID (SIGTERM, SIGKILL after 10 s) on drop.
struct Proc(Option<Child>);

impl Proc {
    fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// Waits up to `limit` for the process to exit.
    fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        let child = self.0.as_mut()?;
        loop {
            if let Ok(Some(s)) = child.try_wait() {
                self.0 = None;
                return Some(s);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(&mut self) {
        if self.0.is_none() {
            return;
        }
        let _ = signal(self.pid(), SIGTERM);
        if self.wait(Duration::from_secs(10)).is_none() {
            let _ = signal(self.pid(), SIGKILL);
            let _ = self.wait(Duration::from_secs(10));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts `cmd` in `side`'s namespace and returns it with the first line it prints.
fn spawn_reading_line(sc: &Scenario, side: Side, name: &str, cmd: &mut Command) -> (Proc, String) {
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).stdin(Stdio::null());
    sc.enter(side, cmd).expect("enter namespace");
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
    let stdout = child.stdout.take().expect("stdout");
    let peer = Proc(Some(child));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line =
        rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("{name} printed nothing in 60 s"));
    assert!(!line.trim().is_empty(), "{name} exited before it was ready");
    (peer, line.trim().to_string())
}

/// Everything one test set up, torn down in reverse even if it fails.
struct Setup {
    sc: Option<Scenario>,
    target: Option<Proc>,
    uri: String,
    dir: tempfile::TempDir,
    mount: Option<Proc>,
    loopdev: Option<String>,
    fs_mounted: bool,
}

impl Setup {
    fn new(name: &str) -> Setup {
        let sc = Scenario::builder()
            .name(name)
            .rate_bps(200_000_000)
            .delay(Duration::from_millis(10))
            .queue_bdp(1.0)
            .sysctl_profile(SysctlProfile::Bdp)
            .start()
            .expect("start the emulated path");
        let listen = format!("{}:0", sc.server_addr());
        let mut t = wanblk();
        t.args(["target", "--size", &DISK.to_string(), "--listen", &listen, "--insecure"]);
        let (target, uri) = spawn_reading_line(&sc, Side::Server, "wanblk target", &mut t);
        let dir = tempdir();
        std::fs::create_dir(dir.path().join("mnt")).unwrap();
        std::fs::create_dir(dir.path().join("fs")).unwrap();
        Setup { sc: Some(sc), target: Some(target), uri, dir, mount: None, loopdev: None, fs_mounted: false }
    }

    fn mnt(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    fn fs(&self) -> PathBuf {
        self.dir.path().join("fs")
    }

    /// `wanblk mount` in the client namespace; returns the disk file's path.
    fn mount(&mut self) -> PathBuf {
        let mut m = wanblk();
        m.args(["mount", &self.uri]).arg(self.mnt()).args(["-C", "4"]);
        let sc = self.sc.as_ref().unwrap();
        let (peer, disk) = spawn_reading_line(sc, Side::Client, "wanblk mount", &mut m);
        self.mount = Some(peer);
        assert_eq!(PathBuf::from(&disk), self.mnt().join("disk"));
        assert_eq!(std::fs::metadata(&disk).unwrap().len(), DISK, "the disk file has the remote's size");
        PathBuf::from(disk)
    }

    /// ext4 on a loop device over the disk file, mounted on `fs()`.
    fn attach(&mut self, disk: &Path, mkfs: bool) {
        let dev = sh(&["losetup", "-f", "--show", disk.to_str().unwrap()]).trim().to_string();
        self.loopdev = Some(dev.clone());
        if mkfs {
            sh(&["mkfs.ext4", "-q", "-F", &dev]);
        }
        sh(&["mount", &dev, self.fs().to_str().unwrap()]);
        self.fs_mounted = true;
    }

    /// Unmounts ext4 and detaches the loop device.
    fn detach(&mut self) {
        if self.fs_mounted {
            sh(&["umount", self.fs().to_str().unwrap()]);
            self.fs_mounted = false;
        }
        if let Some(dev) = self.loopdev.take() {
            sh(&["losetup", "-d", &dev]);
            wait_released(&dev);
        }
    }

    /// Stops `wanblk mount` with SIGTERM and waits for it to unmount and exit 0.
    fn unmount(&mut self) {
        let mut peer = self.mount.take().expect("mounted");
        signal(peer.pid(), SIGTERM).expect("SIGTERM");
        let status = peer.wait(Duration::from_secs(60)).expect("wanblk mount exits within 60 s of SIGTERM");
        assert!(status.success(), "wanblk mount exited with {status}");
        assert!(!is_mounted(&self.mnt()), "wanblk mount left its mount behind");
    }
}

/// Waits (up to 60 s) until the kernel has let go of a detached loop
/// device's backing file: `losetup -d` returns at once and the release
/// follows later, under load seconds later, and until then the disk file
/// is busy and `wanblk mount` cannot unmount.
fn wait_released(dev: &str) {
    let name = dev.trim_start_matches("/dev/");
    let backing = PathBuf::from(format!("/sys/block/{name}/loop/backing_file"));
    wait_until(
        &format!("{dev} lets go of its backing file after losetup -d"),
        Duration::from_secs(60),
        || !backing.exists(),
    );
}

fn is_mounted(p: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let p = p.to_string_lossy();
    mounts.lines().any(|l| l.split_whitespace().nth(1) == Some(&*p))
}

impl Drop for Setup {
    fn drop(&mut self) {
        if self.fs_mounted {
            try_sh(&["umount", "-l", self.fs().to_str().unwrap()]);
        }
        if let Some(dev) = self.loopdev.take() {
            try_sh(&["losetup", "-d", &dev]);
        }
        if let Some(mut m) = self.mount.take() {
            m.stop();
        }
        if is_mounted(&self.mnt()) {
            try_sh(&["umount", "-l", self.mnt().to_str().unwrap()]);
        }
        if let Some(mut t) = self.target.take() {
            t.stop();
        }
        if let Some(sc) = self.sc.take() {
            let _ = sc.stop();
        }
    }
}

#[test]
fn ext4_on_the_mounted_disk_reads_back_after_a_cold_remount() {
    let _root = require_root();
    let mut s = Setup::new("mountfs");
    let disk = s.mount();
    s.attach(&disk, true);
    let big = s.fs().join("big.bin");
    let sha_big = random_file(&big, 48 << 20, 11).unwrap();
    let mut small = Vec::new();
    for i in 0..20u64 {
        let p = s.fs().join(format!("small-{i}.bin"));
        small.push((format!("small-{i}.bin"), random_file(&p, 4096 * (i + 1) + i, 100 + i).unwrap()));
    }
    sh(&["sync"]);
    s.detach();
    s.unmount();

    // Everything cold: a new front end (empty cache), a new loop device,
    // and the kernel's caches dropped.
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    let disk = s.mount();
    s.attach(&disk, false);
    assert_eq!(sha256_file(&s.fs().join("big.bin")).unwrap(), sha_big, "big file read back");
    for (name, sha) in &small {
        assert_eq!(&sha256_file(&s.fs().join(name)).unwrap(), sha, "{name} read back");
    }
    s.detach();
    s.unmount();
}

#[test]
fn fsynced_data_survives_kill_9_of_the_front_end() {
    let _root = require_root();
    let mut s = Setup::new("mountkill");
    let disk = s.mount();
    s.attach(&disk, true);
    // Unsynced data may be lost; it must not break the file system.
    random_file(&s.fs().join("unsynced.bin"), 8 << 20, 22).unwrap();
    let path = s.fs().join("synced.bin");
    let sha = random_file(&path, 24 << 20, 21).unwrap();
    // fsync the file: ext4 writes its data and journal and flushes the
    // loop device, which fsyncs the disk file, which flushes the front end.
    // The kill follows at once: what fsync promised must already be remote.
    sh(&["sync", path.to_str().unwrap()]);

    let mut m = s.mount.take().unwrap();
    signal(m.pid(), SIGKILL).expect("SIGKILL");
    assert!(m.wait(Duration::from_secs(10)).is_some(), "killed");
    // The file system above a dead FUSE file: tear it down.
    try_sh(&["umount", "-l", s.fs().to_str().unwrap()]);
    s.fs_mounted = false;
    if let Some(dev) = s.loopdev.take() {
        try_sh(&["losetup", "-d", &dev]);
    }
    try_sh(&["umount", "-l", s.mnt().to_str().unwrap()]);

    // The remote, read directly (in the server's namespace), as an image.
    let img = s.dir.path().join("remote.img");
    let mut copy = wanblk();
    copy.args(["copy", &s.uri, img.to_str().unwrap(), "--no-progress", "-C", "2"]);
    let out = s.sc.as_ref().unwrap().exec(Side::Server, &mut copy).expect("wanblk copy");
    assert!(out.status.success(), "copy of the remote failed: {}", String::from_utf8_lossy(&out.stderr));
    // Mounting replays ext4's journal; the fsynced file is whole.
    let dev = sh(&["losetup", "-f", "--show", img.to_str().unwrap()]).trim().to_string();
    s.loopdev = Some(dev.clone());
    sh(&["mount", &dev, s.fs().to_str().unwrap()]);
    s.fs_mounted = true;
    assert_eq!(sha256_file(&s.fs().join("synced.bin")).unwrap(), sha, "every fsynced byte is on the remote");
    s.detach();
}
