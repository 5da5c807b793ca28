//! tgtd, the Linux SCSI target framework daemon, as a real iSCSI target
//! for tests and benchmarks.
//!
//! [`Tgt::start`] runs a private tgtd on a free port of 127.0.0.1;
//! [`Tgt::launch`] runs one on any portal address, with a hook that can
//! move the daemon into a network namespace (the emulated WAN's server
//! side). Targets and LUNs are made with `tgtadm`, whose control channel is
//! a Unix socket under `/var/run/tgtd`, so it works from any namespace.
//!
//! The guard deletes its targets and then the daemon (tgtd ignores SIGTERM
//! while targets exist) and stops the process by PID, even when a test
//! fails.
//!
//! The panicking methods are for tests; the `try_` methods and
//! [`Tgt::launch`] return errors for callers that must clean up and go on
//! (the benchmark suite).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::{Peer, free_port, require_tool, wait_for_tcp};

/// Long-fat-network settings raised on a target: tgt's maxima for data
/// segments and bursts, unsolicited data allowed, 16 outstanding R2Ts
/// (the iSCSI remote-write study's keys; tgt's defaults are 8 KiB segments, 256 KiB bursts and
/// InitialR2T=Yes).
pub const LFN_TARGET_PARAMS: &[(&str, &str)] = &[
    ("MaxRecvDataSegmentLength", "16777215"),
    ("MaxXmitDataSegmentLength", "16777215"),
    ("MaxBurstLength", "16777215"),
    ("FirstBurstLength", "16777215"),
    ("InitialR2T", "No"),
    ("MaxOutstandingR2T", "16"),
];

/// How long one tgtadm call may take (it answers in milliseconds; a
/// daemon that stopped answering its control socket must not hang a test).
const TGTADM_TIMEOUT: Duration = Duration::from_secs(30);

/// The size of a LUN on tgt's `null` backing store. tgt 1.0.85 fixes it at
/// 1 TiB; the backing-store path is only a label.
pub const NULL_LUN_SIZE: u64 = 1 << 40;

/// What a LUN stores its blocks in.
#[derive(Debug, Clone, Copy)]
enum Backing<'a> {
    /// A file, read and written with `pread`/`pwrite` (`--bstype rdwr`).
    File(&'a Path),
    /// Nothing (`--bstype null`): writes are dropped, reads return
    /// unspecified bytes; for benchmarks that must not be disk-bound.
    Null,
}

/// A tgtd with its own portal and control port, stopped on drop.
#[derive(Debug)]
pub struct Tgt {
    peer: Option<Peer>,
    /// The portal's address.
    pub addr: IpAddr,
    /// The portal's TCP port.
    pub port: u16,
    /// The control port (`tgtd -C`, `tgtadm -C`): it names tgtd's Unix
    /// socket `/var/run/tgtd/socket.CTL`.
    pub ctl: u16,
    tids: Mutex<Vec<u32>>,
    /// A temporary directory for backing files, removed on drop.
    pub dir: tempfile::TempDir,
}

/// A control port whose Unix socket is not taken by another tgtd.
fn free_control_port(avoid: u16) -> u16 {
    // tgtd 1.0.85 refuses large -C values ("out of range"): keep it small.
    loop {
        let c = 6000 + free_port() % 24000;
        if c != avoid && !Path::new(&format!("/var/run/tgtd/socket.{c}")).exists() {
            return c;
        }
    }
}

