//! Automatic parallelism tuning (APT) for wanblk: how many parallel
//! sessions (TCP connections) to carry block I/O over, found by measuring.
//!
//! This crate is sans-I/O. It has no clock, no sockets and no async
//! runtime; the driver (the thin async loop of `wanblk-remote`) owns all of
//! that and talks to the [`Controller`] in plain values:
//!
//! ```text
//!        driver (wanblk-remote)                       this crate
//!  ┌──────────────────────────────┐            ┌───────────────────────────┐
//!  │ sleep until poll_timeout() ◀─┼─ Instant ──┤ Controller                │
//!  │ read the pools' Counters  ───┼─ now, ────▶│  interval (IntervalPolicy)│
//!  │                              │  Counters  │  warm-up, drain wait      │
//!  │                              │            │  goodput -> Tuner::observe│
//!  │ set_active / request_bytes ◀─┼─ Decision ─┤  request_plan             │
//!  │ / depth on every pool        │            └───────────────────────────┘
//!  └──────────────────────────────┘
//! ```
//!
//! The [`Controller`] ([`control`]) turns counters into one goodput
//! [`IntervalSample`] per interval and feeds the [`Tuner`], which answers
//! the number of sessions for the next interval.
//! The controller calls [`Tuner::observe`] once per measurement interval and
//! uses [`Step::next_n`] sessions for the next one. The search is the APT
//! algorithm of BDL-APT (section 4.4): a multiplicative bracket
//! search from N0 by a factor alpha while goodput rises, then an integer
//! golden-section search inside the bracket, equations (1)-(4), ending when
//! the bracket has no integer left to probe. [`TunerConfig::paper`]
//! reproduces the paper exactly; [`TunerConfig::default`] adds what a real
//! WAN needs, each part switchable: discarding the first interval after N
//! changes, a tolerance and averaging against noise (ties go to fewer
//! sessions), a knee search on a goodput plateau (the fewest sessions that
//! reach it, in ~log2 probes), and re-tuning when the converged goodput
//! moves.
//!
//! Also here: [`IntervalPolicy`] (how long an interval should be) and [`sim`],
//! flow-level bottleneck models that drive the real tuner and the real
//! controller in simulated time for tests and benchmarks.
//!
//! ```
//! use wanblk_tune::{Sample, Tuner, TunerConfig};
//!
//! let mut tuner = Tuner::new(TunerConfig { n0: 1, ..TunerConfig::paper() }).unwrap();
//! // A path whose goodput peaks at 6 sessions.
//! let goodput = |n: usize| 100.0 - (n as f64 - 6.0).powi(2);
//! while tuner.converged().is_none() {
//!     let n = tuner.current();
//!     tuner.observe(Sample { n, goodput_bytes_per_s: goodput(n), duration_s: 1.0 });
//! }
//! assert_eq!(tuner.converged(), Some(6));
//! ```
#![forbid(unsafe_code)]

pub mod capacity;
mod config;
pub mod control;
mod golden;
mod interval;
pub mod model;
pub mod share;
pub mod sim;
mod tuner;

pub use config::{ConfigError, MAX_SESSIONS, ResampleConfig, RetuneConfig, TunerConfig};
pub use control::{
    AT_RATE_CAP, CONNECT_WAIT_MAX, Controller, ControllerConfig, Counters, DEFAULT_MSS, DEMAND_LIMITED,
    DRAIN_WAIT_MAX, Decision, DemandSample, END_MIN, END_RTTS, HALVES_AGREE, IntervalChoice, IntervalSample,
    PARTIAL_RUN_MAX, Parallelism, PoolCounters, PoolLimits, ProgressPoint, SETTLE_MAX, SessionCounters,
    TcpCounters, Timing, request_plan, small_path_n0, time_to_rate,
};
pub use golden::{Bracket, NU, golden_probe_bound};
pub use interval::{DRAIN_RTTS, INITIAL_WINDOW_BYTES, IntervalPolicy, PathSnapshot};
pub use model::{ModelConfig, Signals, first_point, loss_limited_rate};
pub use tuner::{
    CONFIRM_WIN, Discards, LEVEL_SAMPLES, MAX_HISTORY, NOISE_SIGMAS, Phase, Sample, SampleUse, Step,
    StepRecord, Tuner, TuningReport,
};
