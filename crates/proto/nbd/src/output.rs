//! The output queue both state machines write into: bytes for the peer,
//! handed out by `poll_transmit` as segments to write in order.
//!
//! Small frames (greeting, options, request and reply headers, short
//! payloads) are encoded into one growing buffer and leave as one segment;
//! a large payload (a WRITE's data, a READ reply's data) is queued as its
//! own segment without being copied, so a vectored write sends it straight
//! from the caller's buffer.

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};

/// Payloads up to this many bytes are copied next to their header instead
/// of becoming a segment of their own (one write instead of two).
const COPY_BELOW: usize = 512;

/// Bytes queued for the peer.
#[derive(Debug, Default)]
pub(crate) struct OutQueue {
    /// Small frames encoded after the last ready segment.
    frames: BytesMut,
    /// Segments ready to send, in order; all of them precede `frames`.
    ready: VecDeque<Bytes>,
    /// Bytes in `frames` and `ready` together.
    queued: usize,
}

impl OutQueue {
    /// Encodes a small frame at the end of the queue.
    pub(crate) fn frame(&mut self, encode: impl FnOnce(&mut BytesMut)) {
        let before = self.frames.len();
        encode(&mut self.frames);
        self.queued += self.frames.len() - before;
    }

    /// Appends raw bytes (a short frame body) at the end of the queue.
    pub(crate) fn put_slice(&mut self, data: &[u8]) {
        self.frames.put_slice(data);
        self.queued += data.len();
    }

    /// Appends a payload after what is queued, as its own segment unless it
    /// is short.
    pub(crate) fn payload(&mut self, data: Bytes) {
        if data.len() <= COPY_BELOW {
            self.put_slice(&data);
            return;
        }
        if !self.frames.is_empty() {
            self.ready.push_back(self.frames.split().freeze());
        }
        self.queued += data.len();
        self.ready.push_back(data);
    }

    /// The next segment to send.
    pub(crate) fn poll(&mut self) -> Option<Bytes> {
        let seg = match self.ready.pop_front() {
            Some(s) => s,
            None if !self.frames.is_empty() => self.frames.split().freeze(),
            None => return None,
        };
        self.queued -= seg.len();
        Some(seg)
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.queued == 0
    }

    /// Bytes queued and not yet handed out.
    pub(crate) fn len(&self) -> usize {
        self.queued
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_keep_their_order_and_large_payloads_are_not_copied() {
        let mut q = OutQueue::default();
        q.put_slice(b"head1");
        let big = Bytes::from(vec![7u8; 4096]);
        q.payload(big.clone());
        q.put_slice(b"head2");
        q.payload(Bytes::from_static(b"small"));
        assert_eq!(q.len(), 5 + 4096 + 5 + 5);
        assert_eq!(&q.poll().unwrap()[..], b"head1");
        let seg = q.poll().unwrap();
        assert_eq!(seg.as_ptr(), big.as_ptr(), "the payload is handed out as it was queued");
        assert_eq!(&q.poll().unwrap()[..], b"head2small");
        assert!(q.poll().is_none());
        assert!(q.is_empty());
    }
}
