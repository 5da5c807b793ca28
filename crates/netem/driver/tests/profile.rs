//! A profile applied while traffic runs: a rate change and a blackout, seen
//! at the receiver's interface.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wanblk_netem::{Profile, Scenario, Side};

fn wait_until(t0: Instant, at: Duration) {
    if let Some(d) = at.checked_sub(t0.elapsed()) {
        std::thread::sleep(d);
    }
}

#[test]
fn rate_change_and_blackout_follow_the_profile() {
    let _serial = common::require_root();
    wanblk_testkit::require_tool("iperf3", "iperf3");
    let profile = Profile::parse("at 2s rate 50mbit\nat 4s blackout 1s\n").unwrap();
    let sc = Scenario::builder()
        .rate_bps(100_000_000)
        .delay(Duration::from_millis(5))
        .queue_packets(100)
        .profile(profile)
        .start()
        .unwrap();
    let t0 = Instant::now();
    let _srv = wanblk_netem::bench::IperfServer::start(&sc).unwrap();
    let mut client = wanblk_testkit::Peer::adopt(
        "iperf3 -c",
        sc.spawn(
            Side::Client,
            Command::new("iperf3")
                .args(["-c", &sc.server_addr().to_string(), "-u", "-b", "150M", "-l", "1400", "-t", "7"])
                .stdout(Stdio::null()),
        )
        .unwrap(),
    );
    // Layer-2 rate at the server in a window [a, b] seconds after the start.
    let window = |a: f64, b: f64| {
        wait_until(t0, Duration::from_secs_f64(a));
        let (b0, i0) = (common::rx_bytes(&sc, Side::Server, "s0"), Instant::now());
        wait_until(t0, Duration::from_secs_f64(b));
        let (b1, i1) = (common::rx_bytes(&sc, Side::Server, "s0"), Instant::now());
        (b1 - b0) as f64 * 8.0 / (i1 - i0).as_secs_f64()
    };
    let before = window(0.8, 1.9);
    let after = window(2.2, 3.9);
    let dark = window(4.1, 4.9);
    let back = window(5.3, 6.8);
    client.wait_within(Duration::from_secs(60));
    let st = sc.stats().unwrap();
    eprintln!(
        "100 Mbit/s: {:.2}; after `rate 50mbit`: {:.2}; blackout: {:.3}; after it: {:.2} Mbit/s; load {}\n{}",
        before / 1e6,
        after / 1e6,
        dark / 1e6,
        back / 1e6,
        common::load(),
        st.to_table()
    );
    assert!((before / 100e6 - 1.0).abs() <= 0.03, "{before}");
    assert!((after / 50e6 - 1.0).abs() <= 0.03, "{after}");
    // Only iperf3's control traffic (a few hundred bytes) may pass: it is
    // dropped too, so nothing at all should arrive.
    assert!(dark < 50_000.0, "traffic during the blackout: {dark} bit/s");
    assert!((back / 50e6 - 1.0).abs() <= 0.03, "{back}");
    assert!(st.fwd.model.blackout_drops > 3000, "{}", st.fwd.model.blackout_drops);
}
