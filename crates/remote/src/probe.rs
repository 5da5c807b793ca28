//! The capacity probe: two ICMP echo trains to the store's server at the
//! start of a tuned job, on a thread of their own, whose replies'
//! dispersion gives the path's capacity ([`wanblk_tune::capacity`]). The
//! search uses it to size its jump from a point with room. Nothing waits
//! for it: without a reply (no ICMP socket, a filter, a server that does
//! not answer) the search climbs as before.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wanblk_sys::icmp::EchoSocket;
use wanblk_tune::capacity::{TRAIN, Train, echo_reply, echo_train, goodput_capacity};

/// Trains per probe: the faster one counts (cross traffic only slows one).
const TRAINS: u16 = 2;
/// Longest wait for a train's first reply (a path of up to ~2 s RTT).
const FIRST_REPLY: Duration = Duration::from_secs(3);
/// A train is over once no reply came for this long after one did.
const QUIET: Duration = Duration::from_millis(300);

/// The probe's result, shared with the controller's loop.
#[derive(Debug, Clone, Default)]
pub(crate) struct Capacity(Arc<Mutex<Option<f64>>>);

impl Capacity {
    /// The measured capacity as goodput, bytes per second, once known.
    pub(crate) fn get(&self) -> Option<f64> {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The server to probe: an IPv4 peer off this host (loopback paths have
/// nothing to measure; IPv6 is not probed yet).
fn target(peer: Option<SocketAddr>) -> Option<Ipv4Addr> {
    match peer?.ip() {
        IpAddr::V4(a) if !a.is_loopback() && !a.is_unspecified() => Some(a),
        _ => None,
    }
}

/// Starts the probe towards `peer` on its own thread; the result appears in
/// the returned [`Capacity`] when the trains are back.
/// `own` tells the TCP bytes our sessions have moved so far (they share
/// the bottleneck with the trains).
pub(crate) fn start(peer: Option<SocketAddr>, own: impl Fn() -> u64 + Send + 'static) -> Capacity {
    let out = Capacity::default();
    let Some(to) = target(peer) else { return out };
    let slot = Arc::clone(&out.0);
    let spawned = std::thread::Builder::new().name("wanblk-probe".into()).spawn(move || {
        let r = probe(to, &own);
        match r {
            Ok(Some(c)) => {
                tracing::info!(mbps = c * 8.0 / 1e6, %to, "path capacity from an echo train");
                *slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(c);
            }
            Ok(None) => {
                tracing::debug!(%to, "echo trains: no capacity estimate (too few replies or too fast)")
            }
            Err(e) => tracing::debug!(%to, "echo trains not sent: {e}"),
        }
    });
    if let Err(e) = spawned {
        tracing::debug!("capacity probe not started: {e}");
    }
    out
}

fn probe(to: Ipv4Addr, own: &dyn Fn() -> u64) -> std::io::Result<Option<f64>> {
    let sock = EchoSocket::open()?;
    let ident = (std::process::id() as u16) ^ 0x7761;
    let mut trains = Vec::new();
    let mut buf = [0u8; 128];
    for k in 0..TRAINS {
        let first = k.wrapping_mul(TRAIN);
        let mut train = Train::new(first, TRAIN);
        sock.send_all(to, &echo_train(ident, first, TRAIN))?;
        let sent = Instant::now();
        let mut last_reply: Option<Instant> = None;
        let mut own_at_first = None;
        let mut own_at_last = 0;
        while !train.complete() {
            let deadline = match last_reply {
                Some(t) => t + QUIET,
                None => sent + FIRST_REPLY,
            };
            let Some(wait) = deadline.checked_duration_since(Instant::now()) else { break };
            let Some((n, t_ns)) = sock.recv(&mut buf, wait)? else { continue };
            // A ping socket sets the identifier itself and hands us only
            // our own replies; a raw one sees every echo reply of the host.
            let Some((id, seq)) = echo_reply(&buf[..n], sock.raw) else { continue };
            if (!sock.raw || id == ident) && train.reply(seq, t_ns) {
                last_reply = Some(Instant::now());
                // Read when the first and the last reply are read, which is
                // within a wake-up of when they arrived.
                let bytes = own();
                own_at_first.get_or_insert(bytes);
                own_at_last = bytes;
            }
        }
        train.own_traffic(own_at_last.saturating_sub(own_at_first.unwrap_or(own_at_last)));
        if train.replies() == 0 {
            // Nobody answers: a second train would not either.
            return Ok(None);
        }
        trains.push(train);
    }
    Ok(goodput_capacity(&trains))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ipv4_peers_off_this_host_are_probed() {
        let a = |s: &str| Some(s.parse::<SocketAddr>().unwrap());
        assert_eq!(target(a("10.77.2.2:10809")), Some(Ipv4Addr::new(10, 77, 2, 2)));
        assert_eq!(target(a("127.0.0.1:10809")), None);
        assert_eq!(target(a("[::1]:10809")), None);
        assert_eq!(target(a("[2001:db8::1]:3260")), None);
        assert_eq!(target(None), None);
        assert_eq!(start(a("127.0.0.1:1"), || 0).get(), None);
    }
}
