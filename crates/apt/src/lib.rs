//! Automatic parallelism tuning (APT), sans-I/O, with a flow simulation bench.
#![forbid(unsafe_code)]
