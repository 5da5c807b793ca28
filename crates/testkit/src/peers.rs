//! Real NBD peers started for tests, each on loopback or a Unix socket in a
//! test's temp dir, each stopped by PID when its guard drops.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{Peer, free_port, require_tool, run, wait_for_path, wait_for_tcp};

/// A daemon that forked away from the process we started (nbd-server
/// without `-d`), known by the PID it wrote. Stopped by PID on drop.
#[derive(Debug)]
pub struct Daemon {
    pid: u32,
    name: String,
}

impl Daemon {
    /// The daemon's PID.
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

fn alive(pid: u32) -> bool {
    // A zombie (state Z) has exited; only its parent can reap it.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = wanblk_sys::process::signal(self.pid, wanblk_sys::process::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(self.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive(self.pid) {
            eprintln!("testkit: {} (pid {}) ignored SIGTERM, killing", self.name, self.pid);
            let _ = wanblk_sys::process::signal(self.pid, wanblk_sys::process::SIGKILL);
        }
    }
}

/// nbdkit in the foreground on a Unix socket in `dir`, with plugin `args`
/// (e.g. `["memory", "1G"]`); returns the guard and the URI.
pub fn nbdkit(dir: &Path, args: &[&str]) -> (Peer, String) {
    require_tool("nbdkit", "nbdkit");
    let sock = dir.join(format!("nbdkit-{}.sock", free_port()));
    let peer = Peer::spawn(
        "nbdkit",
        Command::new("nbdkit").args(["-f", "--exit-with-parent", "-U"]).arg(&sock).args(args),
    );
    wait_for_path(&sock, Duration::from_secs(10));
    (peer, format!("nbd+unix:///?socket={}", sock.display()))
}

/// nbdkit in the foreground on TCP port `port` of 127.0.0.1, with plugin
/// `args`; returns the guard and the URI `nbd://127.0.0.1:PORT/`. A test
/// that kills it can start another on the same port (clients reconnect to
/// the same URI).
pub fn nbdkit_tcp(port: u16, args: &[&str]) -> (Peer, String) {
    require_tool("nbdkit", "nbdkit");
    let peer = Peer::spawn(
        "nbdkit",
        Command::new("nbdkit")
            .args(["-f", "--exit-with-parent", "-i", "127.0.0.1", "-p", &port.to_string()])
            .args(args),
    );
    wait_for_tcp(SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_secs(10));
    (peer, format!("nbd://127.0.0.1:{port}/"))
}

/// qemu-nbd serving a raw `file` on a Unix socket in `dir`, to up to 64
/// clients at once, persistent (`-t`).
pub fn qemu_nbd(dir: &Path, file: &Path) -> (Peer, String) {
    require_tool("qemu-nbd", "qemu-utils");
    let sock = dir.join(format!("qemu-nbd-{}.sock", free_port()));
    let peer = Peer::spawn(
        "qemu-nbd",
        Command::new("qemu-nbd").args(["-f", "raw", "--shared=64", "-t", "-k"]).arg(&sock).arg(file),
    );
    wait_for_path(&sock, Duration::from_secs(10));
    (peer, format!("nbd+unix:///?socket={}", sock.display()))
}

/// nbd-server serving `file` as export `disk` on a TCP port of 127.0.0.1.
/// It runs as a daemon (forking a process per client, so several
/// connections work) and is stopped by the PID it writes.
pub fn nbd_server(dir: &Path, file: &Path) -> (Daemon, String) {
    require_tool("nbd-server", "nbd-server");
    let port = free_port();
    let cfg = dir.join(format!("nbd-server-{port}.conf"));
    let pidfile = dir.join(format!("nbd-server-{port}.pid"));
    std::fs::write(
        &cfg,
        format!(
            "[generic]\nlistenaddr = 127.0.0.1\nport = {port}\nallowlist = true\n\n[disk]\nexportname = {}\n",
            file.display()
        ),
    )
    .expect("write nbd-server config");
    run(Command::new("nbd-server").arg("-C").arg(&cfg).arg("-p").arg(&pidfile));
    let pid = wait_for_pid_file(&pidfile, Duration::from_secs(10));
    let daemon = Daemon { pid, name: "nbd-server".into() };
    wait_for_tcp(SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_secs(10));
    (daemon, format!("nbd://127.0.0.1:{port}/disk"))
}

/// Waits until a daemon's pid file holds a whole number. The daemon creates
/// the file before it writes the number, so an empty or partial read is
/// not yet an answer (CI once caught nbd-server between the two).
///
/// # Panics
/// After `timeout`, with what the file held.
fn wait_for_pid_file(path: &Path, timeout: Duration) -> u32 {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let late = std::time::Instant::now() >= deadline;
        // A whole line, or whatever parses once the time is up.
        if (text.ends_with('\n') || late)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        if late {
            panic!("{} held no pid after {timeout:?} (it held {text:?})", path.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Copies with libnbd's nbdcopy (e.g. to read back what a server holds).
pub fn nbdcopy(src: &str, dst: &str, extra: &[&str]) {
    require_tool("nbdcopy", "libnbd-bin");
    run(Command::new("nbdcopy").args(extra).arg(src).arg(dst));
}
