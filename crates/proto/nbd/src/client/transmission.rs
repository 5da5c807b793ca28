//! The client's transmission phase (spec "Transmission"): requests checked
//! against what was negotiated and encoded ("Request message", "Request
//! types"), replies matched to their request by cookie and validated, simple
//! ("Simple reply message") or structured ("Structured reply chunk message",
//! "Structured reply types").
//!
//! Read data goes into one buffer per request (the caller's, with
//! [`Request::ReadInto`]), at its offset in the request, as it arrives: from
//! the input buffer, or, once the header of a simple reply or of an
//! NBD_REPLY_TYPE_OFFSET_DATA chunk has been decoded, straight from the
//! socket when the driver borrows the buffer ([`Lent`]). Holes and gaps
//! read as zeroes; nothing is assembled at the end.
//!
//! Memory per request stays proportional to the request: a reply may have at
//! most [`max_reply_chunks`] chunks, so a server answering a 32 MiB read with
//! one-byte chunks gets a protocol error after about 65 000 of them, not one
//! entry per byte; adjacent read chunks are merged in the coverage map, and
//! the buffer never grows past the request's length.

use std::collections::{BTreeMap, HashMap};

use bytes::buf::Limit;
use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::handshake::Negotiated;
use crate::codec::{Codec, DecodeError, Reader};
use crate::consts::*;
use crate::error::{ProtocolError, RequestError};
use crate::wire::*;

/// A request to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// NBD_CMD_READ into a buffer of its own.
    Read {
        /// Offset.
        offset: u64,
        /// Length.
        length: u32,
    },
    /// NBD_CMD_READ whose data is appended to `buf` (handed back in
    /// [`ReplyData::Read`]); a buffer with room for `length` more bytes
    /// receives them without reallocating, e.g. one part of a larger buffer
    /// split with [`BytesMut::split_off`].
    ReadInto {
        /// Offset.
        offset: u64,
        /// Length.
        length: u32,
        /// Where the data goes, after what it holds.
        buf: BytesMut,
    },
    /// NBD_CMD_WRITE.
    Write {
        /// Offset.
        offset: u64,
        /// Payload (sent as its own transmit segment).
        data: Bytes,
        /// NBD_CMD_FLAG_FUA.
        fua: bool,
    },
    /// NBD_CMD_FLUSH.
    Flush,
    /// NBD_CMD_TRIM.
    Trim {
        /// Offset.
        offset: u64,
        /// Length.
        length: u32,
        /// NBD_CMD_FLAG_FUA.
        fua: bool,
    },
    /// NBD_CMD_WRITE_ZEROES.
    WriteZeroes {
        /// Offset.
        offset: u64,
        /// Length.
        length: u32,
        /// NBD_CMD_FLAG_NO_HOLE: the server must not punch a hole.
        no_hole: bool,
        /// NBD_CMD_FLAG_FUA.
        fua: bool,
    },
    /// NBD_CMD_BLOCK_STATUS for `base:allocation`.
    BlockStatus {
        /// Offset.
        offset: u64,
        /// Length.
        length: u32,
        /// NBD_CMD_FLAG_REQ_ONE.
        req_one: bool,
    },
}

/// An error the server returned for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// The error number.
    pub error: NbdError,
    /// The server's message (structured replies only; may be empty).
    pub message: String,
    /// Where the error occurred (NBD_REPLY_TYPE_ERROR_OFFSET).
    pub offset: Option<u64>,
}

/// The successful result of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyData {
    /// A command without reply data.
    None,
    /// The read's buffer: what it held before ([`Request::ReadInto`]), then
    /// exactly the requested length of data (holes zero-filled).
    Read(BytesMut),
    /// Block status descriptors for `base:allocation`, starting at the request offset.
    BlockStatus(Vec<BlockDescriptor>),
}

/// A complete reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The request's cookie.
    pub cookie: u64,
    /// The request's command.
    pub command: Command,
    /// The request's offset.
    pub offset: u64,
    /// The request's length.
    pub length: u32,
    /// The outcome.
    pub result: Result<ReplyData, ServerError>,
}

/// The most structured reply chunks accepted for one request of `length`
/// bytes: [`CHUNK_ALLOWANCE`] plus one per [`MIN_AVERAGE_CHUNK`] bytes.
/// Servers that split reads at extent boundaries of 512 bytes or more stay
/// within it; a server sending more chunks gets
/// [`ProtocolError::TooManyChunks`].
pub fn max_reply_chunks(length: u32) -> u32 {
    CHUNK_ALLOWANCE + length / MIN_AVERAGE_CHUNK
}

