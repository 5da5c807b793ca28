//! `wanblk serve`: the block device front end. Serves a remote store to
//! local NBD clients (qemu, nbdfuse, nbd-client, nbdcopy...) through the
//! session pool, so every application gets N tuned parallel sessions over
//! the long-fat network without knowing it.

use std::sync::Arc;

use wanblk_blockdev::Endpoint;

use crate::cmd::frontend::{CacheArgs, Opened};
use crate::cmd::session::SessionArgs;
use crate::cmd::target::ServeArgs;

/// Serve a remote store locally over NBD, through N tuned parallel sessions.
///
/// The store (`nbd://`, `nbd+unix://` or `iscsi://`) is opened as a session
/// pool exactly as `wanblk copy` opens it (`-C N|auto`, `--requests`,
/// `--request-size`...). Local clients connect to the address or socket
/// given here. Their requests go through a cache shared by all clients:
/// sequential reads are prefetched far ahead (read-ahead), data read is
/// kept (`--cache-size`), and writes are acknowledged once held in memory
/// (`--write-back-limit`) and sent in large requests; a flush (or a FUA
/// write) returns once the remote has every earlier write, so a crash of
/// wanblk loses only writes no flush covered, like a disk's volatile cache.
/// They are cut into requests and carried over the active sessions;
/// with `-C auto` N is tuned from the goodput of what the clients actually
/// do. Straggling reads are duplicated on idle sessions; writes never are.
/// Runs until SIGINT or SIGTERM, then writes back what is pending. Each
/// local URI is printed on stdout when listening.
///
/// An `nbds://` store takes its TLS settings from the URI (libnbd's
/// `?tls-certificates=DIR` etc.); `--tls*` options here are for the local
/// side. The Unix socket is created 0600, so only this user can reach the
/// remote store through it.
///
/// Example: `wanblk serve iscsi://san/iqn.x:disk/1 --socket /run/disk.sock`
/// then `nbdfuse /mnt/disk nbd+unix:///?socket=/run/disk.sock` or
/// `qemu-system-x86_64 -drive file=nbd+unix:///?socket=/run/disk.sock`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The remote store.
    uri: String,
    #[command(flatten)]
    session: SessionArgs,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    serve: ServeArgs,
}

/// Runs `wanblk serve`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let opened = Opened::open(&args.uri, &args.session, Default::default(), &args.cache).await?;
    let backend: Arc<dyn Endpoint> = opened.front.clone();
    let result = crate::cmd::target::serve(&args.serve, true, Default::default(), backend).await;
    let finished = opened.finish().await;
    result.and(finished)
}
