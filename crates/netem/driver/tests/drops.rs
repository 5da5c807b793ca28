//! With a queue far below the BDP, the emulator's queue drops match the
//! retransmissions TCP reports.

mod common;

use std::time::Duration;

use wanblk_netem::bench::{IperfRun, IperfServer, iperf3};
use wanblk_netem::{Scenario, SysctlProfile};

#[test]
fn queue_drops_match_tcp_retransmits() {
    let _serial = common::require_root();
    wanblk_testkit::require_tool("iperf3", "iperf3");
    // 100 Mbit/s, 10 ms each way: BDP = 250 KB = 165 packets; queue of 30.
    let sc = Scenario::builder()
        .rate_bps(100_000_000)
        .delay(Duration::from_millis(10))
        .queue_packets(30)
        .sysctl_profile(SysctlProfile::Bdp)
        .start()
        .unwrap();
    let _srv = IperfServer::start(&sc).unwrap();
    let mut report = Vec::new();
    for _attempt in 0..2 {
        let before = sc.stats().unwrap();
        let r = iperf3(
            &sc,
            &IperfRun { flows: 2, cc: Some("reno".into()), seconds: 8, omit: 0, ..IperfRun::default() },
        )
        .unwrap();
        // The last retransmissions and the FIN exchange pass the emulator.
        let st = common::quiet(&sc);
        let drops = (st.fwd.model.queue_drops - before.fwd.model.queue_drops) as i64;
        let back_drops = st.back.model.queue_drops - before.back.model.queue_drops;
        let retrans = r.retransmits as i64;
        // Tolerance: every dropped segment is retransmitted once; a retransmission
        // can itself be dropped (counted twice on both sides, so that cancels);
        // what differs is (a) segments dropped in the last RTT before iperf3 reads
        // its counters, not yet retransmitted, and (b) spurious retransmissions
        // after a timeout. Each is a handful per flow: allow 10% + 20.
        let tol = drops / 10 + 20;
        report.push(format!(
            "queue drops {drops} (back {back_drops}), TCP retransmits {retrans}, goodput {:.1} Mbit/s, tolerance {tol}, load {}",
            r.received_bps / 1e6,
            common::load()
        ));
        eprintln!("{}\n{}", report.last().unwrap(), st.to_table());
        assert!(drops > 50, "a 30-packet queue must overflow: {}", report.join("\n"));
        assert_eq!(back_drops, 0);
        if (drops - retrans).abs() <= tol {
            return;
        }
    }
    panic!("drops and retransmits disagree twice:\n{}", report.join("\n"));
}
