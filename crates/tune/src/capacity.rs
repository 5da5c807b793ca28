//! The path's bottleneck rate from an ICMP echo train (ours; not in the
//! seeds), sans-I/O: the echo requests to send, the replies to read, and
//! what their arrival times say.
//!
//! Window-limited sessions tell their own cap (window over RTT) but not the
//! path's capacity: while the path has room their counters look the same at
//! 100 Mbit/s as at 10 Gbit/s, so the search measures its way up a 4x step
//! at a time (each step a slow start and a settle: 2.4 s at 200 ms RTT).
//! A train of echo requests sent back to back leaves the bottleneck spaced
//! by its rate (packet dispersion, as in pathrate or CapProbe), and the
//! replies come back at that spacing or a wider one (the slower of the two
//! directions): `(replies - 1) x size / (last - first)`. Traffic sharing
//! the bottleneck and a sender slower than the path only widen the spacing,
//! so the estimate errs low; a train shorter than [`MIN_SPAN_NS`] (a path
//! faster than the sender, interrupt coalescing) gives none.
//!
//! On the emulated 1 Gbit/s path (2026-12-07, replies of 16 KB trains):
//! 948-975 Mbit/s of IP bytes at 200 ms RTT, 293 with a 300 Mbit/s return
//! direction. The search uses it only to size its jump from a point whose
//! sessions have room ([`Signals::capacity`](crate::Signals::capacity)).

/// Bytes of ICMP payload per echo request: one 1500-byte IPv4 packet.
pub const PAYLOAD: usize = 1472;
/// IPv4 bytes of one echo request (and reply).
pub const IP_BYTES: usize = PAYLOAD + 8 + 20;
/// Echo requests per train: 384 KB, 3 ms at 1 Gbit/s.
pub const TRAIN: u16 = 256;
/// A train whose replies span less than this says nothing (1 ms).
pub const MIN_SPAN_NS: u64 = 1_000_000;
/// Fewest replies for an estimate.
pub const MIN_REPLIES: usize = 32;
/// TCP payload per IPv4 byte on the wire (1448 of 1500 with timestamps):
/// what an IP rate carries as goodput.
pub const TCP_PAYLOAD_SHARE: f64 = 1448.0 / 1500.0;

fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 =
        b.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The echo requests of one train: identifier `ident`, sequence numbers
/// `first..first + count`, [`PAYLOAD`] bytes each.
pub fn echo_train(ident: u16, first: u16, count: u16) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| {
            let seq = first.wrapping_add(i);
            let mut m = vec![0u8; 8 + PAYLOAD];
            m[0] = 8; // echo request, code 0
            m[4..6].copy_from_slice(&ident.to_be_bytes());
            m[6..8].copy_from_slice(&seq.to_be_bytes());
            for (k, b) in m[8..].iter_mut().enumerate() {
                *b = (k as u8) ^ 0x5a;
            }
            let c = checksum(&m);
            m[2..4].copy_from_slice(&c.to_be_bytes());
            m
        })
        .collect()
}

/// An echo reply's identifier and sequence number, from a datagram of a
/// raw socket (`ip_header`: the IPv4 header comes first) or a ping socket.
/// `None` for anything else (other ICMP, too short, not IPv4).
pub fn echo_reply(datagram: &[u8], ip_header: bool) -> Option<(u16, u16)> {
    let icmp = if ip_header {
        let v = datagram.first()?;
        if v >> 4 != 4 {
            return None;
        }
        let ihl = usize::from(v & 0x0f) * 4;
        if ihl < 20 || datagram.get(9) != Some(&1) {
            return None;
        }
        datagram.get(ihl..)?
    } else {
        datagram
    };
    if icmp.len() < 8 || icmp[0] != 0 || icmp[1] != 0 {
        return None;
    }
    Some((u16::from_be_bytes([icmp[4], icmp[5]]), u16::from_be_bytes([icmp[6], icmp[7]])))
}

/// The replies of one train as they arrive.
#[derive(Debug, Clone, Default)]
pub struct Train {
    first: u16,
    count: u16,
    seen: Vec<bool>,
    times: Vec<u64>,
    own: u64,
}

impl Train {
    /// A train of `count` requests from sequence number `first`.
    pub fn new(first: u16, count: u16) -> Train {
        Train { first, count, seen: vec![false; usize::from(count)], times: Vec::new(), own: 0 }
    }

    /// Our own sessions moved `payload` TCP bytes between the first reply
    /// and the last: they shared the bottleneck with the train, so they
    /// count towards its rate (the copy's first slow starts run while the
    /// trains are out; without them a 956 Mbit/s path read 817).
    pub fn own_traffic(&mut self, payload: u64) {
        self.own = payload;
    }

    /// A reply with sequence number `seq` arrived at `t_ns`; duplicates
    /// and numbers outside the train are ignored. True if it counted.
    pub fn reply(&mut self, seq: u16, t_ns: u64) -> bool {
        let i = usize::from(seq.wrapping_sub(self.first));
        if i >= usize::from(self.count) || self.seen[i] {
            return false;
        }
        self.seen[i] = true;
        self.times.push(t_ns);
        true
    }

    /// Replies counted so far.
    pub fn replies(&self) -> usize {
        self.times.len()
    }

