//! Hostile servers: a real handshake, then a test-written script on the raw
//! socket. Shared with the command-level tests through testkit.

pub use wanblk_testkit::nbd_hostile::*;
