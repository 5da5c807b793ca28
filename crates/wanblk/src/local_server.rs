//! `[ CMD ARGS ... ]`: a local NBD server run as a subprocess for the
//! length of one command, as nbdcopy and nbdinfo do, e.g.
//! `[ qemu-nbd -f qcow2 disk.qcow2 ]` to read or write the disk a qcow2
//! file holds.
//!
//! The server gets its listening socket by systemd socket activation,
//! which qemu-nbd and nbdkit both understand: wanblk binds a Unix socket in
//! a private directory (mode 0700) and passes it as file descriptor 3 with
//! `LISTEN_FDS=1` and `LISTEN_PID` set to the server's own pid. So no
//! socket path, port or export name has to be written into CMD, and nobody
//! else can connect. The server's stdout goes to wanblk's stderr (stdout
//! may carry the image, `-`). At the end wanblk disconnects, lets the
//! server exit (qemu-nbd does once its client leaves), and stops it by its
//! PID if it does not (SIGTERM, then SIGKILL).

use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use wanblk_nbd::{NbdConnector, NbdOptions, NbdSession, NbdUri};

/// How long the server may take to answer the handshake.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long it may take to exit by itself once its client left (qemu-nbd
/// does; nbdkit waits for a signal).
const EXIT_WAIT: Duration = Duration::from_secs(1);
/// How long it may take after SIGTERM (qemu-nbd flushes an image first).
const TERM_WAIT: Duration = Duration::from_secs(30);
/// How long a failed handshake waits to learn whether the server exited.
const EXITED_WAIT: Duration = Duration::from_millis(500);

/// The shell line that makes `LISTEN_PID` the server's pid: `$$` is the
/// shell's pid, which `exec` hands on to the server.
const ACTIVATE: &str = "LISTEN_PID=$$; export LISTEN_PID; exec \"$@\"";

/// A running local NBD server. Stopped by PID when dropped, if
/// [`LocalServer::stop`] was not called.
#[derive(Debug)]
pub(crate) struct LocalServer {
    child: Option<tokio::process::Child>,
    dir: PathBuf,
    shown: String,
}

/// `[ a b c ]` as users write it.
pub(crate) fn show(argv: &[String]) -> String {
    format!("[ {} ]", argv.join(" "))
}

/// A fresh private directory for the socket.
fn private_dir() -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    static N: AtomicU32 = AtomicU32::new(0);
    let base = std::env::temp_dir();
    for _ in 0..100 {
        let dir = base.join(format!("wanblk-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
        }
    }
    bail!("cannot create a private directory under {}", base.display())
}

impl LocalServer {
    /// Starts `argv` as a socket-activated NBD server and opens one session
    /// to it (`opts`; the default export).
    ///
    /// # Errors
    /// The program cannot be started, exits before answering, or its
    /// handshake fails.
    pub(crate) async fn start(
        argv: &[String],
        opts: NbdOptions,
    ) -> anyhow::Result<(LocalServer, NbdSession)> {
        let shown = show(argv);
        if argv.is_empty() {
            bail!("{shown}: no command between [ and ]");
        }
        let dir = private_dir()?;
        let mut server = LocalServer { child: None, dir, shown: shown.clone() };
        let sock = server.dir.join("nbd.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock)
            .with_context(|| format!("{shown}: cannot listen on {}", sock.display()))?;
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.arg("-c").arg(ACTIVATE).arg("wanblk").args(argv).env("LISTEN_FDS", "1").stdin(Stdio::null());
        cmd.stdout(match std::io::stderr().as_fd().try_clone_to_owned() {
            Ok(fd) => Stdio::from(fd),
            Err(_) => Stdio::null(),
        });
        wanblk_sys::process::pass_listen_fd(&mut cmd, listener.as_raw_fd());
        wanblk_sys::process::terminate_with_parent(&mut cmd);
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        let child = cmd.spawn().with_context(|| format!("{shown}: cannot start"))?;
        // Only the server holds the socket now: if it dies, connecting fails
        // at once instead of waiting in the backlog.
        drop(listener);
        server.child = Some(child);
        let connector = NbdConnector::from_uri(
            NbdUri::unix(&sock, ""),
            NbdOptions { connect_timeout: START_TIMEOUT, ..opts },
        )
        .map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
        let opened = {
            let child = server.child.as_mut().expect("just set");
            let exited = |st: std::io::Result<std::process::ExitStatus>| match st {
                Ok(st) => anyhow::anyhow!(
                    "{shown} exited ({st}) before serving NBD; does it support socket activation (qemu-nbd, nbdkit)?"
                ),
                Err(e) => anyhow::anyhow!("{shown}: {e}"),
            };
            tokio::select! {
                r = connector.open() => match r {
                    Ok(s) => Ok(s),
                    // A server that exits after the connection reached its
                    // socket resets it: say that it exited, not "reset".
                    Err(e) => match tokio::time::timeout(EXITED_WAIT, child.wait()).await {
                        Ok(st) => Err(exited(st)),
                        Err(_) => Err(anyhow::anyhow!("{shown}: {}", e.kind)),
                    },
                },
                st = child.wait() => Err(exited(st)),
            }
        };
        match opened {
            Ok(session) => Ok((server, session)),
            Err(e) => {
                server.stop().await;
                Err(e)
            }
        }
    }

    /// The server as the user wrote it.
    pub(crate) fn name(&self) -> &str {
        &self.shown
    }

    /// Waits for the server to exit by itself (call after closing the
    /// session), then stops it by PID; removes the socket directory.
    pub(crate) async fn stop(&mut self) {
        if let Some(mut child) = self.child.take()
            && tokio::time::timeout(EXIT_WAIT, child.wait()).await.is_err()
        {
            if let Some(pid) = child.id() {
                let _ = wanblk_sys::process::signal(pid, wanblk_sys::process::SIGTERM);
            }
            if tokio::time::timeout(TERM_WAIT, child.wait()).await.is_err() {
                tracing::warn!("{} ignored SIGTERM; killing it", self.shown);
                let _ = child.kill().await;
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        // Not stopped cleanly (an error path): kill_on_drop kills the
        // child by its PID; the directory goes too.
        self.child = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
