//! Work pulling: a slow session takes fewer requests instead of holding a
//! fixed stripe, and changing the active count moves work between sessions.
//!
//! Events are ordered with gates (a gated session holds its requests until
//! the test opens the gate) and waits on what the sessions did, never with
//! sleeps, so the tests mean the same on a busy machine; no test asserts
//! how long something took.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Behaviour, Gate, TestConnector, assert_data, data, within};
use wanblk_blockdev::pool::{Hedge, Pool, PoolConfig};
use wanblk_blockdev::{Endpoint, SendBacklog};

/// Sessions of `behaviours(stuck, start)` (one each), one request slot
/// each, requests of `request` bytes: session 0 must hold the first request
/// it takes until the returned gate `stuck` opens, the others must start
/// only once `start` opens, which happens when session 0 holds it. Reads
/// `len` bytes written with `seed` and checks the data: the read completes
/// only if an idle session ran a copy of the held request.
async fn read_past_a_held_request(
    behaviours: impl FnOnce(&Arc<Gate>, &Arc<Gate>) -> Vec<Behaviour>,
    request: u32,
    len: u32,
    seed: u64,
) -> (Arc<TestConnector>, Arc<Pool>, Arc<Gate>) {
    let (stuck, start) = (Gate::new(), Gate::new());
    let behaviours = behaviours(&stuck, &start);
    let sessions = behaviours.len();
    let c = TestConnector::new(2 * u64::from(len), behaviours);
    c.store.write(0, data(0, len as usize, seed), false).await.unwrap();
    let cfg = PoolConfig {
        initial_sessions: sessions,
        max_request_bytes: request,
        max_depth: 1,
        ..Default::default()
    };
    let pool = Arc::new(Pool::open(c.clone(), cfg).await.unwrap());
    let read = tokio::spawn({
        let p = Arc::clone(&pool);
        async move { p.read(0, len).await }
    });
    c.wait_for("session 0 holds a request", |c| c.running(0) == 1).await;
    start.open();
    let got = within("the read (the held request was not hedged)", read).await.unwrap().unwrap();
    assert_data(&got, 0, seed);
    (c, pool, stuck)
}