impl Tgt {
    /// Starts tgtd on a free port of 127.0.0.1 and waits for its portal.
    ///
    /// # Panics
    /// tgt is not installed or tgtd does not come up.
    pub fn start() -> Tgt {
        require_tgt();
        let port = free_port();
        let t = Tgt::launch(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), |_| Ok(()))
            .unwrap_or_else(|e| panic!("{e:#}"));
        wait_for_tcp(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), Duration::from_secs(10));
        t
    }

    /// Starts tgtd with its portal on `portal`; `enter` prepares the
    /// command first (e.g. `Scenario::enter` to run it in a namespace).
    /// Returns once tgtadm answers and lists the portal.
    ///
    /// # Errors
    /// tgt not installed, tgtd failing to start or exiting (e.g. the portal
    /// address is taken), or no answer on the control socket in 10 s.
    pub fn launch(
        portal: SocketAddr,
        enter: impl FnOnce(&mut Command) -> std::io::Result<()>,
    ) -> anyhow::Result<Tgt> {
        let tgtd = crate::which("tgtd").context("tgtd is not installed: `apt-get install -y tgt`")?;
        crate::which("tgtadm").context("tgtadm is not installed: `apt-get install -y tgt`")?;
        let ctl = free_control_port(portal.port());
        let mut cmd = Command::new(tgtd);
        cmd.args(["-f", "-C", &ctl.to_string(), "--iscsi", &format!("portal={portal}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        enter(&mut cmd).context("preparing tgtd")?;
        let child = cmd.stdin(Stdio::null()).spawn().context("starting tgtd")?;
        let peer = Peer { child: Some(child), name: "tgtd".into() };
        let mut t = Tgt {
            peer: Some(peer),
            addr: portal.ip(),
            port: portal.port(),
            ctl,
            tids: Mutex::new(Vec::new()),
            dir: crate::tempdir(),
        };
        // The control socket and the portal come up one after the other;
        // the portal is listed once it listens.
        let want = format!("Portal: {portal},");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = t.peer.as_mut().and_then(Peer::try_wait) {
                t.peer = None;
                t.remove_control_socket();
                bail!("tgtd with portal {portal} exited at start ({status}): is the address taken?");
            }
            if t.try_tgtadm(&["--op", "show", "--mode", "portal"]).is_ok_and(|out| out.contains(&want)) {
                return Ok(t);
            }
            if Instant::now() > deadline {
                bail!("tgtd (control port {ctl}) did not list portal {portal} within 10 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `tgtadm -C CTL --lld iscsi ARGS...` and returns its stdout.
    ///
    /// # Errors
    /// tgtadm cannot run or fails; the message holds its output.
    pub fn try_tgtadm(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = crate::output_within(
            Command::new("tgtadm").args(["-C", &self.ctl.to_string(), "--lld", "iscsi"]).args(args),
            TGTADM_TIMEOUT,
        )
        .context("running tgtadm")?;
        if !out.status.success() {
            bail!(
                "tgtadm {} failed ({}): {}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Like [`Tgt::try_tgtadm`].
    ///
    /// # Panics
    /// tgtadm fails.
    pub fn tgtadm(&self, args: &[&str]) -> String {
        self.try_tgtadm(args).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// A sparse backing file of `size` bytes in the temporary directory.
    ///
    /// # Panics
    /// The file cannot be created.
    pub fn file(&self, name: &str, size: u64) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::File::create(&p).and_then(|f| f.set_len(size)).expect("create backing file");
        p
    }

    fn try_new_target(
        &self,
        tid: u32,
        iqn: &str,
        backing: Backing<'_>,
        block_size: Option<u32>,
        thin: bool,
    ) -> anyhow::Result<()> {
        let t = tid.to_string();
        self.try_tgtadm(&["--op", "new", "--mode", "target", "--tid", &t, "-T", iqn])?;
        self.tids.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(tid);
        let (path, bstype) = match backing {
            Backing::File(f) => (f.to_str().context("backing file path is not UTF-8")?.to_string(), "rdwr"),
            Backing::Null => (format!("null-{tid}"), "null"),
        };
        let mut args = vec![
            "--op",
            "new",
            "--mode",
            "logicalunit",
            "--tid",
            &t,
            "--lun",
            "1",
            "-b",
            &path,
            "--bstype",
            bstype,
        ];
        let bs = block_size.map(|b| b.to_string());
        if let Some(b) = &bs {
            args.extend(["--blocksize", b]);
        }
        self.try_tgtadm(&args)?;
        if thin {
            self.try_tgtadm(&[
                "--op",
                "update",
                "--mode",
                "logicalunit",
                "--tid",
                &t,
                "--lun",
                "1",
                "--params",
                "thin_provisioning=1",
            ])?;
        }
        self.try_tgtadm(&["--op", "bind", "--mode", "target", "--tid", &t, "-I", "ALL"])?;
        Ok(())
    }

    /// Creates target `tid` named `iqn` with LUN 1 on `file` (`--bstype
    /// rdwr`), blocks of `block_size` bytes (tgt's default is 512), thin
    /// provisioned (UNMAP) if `thin`, open to every initiator.
    ///
    /// # Panics
    /// tgtadm refuses.
    pub fn target(&self, tid: u32, iqn: &str, file: &Path, block_size: Option<u32>, thin: bool) {
        self.try_new_target(tid, iqn, Backing::File(file), block_size, thin)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Creates target `tid` named `iqn` with LUN 1 on tgt's `null` backing
    /// store: [`NULL_LUN_SIZE`] bytes, writes dropped, reads of unspecified
    /// bytes (tgt sends its data buffer unfilled: zeroes when freshly
    /// mapped, an earlier command's data when reused; copy with
    /// `--no-sparse` so every byte is carried and counted as data).
    /// Nothing touches a disk, so a benchmark measures the network.
    ///
    /// # Errors
    /// tgtadm refuses (e.g. a tgt built without the null store).
    pub fn try_null_target(&self, tid: u32, iqn: &str, block_size: Option<u32>) -> anyhow::Result<()> {
        self.try_new_target(tid, iqn, Backing::Null, block_size, false)
    }

    /// Like [`Tgt::try_null_target`].
    ///
    /// # Panics
    /// tgtadm refuses.
    pub fn null_target(&self, tid: u32, iqn: &str, block_size: Option<u32>) {
        self.try_null_target(tid, iqn, block_size).unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Sets a target parameter (`tgtadm --op update --name KEY --value V`),
    /// e.g. `MaxConnections`, `HeaderDigest`, `nop_interval`.
    ///
    /// # Errors
    /// tgtadm refuses the key or value.
    pub fn try_set(&self, tid: u32, key: &str, value: &str) -> anyhow::Result<()> {
        let t = tid.to_string();
        self.try_tgtadm(&["--op", "update", "--mode", "target", "--tid", &t, "--name", key, "--value", value])
            .map(drop)
    }

    /// Like [`Tgt::try_set`].
    ///
    /// # Panics
    /// tgtadm refuses.
    pub fn set(&self, tid: u32, key: &str, value: &str) {
        self.try_set(tid, key, value).unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Raises the target's limits for long-fat networks
    /// ([`LFN_TARGET_PARAMS`]).
    ///
    /// # Errors
    /// tgtadm refuses one of them.
    pub fn try_lfn(&self, tid: u32) -> anyhow::Result<()> {
        for (k, v) in LFN_TARGET_PARAMS {
            self.try_set(tid, k, v)?;
        }
        Ok(())
    }

    /// Like [`Tgt::try_lfn`].
    ///
    /// # Panics
    /// tgtadm refuses.
    pub fn lfn(&self, tid: u32) {
        self.try_lfn(tid).unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Adds the CHAP account `user`/`password` and binds it to `tid`: the
    /// target then refuses logins without it.
    ///
    /// # Panics
    /// tgtadm refuses.
    pub fn chap(&self, tid: u32, user: &str, password: &str) {
        self.tgtadm(&["--op", "new", "--mode", "account", "--user", user, "--password", password]);
        self.tgtadm(&["--op", "bind", "--mode", "account", "--tid", &tid.to_string(), "--user", user]);
    }

    /// Adds the CHAP account `user`/`password` and binds it to `tid` as the
    /// target's outgoing account: the target proves it knows `password`
    /// to initiators that ask (mutual CHAP).
    ///
    /// # Panics
    /// tgtadm refuses.
    pub fn chap_outgoing(&self, tid: u32, user: &str, password: &str) {
        self.tgtadm(&["--op", "new", "--mode", "account", "--user", user, "--password", password]);
        self.tgtadm(&[
            "--op",
            "bind",
            "--mode",
            "account",
            "--tid",
            &tid.to_string(),
            "--user",
            user,
            "--outgoing",
        ]);
    }

    /// Lets only the initiator named `name` log in to `tid` (an ACL by
    /// InitiatorName instead of every initiator).
    ///
    /// # Panics
    /// tgtadm refuses.
    pub fn allow_only_initiator(&self, tid: u32, name: &str) {
        let t = tid.to_string();
        self.tgtadm(&["--op", "unbind", "--mode", "target", "--tid", &t, "-I", "ALL"]);
        self.tgtadm(&["--op", "bind", "--mode", "target", "--tid", &t, "--initiator-name", name]);
    }

    /// Deletes target `tid` at once (drops its connections).
    ///
    /// tgt refuses ("this logical unit is still active") while commands
    /// are queued on the LU, even with `--force`: this retries for 2 s.
    ///
    /// # Panics
    /// The target is still there after the retries.
    pub fn delete_target(&self, tid: u32) {
        let t = tid.to_string();
        for _ in 0..200 {
            if self.try_tgtadm(&["--op", "delete", "--force", "--mode", "target", "--tid", &t]).is_ok() {
                self.tids.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|&x| x != tid);
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("tgtadm could not delete target {tid}");
    }

    /// The URI of LUN 1 of `iqn`.
    pub fn uri(&self, iqn: &str) -> String {
        format!("iscsi://{}/{iqn}/1", SocketAddr::new(self.addr, self.port))
    }

    /// The URI of LUN 1 of `iqn` with CHAP credentials.
    pub fn chap_uri(&self, iqn: &str, user: &str, password: &str) -> String {
        format!("iscsi://{user}%{password}@{}/{iqn}/1", SocketAddr::new(self.addr, self.port))
    }

    /// The daemon's PID (0 once stopped).
    pub fn pid(&self) -> u32 {
        self.peer.as_ref().map_or(0, Peer::pid)
    }

    /// Kills tgtd at once (SIGKILL): every connection drops.
    pub fn kill(&mut self) {
        if let Some(p) = &self.peer {
            let _ = wanblk_sys::process::signal(p.pid(), wanblk_sys::process::SIGKILL);
        }
        if let Some(mut p) = self.peer.take() {
            p.stop();
        }
        self.tids.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        self.remove_control_socket();
    }

    /// tgtd leaves its control socket and lock file behind when it ends:
    /// remove ours once the daemon is gone.
    fn remove_control_socket(&self) {
        let sock = format!("/var/run/tgtd/socket.{}", self.ctl);
        let _ = std::fs::remove_file(format!("{sock}.lock"));
        let _ = std::fs::remove_file(sock);
    }
}

impl Drop for Tgt {
    fn drop(&mut self) {
        if self.peer.is_none() {
            return;
        }
        // tgtd ignores SIGTERM while targets exist: delete them, then the system.
        let tids: Vec<u32> =
            self.tids.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..).collect();
        for tid in tids {
            let _ = self.try_tgtadm(&[
                "--op",
                "delete",
                "--force",
                "--mode",
                "target",
                "--tid",
                &tid.to_string(),
            ]);
        }
        let _ = crate::output_within(
            Command::new("tgtadm").args(["-C", &self.ctl.to_string(), "--op", "delete", "--mode", "system"]),
            TGTADM_TIMEOUT,
        );
        if let Some(mut p) = self.peer.take() {
            p.stop();
        }
        self.remove_control_socket();
    }
}

/// Checks tgt is installed, naming the package to install if not.
///
/// # Panics
/// tgtd or tgtadm is missing.
pub fn require_tgt() {
    require_tool("tgtd", "tgt");
    require_tool("tgtadm", "tgt");
}
