//! Sequential stream detection and the read-ahead window (sans-I/O).
//!
//! Every demand read is matched against a small table of streams. A read
//! that starts where a stream's reads ended (within a small tolerance, since
//! a kernel sends its read-ahead requests in parallel and they may arrive
//! out of order) extends it; anything else starts a new candidate, replacing
//! the stream used longest ago. A stream becomes *active* after
//! [`CONFIRM_READS`] reads in sequence; only active streams are read ahead,
//! so random reads never trigger prefetching. Several streams (clients,
//! files, regions) are tracked at once.
//!
//! The window of an active stream is how far ahead of the reader data is
//! requested. It starts at the path's depth (at least twice goodput x
//! round-trip time, see [`crate::engine`]), doubles each time the reader
//! consumes a whole window or catches up with the prefetch (a stall), and
//! stops at the configured ceiling.

/// Identifies a stream for the lifetime of the table.
pub(crate) type StreamId = u64;

/// Reads in sequence before a stream is read ahead.
pub(crate) const CONFIRM_READS: u32 = 3;
/// How far before or after a candidate's expected next offset a read may
/// start and still extend it.
const CANDIDATE_SLACK: u64 = 256 * 1024;
/// How far behind an active stream's expected next offset a read may start
/// at least (parallel read-ahead requests of the kernel arrive out of
/// order); a stream's whole window behind it counts too.
const ACTIVE_BEHIND: u64 = 8 << 20;
/// A stream not read for this long (microseconds) is forgotten.
const IDLE_US: u64 = 10_000_000;

/// One sequential stream.
#[derive(Debug, Clone)]
pub(crate) struct Stream {
    pub(crate) id: StreamId,
    /// End of the furthest read of the stream.
    pub(crate) next: u64,
    /// Prefetch has been requested up to here.
    pub(crate) issued_until: u64,
    /// Bytes to keep requested ahead of `next`.
    pub(crate) window: u64,
    /// Reads in sequence so far.
    pub(crate) hits: u32,
    last_used: u64,
    /// `next` when the window last grew.
    grown_at: u64,
}

impl Stream {
    /// Read ahead of this stream.
    pub(crate) fn active(&self) -> bool {
        self.hits >= CONFIRM_READS
    }
}

/// What a demand read did to the stream table.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Observed {
    /// The stream the read belongs to, if it is active.
    pub(crate) active: Option<StreamId>,
    /// Streams forgotten (replaced or idle): their read-ahead is no longer owned.
    pub(crate) dropped: Vec<StreamId>,
}

/// The table of streams.
#[derive(Debug)]
pub(crate) struct Streams {
    list: Vec<Stream>,
    max: usize,
    next_id: StreamId,
}

impl Streams {
    /// A table of at most `max` streams.
    pub(crate) fn new(max: usize) -> Self {
        Streams { list: Vec::new(), max: max.max(1), next_id: 1 }
    }

    /// The stream `id`.
    pub(crate) fn get_mut(&mut self, id: StreamId) -> Option<&mut Stream> {
        self.list.iter_mut().find(|s| s.id == id)
    }

    /// The active streams.
    pub(crate) fn active_ids(&self) -> Vec<StreamId> {
        self.list.iter().filter(|s| s.active()).map(|s| s.id).collect()
    }

    /// True if the stream `id` is still tracked.
    pub(crate) fn contains(&self, id: StreamId) -> bool {
        self.list.iter().any(|s| s.id == id)
    }

    /// Records a demand read of `[start, end)` at `now` (microseconds).
    /// `depth` is the path's depth in bytes, the smallest window.
    pub(crate) fn on_read(&mut self, start: u64, end: u64, now: u64, depth: u64) -> Observed {
        let mut out = Observed::default();
        self.list.retain(|s| {
            let keep = now.saturating_sub(s.last_used) < IDLE_US;
            if !keep {
                out.dropped.push(s.id);
            }
            keep
        });
        let found = self.list.iter_mut().find(|s| {
            if s.active() {
                // Anywhere in the window ahead: a large read (dd bs=10M)
                // makes the kernel send ten 1 MiB requests at once, and
                // they may pass the prefetch when the cache holds it back.
                start + s.window.max(ACTIVE_BEHIND) >= s.next
                    && start <= s.issued_until.max(s.next) + s.window.max(CANDIDATE_SLACK)
            } else {
                start + CANDIDATE_SLACK >= s.next && start <= s.next + CANDIDATE_SLACK
            }
        });
        match found {
            Some(s) => {
                s.last_used = now;
                if end > s.next {
                    s.next = end;
                    s.hits = s.hits.saturating_add(1);
                }
                if s.active() {
                    if s.window < depth {
                        s.window = depth;
                    }
                    if s.issued_until < s.next {
                        s.issued_until = s.next;
                    }
                    out.active = Some(s.id);
                }
            }
            None => {
                if self.list.len() >= self.max
                    && let Some(i) = (0..self.list.len()).min_by_key(|&i| self.list[i].last_used)
                {
                    out.dropped.push(self.list.swap_remove(i).id);
                }
                let id = self.next_id;
                self.next_id += 1;
                self.list.push(Stream {
                    id,
                    next: end,
                    issued_until: end,
                    window: depth,
                    hits: 1,
                    last_used: now,
                    grown_at: end,
                });
            }
        }
        out
    }

