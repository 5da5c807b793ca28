//! `wanblk copy --iscsi-mode mcs -C 4` both directions against tgtd with
//! MaxConnections raised: four connections inside one iSCSI session (one
//! TSIH), 256 MiB of random data checked by sha256.

mod common;
use common::*;

#[test]
fn four_connections_in_one_session() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0x3c5).unwrap();
    let lun = iscsi_lun("iqn.2024-01.test:copy-mcs", None);
    lun.tgt.set(1, "MaxConnections", "8");
    let log = iscsi_round_trip(
        dir.path(),
        &src,
        &sha,
        &lun,
        4,
        &["--iscsi-mode", "mcs", "--log", "wanblk_iscsi=debug"],
    );
    let tsihs = iscsi_login_tsihs(&log);
    eprintln!("{tsihs:?}");
    assert!(tsihs.len() >= 4, "four connections logged in: {tsihs:?}\n{log}");
    assert!(tsihs.iter().all(|&t| t == tsihs[0]), "all in one session (one TSIH): {tsihs:?}\n{log}");
}
