//! What `wanblk serve` and `wanblk mount` share: the cache options, and
//! opening the remote store as a tuned session pool behind the front end
//! (read-ahead, block cache, write-back).

use std::sync::Arc;

use anyhow::Context;
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::pool::Hedge;
use wanblk_frontend::FrontEnd;
use wanblk_remote::Remote;

use crate::cmd::session::{FRONT_END_INITIAL, SessionArgs};
use crate::units::parse_size;

/// Cache, read-ahead and write-back options.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CacheArgs {
    /// Memory for cached reads and read-ahead (K, M, G suffixes). Sequential
    /// reads are prefetched up to min(128M, half of this) ahead; 0 turns the cache
    /// and read-ahead off.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub(crate) cache_size: u64,
    /// Most written bytes held in memory before the remote has them. Writes
    /// are acknowledged once held here and sent in large requests; a flush
    /// (fsync, sync) waits until the remote has every earlier write.
    #[arg(long, default_value = "128M", value_parser = parse_size)]
    pub(crate) write_back_limit: u64,
    /// Acknowledge each write only once the remote has it (no write-back).
    #[arg(long)]
    pub(crate) write_through: bool,
}

impl CacheArgs {
    /// The front end's configuration.
    pub(crate) fn config(&self) -> wanblk_frontend::Config {
        let d = wanblk_frontend::Config::default();
        wanblk_frontend::Config {
            cache_size: self.cache_size,
            write_back_limit: self.write_back_limit.max(1),
            write_through: self.write_through,
            max_window: d.max_window.min(self.cache_size.max(1)),
            ..d
        }
    }
}

/// A remote store opened as a tuned pool behind the front end.
pub(crate) struct Opened {
    pub(crate) front: Arc<FrontEnd>,
    remote: Remote,
}

impl Opened {
    /// Opens `uri` as `wanblk copy` opens a network store (`-C N|auto`...),
    /// starts tuning it from the bytes its sessions complete and puts the
    /// front end in front. Straggling reads are hedged, writes never (two
    /// clients may write the same range).
    pub(crate) async fn open(
        uri: &str,
        session: &SessionArgs,
        tls: wanblk_nbd::TlsClientOptions,
        cache: &CacheArgs,
    ) -> anyhow::Result<Opened> {
        let mut options =
            wanblk_remote::RemoteOptions { tls, ..session.remote_options(Hedge::Reads, FRONT_END_INITIAL) };
        // A sequential reader waits on the one request it needs next, which
        // takes longer the more sessions share the path: no step up from a
        // full first point (measured: cold dd bs=10M through `wanblk mount`
        // at 100 ms RTT fell from 0.88-0.91 to 0.63 of the ceiling with it).
        options.tuning.step_above_full = false;
        let mut remote = Remote::new(options);
        let pool = remote.open(uri).await.context("store")?;
        for n in remote.notes() {
            eprintln!("wanblk: note: {n}");
        }
        remote.start(remote.pool_progress())?;
        let inner: Arc<dyn Endpoint> = pool.clone();
        let front = Arc::new(FrontEnd::new(inner, cache.config()));
        if tracing::enabled!(target: "wanblk::frontend", tracing::Level::DEBUG) {
            let (f, p) = (Arc::downgrade(&front), Arc::downgrade(&pool));
            tokio::spawn(async move {
                while let (Some(f), Some(p)) = (f.upgrade(), p.upgrade()) {
                    let (s, q) = (f.stats(), p.snapshot());
                    tracing::debug!(target: "wanblk::frontend", active = q.active, queued = q.queued, in_flight = q.in_flight(), request_bytes = q.request_bytes, depth = q.depth, ?s);
                    drop((f, p));
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            });
        }
        Ok(Opened { front, remote })
    }

    /// Writes back everything pending, stops tuning and closes the sessions.
    ///
    /// # Errors
    /// Pending writes could not be written back (they are lost).
    pub(crate) async fn finish(self) -> anyhow::Result<()> {
        let closed = self.front.close().await;
        let summary = self.remote.finish().await;
        if let Some(last) = summary.samples.last() {
            eprintln!(
                "wanblk: served with N = {} (last interval {:.1} Mbit/s)",
                summary.sessions, last.goodput_mbps
            );
        }
        let busy: Vec<f64> = summary.demand.iter().filter_map(|d| d.slots_busy).collect();
        if !busy.is_empty() {
            let limited = summary.demand.iter().filter(|d| d.demand_limited).count();
            eprintln!(
                "wanblk: the clients set the pace in {limited} of {} intervals (request slots busy {:.0}% of the time on average); N was tuned on the others",
                summary.demand.len(),
                100.0 * busy.iter().sum::<f64>() / busy.len() as f64
            );
        }
        closed.context("writing back pending writes")
    }
}
