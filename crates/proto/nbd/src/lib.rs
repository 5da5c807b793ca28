//! NBD protocol, sans-I/O (client and server). No sockets, no clock, no unsafe.
#![forbid(unsafe_code)]
