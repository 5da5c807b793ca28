//! `wanblk mount`: the remote disk as the regular file `MOUNTPOINT/disk`
//! (FUSE), through the front end (read-ahead, cache, write-back) and the
//! tuned session pool, so `losetup`, `mkfs`, `mount` and `dd` work on it
//! with no second NBD hop.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use wanblk_blockdev::Endpoint;
use wanblk_frontend::fuse::{self, MountOptions, Mounted};

use crate::cmd::frontend::{CacheArgs, Opened};
use crate::cmd::session::{ClientTlsArgs, SessionArgs};

/// How often the command checks whether the mount was removed from outside.
const POLL: Duration = Duration::from_millis(200);
/// Unmount attempts, POLL apart, before a busy mount point is reported.
const BUSY_RETRIES: usize = 25;

/// Arguments of `wanblk mount` (the help text is in `cmd::help`).
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The remote store: nbd://, nbd+unix:// or iscsi:// (see LOCATIONS in --help).
    uri: String,
    /// An existing empty directory; the disk appears in it as the file `disk`.
    mountpoint: PathBuf,
    #[command(flatten)]
    session: SessionArgs,
    #[command(flatten)]
    tls: ClientTlsArgs,
    #[command(flatten)]
    cache: CacheArgs,
    /// Show the disk read-only.
    #[arg(long)]
    read_only: bool,
    /// Let users other than the one mounting open the disk (FUSE `allow_other`).
    #[arg(long)]
    allow_other: bool,
    /// Write the process id to this file once mounted (removed on exit).
    #[arg(long, value_name = "PATH")]
    pid_file: Option<PathBuf>,
}

/// Runs `wanblk mount`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    if let Err(e) = fuse::check_mountpoint(&args.mountpoint) {
        bail!("{e}");
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(mount(args))
}

async fn mount(args: Args) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let opened = Opened::open(&args.uri, &args.session, args.tls.options(), &args.cache).await?;
    let endpoint: std::sync::Arc<dyn Endpoint> = opened.front.clone();
    let opts =
        MountOptions { read_only: args.read_only, allow_other: args.allow_other, ..MountOptions::default() };
    let mounted = match fuse::mount(endpoint, &args.mountpoint, &opts, tokio::runtime::Handle::current()) {
        Ok(m) => m,
        Err(e) => {
            let _ = opened.finish().await;
            return Err(e).with_context(|| {
                format!(
                    "cannot mount on {} (needs /dev/fuse, and root or fusermount3)",
                    args.mountpoint.display()
                )
            });
        }
    };
    if let Some(p) = &args.pid_file {
        let tmp = p.with_extension("pid.tmp");
        std::fs::write(&tmp, format!("{}\n", std::process::id()))
            .and_then(|()| std::fs::rename(&tmp, p))
            .with_context(|| format!("cannot write pid file {}", p.display()))?;
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", mounted.disk_path().display())?;
        out.flush()?;
    }

    loop {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = tokio::time::sleep(POLL) => {
                if mounted.finished() {
                    break;
                }
                continue;
            }
        }
        // Asked to stop: write back first, so the data is safe even if the
        // unmount has to wait for a loop device.
        if let Err(e) = opened.front.flush().await {
            eprintln!("wanblk: writing back before unmount failed: {e}");
        }
        // A loop device just detached (`losetup -d`) lets go of the file a
        // moment later: try for a few seconds before calling it busy.
        let mut result = unmount(&args.mountpoint);
        for _ in 0..BUSY_RETRIES {
            if result.is_ok() {
                break;
            }
            tokio::time::sleep(POLL).await;
            result = unmount(&args.mountpoint);
        }
        match result {
            Ok(()) => break,
            Err(e) => eprintln!("wanblk: {e}"),
        }
    }
    let joined = wait_session(mounted).await;
    if let Some(p) = &args.pid_file {
        let _ = std::fs::remove_file(p);
    }
    let finished = opened.finish().await;
    joined.and(finished)
}

/// Unmounts, directly as root, through `fusermount3 -u` otherwise.
fn unmount(mountpoint: &Path) -> anyhow::Result<()> {
    match wanblk_sys::mount::unmount(mountpoint) {
        Ok(()) => Ok(()),
        // Not (or no longer) mounted: the session ends by itself.
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::ResourceBusy => bail!(
            "{} is busy (a loop device or an open file uses the disk); release it, then stop wanblk again",
            mountpoint.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let status = std::process::Command::new("fusermount3").arg("-u").arg(mountpoint).status();
            match status {
                Ok(s) if s.success() => Ok(()),
                Ok(s) => bail!("fusermount3 -u {} failed ({s})", mountpoint.display()),
                Err(e) => {
                    bail!("cannot unmount {}: no privilege, and fusermount3: {e}", mountpoint.display())
                }
            }
        }
        Err(e) => bail!("cannot unmount {}: {e}", mountpoint.display()),
    }
}

async fn wait_session(mounted: Mounted) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(move || mounted.join()).await.context("FUSE session")?.context("FUSE session")
}
