//! UDP: a flood above the rate is delivered at about the rate, and random
//! loss happens at the set probability (binomial, 4 sigma).
//!
//! The delivered rate is checked within a band that holds on a busy
//! machine (a starved iperf3 offers less: 0.6 x the rate was seen at load
//! 9) and still catches a broken emulator (no limit: the flood's 1.5 x;
//! nothing delivered; a rate in bytes for bits). How close it comes is
//! measured by `examples/accuracy.rs` (docs/netem.md, Accuracy).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wanblk_netem::bench::{IperfRun, IperfServer, iperf3};
use wanblk_netem::{Scenario, Side, SysctlProfile};
use wanblk_testkit::Peer;

#[test]
fn udp_flood_is_delivered_at_the_rate() {
    let _serial = common::require_root();
    wanblk_testkit::require_tool("iperf3", "iperf3");
    let rate = 200_000_000u64;
    let sc = Scenario::builder()
        .rate_bps(rate)
        .delay(Duration::from_millis(10))
        .queue_packets(200)
        .sysctl_profile(SysctlProfile::Default)
        .start()
        .unwrap();
    let _srv = IperfServer::start(&sc).unwrap();
    // Flood for 7 s; measure what reaches the server's interface (layer-2
    // bytes = IP length + 14, the emulator's wire size) over 4 s after the
    // queue has filled. (The sleeps are the measurement window, not an
    // ordering: the band below holds whenever the window falls.)
    let mut client = Peer::adopt(
        "iperf3 -c",
        sc.spawn(
            Side::Client,
            Command::new("iperf3")
                .args(["-c", &sc.server_addr().to_string(), "-u", "-b", "300M", "-l", "1400", "-t", "7"])
                .stdout(Stdio::null()),
        )
        .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(1500));
    let (b0, t0) = (common::rx_bytes(&sc, Side::Server, "s0"), Instant::now());
    let before = sc.stats().unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let (b1, t1) = (common::rx_bytes(&sc, Side::Server, "s0"), Instant::now());
    let st = sc.stats().unwrap();
    client.wait_within(Duration::from_secs(60));
    let got = (b1 - b0) as f64 * 8.0 / (t1 - t0).as_secs_f64();
    eprintln!(
        "UDP at 300 Mbit/s into 200 Mbit/s: server receives {:.2} Mbit/s on the wire ({:+.2}%), emulator cpu {:.1}%, load {}\n{}",
        got / 1e6,
        (got / rate as f64 - 1.0) * 100.0,
        (st.cpu_ns - before.cpu_ns) as f64 / (st.elapsed_ns - before.elapsed_ns) as f64 * 100.0,
        common::load(),
        st.to_table()
    );
    assert!(st.fwd.model.queue_drops > before.fwd.model.queue_drops, "the flood must overflow the queue");
    assert_eq!(st.fwd.kernel_drops(), 0);
    let r = rate as f64;
    assert!((0.3 * r..=1.15 * r).contains(&got), "UDP delivered at {got} bit/s through a {rate} bit/s path");
}

#[test]
fn random_loss_matches_the_probability() {
    let _serial = common::require_root();
    wanblk_testkit::require_tool("iperf3", "iperf3");
    let p = 0.01;
    let sc = Scenario::builder()
        .rate_bps(1_000_000_000)
        .delay(Duration::from_millis(5))
        .loss(p)
        .loss_back(0.0)
        .seed(7)
        .start()
        .unwrap();
    let _srv = IperfServer::start(&sc).unwrap();
    let before = sc.stats().unwrap();
    let rcv_errors = common::udp_in_errors(&sc, Side::Server);
    // 50 Mbit/s of UDP, far below the rate: no queue drops, only random ones.
    let r = iperf3(&sc, &IperfRun { udp_bps: Some(50_000_000), seconds: 5, omit: 0, ..IperfRun::default() })
        .unwrap();
    let st = sc.stats().unwrap();
    // Datagrams the receiving host dropped itself (iperf3 starved on a busy
    // machine) count as lost for iperf3 too.
    let host_drops = (common::udp_in_errors(&sc, Side::Server) - rcv_errors) as f64;
    let n = (st.fwd.model.in_packets - before.fwd.model.in_packets) as f64;
    let drops = (st.fwd.model.random_drops - before.fwd.model.random_drops) as f64;
    let sigma = (n * p * (1.0 - p)).sqrt();
    eprintln!(
        "loss {p}: {drops} of {n} packets dropped at random (expected {:.0} +- {:.1}), iperf3 saw {} of {} lost, \
         the receiving host dropped {host_drops}",
        n * p,
        sigma,
        r.lost_packets,
        r.packets
    );
    assert_eq!(st.fwd.model.queue_drops - before.fwd.model.queue_drops, 0);
    assert!((drops - n * p).abs() <= 4.0 * sigma, "{drops} drops of {n}: outside 4 sigma of {}", n * p);
    // The receiver's count agrees with the emulator's (the few control
    // packets of iperf3's TCP connection can also be dropped and are retransmitted).
    let iperf_lost = r.lost_packets as f64 - host_drops;
    let tol = 4.0 * sigma.max(3.0);
    assert!((iperf_lost - drops).abs() <= tol, "iperf3 lost {iperf_lost}, emulator dropped {drops}");
    // The observed rate from iperf3's own counts is within 4 sigma too.
    let m = r.packets as f64;
    assert!((iperf_lost - m * p).abs() <= 4.0 * (m * p * (1.0 - p)).sqrt(), "iperf3: {iperf_lost} of {m}");
}