/// A request's buffer, lent to the driver to receive read data straight
/// from the socket ([`Client::lend_payload`](super::Client::lend_payload)):
/// append up to [`Lent::want`] bytes through [`Lent::room`], then give it
/// back with [`Client::return_payload`](super::Client::return_payload).
#[derive(Debug)]
pub struct Lent {
    cookie: u64,
    buf: BytesMut,
    /// `buf.len()` when lent.
    start: usize,
    /// Bytes of the payload still to come when lent.
    remaining: usize,
}

impl Lent {
    /// The cookie of the request whose data this is.
    pub fn cookie(&self) -> u64 {
        self.cookie
    }

    /// Bytes of the payload still to append.
    pub fn want(&self) -> usize {
        self.remaining - self.received()
    }

    /// Where to append them (e.g. `read_buf(&mut lent.room())`): the
    /// buffer, limited to [`Lent::want`] bytes.
    pub fn room(&mut self) -> Limit<&mut BytesMut> {
        let want = self.want();
        (&mut self.buf).limit(want)
    }

    fn received(&self) -> usize {
        self.buf.len() - self.start
    }
}

/// A read's data on its way into the request's buffer.
#[derive(Debug)]
struct Incoming {
    cookie: u64,
    /// Index in the buffer where the next byte goes.
    at: usize,
    /// Bytes still to come.
    remaining: usize,
    /// The reply is complete after this data (a simple reply, or a chunk
    /// with NBD_REPLY_FLAG_DONE).
    completes: bool,
}

/// What one step of the transmission phase did.
#[derive(Debug)]
pub(super) enum Step {
    /// More input is needed.
    Wait,
    /// A frame was consumed; call again.
    Continue,
    /// A frame was consumed and completed this reply.
    Reply(Reply),
}

/// Per-request reply state.
#[derive(Debug)]
struct InFlight {
    command: Command,
    offset: u64,
    length: u32,
    req_one: bool,
    /// Structured chunks received so far.
    chunks: u32,
    error: Option<ServerError>,
    /// Read: where the data goes, from index `base` on; bytes up to its
    /// length are data received or zeroes (holes and gaps not received yet).
    dest: BytesMut,
    base: usize,
    /// Read: ranges covered by data and holes, adjacent ones merged (start -> end).
    ranges: BTreeMap<u64, u64>,
    covered: u64,
    /// Block status: the descriptors of the negotiated context.
    status: Option<Vec<BlockDescriptor>>,
}

/// The transmission phase: request encoding and reply validation.
#[derive(Debug)]
pub(super) struct Transmission {
    pub(super) neg: Negotiated,
    next_cookie: u64,
    in_flight: HashMap<u64, InFlight>,
    /// NBD_CMD_DISC was queued; no request may follow.
    pub(super) closing: bool,
    /// Total bytes the frame being received needs.
    pub(super) wanted: usize,
    /// Read data being received.
    incoming: Option<Incoming>,
    /// Its buffer is lent to the driver.
    lent: bool,
}

impl Transmission {
    pub(super) fn new(neg: Negotiated) -> Self {
        Transmission {
            neg,
            next_cookie: 1,
            in_flight: HashMap::new(),
            closing: false,
            wanted: SIMPLE_REPLY_HEADER_LEN,
            incoming: None,
            lent: false,
        }
    }

    pub(super) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    pub(super) fn pending(&self) -> Vec<(u64, Command, u64)> {
        self.in_flight.iter().map(|(c, f)| (*c, f.command, f.offset)).collect()
    }

    /// The header of NBD_CMD_DISC (spec "Terminating the transmission phase").
    pub(super) fn disconnect(&mut self) -> Option<RequestHeader> {
        if self.closing {
            return None;
        }
        self.closing = true;
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        Some(RequestHeader { flags: 0, command: Command::Disc, cookie, offset: 0, length: 0 })
    }

