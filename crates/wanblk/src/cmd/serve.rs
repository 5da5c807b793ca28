//! `wanblk serve`: the block device front end. Serves a remote store to
//! local NBD clients (qemu, nbdfuse, nbd-client, nbdcopy...) through the
//! session pool, so every application gets N tuned parallel sessions over
//! the long-fat network without knowing it.

use std::sync::Arc;

use anyhow::Context;
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::control::{self, ControlState};
use wanblk_blockdev::pool::Hedge;

use crate::cmd::session::SessionArgs;
use crate::cmd::target::ServeArgs;
use crate::location::{Location, open_pool};

/// Serve a remote store locally over NBD, through N tuned parallel sessions.
///
/// The store (`nbd://`, `nbd+unix://` or `iscsi://`) is opened as a session
/// pool exactly as `wanblk copy` opens it (`-C N|auto`, `--requests`,
/// `--request-size`...). Local clients connect to the address or socket
/// given here; their requests are split into chunks and carried over the
/// active sessions; with `-C auto` N is tuned from the goodput of what the
/// clients actually do. Straggling reads are duplicated on idle sessions;
/// writes never are (two clients may write the same range). Runs until
/// SIGINT or SIGTERM. Each local URI is printed on stdout when listening.
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
    serve: ServeArgs,
}

/// Runs `wanblk serve`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let loc = Location::parse(&args.uri).context("store")?;
    let net = args.session.net_options(Hedge::Reads);
    let pool = open_pool(&loc, &net).await?;
    for n in pool.notes() {
        eprintln!("wanblk: note: {n}");
    }
    let state = Arc::new(ControlState::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let controller = {
        let (p, st) = (Arc::clone(&pool), Arc::clone(&state));
        let cfg = args.session.controller_config(true);
        tokio::spawn(async move {
            let counter = Arc::clone(&p);
            control::run(vec![p], move || counter.completed_bytes(), cfg, st, stop_rx).await
        })
    };
    let backend: Arc<dyn Endpoint> = pool.clone();
    let result = crate::cmd::target::serve(&args.serve, true, None, backend).await;
    let _ = stop_tx.send(true);
    let _ = controller.await;
    if let Err(e) = pool.close().await {
        tracing::debug!("closing {}: {e}", pool.name());
    }
    if let Some(last) = state.samples().last() {
        eprintln!(
            "wanblk: served with N = {} (last interval {:.1} Mbit/s)",
            state.current_n(),
            last.goodput_mbps
        );
    }
    result
}
