//! A memory store behind a simulated remote: each request waits a random
//! latency (tokio time, so tests run paused in simulated time), writes can
//! be made to fail, and every request is counted. It also keeps what a
//! crash of the remote would keep ([`Remote::durable_bytes`]): writes that
//! went with FUA, and writes that completed before a flush was sent.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use wanblk_blockdev::local::{Fill, MemoryEndpoint};
use wanblk_blockdev::{Capabilities, Endpoint, EndpointError, Result};

/// Counters of what reached the remote.
#[derive(Default)]
pub struct Counts {
    pub reads: AtomicUsize,
    pub read_bytes: AtomicU64,
    pub largest_read: AtomicU64,
    pub writes: AtomicUsize,
    pub write_bytes: AtomicU64,
    pub largest_write: AtomicU64,
    pub flushes: AtomicUsize,
    pub fua_writes: AtomicUsize,
    pub in_flight: AtomicUsize,
    pub peak_in_flight: AtomicUsize,
}

pub struct Remote {
    pub store: Arc<MemoryEndpoint>,
    pub counts: Counts,
    /// Latency range per request, microseconds.
    pub latency_us: (u64, u64),
    rng: Mutex<u64>,
    /// Writes fail once this many have been accepted.
    pub fail_writes_after: Option<usize>,
    /// Flushes fail.
    pub fail_flush: AtomicBool,
    /// Every request waits until this is false.
    pub stalled: AtomicBool,
    /// Says it has no FUA (the front end then relies on flushes only).
    pub no_fua: AtomicBool,
    seed: u64,
    /// Completed writes in order: offset, data, FUA.
    log: Mutex<Vec<(u64, Bytes, bool)>>,
    /// How many of `log` a successful flush covers.
    flushed: AtomicUsize,
}

impl Remote {
    pub fn new(size: u64, latency_us: (u64, u64), seed: u64) -> Arc<Remote> {
        Self::with(size, latency_us, seed, None)
    }

    pub fn with(
        size: u64,
        latency_us: (u64, u64),
        seed: u64,
        fail_writes_after: Option<usize>,
    ) -> Arc<Remote> {
        Arc::new(Remote {
            store: Arc::new(MemoryEndpoint::new("mem", size, Fill::Random { seed })),
            counts: Counts::default(),
            latency_us,
            rng: Mutex::new(seed | 1),
            fail_writes_after,
            fail_flush: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            no_fua: AtomicBool::new(false),
            seed,
            log: Mutex::new(Vec::new()),
            flushed: AtomicUsize::new(0),
        })
    }

    /// What the remote would still hold after a crash (a power loss of its
    /// volatile cache): its first content, then every completed write that
    /// went with FUA or that a successful flush covers, in order.
    pub async fn durable_bytes(&self) -> Vec<u8> {
        let first = MemoryEndpoint::new("durable", self.size(), Fill::Random { seed: self.seed });
        let covered = self.flushed.load(Ordering::SeqCst);
        let log = self.log.lock().unwrap().clone();
        for (i, (offset, data, fua)) in log.into_iter().enumerate() {
            if fua || i < covered {
                first.write(offset, data, false).await.unwrap();
            }
        }
        first.read(0, self.size() as u32).await.unwrap().to_vec()
    }

    async fn delay(&self) {
        let us = {
            let mut x = self.rng.lock().unwrap();
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            let (lo, hi) = self.latency_us;
            lo + *x % (hi - lo + 1)
        };
        let n = self.counts.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.counts.peak_in_flight.fetch_max(n, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_micros(us)).await;
        while self.stalled.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        self.counts.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Endpoint for Remote {
    fn name(&self) -> &str {
        "sim://remote"
    }
    fn size(&self) -> u64 {
        self.store.size()
    }
    fn capabilities(&self) -> Capabilities {
        let mut caps = self.store.capabilities();
        caps.can_fua = !self.no_fua.load(Ordering::SeqCst);
        caps
    }
    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        self.delay().await;
        self.counts.reads.fetch_add(1, Ordering::SeqCst);
        self.counts.read_bytes.fetch_add(len.into(), Ordering::SeqCst);
        self.counts.largest_read.fetch_max(len.into(), Ordering::SeqCst);
        self.store.read(offset, len).await
    }
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<()> {
        self.delay().await;
        let n = self.counts.writes.fetch_add(1, Ordering::SeqCst);
        if self.fail_writes_after.is_some_and(|f| n >= f) {
            return Err(EndpointError::io("sim://remote", Some(offset), "connection lost for good"));
        }
        self.counts.write_bytes.fetch_add(data.len() as u64, Ordering::SeqCst);
        self.counts.largest_write.fetch_max(data.len() as u64, Ordering::SeqCst);
        assert!(!fua || !self.no_fua.load(Ordering::SeqCst), "FUA sent to a remote without it");
        self.counts.fua_writes.fetch_add(usize::from(fua), Ordering::SeqCst);
        self.store.write(offset, data.clone(), fua).await?;
        self.log.lock().unwrap().push((offset, data, fua));
        Ok(())
    }
    async fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<()> {
        self.delay().await;
        self.store.write_zeroes(offset, len, may_trim).await?;
        self.log.lock().unwrap().push((offset, Bytes::from(vec![0u8; len as usize]), false));
        Ok(())
    }
    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.delay().await;
        self.store.trim(offset, len).await
    }
    async fn flush(&self) -> Result<()> {
        // It covers the writes completed when it arrives, not those that
        // complete while it waits.
        let covers = self.log.lock().unwrap().len();
        self.delay().await;
        self.counts.flushes.fetch_add(1, Ordering::SeqCst);
        if self.fail_flush.load(Ordering::SeqCst) {
            return Err(EndpointError::io("sim://remote", None, "flush failed"));
        }
        self.flushed.fetch_max(covers, Ordering::SeqCst);
        Ok(())
    }
}

/// A paused current-thread runtime: time advances only when every task waits.
pub fn sim<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(f)
}

/// The remote's whole content.
pub async fn remote_bytes(r: &Remote) -> Vec<u8> {
    r.store.read(0, r.size() as u32).await.unwrap().to_vec()
}
