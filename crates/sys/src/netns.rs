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

/// Whether the kernel supports network namespaces (`/proc/self/ns/net` exists).
pub fn supported() -> bool {
    Path::new("/proc/self/ns/net").exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entering_a_missing_namespace_fails_cleanly() {
        assert!(enter(Path::new("/run/netns/wanblk-no-such-namespace")).is_err());
        assert_eq!(path_of("x"), PathBuf::from("/run/netns/x"));
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
