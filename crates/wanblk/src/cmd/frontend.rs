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
    /// The congestion control asked for (`--congestion`), if any.
    congestion: Option<String>,
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
        Ok(Opened { front, remote, congestion: session.congestion.clone() })
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
        let paced = summary.demand.iter().filter(|d| d.demand_limited).count();
        let rtts: Vec<f64> =
            summary.samples.iter().map(|s| s.rtt_ms).filter(|r| r.is_finite() && *r > 0.0).collect();
        let rtt_ms = wanblk_tune::share::median(&rtts);
        if let Some(note) =
            idle_restart_note(wanblk_sys::tcp::idle_restart(), self.congestion.as_deref(), rtt_ms, paced)
        {
            eprintln!("wanblk: note: {note}");
        }
        closed.context("writing back pending writes")
    }
}

/// Below this round trip a restart from slow start costs a few milliseconds.
const IDLE_RESTART_RTT_MS: f64 = 10.0;

/// A note for the end of a front end's run whose clients paused between
/// bursts (`paced` intervals they set the pace in) on a path of `rtt_ms`
/// (median), when the namespace restarts an idle connection from slow start
/// (`restart`) and the sessions' congestion control (`congestion`, else the
/// namespace's default) is loss-based: every burst after a pause then starts
/// at 10 segments. Measured (docs/results/frontend, run 17): ext4 write +
/// sync of 256 MiB at 100 ms RTT, 0.59-0.70 of the link with it, 0.71-0.73
/// without.
fn idle_restart_note(
    restart: Option<wanblk_sys::tcp::IdleRestart>,
    congestion: Option<&str>,
    rtt_ms: Option<f64>,
    paced: usize,
) -> Option<String> {
    let restart = restart.filter(|r| r.slow_start_after_idle)?;
    let rtt = rtt_ms.filter(|r| *r >= IDLE_RESTART_RTT_MS)?;
    let cc = congestion.unwrap_or(&restart.default_congestion);
    // bbr paces a restart from its bandwidth estimate, not from slow start.
    if paced == 0 || cc.starts_with("bbr") {
        return None;
    }
    Some(format!(
        "the clients paused between bursts, and after each pause {cc} started the sessions again from \
         slow start (net.ipv4.tcp_slow_start_after_idle = 1 here), some 7 round trips ({:.1} s at {rtt:.0} ms) a burst; \
         `sysctl -w net.ipv4.tcp_slow_start_after_idle=0` keeps their windows (for every TCP connection \
         of this network namespace; see docs/frontend.md)",
        rtt * 7.0 / 1000.0
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wanblk_sys::tcp::IdleRestart;

    fn ns(on: bool, cc: &str) -> Option<IdleRestart> {
        Some(IdleRestart { slow_start_after_idle: on, default_congestion: cc.into() })
    }

    #[test]
    fn the_idle_restart_note_is_for_paused_bursts_of_loss_based_sessions_on_long_paths() {
        let note = idle_restart_note(ns(true, "cubic"), None, Some(100.0), 3).expect("a note");
        assert!(note.contains("cubic") && note.contains("tcp_slow_start_after_idle=0"), "{note}");
        assert!(note.contains("(0.7 s at 100 ms)"), "{note}");
        // --congestion wins over the namespace's default.
        assert!(idle_restart_note(ns(true, "bbr"), Some("cubic"), Some(100.0), 3).is_some());
        assert_eq!(idle_restart_note(ns(true, "cubic"), Some("bbr"), Some(100.0), 3), None);
        assert_eq!(idle_restart_note(ns(true, "bbr"), None, Some(100.0), 3), None);
        // Already off, unknown, a short path, no RTT, or clients that never paused.
        assert_eq!(idle_restart_note(ns(false, "cubic"), None, Some(100.0), 3), None);
        assert_eq!(idle_restart_note(None, None, Some(100.0), 3), None);
        assert_eq!(idle_restart_note(ns(true, "cubic"), None, Some(2.0), 3), None);
        assert_eq!(idle_restart_note(ns(true, "cubic"), None, None, 3), None);
        assert_eq!(idle_restart_note(ns(true, "cubic"), None, Some(100.0), 0), None);
    }
}
