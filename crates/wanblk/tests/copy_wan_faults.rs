//! Faults during a copy across an emulated long-fat path (200 Mbit/s,
//! 20 ms one way), where many requests are in flight when a connection
//! ends: the target killed (SIGKILL) and started again 2 s later, nbdkit
//! and tgtd, during a backup; and a blackout of the path
//! longer than `--io-timeout` during a restore. Every session dies at
//! once; requests queued again from the first session to notice must wait
//! for a new session (not fail because they landed on others that were
//! already dead), and timed-out connections are replaced like closed ones.
//! Also the capacity probe's echo trains across the same path. Each copy
//! completes and is checked by sha256. Needs root (network
//! namespaces), nbdkit, nbdinfo and tgt.

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use wanblk_netem::{Profile, Scenario, Side, SysctlProfile};
use wanblk_testkit::tgt::Tgt;

const IMAGE: u64 = 96 << 20;
const NBD_PORT: &str = "10809";
const IQN: &str = "iqn.2024-01.invalid.wanblk:wan-faults";

/// One emulated path at a time (the machine running CI has few cores).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn path() -> Scenario {
    path_with(SysctlProfile::Bdp)
}

/// [`path`] with the namespaces' TCP buffers set by `profile`.
fn path_with(profile: SysctlProfile) -> Scenario {
    assert!(wanblk_sys::sched::geteuid() == 0, "this test builds an emulated WAN: run it as root");
    Scenario::builder()
        .rate_bps(200_000_000)
        .delay(Duration::from_millis(20))
        .queue_bdp(1.0)
        .sysctl_profile(profile)
        .start()
        .expect("start the emulated path")
}

/// nbdkit (file plugin on `file`) in the server namespace, answering
/// across the path.
fn nbdkit(sc: &Scenario, file: &std::path::Path, read_only: bool) -> (wanblk_testkit::Peer, String) {
    let addr = sc.server_addr().to_string();
    let mut c = Command::new("nbdkit");
    // One thread per connection: nbdkit 1.32's threads answering on a
    // connection that another thread closed after a reset (what a
    // blackout's replaced sessions cause) hit an assertion and abort it.
    c.args(["-f", "--exit-with-parent", "-t", "1", "-i", &addr, "-p", NBD_PORT]);
    if read_only {
        c.arg("-r");
    }
    c.arg("file").arg(file);
    let peer = wanblk_testkit::Peer::adopt("nbdkit", sc.spawn(Side::Server, &mut c).expect("start nbdkit"));
    let uri = format!("nbd://{addr}:{NBD_PORT}/");
    wait_until("nbdkit answers across the path", Duration::from_secs(20), || {
        let mut c = Command::new("nbdinfo");
        c.arg("--size").arg(&uri);
        sc.enter(Side::Client, &mut c).unwrap();
        wanblk_testkit::output_within(&mut c, Duration::from_secs(10)).is_ok_and(|o| o.status.success())
    });
    (peer, uri)
}

/// `wanblk copy SRC DST -C auto ARGS...` (automatic tuning keeps idle spare sessions open: when the target dies they die too, unnoticed until a request lands on one) started in the client namespace.
fn spawn_copy_across(
    sc: &Scenario,
    src: &str,
    dst: &str,
    rep: &std::path::Path,
    args: &[&str],
) -> wanblk_testkit::Running {
    let mut c = wanblk();
    // A target that never comes back fails the copy well within the test's timeout.
    c.args(["copy", src, dst, "-C", "auto", "--retry-for", "40s", "--no-progress", "--report"])
        .arg(rep)
        .args(args);
    sc.enter(Side::Client, &mut c).unwrap();
    wanblk_testkit::Running::start(&mut c)
}

/// The copy finished well: exit 0, complete, flushed if asked, at least
/// one reconnect.
fn assert_survived(out: &std::process::Output, rep: &std::path::Path) {
    let (code, _, stderr) = text(out);
    assert_eq!(code, Some(0), "the copy rides out the fault:\n{stderr}");
    let r = report(rep);
    assert_eq!(r["complete"], true, "{r}");
    assert!(r["faults"]["reconnects"].as_u64().unwrap() >= 1, "the report counts the reconnects: {r}");
}

#[test]
fn nbdkit_restarted_during_a_backup_across_a_20_ms_path() {
    wanblk_testkit::require_tool("nbdkit", "nbdkit");
    wanblk_testkit::require_tool("nbdinfo", "libnbd-bin");
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0x3e57a).unwrap();
    let disk = dir.path().join("disk.img");
    sparse_file(&disk, IMAGE);
    let sc = path();
    let (mut server, uri) = nbdkit(&sc, &disk, false);
    let rep = dir.path().join("r.json");
    let copy = spawn_copy_across(&sc, src.to_str().unwrap(), &uri, &rep, &[]);
    wait_until("some data reached the target", Duration::from_secs(60), || allocated(&disk) >= 8 << 20);
    server.kill();
    std::thread::sleep(Duration::from_secs(2));
    let (_again, _) = nbdkit(&sc, &disk, false);
    let out = copy.wait(COPY_TIMEOUT);
    assert_survived(&out, &rep);
    assert_eq!(report(&rep)["flushed"], true);
    assert_eq!(sha256_file(&disk).unwrap(), sha, "the target holds the source");
    drop(sc);
}