    /// Every reply is in.
    pub fn complete(&self) -> bool {
        self.times.len() == usize::from(self.count)
    }

    /// The bottleneck's rate in IP bytes per second, if the replies say:
    /// at least [`MIN_REPLIES`] over at least [`MIN_SPAN_NS`].
    pub fn ip_rate(&self) -> Option<f64> {
        if self.times.len() < MIN_REPLIES {
            return None;
        }
        let lo = *self.times.iter().min()?;
        let hi = *self.times.iter().max()?;
        let span = hi - lo;
        if span < MIN_SPAN_NS {
            return None;
        }
        let own = self.own as f64 / TCP_PAYLOAD_SHARE;
        Some(((self.times.len() - 1) as f64 * IP_BYTES as f64 + own) / (span as f64 / 1e9))
    }
}

/// The estimate of several trains: the fastest, as TCP goodput in bytes
/// per second ([`TCP_PAYLOAD_SHARE`]). Cross traffic and a slow sender
/// only make a train slower, so the fastest is the closest.
pub fn goodput_capacity<'a>(trains: impl IntoIterator<Item = &'a Train>) -> Option<f64> {
    trains.into_iter().filter_map(Train::ip_rate).max_by(f64::total_cmp).map(|r| r * TCP_PAYLOAD_SHARE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requests_carry_a_valid_checksum_and_their_numbers() {
        let t = echo_train(0x1234, 65530, 10);
        assert_eq!(t.len(), 10);
        for (i, m) in t.iter().enumerate() {
            assert_eq!(m.len(), 8 + PAYLOAD);
            assert_eq!(checksum(m), 0, "a message with its checksum sums to zero");
            let mut reply = m.clone();
            reply[0] = 0;
            assert_eq!(echo_reply(&reply, false), Some((0x1234, 65530u16.wrapping_add(i as u16))));
        }
        // With an IPv4 header in front (a raw socket).
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        let mut reply = t[0].clone();
        reply[0] = 0;
        ip.extend_from_slice(&reply);
        assert_eq!(echo_reply(&ip, true), Some((0x1234, 65530)));
        ip[9] = 6; // TCP, not ICMP
        assert_eq!(echo_reply(&ip, true), None);
        assert_eq!(echo_reply(&t[0], false), None, "a request is not a reply");
    }

    #[test]
    fn the_spacing_of_the_replies_is_the_rate() {
        // 256 replies 12 us apart: 1500 bytes per 12 us = 1 Gbit/s.
        let mut t = Train::new(7, TRAIN);
        for i in 0..TRAIN {
            assert!(t.reply(7 + i, 1_000_000 + u64::from(i) * 12_000));
        }
        assert!(!t.reply(7, 5), "a duplicate does not count");
        assert!(!t.reply(6, 5), "outside the train");
        assert!(t.complete());
        let r = t.ip_rate().unwrap() * 8.0 / 1e6;
        assert!((r - 1000.0).abs() < 1.0, "{r}");
        // Lost replies only lower it; the fastest train is the estimate.
        let mut slow = Train::new(0, TRAIN);
        for i in (0..TRAIN).step_by(2) {
            slow.reply(i, u64::from(i) * 12_000);
        }
        let best = goodput_capacity([&slow, &t]).unwrap();
        assert!((best - t.ip_rate().unwrap() * TCP_PAYLOAD_SHARE).abs() < 1.0);
        assert!(slow.ip_rate().unwrap() < t.ip_rate().unwrap());
        // The other half of the bottleneck's time went to our sessions.
        slow.own_traffic((u64::from(TRAIN) / 2 * IP_BYTES as u64) * 1448 / 1500);
        let both = slow.ip_rate().unwrap() * 8.0 / 1e6;
        assert!((both - 1000.0).abs() < 10.0, "{both}");
    }

    #[test]
    fn a_train_too_short_or_too_sparse_says_nothing() {
        // A path faster than the sender: the whole train within 0.5 ms.
        let mut fast = Train::new(0, TRAIN);
        for i in 0..TRAIN {
            fast.reply(i, u64::from(i) * 2_000);
        }
        assert_eq!(fast.ip_rate(), None);
        let mut few = Train::new(0, TRAIN);
        for i in 0..(MIN_REPLIES as u16 - 1) {
            few.reply(i, u64::from(i) * 1_000_000);
        }
        assert_eq!(few.ip_rate(), None);
        assert_eq!(goodput_capacity([&fast, &few]), None);
    }

    proptest! {
        #[test]
        fn reply_parsing_never_panics(b in proptest::collection::vec(any::<u8>(), 0..80), raw in any::<bool>()) {
            let _ = echo_reply(&b, raw);
        }

        #[test]
        fn any_arrivals_give_a_finite_positive_rate_or_none(
            times in proptest::collection::vec(any::<u64>(), 0..300), first in any::<u16>()
        ) {
            let mut t = Train::new(first, TRAIN);
            for (i, ts) in times.iter().enumerate() {
                t.reply(first.wrapping_add(i as u16), *ts);
            }
            if let Some(r) = t.ip_rate() {
                prop_assert!(r.is_finite() && r > 0.0);
            }
        }
    }
}
