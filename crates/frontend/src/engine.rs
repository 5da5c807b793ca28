//! The front end's state machine: block cache, read-ahead and write-back,
//! with no I/O, no clock and no tasks (the driver in [`crate::driver`] passes
//! `now` in microseconds and carries out the orders).
//!
//! # Layers
//! Every byte of the store is answered from the first layer that holds it:
//! 1. **pending** writes (acknowledged to the client, not yet sent),
//! 2. writes **in flight** to the remote,
//! 3. the **clean** cache (data read from the remote),
//! 4. reads **in flight** (a demand read or a prefetch someone else asked for),
//! 5. the remote itself (a new demand read of exactly the missing bytes).
//!
//! A write removes its range from the clean cache and from the reads in
//! flight (so data read before the write can never be cached after it), and
//! a read is only started for bytes that no pending or in-flight write
//! holds, so nothing older than an acknowledged write is ever returned.
//!
//! # Write-back
//! Writes (and write-zeroes and trims) are kept as *runs*: adjacent writes
//! of the same kind merge up to [`Config::write_request`] bytes. A run is
//! sent when it is full, when nothing extended it for
//! [`Config::coalesce_delay_us`], when it is older than [`MAX_AGE_US`],
//! or at once while somebody waits (a flush, a FUA or write-through write)
//! or the buffer is more than half full. A run is never sent while an
//! overlapping run is in flight, so the remote applies overlapping writes
//! in the order they were acknowledged. Each write gets a sequence number;
//! a run remembers the oldest write it holds, so "every write up to `seq`
//! is on the remote" is one look at the oldest run pending or in flight.
//! A write the remote refuses puts the engine in a failed state: later
//! writes and flushes report that error (EIO to a kernel), never silently.
//!
//! # Read-ahead
//! Demand reads feed [`crate::readahead::Streams`]; an active stream gets
//! prefetch requests of [`Config::prefetch_request`] bytes up to its window
//! ahead of the reader, starting at the path's depth (2 x goodput x RTT, at
//! least [`Config::min_depth`]) and growing to [`Config::max_window`].
//! Prefetch goes to the remote as read-ahead (`Endpoint::read_ahead`), which
//! the session pool serves only after every demand request waiting, so
//! demand reads never queue behind prefetch; prefetched data not yet read
//! plus prefetch in flight never exceeds [`Config::cache_size`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::{Bytes, BytesMut};
use wanblk_blockdev::EndpointError;

use crate::ranges::{Piece, RangeMap, subtract};
use crate::readahead::{StreamId, Streams};

/// A run older than this (microseconds) is sent even while it keeps growing.
pub const MAX_AGE_US: u64 = 1_000_000;
/// Largest write-zeroes or trim run sent as one request.
const MAX_ZERO_RUN: u64 = 1 << 30;

/// How the front end is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Bytes of clean data cached, including prefetch in flight.
    pub cache_size: u64,
    /// Most bytes of written data held before the remote acknowledged them.
    pub write_back_limit: u64,
    /// Acknowledge writes only once the remote has them.
    pub write_through: bool,
    /// The largest read-ahead window of one stream.
    pub max_window: u64,
    /// The smallest depth (bytes in flight) of prefetch and of write-back.
    pub min_depth: u64,
    /// Bytes per prefetch request.
    pub prefetch_request: u64,
    /// Most bytes per coalesced write request.
    pub write_request: u64,
    /// A run nothing extended for this long (microseconds) is sent.
    pub coalesce_delay_us: u64,
    /// Sequential streams tracked at once.
    pub max_streams: usize,
    /// Bytes read into the cache at each end of the disk when the front end
    /// starts ([`Engine::prefetch_edges`]; 0: none).
    pub edge_prefetch: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cache_size: 256 << 20,
            write_back_limit: 128 << 20,
            write_through: false,
            max_window: 128 << 20,
            min_depth: 16 << 20,
            prefetch_request: 2 << 20,
            write_request: 8 << 20,
            coalesce_delay_us: 5_000,
            max_streams: 16,
            edge_prefetch: EDGE_PREFETCH,
        }
    }
}

/// Default of [`Config::edge_prefetch`]: where the labels of disks live.
/// Partition tables, the GPT's backup header, and the superblocks and
/// labels that `blkid`, udev and `mount` look for (file systems, RAID,
/// LVM, ZFS) lie in the first and last megabyte or two of a disk. A cold
/// ext4 `mount` of a disk behind a 100 ms path read about 20 of them one
/// after the other, each a round trip, before it read ext4's own
/// metadata: 1.7 s of a 3.6 s mount.
pub const EDGE_PREFETCH: u64 = 2 << 20;

/// Largest request of [`Engine::prefetch_edges`].
const EDGE_PIECE: u64 = 256 << 10;

/// Identifies a read in flight to the remote.
pub type FetchId = u64;
/// Identifies a write request in flight to the remote.
pub type SendId = u64;

/// A read the driver must send to the remote, then report with
/// [`Engine::fetch_done`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOrder {
    /// Identifies the read.
    pub id: FetchId,
    /// Where it starts.
    pub offset: u64,
    /// How many bytes.
    pub len: u32,
    /// Read-ahead (nobody waits for it yet), not a demand read.
    pub prefetch: bool,
}

