//! Disk image formats a local file may hold. wanblk copies raw bytes: a
//! qcow2 or vmdk file copied as it is stays a qcow2 or vmdk file, not the
//! disk it describes. Their first bytes give them away, so the user can be
//! told to read or write the disk through qemu-nbd instead
//! (`[ qemu-nbd -f FMT FILE ]`).

use std::io::Read;
use std::path::Path;

/// A format recognised by its magic bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// QEMU copy-on-write v2/v3 (`QFI\xfb`).
    Qcow2,
    /// QEMU enhanced disk (`QED\0`).
    Qed,
    /// VMware sparse extent (`KDMV`) or a VMDK descriptor file.
    Vmdk,
    /// Hyper-V VHDX (`vhdxfile`).
    Vhdx,
    /// Virtual PC dynamic VHD (`conectix` at the start; a fixed VHD is raw
    /// data with a footer at the end and reads fine as raw).
    Vpc,
    /// VirtualBox VDI (signature 0xbeda107f at byte 64).
    Vdi,
}

impl Format {
    /// The name qemu-img and qemu-nbd use (`-f NAME`).
    pub(crate) fn qemu_name(self) -> &'static str {
        match self {
            Format::Qcow2 => "qcow2",
            Format::Qed => "qed",
            Format::Vmdk => "vmdk",
            Format::Vhdx => "vhdx",
            Format::Vpc => "vpc",
            Format::Vdi => "vdi",
        }
    }

    /// Recognises a format from the first bytes of a file (any length).
    pub(crate) fn detect(head: &[u8]) -> Option<Format> {
        let starts = |m: &[u8]| head.starts_with(m);
        if starts(b"QFI\xfb") {
            Some(Format::Qcow2)
        } else if starts(b"QED\0") {
            Some(Format::Qed)
        } else if starts(b"KDMV") || starts(b"# Disk DescriptorFile") {
            Some(Format::Vmdk)
        } else if starts(b"vhdxfile") {
            Some(Format::Vhdx)
        } else if starts(b"conectix") {
            Some(Format::Vpc)
        } else if head.get(64..68) == Some(&[0x7f, 0x10, 0xda, 0xbe]) {
            Some(Format::Vdi)
        } else {
            None
        }
    }

    /// The format of the regular file at `path`, if it holds one (devices
    /// and unreadable files: `None`).
    pub(crate) fn of_file(path: &Path) -> Option<Format> {
        let mut f = std::fs::File::open(path).ok()?;
        if !f.metadata().ok()?.is_file() {
            return None;
        }
        let mut head = [0u8; 128];
        let mut n = 0;
        while n < head.len() {
            match f.read(&mut head[n..]) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
        Format::detect(&head[..n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magics() {
        assert_eq!(Format::detect(b"QFI\xfb\0\0\0\x03"), Some(Format::Qcow2));
        assert_eq!(Format::detect(b"KDMV\x01\0\0\0"), Some(Format::Vmdk));
        assert_eq!(Format::detect(b"# Disk DescriptorFile\nversion=1"), Some(Format::Vmdk));
        assert_eq!(Format::detect(b"vhdxfile\0\0"), Some(Format::Vhdx));
        assert_eq!(Format::detect(b"conectix\0\0"), Some(Format::Vpc));
        assert_eq!(Format::detect(b"QED\0"), Some(Format::Qed));
        let mut vdi = vec![0u8; 128];
        vdi[..4].copy_from_slice(b"<<< ");
        vdi[64..68].copy_from_slice(&[0x7f, 0x10, 0xda, 0xbe]);
        assert_eq!(Format::detect(&vdi), Some(Format::Vdi));
        assert_eq!(Format::detect(&[0u8; 512]), None);
        assert_eq!(Format::detect(b"QF"), None, "a short file is not a match");
        assert_eq!(Format::detect(b""), None);
    }
}
