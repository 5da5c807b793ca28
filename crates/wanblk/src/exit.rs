//! Exit codes, in one place for every subcommand.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success: the work is complete (a copy: every byte copied, flushed, and verified with `--verify`) |
//! | 1 | failure: an error stopped the work, or `--verify` found a difference |
//! | 2 | usage: the command line cannot be carried out as given (bad option or location, a journal of another copy) |
//! | 3 | incomplete: interrupted (SIGINT, SIGTERM); a copy can be resumed (a `--stop-after` run asked to stop: 0) |
//!
//! A command returns `anyhow::Result<()>`; an error carrying a [`Status`]
//! (see [`usage`], [`incomplete`]) exits with its code, any other error
//! with [`FAILURE`].

use std::fmt;

/// Exit code of a success.
pub(crate) const SUCCESS: u8 = 0;
/// Exit code of a failure.
pub(crate) const FAILURE: u8 = 1;
/// Exit code of a command line that cannot be carried out (clap uses it too).
pub(crate) const USAGE: u8 = 2;
/// Exit code of work stopped before the end (interrupted, time-boxed).
pub(crate) const INCOMPLETE: u8 = 3;

/// The help text's summary of the exit codes.
pub(crate) const HELP: &str = "Exit codes: 0 success; 1 failure (an error, or --verify found a difference); \
2 usage (bad option or location, or a journal written for another copy); \
3 incomplete (interrupted by SIGINT or SIGTERM: run the same command again to resume).";

/// An error that ends the command with a given exit code.
#[derive(Debug)]
pub(crate) struct Status {
    /// The exit code.
    pub(crate) code: u8,
    /// What to print (`None`: nothing more, the command already did).
    pub(crate) message: Option<String>,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message.as_deref().unwrap_or(""))
    }
}

impl std::error::Error for Status {}

/// A usage error: the command line cannot be carried out (exit 2).
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    Status { code: USAGE, message: Some(message.into()) }.into()
}

/// Work stopped before the end (exit 3); `message` says what to do next.
pub(crate) fn incomplete(message: impl Into<String>) -> anyhow::Error {
    Status { code: INCOMPLETE, message: Some(message.into()) }.into()
}

/// The exit code for a command's result, and the message to print for it.
pub(crate) fn code_of(result: &anyhow::Result<()>) -> (u8, Option<String>) {
    match result {
        Ok(()) => (SUCCESS, None),
        Err(e) => match e.downcast_ref::<Status>() {
            Some(s) => (s.code, s.message.clone()),
            None => (FAILURE, Some(format!("{e:#}"))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        assert_eq!(code_of(&Ok(())), (0, None));
        assert_eq!(code_of(&Err(anyhow::anyhow!("boom"))).0, 1);
        assert_eq!(code_of(&Err(usage("bad"))), (2, Some("bad".into())));
        let e = incomplete("stopped").context("copy");
        assert_eq!(code_of(&Err(e)).0, 3, "a Status keeps its code under context");
    }
}
