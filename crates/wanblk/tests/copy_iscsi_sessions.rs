//! `wanblk copy` both directions against tgtd over 1 and 4 iSCSI sessions
//! (`--iscsi-mode sessions`, the default): 256 MiB of random data checked
//! by sha256 against the source and the LUN's backing file.

mod common;
use common::*;

fn with_sessions(conns: usize) {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0x15c5 + conns as u64).unwrap();
    let lun = iscsi_lun("iqn.2024-01.test:copy-sessions", None);
    let log = iscsi_round_trip(dir.path(), &src, &sha, &lun, conns, &["--log", "wanblk_iscsi=debug"]);
    // Every data session is its own iSCSI session: as many distinct TSIHs
    // as sessions (a control session may add one).
    let tsihs = iscsi_login_tsihs(&log);
    let distinct: std::collections::BTreeSet<u32> = tsihs.iter().copied().collect();
    assert!(
        tsihs.len() >= conns && distinct.len() == tsihs.len(),
        "{conns} sessions, TSIHs {tsihs:?}:\n{log}"
    );
}

#[test]
fn one_session() {
    with_sessions(1);
}

#[test]
fn four_sessions() {
    with_sessions(4);
}