    /// Grows the window of `id` (doubling, up to `ceiling`) if the reader
    /// stalled or consumed a whole window since the last growth.
    pub(crate) fn maybe_grow(&mut self, id: StreamId, stalled: bool, ceiling: u64) {
        if let Some(s) = self.get_mut(id) {
            let consumed = s.next.saturating_sub(s.grown_at);
            if (stalled || consumed >= s.window) && s.window < ceiling {
                s.window = (s.window * 2).min(ceiling);
                s.grown_at = s.next;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn sequential_reads_become_active_after_confirmation() {
        let mut t = Streams::new(4);
        let mut active = Vec::new();
        for i in 0..5u64 {
            active.push(t.on_read(i * 128 * 1024, (i + 1) * 128 * 1024, i, 16 * MIB).active.is_some());
        }
        assert_eq!(active, vec![false, false, true, true, true]);
    }

    #[test]
    fn random_reads_never_activate() {
        let mut t = Streams::new(16);
        let mut x = 12345u64;
        for now in 0..10_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let off = (x >> 20) % (1 << 30) / 4096 * 4096;
            assert!(t.on_read(off, off + 4096, now, 16 * MIB).active.is_none(), "at {now}");
        }
    }

    #[test]
    fn interleaved_streams_are_tracked_separately() {
        let mut t = Streams::new(4);
        for i in 0..4u64 {
            for base in [0, 100 * MIB, 500 * MIB] {
                let o = base + i * MIB;
                let got = t.on_read(o, o + MIB, i, 16 * MIB);
                assert_eq!(got.active.is_some(), i >= 2, "base {base} read {i}");
            }
        }
    }

    #[test]
    fn out_of_order_reads_stay_in_the_stream_and_window_grows_to_the_ceiling() {
        let mut t = Streams::new(4);
        for i in 0..3u64 {
            t.on_read(i * MIB, (i + 1) * MIB, 0, 8 * MIB);
        }
        // A read slightly behind the furthest one still belongs.
        let id = t.on_read(MIB, 2 * MIB, 1, 8 * MIB).active.expect("active");
        for _ in 0..10 {
            t.maybe_grow(id, true, 128 * MIB);
        }
        assert_eq!(t.get_mut(id).map(|s| s.window), Some(128 * MIB));
    }

    #[test]
    fn reads_anywhere_in_the_window_stay_in_the_stream() {
        let mut t = Streams::new(2);
        for i in 0..3u64 {
            t.on_read(i * MIB, (i + 1) * MIB, 0, 16 * MIB);
        }
        // Parallel requests of one large read, far past what was prefetched,
        // in any order (the first ones then lie more than 8 MiB behind).
        for k in [9u64, 4, 12, 7, 0, 1] {
            let o = 3 * MIB + k * MIB;
            assert!(t.on_read(o, o + MIB, 1, 16 * MIB).active.is_some(), "read at {k} MiB ahead");
        }
        // Beyond the window it is another stream.
        assert!(t.on_read(200 * MIB, 201 * MIB, 2, 16 * MIB).active.is_none());
    }

    #[test]
    fn idle_and_replaced_streams_are_dropped() {
        let mut t = Streams::new(1);
        t.on_read(0, MIB, 0, MIB);
        let o = t.on_read(900 * MIB, 901 * MIB, 1, MIB);
        assert_eq!(o.dropped, vec![1]);
        let o = t.on_read(901 * MIB, 902 * MIB, 20_000_000, MIB);
        assert_eq!(o.dropped, vec![2]);
    }
}
