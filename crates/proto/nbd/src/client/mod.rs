//! The client side, in two parts with one output queue:
//!
//! - `handshake.rs`: the greeting and option haggling
//!   (spec "Handshake": "Newstyle negotiation", "Fixed newstyle
//!   negotiation", "Option haggling");
//! - `transmission.rs`: requests, simple and structured
//!   replies (spec "Transmission").
//!
//! [`Client`] holds the phase (`Phase`: one variant per protocol phase) and
//! hands input to the part in charge. Bytes from the server go in through
//! [`Client::handle_input`] (copied into an internal buffer) or
//! [`Client::handle_input_buf`] (frames consumed from the caller's buffer).
//! A read's data goes into one buffer per request (the caller's with
//! [`Request::ReadInto`]); once the header in front of it has been decoded,
//! [`Client::lend_payload`] hands that buffer to the driver, which reads the
//! data from the socket straight into it and gives it back with
//! [`Client::return_payload`], so read data is never copied in user space.
//! Bytes for the server come out of [`Client::poll_transmit`] as segments to
//! write in order (a large WRITE payload is its own segment, never copied),
//! and what happened comes out of [`Client::poll_event`].

mod handshake;
mod transmission;

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

pub use self::handshake::{ClientConfig, Goal, Negotiated};
use self::handshake::{Handshake, Progress};
pub use self::transmission::{Lent, Reply, ReplyData, Request, ServerError, max_reply_chunks};
use self::transmission::{Step, Transmission};
use crate::codec::Codec;
use crate::error::{ClientError, ProtocolError, RequestError};
use crate::output::OutQueue;
pub use crate::wire::BlockSizes;
use crate::wire::{Command, ServerReply};

/// What the client reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake finished and transmission began ([`Goal::Go`]).
    Ready(Negotiated),
    /// The export's information ([`Goal::Info`]); the client sent NBD_OPT_ABORT.
    Info(Negotiated),
    /// The server's exports ([`Goal::List`]); the client sent NBD_OPT_ABORT.
    Exports(Vec<ServerReply>),
    /// The server acknowledged NBD_OPT_STARTTLS ([`ClientConfig::tls`]):
    /// send what [`Client::poll_transmit`] holds in clear text, run the TLS
    /// handshake as the client on the same connection, then call
    /// [`Client::tls_established`] and go on over TLS.
    StartTls,
    /// A request completed.
    Reply(Reply),
}

/// The connection's phases (spec "Protocol phases").
#[derive(Debug)]
enum Phase {
    /// Greeting and option haggling (spec "Handshake").
    Handshake(Handshake),
    /// Requests and replies (spec "Transmission").
    Transmission(Transmission),
    /// NBD_OPT_ABORT sent after NBD_OPT_INFO/LIST (spec "Termination of the
    /// session during option haggling"); input is ignored.
    Closed,
    /// A fatal error happened; the error is repeated on further input.
    Failed(ClientError),
}

/// The NBD client state machine.
#[derive(Debug)]
pub struct Client {
    phase: Phase,
    inbuf: BytesMut,
    out: OutQueue,
    events: VecDeque<Event>,
}

impl Client {
    /// A client that waits for the server's greeting.
    pub fn new(cfg: ClientConfig) -> Self {
        Client {
            phase: Phase::Handshake(Handshake::new(cfg)),
            inbuf: BytesMut::new(),
            out: OutQueue::default(),
            events: VecDeque::new(),
        }
    }

    /// Feeds bytes received from the server (copied into an internal buffer).
    ///
    /// # Errors
    /// The first fatal error; the same error is returned for any later input.
    pub fn handle_input(&mut self, data: &[u8]) -> Result<(), ClientError> {
        let mut buf = std::mem::take(&mut self.inbuf);
        buf.extend_from_slice(data);
        let r = self.handle_input_buf(&mut buf);
        self.inbuf = buf;
        r
    }

    /// Consumes every complete frame at the front of `buf`, leaving a partial
    /// frame in place for the next call; read data is copied from `buf` to
    /// its request's buffer as far as it is there (see
    /// [`Client::lend_payload`] to receive it without that copy). Use
    /// [`Client::bytes_wanted`] to size the next read. While a buffer is
    /// lent, input waits in `buf` until it is returned.
    ///
    /// # Errors
    /// The first fatal error; the same error is returned for any later input.
    pub fn handle_input_buf(&mut self, buf: &mut BytesMut) -> Result<(), ClientError> {
        if let Phase::Failed(e) = &self.phase {
            return Err(e.clone());
        }
        loop {
            match self.step(buf) {
                Ok(true) => continue,
                Ok(false) => return Ok(()),
                Err(e) => {
                    self.phase = Phase::Failed(e.clone());
                    return Err(e);
                }
            }
        }
    }

    /// How many bytes the frame being received needs in total (or the read
    /// data still to come), to size buffer reservations.
    pub fn bytes_wanted(&self) -> usize {
        match &self.phase {
            Phase::Handshake(h) => h.wanted,
            Phase::Transmission(t) => t.wanted,
            Phase::Closed | Phase::Failed(_) => 1,
        }
    }

    /// The buffer of the request whose read data comes next, when the input
    /// given so far ends inside that data: the driver appends the next
    /// [`Lent::want`] bytes it reads from the server to [`Lent::room`] and
    /// then calls [`Client::return_payload`] (no other input in between).
    /// `None` when no data is due, a buffer is already lent, or the data
    /// lands inside the buffer (a chunk before an earlier one), where
    /// [`Client::handle_input_buf`] places it.
    pub fn lend_payload(&mut self) -> Option<Lent> {
        match &mut self.phase {
            Phase::Transmission(t) => t.lend(),
            _ => None,
        }
    }

