//! The front end's read and write semantics over a simulated remote, in
//! simulated time: overlapping reads see pending writes, flush and FUA wait
//! for the remote, failures surface on the next flush and later writes,
//! writes coalesce, random reads pass straight through, sequential reads
//! are prefetched within the cache bound.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use common::{Remote, remote_bytes, sim};
use wanblk_blockdev::Endpoint;
use wanblk_frontend::{Config, FrontEnd};

const MIB: u64 = 1 << 20;

fn small() -> Config {
    Config {
        cache_size: 4 * MIB,
        write_back_limit: MIB,
        min_depth: 512 * 1024,
        max_window: 2 * MIB,
        prefetch_request: 256 * 1024,
        write_request: 256 * 1024,
        ..Config::default()
    }
}

fn front(remote: &Arc<Remote>, cfg: Config) -> FrontEnd {
    FrontEnd::new(Arc::clone(remote) as Arc<dyn Endpoint>, cfg)
}

#[test]
fn reads_overlapping_pending_writes_return_the_new_data() {
    sim(async {
        let remote = Remote::new(4 * MIB, (50_000, 50_000), 1);
        let fe = front(&remote, small());
        let before = fe.read(0, 8192).await.unwrap();
        // Nothing reaches the remote while it is stalled: the writes stay pending.
        remote.stalled.store(true, Ordering::SeqCst);
        fe.write(100, Bytes::from(vec![0xaa; 300]), false).await.unwrap();
        fe.write(350, Bytes::from(vec![0xbb; 100]), false).await.unwrap();
        fe.write_zeroes(4000, 1000, false).await.unwrap();
        let mut want = before.to_vec();
        want[100..400].fill(0xaa);
        want[350..450].fill(0xbb);
        want[4000..5000].fill(0);
        // A read that straddles clean, pending and zeroed bytes, and one
        // that starts inside a pending write.
        let got = fe.read(0, 8192).await.unwrap();
        assert_eq!(got, want);
        assert_eq!(fe.read(360, 50).await.unwrap(), want[360..410]);
        remote.stalled.store(false, Ordering::SeqCst);
        fe.flush().await.unwrap();
        assert_eq!(remote_bytes(&remote).await[..8192], want[..]);
    });
}

#[test]
fn flush_returns_only_when_every_earlier_write_is_on_the_remote() {
    sim(async {
        let remote = Remote::new(4 * MIB, (1_000, 80_000), 2);
        let fe = front(&remote, small());
        let mut want = remote_bytes(&remote).await;
        for i in 0..200u64 {
            let off = (i * 7919 * 13) % (4 * MIB - 5000);
            let len = 1 + (i * 31) % 4096;
            let data = vec![i as u8; len as usize];
            want[off as usize..(off + len) as usize].copy_from_slice(&data);
            fe.write(off, Bytes::from(data), false).await.unwrap();
        }
        fe.flush().await.unwrap();
        assert_eq!(remote_bytes(&remote).await, want, "remote after flush");
        assert_eq!(remote.durable_bytes().await, want, "durable after flush");
    });
}

#[test]
fn a_fua_write_is_durable_with_every_earlier_write_when_it_returns() {
    for no_fua in [false, true] {
        sim(async {
            let remote = Remote::new(4 * MIB, (10_000, 30_000), 3);
            remote.no_fua.store(no_fua, Ordering::SeqCst);
            let fe = front(&remote, small());
            fe.write(0, Bytes::from(vec![1u8; 4096]), false).await.unwrap();
            fe.write(8192, Bytes::from(vec![2u8; 4096]), true).await.unwrap();
            let r = remote.durable_bytes().await;
            assert!(
                r[..4096].iter().all(|b| *b == 1),
                "the earlier write too (no FUA at the remote: {no_fua})"
            );
            assert!(r[8192..12288].iter().all(|b| *b == 2), "no FUA at the remote: {no_fua}");
        });
    }
}