/// Two sessions, 1 MiB requests, a 2 MiB read (see
/// [`read_past_a_held_request`]); `close_waits`: the sessions' `close`
/// waits for their requests, as a real session's does.
async fn two_sessions_past_a_held_request(
    close_waits: bool,
    seed: u64,
) -> (Arc<TestConnector>, Arc<Pool>, Arc<Gate>) {
    let two = |stuck: &Arc<Gate>, start: &Arc<Gate>| {
        vec![
            Behaviour { close_waits, ..Behaviour::gated(stuck) },
            Behaviour { close_waits, ..Behaviour::gated(start) },
        ]
    };
    read_past_a_held_request(two, 1 << 20, 2 << 20, seed).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_session_carries_less() {
    // Session 0 holds the first request it takes until the three others
    // have carried everything else: with work pulling they can; with a
    // fixed stripe a quarter of the requests would wait behind session 0
    // and the wait below would fail. The others start once session 0 holds
    // its request (or they could carry everything before it took one).
    let (stuck, start) = (Gate::new(), Gate::new());
    let mut behaviours = vec![Behaviour::gated(&stuck)];
    behaviours.extend(vec![Behaviour::gated(&start); 3]);
    let c = TestConnector::new(32 << 20, behaviours);
    c.store.write(0, data(0, 16 << 20, 1), false).await.unwrap();
    let cfg =
        PoolConfig { initial_sessions: 4, max_request_bytes: 64 << 10, max_depth: 1, ..Default::default() };
    let pool = Arc::new(Pool::open(c.clone(), cfg).await.unwrap());
    let read = tokio::spawn({
        let p = Arc::clone(&pool);
        async move { p.read(0, 16 << 20).await }
    });
    c.wait_for("session 0 holds a request", |c| c.running(0) == 1).await;
    start.open();
    c.wait_for("the other sessions carry all but the stuck request", |c| {
        c.completed(1) + c.completed(2) + c.completed(3) >= (16 << 20) - (64 << 10)
    })
    .await;
    assert_eq!(c.started(0), 1, "the stuck session took one request");
    stuck.open();
    assert_data(&within("the read", read).await.unwrap().unwrap(), 0, 1);
    let per: Vec<u64> = pool.snapshot().sessions.iter().map(|s| s.completed_bytes).collect();
    assert!(per[0] <= 64 << 10, "the stuck session carried more than its one request: {per:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_no_room_to_send_takes_no_more_work() {
    // Session 0 holds the first write it takes and says its socket is
    // far ahead of its window (8 MiB unsent on a 1.4 MB window at 100 ms);
    // each session has four slots. Session 0 must take no second write
    // while session 1 carries all the others: without send room it would
    // take one per slot and the wait below would fail.
    // Session 1 starts once session 0 holds its write (or it could carry
    // everything before session 0 took one).
    let (stuck, start) = (Gate::new(), Gate::new());
    let far_ahead = SendBacklog { unsent_bytes: 8 << 20, cwnd_bytes: 1_400_000, rtt_us: 100_000 };
    let behaviours =
        vec![Behaviour { backlog: Some(far_ahead), ..Behaviour::gated(&stuck) }, Behaviour::gated(&start)];
    let c = TestConnector::new(4 << 20, behaviours);
    let cfg =
        PoolConfig { initial_sessions: 2, max_request_bytes: 64 << 10, max_depth: 4, ..Default::default() };
    let pool = Arc::new(Pool::open(c.clone(), cfg).await.unwrap());
    let write = tokio::spawn({
        let p = Arc::clone(&pool);
        async move { p.write(0, data(0, 2 << 20, 3), false).await }
    });
    c.wait_for("session 0 holds a write", |c| c.running(0) == 1).await;
    start.open();
    c.wait_for("session 1 carries all but the held write", |c| c.completed(1) >= (2 << 20) - (64 << 10))
        .await;
    assert_eq!(c.started(0), 1, "the session without room took more than its first write");
    stuck.open();
    within("the write", write).await.unwrap().unwrap();
    assert_data(&pool.read(0, 2 << 20).await.unwrap(), 0, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deactivated_sessions_idle_and_reactivation_reuses_them() {
    // Every session's requests wait at one gate, which opens once each
    // active session holds a request: so every active session gets work,
    // however the runtime schedules the workers.
    let gate = Gate::new();
    let c = TestConnector::new(32 << 20, vec![Behaviour::gated(&gate); 8]);
    c.store.write(0, data(0, 8 << 20, 2), false).await.unwrap();
    let cfg =
        PoolConfig { initial_sessions: 4, max_request_bytes: 64 << 10, max_depth: 2, ..Default::default() };
    let pool = Arc::new(Pool::open(c.clone(), cfg).await.unwrap());
    pool.set_active(2).unwrap();
    let read = |p: &Arc<Pool>| {
        let p = Arc::clone(p);
        tokio::spawn(async move { p.read(0, 8 << 20).await })
    };
    let r = read(&pool);
    c.wait_for("both active sessions hold a request", |c| c.running(0) > 0 && c.running(1) > 0).await;
    gate.open();
    assert_data(&within("the read on 2 sessions", r).await.unwrap().unwrap(), 0, 2);
    assert_eq!((c.started(2), c.started(3)), (0, 0), "idle sessions took work");
    // Growing again reuses the idle sessions: nothing new is opened.
    gate.close();
    pool.set_active(4).unwrap();
    let r = read(&pool);
    c.wait_for("all four active sessions hold a request", |c| (0..4).all(|i| c.running(i) > 0)).await;
    gate.open();
    assert_data(&within("the read on 4 sessions", r).await.unwrap().unwrap(), 0, 2);
    assert_eq!(c.opened.load(std::sync::atomic::Ordering::SeqCst), 4);
    assert!(pool.snapshot().sessions[3].completed_bytes > 0);
    // Growing past the open sessions opens more, lazily.
    pool.set_active(6).unwrap();
    within("the pool opens the extra sessions", async {
        while pool.snapshot().open() < 6 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(pool.snapshot().active, 6);
    // More than the pool may open is refused, and changes nothing.
    assert!(pool.set_active(65).is_err());
    assert!(pool.set_active(0).is_err());
    assert_eq!(pool.snapshot().active, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_status_and_flush_do_not_wait_behind_a_stalled_session() {
    // Sessions 0 and 1 hold every request (flush and block status too)
    // until the end; block status and flush go to the side session, so
    // they answer while the data sessions are stuck (on a data session
    // they would never answer).
    let stuck = Gate::new();
    let c = TestConnector::new(32 << 20, vec![Behaviour::gated(&stuck); 2]);
    c.store.write(0, data(0, 4 << 20, 3), false).await.unwrap();
    let cfg =
        PoolConfig { initial_sessions: 2, max_request_bytes: 1 << 20, max_depth: 2, ..Default::default() };
    let pool = Arc::new(Pool::open(c.clone(), cfg).await.unwrap());
    let busy = {
        let p = pool.clone();
        tokio::spawn(async move { p.read(0, 4 << 20).await })
    };
    c.wait_for("both data sessions hold their requests", |c| c.running(0) == 2 && c.running(1) == 2).await;
    let map =
        within("block status beside stuck data sessions", pool.block_status(0, 32 << 20)).await.unwrap();
    within("flush beside stuck data sessions", pool.flush()).await.unwrap();
    assert_eq!(map.iter().map(|e| e.length).sum::<u64>(), 32 << 20);
    assert_eq!(c.opened.load(std::sync::atomic::Ordering::SeqCst), 3, "one extra session: the side session");
    assert!(!busy.is_finished(), "the data sessions were stuck all along");
    stuck.open();
    assert_data(&within("the read", busy).await.unwrap().unwrap(), 0, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_hedges_a_straggler() {
    // Session 0 never answers the request it takes (until the end);
    // session 1 starts only once session 0 holds its request, so each
    // takes one. The read completes only if session 1, out of work, runs
    // a copy of the stuck request: and the copy must read the same place.
    let (_c, pool, stuck) = two_sessions_past_a_held_request(false, 4).await;
    let st = pool.snapshot();
    assert_eq!((st.hedged, st.hedges_won), (1, 1), "{st:?}");
    stuck.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_straggler_is_duplicated_in_parts_over_the_idle_sessions() {
    // Session 0 never answers its 2 MiB read (until the end); sessions 1-3
    // start once it holds it and carry the rest. Out of work, they carry
    // the stuck read's duplicate in parts (256 KiB or more, 8 at most):
    // each part lands where it belongs, the read counts once, and more than
    // one idle session carries a part (each request takes 100 ms there, so
    // one session cannot take every part before the others wake up).
    let one_held_three_slow = |stuck: &Arc<Gate>, start: &Arc<Gate>| {
        let slow = Behaviour { delay: Some(Duration::from_millis(100)), ..Behaviour::gated(start) };
        let mut behaviours = vec![Behaviour::gated(stuck)];
        behaviours.extend(vec![slow; 3]);
        behaviours
    };
    let (c, pool, stuck) = read_past_a_held_request(one_held_three_slow, 2 << 20, 8 << 20, 6).await;
    let st = pool.snapshot();
    assert_eq!((st.hedged, st.hedges_won), (1, 1), "{st:?}");
    assert_eq!(pool.completed_bytes(), 8 << 20, "the read counts once: {st:?}");
    // Sessions 1-3 took 3 whole requests and 8 parts between them.
    let started: Vec<u64> = (1..4).map(|i| c.started(i) as u64).collect();
    assert_eq!(started.iter().sum::<u64>(), 3 + 8, "{started:?}");
    assert!(started.iter().filter(|n| **n > 1).count() >= 2, "parts on one session only: {started:?}");
    stuck.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_aborts_a_session_that_only_carries_answered_stragglers() {
    // Session 0 holds its read; session 1 carries the rest and, idle, the
    // held read's duplicate, which answers it. Closing the pool then must
    // not wait for session 0 (its only request in flight is one nobody
    // needs: on a lossy path such an original needs seconds more, and the
    // close waited its 10 s bound): it is aborted, session 1 closed.
    let (c, pool, stuck) = two_sessions_past_a_held_request(true, 7).await;
    assert_eq!(pool.snapshot().hedges_won, 1, "{:?}", pool.snapshot());
    within("close", pool.close()).await.unwrap();
    assert_eq!(c.ended(0), (0, 1), "session 0 (closes, aborts)");
    assert_eq!(c.ended(1), (1, 0), "session 1 (closes, aborts)");
    stuck.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_not_hedged_unless_asked() {
    // Two pools, each with a session 0 that holds its write and a session
    // 1 that starts once it does: pool `reads` hedges reads only (the
    // default), pool `both` reads and writes. Once `both` has hedged its
    // stuck write (so a hedge was due), `reads` must not have, and its
    // write waits for session 0.
    let open = |hedge: Hedge| async move {
        let (stuck, start) = (Gate::new(), Gate::new());
        let c = TestConnector::new(8 << 20, vec![Behaviour::gated(&stuck), Behaviour::gated(&start)]);
        let cfg = PoolConfig {
            initial_sessions: 2,
            max_request_bytes: 1 << 20,
            max_depth: 1,
            hedge,
            ..Default::default()
        };
        let pool = Arc::new(Pool::open(c.clone(), cfg).await.unwrap());
        let p = Arc::clone(&pool);
        let write = tokio::spawn(async move { p.write(0, data(0, 2 << 20, 5), false).await });
        c.wait_for("session 0 holds a write", |c| c.running(0) == 1).await;
        start.open();
        (c, pool, stuck, write)
    };
    let (c_reads, reads, stuck_reads, write_reads) = open(Hedge::Reads).await;
    let (c_both, both, stuck_both, write_both) = open(Hedge::ReadsAndWrites).await;
    within("the write that may be hedged", write_both).await.unwrap().unwrap();
    assert_eq!(both.snapshot().hedges_won, 1, "{:?}", both.snapshot());
    assert_data(&c_both.store.read(0, 2 << 20).await.unwrap(), 0, 5);
    // A window, not an ordering: `reads` had the same chance to hedge as
    // `both` (it started first); under load this can only make the check
    // pass wrongly, never fail wrongly.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(reads.snapshot().hedged, 0, "{:?}", reads.snapshot());
    assert!(!write_reads.is_finished(), "the unhedged write waits for its stuck request");
    stuck_reads.open();
    within("the unhedged write", write_reads).await.unwrap().unwrap();
    assert_eq!(reads.snapshot().hedged, 0);
    assert_data(&c_reads.store.read(0, 2 << 20).await.unwrap(), 0, 5);
    stuck_both.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deactivated_sessions_report_draining_until_their_requests_finish() {
    // Both sessions hold their requests at a gate: after set_active(1)
    // session 1 still has its requests out until the gate opens.
    let gate = Gate::new();
    let c = TestConnector::new(32 << 20, vec![Behaviour::gated(&gate); 2]);
    c.store.write(0, data(0, 16 << 20, 6), false).await.unwrap();
    let cfg =
        PoolConfig { initial_sessions: 2, max_request_bytes: 1 << 20, max_depth: 2, ..Default::default() };
    let pool = Arc::new(Pool::open(c.clone(), cfg).await.unwrap());
    assert_eq!(pool.snapshot().draining(), 0);
    let busy = {
        let p = pool.clone();
        tokio::spawn(async move { p.read(0, 16 << 20).await })
    };
    c.wait_for("session 1 holds requests", |c| c.running(1) > 0).await;
    pool.set_active(1).unwrap();
    assert_eq!(pool.snapshot().draining(), 1, "session 1 still has requests in flight");
    gate.open();
    within("the deactivated session drains", async {
        while pool.snapshot().draining() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_data(&within("the read", busy).await.unwrap().unwrap(), 0, 6);
    assert_eq!(pool.snapshot().draining(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smaller_request_size_and_depth_bound_what_a_session_holds() {
    // 8 MiB in 1 MiB requests is exactly 2 sessions x depth 4: the gate
    // opens only once all eight are in flight at once.
    let gate = Gate::new();
    let c = TestConnector::new(32 << 20, vec![Behaviour::gated(&gate); 2]);
    let cfg =
        PoolConfig { initial_sessions: 2, max_request_bytes: 1 << 20, max_depth: 4, ..Default::default() };
    let pool = Arc::new(Pool::open(c.clone(), cfg).await.unwrap());
    let write = tokio::spawn({
        let p = Arc::clone(&pool);
        async move { p.write(0, data(0, 8 << 20, 7), false).await }
    });
    c.wait_for("4 requests in flight on each session", |c| c.running(0) == 4 && c.running(1) == 4).await;
    gate.open();
    within("the write", write).await.unwrap().unwrap();
    assert_eq!(c.largest_request.load(std::sync::atomic::Ordering::SeqCst), 1 << 20);
    assert_eq!(c.peak_per_session.load(std::sync::atomic::Ordering::SeqCst), 4);
    // Requests of 256 KiB, 2 in flight per session: callers' 1 MiB reads
    // are cut and put back together, and nothing is lost.
    pool.set_request_bytes(256 << 10).unwrap();
    pool.set_depth(2).unwrap();
    assert_eq!(pool.capacity_bytes(), 1 << 20, "2 sessions x 2 x 256 KiB");
    c.largest_request.store(0, std::sync::atomic::Ordering::SeqCst);
    c.peak_per_session.store(0, std::sync::atomic::Ordering::SeqCst);
    let reads = (0..8u64).map(|i| pool.read(i << 20, 1 << 20));
    let parts = within("the reads", futures::future::try_join_all(reads)).await.unwrap();
    assert_data(&parts.concat(), 0, 7);
    assert_eq!(c.largest_request.load(std::sync::atomic::Ordering::SeqCst), 256 << 10);
    assert!(c.peak_per_session.load(std::sync::atomic::Ordering::SeqCst) <= 2);
    // Out-of-range values are refused and change nothing: above the
    // largest request or depth, zero, or not a multiple of the block size.
    assert!(pool.set_request_bytes((1 << 20) + 512).is_err());
    assert!(pool.set_request_bytes(0).is_err());
    assert!(pool.set_depth(5).is_err());
    assert!(pool.set_depth(0).is_err());
    assert_eq!((pool.request_bytes(), pool.snapshot().depth), (256 << 10, 2));
    pool.set_request_bytes(1 << 20).unwrap();
    pool.set_depth(4).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_block_status_of_an_idle_pool_does_not_wait_for_the_side_session() {
    // The side session (the third one opened) holds every request. With
    // nothing on the data sessions, the first block status (a copy's
    // first request) takes them instead of waiting for the side session
    // to connect: three round trips sooner on a long path.
    let held = Gate::new();
    let c = TestConnector::new(
        32 << 20,
        vec![Behaviour::default(), Behaviour::default(), Behaviour::gated(&held)],
    );
    let cfg =
        PoolConfig { initial_sessions: 2, max_request_bytes: 1 << 20, max_depth: 2, ..Default::default() };
    let pool = Arc::new(Pool::open(c.clone(), cfg).await.unwrap());
    let map = within("the first block status", pool.block_status(0, 32 << 20)).await.unwrap();
    assert_eq!(map.iter().map(|e| e.length).sum::<u64>(), 32 << 20);
    held.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_does_not_wait_behind_a_stalled_session() {
    // Both sessions acknowledge writes (each holds one before the gates
    // open); then session 0 stalls holding a read while session 1 goes
    // idle. One flush covers every acknowledged write (the pool has two
    // sessions only with multi-connection consistency), sent on the idle
    // session: it answers while session 0 is stuck (flushing each session
    // that acknowledged writes would wait for session 0), and leaves
    // nothing unflushed.
    let (g0, g1) = (Gate::new(), Gate::new());
    let c = TestConnector::new(8 << 20, vec![Behaviour::gated(&g0), Behaviour::gated(&g1)]);
    let cfg =
        PoolConfig { initial_sessions: 2, max_request_bytes: 64 << 10, max_depth: 1, ..Default::default() };
    let pool = Arc::new(Pool::open(c.clone(), cfg).await.unwrap());
    let write = tokio::spawn({
        let p = Arc::clone(&pool);
        async move { p.write(0, data(0, 1 << 20, 7), false).await }
    });
    c.wait_for("both sessions hold a write", |c| c.running(0) == 1 && c.running(1) == 1).await;
    g0.open();
    g1.open();
    within("the write", write).await.unwrap().unwrap();
    assert_eq!(pool.snapshot().faults.unflushed_bytes, 1 << 20, "the writes wait for a flush");
    g0.close();
    g1.close();
    let read = tokio::spawn({
        let p = Arc::clone(&pool);
        async move { p.read(0, 1 << 20).await }
    });
    c.wait_for("both sessions hold a read", |c| c.running(0) == 1 && c.running(1) == 1).await;
    g1.open();
    c.wait_for("session 1 carried the rest of the read", |c| {
        c.completed(0) + c.completed(1) == (1 << 20) + (15 << 16)
    })
    .await;
    // The pool counts a request out of flight just after the store answers.
    within("session 1 idle in the pool", async {
        while pool.snapshot().sessions[1].in_flight > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    within("the flush beside a stalled session", pool.flush()).await.unwrap();
    assert_eq!(pool.snapshot().faults.unflushed_bytes, 0, "{:?}", pool.snapshot());
    assert!(!read.is_finished(), "session 0 was stuck all along");
    g0.open();
    assert_data(&within("the read", read).await.unwrap().unwrap(), 0, 7);
}
