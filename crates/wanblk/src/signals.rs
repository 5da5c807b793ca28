//! SIGINT and SIGTERM: the first asks the running work to stop cleanly
//! (a copy stops issuing requests, lets those in flight finish within a
//! bound, flushes, saves its journal and report); the second quits at once
//! (the journal stays consistent: it only ever holds flushed ranges).

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::exit;

/// Watches SIGINT and SIGTERM until the returned guard drops; `stop` turns
/// true on the first, `what` says what stopping does (printed then).
///
/// # Errors
/// The signal handlers cannot be installed.
pub(crate) fn watch(stop: watch::Sender<bool>, what: &'static str) -> anyhow::Result<Guard> {
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let task = tokio::spawn(async move {
        let name = tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        };
        eprintln!("\nwanblk: {name}: stopping: {what} (a second signal quits at once)");
        let _ = stop.send(true);
        let name = tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        };
        eprintln!("wanblk: {name} again: quitting now");
        std::process::exit(i32::from(exit::INCOMPLETE));
    });
    Ok(Guard(task))
}

/// Stops watching when dropped (signals then have their default effect).
#[derive(Debug)]
pub(crate) struct Guard(tokio::task::JoinHandle<()>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.abort();
    }
}