/// One piece of a planned read, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// These bytes, now.
    Data(Bytes),
    /// `len` bytes at `skip` into the result of the read `id`.
    Wait {
        /// The read in flight.
        id: FetchId,
        /// Offset into its result.
        skip: u64,
        /// Bytes taken from it.
        len: u64,
    },
}

/// How to answer a demand read.
#[derive(Debug, Default)]
pub struct ReadPlan {
    /// The answer, piece by piece.
    pub parts: Vec<Part>,
    /// Reads to send now: the demand reads `parts` waits for, and read-ahead.
    pub fetches: Vec<FetchOrder>,
}

/// What a client asked to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteKind {
    /// These bytes.
    Data(Bytes),
    /// Zeroes; the remote may deallocate them if `may_trim`.
    Zero {
        /// The remote may punch a hole.
        may_trim: bool,
    },
    /// Discard (advisory; reads may return zeroes or old data).
    Trim,
}

/// What to send to the remote for a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// A write of these bytes.
    Data(Bytes),
    /// A write-zeroes.
    Zero {
        /// The remote may punch a hole.
        may_trim: bool,
    },
    /// A trim.
    Trim,
}

/// A write request the driver must send, then report with [`Engine::send_done`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendOrder {
    /// Identifies the request.
    pub id: SendId,
    /// Where it starts.
    pub offset: u64,
    /// Bytes covered.
    pub len: u64,
    /// What to send.
    pub payload: Payload,
    /// Somebody waits for this data to be durable (a flush or a FUA
    /// write): send it with FUA where the remote has it, so the wait does
    /// not need a flush round trip after it (data runs only).
    pub fua: bool,
}

/// Why a write was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The write-back buffer is full: wait for a send to finish and retry.
    Full,
    /// An earlier write failed on the remote; the front end refuses writes.
    Failed(EndpointError),
}

/// Counters for reports and benchmarks.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Demand bytes answered from the clean cache.
    pub hit_bytes: u64,
    /// Demand bytes answered from reads already in flight.
    pub joined_bytes: u64,
    /// Demand bytes read from the remote on demand.
    pub miss_bytes: u64,
    /// Demand bytes answered from pending or in-flight writes.
    pub dirty_read_bytes: u64,
    /// Bytes prefetched from the remote.
    pub prefetched_bytes: u64,
    /// Read-ahead requests sent to the remote.
    pub prefetch_requests: u64,
    /// Demand reads sent to the remote.
    pub demand_requests: u64,
    /// Bytes the clients wrote (acknowledged).
    pub written_bytes: u64,
    /// Write requests sent to the remote (after coalescing).
    pub write_requests: u64,
    /// Bytes of clean data cached now.
    pub clean_bytes: u64,
    /// Bytes written and not yet acknowledged by the remote.
    pub dirty_bytes: u64,
    /// Prefetch bytes in flight now.
    pub prefetch_in_flight: u64,
    /// Demand-read bytes in flight now.
    pub demand_in_flight: u64,
    /// The path's depth now (bytes kept in flight).
    pub depth: u64,
    /// Round-trip time used for the depth, microseconds.
    pub rtt_us: u64,
    /// Goodput used for the depth, bytes per second.
    pub goodput: u64,
}

/// A contiguous run of written bytes, held as the clients' buffers.
#[derive(Debug, Clone, Default)]
struct Rope {
    chunks: Vec<Bytes>,
    len: u64,
}

impl Rope {
    fn from(b: Bytes) -> Rope {
        let len = b.len() as u64;
        Rope { chunks: vec![b], len }
    }

    fn slice(&self, from: u64, to: u64) -> Rope {
        let mut out = Rope::default();
        let mut pos = 0u64;
        for c in &self.chunks {
            let (cs, ce) = (pos, pos + c.len() as u64);
            pos = ce;
            if ce <= from || cs >= to {
                continue;
            }
            let a = from.max(cs) - cs;
            let b = to.min(ce) - cs;
            out.chunks.push(c.slice(a as usize..b as usize));
            out.len += b - a;
        }
        out
    }

    fn append(&mut self, other: Rope) {
        self.len += other.len;
        self.chunks.extend(other.chunks);
    }

