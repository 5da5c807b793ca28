//! Our server as nbdinfo sees it: size, block sizes, multi-conn, the
//! base:allocation map, the export list.

mod common;

use std::process::Command;
use std::sync::Arc;

use common::*;
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::local::{Fill, MemoryEndpoint};
use wanblk_nbd::ServeOptions;
use wanblk_testkit::{require_tool, run_within};

async fn nbdinfo(args: Vec<String>) -> String {
    require_tool("nbdinfo", "libnbd-bin");
    // run_within kills nbdinfo by PID if it hangs and names it.
    let nbdinfo = move || run_within(Command::new("nbdinfo").args(args), std::time::Duration::from_secs(30));
    tokio::task::spawn_blocking(nbdinfo).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbdinfo_reports_size_block_sizes_and_multi_conn() {
    let srv = TestServer::memory(
        64 << 20,
        ServeOptions { export_name: "mem".into(), description: "test export".into(), ..Default::default() },
    )
    .await;
    let out = nbdinfo(vec!["--json".into(), srv.uri.clone()]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["protocol"], "newstyle-fixed");
    assert_eq!(v["TLS"], false);
    let e = &v["exports"][0];
    assert_eq!(e["export-name"], "mem");
    assert_eq!(e["export-size"], 64u64 << 20);
    assert_eq!(e["description"], "test export");
    assert_eq!(e["can_multi_conn"], true);
    assert_eq!(e["can_flush"], true);
    assert_eq!(e["can_fua"], true);
    assert_eq!(e["can_trim"], true);
    assert_eq!(e["can_zero"], true);
    assert_eq!(e["can_df"], true);
    assert_eq!(e["is_read_only"], false);
    assert_eq!(e["block_size_minimum"], 1);
    assert_eq!(e["block_size_preferred"], 4096);
    assert_eq!(e["block_size_maximum"], 32 << 20);
    assert!(e["contexts"].as_array().unwrap().iter().any(|c| c == "base:allocation"), "{e}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbdinfo_map_shows_base_allocation() {
    let mem = Arc::new(MemoryEndpoint::new("mem", 16 << 20, Fill::Zero));
    mem.write(4 << 20, pattern(1 << 20, 1), false).await.unwrap();
    let srv = TestServer::start(mem, ServeOptions { export_name: "m".into(), ..Default::default() }).await;
    let out = nbdinfo(vec!["--map".into(), "--json".into(), srv.uri.clone()]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let map: Vec<(u64, u64, u64)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["offset"].as_u64().unwrap(), e["length"].as_u64().unwrap(), e["type"].as_u64().unwrap()))
        .collect();
    assert_eq!(map, vec![(0, 4 << 20, 3), (4 << 20, 1 << 20, 0), (5 << 20, 11 << 20, 3)], "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbdinfo_lists_the_export_and_sees_read_only() {
    let srv = TestServer::memory(
        1 << 20,
        ServeOptions { export_name: "ro".into(), read_only: true, ..Default::default() },
    )
    .await;
    let out = nbdinfo(vec!["--list".into(), "--json".into(), srv.uri.clone()]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let e = &v["exports"][0];
    assert_eq!(e["export-name"], "ro");
    assert_eq!(e["is_read_only"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbdinfo_without_structured_replies() {
    let srv = TestServer::memory(
        1 << 20,
        ServeOptions { export_name: "s".into(), structured_replies: false, ..Default::default() },
    )
    .await;
    let out = nbdinfo(vec!["--json".into(), srv.uri.clone()]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["exports"][0]["export-size"], 1 << 20);
    assert_eq!(v["exports"][0]["can_df"], false);
}
