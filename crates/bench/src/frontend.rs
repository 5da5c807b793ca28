//! The `frontend` profile: the block device front end as applications use
//! it, on the emulated path, for three ways to reach the remote disk:
//!
//! - `nbdfuse -C 1` straight to the remote target (one connection),
//! - `nbdfuse` to `wanblk serve` (local NBD socket, cache, N tuned sessions),
//! - `wanblk mount` (the FUSE file of wanblk itself, no second NBD hop).
//!
//! On each: ext4 made on a loop device over the disk file (mkfs time), a
//! 256 MiB file written then synced, read back after everything was
//! restarted (front end, loop device, kernel caches: cold; timed from the
//! ext4 mount, since read-ahead may start while ext4 mounts), the seed paper's
//! read experiment (`dd bs=10M` from the disk file, cold), and random 4 KiB
//! reads with fio at queue depth 1 and 32. Plus the iperf3 ceiling, and the
//! resident memory of `wanblk mount` after a 1 GiB sequential read for
//! several `--cache-size` values. Writes runs.csv, memory.csv, tables.md
//! and plots to the output directory.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::path::{BenchPath, Direction, PathSpec};
use crate::plot::{Chart, Series};

/// Settings of the front-end benchmark.
#[derive(Debug, Clone)]
pub struct FrontendOptions {
    /// Output directory.
    pub out_dir: PathBuf,
    /// One-way delays to run, milliseconds (1 Gbit/s, 1 BDP queue, default buffers, cubic).
    pub delays_ms: Vec<f64>,
    /// Bytes of the file written and read back through ext4.
    pub file_bytes: u64,
    /// Bytes `dd bs=10M` reads from the disk file.
    pub dd_bytes: u64,
    /// Seconds each fio run lasts.
    pub fio_secs: u32,
    /// Longest any one timed step may take (slow fronts are cut off and
    /// their rate computed from what they moved).
    pub step_limit_s: u64,
    /// `--cache-size` values for the memory measurement.
    pub cache_sizes: Vec<u64>,
    /// Run only these parts: `mount`, `serve`, `direct`, `memory`, `100ms`,
    /// `20ms` (empty: all). A front or memory part alone runs on every
    /// path chosen; a path alone runs every front.
    pub parts: Vec<String>,
}

/// Every value `FrontendOptions::parts` knows.
const PARTS: [&str; 6] = ["mount", "serve", "direct", "memory", "100ms", "20ms"];

impl FrontendOptions {
    /// True if the part `name` of group `group` runs (a group none of
    /// whose parts was named runs whole).
    fn runs(&self, group: &[&str], name: &str) -> bool {
        !self.parts.iter().any(|p| group.contains(&p.as_str())) || self.parts.iter().any(|p| p == name)
    }
}

/// Size of the remote disk.
const DISK: u64 = 2 << 30;
const PORT: u16 = 10900;

/// How the disk file is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Front {
    /// nbdfuse with one connection to the remote.
    NbdfuseDirect,
    /// nbdfuse to `wanblk serve`.
    Serve,
    /// `wanblk mount` with this --cache-size.
    Mount(u64),
}

impl Front {
    fn label(self) -> String {
        match self {
            Front::NbdfuseDirect => "nbdfuse -C 1 -> remote".into(),
            Front::Serve => "nbdfuse -> wanblk serve".into(),
            Front::Mount(_) => "wanblk mount".into(),
        }
    }
}

/// One front's figures on one path.
#[derive(Debug, Clone, Default)]
struct Row {
    path: String,
    rtt_ms: f64,
    front: String,
    ceiling_mbps: f64,
    mkfs_s: f64,
    write_sync_mbps: f64,
    write_partial: bool,
    /// ext4's mount before the read-back, seconds.
    read_mount_s: f64,
    /// The read-back by dd alone (read-ahead may have started during the
    /// mount: it can exceed the link).
    read_back_mbps: f64,
    /// The file over the mount's and dd's time together.
    mount_read_mbps: f64,
    read_partial: bool,
    read_sha_ok: Option<bool>,
    dd_mbps: f64,
    dd_partial: bool,
    rand_qd1_iops: f64,
    rand_qd32_iops: f64,
    load: String,
}

