//! `--profile faults`: what faults cost a copy on an emulated long-fat
//! path, and what the user sees. Each case runs one `wanblk copy` across
//! the path (client namespace) against nbdkit or tgtd (server namespace)
//! and injects one fault while it runs:
//!
//! - the target killed (SIGKILL) and started again after 5 s and after
//!   30 s, for nbdkit and for tgtd (backups: the lost sessions'
//!   unflushed writes are sent again);
//! - a blackout of the path for 5 s and for 60 s (restores);
//! - SIGINT at half the clean run's time, then the same command again.
//!
//! Every destination is checked by sha256 against the source. Time lost is
//! the case's wall time minus the clean run's of the same direction and
//! target. Results: `faults.md` (the table) and `runs.csv` in the output
//! directory.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use wanblk_netem::{Profile, Scenario, Side, SysctlProfile};
use wanblk_testkit::tgt::Tgt;

/// What to run.
#[derive(Debug, Clone)]
pub struct FaultsOptions {
    /// Where `faults.md` and `runs.csv` go.
    pub out_dir: PathBuf,
    /// Image size, bytes.
    pub size: u64,
    /// Bottleneck rate, Mbit/s.
    pub rate_mbps: u64,
    /// One-way delay, ms.
    pub delay_ms: f64,
}

const NBD_PORT: u16 = 10809;
const PORTAL_PORT: u16 = 3260;
const IQN: &str = "iqn.2024-01.invalid.wanblk:faults";

/// The store a case copies to or from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    Nbdkit,
    Tgtd,
}

/// What happens during the copy.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// Kill the target at 30 % of the clean run's time, start it again
    /// after this long.
    Restart(Duration),
    /// Black the path out at 30 % of the clean run's time for this long.
    Blackout(Duration),
    /// SIGINT at half the clean run's time, then run again.
    Interrupt,
}

/// One measured case.
#[derive(Debug, Clone)]
struct Row {
    fault: String,
    store: &'static str,
    direction: &'static str,
    exit: String,
    saw: String,
    seconds: f64,
    time_lost_s: Option<f64>,
    resent_bytes: u64,
    retried: u64,
    result: String,
}

/// A running target in the server namespace.
enum Target {
    Nbdkit(Child),
    Tgtd(Tgt),
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Target::Nbdkit(c) = self {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

struct Bench<'a> {
    exe: &'a Path,
    sc: Scenario,
    work: tempfile::TempDir,
    src: PathBuf,
    sha: String,
    size: u64,
}

impl Bench<'_> {
    fn server(&self) -> String {
        self.sc.server_addr().to_string()
    }

    /// The target's backing file: the source for restores, a fresh sparse
    /// file for backups.
    fn lun(&self) -> PathBuf {
        self.work.path().join("target.img")
    }

    fn start(&self, store: Store, backing: &Path) -> anyhow::Result<(Target, String)> {
        match store {
            Store::Nbdkit => {
                let mut c = Command::new("nbdkit");
                c.args([
                    "-f",
                    "--exit-with-parent",
                    "-i",
                    &self.server(),
                    "-p",
                    &NBD_PORT.to_string(),
                    "file",
                ])
                .arg(backing);
                let child = self.sc.spawn(Side::Server, &mut c).context("starting nbdkit")?;
                let uri = format!("nbd://{}:{NBD_PORT}/", self.server());
                let t = Target::Nbdkit(child);
                self.wait_answers(&uri)?;
                Ok((t, uri))
            }
            Store::Tgtd => {
                let portal = SocketAddr::from((self.sc.server_addr(), PORTAL_PORT));
                let sc = &self.sc;
                let tgt = Tgt::launch(portal, |cmd| {
                    wanblk_sys::process::terminate_with_parent(cmd);
                    sc.enter(Side::Server, cmd)
                })?;
                let uri = tgt.uri(IQN);
                let t = Target::Tgtd(tgt);
                if let Target::Tgtd(tgt) = &t {
                    add_lun(tgt, backing)?;
                }
                Ok((t, uri))
            }
        }
    }

