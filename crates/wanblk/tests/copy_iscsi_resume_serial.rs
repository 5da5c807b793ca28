//! The resume journal of an iSCSI copy holds the LUN's Unit Serial Number
//! (VPD page 0x80): a rerun against the same URI whose LUN now reports
//! another serial (another disk behind the same name) is refused and
//! loses nothing; back on the journaled LUN, the same command resumes and
//! the result is checked by sha256.

mod common;

use common::*;
use wanblk_testkit::tgt::Tgt;

const IQN: &str = "iqn.2024-01.test.wanblk:resume-serial";
const SIZE: u64 = 32 << 20;

fn set_serial(tgt: &Tgt, serial: &str) {
    let params = format!("scsi_sn={serial}");
    tgt.tgtadm(&["--mode", "logicalunit", "--op", "update", "--tid", "1", "--lun", "1", "--params", &params]);
}

#[test]
fn a_resume_against_a_lun_with_another_serial_is_refused() {
    let tgt = Tgt::start();
    let lun = tgt.file("lun.img", SIZE);
    let sha = random_file(&lun, SIZE, 0x5e71).unwrap();
    tgt.target(1, IQN, &lun, None, false);
    set_serial(&tgt, "WANBLK-FIRST-01");
    let uri = tgt.uri(IQN);

    let dir = tempdir();
    let dst = dir.path().join("out.img");
    let part = dir.path().join("out.img.wanblk-part");
    let journal = dir.path().join("out.img.wanblk-journal");
    // 16 Mbit/s for 1 s: a few MiB of 32 are copied, the rest is left.
    let first = copy(&[&uri, dst.to_str().unwrap(), "-C", "1", "--rate", "16M", "--stop-after", "1"]);
    let (_, _, stderr) = text(&first);
    assert!(stderr.contains("stopped early"), "{stderr}");
    assert!(part.exists() && journal.exists() && !dst.exists(), "{stderr}");
    let header = std::fs::read(&journal).unwrap();
    assert!(header.windows(15).any(|w| w == b"WANBLK-FIRST-01"), "the journal names the LUN's serial");
    let kept = std::fs::read(&part).unwrap();

    // Another disk behind the same URI: refused, nothing touched.
    set_serial(&tgt, "WANBLK-OTHER-02");
    let (code, _, stderr) = text(&copy(&[&uri, dst.to_str().unwrap(), "-C", "1"]));
    assert_eq!(code, Some(2), "a journal for another LUN is a usage error:\n{stderr}");
    assert!(
        stderr.contains("serial number was WANBLK-FIRST-01, now WANBLK-OTHER-02")
            && stderr.contains("--restart"),
        "{stderr}"
    );
    assert!(journal.exists() && !dst.exists());
    assert_eq!(std::fs::read(&part).unwrap(), kept, "the partial copy is untouched");

    // The journaled LUN again: the same command resumes and completes.
    set_serial(&tgt, "WANBLK-FIRST-01");
    let out = copy_ok(&[&uri, dst.to_str().unwrap(), "-C", "1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("resuming"));
    assert!(!part.exists() && !journal.exists());
    assert_eq!(sha256_file(&dst).unwrap(), sha);
}