/// A started front: its processes, the disk file and its mount point.
struct Started {
    procs: Vec<Child>,
    file: PathBuf,
    mnt: PathBuf,
    /// The process whose memory is the front end's.
    main_pid: u32,
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Runs a command with a limit; returns (success, stdout, stderr).
fn run_limited(args: &[&str], limit_s: u64) -> anyhow::Result<(bool, String, String)> {
    let out = Command::new("timeout")
        .args(["-s", "INT", &limit_s.to_string()])
        .args(args)
        .output()
        .with_context(|| format!("running {args:?}"))?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

fn must(args: &[&str]) -> anyhow::Result<String> {
    let (ok, out, err) = run_limited(args, 300)?;
    if !ok {
        bail!("{args:?} failed: {err}");
    }
    Ok(out)
}

fn quiet(args: &[&str]) {
    let _ = Command::new("timeout").arg("30").args(args).stdout(Stdio::null()).stderr(Stdio::null()).status();
}

/// Bytes and seconds from dd's closing line (`N bytes (...) copied, T s, ...`).
fn dd_figures(stderr: &str) -> Option<(u64, f64)> {
    let line = stderr.lines().rev().find(|l| l.contains("bytes") && l.contains("copied"))?;
    let bytes = line.split_whitespace().next()?.parse().ok()?;
    let secs = line.split("copied, ").nth(1)?.split_whitespace().next()?.parse().ok()?;
    Some((bytes, secs))
}

/// `dd ARGS` cut off after `limit` seconds: (Mbit/s, cut off).
fn timed_dd(args: &[&str], limit: u64) -> anyhow::Result<(f64, bool)> {
    let mut full = vec!["dd"];
    full.extend_from_slice(args);
    let (ok, _, err) = run_limited(&full, limit)?;
    let (bytes, secs) = dd_figures(&err).with_context(|| format!("dd printed no figures: {err}"))?;
    Ok((bytes as f64 * 8.0 / secs.max(1e-9) / 1e6, !ok))
}

fn drop_caches() {
    let _ = Command::new("sync").status();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

fn is_mounted(p: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let p = p.to_string_lossy();
    mounts.lines().any(|l| l.split_whitespace().nth(1) == Some(&*p))
}

fn wait_for_file(p: &Path, size: u64, limit: Duration) -> anyhow::Result<()> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if std::fs::metadata(p).is_ok_and(|m| m.len() == size) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("{} did not appear with {size} bytes in {limit:?}", p.display())
}

/// Peak resident memory of `pid` (VmHWM), bytes.
fn peak_rss(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    l.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}

struct Bench<'a> {
    exe: &'a Path,
    path: &'a BenchPath,
    work: &'a Path,
    opts: &'a FrontendOptions,
    target: Option<Child>,
    remote: String,
}

impl Bench<'_> {
    /// A fresh memory target (keeps what is written) in the server namespace.
    fn restart_target(&mut self) -> anyhow::Result<()> {
        if let Some(mut t) = self.target.take() {
            let _ = wanblk_sys::process::signal(t.id(), wanblk_sys::process::SIGTERM);
            let _ = t.wait();
        }
        let listen = format!("{}:{PORT}", self.path.scenario().server_addr());
        let mut cmd = Command::new(self.exe);
        wanblk_sys::process::terminate_with_parent(&mut cmd);
        cmd.args(["target", "--size", &DISK.to_string(), "--listen", &listen, "--insecure"])
            .args(["--congestion", &self.path.spec().congestion])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut t = self.path.scenario().spawn(wanblk_netem::Side::Server, &mut cmd)?;
        let mut line = String::new();
        BufReader::new(t.stdout.take().context("target stdout")?).read_line(&mut line)?;
        self.remote = line.trim().to_string();
        self.target = Some(t);
        Ok(())
    }

