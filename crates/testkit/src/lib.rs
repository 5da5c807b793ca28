//! Test support shared by the integration tests: start real peers (nbdkit,
//! qemu-nbd, nbd-server, tgtd, iperf3...), wait for them to listen, and stop
//! them by PID when the guard drops, even when the test fails.
//!
//! [`tgt`] runs tgtd, the iSCSI target, for the iSCSI tests and the iSCSI
//! benchmark.
//!
//! Missing tools are a test failure with a message naming the package to
//! install, never a silent skip: the README's test command installs them.
//!
//! Nothing waits without a deadline ([`wait`]): commands run with a
//! timeout and are killed by PID when it passes, threads are joined with
//! one, so a hang is a failing test that names what hung.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

pub mod data;
pub mod nbd_hostile;
pub mod peers;
pub mod tgt;
pub mod tls;
pub mod wait;

pub use data::{block_data, check_blocks, fill_blocks};
pub use wait::{
    RUN_TIMEOUT, Running, join_within, output_within, run_with_timeout, try_join_within, wait_child,
};

/// A child process that is stopped (SIGTERM, then SIGKILL after 5 s) by PID
/// when the guard drops.
#[derive(Debug)]
pub struct Peer {
    child: Option<Child>,
    name: String,
}

impl Peer {
    /// Spawns `cmd` with stdin closed and output inherited (visible with `--nocapture`).
    ///
    /// # Panics
    /// If the program cannot be started.
    pub fn spawn(name: &str, cmd: &mut Command) -> Peer {
        let child =
            cmd.stdin(Stdio::null()).spawn().unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        Peer { child: Some(child), name: name.to_string() }
    }

    /// Takes over a child the test started some other way (e.g. in a
    /// network namespace): it is stopped by PID when the guard drops.
    pub fn adopt(name: &str, child: Child) -> Peer {
        Peer { child: Some(child), name: name.to_string() }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// Waits for the process to exit by itself.
    ///
    /// # Panics
    /// After `timeout` (the process is killed by PID and reaped first),
    /// naming the process and the timeout; or if it was already stopped.
    pub fn wait_within(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let child = self.child.as_mut().unwrap_or_else(|| panic!("{} was already stopped", self.name));
        let st = wait_child(child, timeout, &self.name);
        self.child = None;
        st
    }

    /// Returns the exit status if the process has already ended.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Kills the process at once (SIGKILL, as a crash would end it) and
    /// reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `sig` to the process (e.g. SIGINT, SIGSTOP).
    pub fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            signal(c.id(), sig);
        }
    }

    /// Stops the process now (SIGTERM, then SIGKILL after 5 s) and reaps it.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        signal(child.id(), wanblk_sys::process::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("testkit: {} (pid {}) ignored SIGTERM, killing", self.name, child.id());
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn signal(pid: u32, sig: i32) {
    let _ = wanblk_sys::process::signal(pid, sig);
}

/// Panics with an install hint unless `tool` is on `PATH`.
pub fn require_tool(tool: &str, package: &str) -> PathBuf {
    which(tool).unwrap_or_else(|| {
        panic!("{tool} is not installed: run the README's test command, or `apt-get install -y {package}`")
    })
}

/// Finds `tool` on `PATH` (and the sbin directories, where tgtd lives).
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].iter().map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// A TCP port on 127.0.0.1 that was free a moment ago, chosen below the
/// kernel's ephemeral range.
///
/// A port from that range (what binding port 0 gives) can be taken, between
/// this call and the peer's bind, as the source port of any outgoing
/// connection on the machine, and [`wait_for_tcp`] could even connect to
/// itself there (TCP simultaneous open) while nothing listens yet: the
/// peer's bind then fails and the test sees "connection refused" (CI,
/// stop 24). Ports below the range are only ever taken by listeners.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, high) = below_ephemeral();
    let span = u32::from(high - low);
    // Test binaries of one run may overlap: start each at its own offset.
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let port = low + ((start + NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free TCP port in {low}..{high}")
}

/// A port range below the kernel's ephemeral one (`ip_local_port_range`).
fn below_ephemeral() -> (u16, u16) {
    let first = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let high = first.clamp(12_000, 32_768);
    (high - 10_000, high)
}

/// Waits until something accepts TCP connections at `addr`.
///
/// # Panics
/// After `timeout`.
pub fn wait_for_tcp(addr: SocketAddr, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            // A connection to itself (simultaneous open) is not a listener.
            if s.local_addr().ok() != Some(addr) {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listens at {addr} after {timeout:?}");
}

/// Waits until `path` exists (a Unix socket or a pid file).
///
/// # Panics
/// After `timeout`.
pub fn wait_for_path(path: &Path, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if path.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{} did not appear after {timeout:?}", path.display());
}

/// A fresh temporary directory, removed on drop.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("wanblk-test-").tempdir().expect("create temp dir")
}

/// Writes `size` bytes of pseudo-random data (the image of [`data`] for
/// `seed`: every 512-byte block carries its offset and the seed, so data
/// copied to the wrong place changes the sha256) to `path` and returns
/// their sha256 in hex.
pub fn random_file(path: &Path, size: u64, seed: u64) -> io::Result<String> {
    let mut f = io::BufWriter::with_capacity(1 << 20, File::create(path)?);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0;
    while pos < size {
        let n = (size - pos).min(buf.len() as u64) as usize;
        fill_blocks(&mut buf[..n], pos, seed);
        h.update(&buf[..n]);
        f.write_all(&buf[..n])?;
        pos += n as u64;
    }
    f.flush()?;
    Ok(hex::encode(h.finalize()))
}

/// The sha256 of a file's contents, in hex.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut f = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Runs a command to completion (within [`RUN_TIMEOUT`]) and returns its
/// stdout, panicking with its stderr if it fails.
///
/// # Panics
/// The command cannot start, fails, or runs longer than [`RUN_TIMEOUT`]
/// (it is killed by PID first).
pub fn run(cmd: &mut Command) -> String {
    run_within(cmd, RUN_TIMEOUT)
}

/// Like [`run`], with the command's own timeout.
///
/// # Panics
/// The command cannot start, fails, or runs longer than `timeout` (it is
/// killed by PID first).
pub fn run_within(cmd: &mut Command, timeout: Duration) -> String {
    let out = run_with_timeout(cmd, timeout);
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}:\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
