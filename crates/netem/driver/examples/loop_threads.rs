//! Compares the release loop with one thread for both directions (the
//! default) against one thread per direction: iperf3, 4 cubic flows at
//! 1 Gbit/s, 20 ms one way, BDP buffers; prints the median goodput, loop CPU
//! and lateness of `--repeats` runs each. Needs root and iperf3.
//!
//! ```text
//! cargo run -p wanblk-netem --release --example loop_threads -- [--repeats 3] [--seconds 8]
//! ```

use std::time::Duration;

use wanblk_netem::bench::{IperfRun, IperfServer, iperf3};
use wanblk_netem::{Scenario, SysctlProfile};

fn main() -> anyhow::Result<()> {
    let mut repeats = 3;
    let mut seconds = 8;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--repeats" => repeats = args.next().expect("--repeats N").parse()?,
            "--seconds" => seconds = args.next().expect("--seconds N").parse()?,
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    println!("| loop | goodput Mbit/s | loop CPU (% of one core) | mean lateness us | wake-ups/s | load |");
    println!("|---|---|---|---|---|---|");
    for split in [false, true] {
        let mut rows = Vec::new();
        for _ in 0..repeats {
            let sc = Scenario::builder()
                .rate_bps(1_000_000_000)
                .delay(Duration::from_millis(20))
                .queue_bdp(1.0)
                .sysctl_profile(SysctlProfile::Bdp)
                .thread_per_direction(split)
                .start()?;
            let _srv = IperfServer::start(&sc)?;
            let a = sc.stats()?;
            let r = iperf3(
                &sc,
                &IperfRun { flows: 4, cc: Some("cubic".into()), seconds, omit: 3, ..IperfRun::default() },
            )?;
            let b = sc.stats()?;
            let el = (b.elapsed_ns - a.elapsed_ns) as f64;
            let out = (b.fwd.model.out_packets + b.back.model.out_packets
                - a.fwd.model.out_packets
                - a.back.model.out_packets)
                .max(1) as f64;
            let late = (b.fwd.model.sum_late_ns + b.back.model.sum_late_ns
                - a.fwd.model.sum_late_ns
                - a.back.model.sum_late_ns) as f64
                / out
                / 1000.0;
            let load: f64 =
                std::fs::read_to_string("/proc/loadavg")?.split_whitespace().next().unwrap_or("0").parse()?;
            rows.push((
                r.received_bps / 1e6,
                (b.cpu_ns - a.cpu_ns) as f64 / el * 100.0,
                late,
                (b.wakeups - a.wakeups) as f64 / el * 1e9,
                load,
            ));
        }
        let med = |f: fn(&(f64, f64, f64, f64, f64)) -> f64| {
            let mut v: Vec<f64> = rows.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} |",
            if split { "one thread per direction" } else { "one thread, both queues" },
            med(|r| r.0),
            med(|r| r.1),
            med(|r| r.2),
            med(|r| r.3),
            med(|r| r.4)
        );
    }
    Ok(())
}
