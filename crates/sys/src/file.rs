//! Files and block devices: size of a block device, hole punching, zeroing,
//! and the allocation map (`SEEK_DATA` / `SEEK_HOLE`).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `BLKGETSIZE64 = _IOR(0x12, 114, size_t)`.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
/// `BLKDISCARD = _IO(0x12, 119)`.
const BLKDISCARD: libc::c_ulong = 0x1277;
/// `BLKZEROOUT = _IO(0x12, 127)`.
const BLKZEROOUT: libc::c_ulong = 0x127f;

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

fn to_off(v: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(v).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Size in bytes of a block device.
///
/// # Errors
/// `ENOTTY` if `f` is not a block device.
pub fn block_device_size(f: &File) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points to
    // a live, writable u64; the fd is open for the borrow of `f`.
    check(unsafe { libc::ioctl(f.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) })?;
    Ok(size)
}

/// Deallocates `[offset, offset+len)` of a regular file, keeping its size;
/// the range then reads as zeroes.
///
/// # Errors
/// `EOPNOTSUPP` where the file system cannot punch holes.
pub fn punch_hole(f: &File, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: fallocate takes plain integers; the fd is open for the borrow.
    check(unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            to_off(offset)?,
            to_off(len)?,
        )
    })
}

/// Makes `[offset, offset+len)` of a regular file read as zeroes, keeping
/// it allocated (`FALLOC_FL_ZERO_RANGE`).
///
/// # Errors
/// `EOPNOTSUPP` where the file system lacks it.
pub fn zero_range(f: &File, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: fallocate takes plain integers; the fd is open for the borrow.
    check(unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            to_off(offset)?,
            to_off(len)?,
        )
    })
}

/// Discards (`BLKDISCARD`) or zeroes (`BLKZEROOUT`) a range of a block device.
///
/// # Errors
/// The ioctl's error, e.g. `EOPNOTSUPP` when the device cannot discard.
pub fn block_device_discard(f: &File, offset: u64, len: u64, zero: bool) -> io::Result<()> {
    let range: [u64; 2] = [offset, len];
    let req = if zero { BLKZEROOUT } else { BLKDISCARD };
    // SAFETY: both ioctls read a `u64[2]` {offset, length} through the
    // pointer, which points to a live array; the fd is open for the borrow.
    check(unsafe { libc::ioctl(f.as_raw_fd(), req, range.as_ptr()) })
}

/// Which kind of region [`seek_data_or_hole`] looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seek {
    /// The next allocated byte (`SEEK_DATA`).
    Data,
    /// The next hole (`SEEK_HOLE`); end of file counts as a hole.
    Hole,
}

/// The offset of the next data or hole at or after `offset`, or `None` when
/// there is no more data after `offset` (`ENXIO`).
///
/// # Errors
/// `EINVAL` where the file system does not support the query.
pub fn seek_data_or_hole(f: &File, offset: u64, what: Seek) -> io::Result<Option<u64>> {
    let whence = match what {
        Seek::Data => libc::SEEK_DATA,
        Seek::Hole => libc::SEEK_HOLE,
    };
    // SAFETY: lseek takes plain integers; the fd is open for the borrow. It
    // moves the shared file offset, which wanblk never uses (positioned I/O only).
    let rc = unsafe { libc::lseek(f.as_raw_fd(), to_off(offset)?, whence) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENXIO) {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(rc as u64))
}

/// True when `e` says the file system or device lacks the operation
/// (`EOPNOTSUPP`, `ENOTTY`, `EINVAL`), so the caller may fall back.
pub fn is_unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::EINVAL))
}

/// Binds a Unix stream socket at `path` that only `mode` may use (e.g.
/// `0o600`: the owner alone). The file is created under a umask that
/// leaves none of the other bits, so there is no moment when others could
/// connect, then set to `mode` exactly.
///
/// The umask is process-wide: call this before other threads create files
/// (it is restored at once).
///
/// # Errors
/// The bind or the chmod failed.
pub fn bind_unix_private(path: &std::path::Path, mode: u32) -> io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let mask = (!mode & 0o777) as libc::mode_t;
    // SAFETY: umask only swaps the process's file creation mask; it cannot fail.
    let old = unsafe { libc::umask(mask) };
    let bound = std::os::unix::net::UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    let l = bound?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o777))?;
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    #[test]
    fn holes_and_data_are_found() {
        let dir = std::env::temp_dir().join(format!("wanblk-sys-file-{}", std::process::id()));
        let mut f = File::options().read(true).write(true).create(true).truncate(true).open(&dir).unwrap();
        f.set_len(8 << 20).unwrap();
        f.write_all_at(&[1u8; 65536], 4 << 20).unwrap();
        f.flush().unwrap();
        let d = seek_data_or_hole(&f, 0, Seek::Data).unwrap();
        // File systems may round, but the data must be found at or before 4 MiB.
        assert!(d.is_some_and(|d| d <= 4 << 20));
        punch_hole(&f, 4 << 20, 65536).unwrap();
        let mut buf = [9u8; 16];
        f.read_exact_at(&mut buf, 4 << 20).unwrap();
        assert_eq!(buf, [0u8; 16]);
        assert!(block_device_size(&f).is_err(), "a regular file is not a block device");
        std::fs::remove_file(&dir).unwrap();
    }
}
