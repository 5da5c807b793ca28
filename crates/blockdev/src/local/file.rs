//! A local regular file or block device, served with positioned I/O on
//! tokio's blocking pool.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use wanblk_sys::file::{self as sysfile, Seek};

use super::check_range;
use crate::endpoint::{BlockSizes, Capabilities, Endpoint, EndpointError, Extent, Result};

/// A file or block device opened for positioned reads and writes.
#[derive(Debug)]
pub struct FileEndpoint {
    name: String,
    path: PathBuf,
    file: Arc<File>,
    size: u64,
    writable: bool,
    block_device: bool,
}

/// Zero buffer size used when a zeroing request must be emulated by writes.
const ZERO_CHUNK: u64 = 1 << 20;

impl FileEndpoint {
    /// Opens an existing file or block device.
    ///
    /// # Errors
    /// The open error, naming the path.
    pub fn open(path: &Path, writable: bool) -> Result<FileEndpoint> {
        let name = path.display().to_string();
        let file = File::options()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| EndpointError::io(&name, None, format!("cannot open: {e}")))?;
        Self::from_file(name, path, file, writable)
    }

    /// Creates (or truncates) a regular file of `size` bytes, sparse.
    ///
    /// # Errors
    /// The create or resize error, naming the path.
    pub fn create(path: &Path, size: u64) -> Result<FileEndpoint> {
        let name = path.display().to_string();
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| EndpointError::io(&name, None, format!("cannot create: {e}")))?;
        file.set_len(size).map_err(|e| EndpointError::io(&name, None, format!("cannot resize: {e}")))?;
        Self::from_file(name, path, file, true)
    }

    fn from_file(name: String, path: &Path, file: File, writable: bool) -> Result<FileEndpoint> {
        let meta = file.metadata().map_err(|e| EndpointError::io(&name, None, e))?;
        let block_device = meta.file_type().is_block_device();
        let size = if block_device {
            sysfile::block_device_size(&file).map_err(|e| EndpointError::io(&name, None, e))?
        } else if meta.is_file() {
            meta.len()
        } else {
            return Err(EndpointError::config(&name, None, "not a regular file or block device"));
        };
        Ok(FileEndpoint {
            name,
            path: path.to_path_buf(),
            file: Arc::new(file),
            size,
            writable,
            block_device,
        })
    }

    /// The path this endpoint was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Grows or shrinks a regular file to `size` bytes.
    ///
    /// # Errors
    /// For block devices, or the resize error.
    pub fn set_len(&mut self, size: u64) -> Result<()> {
        if self.block_device {
            return Err(EndpointError::config(&self.name, None, "cannot resize a block device"));
        }
        self.file.set_len(size).map_err(|e| EndpointError::io(&self.name, None, e))?;
        self.size = size;
        Ok(())
    }

    fn check_writable(&self, offset: u64) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(EndpointError::config(&self.name, Some(offset), "opened read-only"))
        }
    }

    /// Runs blocking file work on tokio's blocking pool, mapping I/O errors
    /// to endpoint errors at `offset`.
    async fn blocking<T: Send + 'static>(
        &self,
        offset: u64,
        f: impl FnOnce(&File) -> io::Result<T> + Send + 'static,
    ) -> Result<T> {
        let file = Arc::clone(&self.file);
        match tokio::task::spawn_blocking(move || f(&file)).await {
            Ok(r) => r.map_err(|e| EndpointError::io(&self.name, Some(offset), e)),
            Err(e) => Err(EndpointError::io(&self.name, Some(offset), format!("I/O task failed: {e}"))),
        }
    }
}

fn write_zeroes_by_writes(f: &File, offset: u64, len: u64) -> io::Result<()> {
    let zeros = vec![0u8; len.min(ZERO_CHUNK) as usize];
    let mut pos = offset;
    while pos < offset + len {
        let n = (offset + len - pos).min(ZERO_CHUNK) as usize;
        f.write_all_at(&zeros[..n], pos)?;
        pos += n as u64;
    }
    Ok(())
}

