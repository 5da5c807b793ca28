//! The disk as one regular file, `MOUNTPOINT/disk`, in a FUSE mount (as
//! nbdfuse shows an NBD export), so `losetup`, `mkfs`, `mount` and `dd` work
//! on it with no second NBD hop.
//!
//! The kernel sends requests of up to 1 MiB, many at once (asynchronous
//! reads, 64 background requests, its read-ahead on the file raised to
//! 4 MiB when running as root); each request is handed to a tokio task
//! that calls the [`Endpoint`] (the front end, usually) and replies when it
//! completes, so the FUSE threads never wait for the network.
//!
//! | FUSE request | endpoint call |
//! |---|---|
//! | read | `read` (rounded out to the store's block size) |
//! | write | `write` (read-modify-write of partial blocks) |
//! | fsync | `flush` (the file's data is on the remote when it returns) |
//! | fallocate punch-hole / zero-range | `write_zeroes` (may trim / must zero) |
//! | flush (on close) | nothing: close promises no durability, fsync does |
//!
//! Mounting needs `/dev/fuse` and either root (the mount is made with
//! mount(2) directly) or the setuid `fusermount3` helper (Debian package
//! `fuse3`).

use std::ffi::OsStr;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use fuser::{
    BackgroundSession, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, MountOption, OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, WriteFlags,
};
use wanblk_blockdev::{Endpoint, EndpointError, ErrorKind};

/// The name of the disk file in the mount.
pub const DISK_NAME: &str = "disk";
/// Largest read or write the kernel sends in one request.
pub const MAX_REQUEST: u32 = 1 << 20;
/// Requests the kernel keeps in flight in the background (read-ahead).
const MAX_BACKGROUND: u16 = 64;
/// The kernel's read-ahead on the disk file: requests of [`MAX_REQUEST`],
/// several in flight (the front end reads ahead across the network; this
/// only hides the round trips through the kernel).
pub const KERNEL_READ_AHEAD: u32 = 4 << 20;
const DISK: INodeNo = INodeNo(2);
/// Attributes never change while mounted.
const TTL: Duration = Duration::from_secs(3600);

/// How to mount.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Show the disk read-only.
    pub read_only: bool,
    /// Threads reading requests from the kernel (replies come from tokio tasks).
    pub threads: usize,
    /// Let other users than the mounting one open the disk (`allow_other`).
    pub allow_other: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions { read_only: false, threads: 2, allow_other: false }
    }
}

/// A mounted disk file. Dropping it unmounts (lazily, if still in use).
pub struct Mounted {
    session: BackgroundSession,
    mountpoint: PathBuf,
}

impl std::fmt::Debug for Mounted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mounted").field("mountpoint", &self.mountpoint).finish()
    }
}

impl Mounted {
    /// The disk file's path.
    pub fn disk_path(&self) -> PathBuf {
        self.mountpoint.join(DISK_NAME)
    }

    /// True once the kernel ended the session (unmounted, e.g. by
    /// `umount` or `fusermount3 -u` from outside).
    pub fn finished(&self) -> bool {
        self.session.guard.is_finished()
    }

    /// Waits for the session to end.
    ///
    /// # Errors
    /// The session thread failed.
    pub fn join(self) -> io::Result<()> {
        self.session.join()
    }
}

/// Checks that `mountpoint` is an existing, empty directory.
///
/// # Errors
/// A one-line description of what is wrong.
pub fn check_mountpoint(mountpoint: &Path) -> Result<(), String> {
    let md = std::fs::metadata(mountpoint).map_err(|e| format!("{}: {e}", mountpoint.display()))?;
    if !md.is_dir() {
        return Err(format!("{}: not a directory", mountpoint.display()));
    }
    let mut entries = std::fs::read_dir(mountpoint).map_err(|e| format!("{}: {e}", mountpoint.display()))?;
    if entries.next().is_some() {
        return Err(format!(
            "{}: not empty (the disk appears as {}/{DISK_NAME})",
            mountpoint.display(),
            mountpoint.display()
        ));
    }
    Ok(())
}