    fn check_range(&self, offset: u64, length: u64) -> Result<(), RequestError> {
        if length == 0 {
            return Err(RequestError::Empty);
        }
        let end = offset.checked_add(length);
        if end.is_none_or(|e| e > self.neg.size) {
            return Err(RequestError::OutOfRange { offset, length, size: self.neg.size });
        }
        let min = u64::from(self.neg.block_sizes.minimum);
        if !offset.is_multiple_of(min) || !length.is_multiple_of(min) {
            // The last partial block of an export whose size is not a multiple is allowed.
            if !(offset.is_multiple_of(min) && offset + length == self.neg.size) {
                return Err(RequestError::Misaligned {
                    offset,
                    length,
                    minimum: self.neg.block_sizes.minimum,
                });
            }
        }
        Ok(())
    }

    fn check_payload(&self, length: u64) -> Result<(), RequestError> {
        if length > u64::from(self.neg.block_sizes.maximum) {
            return Err(RequestError::TooLarge { length, max: self.neg.block_sizes.maximum });
        }
        Ok(())
    }

    fn writable(&self) -> Result<(), RequestError> {
        if self.neg.read_only() { Err(RequestError::ReadOnly) } else { Ok(()) }
    }

    fn fua_flag(&self, fua: bool) -> Result<u16, RequestError> {
        if !fua {
            return Ok(0);
        }
        if !self.neg.has(tflags::SEND_FUA) {
            return Err(RequestError::Unsupported("NBD_CMD_FLAG_FUA"));
        }
        Ok(cflags::FUA)
    }

    /// Checks `req` (spec "Request types") and records it as in flight.
    pub(super) fn prepare(&mut self, req: Request) -> Result<(RequestHeader, Option<Bytes>), RequestError> {
        if self.closing {
            return Err(RequestError::NotReady("disconnecting"));
        }
        let mut dest = BytesMut::new();
        let (command, flags, offset, length, data, req_one) = match req {
            Request::Read { offset, length } => {
                self.check_range(offset, length.into())?;
                self.check_payload(length.into())?;
                (Command::Read, 0, offset, length, None, false)
            }
            Request::ReadInto { offset, length, buf } => {
                self.check_range(offset, length.into())?;
                self.check_payload(length.into())?;
                dest = buf;
                (Command::Read, 0, offset, length, None, false)
            }
            Request::Write { offset, data, fua } => {
                self.writable()?;
                let length = data.len() as u64;
                self.check_payload(length)?;
                self.check_range(offset, length)?;
                let flags = self.fua_flag(fua)?;
                (Command::Write, flags, offset, length as u32, Some(data), false)
            }
            Request::Flush => {
                if !self.neg.has(tflags::SEND_FLUSH) {
                    return Err(RequestError::Unsupported("NBD_CMD_FLUSH"));
                }
                (Command::Flush, 0, 0, 0, None, false)
            }
            Request::Trim { offset, length, fua } => {
                self.writable()?;
                if !self.neg.has(tflags::SEND_TRIM) {
                    return Err(RequestError::Unsupported("NBD_CMD_TRIM"));
                }
                self.check_range(offset, length.into())?;
                (Command::Trim, self.fua_flag(fua)?, offset, length, None, false)
            }
            Request::WriteZeroes { offset, length, no_hole, fua } => {
                self.writable()?;
                if !self.neg.has(tflags::SEND_WRITE_ZEROES) {
                    return Err(RequestError::Unsupported("NBD_CMD_WRITE_ZEROES"));
                }
                self.check_range(offset, length.into())?;
                let flags = self.fua_flag(fua)? | if no_hole { cflags::NO_HOLE } else { 0 };
                (Command::WriteZeroes, flags, offset, length, None, false)
            }
            Request::BlockStatus { offset, length, req_one } => {
                if self.neg.base_allocation.is_none() {
                    return Err(RequestError::Unsupported(
                        "NBD_CMD_BLOCK_STATUS (base:allocation not negotiated)",
                    ));
                }
                self.check_range(offset, length.into())?;
                let flags = if req_one { cflags::REQ_ONE } else { 0 };
                (Command::BlockStatus, flags, offset, length, None, req_one)
            }
        };
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.in_flight.insert(
            cookie,
            InFlight {
                command,
                offset,
                length,
                req_one,
                chunks: 0,
                error: None,
                base: dest.len(),
                dest,
                ranges: BTreeMap::new(),
                covered: 0,
                status: None,
            },
        );
        Ok((RequestHeader { flags, command, cookie, offset, length }, data))
    }

    fn unknown(&self, cookie: u64) -> ProtocolError {
        if cookie != 0 && cookie < self.next_cookie {
            ProtocolError::ReplyAfterDone(cookie)
        } else {
            ProtocolError::UnknownCookie(cookie)
        }
    }