#[async_trait]
impl Endpoint for FileEndpoint {
    fn name(&self) -> &str {
        &self.name
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            read_only: !self.writable,
            can_block_status: !self.block_device,
            block_sizes: BlockSizes { minimum: 1, preferred: 4096, maximum: 64 * 1024 * 1024 },
            ..Capabilities::everything()
        }
    }

    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        check_range(&self.name, self.size, offset, len.into())?;
        self.blocking(offset, move |f| {
            let mut buf = BytesMut::zeroed(len as usize);
            f.read_exact_at(&mut buf, offset)?;
            Ok(buf.freeze())
        })
        .await
    }

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<()> {
        self.check_writable(offset)?;
        check_range(&self.name, self.size, offset, data.len() as u64)?;
        self.blocking(offset, move |f| {
            f.write_all_at(&data, offset)?;
            if fua { f.sync_data() } else { Ok(()) }
        })
        .await
    }

    async fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<()> {
        self.check_writable(offset)?;
        check_range(&self.name, self.size, offset, len)?;
        let block_device = self.block_device;
        self.blocking(offset, move |f| {
            let native = if block_device {
                sysfile::block_device_discard(f, offset, len, true)
            } else if may_trim {
                sysfile::punch_hole(f, offset, len)
            } else {
                sysfile::zero_range(f, offset, len)
            };
            match native {
                Err(e) if sysfile::is_unsupported(&e) => write_zeroes_by_writes(f, offset, len),
                r => r,
            }
        })
        .await
    }

    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.check_writable(offset)?;
        check_range(&self.name, self.size, offset, len)?;
        let block_device = self.block_device;
        // Trim is advisory: where the file system or device cannot, do nothing.
        self.blocking(offset, move |f| {
            let r = if block_device {
                sysfile::block_device_discard(f, offset, len, false)
            } else {
                sysfile::punch_hole(f, offset, len)
            };
            match r {
                Err(e) if sysfile::is_unsupported(&e) => Ok(()),
                r => r,
            }
        })
        .await
    }

    async fn flush(&self) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        self.blocking(0, |f| f.sync_data()).await
    }

    async fn block_status(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        check_range(&self.name, self.size, offset, len)?;
        let end = offset + len;
        if self.block_device || len == 0 {
            return Ok(vec![Extent { offset, length: len, hole: false, zero: false }]);
        }
        self.blocking(offset, move |f| {
            let mut out = Vec::new();
            let mut pos = offset;
            // Walk data/hole boundaries; a file system without SEEK_DATA
            // support reports everything as data.
            while pos < end {
                let data_at = match sysfile::seek_data_or_hole(f, pos, Seek::Data) {
                    Ok(d) => d.unwrap_or(end).min(end),
                    Err(e) if sysfile::is_unsupported(&e) => pos,
                    Err(e) => return Err(e),
                };
                if data_at > pos {
                    out.push(Extent { offset: pos, length: data_at - pos, hole: true, zero: true });
                    pos = data_at;
                    continue;
                }
                let hole_at = match sysfile::seek_data_or_hole(f, pos, Seek::Hole) {
                    Ok(h) => h.unwrap_or(end).min(end),
                    Err(e) if sysfile::is_unsupported(&e) => end,
                    Err(e) => return Err(e),
                };
                let hole_at = hole_at.max(pos + 1);
                out.push(Extent { offset: pos, length: hole_at - pos, hole: false, zero: false });
                pos = hole_at;
            }
            Ok(out)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap().block_on(f)
    }

    #[test]
    fn sparse_file_round_trip_and_map() {
        block_on(async {
            let dir = std::env::temp_dir().join(format!("wanblk-file-ep-{}", std::process::id()));
            let ep = FileEndpoint::create(&dir, 16 << 20).unwrap();
            let map = ep.block_status(0, 16 << 20).await.unwrap();
            assert!(map.iter().all(|e| e.hole), "{map:?}");
            ep.write(8 << 20, Bytes::from(vec![7u8; 1 << 20]), false).await.unwrap();
            assert_eq!(ep.read(8 << 20, 4).await.unwrap(), vec![7u8; 4]);
            let map = ep.block_status(0, 16 << 20).await.unwrap();
            let data: u64 = map.iter().filter(|e| !e.hole).map(|e| e.length).sum();
            assert!((1 << 20..16 << 20).contains(&data), "{map:?}");
            assert_eq!(map.iter().map(|e| e.length).sum::<u64>(), 16 << 20);
            ep.write_zeroes(8 << 20, 1 << 20, true).await.unwrap();
            assert_eq!(ep.read(8 << 20, 4).await.unwrap(), vec![0u8; 4]);
            ep.flush().await.unwrap();
            let err = ep.read((16 << 20) - 2, 4).await.unwrap_err();
            assert!(err.to_string().contains("beyond the end"), "{err}");
            std::fs::remove_file(&dir).unwrap();
        });
    }

    #[test]
    fn read_only_refuses_writes() {
        block_on(async {
            let ep = FileEndpoint::open(Path::new("/proc/self/exe"), false);
            // /proc/self/exe is a regular file; opened read-only it must refuse writes.
            let ep = ep.unwrap();
            let e = ep.write(0, Bytes::from_static(b"x"), false).await.unwrap_err();
            assert!(e.to_string().contains("read-only"), "{e}");
        });
    }

    #[test]
    fn missing_file_names_the_path() {
        let e = FileEndpoint::open(Path::new("/nonexistent/wanblk"), false).unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/wanblk"), "{e}");
    }
}
