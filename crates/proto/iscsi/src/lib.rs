//! iSCSI protocol (initiator side), sans-I/O. No sockets, no clock, no unsafe.
#![forbid(unsafe_code)]
