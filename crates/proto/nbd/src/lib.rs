//! The NBD protocol (client and server), sans-I/O.
//!
//! This crate does no network I/O, owns no sockets, spawns no tasks and
//! reads no clock. It turns bytes into events and requests into bytes; a
//! driver (`wanblk-nbd`, over tokio) moves the bytes:
//!
//! ```text
//!            socket reads                         socket writes
//!                 |                                     ^
//!                 v                                     |
//!   handle_input(&[u8]) / handle_input_buf(&mut BytesMut)   poll_transmit() -> Bytes segments
//!   lend_payload() -> Lent / return_payload(Lent)       ^
//!   (read data straight into the request's buffer)      |
//!                 |                                     |
//!          +------+-------------------------------------+------+
//!          |  Client / Server state machine (this crate)       |
//!          |  Greeting -> Options -> Transmission -> Closed    |
//!          +------+-------------------------------------+------+
//!                 |                                     ^
//!                 v                                     |
//!           poll_event() -> Event               send_request() / reply_*()
//! ```
//!
//! - [`wire`]: every wire type, each implementing the one [`Codec`] trait;
//!   decoders return a typed [`DecodeError`] for malformed input and bound
//!   every length they allocate from.
//! - [`client`]: the client in two parts, `client::handshake` (fixed-newstyle
//!   negotiation: NBD_OPT_STRUCTURED_REPLY, NBD_OPT_SET_META_CONTEXT
//!   `base:allocation`, NBD_OPT_GO with NBD_INFO_BLOCK_SIZE, falling back to
//!   NBD_OPT_EXPORT_NAME; NBD_OPT_INFO, NBD_OPT_LIST, NBD_OPT_ABORT) and
//!   `client::transmission` (requests tracked by cookie, every reply
//!   validated against its request, read data placed in one buffer per
//!   request as it arrives, at most
//!   [`max_reply_chunks`](client::max_reply_chunks) chunks per reply so
//!   memory stays proportional to the request).
//! - [`server`]: the handshake answered from a list of exports, requests
//!   decoded and checked against the export, replies encoded simple or
//!   structured.
//! - Both machines queue their output in one queue type (`output`): small
//!   frames coalesced, large payloads handed out as their own segments.
//!
//! - TLS (spec "TLS support", "NBD_OPT_STARTTLS"): both machines negotiate
//!   NBD_OPT_STARTTLS and pause ([`Event::StartTls`], [`ServerEvent::StartTls`])
//!   while the driver runs the TLS handshake on the same connection; clear
//!   text after the STARTTLS exchange is refused on both sides; a server
//!   can require TLS ([`server::TlsPolicy`]) and refuse exports to a client
//!   ([`Server::deny`]).
//!
//! The spec is `doc/proto.md` of the NetworkBlockDevice project; section
//! names in the docs here refer to it. Extended headers are not implemented.
#![forbid(unsafe_code)]

pub mod client;
pub mod codec;
pub mod consts;
pub mod error;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod output;
pub mod server;
pub mod wire;

#[cfg(test)]
mod read_tests;
#[cfg(test)]
mod tests;

pub use client::{
    Client, ClientConfig, Event, Goal, Lent, Negotiated, Reply, ReplyData, Request, ServerError,
};
pub use codec::{Codec, DecodeError, Reader};
pub use error::{ClientError, ProtocolError, RequestError};
pub use server::{ExportConfig, ReadChunk, Server, ServerConfig, ServerEvent, ServerRequest, TlsPolicy};
pub use wire::{BlockDescriptor, BlockSizes, Command, NbdError};