#[test]
fn tgtd_restarted_during_a_backup_across_a_20_ms_path() {
    wanblk_testkit::tgt::require_tgt();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0x7e5b).unwrap();
    let sc = path();
    let portal = SocketAddr::from((sc.server_addr(), 3260));
    let launch = || {
        Tgt::launch(portal, |cmd| {
            wanblk_sys::process::terminate_with_parent(cmd);
            sc.enter(Side::Server, cmd)
        })
        .expect("start tgtd in the server namespace")
    };
    let mut tgt = launch();
    let lun = tgt.file("lun.img", IMAGE);
    tgt.target(1, IQN, &lun, None, false);
    tgt.lfn(1);
    let uri = tgt.uri(IQN);
    let rep = dir.path().join("r.json");
    let copy = spawn_copy_across(&sc, src.to_str().unwrap(), &uri, &rep, &[]);
    wait_until("some data reached the LUN", Duration::from_secs(60), || allocated(&lun) >= 8 << 20);
    tgt.kill();
    std::thread::sleep(Duration::from_secs(2));
    let again = launch();
    again.target(1, IQN, &lun, None, false);
    again.lfn(1);
    let out = copy.wait(COPY_TIMEOUT);
    assert_survived(&out, &rep);
    drop(again);
    assert_eq!(sha256_file(&lun).unwrap(), sha, "the LUN holds the source");
    drop(sc);
}

#[test]
fn a_blackout_longer_than_the_io_timeout_during_a_restore() {
    wanblk_testkit::require_tool("nbdkit", "nbdkit");
    wanblk_testkit::require_tool("nbdinfo", "libnbd-bin");
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0xb1ac2).unwrap();
    let mut sc = path();
    let (_server, uri) = nbdkit(&sc, &src, true);
    let dst = dir.path().join("out.img");
    let rep = dir.path().join("r.json");
    // Requests and connections time out after 2 s; the path is dark for 5.
    let copy =
        spawn_copy_across(&sc, &uri, dst.to_str().unwrap(), &rep, &["--io-timeout", "2s", "--checksum"]);
    sc.set_profile(Profile::parse("at 1s blackout 5s\n").unwrap());
    let out = copy.wait(COPY_TIMEOUT);
    let st = sc.stats().expect("the emulator runs");
    assert!(
        st.fwd.model.blackout_drops + st.back.model.blackout_drops > 0,
        "the blackout fell inside the copy (it dropped its packets)"
    );
    assert_survived(&out, &rep);
    let (_, stdout, _) = text(&out);
    assert_eq!(stdout.trim(), sha);
    assert_eq!(sha256_file(&dst).unwrap(), sha);
    drop(sc);
}

/// Not a fault, but the same path with 64 KiB TCP buffers: `--capacity-probe`
/// sends its echo trains across the emulator, which serves them at its
/// 200 Mbit/s like any other packets, and the estimate the search is given
/// is that rate: never above it (an estimate too high would open sessions
/// the path has no room for). The estimate sizes the first point: at
/// least 8 sessions (64 KiB over 40 ms is 13 Mbit/s a session, and the
/// estimate is at least 100 Mbit/s), where the search starts at 4 without
/// it. The copy's bytes are checked as always.
#[test]
fn the_capacity_probe_reads_the_emulated_rate_and_the_copy_is_intact() {
    wanblk_testkit::require_tool("nbdkit", "nbdkit");
    wanblk_testkit::require_tool("nbdinfo", "libnbd-bin");
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0xca9a).unwrap();
    let sc = path_with(SysctlProfile::Capped(64 << 10));
    let (_server, uri) = nbdkit(&sc, &src, true);
    let dst = dir.path().join("out.img");
    let rep = dir.path().join("r.json");
    let args = ["--capacity-probe", "--checksum", "--log", "wanblk_remote=info,wanblk_remote::probe=debug"];
    let out = spawn_copy_across(&sc, &uri, dst.to_str().unwrap(), &rep, &args).wait(COPY_TIMEOUT);
    let (code, stdout, stderr) = text(&out);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), sha);
    assert_eq!(sha256_file(&dst).unwrap(), sha);
    let mbps: f64 = logged(&stderr, "path capacity from an echo train", "mbps")
        .unwrap_or_else(|| panic!("the probe logs its estimate:\n{stderr}"));
    // Goodput terms: 200 Mbit/s on the wire carry 191 of TCP payload.
    assert!((100.0..=200.0).contains(&mbps), "estimate {mbps} Mbit/s for a 200 Mbit/s path:\n{stderr}");
    // The trains went out before the copy's first request.
    assert!(stderr.contains("echo trains, before the first request"), "{stderr}");
    let first: usize = logged(&stderr, "first point sized from the capacity", "n")
        .unwrap_or_else(|| panic!("the first point is sized from the estimate:\n{stderr}"));
    assert!(
        (8..=128).contains(&first),
        "first point {first} for {mbps} Mbit/s and 64 KiB buffers:\n{stderr}"
    );
    drop(sc);
}

/// The value of `key=` on the first line of `log` that contains `line`.
fn logged<T: std::str::FromStr>(log: &str, line: &str, key: &str) -> Option<T> {
    let l = log.lines().find(|l| l.contains(line))?;
    l.split(&format!(" {key}=")).nth(1)?.split_whitespace().next()?.parse().ok()
}
