//! The `wanblk` command: a user-space IP-SAN client that moves block storage
//! across long-fat networks over N parallel, automatically tuned sessions.
//!
//! Each subcommand lives in its own module under `cmd/`.

use clap::{Parser, Subcommand};

mod cmd;
mod location;
mod units;

/// wanblk: move block storage across long-fat networks over many tuned sessions.
#[derive(Debug, Parser)]
#[command(name = "wanblk", version, about, long_about = None)]
struct Cli {
    /// Log filter (e.g. `info`, `wanblk_blockdev=debug`); also read from RUST_LOG.
    #[arg(long, global = true, env = "RUST_LOG", default_value = "warn,fuser=error")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Copy a disk or image between any two endpoints (backup, restore, target to target).
    Copy(cmd::copy::Args),
    /// Serve a memory- or file-backed export over NBD (the embedded target).
    Target(cmd::target::Args),
    /// Serve a remote store to local NBD clients through N tuned sessions (the block device front end).
    Serve(cmd::serve::Args),
    /// Show a remote disk as the file MOUNTPOINT/disk (FUSE), with read-ahead and write-back, over N tuned sessions.
    Mount(cmd::mount::Args),
    /// Run the long-fat-network emulator (network namespaces + NFQUEUE).
    #[command(subcommand)]
    Netem(cmd::netem::Command),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&cli.log))
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Copy(a) => cmd::copy::run(a),
        Command::Target(a) => cmd::target::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Mount(a) => cmd::mount::run(a),
        Command::Netem(c) => cmd::netem::run(c),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wanblk: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