#[test]
fn an_fsync_after_a_small_write_costs_one_round_trip_and_one_with_nothing_new_none() {
    sim(async {
        let remote = Remote::new(4 * MIB, (50_000, 50_000), 11);
        let fe = front(&remote, small());
        // A write and an fsync right after it (a journal's commit block):
        // the write goes with FUA, no flush follows it.
        let t0 = tokio::time::Instant::now();
        fe.write(4096, Bytes::from(vec![5u8; 4096]), false).await.unwrap();
        fe.flush().await.unwrap();
        assert_eq!(t0.elapsed(), Duration::from_millis(50), "one round trip");
        assert_eq!(remote.counts.flushes.load(Ordering::SeqCst), 0);
        assert_eq!(remote.counts.fua_writes.load(Ordering::SeqCst), 1);
        assert!(remote.durable_bytes().await[4096..8192].iter().all(|b| *b == 5));
        // Nothing written since: no flush at all.
        let t1 = tokio::time::Instant::now();
        fe.flush().await.unwrap();
        assert_eq!(t1.elapsed(), Duration::ZERO);
        // A write that went out before the fsync (its coalescing delay
        // ended) completed without FUA: the fsync flushes.
        fe.write(0, Bytes::from(vec![6u8; 4096]), false).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        fe.flush().await.unwrap();
        assert_eq!(remote.counts.flushes.load(Ordering::SeqCst), 1);
        assert!(remote.durable_bytes().await[..4096].iter().all(|b| *b == 6));
    });
}

#[test]
fn every_flush_and_fua_write_leaves_what_came_before_durable() {
    // Writes of random sizes and places, some FUA, flushes in between,
    // random latencies: whenever a flush or a FUA write returns, a crash
    // of the remote keeps every write acknowledged before it.
    for (seed, no_fua) in [(21, false), (22, true), (23, false), (24, false)] {
        sim(async {
            let remote = Remote::new(4 * MIB, (1_000, 60_000), seed);
            remote.no_fua.store(no_fua, Ordering::SeqCst);
            let fe = Arc::new(front(&remote, small()));
            let mut want = remote_bytes(&remote).await;
            let mut x = seed;
            for i in 0..300u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let off = x % (4 * MIB - 70_000);
                let len = 1 + (x >> 20) % 65_536;
                let data = vec![(i % 251) as u8 + 1; len as usize];
                want[off as usize..(off + len) as usize].copy_from_slice(&data);
                let fua = x % 17 == 0;
                fe.write(off, Bytes::from(data), fua).await.unwrap();
                if fua || x % 13 == 0 {
                    if !fua {
                        fe.flush().await.unwrap();
                    }
                    assert_eq!(remote.durable_bytes().await, want, "seed {seed}, write {i}, FUA {fua}");
                }
                if x % 5 == 0 {
                    tokio::time::sleep(Duration::from_micros(x % 20_000)).await;
                }
            }
        });
    }
}

#[test]
fn write_through_acknowledges_only_what_the_remote_has() {
    sim(async {
        let remote = Remote::new(4 * MIB, (10_000, 30_000), 4);
        let fe = front(&remote, Config { write_through: true, ..small() });
        for i in 0..20u64 {
            fe.write(i * 5000, Bytes::from(vec![i as u8 + 1; 5000]), false).await.unwrap();
            let r = remote_bytes(&remote).await;
            assert!(r[(i * 5000) as usize..((i + 1) * 5000) as usize].iter().all(|b| *b == i as u8 + 1));
        }
    });
}

#[test]
fn a_failed_write_back_fails_the_next_flush_and_later_writes() {
    sim(async {
        let remote = Remote::with(4 * MIB, (1_000, 5_000), 5, Some(3));
        let fe = front(&remote, small());
        for i in 0..8u64 {
            // Far apart, so each is its own request.
            fe.write(i * 400_000, Bytes::from(vec![9u8; 1000]), false).await.unwrap();
        }
        let err = fe.flush().await.expect_err("flush must report the lost writes");
        assert!(err.to_string().contains("connection lost"), "{err}");
        assert!(fe.write(0, Bytes::from_static(b"x"), false).await.is_err(), "later writes fail");
        assert!(fe.flush().await.is_err(), "and later flushes");
        // What the client wrote is still what it reads.
        assert_eq!(fe.read(7 * 400_000, 1000).await.unwrap(), vec![9u8; 1000]);
    });
}

