//! The cost of NBD over TLS on the main emulated path (1 Gbit/s, 50 ms one
//! way, default buffers, cubic): the embedded target twice behind the same
//! emulator, once in clear text and once with `--tls require` (a
//! certificate made at run time), and `wanblk copy` against each in turn,
//! interleaved: fixed N for `fixed_secs` and `-C auto` over an image sized
//! to `image_secs` at the iperf3 ceiling, restore and backup. Goodput,
//! client and target CPU seconds, and CPU seconds per Gbit moved. Writes
//! runs.csv and tables.md.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::path::{BenchPath, Direction, PathSpec, Run};

/// Settings of the TLS benchmark.
#[derive(Debug, Clone)]
pub struct TlsBenchOptions {
    /// Output directory (runs.csv, tables.md).
    pub out_dir: PathBuf,
    /// Seconds each fixed-N run copies.
    pub fixed_secs: f64,
    /// Seconds of the ceiling each `-C auto` run copies.
    pub image_secs: f64,
    /// Fixed N values.
    pub fixed: Vec<u32>,
}

/// One measured copy and whether it ran over TLS.
struct Row {
    tls: bool,
    run: Run,
}

/// CPU seconds per Gbit of payload.
fn per_gbit(cpu: Option<f64>, bytes: u64) -> Option<f64> {
    cpu.filter(|_| bytes > 0).map(|c| c / (bytes as f64 * 8.0 / 1e9))
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(String::new, |v| format!("{v:.digits$}"))
}

fn csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "transport,tool,direction,bytes,seconds,goodput_mbps,client_cpu_s,server_cpu_s,client_cpu_s_per_gbit,server_cpu_s_per_gbit,connections,steal_pct\n",
    );
    for Row { tls, run: r } in rows {
        let _ = writeln!(
            s,
            "{},{},{:?},{},{:.3},{:.1},{},{},{},{},{},{}",
            if *tls { "tls" } else { "clear" },
            r.tool,
            r.direction,
            r.bytes,
            r.seconds,
            r.goodput_mbps,
            opt(r.client_cpu_s, 3),
            opt(r.server_cpu_s, 3),
            opt(per_gbit(r.client_cpu_s, r.bytes), 3),
            opt(per_gbit(r.server_cpu_s, r.bytes), 3),
            r.connections.map_or_else(String::new, |c| c.to_string()),
            opt(r.steal_pct, 1),
        );
    }
    s
}

fn tables(rows: &[Row], ceilings: &[(Direction, f64)], context: &str) -> String {
    let mut md = format!(
        "# NBD over TLS: what it costs\n\n{context}\n\nEach line pairs a clear-text copy with the same copy over TLS \
         (run right after it on the same path). CPU is seconds per Gbit of payload \
         (client: the wanblk copy process; target: `wanblk target`).\n\n"
    );
    for (d, c) in ceilings {
        let _ = writeln!(md, "- iperf3 ceiling ({d:?}): {c:.0} Mbit/s");
    }
    md.push_str(
        "\n| direction | run | clear Mbit/s | TLS Mbit/s | TLS/clear | N clear / TLS | client CPU s/Gbit clear / TLS | target CPU s/Gbit clear / TLS |\n|---|---|---|---|---|---|---|---|\n",
    );
    for pair in rows.chunks(2) {
        let [a, b] = pair else { continue };
        let (c, t) = if a.tls { (&b.run, &a.run) } else { (&a.run, &b.run) };
        let conns = |r: &Run| r.connections.map_or_else(|| "-".into(), |n| n.to_string());
        let _ = writeln!(
            md,
            "| {:?} | {} | {:.0} | {:.0} | {:.2} | {} / {} | {} / {} | {} / {} |",
            c.direction,
            c.tool,
            c.goodput_mbps,
            t.goodput_mbps,
            t.goodput_mbps / c.goodput_mbps,
            conns(c),
            conns(t),
            opt(per_gbit(c.client_cpu_s, c.bytes), 2),
            opt(per_gbit(t.client_cpu_s, t.bytes), 2),
            opt(per_gbit(c.server_cpu_s, c.bytes), 2),
            opt(per_gbit(t.server_cpu_s, t.bytes), 2),
        );
    }
    md
}

