//! Aborting a session with requests in flight must leave the server
//! serving. nbdkit 1.32 asserts (and the whole server dies) when two of a
//! connection's worker threads reply after the client went and the first
//! reply's write failed; a client that drops the connection under held
//! requests (the pool aborts sessions whose requests are only hedged
//! originals nobody needs) reliably set that off. The session says
//! NBD_CMD_DISC first and reads the server's answers to the end.

mod common;

use std::sync::Arc;

use common::*;
use wanblk_blockdev::Endpoint;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_a_session_under_held_reads_leaves_nbdkit_serving() {
    // Every read is held 2 s by the delay filter; 8 worker threads each
    // hold one when the session is aborted.
    let (mut peer, uri) = nbdkit_tcp(&["--threads=16", "--filter=delay", "memory", "size=16M", "rdelay=2"]);
    for round in 0..4 {
        let s: Arc<dyn Endpoint> = Arc::new(connect(&uri).await);
        let reads: Vec<_> = (0..8u64)
            .map(|i| {
                let s = s.clone();
                tokio::spawn(async move { s.read(i << 20, 64 << 10).await })
            })
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        within(10, s.abort()).await;
        for r in reads {
            assert!(r.await.unwrap().is_err(), "round {round}: an aborted read fails");
        }
        drop(s);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(peer.try_wait().is_none(), "round {round}: nbdkit is still running");
    }
    // And it still answers.
    let s = connect(&uri).await;
    assert_eq!(s.size(), 16 << 20);
    within(10, s.close()).await.unwrap();
}