    /// Consumes one reply frame if complete, or read data.
    pub(super) fn step(&mut self, buf: &mut BytesMut) -> Result<Step, ProtocolError> {
        if self.lent {
            // The driver receives the data itself until it returns the buffer.
            return Ok(Step::Wait);
        }
        if self.incoming.is_some() {
            return self.receive(buf);
        }
        if buf.len() < 4 {
            self.wanted = 4;
            return Ok(Step::Wait);
        }
        let magic = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        match magic {
            SIMPLE_REPLY_MAGIC => self.simple(buf),
            STRUCTURED_REPLY_MAGIC => self.structured(buf),
            got => Err(DecodeError::BadMagic {
                what: "reply",
                expected: SIMPLE_REPLY_MAGIC.into(),
                got: got.into(),
            }
            .into()),
        }
    }

    /// A simple reply (spec "Simple reply message").
    fn simple(&mut self, buf: &mut BytesMut) -> Result<Step, ProtocolError> {
        if buf.len() < SIMPLE_REPLY_HEADER_LEN {
            self.wanted = SIMPLE_REPLY_HEADER_LEN;
            return Ok(Step::Wait);
        }
        let hdr =
            SimpleReplyHeader::decode(&mut Reader::new(&buf[..SIMPLE_REPLY_HEADER_LEN], "simple reply"))?;
        let f = self.in_flight.get(&hdr.cookie).ok_or_else(|| self.unknown(hdr.cookie))?;
        if f.chunks > 0 {
            return Err(ProtocolError::SimpleAfterChunks(hdr.cookie));
        }
        if hdr.error == 0 && f.command == Command::BlockStatus {
            return Err(ProtocolError::SimpleNotAllowed(Command::BlockStatus));
        }
        let command = f.command;
        self.wanted = SIMPLE_REPLY_HEADER_LEN;
        buf.advance(SIMPLE_REPLY_HEADER_LEN);
        if hdr.error != 0 {
            let f = self.in_flight.remove(&hdr.cookie).expect("looked up above");
            let error =
                ServerError { error: NbdError::from_code(hdr.error), message: String::new(), offset: None };
            return Ok(Step::Reply(Reply {
                cookie: hdr.cookie,
                command: f.command,
                offset: f.offset,
                length: f.length,
                result: Err(error),
            }));
        }
        if command != Command::Read {
            return self.complete(hdr.cookie);
        }
        // The whole request's data follows the header.
        let f = self.in_flight.get_mut(&hdr.cookie).expect("looked up above");
        f.covered = f.length.into();
        let (at, len) = (f.base, f.length as usize);
        self.start_data(hdr.cookie, at, len, true);
        self.receive(buf)
    }

