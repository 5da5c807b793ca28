//! `wanblk copy` both directions with CRC32C header and data digests
//! asked for with `--iscsi-param`, against a tgtd target that allows them
//! (tgt answers None unless its own setting lists CRC32C): 256 MiB of
//! random data checked by sha256, over 2 sessions.

mod common;
use common::*;

#[test]
fn header_and_data_digests() {
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let sha = random_file(&src, IMAGE, 0xd16e57).unwrap();
    let lun = iscsi_lun("iqn.2024-01.test:copy-digests", None);
    lun.tgt.set(1, "HeaderDigest", "CRC32C");
    lun.tgt.set(1, "DataDigest", "CRC32C");
    let log = iscsi_round_trip(
        dir.path(),
        &src,
        &sha,
        &lun,
        2,
        &[
            "--iscsi-param",
            "HeaderDigest=CRC32C",
            "--iscsi-param",
            "DataDigest=CRC32C",
            "--log",
            "wanblk_iscsi=debug",
        ],
    );
    // The negotiated parameters of every login are in the driver's log.
    let logins: Vec<&str> = log.lines().filter(|l| l.contains("iSCSI login complete")).collect();
    assert!(logins.len() >= 2, "{log}");
    for l in logins {
        assert!(
            l.contains("header_digest: true") && l.contains("data_digest: true"),
            "digests negotiated: {l}"
        );
    }
}
