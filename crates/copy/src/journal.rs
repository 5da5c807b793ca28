//! The resume journal: which ranges of the destination a copy completed
//! and flushed, so the same command run again copies only the rest.
//!
//! The file is an append-only log of checksummed records (crash-safe: a
//! record torn by a crash fails its checksum and is dropped with
//! everything after it):
//!
//! ```text
//! record  := kind:u8  len:u32le  crc32c:u32le  payload[len]
//!            (crc32c over kind, len and payload)
//! header  := kind 1, payload = "WBKJRNL1" + JSON Identity   (first record)
//! ranges  := kind 2, payload = (offset:u64le length:u64le)*
//! ```
//!
//! The header is written beside the journal and renamed into place, so a
//! journal either has a whole header or does not exist. Range records are
//! appended and `fdatasync`ed once the destination was flushed: a range in
//! the journal is on the destination's stable storage, so it survives a
//! restart of the target as well as of wanblk.
//!
//! [`decode`] is the pure decoder (property-tested); [`Journal`] does the
//! file I/O.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ranges::RangeSet;

/// First bytes of a header record's payload.
pub const MAGIC: &[u8; 8] = b"WBKJRNL1";
const KIND_HEADER: u8 = 1;
const KIND_RANGES: u8 = 2;
/// Bytes before a record's payload.
const RECORD_HEAD: usize = 9;
/// The largest header payload accepted (identity JSON is far smaller).
const MAX_HEADER: u32 = 64 << 10;
/// The largest ranges payload accepted (1 Mi ranges).
const MAX_RANGES: u32 = 16 << 20;

/// What identifies one store of a copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreIdentity {
    /// The location as named (URI without secrets, or the path); for a new
    /// file, its final name.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// A serial number where the protocol gives one (iSCSI unit serial).
    pub serial: Option<String>,
}

/// What a journal was written for: the copy's source and destination and
/// a sample of the source's data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The source.
    pub source: StoreIdentity,
    /// The destination.
    pub destination: StoreIdentity,
    /// Bytes the copy moves (the source size, or `--length`).
    pub bytes: u64,
    /// sha256 (hex) of a few blocks of the source ([`sample_offsets`]).
    pub sample_sha256: String,
}

impl Identity {
    /// Why `now` is not the copy this journal was written for (`None`: it
    /// is). The first difference found, in words.
    pub fn mismatch(&self, now: &Identity) -> Option<String> {
        let store = |what: &str, a: &StoreIdentity, b: &StoreIdentity| {
            if a.name != b.name {
                Some(format!("the {what} was {}, now {}", a.name, b.name))
            } else if a.size != b.size {
                Some(format!("the {what} was {} bytes, now {}", a.size, b.size))
            } else if a.serial != b.serial {
                Some(format!(
                    "the {what}'s serial number was {}, now {}",
                    a.serial.as_deref().unwrap_or("none"),
                    b.serial.as_deref().unwrap_or("none")
                ))
            } else {
                None
            }
        };
        store("source", &self.source, &now.source)
            .or_else(|| store("destination", &self.destination, &now.destination))
            .or_else(|| {
                (self.bytes != now.bytes)
                    .then(|| format!("the copy was of {} bytes, now {}", self.bytes, now.bytes))
            })
            .or_else(|| {
                (self.sample_sha256 != now.sample_sha256)
                    .then(|| "the source's data differs (sampled blocks changed)".to_string())
            })
    }
}

/// Where the identity samples the source: up to 4 blocks of `block` bytes
/// spread over the first `bytes` bytes, aligned to `block`.
pub fn sample_offsets(bytes: u64, block: u64) -> Vec<(u64, u64)> {
    let block = block.max(1);
    if bytes == 0 {
        return Vec::new();
    }
    let mut v: Vec<(u64, u64)> = Vec::new();
    for i in 0..4u64 {
        let at = (bytes / 4 * i) / block * block;
        let len = block.min(bytes - at);
        if v.last().is_none_or(|(o, _)| *o != at) {
            v.push((at, len));
        }
    }
    v
}