    fn start(&self, front: Front) -> anyhow::Result<Started> {
        let mnt = self.work.join("mnt");
        std::fs::create_dir_all(&mnt)?;
        let sc = self.path.scenario();
        let cc = self.path.spec().congestion.clone();
        let mut procs = Vec::new();
        let (file, main_pid) = match front {
            Front::NbdfuseDirect => {
                let mut c = Command::new("nbdfuse");
                c.args(["-C", "1"]).arg(&mnt).arg(&self.remote).stdout(Stdio::null());
                let child = sc.spawn(wanblk_netem::Side::Client, &mut c)?;
                let pid = child.id();
                procs.push(child);
                (mnt.join("nbd"), pid)
            }
            Front::Serve => {
                let sock = self.work.join("serve.sock");
                let _ = std::fs::remove_file(&sock);
                let mut s = Command::new(self.exe);
                s.args(["serve", &self.remote, "--congestion", &cc, "--socket"])
                    .arg(&sock)
                    .stdout(Stdio::null());
                let child = sc.spawn(wanblk_netem::Side::Client, &mut s)?;
                let pid = child.id();
                procs.push(child);
                let t0 = Instant::now();
                while !sock.exists() && t0.elapsed() < Duration::from_secs(30) {
                    std::thread::sleep(Duration::from_millis(100));
                }
                let mut c = Command::new("nbdfuse");
                c.arg(&mnt).arg(format!("nbd+unix:///?socket={}", sock.display())).stdout(Stdio::null());
                procs.push(c.spawn()?);
                (mnt.join("nbd"), pid)
            }
            Front::Mount(cache) => {
                let mut m = Command::new(self.exe);
                m.args(["mount", &self.remote])
                    .arg(&mnt)
                    .args(["--congestion", &cc, "--cache-size", &cache.to_string()])
                    .stdout(Stdio::null());
                let child = sc.spawn(wanblk_netem::Side::Client, &mut m)?;
                let pid = child.id();
                procs.push(child);
                (mnt.join("disk"), pid)
            }
        };
        let started = Started { procs, file, mnt, main_pid };
        if let Err(e) = wait_for_file(&started.file, DISK, Duration::from_secs(60)) {
            self.stop(started);
            return Err(e);
        }
        Ok(started)
    }

