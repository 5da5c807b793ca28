//! Per-connection TCP_INFO sampling to CSV (cwnd, RTT, socket queues,
//! congestion control), from user space without kernel patches.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use wanblk_blockdev::pool::Pool;

/// The CSV header written first.
pub const HEADER: &str = "t_s,pool,session,active,state,ca_state,cwnd,ssthresh,rtt_us,rttvar_us,min_rtt_us,\
total_retrans,lost,unacked,notsent_bytes,bytes_acked,bytes_received,bytes_retrans,delivery_rate_Bps,\
pacing_rate_Bps,snd_wnd,rcv_space,rwnd_limited_us,sndbuf_limited_us,congestion,rcv_rtt_us,rcv_ooopack";

/// Samples every open session of `pools` every `period` into `path` until
/// `stop` turns true. Pools are numbered in the order given.
///
/// # Errors
/// Creating or writing the file.
pub(crate) async fn run(
    path: &Path,
    pools: Vec<Arc<Pool>>,
    start: Instant,
    period: Duration,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "{HEADER}")?;
    loop {
        let t = start.elapsed().as_secs_f64();
        for (p, pool) in pools.iter().enumerate() {
            for session in pool.snapshot().sessions.into_iter().filter(|s| !s.failed) {
                let (s, active) = (session.index, u8::from(session.active));
                for i in session.tcp {
                    writeln!(
                        out,
                        "{t:.3},{p},{s},{active},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                        i.state,
                        i.ca_state,
                        i.snd_cwnd,
                        i.snd_ssthresh,
                        i.rtt_us,
                        i.rttvar_us,
                        i.min_rtt_us,
                        i.total_retrans,
                        i.lost,
                        i.unacked,
                        i.notsent_bytes,
                        i.bytes_acked,
                        i.bytes_received,
                        i.bytes_retrans,
                        i.delivery_rate,
                        i.pacing_rate,
                        i.snd_wnd,
                        i.rcv_space,
                        i.rwnd_limited_us,
                        i.sndbuf_limited_us,
                        i.congestion,
                        i.rcv_rtt_us,
                        i.rcv_ooopack
                    )?;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    out.flush()
}
