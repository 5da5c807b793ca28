//! Benchmarks on wanblk's own emulated long-fat network: wanblk against
//! nbdcopy against the raw link (iperf3), side by side in one run, written
//! as CSV and plots. The `wanblk-bench` program (`src/main.rs`: `demo`
//! and `run --profile ...`) is its command line; it runs the `wanblk`
//! binary as a subprocess, so the product never links this crate.
//!
//! - [`parts`]: `--parts`, checked and selected alike for every profile.
//! - [`path`]: one emulated path with the embedded target behind it, and
//!   the measured runners (`wanblk copy`, `nbdcopy`, `iperf3`).
//! - [`plot`]: SVG and PNG line charts with an embedded font.
//! - [`suite`], [`iscsi`], [`demo`]: the experiments on the emulated path;
//!   [`loopback`]: wanblk vs nbdcopy on 127.0.0.1, no emulator;
//!   [`faults`]: what target restarts, blackouts and an interruption
//!   cost a copy; [`share`]: wanblk against other flows and other
//!   copies of itself on one path.
//!
//! I/O boundary: this crate starts processes (in network namespaces) and
//! writes files; it needs root for the emulator.

pub mod demo;
pub mod faults;
pub mod frontend;
pub mod iscsi;
pub mod loopback;
pub mod parts;
pub mod path;
pub mod plot;
mod report;
pub mod share;
pub mod suite;
pub mod tls;
