//! Benchmark harness.
pub mod plot;
