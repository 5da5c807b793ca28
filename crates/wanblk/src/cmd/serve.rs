//! `wanblk serve`: the block device front end. Serves a remote store to
//! local NBD clients (qemu, nbdfuse, nbd-client, nbdcopy...) through the
//! session pool, so every application gets N tuned parallel sessions over
//! the long-fat network without knowing it.

use std::sync::Arc;

use wanblk_blockdev::Endpoint;

use crate::cmd::frontend::{CacheArgs, Opened};
use crate::cmd::session::SessionArgs;
use crate::cmd::target::ServeArgs;

/// Arguments of `wanblk serve` (the help text is in `cmd::help`).
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The remote store: nbd://, nbd+unix:// or iscsi:// (see LOCATIONS in --help).
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