    /// Takes back a buffer from [`Client::lend_payload`] with the bytes the
    /// driver appended; completes the reply when its data is all there.
    ///
    /// # Errors
    /// The first fatal error (as [`Client::handle_input_buf`]); a buffer
    /// that was not lent, or with more bytes than wanted, is a protocol error.
    pub fn return_payload(&mut self, lent: Lent) -> Result<(), ClientError> {
        let t = match &mut self.phase {
            Phase::Transmission(t) => t,
            Phase::Failed(e) => return Err(e.clone()),
            _ => return Err(ProtocolError::UnknownCookie(lent.cookie()).into()),
        };
        match t.give_back(lent) {
            Ok(Some(r)) => {
                self.events.push_back(Event::Reply(r));
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => {
                let e = ClientError::from(e);
                self.phase = Phase::Failed(e.clone());
                Err(e)
            }
        }
    }

    /// The next segment of bytes to send to the server.
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        self.out.poll()
    }

    /// Whether [`Client::poll_transmit`] has something.
    pub fn has_transmit(&self) -> bool {
        !self.out.is_empty()
    }

    /// Bytes queued for the server and not yet taken by [`Client::poll_transmit`].
    pub fn queued_bytes(&self) -> usize {
        self.out.len()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The handshake result, once in transmission.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        match &self.phase {
            Phase::Transmission(t) => Some(&t.neg),
            _ => None,
        }
    }

    /// Requests whose reply has not completed.
    pub fn in_flight(&self) -> usize {
        match &self.phase {
            Phase::Transmission(t) => t.in_flight(),
            _ => 0,
        }
    }

    /// Whether the connection is usable for requests.
    pub fn is_transmission(&self) -> bool {
        matches!(self.phase, Phase::Transmission(_))
    }

    /// The fatal error, if one happened.
    pub fn error(&self) -> Option<&ClientError> {
        match &self.phase {
            Phase::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// The TLS handshake that followed [`Event::StartTls`] succeeded: the
    /// handshake goes on (its options are queued for sending over TLS).
    pub fn tls_established(&mut self) {
        if let Phase::Handshake(h) = &mut self.phase {
            h.tls_established(&mut self.out);
        }
    }

    /// Whether the client waits for the driver's TLS handshake.
    pub fn awaiting_tls(&self) -> bool {
        matches!(&self.phase, Phase::Handshake(h) if h.awaiting_tls())
    }

    /// Queues a request and returns its cookie.
    ///
    /// # Errors
    /// [`RequestError`] if the request is refused locally (not connected,
    /// read-only, unsupported, out of range, above the maximum payload,
    /// misaligned); nothing is sent then.
    pub fn send_request(&mut self, req: Request) -> Result<u64, RequestError> {
        let t = match &mut self.phase {
            Phase::Transmission(t) => t,
            Phase::Failed(_) => return Err(RequestError::NotReady("connection failed")),
            Phase::Closed => return Err(RequestError::NotReady("connection closed")),
            Phase::Handshake(_) => return Err(RequestError::NotReady("handshake not finished")),
        };
        let (hdr, data) = t.prepare(req)?;
        self.out.frame(|b| hdr.encode(b));
        if let Some(data) = data {
            self.out.payload(data);
        }
        Ok(hdr.cookie)
    }

    /// Queues NBD_CMD_DISC; no request may follow. Replies to requests in
    /// flight are still processed (send this once they completed).
    ///
    /// # Errors
    /// [`RequestError::NotReady`] outside transmission.
    pub fn disconnect(&mut self) -> Result<(), RequestError> {
        match &mut self.phase {
            Phase::Transmission(t) => {
                if let Some(hdr) = t.disconnect() {
                    self.out.frame(|b| hdr.encode(b));
                }
                Ok(())
            }
            _ => Err(RequestError::NotReady("not in transmission")),
        }
    }

    /// Cookies, offsets and commands of every request still in flight (for
    /// failing them when the connection dies).
    pub fn pending(&self) -> Vec<(u64, Command, u64)> {
        match &self.phase {
            Phase::Transmission(t) => t.pending(),
            _ => Vec::new(),
        }
    }

    /// One step: consumes one frame if complete. Ok(false) when more input is needed.
    fn step(&mut self, buf: &mut BytesMut) -> Result<bool, ClientError> {
        match &mut self.phase {
            Phase::Handshake(h) => {
                let (event, next) = match h.step(buf, &mut self.out)? {
                    Progress::Continue => return Ok(true),
                    Progress::Wait => return Ok(false),
                    Progress::StartTls => {
                        self.events.push_back(Event::StartTls);
                        // The next call checks nothing followed the ACK.
                        return Ok(true);
                    }
                    Progress::Ready(neg) => {
                        (Event::Ready(neg.clone()), Phase::Transmission(Transmission::new(neg)))
                    }
                    Progress::Info(neg) => (Event::Info(neg), Phase::Closed),
                    Progress::Exports(list) => (Event::Exports(list), Phase::Closed),
                };
                self.events.push_back(event);
                self.phase = next;
                Ok(true)
            }
            Phase::Transmission(t) => match t.step(buf)? {
                Step::Wait => Ok(false),
                Step::Continue => Ok(true),
                Step::Reply(r) => {
                    self.events.push_back(Event::Reply(r));
                    Ok(true)
                }
            },
            Phase::Closed => {
                // After NBD_OPT_ABORT the server may ACK; anything else is ignored.
                buf.clear();
                Ok(false)
            }
            Phase::Failed(e) => Err(e.clone()),
        }
    }
}