#[test]
fn a_failed_remote_flush_fails_and_sticks() {
    sim(async {
        let remote = Remote::new(4 * MIB, (1_000, 5_000), 6);
        let fe = front(&remote, small());
        fe.write(0, Bytes::from(vec![1u8; 10]), false).await.unwrap();
        // Sent (without FUA: nobody waited) before the flush comes.
        tokio::time::sleep(Duration::from_millis(100)).await;
        remote.fail_flush.store(true, Ordering::SeqCst);
        assert!(fe.flush().await.is_err());
        remote.fail_flush.store(false, Ordering::SeqCst);
        assert!(fe.flush().await.is_err(), "a flush that failed once is not forgotten");
    });
}

#[test]
fn sequential_writes_coalesce_into_large_requests() {
    sim(async {
        let remote = Remote::new(16 * MIB, (20_000, 20_000), 7);
        let fe = front(&remote, Config { write_back_limit: 4 * MIB, ..small() });
        for i in 0..1024u64 {
            fe.write(i * 4096, Bytes::from(vec![i as u8; 4096]), false).await.unwrap();
        }
        fe.flush().await.unwrap();
        let writes = remote.counts.writes.load(Ordering::SeqCst);
        assert!(writes <= 1024 / 32, "{writes} write requests for 1024 sequential 4 KiB writes");
        assert_eq!(remote.counts.largest_write.load(Ordering::SeqCst), 256 * 1024);
        let r = remote_bytes(&remote).await;
        assert!((0..1024usize).all(|i| r[i * 4096..(i + 1) * 4096].iter().all(|b| *b == i as u8)));
    });
}

#[test]
fn the_write_back_buffer_is_bounded() {
    sim(async {
        let remote = Remote::new(16 * MIB, (30_000, 60_000), 8);
        let cfg = small();
        let fe = Arc::new(front(&remote, cfg));
        let writer = {
            let fe = Arc::clone(&fe);
            tokio::spawn(async move {
                for i in 0..512u64 {
                    fe.write(i * 16384, Bytes::from(vec![1u8; 16384]), false).await.unwrap();
                }
            })
        };
        while !writer.is_finished() {
            let s = fe.stats();
            assert!(s.dirty_bytes <= cfg.write_back_limit, "{} dirty", s.dirty_bytes);
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        writer.await.unwrap();
        fe.flush().await.unwrap();
    });
}

#[test]
fn random_reads_pass_straight_through_and_re_reads_hit_the_cache() {
    sim(async {
        let remote = Remote::new(64 * MIB, (20_000, 20_000), 9);
        // Without the reads of the disk's ends at the start (next test).
        let fe = front(&remote, Config { edge_prefetch: 0, ..small() });
        let mut x = 99u64;
        let mut offsets = Vec::new();
        for _ in 0..200 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let off = (x >> 16) % (64 * MIB / 4096) * 4096;
            offsets.push(off);
            let got = fe.read(off, 4096).await.unwrap();
            assert_eq!(got, remote.store.read(off, 4096).await.unwrap());
        }
        let s = fe.stats();
        assert_eq!(s.prefetched_bytes, 0, "no read-ahead for random reads");
        assert_eq!(remote.counts.largest_read.load(Ordering::SeqCst), 4096, "no read is enlarged");
        let reads = remote.counts.reads.load(Ordering::SeqCst);
        for off in offsets.iter().rev().take(50) {
            fe.read(*off, 4096).await.unwrap();
        }
        assert_eq!(remote.counts.reads.load(Ordering::SeqCst), reads, "re-reads come from the cache");
    });
}

