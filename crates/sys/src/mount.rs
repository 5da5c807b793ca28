//! Unmounting a file system (the FUSE mount of `wanblk mount`).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Unmounts the file system at `path` (not lazily: a mount still in use,
/// e.g. by a loop device, fails with `EBUSY` and stays mounted).
///
/// # Errors
/// `EBUSY` while in use, `EINVAL` if `path` is not a mount point, `EPERM`
/// without the privilege.
pub fn unmount(path: &Path) -> io::Result<()> {
    let c =
        CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call;
    // umount2 only reads it.
    let rc = unsafe { libc::umount2(c.as_ptr(), 0) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}
