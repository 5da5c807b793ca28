//! Network namespaces: move the calling thread into a named namespace
//! (`/run/netns/NAME`, as `ip netns add` creates them).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Where `ip netns` keeps its named namespaces.
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// The path of the named namespace `name`.
pub fn path_of(name: &str) -> PathBuf {
    Path::new(NETNS_RUN_DIR).join(name)
}

/// Moves the calling thread (only it: `setns` is per thread) into the
/// network namespace at `path`. Sockets created afterwards by this thread
/// belong to that namespace.
///
/// # Errors
/// `ENOENT` if there is no such namespace, `EPERM` without `CAP_SYS_ADMIN`,
/// `EINVAL` if the file is not a network namespace.
pub fn enter(path: &Path) -> io::Result<()> {
    let f = File::open(path)?;
    // SAFETY: `f` is an open descriptor for the call's duration; CLONE_NEWNET
    // asks the kernel to check that it refers to a network namespace.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `cmd` run inside the network namespace at `path`: the child calls
/// `setns` between `fork` and `exec`. Everything else about `cmd` (arguments,
/// environment, standard I/O) is kept. Unlike `ip netns exec`, `/sys` is not
/// remounted, so the child sees the host's `/sys/class/net`.
///
/// # Errors
/// Opening `path` (e.g. `ENOENT` for a missing namespace). A failing `setns`
/// makes the later `spawn` fail.
pub fn command_in(cmd: &mut std::process::Command, path: &Path) -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    // Opened (close-on-exec) in the parent; the closure keeps it alive.
    let f = File::open(path)?;
    let hook = move || {
        // SAFETY: setns(2) is async-signal-safe and takes the integer fd of
        // `f`, which the closure owns and keeps open.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    };
    // SAFETY: the hook runs in the forked child before exec; it only calls
    // setns(2), which is async-signal-safe, and allocates nothing.
    unsafe { cmd.pre_exec(hook) };
    Ok(())
}

/// Whether the kernel supports network namespaces (`/proc/self/ns/net` exists).
pub fn supported() -> bool {
    Path::new("/proc/self/ns/net").exists()
}

/// The calling thread's network namespace as the kernel names it (e.g.
/// `net:[4026531840]`, the link `/proc/thread-self/ns/net`), `None` where
/// it cannot be read. Two processes see the same addresses as the same
/// hosts only when this is equal.
pub fn current_id() -> Option<String> {
    let link = std::fs::read_link("/proc/thread-self/ns/net").ok()?;
    link.to_str().filter(|s| s.starts_with("net:[")).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_namespace_has_a_name() {
        if supported() {
            let id = current_id().expect("readable");
            assert!(id.starts_with("net:[") && id.ends_with(']'), "{id}");
            assert_eq!(current_id(), Some(id));
        }
    }

    #[test]
    fn entering_a_missing_namespace_fails_cleanly() {
        assert!(enter(Path::new("/run/netns/wanblk-no-such-namespace")).is_err());
        assert_eq!(path_of("x"), PathBuf::from("/run/netns/x"));
    }

    #[test]
    fn commands_run_in_a_namespace_when_privileged() {
        let mut c = std::process::Command::new("true");
        command_in(&mut c, Path::new("/proc/self/ns/net")).unwrap();
        let st = c.status();
        if crate::sched::geteuid() == 0 {
            assert!(st.unwrap().success());
        }
        assert!(
            command_in(&mut std::process::Command::new("true"), Path::new("/run/netns/wanblk-none")).is_err()
        );
    }

    #[test]
    fn entering_our_own_namespace_works_when_privileged() {
        let r = std::thread::spawn(|| enter(Path::new("/proc/self/ns/net"))).join().unwrap();
        if crate::sched::geteuid() == 0 {
            r.unwrap();
        } else {
            assert!(r.is_err());
        }
    }
}
