//! The capacity probe: two ICMP echo trains to the store's server at the
//! start of a tuned job, whose replies' dispersion gives the path's
//! capacity ([`wanblk_tune::capacity`]). The search uses it to size its
//! jump from a point with room. A copy sends the trains before its first
//! request and waits for them, a round trip and a few milliseconds
//! ([`measure`]): nothing of ours shares the bottleneck with them then
//! (sent while the copy's first slow starts ran, a 956 Mbit/s path read
//! 656-1076). A job that starts without them (`serve`, `mount`) sends them
//! on a thread of its own ([`start`]). Without a reply (no ICMP socket, a
//! filter, a server that does not answer) the search climbs as before.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wanblk_sys::icmp::EchoSocket;
use wanblk_tune::capacity::{TRAIN, Train, echo_reply, echo_train, goodput_capacity};

/// Trains per probe: the faster one counts (cross traffic only slows one).
const TRAINS: u16 = 2;
/// Time between the trains' sends. They need not wait for each other's
/// replies: one that reaches the bottleneck while the other is still
/// queued leaves it back to back behind it, spaced at the same rate.
const GAP: Duration = Duration::from_millis(10);
/// Longest wait for the first reply in the background (a path of up to
/// ~2 s RTT).
const FIRST_REPLY: Duration = Duration::from_secs(3);
/// The trains are over once no reply came for this long after one did.
const QUIET: Duration = Duration::from_millis(300);

/// The probe's result, shared with the controller's loop.
#[derive(Debug, Clone, Default)]
pub(crate) struct Capacity(Arc<Mutex<Option<f64>>>);

impl Capacity {
    /// A capacity measured already ([`measure`]).
    pub(crate) fn known(c: Option<f64>) -> Capacity {
        Capacity(Arc::new(Mutex::new(c)))
    }

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

/// Sends the trains to `peer` and waits for their replies, at most
/// `first_reply` for the first one (a few handshake round trips: a server
/// that filters ICMP then costs no more). Blocks. The capacity as goodput,
/// bytes per second, or `None`.
pub(crate) fn measure(peer: Option<SocketAddr>, first_reply: Duration, own: &dyn Fn() -> u64) -> Option<f64> {
    let to = target(peer)?;
    let started = Instant::now();
    let c = run(to, first_reply, own);
    tracing::debug!(
        %to,
        waited_ms = started.elapsed().as_secs_f64() * 1e3,
        "echo trains, before the first request"
    );
    c
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
        let c = run(to, FIRST_REPLY, &own);
        *slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = c;
    });
    if let Err(e) = spawned {
        tracing::debug!("capacity probe not started: {e}");
    }
    out
}

/// [`probe`], with what came of it logged.
fn run(to: Ipv4Addr, first_reply: Duration, own: &dyn Fn() -> u64) -> Option<f64> {
    match probe(to, first_reply, own) {
        Ok(Some(c)) => {
            tracing::info!(mbps = c * 8.0 / 1e6, %to, "path capacity from an echo train");
            Some(c)
        }
        Ok(None) => {
            tracing::debug!(%to, "echo trains: no capacity estimate (too few replies or too fast)");
            None
        }
        Err(e) => {
            tracing::debug!(%to, "echo trains not sent: {e}");
            None
        }
    }
}

/// Where a train's replies stand, with our sessions' bytes at its first
/// and last reply.
struct Out {
    train: Train,
    own_first: Option<u64>,
    own_last: u64,
}

/// Sends [`TRAINS`] trains [`GAP`] apart and reads their replies until all
/// are back, none came within `first_reply` of the first send, or none for
/// [`QUIET`] after one did.
fn probe(to: Ipv4Addr, first_reply: Duration, own: &dyn Fn() -> u64) -> std::io::Result<Option<f64>> {
    let sock = EchoSocket::open()?;
    // A raw socket sees every echo reply of the host: ours carry this.
    let ident = (std::process::id() as u16) ^ 0x7761;
    let mut outs: Vec<Out> = Vec::new();
    let sent = Instant::now();
    for k in 0..TRAINS {
        if k > 0 {
            std::thread::sleep(GAP);
        }
        let first = k.wrapping_mul(TRAIN);
        sock.send_all(to, &echo_train(ident, first, TRAIN))?;
        outs.push(Out { train: Train::new(first, TRAIN), own_first: None, own_last: 0 });
    }
    let mut buf = [0u8; 128];
    let mut last_reply: Option<Instant> = None;
    while !outs.iter().all(|o| o.train.complete()) {
        let deadline = match last_reply {
            Some(t) => t + QUIET,
            None => sent + first_reply,
        };
        let Some(wait) = deadline.checked_duration_since(Instant::now()) else { break };
        let Some((n, t_ns)) = sock.recv(&mut buf, wait)? else { continue };
        // A ping socket sets the identifier itself and hands us only
        // our own replies.
        let Some((id, seq)) = echo_reply(&buf[..n], sock.raw) else { continue };
        let Some(out) = outs.get_mut(usize::from(seq / TRAIN)) else { continue };
        if (!sock.raw || id == ident) && out.train.reply(seq, t_ns) {
            last_reply = Some(Instant::now());
            // Read when the first and the last reply are read, which is
            // within a wake-up of when they arrived.
            let bytes = own();
            out.own_first.get_or_insert(bytes);
            out.own_last = bytes;
        }
    }
    let trains: Vec<Train> = outs
        .into_iter()
        .map(|mut o| {
            o.train.own_traffic(o.own_last.saturating_sub(o.own_first.unwrap_or(o.own_last)));
            o.train
        })
        .collect();
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
        assert_eq!(measure(a("127.0.0.1:1"), Duration::from_millis(10), &|| 0), None);
        assert_eq!(Capacity::known(Some(1e8)).get(), Some(1e8));
    }
}
