//! `wanblk netem`.

/// Subcommands of `wanblk netem`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Create the topology and start the emulator.
    Up,
}

/// Runs `wanblk netem ...`.
pub(crate) fn run(_cmd: Command) -> anyhow::Result<()> {
    anyhow::bail!("wanblk netem is not implemented yet")
}