/// Mounts `endpoint` as the file `disk` in `mountpoint` (an existing empty
/// directory). Requests run as tasks on `handle`.
///
/// # Errors
/// The mount failed (no `/dev/fuse`, no privilege, mount point busy...).
pub fn mount(
    endpoint: Arc<dyn Endpoint>,
    mountpoint: &Path,
    opts: &MountOptions,
    handle: tokio::runtime::Handle,
) -> io::Result<Mounted> {
    let md = std::fs::metadata(mountpoint)?;
    let read_only = opts.read_only || endpoint.capabilities().read_only;
    let fs = DiskFs {
        size: endpoint.size(),
        align: u64::from(endpoint.capabilities().block_sizes.minimum.max(1)),
        ep: endpoint,
        rt: handle,
        read_only,
        uid: md.uid(),
        gid: md.gid(),
        born: SystemTime::now(),
    };
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        MountOption::FSName("wanblk".into()),
        MountOption::Subtype("wanblk".into()),
        MountOption::NoDev,
        MountOption::NoSuid,
        if read_only { MountOption::RO } else { MountOption::RW },
    ];
    if opts.allow_other {
        cfg.acl = fuser::SessionACL::All;
    }
    cfg.n_threads = Some(opts.threads.max(1));
    cfg.clone_fd = opts.threads > 1;
    let session = fuser::Session::new(fs, mountpoint, &cfg)?.spawn()?;
    raise_read_ahead(mountpoint);
    Ok(Mounted { session, mountpoint: mountpoint.to_path_buf() })
}

/// Sets the kernel's read-ahead of the mount to [`KERNEL_READ_AHEAD`] (root
/// only; without it the kernel keeps its 128 KiB default, which FUSE's INIT
/// reply can lower but not raise, and a sequential reader then reaches the
/// front end as a queue of 128 KiB requests, one round trip through the
/// kernel each).
fn raise_read_ahead(mountpoint: &Path) {
    let Ok(md) = std::fs::metadata(mountpoint) else { return };
    let dev = md.dev();
    // glibc's encoding of a dev_t.
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let path = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    match std::fs::write(&path, (KERNEL_READ_AHEAD / 1024).to_string()) {
        Ok(()) => tracing::debug!("{path}: {} KiB", KERNEL_READ_AHEAD / 1024),
        Err(e) => tracing::debug!("{path}: {e} (the kernel's read-ahead stays as it is)"),
    }
}

struct DiskFs {
    ep: Arc<dyn Endpoint>,
    rt: tokio::runtime::Handle,
    size: u64,
    align: u64,
    read_only: bool,
    uid: u32,
    gid: u32,
    born: SystemTime,
}

fn errno(e: &EndpointError) -> Errno {
    match &e.kind {
        ErrorKind::Config(m) if m.contains("read-only") => Errno::EROFS,
        ErrorKind::Config(_) => Errno::EINVAL,
        ErrorKind::Server { message, .. } | ErrorKind::Io(message)
            if message.to_lowercase().contains("no space") =>
        {
            Errno::ENOSPC
        }
        _ => Errno::EIO,
    }
}

