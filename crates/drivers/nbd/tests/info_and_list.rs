//! NBD_OPT_INFO and NBD_OPT_LIST (then NBD_OPT_ABORT) against our server and nbdkit.

mod common;

use common::*;
use wanblk_nbd::{NbdConnector, NbdOptions, ServeOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_and_list_against_our_server() {
    let srv = TestServer::memory(
        8 << 20,
        ServeOptions { export_name: "disk".into(), description: "a disk".into(), ..Default::default() },
    )
    .await;
    let c = NbdConnector::new(&srv.uri, NbdOptions::default()).unwrap();
    let n = within(10, c.info()).await.unwrap();
    assert_eq!(n.size, 8 << 20);
    assert_eq!(n.description.as_deref(), Some("a disk"));
    assert!(n.block_sizes_from_server);
    let list = within(10, c.list_exports()).await.unwrap();
    assert_eq!(list, vec![("disk".to_string(), "a disk".to_string())]);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_and_list_against_nbdkit() {
    let dir = wanblk_testkit::tempdir();
    let (_peer, uri) = nbdkit(dir.path(), &["memory", "size=2M"]);
    let c = NbdConnector::new(&uri, NbdOptions::default()).unwrap();
    let n = within(10, c.info()).await.unwrap();
    assert_eq!(n.size, 2 << 20);
    let list = within(10, c.list_exports()).await.unwrap();
    // The memory plugin has one (default, unnamed) export.
    assert_eq!(list.len(), 1, "{list:?}");
}