/// A journal file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Reading or writing the file failed.
    #[error("journal {path}: {source}")]
    Io {
        /// The journal.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The file is not a journal, or its header is damaged.
    #[error("journal {path}: {reason}")]
    Damaged {
        /// The journal.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Why bytes are not a journal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Too short for a header record.
    #[error("too short to be a wanblk journal")]
    Short,
    /// The first record is not a header, or fails its checksum.
    #[error("not a wanblk journal (no valid header)")]
    NoHeader,
    /// The header's identity is not readable.
    #[error("the journal's header is not readable: {0}")]
    BadIdentity(String),
}

/// A decoded journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// What it was written for.
    pub identity: Identity,
    /// Ranges completed.
    pub done: RangeSet,
    /// Bytes of whole, valid records; anything after (a torn record) is
    /// dropped before appending.
    pub valid_len: u64,
}

fn record(kind: u8, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = Vec::with_capacity(RECORD_HEAD + payload.len());
    out.push(kind);
    out.extend_from_slice(&len.to_le_bytes());
    let mut crc = crc32c::crc32c(&out[..5]);
    crc = crc32c::crc32c_append(crc, payload);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The header record for `identity`.
pub fn encode_header(identity: &Identity) -> Vec<u8> {
    let mut payload = MAGIC.to_vec();
    payload.extend_from_slice(&serde_json::to_vec(identity).unwrap_or_default());
    record(KIND_HEADER, &payload)
}

/// A record of completed ranges.
pub fn encode_ranges(ranges: &[(u64, u64)]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(ranges.len() * 16);
    for (o, l) in ranges {
        payload.extend_from_slice(&o.to_le_bytes());
        payload.extend_from_slice(&l.to_le_bytes());
    }
    record(KIND_RANGES, &payload)
}

/// The next whole record at the front of `b`: (kind, payload, bytes used),
/// `None` if it is torn, too long or fails its checksum.
fn next_record(b: &[u8]) -> Option<(u8, &[u8], usize)> {
    let head = b.get(..RECORD_HEAD)?;
    let kind = head[0];
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
    let crc = u32::from_le_bytes([head[5], head[6], head[7], head[8]]);
    let limit = if kind == KIND_HEADER { MAX_HEADER } else { MAX_RANGES };
    if len > limit {
        return None;
    }
    let payload = b.get(RECORD_HEAD..RECORD_HEAD + len as usize)?;
    let want = crc32c::crc32c_append(crc32c::crc32c(&head[..5]), payload);
    (want == crc).then_some((kind, payload, RECORD_HEAD + len as usize))
}

/// Reads a journal's bytes: its header, then range records until the end
/// or the first record that is torn or damaged (kept out, as if never
/// written). Ranges are clipped to the identity's `bytes`.
///
/// # Errors
/// No valid header record.
pub fn decode(b: &[u8]) -> Result<Decoded, DecodeError> {
    if b.len() < RECORD_HEAD + MAGIC.len() {
        return Err(DecodeError::Short);
    }
    let (kind, payload, used) = next_record(b).ok_or(DecodeError::NoHeader)?;
    if kind != KIND_HEADER || !payload.starts_with(MAGIC) {
        return Err(DecodeError::NoHeader);
    }
    let identity: Identity = serde_json::from_slice(&payload[MAGIC.len()..])
        .map_err(|e| DecodeError::BadIdentity(e.to_string()))?;
    let mut done = RangeSet::new();
    let mut pos = used;
    while let Some((kind, payload, used)) = next_record(&b[pos..]) {
        if kind != KIND_RANGES || !payload.len().is_multiple_of(16) {
            break;
        }
        for c in payload.chunks_exact(16) {
            let o = u64::from_le_bytes(c[..8].try_into().unwrap_or_default());
            let l = u64::from_le_bytes(c[8..].try_into().unwrap_or_default());
            let end = o.saturating_add(l).min(identity.bytes);
            if o < end {
                done.insert(o, end - o);
            }
        }
        pos += used;
    }
    Ok(Decoded { identity, done, valid_len: pos as u64 })
}

/// An open journal, appended to as ranges complete.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    identity: Identity,
    done: RangeSet,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> JournalError + '_ {
    move |source| JournalError::Io { path: path.to_path_buf(), source }
}

