//! The remote-store object against real NBD servers (nbdkit on Unix
//! sockets): one controller for every pool, sessions that really carry
//! data, and what `finish` hands back.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{join_all, try_join_all};
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::pool::Pool;
use wanblk_remote::{Remote, RemoteError, RemoteOptions, Sessions, Tuning};
use wanblk_testkit::data::{block_data, check_blocks};
use wanblk_testkit::{peers, tempdir};
use wanblk_tune::IntervalChoice;

const SIZE: u64 = 64 << 20;
const PIECE: u64 = 1 << 20;

/// Writes then reads back the whole store, 16 pieces in flight, checking
/// every block lands at its own offset.
async fn write_and_check(pool: &Arc<Pool>, seed: u64) {
    let pieces: Vec<u64> = (0..SIZE / PIECE).map(|i| i * PIECE).collect();
    for chunk in pieces.chunks(16) {
        try_join_all(chunk.iter().map(|o| pool.write(*o, block_data(*o, PIECE as usize, seed), false)))
            .await
            .unwrap();
    }
    for chunk in pieces.chunks(16) {
        let reads =
            join_all(chunk.iter().map(|o| async move { (*o, pool.read(*o, PIECE as u32).await) })).await;
        for (o, r) in reads {
            check_blocks(&r.unwrap(), o, seed).unwrap();
        }
    }
}

fn options(sessions: Sessions) -> RemoteOptions {
    RemoteOptions {
        sessions,
        max_request_bytes: 256 << 10,
        tuning: Tuning { interval: IntervalChoice::Fixed(Duration::from_millis(50)), ..Tuning::default() },
        ..RemoteOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixed_session_carries_data() {
    let dir = tempdir();
    let (_nbdkit, uri) =
        peers::nbdkit(dir.path(), &["--filter=delay", "memory", "64M", "delay-read=5ms", "delay-write=5ms"]);
    let mut remote = Remote::new(options(Sessions::Fixed(3)));
    let pool = remote.open(&uri).await.unwrap();
    remote.start(remote.pool_progress()).unwrap();
    assert_eq!(remote.sessions()(), 3);
    write_and_check(&pool, 7).await;
    remote.stop().await;
    let s = remote.finish().await;
    assert_eq!(s.sessions, 3);
    assert_eq!(s.tuning, None, "a fixed N is not tuned");
    assert!(!s.samples.is_empty(), "intervals measured");
    assert_eq!(s.stores.len(), 1);
    let bytes = &s.stores[0].session_bytes;
    assert_eq!(bytes.len(), 3, "{s:?}");
    assert!(bytes.iter().all(|b| *b > 0), "every session carried data: {bytes:?}");
    assert_eq!(bytes.iter().sum::<u64>(), 2 * SIZE, "each byte written and read once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_share_one_controller() {
    let dir = tempdir();
    let (_a, uri_a) = peers::nbdkit(dir.path(), &["--filter=delay", "memory", "64M", "delay-write=5ms"]);
    let (_b, uri_b) = peers::nbdkit(dir.path(), &["--filter=delay", "memory", "64M", "delay-write=5ms"]);
    let mut remote = Remote::new(options(Sessions::Auto { initial: 2, max: 8 }));
    let a = remote.open(&uri_a).await.unwrap();
    let b = remote.open(&uri_b).await.unwrap();
    remote.start(remote.pool_progress()).unwrap();
    tokio::join!(write_and_check(&a, 1), write_and_check(&b, 2));
    remote.stop().await;
    // Whatever N the tuner chose, both pools were given the same one.
    assert_eq!(a.snapshot().active, b.snapshot().active);
    assert_eq!(a.snapshot().active, remote.sessions()());
    let s = remote.finish().await;
    let tuning = s.tuning.expect("auto with network stores is tuned");
    assert!(tuning.intervals > 0, "{tuning:?}");
    assert_eq!(s.sessions, a.snapshot().active);
    assert_eq!(s.stores.len(), 2);
    assert!(s.stores.iter().all(|st| st.session_bytes.iter().sum::<u64>() == 2 * SIZE), "{:?}", s.stores);
    assert!(s.samples.iter().all(|x| (1..=8).contains(&x.n)), "{:?}", s.samples);
}

#[tokio::test]
async fn a_local_path_is_not_a_network_store() {
    let mut remote = Remote::new(RemoteOptions::default());
    let e = remote.open("/tmp/disk.img").await.unwrap_err();
    assert!(matches!(e, RemoteError::NotRemote(_)), "{e}");
    assert_eq!(e.to_string(), "\"/tmp/disk.img\" is not a network store (nbd://, nbd+unix:// or iscsi://)");
    // Nothing to tune: N is 1 and the summary says so.
    remote.start(|| 0).unwrap();
    let s = remote.finish().await;
    assert_eq!((s.sessions, s.tuning, s.stores.len()), (1, None, 0));
}
