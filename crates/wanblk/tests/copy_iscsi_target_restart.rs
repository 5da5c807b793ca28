//! tgtd killed (SIGKILL) in the middle of a backup to an iSCSI LUN and
//! started again ~5 s later on the same portal with the same LUN: the copy
//! logs in again (the new sessions' UNIT ATTENTION is retried), sends
//! again what was in flight and what the dead sessions had acknowledged
//! but not flushed (SYNCHRONIZE CACHE), and completes; the LUN's backing
//! file is checked by sha256.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::*;
use wanblk_testkit::tgt::Tgt;

const IQN: &str = "iqn.2024-01.invalid.wanblk:restart";

#[test]
fn tgtd_killed_mid_copy_and_restarted_5_s_later() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0x7397).unwrap();
    let mut tgt = Tgt::start();
    let file = tgt.file("lun.img", IMAGE);
    tgt.target(1, IQN, &file, None, false);
    tgt.lfn(1);
    let uri = tgt.uri(IQN);
    let portal = SocketAddr::from((Ipv4Addr::LOCALHOST, tgt.port));
    let rep = dir.path().join("r.json");
    let copy = spawn_copy(&[src.to_str().unwrap(), &uri, "-C", "2", "--report", rep.to_str().unwrap()]);
    wait_until("some data reached the LUN", Duration::from_secs(60), || allocated(&file) >= 8 << 20);
    tgt.kill();
    std::thread::sleep(Duration::from_secs(5));
    let again = Tgt::launch(portal, |_| Ok(())).expect("tgtd starts again on the same portal");
    again.target(1, IQN, &file, None, false);
    again.lfn(1);
    let (code, _, stderr) = text(&copy.wait(COPY_TIMEOUT));
    assert_eq!(code, Some(0), "the copy rides out the restart:\n{stderr}");
    let r = report(&rep);
    assert_eq!((r["complete"].as_bool(), r["flushed"].as_bool()), (Some(true), Some(true)), "{r}");
    assert!(r["faults"]["reconnects"].as_u64().unwrap() >= 1, "{r}");
    drop(again);
    assert_eq!(sha256_file(&file).unwrap(), sha, "the LUN holds the source");
}
