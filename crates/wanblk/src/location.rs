//! Where data comes from and goes to: parsing the location arguments of
//! `wanblk copy` and opening them as endpoints.
//!
//! Network stores (NBD, iSCSI) open through the command's
//! [`Remote`] as a pool of sessions; local files and `null:` open directly. A destination file that does not exist yet is
//! written under a `.wanblk-part` name and renamed only when the copy
//! completes, so a failed copy never leaves a file that looks complete.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::local::{FileEndpoint, Fill, MemoryEndpoint, NullEndpoint};
use wanblk_remote::Remote;

use crate::units::parse_size;

/// A parsed location argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    /// A network store: `nbd://...`, `nbd+unix://...`, `iscsi://...`.
    Remote(String),
    /// A local file or block device.
    File(PathBuf),
    /// `null:` (or `null:SIZE` as a source of zeroes).
    Null(Option<u64>),
    /// `random:SIZE[:SEED]`: a source of deterministic pseudo-random data
    /// generated in memory (for benchmarks of the write direction).
    Random {
        /// Bytes.
        size: u64,
        /// Generator seed.
        seed: u64,
    },
}

impl Location {
    /// Parses a location as users write it.
    pub(crate) fn parse(s: &str) -> anyhow::Result<Location> {
        if let Some(rest) = s.strip_prefix("null:") {
            let size =
                if rest.is_empty() { None } else { Some(parse_size(rest).map_err(anyhow::Error::msg)?) };
            return Ok(Location::Null(size));
        }
        if let Some(rest) = s.strip_prefix("random:") {
            let (size, seed) = rest.split_once(':').unwrap_or((rest, "0"));
            let size = parse_size(size).map_err(anyhow::Error::msg)?;
            let seed = seed.parse().map_err(|_| anyhow::anyhow!("bad seed in {s:?}"))?;
            return Ok(Location::Random { size, seed });
        }
        if wanblk_remote::is_remote(s) {
            return Ok(Location::Remote(s.to_string()));
        }
        if let Some(path) = s.strip_prefix("file://") {
            return Ok(Location::File(PathBuf::from(path)));
        }
        if let Some((scheme, _)) = s.split_once("://") {
            bail!(
                "unknown location scheme {scheme:?} in {s:?}: expected nbd://, nbd+unix://, iscsi://, null: or a file path"
            );
        }
        if s.is_empty() {
            bail!("empty location");
        }
        Ok(Location::File(PathBuf::from(s)))
    }
}

/// An opened endpoint and what it takes to finish with it.
pub(crate) struct Opened {
    /// The endpoint to copy from or to.
    pub(crate) endpoint: Arc<dyn Endpoint>,
    /// A `.wanblk-part` file to rename into place after success.
    pub(crate) part: Option<(PathBuf, PathBuf)>,
    /// The destination is known to read as zeroes (new file, null:).
    pub(crate) known_zero: bool,
    /// Things the user should know.
    pub(crate) notes: Vec<String>,
}

impl Opened {
    fn plain(endpoint: Arc<dyn Endpoint>) -> Opened {
        Opened { endpoint, part: None, known_zero: false, notes: Vec::new() }
    }

    /// After a successful copy: flush a new file and move it into place.
    pub(crate) async fn commit(&self) -> anyhow::Result<()> {
        if let Some((part, fin)) = &self.part {
            self.endpoint.flush().await.with_context(|| format!("flushing {}", part.display()))?;
            std::fs::rename(part, fin)
                .with_context(|| format!("renaming {} to {}", part.display(), fin.display()))?;
        }
        Ok(())
    }
}

/// Opens a network store through `remote`.
async fn open_remote(uri: &str, remote: &mut Remote) -> anyhow::Result<Opened> {
    let pool = remote.open(uri).await?;
    let notes = pool.notes();
    let mut o = Opened::plain(pool);
    o.notes = notes;
    Ok(o)
}