impl DiskFs {
    fn attr(&self, ino: INodeNo) -> Option<FileAttr> {
        let (kind, perm, size, nlink) = match ino {
            INodeNo::ROOT => (FileType::Directory, 0o755, 0, 2),
            DISK => (FileType::RegularFile, if self.read_only { 0o444 } else { 0o644 }, self.size, 1),
            _ => return None,
        };
        Some(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: self.born,
            mtime: self.born,
            ctime: self.born,
            crtime: self.born,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    fn down(&self, v: u64) -> u64 {
        v - v % self.align
    }

    fn up(&self, v: u64) -> u64 {
        v.div_ceil(self.align) * self.align
    }
}

/// Reads `[offset, offset+len)` through an endpoint whose requests must be
/// aligned to `align` bytes.
async fn read_aligned(ep: &dyn Endpoint, align: u64, offset: u64, len: u64) -> Result<Bytes, EndpointError> {
    let a = offset - offset % align;
    let b = (offset + len).div_ceil(align) * align;
    let b = b.min(ep.size());
    if b - a <= u64::from(MAX_REQUEST) {
        // One request: its buffer as it is (a slice of the cache, usually), no copy.
        let got = ep.read(a, (b - a) as u32).await?;
        return Ok(got.slice((offset - a) as usize..(offset - a + len) as usize));
    }
    let mut out = BytesMut::with_capacity((b - a) as usize);
    let mut pos = a;
    while pos < b {
        let n = (b - pos).min(u64::from(MAX_REQUEST));
        out.extend_from_slice(&ep.read(pos, n as u32).await?);
        pos += n;
    }
    let out = out.freeze();
    Ok(out.slice((offset - a) as usize..(offset - a + len) as usize))
}

/// Writes `data` at `offset`; partial blocks at either end are read,
/// patched and written whole.
async fn write_aligned(ep: &dyn Endpoint, align: u64, offset: u64, data: Bytes) -> Result<(), EndpointError> {
    let end = offset + data.len() as u64;
    if offset.is_multiple_of(align) && end.is_multiple_of(align) {
        return ep.write(offset, data, false).await;
    }
    let a = offset - offset % align;
    let b = end.div_ceil(align) * align;
    let old = read_aligned(ep, align, a, b - a).await?;
    let mut buf = BytesMut::from(&old[..]);
    buf[(offset - a) as usize..(end - a) as usize].copy_from_slice(&data);
    ep.write(a, buf.freeze(), false).await
}

impl Filesystem for DiskFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_write(MAX_REQUEST);
        let _ = config.set_max_readahead(MAX_REQUEST);
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_congestion_threshold(MAX_BACKGROUND * 3 / 4);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match (parent, self.attr(DISK)) {
            (INodeNo::ROOT, Some(a)) if name == DISK_NAME => reply.entry(&TTL, &a, Generation(0)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // The disk has the remote's size. A size change is ignored, as a
        // block device ignores O_TRUNC (`dd of=MOUNTPOINT/disk` opens with
        // it): nothing is discarded and the size stays.
        if size.is_some_and(|s| s != self.size) {
            tracing::debug!("size change to {size:?} ignored: the disk has a fixed size");
        }
        match self.attr(ino) {
            None => reply.error(Errno::ENOENT),
            Some(a) => reply.attr(&TTL, &a),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if ino != DISK {
            return reply.error(Errno::EISDIR);
        }
        if self.read_only && flags.acc_mode() != OpenAccMode::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if offset >= self.size {
            return reply.data(&[]);
        }
        let len = u64::from(size).min(self.size - offset);
        let (ep, align) = (Arc::clone(&self.ep), self.align);
        tracing::trace!(offset, len, "read");
        self.rt.spawn(async move {
            match read_aligned(&*ep, align, offset, len).await {
                Ok(b) => {
                    tracing::trace!(offset, len, "read done");
                    reply.data(&b)
                }
                Err(e) => {
                    tracing::warn!("read of {len} bytes at {offset}: {e}");
                    reply.error(errno(&e));
                }
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if self.read_only {
            return reply.error(Errno::EROFS);
        }
        let end = offset.saturating_add(data.len() as u64);
        if end > self.size {
            return reply.error(Errno::ENOSPC);
        }
        let n = data.len() as u32;
        let data = Bytes::copy_from_slice(data);
        let (ep, align) = (Arc::clone(&self.ep), self.align);
        tracing::trace!(offset, n, "write");
        self.rt.spawn(async move {
            match write_aligned(&*ep, align, offset, data).await {
                Ok(()) => {
                    tracing::trace!(offset, n, "written");
                    reply.written(n)
                }
                Err(e) => {
                    tracing::warn!("write of {n} bytes at {offset}: {e}");
                    reply.error(errno(&e));
                }
            }
        });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let ep = Arc::clone(&self.ep);
        tracing::trace!("fsync");
        self.rt.spawn(async move {
            match ep.flush().await {
                Ok(()) => {
                    tracing::trace!("fsynced");
                    reply.ok()
                }
                Err(e) => {
                    tracing::warn!("fsync: {e}");
                    reply.error(Errno::EIO);
                }
            }
        });
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if ino != DISK {
            return reply.error(Errno::EISDIR);
        }
        if self.read_only {
            return reply.error(Errno::EROFS);
        }
        let end = offset.saturating_add(length).min(self.size);
        let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
        let zero = mode & libc::FALLOC_FL_ZERO_RANGE != 0;
        if !punch && !zero {
            // Plain allocation: every byte of the disk already exists.
            return if mode & !libc::FALLOC_FL_KEEP_SIZE == 0 && end <= self.size {
                reply.ok()
            } else {
                reply.error(Errno::EOPNOTSUPP)
            };
        }
        // Only whole blocks are zeroed remotely; partial ends are written.
        let (a, b) = (self.up(offset), self.down(end));
        let (ep, align) = (Arc::clone(&self.ep), self.align);
        self.rt.spawn(async move {
            let result = async {
                if offset < a.min(end) {
                    let n = a.min(end) - offset;
                    write_aligned(&*ep, align, offset, Bytes::from(vec![0u8; n as usize])).await?;
                }
                if a < b {
                    ep.write_zeroes(a, b - a, punch).await?;
                }
                if b.max(a) < end {
                    let from = b.max(a);
                    write_aligned(&*ep, align, from, Bytes::from(vec![0u8; (end - from) as usize])).await?;
                }
                Ok::<(), EndpointError>(())
            }
            .await;
            match result {
                Ok(()) => reply.ok(),
                Err(e) => {
                    tracing::warn!("fallocate of {length} bytes at {offset}: {e}");
                    reply.error(errno(&e));
                }
            }
        });
    }

    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(Errno::NO_XATTR);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
        if size == 0 { reply.size(0) } else { reply.data(&[]) }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino != INodeNo::ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (INodeNo::ROOT, FileType::Directory, "."),
            (INodeNo::ROOT, FileType::Directory, ".."),
            (DISK, FileType::RegularFile, DISK_NAME),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(*ino, (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }
}
