//! A profile applied while traffic runs: a rate change and a blackout,
//! followed in the release loop's own clock, and everything released
//! reaches the receiver.
//!
//! The phases are measured from the loop's counters, each snapshot stamped
//! with the loop's clock (the profile's time base), and the profile starts
//! once the flood is flowing: a test thread or an iperf3 that runs late on
//! a busy machine shifts nothing. The bounds hold under load (a starved
//! iperf3 offers less than the rate: down to 0.6 x was seen) and still
//! catch a broken emulator (a rate ignored: twice the rate; nothing
//! released; traffic during the blackout). How close the rates come is
//! measured by `examples/accuracy.rs` (docs/netem.md, Accuracy).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wanblk_netem::stats::Stats;
use wanblk_netem::{Profile, Scenario, Side};
use wanblk_testkit::Peer;

/// Loop time (s) and layer-2 bytes released client -> server (IP length +
/// 14, what the rate counts and the receiver's interface sees).
fn sample(st: &Stats) -> (f64, u64) {
    let m = &st.fwd.model;
    (st.elapsed_ns as f64 / 1e9, m.out_bytes + 14 * m.out_packets)
}

#[test]
fn rate_change_and_blackout_follow_the_profile() {
    let _serial = common::require_root();
    wanblk_testkit::require_tool("iperf3", "iperf3");
    let mut sc = Scenario::builder()
        .rate_bps(100_000_000)
        .delay(Duration::from_millis(5))
        .queue_packets(100)
        .start()
        .unwrap();
    let _srv = wanblk_netem::bench::IperfServer::start(&sc).unwrap();
    let rx0 = common::rx_bytes(&sc, Side::Server, "s0");
    let (_, released0) = sample(&sc.stats().unwrap());
    let mut client = Peer::adopt(
        "iperf3 -c",
        sc.spawn(
            Side::Client,
            Command::new("iperf3")
                .args(["-c", &sc.server_addr().to_string(), "-u", "-b", "150M", "-l", "1400", "-t", "30"])
                .stdout(Stdio::null()),
        )
        .unwrap(),
    );
    // The profile starts once the flood flows (1 MB released).
    let deadline = Instant::now() + Duration::from_secs(30);
    while sample(&sc.stats().unwrap()).1 < released0 + (1 << 20) {
        assert!(Instant::now() < deadline, "no traffic through the emulator within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    sc.set_profile(Profile::parse("at 2s rate 50mbit\nat 4s blackout 1s\n").unwrap());
    // The loop applies the profile before it answers this snapshot, so the
    // profile's origin is at or (by microseconds) before `origin`.
    let (origin, _) = sample(&sc.stats().unwrap());
    let mut samples = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = sc.stats().unwrap();
        let (t, b) = sample(&st);
        samples.push((t - origin, b));
        if t - origin > 7.0 {
            break;
        }
        assert!(Instant::now() < deadline, "the loop's clock did not reach 7 s within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    client.stop();
    // Layer-2 rate released in [a, b] s after the origin, from the first and
    // last snapshots inside it.
    let rate = |a: f64, b: f64| {
        let inside: Vec<_> = samples.iter().filter(|(t, _)| (a..=b).contains(t)).collect();
        let (first, last) = (inside.first().unwrap(), inside.last().unwrap());
        assert!(last.0 - first.0 >= (b - a) / 2.0, "too few snapshots in [{a}, {b}] s: {inside:?}");
        (last.1 - first.1) as f64 * 8.0 / (last.0 - first.0)
    };
    let before = rate(0.3, 1.8);
    let after = rate(2.3, 3.8);
    let dark = rate(4.2, 4.8);
    let back = rate(5.3, 6.8);
    let st = sc.stats().unwrap();
    eprintln!(
        "released: 100 Mbit/s: {:.2}; after `rate 50mbit`: {:.2}; blackout: {:.3}; after it: {:.2} Mbit/s; load {}\n{}",
        before / 1e6,
        after / 1e6,
        dark / 1e6,
        back / 1e6,
        common::load(),
        st.to_table()
    );
    let band = |got: f64, rate: f64, what: &str| {
        assert!(
            (0.6 * rate..=1.05 * rate).contains(&got),
            "{what}: {got} bit/s released at a rate of {rate}"
        );
    };
    band(before, 100e6, "before the profile");
    band(after, 50e6, "after `rate 50mbit`");
    band(back, 50e6, "after the blackout");
    // iperf3's control traffic is dropped too; what was queued when the
    // blackout began (100 packets, 23 ms at 50 Mbit/s) left before 4.2 s.
    assert!(dark < 50_000.0, "traffic during the blackout: {dark} bit/s");
    assert!(st.fwd.model.blackout_drops > 3000, "{}", st.fwd.model.blackout_drops);
    // Everything released reached the server's interface (and little else:
    // ARP and neighbour discovery do not pass the emulator).
    let deadline = Instant::now() + Duration::from_secs(10);
    let (released, rx) = loop {
        let released = sample(&sc.stats().unwrap()).1 - released0;
        let rx = common::rx_bytes(&sc, Side::Server, "s0") - rx0;
        if rx >= released || Instant::now() > deadline {
            break (released, rx);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        (released..=released + (64 << 10)).contains(&rx),
        "released {released} bytes, the server received {rx}"
    );
}
