//! A mostly-empty image copies correctly and its holes are not carried as
//! data, in either direction (block status on the way out, zeroing or
//! skipping on the way in).

mod common;

use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};

use common::*;

const SIZE: u64 = 2 << 30;

#[test]
fn sparse_image_round_trip_moves_only_the_data() {
    let dir = tempdir();
    let src = dir.path().join("sparse.img");
    sparse_file(&src, SIZE);
    // Three islands of random data in 2 GiB of holes.
    let island = dir.path().join("island");
    random_file(&island, 1 << 20, 77).unwrap();
    let data = std::fs::read(&island).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&src).unwrap();
    for at in [0u64, 700 << 20, SIZE - (1 << 20)] {
        f.write_all_at(&data, at).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    let sha = sha256_file(&src).unwrap();

    let (_nbdkit, uri) = peers::nbdkit(dir.path(), &["memory", &SIZE.to_string()]);
    let rep = dir.path().join("backup.json");
    copy_ok(&[src.to_str().unwrap(), &uri, "-C", "4", "--report", rep.to_str().unwrap()]);
    let r = report(&rep);
    let moved = r["data_bytes"].as_u64().unwrap();
    assert!(
        (3 << 20..=12 << 20).contains(&moved),
        "backup carried {moved} bytes of data for 3 MiB of data: {r}"
    );
    assert_eq!(moved + r["zero_bytes"].as_u64().unwrap() + r["skipped_bytes"].as_u64().unwrap(), SIZE);

    let restored = dir.path().join("restored.img");
    let rep = dir.path().join("restore.json");
    let out = copy_ok(&[
        &uri,
        restored.to_str().unwrap(),
        "-C",
        "4",
        "--checksum",
        "--report",
        rep.to_str().unwrap(),
    ]);
    let r = report(&rep);
    let moved = r["data_bytes"].as_u64().unwrap();
    assert!(moved <= 12 << 20, "restore carried {moved} bytes of data: {r}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), sha);
    assert_eq!(sha256_file(&restored).unwrap(), sha, "restored image equals the source");
    let allocated = std::fs::metadata(&restored).unwrap().blocks() * 512;
    assert!(allocated <= 16 << 20, "restored file stayed sparse: {allocated} bytes allocated");
    std::io::stderr().flush().ok();
}
