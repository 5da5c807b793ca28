//! Queueing model of the WAN emulator, sans-I/O and deterministic.
#![forbid(unsafe_code)]
