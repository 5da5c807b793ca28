//! Idle ping RTT is 2 x the one-way delay within 1 ms, at 5, 20, 50 and 100 ms.
//!
//! The statistic is the median of 40 replies: on this VM the host steals CPU
//! in bursts (5-20% steal time while other builds run) and the kernel is
//! PREEMPT_NONE, so single replies are now and then late by milliseconds,
//! even with the release loop under SCHED_FIFO. No reply may ever come back
//! faster than 2 x the delay (that would be an emulator bug, not noise).

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
            let mut p = common::ping(&sc, 40, "0.05", 56);
            assert!(p.received + 1 >= p.sent, "ping lost replies at {delay_ms} ms: {p:?}");
            let within = p.replies.iter().filter(|r| (*r - want).abs() <= 1.0).count();
            let n = p.replies.len();
            let med = common::median(&mut p.replies);
            report.push(format!(
                "delay {delay_ms} ms: RTT min/avg/median/max {:.3}/{:.3}/{med:.2}/{:.3} ms (avg error {:+.3} ms), \
                 mdev {:.3}, {within}/{n} within 1 ms, load {}",
                p.min,
                p.avg,
                p.max,
                p.avg - want,
                p.mdev,
                common::load()
            ));
            assert!(
                p.min >= want - 0.01,
                "a reply came back faster than 2 x {delay_ms} ms: {}",
                report.join("\n")
            );
            if n > 0 && (med - want).abs() <= 1.0 {
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
