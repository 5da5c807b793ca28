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

/// Completes every read in `orders` (and whatever read-ahead that starts).
fn complete_all(e: &mut Engine, mut orders: Vec<FetchOrder>, now: u64) -> Vec<FetchOrder> {
    let mut done = Vec::new();
    while let Some(o) = orders.pop() {
        orders.extend(e.fetch_done(o.id, Some(&Bytes::from(vec![3u8; o.len as usize])), now));
        done.push(o);
    }
    done
}

#[test]
fn read_ahead_read_in_part_keeps_its_unread_rest_against_eviction() {
    let cfg = Config { max_streams: 64, prefetch_request: MIB, ..cfg() };
    let mut e = Engine::new(cfg, SIZE);
    let mut now = 0;
    let mut prefetched = Vec::new();
    for i in 0..3u64 {
        now += 1_000;
        let plan = e.plan_read(i * MIB, MIB, now);
        prefetched.extend(complete_all(&mut e, plan.fetches, now).into_iter().filter(|o| o.prefetch));
    }
    // The first read-ahead request past the reader, now in the cache.
    let p = prefetched.iter().filter(|o| o.offset >= 3 * MIB).min_by_key(|o| o.offset).expect("read ahead");
    let (start, half) = (p.offset, u64::from(p.len) / 2);
    assert!(half >= 4096, "{p:?}");
    // The reader reads its first half only (a 10 MiB read split in pieces
    // that do not match the read-ahead requests)...
    let plan = e.plan_read(start, half, now);
    assert!(plan.fetches.iter().all(|o| o.prefetch), "the first half was cached: {:?}", plan.fetches);
    complete_all(&mut e, plan.fetches, now);
    // ...then random reads of three times the cache pass through it.
    let mut rng = Lcg(11);
    for _ in 0..24 {
        now += 1_000;
        let off = 512 * MIB + rng.next() % 256 * MIB;
        let plan = e.plan_read(off, MIB, now);
        complete_all(&mut e, plan.fetches, now);
    }
    // The unread second half is still cached: no demand read for it.
    let before = e.stats().miss_bytes;
    let plan = e.plan_read(start + half, half, now);
    assert!(
        plan.fetches.iter().all(|o| o.prefetch) && plan.parts.iter().all(|p| matches!(p, Part::Data(_))),
        "the unread rest of the read-ahead was evicted: {:?}",
        plan.fetches
    );
    assert_eq!(e.stats().miss_bytes, before);
}

#[test]
fn read_ahead_goes_out_in_whole_requests_while_the_reader_moves_in_small_steps() {
    let cfg = Config {
        cache_size: 64 * MIB,
        max_window: 16 * MIB,
        min_depth: 4 * MIB,
        prefetch_request: 2 * MIB,
        ..cfg()
    };
    let mut e = Engine::new(cfg, SIZE);
    let mut sent = Vec::new();
    // 128 KiB reads (what the kernel sends through FUSE), each answered at once.
    for i in 0..(64 * MIB / (128 << 10)) {
        let off = i * (128 << 10);
        let plan = e.plan_read(off, 128 << 10, i * 1_000);
        sent.extend(complete_all(&mut e, plan.fetches, i * 1_000).into_iter().filter(|o| o.prefetch));
    }
    assert!(sent.len() > 16, "the stream was read ahead: {} requests", sent.len());
    let small: Vec<_> = sent.iter().filter(|o| u64::from(o.len) < 2 * MIB).collect();
    assert!(
        small.is_empty(),
        "{} of {} read-ahead requests were partial: {:?}",
        small.len(),
        sent.len(),
        &small[..small.len().min(4)]
    );
}

#[test]
fn read_ahead_a_reader_already_took_does_not_fill_the_cache() {
    let cfg =
        Config { cache_size: 8 * MIB, max_window: 64 * MIB, min_depth: MIB, prefetch_request: MIB, ..cfg() };
    let mut e = Engine::new(cfg, SIZE);
    // The reader keeps catching up with the read-ahead: each read joins
    // the read in flight, which completes only once it was joined.
    let mut in_flight: Vec<FetchOrder> = Vec::new();
    for i in 0..64u64 {
        let now = (i + 1) * 1_000;
        in_flight.extend(e.plan_read(i * MIB, MIB, now).fetches);
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut in_flight).into_iter().partition(|o| o.offset < (i + 1) * MIB);
        in_flight = later;
        for o in due {
            in_flight.extend(e.fetch_done(o.id, Some(&Bytes::from(vec![5u8; o.len as usize])), now));
        }
    }
    let s = e.stats();
    assert!(s.joined_bytes > 32 * MIB, "the reader joined reads in flight: {s:?}");
    assert!(s.miss_bytes <= 4 * MIB, "the read-ahead stopped and the reader missed: {s:?}");
}
