//! The writes a pool's sessions acknowledged that no flush covers yet.
//!
//! A server may acknowledge a write from a volatile cache; if it restarts
//! before a flush, the write is lost although it was acknowledged. So the
//! pool keeps every acknowledged write (its data: the buffer is shared,
//! not copied) with the session that carried it, until a flush on that
//! session covers it. When a session fails, its writes are sent again on
//! the others. A later write over the same bytes replaces the older one
//! (only the newest data may be sent again).
//!
//! A pool of several sessions requires multi-connection consistency (NBD's
//! CAN_MULTI_CONN: the server's cache is shared by all connections, and a
//! flush's effect is visible on all of them when it is answered; an iSCSI
//! logical unit's cache serves all its sessions). So one flush, on any
//! session, covers every write acknowledged before it was sent: the pool
//! flushes one session and clears every entry up to the sequence number
//! taken when that flush was sent ([`Ledger::clear_upto`]).

use std::collections::BTreeMap;

use bytes::Bytes;

/// What to write again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Data {
    /// These bytes.
    Bytes(Bytes),
    /// Zeroes (a zeroing request), `may_trim` as asked.
    Zero { may_trim: bool },
}

/// One acknowledged, unflushed write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) len: u64,
    pub(super) session: usize,
    /// Order of acknowledgement (pool-wide).
    pub(super) seq: u64,
    pub(super) data: Data,
}

impl Entry {
    /// The part `[from, to)` (absolute offsets) of this entry starting at `at`.
    fn slice(&self, at: u64, from: u64, to: u64) -> Entry {
        let data = match &self.data {
            Data::Bytes(b) => Data::Bytes(b.slice((from - at) as usize..(to - at) as usize)),
            z => z.clone(),
        };
        Entry { len: to - from, session: self.session, seq: self.seq, data }
    }

    /// Bytes of memory it holds.
    fn held(&self) -> u64 {
        match self.data {
            Data::Bytes(_) => self.len,
            Data::Zero { .. } => 0,
        }
    }
}

/// The acknowledged, unflushed writes of a pool, by offset (disjoint).
#[derive(Debug, Default)]
pub(super) struct Ledger {
    entries: BTreeMap<u64, Entry>,
    held: u64,
}

impl Ledger {
    /// Bytes of write data held.
    pub(super) fn held(&self) -> u64 {
        self.held
    }

    /// No entry.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Removes `[from, to)` from every entry (cutting entries that overlap it).
    fn punch(&mut self, from: u64, to: u64) {
        let first =
            self.entries.range(..from).next_back().filter(|(s, e)| *s + e.len > from).map(|(s, _)| *s);
        let keys: Vec<u64> = first.into_iter().chain(self.entries.range(from..to).map(|(s, _)| *s)).collect();
        for s in keys {
            let Some(e) = self.entries.remove(&s) else { continue };
            self.held -= e.held();
            let end = s + e.len;
            if s < from {
                let left = e.slice(s, s, from);
                self.held += left.held();
                self.entries.insert(s, left);
            }
            if end > to {
                let right = e.slice(s, to, end);
                self.held += right.held();
                self.entries.insert(to, right);
            }
        }
    }

    /// Records a write of `len` bytes at `offset` acknowledged by `session`
    /// as the `seq`-th acknowledgement; it replaces older writes there.
    pub(super) fn record(&mut self, offset: u64, len: u64, session: usize, seq: u64, data: Data) {
        if len == 0 {
            return;
        }
        self.punch(offset, offset + len);
        let e = Entry { len, session, seq, data };
        self.held += e.held();
        self.entries.insert(offset, e);
    }

