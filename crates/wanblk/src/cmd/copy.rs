//! `wanblk copy`.

/// Arguments of `wanblk copy`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

/// Runs `wanblk copy`.
pub(crate) fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("wanblk copy is not implemented yet")
}
