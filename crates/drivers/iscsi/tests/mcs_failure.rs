//! MC/S at ErrorRecoveryLevel 0: when one connection of the session dies
//! with commands in flight, the session's other connections fail too
//! (their commands may be held by the target behind a CmdSN that will never
//! arrive), so nothing hangs.

mod common;

use std::sync::{Arc, Barrier};

use common::{FakeTarget, within};
use wanblk_blockdev::{Endpoint, ErrorKind};
use wanblk_iscsi::{IscsiConnector, IscsiOptions, Mode};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_dying_fails_the_session() {
    let both_busy = Arc::new(Barrier::new(2));
    let b = Arc::clone(&both_busy);
    let fake = FakeTarget::spawn_many(2, move |i, c| {
        c.answers = vec![("MaxConnections".into(), "2".into())];
        c.login();
        if i == 0 {
            // Leading connection: serve the probe, take a READ and hold it.
            let Some(_read) = c.serve_probe(1 << 16) else { return };
            b.wait();
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        } else {
            // Added connection: take a READ and never answer it.
            let Some(_read) = c.serve_probe(1 << 16) else { return };
            b.wait();
            let _ = c.recv();
        }
    });
    let conn =
        IscsiConnector::new(&fake.uri(), IscsiOptions { mode: Mode::Mcs, ..Default::default() }).unwrap();
    let a = within(20, conn.connect_endpoint()).await.unwrap();
    let b = within(20, conn.connect_endpoint()).await.unwrap();
    assert_eq!(b.cid(), 1);
    let (ra, rb) = tokio::join!(within(30, a.read(0, 4096)), within(30, b.read(4096, 4096)));
    let (ea, eb) = (ra.unwrap_err(), rb.unwrap_err());
    assert!(matches!(ea.kind, ErrorKind::Io(_)), "{ea}");
    assert!(matches!(eb.kind, ErrorKind::Io(_)), "{eb}");
    assert!(eb.to_string().contains("another connection of the session failed"), "{eb}");
    assert_eq!(eb.offset, Some(4096));
    drop((a, b));
    fake.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_session_failure_the_next_connect_starts_a_new_session() {
    let fake = FakeTarget::spawn_many(2, move |i, c| {
        c.answers = vec![("MaxConnections".into(), "2".into())];
        c.login();
        let Some((cmd, _)) = c.serve_probe(1 << 16) else { return };
        if i == 0 {
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        } else {
            c.data_in_good(&cmd, &[5u8; 512]);
            let _ = c.recv();
        }
    });
    let conn =
        IscsiConnector::new(&fake.uri(), IscsiOptions { mode: Mode::Mcs, ..Default::default() }).unwrap();
    let first = within(20, conn.connect_endpoint()).await.unwrap();
    assert!(within(20, first.read(0, 512)).await.is_err());
    // `first` is still held (not closed): its session is dead all the same,
    // so the next connect logs in a new session instead of joining it.
    let ep = within(20, conn.connect_endpoint()).await.unwrap();
    assert_eq!(ep.cid(), 0, "a new session, leading connection");
    assert!(within(20, ep.read(0, 512)).await.unwrap().iter().all(|&x| x == 5));
    drop((first, ep));
    fake.finish().await;
}
