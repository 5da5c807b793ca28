//! Signals to processes wanblk started itself.

use std::io;

/// Sends signal `sig` (e.g. `libc::SIGTERM`) to process `pid`.
///
/// Callers only signal processes they spawned and still own (not yet reaped),
/// so the pid cannot have been recycled.
///
/// # Errors
/// `ESRCH` if there is no such process, `EINVAL` for a bad signal, or a pid
/// that does not fit a `pid_t`.
pub fn signal(pid: u32, sig: i32) -> io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    if pid <= 0 {
        // 0 and negatives address process groups: never what a caller means here.
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: kill(2) takes plain integers and has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc != 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

pub use libc::{SIGINT, SIGKILL, SIGTERM};
