//! Starts the TCP_INFO CSV logger for a command.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use wanblk_blockdev::pool::Pool;

/// Logs every 100 ms until `stop`.
pub(crate) fn spawn(
    path: PathBuf,
    pools: Vec<Arc<Pool>>,
    start: Instant,
    stop: watch::Receiver<bool>,
) -> JoinHandle<anyhow::Result<()>> {
    tokio::spawn(async move {
        wanblk_blockdev::tcplog::run(path.clone(), pools, start, Duration::from_millis(100), stop)
            .await
            .with_context(|| format!("writing {}", path.display()))
    })
}