/// Runs the benchmark and writes its files.
///
/// # Errors
/// Not root, a tool missing, the targets not starting, or the output not
/// writable. A failed copy is reported and skipped.
pub fn run(exe: &Path, opts: &TlsBenchOptions) -> anyhow::Result<()> {
    std::fs::create_dir_all(&opts.out_dir).with_context(|| format!("creating {}", opts.out_dir.display()))?;
    let started = std::time::Instant::now();
    let load = |what: &str| {
        let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        format!("load {what}: {}", l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
    };
    let load_start = load("at the start");
    let spec = PathSpec::new(1000, 50.0);
    println!("path {}", spec.label());
    let mut path = BenchPath::start(&spec, exe, 1 << 40)?;
    let pki = tempfile::Builder::new().prefix("wanblk-bench-tls-").tempdir()?;
    let (_ca, server_dir, client_dir) = wanblk_testkit::tls::pki(pki.path(), "wanblk-bench");
    let server = server_dir.to_string_lossy().to_string();
    let (tls_uri, tls_pid) =
        path.extra_target(10820, &["--tls", "require", "--tls-certificates", &server])?;
    // The certificate names localhost; the target's address in the
    // namespace is another.
    let sep = if tls_uri.contains('?') { '&' } else { '?' };
    let tls_uri = format!("{tls_uri}{sep}tls-certificates={}&tls-hostname=localhost", client_dir.display());
    let clear_uri = path.uri().to_string();

    let mut ceilings = Vec::new();
    for dir in [Direction::Restore, Direction::Backup] {
        match path.iperf3(8, 8, dir) {
            Ok(r) => {
                println!("  ceiling {dir:?}: {:.0} Mbit/s", r.goodput_mbps);
                ceilings.push((dir, r.goodput_mbps));
            }
            Err(e) => println!("  ceiling {dir:?}: failed: {e:#}"),
        }
    }
    let ceiling = ceilings.iter().map(|c| c.1).fold(f64::NAN, f64::max);
    let mbps = if ceiling.is_nan() { spec.rate_bps as f64 / 1e6 } else { ceiling };
    let image = (((mbps * 1e6 / 8.0 * opts.image_secs) as u64) >> 20).max(64) << 20;
    let stop = opts.fixed_secs.to_string();
    let len = image.to_string();

    let mut rows: Vec<Row> = Vec::new();
    let mut failures = Vec::new();
    let mut pair = |path: &BenchPath, dir: Direction, args: &[&str]| {
        let mut got = Vec::new();
        for (tls, uri, pid) in [(false, clear_uri.as_str(), None), (true, tls_uri.as_str(), Some(tls_pid))] {
            let r = match pid {
                None => path.wanblk(dir, args),
                Some(pid) => path.wanblk_at(uri, pid, dir, args),
            };
            match r {
                Ok(run) => {
                    println!(
                        "  {} {} {dir:?}: {:.0} Mbit/s, client CPU {} s, target CPU {} s",
                        if tls { "tls  " } else { "clear" },
                        run.tool,
                        run.goodput_mbps,
                        opt(run.client_cpu_s, 1),
                        opt(run.server_cpu_s, 1)
                    );
                    got.push(Row { tls, run });
                }
                Err(e) => {
                    println!("  {} {args:?} {dir:?} failed: {e:#}", if tls { "tls" } else { "clear" });
                    failures.push(format!("{} {args:?} {dir:?}: {e:#}", if tls { "tls" } else { "clear" }));
                }
            }
        }
        if got.len() == 2 {
            rows.extend(got);
        }
        let _ = std::fs::write(opts.out_dir.join("runs.csv"), csv(&rows));
    };
    for dir in [Direction::Restore, Direction::Backup] {
        for n in &opts.fixed {
            let ns = n.to_string();
            pair(&path, dir, &["-C", &ns, "--stop-after", &stop]);
        }
        pair(&path, dir, &["-C", "auto", "--length", &len]);
    }
    drop(path);
    let context = format!(
        "Path {} (wanblk's NFQUEUE emulator), image of {} MiB for `-C auto`, {} s per fixed-N run; {}, {}; {:.0} s in all.{}",
        spec.label(),
        image >> 20,
        opts.fixed_secs,
        load_start,
        load("at the end"),
        started.elapsed().as_secs_f64(),
        if failures.is_empty() { String::new() } else { format!("\n\nFailed: {}", failures.join("; ")) }
    );
    std::fs::write(opts.out_dir.join("runs.csv"), csv(&rows))?;
    std::fs::write(opts.out_dir.join("tables.md"), tables(&rows, &ceilings, &context))?;
    println!("wrote {}/runs.csv and tables.md", opts.out_dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_of(mbps: f64, cpu: f64) -> Run {
        Run {
            tool: "wanblk -C 8".into(),
            direction: Direction::Restore,
            bytes: 1_000_000_000 / 8 * 10,
            seconds: 10.0,
            goodput_mbps: mbps,
            client_cpu_s: Some(cpu),
            server_cpu_s: Some(cpu / 2.0),
            connections: Some(8),
            converge_s: None,
            steal_pct: None,
            report: None,
        }
    }

    #[test]
    fn cpu_per_gbit_and_the_pair_table() {
        // 10 Gbit moved with 5 CPU seconds: 0.5 s per Gbit.
        assert_eq!(per_gbit(Some(5.0), 1_250_000_000), Some(0.5));
        assert_eq!(per_gbit(Some(5.0), 0), None);
        let rows =
            vec![Row { tls: false, run: run_of(800.0, 5.0) }, Row { tls: true, run: run_of(400.0, 10.0) }];
        let md = tables(&rows, &[(Direction::Restore, 900.0)], "ctx");
        assert!(
            md.contains("| Restore | wanblk -C 8 | 800 | 400 | 0.50 | 8 / 8 | 0.50 / 1.00 | 0.25 / 0.50 |"),
            "{md}"
        );
        let c = csv(&rows);
        assert_eq!(c.lines().count(), 3);
        assert!(c.lines().nth(2).unwrap().starts_with("tls,wanblk -C 8,Restore,"), "{c}");
    }
}