    /// One structured reply chunk (spec "Structured reply chunk message",
    /// "Structured reply types").
    fn structured(&mut self, buf: &mut BytesMut) -> Result<Step, ProtocolError> {
        if !self.neg.structured_replies {
            return Err(ProtocolError::StructuredNotNegotiated);
        }
        if buf.len() < STRUCTURED_REPLY_HEADER_LEN {
            self.wanted = STRUCTURED_REPLY_HEADER_LEN;
            return Ok(Step::Wait);
        }
        let hdr =
            ChunkHeader::decode(&mut Reader::new(&buf[..STRUCTURED_REPLY_HEADER_LEN], "structured reply"))?;
        let context = self.neg.base_allocation;
        let f = self.in_flight.get(&hdr.cookie).ok_or_else(|| self.unknown(hdr.cookie))?;
        let unexpected = ProtocolError::UnexpectedChunk { command: f.command, kind: hdr.kind };
        let max: u32 = match hdr.kind {
            chunk::NONE => 0,
            chunk::OFFSET_DATA if f.command == Command::Read => 8 + f.length,
            chunk::OFFSET_HOLE if f.command == Command::Read => 12,
            chunk::BLOCK_STATUS if f.command == Command::BlockStatus => MAX_BLOCK_STATUS_CHUNK,
            k if k & chunk::ERR_BIT != 0 => 6 + MAX_STRING as u32 + 8,
            _ => return Err(unexpected),
        };
        if hdr.length > max {
            return Err(ProtocolError::TooLong {
                what: "structured reply chunk",
                len: hdr.length.into(),
                max: max.into(),
            });
        }
        // Refused before its payload is buffered.
        let max_chunks = max_reply_chunks(f.length);
        if f.chunks >= max_chunks {
            return Err(ProtocolError::TooManyChunks {
                cookie: hdr.cookie,
                command: f.command,
                length: f.length,
                max: max_chunks,
            });
        }
        if hdr.kind == chunk::OFFSET_DATA {
            return self.data_chunk(buf, hdr);
        }
        let total = STRUCTURED_REPLY_HEADER_LEN + hdr.length as usize;
        if buf.len() < total {
            self.wanted = total;
            return Ok(Step::Wait);
        }
        self.wanted = SIMPLE_REPLY_HEADER_LEN;
        let f = self.in_flight.get_mut(&hdr.cookie).expect("looked up above");
        f.chunks += 1;
        buf.advance(STRUCTURED_REPLY_HEADER_LEN);
        let payload = buf.split_to(hdr.length as usize);
        let req_end = f.offset + u64::from(f.length);
        let out_of_range = |offset: u64, length: u64| ProtocolError::ChunkOutOfRange {
            offset,
            length,
            req_offset: f.offset,
            req_length: f.length,
        };
        match hdr.kind {
            chunk::NONE => {
                if !hdr.done() {
                    return Err(ProtocolError::BadNoneChunk);
                }
            }
            chunk::OFFSET_HOLE => {
                let h = OffsetHole::decode_exact(&payload, "NBD_REPLY_TYPE_OFFSET_HOLE")?;
                let len = u64::from(h.length);
                if h.offset < f.offset || h.offset.checked_add(len).is_none_or(|e| e > req_end) {
                    return Err(out_of_range(h.offset, len));
                }
                insert_range(f, h.offset - f.offset, len)?;
            }
            chunk::BLOCK_STATUS => {
                let s = BlockStatusChunk::decode_exact(&payload, "NBD_REPLY_TYPE_BLOCK_STATUS")?;
                if Some(s.context) != context {
                    return Err(ProtocolError::UnknownContext(s.context));
                }
                if f.status.is_some() {
                    return Err(ProtocolError::DuplicateBlockStatus(s.context));
                }
                if f.req_one {
                    if s.descriptors.len() != 1 || s.descriptors[0].length > f.length {
                        return Err(ProtocolError::BadBlockStatus(
                            "REQ_ONE reply must have one descriptor within the request".into(),
                        ));
                    }
                } else {
                    let mut sum = 0u64;
                    for d in &s.descriptors[..s.descriptors.len() - 1] {
                        sum += u64::from(d.length);
                        if sum >= u64::from(f.length) {
                            return Err(ProtocolError::BadBlockStatus(
                                "descriptors continue past the requested length".into(),
                            ));
                        }
                    }
                }
                f.status = Some(s.descriptors);
            }
            chunk::ERROR_OFFSET => {
                let e = ErrorOffsetChunk::decode_exact(&payload, "NBD_REPLY_TYPE_ERROR_OFFSET")?;
                if e.offset < f.offset || e.offset >= req_end.max(f.offset + 1) {
                    return Err(out_of_range(e.offset, 1));
                }
                f.error.get_or_insert(ServerError {
                    error: NbdError::from_code(e.error),
                    message: e.message,
                    offset: Some(e.offset),
                });
            }
            _ => {
                // NBD_REPLY_TYPE_ERROR and unknown error types share the same head.
                let mut r = Reader::new(&payload, "structured error chunk");
                let e = ErrorChunk::decode(&mut r)?;
                if hdr.kind == chunk::ERROR {
                    r.finish()?;
                }
                f.error.get_or_insert(ServerError {
                    error: NbdError::from_code(e.error),
                    message: e.message,
                    offset: None,
                });
            }
        }
        if hdr.done() {
            return self.complete(hdr.cookie);
        }
        Ok(Step::Continue)
    }

