//! The report `wanblk copy --report` writes reads back as the typed
//! `wanblk_copy::Report` (the benchmarks read it so), and a report of
//! another version or with a field missing is refused with a message that
//! says which.

mod common;

use common::*;
use wanblk_copy::report::{Report, ReportError, SCHEMA_VERSION};
use wanblk_testkit::{free_port, require_tool};

fn read(path: &std::path::Path) -> Result<Report, ReportError> {
    Report::from_json(&std::fs::read(path).expect("report written"))
}

#[test]
fn a_local_copy_report_reads_back_typed() {
    let dir = tempdir();
    let (dst, rep) = (dir.path().join("out.img"), dir.path().join("r.json"));
    let out = copy_ok(&["random:8M", dst.to_str().unwrap(), "--checksum", "--report", rep.to_str().unwrap()]);
    let r = read(&rep).unwrap_or_else(|e| panic!("{e}\n{}", std::fs::read_to_string(&rep).unwrap()));
    let sha = sha256_file(&dst).unwrap();
    assert_eq!(r.schema_version, SCHEMA_VERSION);
    assert_eq!((r.bytes, r.data_bytes + r.zero_bytes + r.skipped_bytes), (8 << 20, 8 << 20));
    assert!(r.complete && r.error.is_none(), "{r:?}");
    assert!(r.stores.is_empty(), "no network store, no sessions: {:?}", r.stores);
    assert_eq!(r.sha256.as_deref(), Some(sha.as_str()), "the report's sha256 is the written image's");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), sha);

    // The same report as an older wanblk wrote it, cut short, or without a field.
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&rep).unwrap()).unwrap();
    v.as_object_mut().unwrap().remove("schema_version");
    let e = Report::from_json(v.to_string().as_bytes()).unwrap_err().to_string();
    assert!(e.contains("version 1") && e.contains("older wanblk"), "{e}");
    let text = std::fs::read(&rep).unwrap();
    let e = Report::from_json(&text[..text.len() / 2]).unwrap_err();
    assert!(matches!(e, ReportError::NotJson(_)), "{e}");
    let mut v: serde_json::Value = serde_json::from_slice(&text).unwrap();
    v.as_object_mut().unwrap().remove("seconds");
    let e = Report::from_json(v.to_string().as_bytes()).unwrap_err().to_string();
    assert!(e.contains("missing field `seconds`"), "{e}");
}

#[test]
fn a_tuned_network_copy_report_reads_back_typed() {
    require_tool("nbdkit", "nbdkit");
    let dir = tempdir();
    let src = dir.path().join("src.img");
    let src_sha = random_file(&src, 256 << 20, 7).unwrap();
    let port = free_port();
    // 400 Mbit/s in all: the copy lasts about 5 s, so several intervals
    // are measured after the warm-up and the tuner decides something (at
    // 64 MiB, 1.3 s, a quiet machine finished inside the warm-up).
    let (_nbdkit, uri) =
        peers::nbdkit_tcp(port, &["-r", "--filter=rate", "file", src.to_str().unwrap(), "rate=400M"]);
    let (dst, rep) = (dir.path().join("dst.img"), dir.path().join("r.json"));
    copy_ok(&[
        &uri,
        dst.to_str().unwrap(),
        "-C",
        "auto",
        "--interval",
        "100ms",
        "--checksum",
        "--report",
        rep.to_str().unwrap(),
    ]);
    assert_eq!(sha256_file(&dst).unwrap(), src_sha, "the copy is the source");
    let r = read(&rep).unwrap_or_else(|e| panic!("{e}\n{}", std::fs::read_to_string(&rep).unwrap()));
    assert_eq!(r.sha256.as_deref(), Some(src_sha.as_str()));
    assert!(r.complete && r.error.is_none(), "{r:?}");
    assert!(!r.samples.is_empty(), "intervals were measured: {r:?}");
    assert_eq!(r.stores.len(), 1, "one network store: {:?}", r.stores);
    let carried = &r.stores[0].session_bytes;
    assert!(carried.len() >= r.connections, "the final N sessions opened: {carried:?}");
    assert!(carried.iter().sum::<u64>() >= 256 << 20, "the sessions carried the image: {carried:?}");
    let tuning = r.tuning.as_ref().expect("-C auto reports the tuner's record");
    assert!(tuning.intervals > 0, "{tuning:?}");
    assert_eq!(tuning.current_n, r.connections, "the report's final N is the tuner's");
    // Written again, it reads back the same.
    let again = serde_json::to_vec(&r).unwrap();
    assert_eq!(Report::from_json(&again).unwrap(), r);
}
