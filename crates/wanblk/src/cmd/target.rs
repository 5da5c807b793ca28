//! `wanblk target`.

/// Arguments of `wanblk target`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

/// Runs `wanblk target`.
pub(crate) fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("wanblk target is not implemented yet")
}
