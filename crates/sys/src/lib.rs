//! All of wanblk's platform-specific (unsafe) code, in one place.
//!
//! Everything else in the workspace is safe Rust and builds and tests without
//! privileges. Each `unsafe` block here carries a `// SAFETY:` comment that
//! states why the call is sound.
//!
//! - [`tcp`]: `TCP_INFO`, congestion control, pacing and receive low-water socket options.
//! - [`alloc`]: keeping freed memory for reuse (the C allocator's thresholds).
//! - [`process`]: signals to child processes.
//! - [`nfqueue`]: NFQUEUE over a raw `NETLINK_NETFILTER` socket (the emulator's packet path).
//! - [`sched`]: thread affinity, `SCHED_FIFO`, timer slack, clocks.
//! - [`netns`]: entering named network namespaces.
//! - [`file`]: block device size, hole punching, zeroing, SEEK_DATA/SEEK_HOLE.
//! - [`icmp`]: ICMP echo sockets with receive timestamps (the capacity probe's trains).
//! - [`mount`]: unmounting (the FUSE mount of `wanblk mount`).

pub mod alloc;
pub mod file;
pub mod icmp;
pub mod mount;
pub mod netns;
pub mod nfqueue;
pub mod process;
pub mod sched;
pub mod tcp;