    /// Takes every entry of `session` (it failed: they are sent again).
    pub(super) fn take(&mut self, session: usize) -> Vec<(u64, Entry)> {
        let keys: Vec<u64> =
            self.entries.iter().filter(|(_, e)| e.session == session).map(|(s, _)| *s).collect();
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some(e) = self.entries.remove(&k) {
                self.held -= e.held();
                out.push((k, e));
            }
        }
        out
    }

    /// Entries acknowledged at or before `seq` are held.
    pub(super) fn holds_upto(&self, seq: u64) -> bool {
        self.entries.values().any(|e| e.seq <= seq)
    }

    /// A flush sent after acknowledgement `seq` succeeded: every entry up
    /// to `seq` is on stable storage.
    pub(super) fn clear_upto(&mut self, seq: u64) {
        let mut held = self.held;
        self.entries.retain(|_, e| {
            let keep = e.seq > seq;
            if !keep {
                held -= e.held();
            }
            keep
        });
        self.held = held;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes(len: u64, fill: u8) -> Data {
        Data::Bytes(Bytes::from(vec![fill; len as usize]))
    }

    #[test]
    fn a_newer_write_replaces_the_bytes_it_covers() {
        let mut l = Ledger::default();
        l.record(0, 100, 0, 1, bytes(100, 1));
        l.record(40, 20, 1, 2, bytes(20, 2));
        assert_eq!(l.held(), 100);
        let s0 = l.take(0);
        assert_eq!(s0.iter().map(|(o, e)| (*o, e.len)).collect::<Vec<_>>(), vec![(0, 40), (60, 40)]);
        assert!(s0.iter().all(|(_, e)| e.data == bytes(e.len, 1)));
        assert_eq!(l.held(), 20);
        assert!(l.holds_upto(10));
        assert!(!l.holds_upto(1), "only entries acknowledged before the flush count");
        l.clear_upto(1);
        assert!(!l.is_empty(), "a flush sent before the write does not cover it");
        l.clear_upto(2);
        assert!(l.is_empty() && l.held() == 0);
    }

    #[test]
    fn zeroes_hold_no_memory() {
        let mut l = Ledger::default();
        l.record(0, 1 << 30, 3, 1, Data::Zero { may_trim: true });
        assert_eq!(l.held(), 0);
        l.record(4096, 4096, 2, 2, bytes(4096, 7));
        let z = l.take(3);
        assert_eq!(
            z.iter().map(|(o, e)| (*o, e.len)).collect::<Vec<_>>(),
            vec![(0, 4096), (8192, (1 << 30) - 8192)]
        );
    }

    proptest! {
        /// Whatever the writes, the ledger holds, byte by byte, the newest
        /// write's data and session, and `held` counts its data bytes.
        #[test]
        fn holds_the_newest_write_of_every_byte(
            writes in proptest::collection::vec((0u64..200, 1u64..50, 0usize..3, any::<bool>()), 1..40),
            cleared in proptest::option::of(0u64..40),
        ) {
            let mut l = Ledger::default();
            let mut model: Vec<Option<(usize, u64, Option<u8>)>> = vec![None; 260];
            for (seq, (o, n, s, zero)) in writes.iter().enumerate() {
                let seq = seq as u64 + 1;
                let fill = (seq % 250) as u8 + 1;
                let data = if *zero { Data::Zero { may_trim: false } } else { bytes(*n, fill) };
                l.record(*o, *n, *s, seq, data);
                for b in &mut model[*o as usize..(*o + *n) as usize] {
                    *b = Some((*s, seq, (!zero).then_some(fill)));
                }
            }
            if let Some(upto) = cleared {
                l.clear_upto(upto);
                for b in model.iter_mut() {
                    if b.is_some_and(|(_, q, _)| q <= upto) { *b = None; }
                }
            }
            let mut got: Vec<Option<(usize, u64, Option<u8>)>> = vec![None; 260];
            let mut held = 0;
            for s in 0..3 {
                for (o, e) in l.take(s) {
                    for i in 0..e.len {
                        prop_assert!(got[(o + i) as usize].is_none(), "entries overlap");
                        let byte = match &e.data { Data::Bytes(b) => { held += 1; Some(b[i as usize]) } Data::Zero { .. } => None };
                        got[(o + i) as usize] = Some((e.session, e.seq, byte));
                    }
                }
            }
            prop_assert_eq!(got, model);
            prop_assert!(l.is_empty() && l.held() == 0);
            let _ = held;
        }
    }
}
