//! The engine's bounds, deterministically (no I/O, no clock): the bytes it
//! holds stay within the cache plus the clients' own reads in flight, and
//! a random read is sent at once even while read-ahead is queued.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use wanblk_frontend::engine::{FetchOrder, Part};
use wanblk_frontend::{Config, Engine};

const MIB: u64 = 1 << 20;
const SIZE: u64 = 1 << 30;
/// Client reads outstanding at once, and the largest.
const QD: usize = 10;
const MAX_READ: u64 = MIB;

/// A small deterministic generator.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn cfg() -> Config {
    Config {
        cache_size: 8 * MIB,
        max_window: 64 * MIB,
        min_depth: MIB,
        prefetch_request: 512 * 1024,
        ..Config::default()
    }
}

/// Checks the engine's read bytes against the bounds.
fn check(e: &Engine, step: usize) {
    let s = e.stats();
    let cache = e.config().cache_size;
    assert!(
        s.clean_bytes + s.prefetch_in_flight <= cache,
        "step {step}: cached {} + prefetch in flight {} > cache {cache}",
        s.clean_bytes,
        s.prefetch_in_flight
    );
    assert!(
        s.demand_in_flight <= QD as u64 * MAX_READ,
        "step {step}: demand in flight {}",
        s.demand_in_flight
    );
    assert!(
        e.buffered_bytes() <= cache + QD as u64 * MAX_READ,
        "step {step}: {} bytes buffered > cache {cache} + {QD} reads of {MAX_READ}",
        e.buffered_bytes()
    );
}

#[test]
fn buffered_bytes_stay_within_the_cache_plus_the_clients_reads() {
    let mut e = Engine::new(cfg(), SIZE);
    let mut rng = Lcg(7);
    // Reads in flight to the remote, and which client reads wait for them.
    let mut remote: BTreeMap<u64, FetchOrder> = BTreeMap::new();
    let mut clients: Vec<BTreeSet<u64>> = Vec::new();
    // Three sequential readers (ten 1 MiB reads at a time, as a kernel
    // splits `dd bs=10M`) and a random reader.
    let mut streams = [0u64, 300 * MIB, 700 * MIB];
    let mut batch: Vec<(u64, u64)> = Vec::new();
    let mut now = 0u64;
    for step in 0..4000 {
        now += 1_000;
        if batch.is_empty() {
            let k = (rng.next() % 4) as usize;
            if k < 3 {
                let base = streams[k];
                streams[k] += 10 * MIB;
                // Popped from the end: in order, but several in flight.
                batch = (0..10).rev().map(|i| (base + i * MIB, MIB)).collect();
            } else {
                batch.push((rng.next() % (SIZE / 4096) * 4096, 4096));
            }
        }
        if clients.len() < QD {
            let (off, len) = batch.pop().expect("a read");
            let plan = e.plan_read(off, len, now);
            let mut waits = BTreeSet::new();
            for p in &plan.parts {
                if let Part::Wait { id, .. } = p {
                    waits.insert(*id);
                }
            }
            for o in plan.fetches {
                remote.insert(o.id, o);
            }
            clients.push(waits);
        } else {
            // Complete some read in flight, chosen at random.
            let ids: Vec<u64> = remote.keys().copied().collect();
            if let Some(&id) = ids.get((rng.next() as usize) % ids.len().max(1)) {
                let o = remote.remove(&id).expect("in flight");
                let more = e.fetch_done(id, Some(&Bytes::from(vec![7u8; o.len as usize])), now);
                for c in &mut clients {
                    c.remove(&id);
                }
                for m in more {
                    remote.insert(m.id, m);
                }
            }
            clients.retain(|c| !c.is_empty());
        }
        check(&e, step);
    }
    // The bound was under pressure: read-ahead moved more than the cache
    // holds and was used.
    let s = e.stats();
    assert!(s.prefetched_bytes > 2 * cfg().cache_size, "the streams were read ahead: {s:?}");
    assert!(s.hit_bytes + s.joined_bytes > cfg().cache_size, "read-ahead was used: {s:?}");
}

#[test]
fn a_random_read_is_sent_at_once_while_read_ahead_is_queued() {
    let mut e = Engine::new(cfg(), SIZE);
    let mut queued = Vec::new();
    for i in 0..6u64 {
        let plan = e.plan_read(i * MIB, MIB, i);
        queued.extend(plan.fetches.into_iter().filter(|o| o.prefetch));
    }
    assert!(!queued.is_empty(), "the stream is read ahead");
    let before = e.stats();
    assert!(before.prefetch_in_flight > 0);
    // Read-ahead is waiting in the remote's queue; a random read far away:
    let off = 900 * MIB + 4096;
    let plan = e.plan_read(off, 4096, 10);
    assert_eq!(plan.fetches.len(), 1, "exactly one order: {:?}", plan.fetches);
    let o = &plan.fetches[0];
    assert!(!o.prefetch, "a demand read, not read-ahead");
    assert_eq!((o.offset, o.len), (off, 4096));
    assert_eq!(plan.parts, vec![Part::Wait { id: o.id, skip: 0, len: 4096 }]);
    // It started no read-ahead of its own and waits for nothing else.
    assert_eq!(e.stats().prefetch_in_flight, before.prefetch_in_flight);
    // Still true with the cache full of read-ahead nobody has read yet.
    for o in queued {
        let more = e.fetch_done(o.id, Some(&Bytes::from(vec![1u8; o.len as usize])), 20);
        assert!(more.iter().all(|m| m.prefetch));
    }
    let plan = e.plan_read(off + 100 * MIB, 4096, 30);
    assert_eq!(plan.fetches.len(), 1);
    assert!(!plan.fetches[0].prefetch);
}