#[test]
fn sequential_reads_are_prefetched_within_the_cache_size() {
    sim(async {
        let remote = Remote::new(64 * MIB, (50_000, 50_000), 10);
        let cfg = small();
        let fe = front(&remote, cfg);
        let t0 = tokio::time::Instant::now();
        let mut peak = 0;
        for i in 0..(32 * MIB / 131072) {
            let got = fe.read(i * 131072, 131072).await.unwrap();
            assert_eq!(got, remote.store.read(i * 131072, 131072).await.unwrap());
            let s = fe.stats();
            assert!(s.clean_bytes + s.prefetch_in_flight <= cfg.cache_size, "{s:?}");
            // Depth never exceeds the window ceiling; the last request may overshoot it.
            assert!(s.prefetch_in_flight <= cfg.max_window + cfg.prefetch_request, "{s:?}");
            peak = peak.max(remote.counts.peak_in_flight.load(Ordering::SeqCst));
        }
        let elapsed = t0.elapsed();
        let s = fe.stats();
        assert!(s.prefetched_bytes >= 30 * MIB, "{s:?}");
        assert!(s.miss_bytes <= MIB, "{s:?}");
        // 256 reads one round trip (50 ms) each would take 12.8 s; with
        // read-ahead the remote sees several large reads in flight.
        assert!(peak >= 2, "peak {peak}");
        assert!(elapsed < Duration::from_secs(6), "{elapsed:?} in simulated time");
    });
}

#[test]
fn concurrent_streams_are_each_read_ahead() {
    sim(async {
        let remote = Remote::new(256 * MIB, (20_000, 20_000), 11);
        let fe = Arc::new(front(&remote, Config { cache_size: 16 * MIB, ..small() }));
        let mut tasks = Vec::new();
        for k in 0..4u64 {
            let (fe, remote) = (Arc::clone(&fe), Arc::clone(&remote));
            tasks.push(tokio::spawn(async move {
                let base = k * 64 * MIB;
                for i in 0..64u64 {
                    let off = base + i * 65536;
                    assert_eq!(
                        fe.read(off, 65536).await.unwrap(),
                        remote.store.read(off, 65536).await.unwrap()
                    );
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let s = fe.stats();
        assert!(s.prefetched_bytes >= 12 * MIB, "{s:?}");
        assert!(s.hit_bytes + s.joined_bytes >= 8 * MIB, "{s:?}");
    });
}

#[test]
fn close_writes_everything_back() {
    sim(async {
        let remote = Remote::new(4 * MIB, (5_000, 50_000), 12);
        let fe = front(&remote, small());
        fe.write(1000, Bytes::from(vec![7u8; 100_000]), false).await.unwrap();
        fe.close().await.unwrap();
        assert!(remote_bytes(&remote).await[1000..101_000].iter().all(|b| *b == 7));
    });
}

/// The first and last megabytes of the disk, where label probes (blkid,
/// udev, mount) read one small block after another, are read into the
/// cache at the start, in a few large reads at once: the probes then cost
/// no round trip.
#[test]
fn both_ends_of_the_disk_are_cached_at_the_start() {
    sim(async {
        let size = 64 * MIB;
        let remote = Remote::new(size, (20_000, 20_000), 10);
        let cfg = Config { edge_prefetch: MIB, ..small() };
        let fe = front(&remote, cfg);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let reads = remote.counts.reads.load(Ordering::SeqCst);
        let ends = 2 * MIB / cfg.prefetch_request.min(256 * 1024);
        assert_eq!(reads as u64, ends, "both ends in pieces of at most 256 KiB");
        for off in [0, 4096, 512 * 1024, size - 4096, size - 64 * 1024, size - MIB] {
            let got = fe.read(off, 4096).await.unwrap();
            assert_eq!(got, remote.store.read(off, 4096).await.unwrap());
        }
        assert_eq!(remote.counts.reads.load(Ordering::SeqCst), reads, "the probes hit the cache");
        // A write there is not hidden by what was read at the start.
        let data = Bytes::from(vec![7u8; 4096]);
        fe.write(size - 8192, data.clone(), false).await.unwrap();
        assert_eq!(fe.read(size - 8192, 4096).await.unwrap(), data);
        // A cache too small for both ends reads nothing ahead.
        let remote = Remote::new(size, (20_000, 20_000), 11);
        let _fe = front(&remote, Config { edge_prefetch: MIB, cache_size: MIB, ..small() });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(remote.counts.reads.load(Ordering::SeqCst), 0);
    });
}
