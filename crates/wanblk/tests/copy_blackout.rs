//! A WAN blackout during a copy: the emulated path (200 Mbit/s, 20 ms
//! RTT) drops everything for 5 s while a restore runs from nbdkit in the
//! server namespace to a local file. The copy rides it out (TCP
//! retransmits; sessions that time out are replaced) and completes with
//! the right data (sha256). Needs root (network namespaces).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use wanblk_netem::{Profile, Scenario, Side, SysctlProfile};

const IMAGE: u64 = 64 << 20;

#[test]
fn a_5_s_blackout_mid_copy() {
    assert!(wanblk_sys::sched::geteuid() == 0, "this test builds an emulated WAN: run it as root");
    wanblk_testkit::require_tool("nbdkit", "nbdkit");
    wanblk_testkit::require_tool("nbdinfo", "libnbd-bin");
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0xb1ac).unwrap();
    let mut sc = Scenario::builder()
        .rate_bps(200_000_000)
        .delay(Duration::from_millis(10))
        .queue_bdp(1.0)
        .sysctl_profile(SysctlProfile::Bdp)
        .start()
        .expect("start the emulated path");
    let addr = sc.server_addr().to_string();
    let mut nbdkit = Command::new("nbdkit");
    nbdkit.args(["-f", "--exit-with-parent", "-r", "-i", &addr, "-p", "10809", "file"]).arg(&src);
    let _nbdkit =
        wanblk_testkit::Peer::adopt("nbdkit", sc.spawn(Side::Server, &mut nbdkit).expect("start nbdkit"));
    let uri = format!("nbd://{addr}:10809/");
    wait_until("nbdkit answers across the path", Duration::from_secs(20), || {
        let mut c = Command::new("nbdinfo");
        c.arg("--size").arg(&uri);
        sc.enter(Side::Client, &mut c).unwrap();
        wanblk_testkit::output_within(&mut c, Duration::from_secs(10)).is_ok_and(|o| o.status.success())
    });
    let dst = dir.path().join("out.img");
    let rep = dir.path().join("r.json");
    let mut c = wanblk();
    c.args(["copy", &uri]).arg(&dst).args(["-C", "4", "--checksum", "--no-progress", "--report"]).arg(&rep);
    sc.enter(Side::Client, &mut c).unwrap();
    let t0 = Instant::now();
    let run = wanblk_testkit::Running::start(&mut c);
    sc.set_profile(Profile::parse("at 1s blackout 5s\n").unwrap());
    let (code, stdout, stderr) = text(&run.wait(COPY_TIMEOUT));
    assert_eq!(code, Some(0), "{stderr}");
    let st = sc.stats().expect("the emulator runs");
    let dark = st.fwd.model.blackout_drops + st.back.model.blackout_drops;
    assert!(dark > 0, "the blackout fell inside the copy (it dropped its packets)");
    let r = report(&rep);
    assert_eq!(r["complete"], true, "{r}");
    eprintln!("copied through a 5 s blackout in {:.1} s; faults {}", t0.elapsed().as_secs_f64(), r["faults"]);
    assert_eq!(stdout.trim(), sha);
    assert_eq!(sha256_file(&dst).unwrap(), sha);
    drop(sc);
}