/// Opens a copy source.
pub(crate) async fn open_source(loc: &Location, remote: &mut Remote) -> anyhow::Result<Opened> {
    match loc {
        Location::Remote(uri) => open_remote(uri, remote).await,
        Location::File(p) => Ok(Opened::plain(Arc::new(FileEndpoint::open(p, false)?))),
        Location::Null(size) => match size {
            Some(s) => Ok(Opened::plain(Arc::new(NullEndpoint::new(*s)))),
            None => bail!("null: as a source needs a size, e.g. null:1G"),
        },
        Location::Random { size, seed } => {
            let name = format!("random:{size}:{seed}");
            Ok(Opened::plain(Arc::new(MemoryEndpoint::new(name, *size, Fill::Random { seed: *seed }))))
        }
    }
}

/// The `.wanblk-part` name a new destination file is written under.
pub(crate) fn part_path(p: &Path) -> PathBuf {
    let mut name = p.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".wanblk-part");
    p.with_file_name(name)
}

/// Opens a copy destination for a source of `size` bytes.
pub(crate) async fn open_destination(
    loc: &Location,
    size: u64,
    remote: &mut Remote,
) -> anyhow::Result<Opened> {
    match loc {
        Location::Remote(uri) => open_remote(uri, remote).await,
        Location::Random { .. } => bail!("random: is a source only"),
        Location::Null(sized) => {
            // `null:SIZE` is a sink of that size (a smaller one is refused
            // by the copy like any small destination); `null:` fits the source.
            let mut o = Opened::plain(Arc::new(NullEndpoint::new(sized.unwrap_or(size))));
            o.known_zero = true;
            Ok(o)
        }
        Location::File(p) => match std::fs::metadata(p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let part = part_path(p);
                let ep = FileEndpoint::create(&part, size)?;
                let mut o = Opened::plain(Arc::new(ep));
                o.part = Some((part, p.clone()));
                o.known_zero = true;
                Ok(o)
            }
            Err(e) => Err(e).with_context(|| format!("cannot use destination {}", p.display())),
            Ok(meta) => {
                let mut ep = FileEndpoint::open(p, true)?;
                let mut notes = Vec::new();
                if meta.is_file() && ep.size() < size {
                    ep.set_len(size)?;
                    notes.push(format!("{}: extended to {size} bytes", p.display()));
                } else if ep.size() > size {
                    notes.push(format!(
                        "{}: destination is larger ({} bytes) than the source; bytes past {size} are left as they were",
                        p.display(),
                        ep.size()
                    ));
                }
                let mut o = Opened::plain(Arc::new(ep));
                o.notes = notes;
                Ok(o)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_locations() {
        assert_eq!(Location::parse("null:").unwrap(), Location::Null(None));
        assert_eq!(Location::parse("null:1G").unwrap(), Location::Null(Some(1 << 30)));
        assert!(matches!(Location::parse("nbd://h/e").unwrap(), Location::Remote(_)));
        assert!(matches!(Location::parse("NBD+unix:///e?socket=/s").unwrap(), Location::Remote(_)));
        assert!(matches!(Location::parse("iscsi://h/iqn.x/1").unwrap(), Location::Remote(_)));
        assert_eq!(Location::parse("/tmp/x.img").unwrap(), Location::File("/tmp/x.img".into()));
        assert_eq!(Location::parse("file:///tmp/x").unwrap(), Location::File("/tmp/x".into()));
        let e = Location::parse("http://x/y").unwrap_err().to_string();
        assert!(e.contains("unknown location scheme \"http\""), "{e}");
        assert!(Location::parse("null:zz").is_err());
        assert_eq!(Location::parse("random:1M:9").unwrap(), Location::Random { size: 1 << 20, seed: 9 });
        assert_eq!(Location::parse("random:2G").unwrap(), Location::Random { size: 2 << 30, seed: 0 });
        assert!(Location::parse("random:1M:x").is_err());
        assert!(Location::parse("").is_err());
    }

    #[test]
    fn part_names() {
        assert_eq!(part_path(Path::new("/a/b.img")), PathBuf::from("/a/b.img.wanblk-part"));
    }
}