    /// NBD_REPLY_TYPE_OFFSET_DATA: once its header and offset are here,
    /// the data goes straight to its place in the request's buffer.
    fn data_chunk(&mut self, buf: &mut BytesMut, hdr: ChunkHeader) -> Result<Step, ProtocolError> {
        if hdr.length < 9 {
            return Err(DecodeError::Invalid {
                what: "NBD_REPLY_TYPE_OFFSET_DATA",
                detail: format!("payload of {} bytes", hdr.length),
            }
            .into());
        }
        let head = STRUCTURED_REPLY_HEADER_LEN + 8;
        if buf.len() < head {
            self.wanted = head;
            return Ok(Step::Wait);
        }
        let offset = u64::from_be_bytes(buf[STRUCTURED_REPLY_HEADER_LEN..head].try_into().expect("8 bytes"));
        let f = self.in_flight.get_mut(&hdr.cookie).expect("looked up by the caller");
        let len = u64::from(hdr.length - 8);
        let req_end = f.offset + u64::from(f.length);
        if offset < f.offset || offset.checked_add(len).is_none_or(|e| e > req_end) {
            return Err(ProtocolError::ChunkOutOfRange {
                offset,
                length: len,
                req_offset: f.offset,
                req_length: f.length,
            });
        }
        let rel = offset - f.offset;
        insert_range(f, rel, len)?;
        f.chunks += 1;
        buf.advance(head);
        // Within the request: rel + len <= length, a u32.
        let at = f.base + rel as usize;
        self.start_data(hdr.cookie, at, len as usize, hdr.done());
        self.receive(buf)
    }

    /// Read data of `len` bytes for `cookie` begins; it goes to index `at`
    /// of the request's buffer (zeroes fill any gap before it).
    fn start_data(&mut self, cookie: u64, at: usize, len: usize, completes: bool) {
        let f = self.in_flight.get_mut(&cookie).expect("in flight");
        // Room for the whole request, once: appending never reallocates.
        let end = f.base + f.length as usize;
        f.dest.reserve(end.saturating_sub(f.dest.len()));
        if f.dest.len() < at {
            f.dest.resize(at, 0);
        }
        self.incoming = Some(Incoming { cookie, at, remaining: len, completes });
        self.wanted = len;
    }

    /// Moves read data from `buf` into its place.
    fn receive(&mut self, buf: &mut BytesMut) -> Result<Step, ProtocolError> {
        let Some(inc) = self.incoming.as_mut() else { return Ok(Step::Continue) };
        let n = inc.remaining.min(buf.len());
        if n > 0 {
            let f = self.in_flight.get_mut(&inc.cookie).ok_or(ProtocolError::UnknownCookie(inc.cookie))?;
            place(&mut f.dest, inc.at, &buf[..n]);
            buf.advance(n);
            inc.at += n;
            inc.remaining -= n;
        }
        if inc.remaining > 0 {
            self.wanted = inc.remaining;
            return Ok(Step::Wait);
        }
        self.data_done()
    }

    /// The read data being received is complete.
    fn data_done(&mut self) -> Result<Step, ProtocolError> {
        self.wanted = SIMPLE_REPLY_HEADER_LEN;
        match self.incoming.take() {
            Some(inc) if inc.completes => self.complete(inc.cookie),
            _ => Ok(Step::Continue),
        }
    }

    /// The request's buffer, if read data being received can be appended to
    /// it straight from the socket.
    pub(super) fn lend(&mut self) -> Option<Lent> {
        let inc = self.incoming.as_ref().filter(|i| i.remaining > 0 && !self.lent)?;
        let f = self.in_flight.get_mut(&inc.cookie)?;
        // Data that overwrites zeroes of an earlier gap (chunks out of
        // order) takes the copying path.
        if inc.at != f.dest.len() {
            return None;
        }
        self.lent = true;
        let buf = std::mem::take(&mut f.dest);
        Some(Lent { cookie: inc.cookie, start: buf.len(), buf, remaining: inc.remaining })
    }

    /// The buffer comes back from the driver with `lent.received()` more bytes.
    pub(super) fn give_back(&mut self, lent: Lent) -> Result<Option<Reply>, ProtocolError> {
        let n = lent.received();
        let inc = match self.incoming.as_mut() {
            Some(inc) if self.lent && inc.cookie == lent.cookie && n <= inc.remaining => inc,
            _ => return Err(ProtocolError::UnknownCookie(lent.cookie)),
        };
        self.lent = false;
        let f = self.in_flight.get_mut(&inc.cookie).ok_or(ProtocolError::UnknownCookie(inc.cookie))?;
        f.dest = lent.buf;
        inc.at += n;
        inc.remaining -= n;
        if inc.remaining > 0 {
            self.wanted = inc.remaining;
            return Ok(None);
        }
        match self.data_done()? {
            Step::Reply(r) => Ok(Some(r)),
            Step::Wait | Step::Continue => Ok(None),
        }
    }

