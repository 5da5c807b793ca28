//! wanblk's long-fat-network emulator: three network namespaces
//! (client -- router -- server) joined by veth pairs, where the router hands
//! every forwarded packet to NFQUEUE and a user-space release loop decides
//! when (or whether) the kernel lets it go, following the queueing model of
//! [`wanblk_netem_model`]. Real kernel TCP (cubic, bbr, reno) runs end to end
//! across it.
//!
//! ```text
//!  wbk-NAME-c            wbk-NAME-r (router)                  wbk-NAME-s
//!  c0 10.77.1.2 ---- rc 10.77.1.1 | rs 10.77.2.1 ---- s0 10.77.2.2
//!                   PREROUTING -i rc -> NFQUEUE 0 (fwd)
//!                   PREROUTING -i rs -> NFQUEUE 1 (back)
//!                          |  ids, lengths, kernel timestamps
//!                   release loop (one pinned SCHED_FIFO thread):
//!                   model decides -> NF_DROP / batch NF_ACCEPT up to id
//! ```
//!
//! The I/O boundary: [`topology`] runs `ip`, `iptables`, `sysctl` and
//! `ethtool` (iproute2 and friends) to build and remove the namespaces;
//! [`emulator`] owns the netlink socket and the clock; everything about
//! *when* a packet leaves is decided by the sans-I/O model.
//!
//! Two ways to run it: [`Scenario`] (a thread of the calling process: tests
//! and benchmarks) and the `wanblk netem up` daemon ([`daemon`]). Both record
//! their state under `/run/wanblk-netem/NAME/`, so [`topology::sweep_stale`]
//! and `wanblk netem down` can remove everything after a crash.

use std::io;

pub mod bench;
pub mod daemon;
pub mod emulator;
pub mod scenario;
pub mod stats;
pub mod topology;

pub use scenario::{QueueSpec, Scenario, ScenarioBuilder, Side, SysctlProfile};
pub use stats::{DirectionStats, Stats};
pub use wanblk_netem_model::{self as model, Direction, Params, Profile, QueueLimit};

/// Errors of the emulator driver. Each variant's message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The emulator needs root (namespaces, iptables, NFQUEUE, SCHED_FIFO).
    #[error("wanblk netem needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN): run it with sudo or as root")]
    NotRoot,
    /// The kernel lacks network namespaces.
    #[error("this kernel does not support network namespaces (/proc/self/ns/net is missing)")]
    NamespacesUnsupported,
    /// A required program is missing.
    #[error("`{tool}` is not installed: apt-get install -y {package}")]
    ToolMissing {
        /// The program.
        tool: &'static str,
        /// The Debian package that has it.
        package: &'static str,
    },
    /// An external command failed.
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// Its exit status.
        status: String,
        /// Its standard error.
        stderr: String,
    },
    /// A bad parameter.
    #[error("bad configuration: {0}")]
    Config(String),
    /// An emulator with this name exists.
    #[error("an emulator named `{0}` already exists (wanblk netem down --name {0})")]
    Exists(String),
    /// No emulator with this name.
    #[error("no emulator named `{0}` (see /run/wanblk-netem/)")]
    NotFound(String),
    /// The NFQUEUE socket failed.
    #[error("NFQUEUE: {0} (is nfnetlink_queue built into the kernel?)")]
    Nfqueue(io::Error),
    /// The emulator thread or process stopped.
    #[error("the emulator stopped: {0}")]
    Stopped(String),
    /// Local I/O failed.
    #[error("{what}: {error}")]
    Io {
        /// What was being done.
        what: String,
        /// The error (in the message, so not also a `source()`).
        error: io::Error,
    },
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, error: io::Error) -> Error {
        Error::Io { what: what.into(), error }
    }
}

pub(crate) fn scenario_emulator_config(
    cfg: &scenario::ScenarioConfig,
    router_ns: &str,
) -> emulator::EmulatorConfig {
    cfg.emulator(router_ns)
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