    /// Waits until nbdkit answers across the path.
    fn wait_answers(&self, uri: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut c = Command::new("nbdinfo");
            c.arg("--size").arg(uri);
            if self.sc.exec(Side::Client, &mut c).is_ok_and(|o| o.status.success()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("nbdkit does not answer at {uri}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `wanblk copy src dst` in the client namespace, started.
    fn spawn_copy(&self, src: &str, dst: &str, report: &Path) -> anyhow::Result<Child> {
        let mut c = Command::new(self.exe);
        c.args(["copy", src, dst, "-C", "auto", "--no-progress", "--report"]).arg(report);
        c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        wanblk_sys::process::terminate_with_parent(&mut c);
        self.sc.spawn(Side::Client, &mut c).context("starting wanblk copy")
    }

    /// Runs one case; `clean` is the clean run's seconds (None: this is it).
    fn case(&mut self, store: Store, backup: bool, fault: Fault, clean: Option<f64>) -> anyhow::Result<Row> {
        let lun = self.lun();
        let out_img = self.work.path().join("out.img");
        for p in [&lun, &out_img] {
            let _ = std::fs::remove_file(p);
        }
        for p in ["out.img.wanblk-part", "out.img.wanblk-journal"] {
            let _ = std::fs::remove_file(self.work.path().join(p));
        }
        if backup {
            std::fs::File::create(&lun)?.set_len(self.size)?;
        } else {
            std::fs::copy(&self.src, &lun)?;
        }
        let (mut target, uri) = self.start(store, &lun)?;
        let (src, dst) = if backup {
            (self.src.display().to_string(), uri.clone())
        } else {
            (uri.clone(), out_img.display().to_string())
        };
        let report = self.work.path().join("report.json");
        let t0 = Instant::now();
        let when = |share: f64| Duration::from_secs_f64(clean.unwrap_or(10.0) * share);
        let child = self.spawn_copy(&src, &dst, &report)?;
        let mut second = None;
        let out = match fault {
            Fault::None => child.wait_with_output()?,
            Fault::Restart(after) => {
                std::thread::sleep(when(0.3));
                kill(&mut target);
                std::thread::sleep(after);
                let (t, _) = self.start(store, &lun)?;
                target = t;
                child.wait_with_output()?
            }
            Fault::Blackout(len) => {
                let at = when(0.3);
                let text = format!("at {}ms blackout {}ms\n", at.as_millis(), len.as_millis());
                self.sc.set_profile(Profile::parse(&text).context("blackout profile")?);
                let o = child.wait_with_output()?;
                self.sc.set_profile(Profile::default());
                o
            }
            Fault::Interrupt => {
                std::thread::sleep(when(0.5));
                let _ = wanblk_sys::process::signal(child.id(), wanblk_sys::process::SIGINT);
                let first = child.wait_with_output()?;
                let r1 = std::fs::read(&report).ok().and_then(|b| wanblk_copy::Report::from_json(&b).ok());
                second = Some((first, r1));
                let again = self.spawn_copy(&src, &dst, &report)?;
                again.wait_with_output()?
            }
        };
        let seconds = t0.elapsed().as_secs_f64();
        let r = std::fs::read(&report).ok().and_then(|b| wanblk_copy::Report::from_json(&b).ok());
        drop(target);
        let check = if backup { lun.clone() } else { out_img.clone() };
        let result = if !out.status.success() {
            "failed".to_string()
        } else if wanblk_testkit::sha256_file(&check).ok().as_deref() == Some(self.sha.as_str()) {
            "complete, sha256 ok".to_string()
        } else {
            "sha256 MISMATCH".to_string()
        };
        let mut saw = said(&out);
        let mut exit = code(&out);
        let (mut resent, mut retried) =
            r.as_ref().map_or((0, 0), |r| (r.faults.resent_bytes, r.faults.retried_requests));
        if let Some((first, r1)) = second {
            exit = format!("{} then {}", code(&first), exit);
            saw = format!("{} / then: {}", said(&first), saw);
            let d1 = r1.as_ref().map_or(0, |r| r.data_bytes);
            let d2 = r.as_ref().map_or(0, |r| r.data_bytes);
            resent = (d1 + d2).saturating_sub(self.size);
            retried += r1.map_or(0, |r| r.faults.retried_requests);
        }
        let row = Row {
            fault: describe(fault),
            store: match store {
                Store::Nbdkit => "nbdkit",
                Store::Tgtd => "tgtd",
            },
            direction: if backup { "backup" } else { "restore" },
            exit,
            saw,
            seconds,
            time_lost_s: clean.map(|c| seconds - c),
            resent_bytes: resent,
            retried,
            result,
        };
        println!(
            "  {:<26} {:<7} {:<8} {:>6.1} s  lost {:>6}  re-sent {:>11} B  {}  [{}]",
            row.fault,
            row.store,
            row.direction,
            row.seconds,
            row.time_lost_s.map_or("-".into(), |t| format!("{t:.1} s")),
            row.resent_bytes,
            row.result,
            row.saw
        );
        Ok(row)
    }
}

/// Kills a target at once (as a crash).
fn kill(t: &mut Target) {
    match t {
        Target::Nbdkit(c) => {
            let _ = c.kill();
            let _ = c.wait();
        }
        Target::Tgtd(tgt) => tgt.kill(),
    }
}

fn add_lun(tgt: &Tgt, backing: &Path) -> anyhow::Result<()> {
    let t = |args: &[&str]| tgt.try_tgtadm(args).map(drop);
    t(&["--op", "new", "--mode", "target", "--tid", "1", "-T", IQN])?;
    let b = backing.to_str().context("backing path")?;
    t(&["--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1", "-b", b, "--bstype", "rdwr"])?;
    t(&["--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL"])?;
    tgt.try_lfn(1)
}

fn describe(f: Fault) -> String {
    match f {
        Fault::None => "none (clean run)".into(),
        Fault::Restart(d) => format!("target restart after {} s", d.as_secs()),
        Fault::Blackout(d) => format!("blackout {} s", d.as_secs()),
        Fault::Interrupt => "SIGINT at 50 %, rerun".into(),
    }
}

fn code(o: &Output) -> String {
    o.status.code().map_or("killed".into(), |c| format!("exit {c}"))
}

/// The lines wanblk printed about what happened (not the summary of bytes).
fn said(o: &Output) -> String {
    let text = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("wanblk:") && !l.starts_with("wanblk: copied"))
        .map(|l| l.trim_start_matches("wanblk:").trim())
        .collect();
    let s = lines.join("; ");
    if s.is_empty() { "nothing (it just took longer)".into() } else { s.replace('|', "/") }
}

/// Runs the faults profile.
///
/// # Errors
/// Not root, tools missing, the emulator failing.
pub fn run(exe: &Path, opts: &FaultsOptions) -> anyhow::Result<()> {
    anyhow::ensure!(wanblk_sys::sched::geteuid() == 0, "the faults profile needs root (network namespaces)");
    for (tool, pkg) in [("nbdkit", "nbdkit"), ("nbdinfo", "libnbd-bin"), ("tgtd", "tgt")] {
        anyhow::ensure!(wanblk_testkit::which(tool).is_some(), "{tool} is missing: apt-get install -y {pkg}");
    }
    let sc = Scenario::builder()
        .name("faults")
        .rate_bps(opts.rate_mbps * 1_000_000)
        .delay(Duration::from_secs_f64(opts.delay_ms / 1000.0))
        .queue_bdp(1.0)
        .sysctl_profile(SysctlProfile::Bdp)
        .start()
        .context("starting the emulated path")?;
    let work = tempfile::Builder::new().prefix("wanblk-faults-").tempdir()?;
    let src = work.path().join("src.img");
    println!(
        "faults: {} MiB image, {} Mbit/s, {} ms one way",
        opts.size >> 20,
        opts.rate_mbps,
        opts.delay_ms
    );
    let sha = wanblk_testkit::random_file(&src, opts.size, 0xfa_17)?;
    let mut b = Bench { exe, sc, work, src, sha, size: opts.size };
    let mut rows = Vec::new();
    let clean_nbd_backup = b.case(Store::Nbdkit, true, Fault::None, None)?;
    let clean_tgt_backup = b.case(Store::Tgtd, true, Fault::None, None)?;
    let clean_restore = b.case(Store::Nbdkit, false, Fault::None, None)?;
    let (cb, ct, cr) = (clean_nbd_backup.seconds, clean_tgt_backup.seconds, clean_restore.seconds);
    rows.extend([clean_nbd_backup, clean_tgt_backup, clean_restore]);
    for after in [5, 30] {
        rows.push(b.case(Store::Nbdkit, true, Fault::Restart(Duration::from_secs(after)), Some(cb))?);
        rows.push(b.case(Store::Tgtd, true, Fault::Restart(Duration::from_secs(after)), Some(ct))?);
    }
    for len in [5, 60] {
        rows.push(b.case(Store::Nbdkit, false, Fault::Blackout(Duration::from_secs(len)), Some(cr))?);
    }
    rows.push(b.case(Store::Nbdkit, false, Fault::Interrupt, Some(cr))?);
    write(&opts.out_dir, opts, &rows)
}

fn write(dir: &Path, opts: &FaultsOptions, rows: &[Row]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut csv = std::fs::File::create(dir.join("runs.csv"))?;
    writeln!(csv, "fault,store,direction,exit,seconds,time_lost_s,resent_bytes,retried_requests,result")?;
    for r in rows {
        writeln!(
            csv,
            "{},{},{},{},{:.2},{},{},{},{}",
            r.fault,
            r.store,
            r.direction,
            r.exit,
            r.seconds,
            r.time_lost_s.map_or(String::new(), |t| format!("{t:.2}")),
            r.resent_bytes,
            r.retried,
            r.result
        )?;
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut md = std::fs::File::create(dir.join("faults.md"))?;
    writeln!(md, "# Faults during a copy\n")?;
    writeln!(
        md,
        "`wanblk-bench run --profile faults`: a {} MiB image over an emulated path of {} Mbit/s and {} ms one way \
         (queue 1 BDP, buffers 4 x BDP), `wanblk copy -C auto`, nbdkit (file plugin) or tgtd (rdwr LUN) in the \
         server namespace. Backups write the target; restores read it into a local file. Time lost is the wall \
         time minus the clean run's of the same direction and target. Re-sent bytes: acknowledged writes sent \
         again after their session failed before a flush (backups), or data copied twice across the interrupted \
         run and its rerun. Load average at the end: {}\n",
        opts.size >> 20,
        opts.rate_mbps,
        opts.delay_ms,
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    )?;
    writeln!(
        md,
        "| fault | target | direction | what the user saw | time lost | bytes re-sent | requests retried | result |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|")?;
    for r in rows {
        writeln!(
            md,
            "| {} | {} | {} | {}: {} | {} | {} | {} | {} |",
            r.fault,
            r.store,
            r.direction,
            r.exit,
            r.saw,
            r.time_lost_s.map_or(format!("({:.1} s)", r.seconds), |t| format!("{t:.1} s")),
            r.resent_bytes,
            r.retried,
            r.result
        )?;
    }
    println!("faults: wrote {}", dir.join("faults.md").display());
    Ok(())
}