    /// The last chunk of `cookie`'s reply arrived: the reply is complete.
    fn complete(&mut self, cookie: u64) -> Result<Step, ProtocolError> {
        let f = self.in_flight.remove(&cookie).expect("in flight");
        let result = finish(f.command, f.length, f.error, f.dest, f.base, f.covered, f.status)?;
        Ok(Step::Reply(Reply { cookie, command: f.command, offset: f.offset, length: f.length, result }))
    }
}

/// Writes `data` at index `at` of `dest`: over zeroes already there, then
/// appended.
fn place(dest: &mut BytesMut, at: usize, data: &[u8]) {
    if dest.len() < at {
        dest.resize(at, 0);
    }
    let inside = (dest.len() - at).min(data.len());
    dest[at..at + inside].copy_from_slice(&data[..inside]);
    dest.extend_from_slice(&data[inside..]);
}

/// Records `[start, start + len)` (relative to the request) as covered,
/// merged with the ranges it touches; overlapping ranges are an error.
fn insert_range(f: &mut InFlight, start: u64, len: u64) -> Result<(), ProtocolError> {
    let end = start + len;
    let prev = f.ranges.range(..=start).next_back().map(|(&s, &e)| (s, e));
    let next = f.ranges.range(start..).next().map(|(&s, &e)| (s, e));
    // The chunk must not overlap the closest ranges on either side.
    if prev.is_some_and(|(_, pend)| pend > start) || next.is_some_and(|(nstart, _)| nstart < end) {
        return Err(ProtocolError::OverlappingChunk(f.offset + start));
    }
    let mut merged = (start, end);
    if let Some((pstart, pend)) = prev
        && pend == start
    {
        f.ranges.remove(&pstart);
        merged.0 = pstart;
    }
    if let Some((nstart, nend)) = next
        && nstart == end
    {
        f.ranges.remove(&nstart);
        merged.1 = nend;
    }
    f.ranges.insert(merged.0, merged.1);
    f.covered += len;
    Ok(())
}

fn finish(
    command: Command,
    length: u32,
    error: Option<ServerError>,
    mut dest: BytesMut,
    base: usize,
    covered: u64,
    status: Option<Vec<BlockDescriptor>>,
) -> Result<Result<ReplyData, ServerError>, ProtocolError> {
    if let Some(e) = error {
        return Ok(Err(e));
    }
    Ok(Ok(match command {
        Command::Read => {
            if covered != u64::from(length) {
                return Err(ProtocolError::LengthMismatch { expected: length.into(), got: covered });
            }
            // Holes after the last data chunk.
            dest.resize(base + length as usize, 0);
            ReplyData::Read(dest)
        }
        Command::BlockStatus => ReplyData::BlockStatus(status.ok_or(ProtocolError::MissingBlockStatus)?),
        _ => ReplyData::None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_in_flight(length: u32) -> InFlight {
        InFlight {
            command: Command::Read,
            offset: 4096,
            length,
            req_one: false,
            chunks: 0,
            error: None,
            dest: BytesMut::new(),
            base: 0,
            ranges: BTreeMap::new(),
            covered: 0,
            status: None,
        }
    }

    #[test]
    fn adjacent_ranges_merge_and_overlaps_are_refused() {
        let mut f = read_in_flight(100);
        insert_range(&mut f, 10, 10).unwrap();
        insert_range(&mut f, 30, 10).unwrap();
        assert_eq!(f.ranges.len(), 2);
        insert_range(&mut f, 20, 10).unwrap(); // bridges both
        assert_eq!(f.ranges.iter().collect::<Vec<_>>(), vec![(&10, &40)]);
        for bad in [(5, 6), (39, 2), (15, 1), (0, 100)] {
            assert_eq!(
                insert_range(&mut f, bad.0, bad.1),
                Err(ProtocolError::OverlappingChunk(4096 + bad.0)),
                "{bad:?}"
            );
        }
        insert_range(&mut f, 40, 60).unwrap();
        insert_range(&mut f, 0, 10).unwrap();
        assert_eq!(f.ranges.iter().collect::<Vec<_>>(), vec![(&0, &100)]);
        assert_eq!(f.covered, 100);
    }

    #[test]
    fn chunk_bound_grows_with_the_request() {
        assert_eq!(max_reply_chunks(0), CHUNK_ALLOWANCE);
        assert_eq!(max_reply_chunks(1), CHUNK_ALLOWANCE);
        assert_eq!(max_reply_chunks(32 << 20), CHUNK_ALLOWANCE + (32 << 20) / MIN_AVERAGE_CHUNK);
    }
}