    fn to_bytes(&self) -> Bytes {
        match self.chunks.as_slice() {
            [one] => one.clone(),
            many => {
                let mut b = BytesMut::with_capacity(self.len as usize);
                for c in many {
                    b.extend_from_slice(c);
                }
                b.freeze()
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Content {
    Data(Rope),
    Zero { may_trim: bool },
    Trim,
}

impl Content {
    fn slice(&self, from: u64, to: u64) -> Content {
        match self {
            Content::Data(r) => Content::Data(r.slice(from, to)),
            c => c.clone(),
        }
    }

    /// Bytes of memory it holds.
    fn held(&self, len: u64) -> u64 {
        match self {
            Content::Data(_) => len,
            _ => 0,
        }
    }

    fn bytes(&self, from: u64, to: u64) -> Bytes {
        match self {
            Content::Data(r) => r.slice(from, to).to_bytes(),
            _ => BytesMut::zeroed((to - from) as usize).freeze(),
        }
    }

    fn same_kind(&self, other: &Content) -> bool {
        matches!((self, other), (Content::Data(_), Content::Data(_)) | (Content::Trim, Content::Trim))
            || matches!((self, other), (Content::Zero { may_trim: a }, Content::Zero { may_trim: b }) if a == b)
    }
}

/// Written bytes not yet sent.
#[derive(Debug, Clone)]
struct Run {
    content: Content,
    len: u64,
    /// The oldest write whose bytes this run holds (or supersedes).
    seq_min: u64,
    /// When its oldest byte was written.
    first: u64,
    /// When it was last extended.
    last: u64,
}

impl Piece for Run {
    fn len(&self) -> u64 {
        self.len
    }
    fn slice(&self, from: u64, to: u64) -> Self {
        Run {
            content: self.content.slice(from, to),
            len: to - from,
            seq_min: self.seq_min,
            first: self.first,
            last: self.last,
        }
    }
}

/// A run sent to the remote, not yet acknowledged.
#[derive(Debug, Clone)]
struct Flight {
    content: Content,
    len: u64,
    seq_min: u64,
}

impl Piece for Flight {
    fn len(&self) -> u64 {
        self.len
    }
    fn slice(&self, from: u64, to: u64) -> Self {
        Flight { content: self.content.slice(from, to), len: to - from, seq_min: self.seq_min }
    }
}

/// Bytes a read in flight will bring.
#[derive(Debug, Clone, Copy)]
struct Cover {
    id: FetchId,
    /// Offset into the read's result.
    rel: u64,
    len: u64,
}

impl Piece for Cover {
    fn len(&self) -> u64 {
        self.len
    }
    fn slice(&self, from: u64, to: u64) -> Self {
        Cover { id: self.id, rel: self.rel + from, len: to - from }
    }
}

/// A cached piece of clean data.
#[derive(Debug, Clone)]
struct CleanEntry {
    data: Bytes,
    tick: u64,
    /// Prefetched for this stream and not read yet (not evicted for other data).
    ahead: Option<StreamId>,
}

impl Piece for CleanEntry {
    fn len(&self) -> u64 {
        self.data.len() as u64
    }
    fn slice(&self, from: u64, to: u64) -> Self {
        // A copy, so the memory of the rest of the original buffer is freed
        // with it and the cache's byte count stays the memory it holds.
        CleanEntry {
            data: Bytes::copy_from_slice(&self.data[from as usize..to as usize]),
            tick: self.tick,
            ahead: self.ahead,
        }
    }
}

/// The clean cache with its eviction order.
#[derive(Debug, Default)]
struct Clean {
    map: RangeMap<CleanEntry>,
    /// Read or demand-fetched entries, least recently used first.
    free: BTreeSet<(u64, u64)>,
    /// Prefetched entries not read yet, oldest first.
    ahead: BTreeSet<(u64, u64)>,
    bytes: u64,
    ahead_bytes: u64,
    tick: u64,
}

impl Clean {
    fn index_add(&mut self, start: u64) {
        let Some(e) = self.map.get(start) else { return };
        let len = e.len();
        self.bytes += len;
        if e.ahead.is_some() {
            self.ahead_bytes += len;
            self.ahead.insert((e.tick, start));
        } else {
            self.free.insert((e.tick, start));
        }
    }

    fn index_remove(&mut self, start: u64, e: &CleanEntry) {
        let len = e.len();
        self.bytes -= len;
        if e.ahead.is_some() {
            self.ahead_bytes -= len;
            self.ahead.remove(&(e.tick, start));
        } else {
            self.free.remove(&(e.tick, start));
        }
    }

    fn remove(&mut self, start: u64, end: u64) {
        for c in self.map.cut(start, end) {
            self.index_remove(c.start, &c.original);
            if c.kept_left {
                self.index_add(c.start);
            }
            if c.kept_right {
                self.index_add(end);
            }
        }
    }

    fn insert(&mut self, start: u64, data: Bytes, ahead: Option<StreamId>) {
        let end = start + data.len() as u64;
        self.remove(start, end);
        self.tick += 1;
        self.map.insert(start, CleanEntry { data, tick: self.tick, ahead });
        self.index_add(start);
    }

    /// Evicts read entries, least recently used first, until at most
    /// `target` bytes are cached. False if that was not possible.
    fn evict_to(&mut self, target: u64) -> bool {
        while self.bytes > target {
            let Some(&(_, start)) = self.free.iter().next() else { return false };
            if let Some(e) = self.map.take(start) {
                self.index_remove(start, &e);
            } else {
                self.free.remove(&(0, start));
                return false;
            }
        }
        true
    }

    /// Marks the entry at `start` as read now.
    fn touch(&mut self, start: u64) {
        let Some(e) = self.map.get(start).cloned() else { return };
        self.index_remove(start, &e);
        self.tick += 1;
        let tick = self.tick;
        if let Some(m) = self.map.get_mut(start) {
            m.tick = tick;
            m.ahead = None;
        }
        self.index_add(start);
    }

    /// Marks `[s, e)`, part of one read-ahead entry, as read now: it
    /// becomes an entry of its own (a copy), the rest stays read-ahead.
    fn mark_read(&mut self, s: u64, e: u64) {
        let Some((ps, entry)) = self.map.overlapping(s, e).next() else { return };
        let pe = ps + entry.len();
        if s < ps || e > pe {
            return;
        }
        if (s, e) == (ps, pe) {
            self.touch(ps);
            return;
        }
        let data = Bytes::copy_from_slice(&entry.data[(s - ps) as usize..(e - ps) as usize]);
        self.remove(s, e);
        self.tick += 1;
        self.map.insert(s, CleanEntry { data, tick: self.tick, ahead: None });
        self.index_add(s);
    }

    /// Read-ahead of a forgotten stream becomes ordinary cached data.
    fn demote(&mut self, stream: StreamId) {
        let starts: Vec<u64> = self
            .ahead
            .iter()
            .map(|&(_, s)| s)
            .filter(|s| self.map.get(*s).is_some_and(|e| e.ahead == Some(stream)))
            .collect();
        for s in starts {
            let Some(e) = self.map.get(s).cloned() else { continue };
            self.index_remove(s, &e);
            if let Some(m) = self.map.get_mut(s) {
                m.ahead = None;
            }
            self.index_add(s);
        }
    }
}

/// A read in flight.
#[derive(Debug, Clone)]
struct Fetch {
    start: u64,
    len: u64,
    stream: Option<StreamId>,
    issued: u64,
    /// Ranges demand reads already took from it (they are read, not read-ahead).
    joined: Vec<(u64, u64)>,
}

/// Goodput of completed requests over the last second, in 100 ms bins.
#[derive(Debug, Default)]
struct Rate {
    bins: [u64; 10],
    /// Index of the bin `bins[cur % 10]` stands for (now / 100 ms).
    cur: u64,
    /// When the first completion was counted.
    first: Option<u64>,
    now: u64,
}

impl Rate {
    fn advance(&mut self, now: u64) {
        let bin = now / 100_000;
        if bin > self.cur {
            let steps = (bin - self.cur).min(10);
            for i in 1..=steps {
                self.bins[((self.cur + i) % 10) as usize] = 0;
            }
            self.cur = bin;
        }
    }

    fn add(&mut self, bytes: u64, now: u64) {
        self.advance(now);
        self.first.get_or_insert(now);
        self.now = self.now.max(now);
        self.bins[(self.cur % 10) as usize] += bytes;
    }

    /// Bytes per second over the last second (or since the first
    /// completion, if that is more recent, but at least 100 ms).
    fn per_second(&self) -> u64 {
        let span = self.first.map_or(1_000_000, |f| (self.now - f).clamp(100_000, 1_000_000));
        (u128::from(self.bins.iter().sum::<u64>()) * 1_000_000 / u128::from(span)) as u64
    }
}

/// The front end's state. See the module docs.
#[derive(Debug)]
pub struct Engine {
    cfg: Config,
    size: u64,
    // write-back
    pending: RangeMap<Run>,
    full: BTreeSet<u64>,
    by_deadline: BTreeSet<(u64, u64)>,
    flight: RangeMap<Flight>,
    flight_by_id: HashMap<SendId, u64>,
    /// Oldest write held by each pending or in-flight run (a multiset).
    unwritten: BTreeMap<u64, usize>,
    pending_bytes: u64,
    flight_bytes: u64,
    seq: u64,
    next_send: SendId,
    waiters: usize,
    /// Of the waiters, those who wait for durability (flush, FUA).
    durable_waiters: usize,
    failed: Option<EndpointError>,
    // reads
    clean: Clean,
    fetches: HashMap<FetchId, Fetch>,
    cover: RangeMap<Cover>,
    prefetch_bytes: u64,
    /// Bytes of demand reads in flight.
    demand_bytes: u64,
    next_fetch: FetchId,
    streams: Streams,
    // path
    rtt_us: Option<u64>,
    min_latency_us: Option<u64>,
    rate: Rate,
    stats: Stats,
}

impl Engine {
    /// A front end for a store of `size` bytes.
    pub fn new(cfg: Config, size: u64) -> Engine {
        Engine {
            cfg,
            size,
            pending: RangeMap::default(),
            full: BTreeSet::new(),
            by_deadline: BTreeSet::new(),
            flight: RangeMap::default(),
            flight_by_id: HashMap::new(),
            unwritten: BTreeMap::new(),
            pending_bytes: 0,
            flight_bytes: 0,
            seq: 0,
            next_send: 1,
            waiters: 0,
            durable_waiters: 0,
            failed: None,
            clean: Clean::default(),
            fetches: HashMap::new(),
            cover: RangeMap::default(),
            prefetch_bytes: 0,
            demand_bytes: 0,
            next_fetch: 1,
            streams: Streams::new(cfg.max_streams),
            rtt_us: None,
            min_latency_us: None,
            rate: Rate::default(),
            stats: Stats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    // ---- the path -------------------------------------------------------

    /// Records the round-trip time of the remote's connections (from TCP_INFO).
    pub fn observe_rtt(&mut self, rtt_us: u64) {
        if rtt_us > 0 {
            self.rtt_us = Some(rtt_us);
        }
    }

    /// Bytes to keep in flight: twice goodput x RTT, between
    /// [`Config::min_depth`] and [`Config::max_window`].
    pub fn depth(&self) -> u64 {
        let rtt = self.rtt_us.or(self.min_latency_us).unwrap_or(0);
        let bdp = (u128::from(self.rate.per_second()) * u128::from(rtt) / 1_000_000) as u64;
        (2 * bdp).clamp(self.cfg.min_depth, self.cfg.max_window.max(self.cfg.min_depth))
    }

    /// Written bytes let into flight at once: the depth, at least the
    /// largest window (a request's latency includes its queueing behind
    /// the others, so twice goodput x RTT alone would keep too little in
    /// flight on a window-limited path).
    fn write_depth(&self) -> u64 {
        self.depth().max(self.cfg.max_window)
    }

    /// The largest window of a stream: at most half the cache, so what a
    /// reader has just consumed (and the other streams' read-ahead) keeps
    /// room and a stream never has to evict its own prefetched data.
    fn ceiling(&self) -> u64 {
        self.cfg.max_window.min(self.cfg.cache_size / 2)
    }

    /// Bytes of data the engine holds or has asked for: clean cache,
    /// prefetch and demand reads in flight, written data not yet on the
    /// remote. Clean cache plus prefetch stay within [`Config::cache_size`];
    /// demand reads in flight are what the clients asked for (bounded by
    /// their queue depth and request size, not by the cache); written data
    /// stays within [`Config::write_back_limit`] (plus one write, when the
    /// buffer was empty).
    pub fn buffered_bytes(&self) -> u64 {
        self.read_bytes() + self.pending_bytes + self.flight_bytes
    }

    /// Clean cache plus reads in flight.
    fn read_bytes(&self) -> u64 {
        self.clean.bytes + self.prefetch_bytes + self.demand_bytes
    }

    fn completed(&mut self, bytes: u64, latency_us: Option<u64>, now: u64) {
        self.rate.add(bytes, now);
        if let Some(l) = latency_us {
            self.min_latency_us = Some(self.min_latency_us.map_or(l, |m| m.min(l)));
        }
    }

    // ---- reads ----------------------------------------------------------

    /// Plans the demand read of `[offset, offset+len)` (inside the store).
    pub fn plan_read(&mut self, offset: u64, len: u64, now: u64) -> ReadPlan {
        let end = offset + len;
        let mut segs: Vec<(u64, Part)> = Vec::new();
        let mut dirty = 0u64;
        let gaps = subtract(&self.pending, vec![(offset, end)], |s, e, ps, run| {
            dirty += e - s;
            segs.push((s, Part::Data(run.content.bytes(s - ps, e - ps))));
        });
        let gaps = subtract(&self.flight, gaps, |s, e, ps, f| {
            dirty += e - s;
            segs.push((s, Part::Data(f.content.bytes(s - ps, e - ps))));
        });
        let mut touched = Vec::new();
        let mut hit = 0u64;
        let gaps = subtract(&self.clean.map, gaps, |s, e, ps, c| {
            hit += e - s;
            // Read-ahead read only in part keeps its unread rest marked
            // as read-ahead, so it is not evicted before it is read.
            let whole = s == ps && e == ps + c.len();
            touched.push((ps, s, e, whole || c.ahead.is_none()));
            segs.push((s, Part::Data(c.data.slice((s - ps) as usize..(e - ps) as usize))));
        });
        let mut joined = 0u64;
        let mut took = Vec::new();
        let gaps = subtract(&self.cover, gaps, |s, e, ps, c| {
            joined += e - s;
            took.push((c.id, s, e));
            segs.push((s, Part::Wait { id: c.id, skip: c.rel + (s - ps), len: e - s }));
        });
        for (id, s, e) in took {
            if let Some(f) = self.fetches.get_mut(&id) {
                f.joined.push((s, e));
            }
        }
        let mut plan = ReadPlan::default();
        let mut missed = 0u64;
        for (s, e) in gaps {
            missed += e - s;
            let order = self.new_fetch(s, e, None, now);
            segs.push((s, Part::Wait { id: order.id, skip: 0, len: e - s }));
            plan.fetches.push(order);
        }
        for (ps, s, e, whole) in touched {
            if whole {
                self.clean.touch(ps);
            } else {
                self.clean.mark_read(s, e);
            }
        }
        segs.sort_by_key(|(s, _)| *s);
        plan.parts = segs.into_iter().map(|(_, p)| p).collect();
        self.stats.hit_bytes += hit;
        self.stats.joined_bytes += joined;
        self.stats.miss_bytes += missed;
        self.stats.dirty_read_bytes += dirty;

        let depth = self.depth();
        let seen = self.streams.on_read(offset, end, now, depth);
        for d in seen.dropped {
            self.clean.demote(d);
        }
        if let Some(id) = seen.active {
            self.streams.maybe_grow(id, joined + missed > 0, self.ceiling());
            plan.fetches.extend(self.top_up_all(now));
        }
        plan
    }

    /// Reads the first and last [`Config::edge_prefetch`] bytes of the disk
    /// into the cache (see [`EDGE_PREFETCH`]), as demand reads no client
    /// waits for yet; a read that arrives meanwhile joins them. Nothing
    /// when the cache cannot hold both ends.
    pub fn prefetch_edges(&mut self, now: u64) -> Vec<FetchOrder> {
        let edge = self.cfg.edge_prefetch.min(self.size);
        if edge == 0 || self.cfg.cache_size < edge.saturating_mul(2) {
            return Vec::new();
        }
        let tail = self.size - edge;
        let ranges = if tail <= edge { vec![(0, self.size)] } else { vec![(0, edge), (tail, self.size)] };
        // In pieces of at most EDGE_PIECE, spread over the sessions: the
        // first probe waits only for its piece, in slow start on a new
        // session (a 2 MiB request there takes about 7 round trips).
        let step = self.cfg.prefetch_request.clamp(1, EDGE_PIECE);
        let mut pieces = Vec::new();
        for (start, end) in ranges {
            for (gs, ge) in self.gaps(start, end) {
                let mut p = gs;
                while p < ge {
                    let q = ge.min(p + step);
                    pieces.push((p, q));
                    p = q;
                }
            }
        }
        // The outermost pieces first (probes start at the very ends), so
        // they are the first on their sessions.
        let size = self.size;
        pieces.sort_by_key(|&(p, q)| p.min(size - q));
        pieces.into_iter().map(|(p, q)| self.new_fetch(p, q, None, now)).collect()
    }

    /// Registers a read of `[start, end)`, which no layer holds.
    fn new_fetch(&mut self, start: u64, end: u64, stream: Option<StreamId>, now: u64) -> FetchOrder {
        let id = self.next_fetch;
        self.next_fetch += 1;
        let len = end - start;
        self.cover.insert(start, Cover { id, rel: 0, len });
        self.fetches.insert(id, Fetch { start, len, stream, issued: now, joined: Vec::new() });
        if stream.is_some() {
            self.prefetch_bytes += len;
            self.stats.prefetched_bytes += len;
            self.stats.prefetch_requests += 1;
        } else {
            self.demand_bytes += len;
            self.stats.demand_requests += 1;
        }
        FetchOrder { id, offset: start, len: len as u32, prefetch: stream.is_some() }
    }

    /// Parts of `[start, end)` that no layer holds.
    fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let g = subtract(&self.pending, vec![(start, end)], |_, _, _, _| {});
        let g = subtract(&self.flight, g, |_, _, _, _| {});
        let g = subtract(&self.clean.map, g, |_, _, _, _| {});
        subtract(&self.cover, g, |_, _, _, _| {})
    }

    /// Issues read-ahead for every active stream, as far as the window, the
    /// depth and the cache allow.
    fn top_up_all(&mut self, now: u64) -> Vec<FetchOrder> {
        let ids: Vec<StreamId> = self.streams.active_ids();
        let mut out = Vec::new();
        for id in ids {
            out.extend(self.top_up(id, now));
        }
        out
    }

    fn top_up(&mut self, id: StreamId, now: u64) -> Vec<FetchOrder> {
        let depth = self.depth();
        let Some(s) = self.streams.get_mut(id) else { return Vec::new() };
        let mut from = s.issued_until;
        let target = s.next.saturating_add(s.window).min(self.size);
        // Read-ahead goes out in whole requests: a reader that moves in
        // small steps (128 KiB FUSE reads) would otherwise move the window's
        // edge, and so the read-ahead, by as little each time, and the
        // remote's request slots would carry slivers.
        let whole = self.cfg.prefetch_request.min(s.window / 2).max(1);
        let mut out = Vec::new();
        while from < target && (target - from >= whole || target == self.size) {
            // Read-ahead in flight: what the windows and the cache allow, but
            // at least the depth's worth is let through even for one stream.
            if self.prefetch_bytes >= depth.max(self.ceiling()) {
                break;
            }
            let to = (from + self.cfg.prefetch_request.max(1)).min(target);
            let want = to - from;
            let reserved = self.prefetch_bytes + want;
            if self.clean.ahead_bytes + reserved > self.cfg.cache_size {
                break;
            }
            // Room for it now: read data goes first, least recently used first.
            self.clean.evict_to(self.cfg.cache_size - reserved);
            for (gs, ge) in self.gaps(from, to) {
                // A read in flight is at most u32::MAX bytes.
                let mut p = gs;
                while p < ge {
                    let q = ge.min(p + u64::from(u32::MAX));
                    out.push(self.new_fetch(p, q, Some(id), now));
                    p = q;
                }
            }
            from = to;
        }
        if let Some(s) = self.streams.get_mut(id) {
            s.issued_until = from;
        }
        out
    }

    /// Records the end of the read `id`: `data` is its result, or `None` if
    /// it failed. Returns more read-ahead to send.
    pub fn fetch_done(&mut self, id: FetchId, data: Option<&Bytes>, now: u64) -> Vec<FetchOrder> {
        let Some(f) = self.fetches.remove(&id) else { return Vec::new() };
        if f.stream.is_some() {
            self.prefetch_bytes -= f.len;
        } else {
            self.demand_bytes -= f.len;
        }
        let mine: Vec<(u64, Cover)> = self
            .cover
            .overlapping(f.start, f.start + f.len)
            .filter(|(_, c)| c.id == id)
            .map(|(s, c)| (s, *c))
            .collect();
        for (s, _) in &mine {
            self.cover.take(*s);
        }
        if let Some(data) = data.filter(|d| d.len() as u64 == f.len) {
            self.completed(f.len, Some(now.saturating_sub(f.issued)), now);
            let taken = coalesce(f.joined);
            let owner = f.stream.filter(|s| self.streams.contains(*s));
            for (s, c) in mine {
                let room = self.cfg.cache_size.saturating_sub(self.prefetch_bytes + c.len);
                // A copy of exactly the piece: the result may be a slice of
                // a larger receive buffer, which the cache must not keep
                // alive (its byte count is the memory it holds).
                let piece = || Bytes::copy_from_slice(&data[c.rel as usize..(c.rel + c.len) as usize]);
                if owner.is_some() {
                    // Space was reserved when the prefetch was issued.
                    self.clean.evict_to(room);
                    self.clean.insert(s, piece(), owner);
                    // What demand reads took while it was in flight is
                    // read: it must not stay protected as read-ahead (a
                    // reader that keeps catching up with the read-ahead
                    // would fill the cache with it and stop the read-ahead).
                    for (a, b) in &taken {
                        let (a, b) = ((*a).max(s), (*b).min(s + c.len));
                        if a < b {
                            self.clean.mark_read(a, b);
                        }
                    }
                } else if self.cfg.cache_size >= c.len && self.clean.evict_to(room) {
                    self.clean.insert(s, piece(), None);
                }
            }
        }
        self.top_up_all(now)
    }

    // ---- writes ---------------------------------------------------------

    /// Accepts a write of `len` bytes at `offset` (inside the store) and
    /// returns its sequence number.
    ///
    /// # Errors
    /// [`Refused::Full`] when the buffer cannot take it now (the driver
    /// waits for a send to finish), [`Refused::Failed`] after a failure.
    pub fn write(&mut self, offset: u64, len: u64, kind: WriteKind, now: u64) -> Result<u64, Refused> {
        if let Some(e) = &self.failed {
            return Err(Refused::Failed(e.clone()));
        }
        let held = if matches!(kind, WriteKind::Data(_)) { len } else { 0 };
        let buffered = self.pending_bytes + self.flight_bytes;
        if held > 0 && buffered > 0 && buffered + held > self.cfg.write_back_limit {
            return Err(Refused::Full);
        }
        self.seq += 1;
        let seq = self.seq;
        if len == 0 {
            return Ok(seq);
        }
        let end = offset + len;
        self.stats.written_bytes += held;
        // Nothing read before this write may be cached after it.
        self.clean.remove(offset, end);
        self.cover.cut(offset, end);
        let mut seq_min = seq;
        for c in self.pending.cut(offset, end) {
            self.unindex(&c.original, c.start);
            seq_min = seq_min.min(c.original.seq_min);
            if c.kept_left {
                self.index(c.start);
            }
            if c.kept_right {
                self.index(end);
            }
        }
        let content = match kind {
            WriteKind::Data(b) => Content::Data(Rope::from(b)),
            WriteKind::Zero { may_trim } => Content::Zero { may_trim },
            WriteKind::Trim => Content::Trim,
        };
        let mut run = Run { content, len, seq_min, first: now, last: now };
        let mut start = offset;
        let max_run =
            if matches!(run.content, Content::Data(_)) { self.cfg.write_request } else { MAX_ZERO_RUN };
        if let Some((ls, left)) = self.pending.ending_at(offset)
            && left.content.same_kind(&run.content)
            && left.len + run.len <= max_run
        {
            let left = self.take_pending(ls);
            run = merge(left, run);
            start = ls;
        }
        if let Some(right) = self.pending.get(end)
            && right.content.same_kind(&run.content)
            && right.len + run.len <= max_run
        {
            let right = self.take_pending(end);
            run = merge(run, right);
        }
        self.pending.insert(start, run);
        self.index(start);
        Ok(seq)
    }

    fn take_pending(&mut self, start: u64) -> Run {
        let r = self.pending.take(start).expect("pending run");
        self.unindex(&r, start);
        r
    }

    fn deadline(&self, r: &Run) -> u64 {
        (r.last + self.cfg.coalesce_delay_us).min(r.first + MAX_AGE_US)
    }

    fn is_full(&self, r: &Run) -> bool {
        r.len >= self.cfg.write_request
    }

    /// Adds the pending run at `start` to the indexes.
    fn index(&mut self, start: u64) {
        let Some(r) = self.pending.get(start) else { return };
        let (held, seq, deadline, full) =
            (r.content.held(r.len), r.seq_min, self.deadline(r), self.is_full(r));
        self.pending_bytes += held;
        *self.unwritten.entry(seq).or_default() += 1;
        self.by_deadline.insert((deadline, start));
        if full {
            self.full.insert(start);
        }
    }

    fn unindex(&mut self, r: &Run, start: u64) {
        self.pending_bytes -= r.content.held(r.len);
        unmark(&mut self.unwritten, r.seq_min);
        self.by_deadline.remove(&(self.deadline(r), start));
        self.full.remove(&start);
    }

    fn urgent(&self) -> bool {
        self.waiters > 0
            || self.cfg.write_through
            || 2 * (self.pending_bytes + self.flight_bytes) > self.cfg.write_back_limit
    }

    /// The next write request to send, if any may go now.
    pub fn poll_send(&mut self, now: u64) -> Option<SendOrder> {
        if self.failed.is_some() || self.pending.len() == 0 || self.flight_bytes >= self.write_depth() {
            return None;
        }
        let free = |s: &u64, e: &Engine| {
            let len = e.pending.get(*s).map_or(0, |r| r.len);
            !e.flight.overlaps(*s, *s + len)
        };
        let mut pick = self.full.iter().find(|s| free(s, self)).copied();
        if pick.is_none() {
            let urgent = self.urgent();
            pick = self
                .by_deadline
                .iter()
                .take_while(|(d, _)| urgent || *d <= now)
                .map(|(_, s)| *s)
                .find(|s| free(s, self));
        }
        let start = pick?;
        let run = self.take_pending(start);
        let id = self.next_send;
        self.next_send += 1;
        let (payload, content) = match run.content {
            Content::Data(r) => {
                // The request and the in-flight run share one buffer, so
                // written data is held once while it is on its way.
                let b = r.to_bytes();
                (Payload::Data(b.clone()), Content::Data(Rope::from(b)))
            }
            Content::Zero { may_trim } => (Payload::Zero { may_trim }, Content::Zero { may_trim }),
            Content::Trim => (Payload::Trim, Content::Trim),
        };
        self.flight_bytes += content.held(run.len);
        *self.unwritten.entry(run.seq_min).or_default() += 1;
        self.flight_by_id.insert(id, start);
        let len = run.len;
        self.flight.insert(start, Flight { content, len, seq_min: run.seq_min });
        self.stats.write_requests += 1;
        let fua = self.durable_waiters > 0 && matches!(payload, Payload::Data(_));
        Some(SendOrder { id, offset: start, len, payload, fua })
    }

    /// When [`Engine::poll_send`] should be asked again even if nothing
    /// else happens (a run's coalescing delay ends); `None` if only a
    /// completion or a new write can make something sendable.
    pub fn poll_timeout(&self, now: u64) -> Option<u64> {
        if self.failed.is_some() || self.flight_bytes >= self.write_depth() {
            return None;
        }
        self.by_deadline.range((now + 1, 0)..).next().map(|(d, _)| *d)
    }

    /// Records the end of the write request `id`.
    pub fn send_done(&mut self, id: SendId, result: Result<(), EndpointError>, now: u64) {
        let Some(start) = self.flight_by_id.remove(&id) else { return };
        match result {
            Ok(()) => {
                if let Some(f) = self.flight.take(start) {
                    let held = f.content.held(f.len);
                    self.flight_bytes -= held;
                    unmark(&mut self.unwritten, f.seq_min);
                    self.completed(held, None, now);
                }
            }
            Err(e) => {
                // The run stays in flight: reads keep seeing the data the
                // client wrote, and nothing waiting for it ever completes.
                self.fail(e);
            }
        }
    }

    /// Puts the front end in the failed state (a write or a flush failed on
    /// the remote).
    pub fn fail(&mut self, e: EndpointError) {
        if self.failed.is_none() {
            tracing::error!("write-back failed, later writes and flushes fail: {e}");
            self.failed = Some(e);
        }
    }

    /// The failure, if the front end is in the failed state.
    pub fn failure(&self) -> Option<&EndpointError> {
        self.failed.as_ref()
    }

    /// The sequence number of the latest write.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// True once every write up to `seq` is acknowledged by the remote.
    ///
    /// # Errors
    /// The failure, once a write failed on the remote.
    pub fn written(&self, seq: u64) -> Result<bool, EndpointError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        Ok(self.unwritten.keys().next().is_none_or(|&oldest| oldest > seq))
    }

    /// Somebody waits for writes to reach the remote: send at once; with
    /// `durable` (a flush, a FUA write) runs sent meanwhile carry
    /// [`SendOrder::fua`].
    pub fn begin_wait(&mut self, durable: bool) {
        self.waiters += 1;
        self.durable_waiters += usize::from(durable);
    }

    /// The wait begun by [`Engine::begin_wait`] is over.
    pub fn end_wait(&mut self, durable: bool) {
        self.waiters = self.waiters.saturating_sub(1);
        if durable {
            self.durable_waiters = self.durable_waiters.saturating_sub(1);
        }
    }

    /// True if written bytes not yet on the remote overlap `[start, end)`.
    pub fn dirty_overlaps(&self, start: u64, end: u64) -> bool {
        self.pending.overlaps(start, end) || self.flight.overlaps(start, end)
    }

    /// Nothing pending, nothing in flight.
    pub fn idle(&self) -> bool {
        self.pending.len() == 0 && self.flight.len() == 0 && self.fetches.is_empty()
    }

    /// Written bytes not yet on the remote (pending or in flight).
    pub fn dirty_bytes(&self) -> u64 {
        self.pending_bytes + self.flight_bytes
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        Stats {
            clean_bytes: self.clean.bytes,
            dirty_bytes: self.dirty_bytes(),
            prefetch_in_flight: self.prefetch_bytes,
            demand_in_flight: self.demand_bytes,
            depth: self.depth(),
            rtt_us: self.rtt_us.or(self.min_latency_us).unwrap_or(0),
            goodput: self.rate.per_second(),
            ..self.stats.clone()
        }
    }
}

/// Sorted, disjoint ranges covering what `ranges` cover.
fn coalesce(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

fn merge(mut a: Run, b: Run) -> Run {
    if let (Content::Data(ra), Content::Data(rb)) = (&mut a.content, b.content) {
        ra.append(rb);
    }
    Run {
        content: a.content,
        len: a.len + b.len,
        seq_min: a.seq_min.min(b.seq_min),
        first: a.first.min(b.first),
        last: a.last.max(b.last),
    }
}

fn unmark(set: &mut BTreeMap<u64, usize>, key: u64) {
    if let Some(n) = set.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            set.remove(&key);
        }
    }
}