/// Flushes a directory entry (after a rename) to stable storage.
fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

impl Journal {
    /// Reads the journal at `path`; `Ok(None)` if there is none.
    ///
    /// # Errors
    /// It cannot be read, or is not a journal.
    pub fn load(path: &Path) -> Result<Option<Decoded>, JournalError> {
        let mut bytes = Vec::new();
        match File::open(path) {
            Ok(mut f) => f.read_to_end(&mut bytes).map_err(io_err(path))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(path)(e)),
        };
        decode(&bytes)
            .map(Some)
            .map_err(|e| JournalError::Damaged { path: path.to_path_buf(), reason: e.to_string() })
    }

    /// Starts a new journal for `identity` at `path` (replacing any): the
    /// header is written beside it, synced and renamed into place.
    ///
    /// # Errors
    /// Writing, syncing or renaming fails.
    pub fn create(path: &Path, identity: Identity) -> Result<Journal, JournalError> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".new");
        let tmp = PathBuf::from(tmp);
        let write = || -> io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(&encode_header(&identity))?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)?;
            sync_dir(path)
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err(path)(e));
        }
        let file = OpenOptions::new().append(true).open(path).map_err(io_err(path))?;
        Ok(Journal { path: path.to_path_buf(), file, identity, done: RangeSet::new() })
    }

    /// Continues a journal read by [`Journal::load`]: a torn tail is cut
    /// off, later records are appended.
    ///
    /// # Errors
    /// Opening or truncating fails.
    pub fn resume(path: &Path, decoded: Decoded) -> Result<Journal, JournalError> {
        let file = OpenOptions::new().write(true).open(path).map_err(io_err(path))?;
        if file.metadata().map_err(io_err(path))?.len() != decoded.valid_len {
            file.set_len(decoded.valid_len).map_err(io_err(path))?;
            file.sync_all().map_err(io_err(path))?;
        }
        drop(file);
        let file = OpenOptions::new().append(true).open(path).map_err(io_err(path))?;
        Ok(Journal { path: path.to_path_buf(), file, identity: decoded.identity, done: decoded.done })
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the journal was written for.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Ranges recorded as complete.
    pub fn done(&self) -> &RangeSet {
        &self.done
    }

    /// Appends `ranges` as complete and syncs the file. Call only after
    /// the destination was flushed.
    ///
    /// # Errors
    /// Writing or syncing fails (the record is then torn at worst, and
    /// ignored when read).
    pub fn record(&mut self, ranges: &[(u64, u64)]) -> Result<(), JournalError> {
        if ranges.is_empty() {
            return Ok(());
        }
        for chunk in ranges.chunks((MAX_RANGES / 16) as usize) {
            self.file.write_all(&encode_ranges(chunk)).map_err(io_err(&self.path))?;
        }
        self.file.sync_data().map_err(io_err(&self.path))?;
        for (o, l) in ranges {
            self.done.insert(*o, *l);
        }
        Ok(())
    }

    /// Deletes the journal (the copy completed).
    ///
    /// # Errors
    /// Removing the file fails.
    pub fn remove(self) -> Result<(), JournalError> {
        std::fs::remove_file(&self.path).map_err(io_err(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn identity() -> Identity {
        Identity {
            source: StoreIdentity { name: "nbd://h/x".into(), size: 1 << 30, serial: None },
            destination: StoreIdentity { name: "/tmp/out.img".into(), size: 1 << 30, serial: None },
            bytes: 1 << 30,
            sample_sha256: "ab".repeat(32),
        }
    }

    #[test]
    fn round_trips_and_drops_a_torn_tail() {
        let mut b = encode_header(&identity());
        b.extend(encode_ranges(&[(0, 4096), (8192, 4096)]));
        b.extend(encode_ranges(&[(4096, 4096)]));
        let whole = b.len() as u64;
        let d = decode(&b).unwrap();
        assert_eq!(d.identity, identity());
        assert_eq!(d.done.iter().collect::<Vec<_>>(), vec![(0, 12288)]);
        assert_eq!(d.valid_len, whole);
        // A crash while appending: the torn record is ignored.
        b.extend(&encode_ranges(&[(1 << 20, 4096)])[..20]);
        let d = decode(&b).unwrap();
        assert_eq!(d.done.bytes(), 12288);
        assert_eq!(d.valid_len, whole);
        // A flipped bit in a record ends the journal there.
        let mut c = b.clone();
        let at = encode_header(&identity()).len() + RECORD_HEAD + 3;
        c[at] ^= 1;
        assert_eq!(decode(&c).unwrap().done.bytes(), 0);
    }

    #[test]
    fn refuses_what_is_not_a_journal() {
        assert_eq!(decode(b"hello"), Err(DecodeError::Short));
        assert_eq!(decode(&[0u8; 64]), Err(DecodeError::NoHeader));
        let mut h = encode_header(&identity());
        h[RECORD_HEAD] = b'X';
        assert_eq!(decode(&h), Err(DecodeError::NoHeader));
    }

    #[test]
    fn names_the_first_difference() {
        let a = identity();
        assert_eq!(a.mismatch(&a), None);
        let mut b = a.clone();
        b.source.size += 512;
        assert!(a.mismatch(&b).unwrap().contains("source was 1073741824 bytes"));
        let mut b = a.clone();
        b.destination.name = "/other".into();
        assert!(a.mismatch(&b).unwrap().contains("destination was /tmp/out.img, now /other"));
        let mut b = a.clone();
        b.sample_sha256 = "cd".repeat(32);
        assert!(a.mismatch(&b).unwrap().contains("data differs"));
    }

    #[test]
    fn samples_are_spread_and_aligned() {
        assert_eq!(sample_offsets(0, 4096), vec![]);
        assert_eq!(sample_offsets(1000, 4096), vec![(0, 1000)]);
        let s = sample_offsets(1 << 30, 4096);
        assert_eq!(s.len(), 4);
        assert!(s.iter().all(|(o, l)| o % 4096 == 0 && *l == 4096));
    }

    #[test]
    fn file_life_cycle() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.wanblk-journal");
        assert!(Journal::load(&p).unwrap().is_none());
        let mut j = Journal::create(&p, identity()).unwrap();
        j.record(&[(0, 1 << 20)]).unwrap();
        drop(j);
        // A torn append, as a crash leaves it.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(&encode_ranges(&[(1 << 20, 1 << 20)])[..12]).unwrap();
        drop(f);
        let d = Journal::load(&p).unwrap().unwrap();
        assert_eq!(d.done.bytes(), 1 << 20);
        let mut j = Journal::resume(&p, d).unwrap();
        j.record(&[(2 << 20, 1 << 20)]).unwrap();
        let d = Journal::load(&p).unwrap().unwrap();
        assert_eq!(d.done.iter().collect::<Vec<_>>(), vec![(0, 1 << 20), (2 << 20, 3 << 20)]);
        Journal::resume(&p, d).unwrap().remove().unwrap();
        assert!(!p.exists());
        std::fs::write(&p, b"not a journal at all, just text").unwrap();
        let e = Journal::load(&p).unwrap_err().to_string();
        assert!(e.contains("not a wanblk journal"), "{e}");
    }

    proptest! {
        /// Arbitrary bytes never panic the decoder; a valid journal cut
        /// anywhere after its header decodes to a prefix of its records.
        #[test]
        fn decoder_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&b);
        }

        #[test]
        fn cut_journals_keep_whole_records(cut in 0usize..400, flip in proptest::option::of(0usize..400)) {
            let mut b = encode_header(&identity());
            let header = b.len();
            for i in 0..5u64 {
                b.extend(encode_ranges(&[(i * 8192, 4096)]));
            }
            if let Some(f) = flip && f < b.len() { b[f] ^= 0x10; }
            let cut = cut.min(b.len());
            match decode(&b[..cut]) {
                Ok(d) => {
                    prop_assert!(d.valid_len as usize <= cut && d.valid_len as usize >= header);
                    // Only whole records count: 4096 bytes per record.
                    prop_assert_eq!(d.done.bytes() % 4096, 0);
                    prop_assert!(d.done.bytes() <= 5 * 4096);
                }
                Err(_) => prop_assert!(cut < header || flip.is_some_and(|f| f < header)),
            }
        }
    }
}
