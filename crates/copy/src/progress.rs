//! A progress bar on the terminal, fed from completions (never from
//! submissions): bytes finished, rate, ETA and the active session count.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::engine::Progress;

/// A running progress bar; call [`Bar::finish`] at the end.
#[derive(Debug)]
pub struct Bar {
    bar: ProgressBar,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Bar {
    /// Starts a bar on stderr if stderr is a terminal and `enabled`; else a
    /// hidden one. `active` reports the current number of active sessions.
    pub fn start(progress: Arc<Progress>, enabled: bool, active: impl Fn() -> usize + Send + 'static) -> Bar {
        let visible = enabled && std::io::stderr().is_terminal();
        let bar = ProgressBar::with_draw_target(
            Some(progress.total.load(Ordering::Relaxed)),
            if visible { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() },
        );
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let task = visible.then(|| {
            let bar = bar.clone();
            tokio::spawn(async move {
                loop {
                    bar.set_length(progress.total.load(Ordering::Relaxed));
                    bar.set_position(progress.done.load(Ordering::Relaxed));
                    bar.set_message(format!("N={}", active()));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        });
        Bar { bar, task }
    }

    /// Stops updating and leaves the final state on screen.
    pub fn finish(mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.bar.finish();
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}