    /// Unmounts and stops a front (writing back what it holds).
    fn stop(&self, mut s: Started) {
        if is_mounted(&s.mnt) {
            // wanblk mount unmounts itself on SIGTERM; nbdfuse exits once unmounted.
            if let Some(first) = s.procs.first() {
                let _ = wanblk_sys::process::signal(first.id(), wanblk_sys::process::SIGTERM);
            }
            std::thread::sleep(Duration::from_millis(500));
            if is_mounted(&s.mnt) {
                quiet(&["fusermount3", "-u", s.mnt.to_str().unwrap_or("")]);
            }
        }
        for p in s.procs.iter_mut().rev() {
            let _ = wanblk_sys::process::signal(p.id(), wanblk_sys::process::SIGTERM);
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(60) {
                if p.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = p.kill();
            let _ = p.wait();
        }
        if is_mounted(&s.mnt) {
            quiet(&["umount", "-l", s.mnt.to_str().unwrap_or("")]);
        }
    }

    /// The whole sequence for one front on this path.
    fn front(&mut self, front: Front, src: &Path, src_sha: &str, ceiling: f64) -> anyhow::Result<Row> {
        let lim = self.opts.step_limit_s;
        let spec = self.path.spec();
        let mut row = Row {
            path: spec.label(),
            rtt_ms: 2.0 * spec.delay_ms,
            front: front.label(),
            ceiling_mbps: ceiling,
            load: load(),
            ..Row::default()
        };
        self.restart_target()?;
        let fsdir = self.work.join("fs");
        std::fs::create_dir_all(&fsdir)?;
        let fs = fsdir.to_str().unwrap_or_default().to_string();

        // mkfs, write + sync.
        let s = self.start(front)?;
        let file = s.file.to_string_lossy().into_owned();
        let result = (|| -> anyhow::Result<()> {
            let dev = must(&["losetup", "-f", "--show", &file])?.trim().to_string();
            let inner = (|| -> anyhow::Result<()> {
                let t0 = Instant::now();
                must(&["mkfs.ext4", "-q", "-F", &dev])?;
                row.mkfs_s = t0.elapsed().as_secs_f64();
                must(&["mount", &dev, &fs])?;
                let of = format!("of={fs}/data.bin");
                let inf = format!("if={}", src.display());
                let (mbps, cut) = timed_dd(&[&inf, &of, "bs=1M", "conv=fsync"], lim)?;
                (row.write_sync_mbps, row.write_partial) = (mbps, cut);
                Ok(())
            })();
            quiet(&["umount", &fs]);
            quiet(&["losetup", "-d", &dev]);
            inner
        })();
        self.stop(s);
        result.context("mkfs and write")?;

        // Cold read-back through the file system.
        drop_caches();
        let s = self.start(front)?;
        let file = s.file.to_string_lossy().into_owned();
        let result = (|| -> anyhow::Result<()> {
            let dev = must(&["losetup", "-f", "--show", &file])?.trim().to_string();
            let inner = (|| -> anyhow::Result<()> {
                let t0 = Instant::now();
                must(&["mount", &dev, &fs])?;
                row.read_mount_s = t0.elapsed().as_secs_f64();
                let inf = format!("if={fs}/data.bin");
                let (mbps, cut) = timed_dd(&[&inf, "of=/dev/null", "bs=1M"], lim)?;
                // The front end's read-ahead may start while ext4 mounts
                // (its first reads look sequential) and fetch the file
                // before dd opens it: the mount's time counts, or the
                // figure can exceed the link.
                let dd_s = if mbps > 0.0 { self.opts.file_bytes as f64 * 8.0 / (mbps * 1e6) } else { 0.0 };
                let whole = dd_s + row.read_mount_s;
                row.mount_read_mbps =
                    if cut || whole <= 0.0 { mbps } else { self.opts.file_bytes as f64 * 8.0 / whole / 1e6 };
                (row.read_back_mbps, row.read_partial) = (mbps, cut);
                if !cut && !row.write_partial {
                    let sha = must(&["sha256sum", &format!("{fs}/data.bin")])?;
                    row.read_sha_ok = Some(sha.split_whitespace().next() == Some(src_sha));
                }
                Ok(())
            })();
            quiet(&["umount", &fs]);
            quiet(&["losetup", "-d", &dev]);
            inner
        })();
        self.stop(s);
        result.context("read back")?;

        // The paper's experiment: 10 MB reads from the device, cold.
        drop_caches();
        let s = self.start(front)?;
        let file = s.file.to_string_lossy().into_owned();
        let count = (self.opts.dd_bytes / (10 << 20)).max(1).to_string();
        let inf = format!("if={file}");
        let dd = timed_dd(&[&inf, "of=/dev/null", "bs=10M", &format!("count={count}")], lim);
        if let Ok((mbps, cut)) = dd {
            (row.dd_mbps, row.dd_partial) = (mbps, cut);
        }
        // Random 4 KiB reads at queue depth 1 and 32 (32 threads), O_DIRECT.
        let fio = |jobs: u32| -> anyhow::Result<f64> {
            let (ok, out, err) = run_limited(
                &[
                    "fio",
                    "--name=rand",
                    &format!("--filename={file}"),
                    "--rw=randread",
                    "--bs=4k",
                    "--direct=1",
                    "--ioengine=psync",
                    &format!("--numjobs={jobs}"),
                    "--group_reporting",
                    "--time_based",
                    &format!("--runtime={}", self.opts.fio_secs),
                    "--size=2G",
                    "--output-format=json",
                ],
                u64::from(self.opts.fio_secs) + 60,
            )?;
            if !ok {
                bail!("fio failed: {err}");
            }
            let j: serde_json::Value = serde_json::from_str(&out).context("fio JSON")?;
            j["jobs"][0]["read"]["iops"].as_f64().context("fio: no read iops")
        };
        let q1 = fio(1);
        let q32 = fio(32);
        self.stop(s);
        dd.context("dd bs=10M")?;
        row.rand_qd1_iops = q1?;
        row.rand_qd32_iops = q32?;
        Ok(row)
    }

    /// Peak memory of `wanblk mount --cache-size C` over a cold 1 GiB read.
    fn memory(&mut self, cache: u64) -> anyhow::Result<(u64, u64, f64)> {
        self.restart_target()?;
        let s = self.start(Front::Mount(cache))?;
        let inf = format!("if={}", s.file.display());
        let dd = timed_dd(&[&inf, "of=/dev/null", "bs=10M", "count=102"], self.opts.step_limit_s);
        let rss = peak_rss(s.main_pid);
        self.stop(s);
        let (mbps, _) = dd?;
        Ok((cache, rss.context("no VmHWM")?, mbps))
    }
}

/// Runs the benchmark and writes its files.
///
/// # Errors
/// Not root, a tool missing (nbdfuse, fio, mkfs.ext4, losetup), a step failing.
pub fn run(exe: &Path, opts: &FrontendOptions) -> anyhow::Result<()> {
    for (tool, pkg) in [
        ("nbdfuse", "nbdfuse"),
        ("fio", "fio"),
        ("mkfs.ext4", "e2fsprogs"),
        ("losetup", "mount"),
        ("fusermount3", "fuse3"),
        ("iperf3", "iperf3"),
    ] {
        if wanblk_testkit::which(tool).is_none() {
            bail!("{tool} is not installed (apt-get install {pkg})");
        }
    }
    crate::parts::check(&opts.parts, &PARTS, "frontend")?;
    std::fs::create_dir_all(&opts.out_dir)?;
    let work = tempfile::Builder::new().prefix("wanblk-frontend-").tempdir()?;
    let src = work.path().join("src.bin");
    let src_sha = wanblk_testkit::random_file(&src, opts.file_bytes, 42)?;
    let mut rows = Vec::new();
    let mut memory = Vec::new();
    const PATHS: [&str; 2] = ["100ms", "20ms"];
    const FRONTS: [&str; 4] = ["mount", "serve", "direct", "memory"];
    let mut first = true;
    for &delay in &opts.delays_ms {
        if !opts.runs(&PATHS, &format!("{}ms", 2.0 * delay)) {
            continue;
        }
        let spec = PathSpec::new(1000, delay);
        eprintln!("frontend: path {}", spec.label());
        let path = BenchPath::start(&spec, exe, 1 << 30)?;
        let ceiling = path
            .iperf3(1, 10, Direction::Restore)?
            .goodput_mbps
            .max(path.iperf3(8, 10, Direction::Restore).map(|r| r.goodput_mbps).unwrap_or(0.0));
        eprintln!("frontend: iperf3 ceiling {ceiling:.0} Mbit/s");
        let mut b = Bench { exe, path: &path, work: work.path(), opts, target: None, remote: String::new() };
        for (front, part) in
            [(Front::Mount(256 << 20), "mount"), (Front::Serve, "serve"), (Front::NbdfuseDirect, "direct")]
        {
            if !opts.runs(&FRONTS, part) {
                continue;
            }
            eprintln!("frontend: {} ...", front.label());
            match b.front(front, &src, &src_sha, ceiling) {
                Ok(r) => {
                    eprintln!("frontend: {r:?}");
                    rows.push(r);
                }
                Err(e) => eprintln!("frontend: {} failed: {e:#}", front.label()),
            }
        }
        if std::mem::take(&mut first) && opts.runs(&FRONTS, "memory") {
            for &c in &opts.cache_sizes {
                match b.memory(c) {
                    Ok(m) => {
                        eprintln!("frontend: cache {} MiB: peak RSS {} MiB", c >> 20, m.1 >> 20);
                        memory.push((spec.label(), m, load()));
                    }
                    Err(e) => eprintln!("frontend: memory with cache {c}: {e:#}"),
                }
            }
        }
        if let Some(mut t) = b.target.take() {
            let _ = t.kill();
            let _ = t.wait();
        }
    }
    write_outputs(opts, &rows, &memory)
}

fn write_outputs(
    opts: &FrontendOptions,
    rows: &[Row],
    memory: &[(String, (u64, u64, f64), String)],
) -> anyhow::Result<()> {
    let mut csv = String::from(
        "path,rtt_ms,front,ceiling_mbps,mkfs_s,write_sync_mbps,write_cut_off,read_mount_s,read_back_mbps,mount_read_mbps,read_cut_off,read_sha_ok,dd_10m_mbps,dd_cut_off,rand4k_qd1_iops,rand4k_qd32_iops,loadavg\n",
    );
    for r in rows {
        let _ = writeln!(
            csv,
            "{},{},{},{:.0},{:.2},{:.1},{},{:.2},{:.1},{:.1},{},{},{:.1},{},{:.0},{:.0},{}",
            r.path,
            r.rtt_ms,
            r.front,
            r.ceiling_mbps,
            r.mkfs_s,
            r.write_sync_mbps,
            r.write_partial,
            r.read_mount_s,
            r.read_back_mbps,
            r.mount_read_mbps,
            r.read_partial,
            r.read_sha_ok.map_or("n/a".into(), |b| b.to_string()),
            r.dd_mbps,
            r.dd_partial,
            r.rand_qd1_iops,
            r.rand_qd32_iops,
            r.load
        );
    }
    std::fs::write(opts.out_dir.join("runs.csv"), csv)?;
    let mut mcsv = String::from("path,cache_size_mib,peak_rss_mib,dd_10m_mbps,loadavg\n");
    for (p, (c, rss, mbps), l) in memory {
        let _ = writeln!(mcsv, "{p},{},{:.1},{mbps:.1},{l}", c >> 20, *rss as f64 / (1 << 20) as f64);
    }
    std::fs::write(opts.out_dir.join("memory.csv"), mcsv)?;

    let mut md =
        String::from("# Front end: file system and device reads through nbdfuse, serve and mount\n\n");
    let cut = |v: f64, c: bool| if c { format!("{v:.0}*") } else { format!("{v:.0}") };
    let mut paths: Vec<&str> = rows.iter().map(|r| r.path.as_str()).collect();
    paths.dedup();
    for p in paths {
        let rs: Vec<&Row> = rows.iter().filter(|r| r.path == p).collect();
        let ceiling = rs.first().map_or(0.0, |r| r.ceiling_mbps);
        let _ = writeln!(md, "## {p} (RTT {} ms, iperf3 ceiling {ceiling:.0} Mbit/s)\n", rs[0].rtt_ms);
        md.push_str("| path | mkfs | write + sync | ext4 mount | read back (cold) | mount + read back | dd bs=10M (cold) | 4K rand QD1 | 4K rand QD32 | load |\n");
        md.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
        for r in &rs {
            let _ = writeln!(
                md,
                "| {} | {:.1} s | {} Mbit/s ({:.2}) | {:.1} s | {} Mbit/s ({:.2}){} | {} Mbit/s ({:.2}) | {} Mbit/s ({:.2}) | {:.0} IOPS | {:.0} IOPS | {} |",
                r.front,
                r.mkfs_s,
                cut(r.write_sync_mbps, r.write_partial),
                r.write_sync_mbps / ceiling,
                r.read_mount_s,
                cut(r.read_back_mbps, r.read_partial),
                r.read_back_mbps / ceiling,
                match r.read_sha_ok {
                    Some(true) => "",
                    Some(false) => " sha256 MISMATCH",
                    None => "",
                },
                cut(r.mount_read_mbps, r.read_partial),
                r.mount_read_mbps / ceiling,
                cut(r.dd_mbps, r.dd_partial),
                r.dd_mbps / ceiling,
                r.rand_qd1_iops,
                r.rand_qd32_iops,
                r.load
            );
        }
        md.push_str("\nFractions in parentheses are of the iperf3 ceiling. * = cut off after the step limit; the rate is what moved until then. Read back is dd's own figure; the front end's read-ahead may already run while ext4 mounts (its first reads look sequential) and fetch part of the file, so it can exceed the link: mount + read back counts the mount's time too.\n\n");
    }
    if !memory.is_empty() {
        md.push_str("## Memory of `wanblk mount` vs --cache-size (peak RSS over a cold 1 GiB dd bs=10M)\n\n");
        md.push_str("| path | --cache-size | peak RSS | RSS - cache size | dd bs=10M | load |\n|---|---:|---:|---:|---:|---|\n");
        for (p, (c, rss, mbps), l) in memory {
            let _ = writeln!(
                md,
                "| {p} | {} MiB | {:.0} MiB | {:.0} MiB | {mbps:.0} Mbit/s | {l} |",
                c >> 20,
                *rss as f64 / (1 << 20) as f64,
                (*rss as f64 - *c as f64) / (1 << 20) as f64
            );
        }
    }
    std::fs::write(opts.out_dir.join("tables.md"), md)?;

    // Goodput vs RTT for each front, with the ceiling.
    let metric = |f: &dyn Fn(&Row) -> f64, name: &str| -> Chart {
        let mut fronts: Vec<String> = rows.iter().map(|r| r.front.clone()).collect();
        fronts.sort();
        fronts.dedup();
        let mut series: Vec<Series> = fronts
            .iter()
            .map(|fr| {
                Series::new(
                    fr.clone(),
                    rows.iter().filter(|r| &r.front == fr).map(|r| (r.rtt_ms, f(r))).collect(),
                )
            })
            .collect();
        let mut ceil: Vec<(f64, f64)> = rows.iter().map(|r| (r.rtt_ms, r.ceiling_mbps)).collect();
        ceil.sort_by(|a, b| a.0.total_cmp(&b.0));
        ceil.dedup_by(|a, b| a.0 == b.0);
        series.push(Series::reference("iperf3 ceiling", ceil));
        Chart {
            title: format!("{name} (1 Gbit/s)"),
            x_label: "RTT (ms)".into(),
            y_label: "Mbit/s".into(),
            log_x: false,
            series,
            right: None,
        }
    };
    for (stem, f, name) in [
        ("read_back", (&|r: &Row| r.read_back_mbps) as &dyn Fn(&Row) -> f64, "ext4 cold read-back (dd)"),
        ("write_sync", &|r: &Row| r.write_sync_mbps, "ext4 write + sync"),
        ("dd_10m", &|r: &Row| r.dd_mbps, "dd bs=10M from the disk file"),
    ] {
        crate::plot::write(&metric(f, name), &opts.out_dir.join(stem)).map_err(|e| anyhow::anyhow!(e))?;
    }
    if !memory.is_empty() {
        let pts: Vec<(f64, f64)> =
            memory.iter().map(|(_, (c, rss, _), _)| ((*c >> 20) as f64, (*rss >> 20) as f64)).collect();
        let diag: Vec<(f64, f64)> = pts.iter().map(|(c, _)| (*c, *c)).collect();
        crate::plot::write(
            &Chart {
                title: "wanblk mount: peak RSS vs --cache-size".into(),
                x_label: "--cache-size (MiB)".into(),
                y_label: "MiB".into(),
                log_x: false,
                series: vec![Series::new("peak RSS", pts), Series::reference("cache size", diag)],
                right: None,
            },
            &opts.out_dir.join("memory"),
        )
        .map_err(|e| anyhow::anyhow!(e))?;
    }
    eprintln!("frontend: wrote {}", opts.out_dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::dd_figures;

    #[test]
    fn dd_summary_is_parsed() {
        let err =
            "10+0 records in\n10+0 records out\n104857600 bytes (105 MB, 100 MiB) copied, 0.84 s, 125 MB/s\n";
        assert_eq!(dd_figures(err), Some((104_857_600, 0.84)));
        assert_eq!(dd_figures("dd: error"), None);
    }
}
