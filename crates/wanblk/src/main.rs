//! The `wanblk` command: a user-space IP-SAN client that moves block storage
//! across long-fat networks over N parallel, automatically tuned sessions.
//!
//! Each subcommand lives in its own module under `cmd/`.

use clap::{Parser, Subcommand};

mod cmd;
mod exit;
mod image;
mod local_server;
mod location;
mod notify;
mod resume;
mod signals;
mod units;

/// The log filter without `--log`. fuser logs as an error every reply the
/// kernel no longer waits for: a reader killed mid-read (`dd` stopped by a
/// signal) made `mount` print "Failed to send FUSE reply: No such file or
/// directory". Nothing is lost there, and a reply we fail to make right
/// reaches the application as its I/O error anyway.
const DEFAULT_LOG: &str = "warn,fuser=error,fuser::reply=off";

/// Whether log lines carry colours: only on a terminal, and not where
/// `NO_COLOR` is set to anything but the empty string (no-color.org).
/// Logs sent to a file or a pipe (`wanblk mount ... 2> log`, systemd's
/// journal) had kept the escape codes.
fn log_colours(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

/// wanblk: move block storage across long-fat networks over many tuned sessions.
#[derive(Debug, Parser)]
#[command(name = "wanblk", version, about, long_about = None, after_help = cmd::help::MAIN_AFTER)]
struct Cli {
    /// Log filter (e.g. `info`, `wanblk_blockdev=debug`); also read from RUST_LOG. Log lines go to
    /// stderr, in colour only on a terminal and without NO_COLOR.
    #[arg(long, global = true, env = "RUST_LOG", default_value = DEFAULT_LOG)]
    log: String,
    #[command(subcommand)]
    command: Command,
}

// Each variant's one-line doc is its line in `wanblk --help`; the long
// help (`wanblk SUBCOMMAND --help`) is set on the variant, where clap
// takes it, from `cmd::help`.
#[derive(Debug, Subcommand)]
enum Command {
    /// Copy a disk or image between any two locations (backup, restore, target to target).
    #[command(long_about = cmd::help::COPY_ABOUT, after_long_help = cmd::help::COPY_AFTER)]
    Copy(cmd::copy::Args),
    /// Show a store's size, block sizes, flags and allocation, or list an NBD server's exports or an iSCSI portal's targets.
    #[command(long_about = cmd::help::INFO_ABOUT, after_long_help = cmd::help::INFO_AFTER)]
    Info(cmd::info::Args),
    /// Serve a memory- or file-backed export over NBD (the embedded target).
    #[command(after_long_help = cmd::help::TARGET_AFTER)]
    Target(cmd::target::Args),
    /// Serve a remote store to local NBD clients through N tuned sessions (the block device front end).
    #[command(long_about = cmd::help::SERVE_ABOUT, after_long_help = cmd::help::SERVE_AFTER)]
    Serve(cmd::serve::Args),
    /// Show a remote disk as the file MOUNTPOINT/disk (FUSE), with read-ahead and write-back, over N tuned sessions.
    #[command(long_about = cmd::help::MOUNT_ABOUT, after_long_help = cmd::help::MOUNT_AFTER)]
    Mount(cmd::mount::Args),
    /// Run the long-fat-network emulator (network namespaces + NFQUEUE).
    #[command(subcommand)]
    Netem(cmd::netem::Command),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::docs::CompletionsArgs),
    /// Print the man page, or write one page per subcommand into a directory.
    Man(cmd::docs::ManArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse_from(location::group_brackets(std::env::args_os()));
    // A copy (and the target serving one) frees every request's buffer once it
    // is written, and allocates the next of the same size: keep the freed pages
    // instead of faulting fresh zeroed ones in (loopback copy: 170k -> 9k page
    // faults, client CPU halved). Its peak is the bytes in flight, which the
    // copy reaches anyway. Not for `mount` and `serve`, whose resident memory
    // is held to --cache-size as blocks are evicted.
    if matches!(cli.command, Command::Copy(_) | Command::Target(_)) {
        wanblk_sys::alloc::keep_freed_memory();
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&cli.log))
        .with_writer(std::io::stderr)
        .with_ansi(log_colours(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .init();
    let result = match cli.command {
        Command::Copy(a) => cmd::copy::run(a),
        Command::Info(a) => cmd::info::run(a),
        Command::Target(a) => cmd::target::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Mount(a) => cmd::mount::run(a),
        Command::Netem(c) => cmd::netem::run(c),
        Command::Completions(a) => cmd::docs::completions(a, &mut <Cli as clap::CommandFactory>::command()),
        Command::Man(a) => cmd::docs::man(a, <Cli as clap::CommandFactory>::command()),
    };
    let (code, message) = exit::code_of(&result);
    if let Some(m) = message.filter(|m| !m.is_empty()) {
        match code {
            exit::INCOMPLETE => eprintln!("wanblk: {m}"),
            _ => eprintln!("wanblk: error: {m}"),
        }
    }
    std::process::ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }

    #[test]
    fn log_lines_are_coloured_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(super::log_colours(true, None));
        assert!(super::log_colours(true, Some(OsStr::new(""))));
        assert!(!super::log_colours(true, Some(OsStr::new("1"))));
        assert!(!super::log_colours(false, None));
    }

    #[test]
    fn the_default_log_filter_keeps_fuse_errors_but_not_replies_nobody_waits_for() {
        use std::io::Write;
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(super::DEFAULT_LOG))
            .with_writer(move || out.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(target: "fuser::reply", "Failed to send FUSE reply");
            tracing::error!(target: "fuser::session", "a session error");
            tracing::warn!(target: "fuser::session", "a session warning");
            tracing::warn!(target: "wanblk", "our warning");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("FUSE reply"), "{text}");
        assert!(text.contains("a session error") && text.contains("our warning"), "{text}");
        assert!(!text.contains("a session warning"), "{text}");
    }
}
