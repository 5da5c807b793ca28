//! iSCSI protocol, initiator side (RFC 7143), sans-I/O: no sockets, no
//! clock, no unsafe.
//!
//! ```text
//!         bytes from the socket                       bytes to the socket
//!                  |                                          ^
//!                  v                                          |
//!   pdu::Codec (framing, digests, bounds) ----------- OutPdu (head | data | pad+digest)
//!                  |                                          ^
//!        +---------+-----------+                              |
//!        v                     v                              |
//!   login::Login          conn::Connection  -- poll_transmit -+
//!   (security ->          (commands by ITT, Data-In, R2T -> Data-Out,
//!    operational ->        NOP, Reject, logout; CmdWindow shared per session)
//!    full feature)             |
//!        |                     v
//!   keys::Negotiation     poll_event: Completed / Pong / LoggedOut ...
//! ```
//!
//! The driver (`wanblk-iscsi`) owns the sockets and tasks; everything that
//! decides what goes on the wire lives here and is tested in memory.
//!
//! - [`pdu`]: BHS/AHS/data segment codec with CRC32C digests ([`digest`]).
//! - [`text`]: `key=value` text; [`keys`]: negotiation rules and LFN defaults.
//! - [`login`]: the login state machine (AuthMethod None or CHAP/MD5, [`md5`]).
//! - [`discovery`]: the SendTargets exchange.
//! - [`conn`]: a full-feature connection and the session command window.
//! - [`scsi`]: CDBs, INQUIRY/VPD/READ CAPACITY parsers, sense decoding.
#![forbid(unsafe_code)]

pub mod conn;
pub mod digest;
pub mod discovery;
pub mod error;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod keys;
pub mod login;
pub mod md5;
pub mod opcode;
pub mod pdu;
pub mod scsi;
pub mod serial;
pub mod text;

pub use conn::{CmdWindow, Command, Connection, DataDir, Event, Outcome, encode_lun, login_tag};
pub use error::{CommandError, ConnError, LoginError, PduError, TextError};
pub use keys::Params;
pub use login::{Auth, Login, LoginConfig, LoginOutcome, LoginStep, TargetAuth};
pub use pdu::{Codec, Header, OutPdu, Pdu};
