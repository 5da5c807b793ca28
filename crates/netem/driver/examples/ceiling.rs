//! The physical ceiling of the emulated paths: iperf3 (1 and 8 flows, cubic
//! and bbr, default and 512 KB-capped buffers) at 200 Mbit/s and 1 Gbit/s,
//! 20 and 50 ms one way. Needs root and iperf3.
//!
//! ```text
//! cargo run -p wanblk-netem --release --example ceiling -- [--seconds 8] [--repeats 3] [--out FILE] [--quick] [--from N]
//! ```
//!
//! Writes CSV (default `docs/results/netem-ceiling.csv`) and prints a
//! Markdown table.

use std::io::Write;
use std::path::PathBuf;

use wanblk_netem::bench::{CeilingRow, ceiling_matrix, default_cases, sysctl_name};

fn main() -> anyhow::Result<()> {
    let mut seconds = 8;
    let mut repeats = 3;
    let mut quick = false;
    let mut from = 0usize;
    let mut out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../docs/results/netem-ceiling.csv");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => seconds = args.next().expect("--seconds N").parse()?,
            "--repeats" => repeats = args.next().expect("--repeats N").parse()?,
            "--out" => out = PathBuf::from(args.next().expect("--out FILE")),
            "--quick" => quick = true,
            "--from" => from = args.next().expect("--from N").parse()?,
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    let mut cases = default_cases();
    if quick {
        cases.retain(|c| c.delay_ms == 20 && c.cc == "cubic");
    }
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // --from N: skip the first N cases and append to an existing file.
    cases.drain(..from.min(cases.len()));
    let mut csv = if from > 0 {
        std::fs::OpenOptions::new().append(true).open(&out)?
    } else {
        let mut f = std::fs::File::create(&out)?;
        writeln!(f, "{}", CeilingRow::CSV_HEADER)?;
        f
    };
    eprintln!("{} cases x {repeats} runs of {seconds} s (+3 s omitted)", cases.len());
    let rows = ceiling_matrix(&cases, seconds, repeats, |r| {
        eprintln!("{}", r.to_csv());
        let _ = writeln!(csv, "{}", r.to_csv());
        let _ = csv.flush();
    })?;
    println!(
        "| rate | one-way delay | cc | buffers | flows | goodput Mbit/s | of rate | retransmits | emulator CPU |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let c = &r.case;
        println!(
            "| {} Mbit/s | {} ms | {} | {} | {} | {:.1} | {:.1}% | {} | {:.0}% |",
            c.rate_bps / 1_000_000,
            c.delay_ms,
            c.cc,
            sysctl_name(c.sysctl),
            c.flows,
            r.goodput_bps / 1e6,
            r.utilisation * 100.0,
            r.retransmits,
            r.emulator_cpu * 100.0
        );
    }
    eprintln!("wrote {}", out.display());
    Ok(())
}
