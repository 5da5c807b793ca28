//! Idle ping RTT is 2 x the one-way delay within 1 ms, at 5, 20, 50 and 100 ms.

mod common;

use std::time::Duration;

use wanblk_netem::Scenario;

#[test]
fn idle_ping_rtt_is_twice_the_delay() {
    let _serial = common::require_root();
    let mut report = Vec::new();
    for delay_ms in [5u64, 20, 50, 100] {
        let sc = Scenario::builder()
            .rate_bps(1_000_000_000)
            .delay(Duration::from_millis(delay_ms))
            .start()
            .unwrap();
        let want = 2.0 * delay_ms as f64;
        // A measurement is retried once on a noisy machine; the threshold stays.
        let mut ok = false;
        for attempt in 0..2 {
            let p = common::ping(&sc, 40, "0.05", 56);
            assert!(p.received + 1 >= p.sent, "ping lost replies at {delay_ms} ms: {p:?}");
            report.push(format!(
                "delay {delay_ms} ms: RTT min/avg/max {:.3}/{:.3}/{:.3} ms (avg error {:+.3} ms), mdev {:.3}, load {}",
                p.min,
                p.avg,
                p.max,
                p.avg - want,
                p.mdev,
                common::load()
            ));
            if (p.avg - want).abs() <= 1.0 && p.max - want <= 1.0 && want - p.min <= 1.0 {
                ok = true;
                break;
            }
            eprintln!("{}", sc.stats().unwrap().to_table());
            eprintln!("attempt {attempt} failed: {}", report.last().unwrap());
        }
        let st = sc.stats().unwrap();
        assert_eq!(st.fwd.kernel_drops() + st.back.kernel_drops(), 0);
        assert!(ok, "{}", report.join("\n"));
    }
    eprintln!("{}", report.join("\n"));
}
