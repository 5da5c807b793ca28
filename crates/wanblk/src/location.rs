//! Where data comes from and goes to: parsing the location arguments of
//! `wanblk copy` (and `wanblk info`) and opening them as endpoints.
//!
//! Network stores (NBD, iSCSI) open through the command's [`Remote`] as a
//! pool of sessions; local files and `null:` open directly; `[ CMD ]` starts
//! a local NBD server and opens one session to it ([`crate::local_server`]);
//! `-` is standard input or output, read or written in order. A
//! destination file that does not exist yet is written under a
//! `.wanblk-part` name and renamed only when the copy completes, so a
//! failed copy never leaves a file that looks complete.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::ffi::OsString;

use anyhow::{Context, bail};
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::local::{FileEndpoint, Fill, MemoryEndpoint, NullEndpoint, PipeSink};
use wanblk_remote::Remote;

use crate::image::Format;
use crate::local_server::{self, LocalServer};
use crate::units::parse_size;

/// Separates the words of a `[ CMD ... ]` group once [`group_brackets`]
/// made it one argument (no argument can hold a NUL byte).
const WORD: char = '\0';

/// Joins each `[ CMD ARGS ... ]` on the command line into one argument, so
/// the parser takes it as one location and CMD's own flags (`-f qcow2`)
/// are not read as wanblk's. `[` and `]` must be words of their own, as
/// for nbdcopy; everything after `--` is left alone except these groups.
pub(crate) fn group_brackets(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let args: Vec<OsString> = args.into_iter().collect();
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let close = (args[i] == "[")
            .then(|| args[i + 1..].iter().position(|a| a == "]").map(|p| i + 1 + p))
            .flatten();
        match close {
            Some(end) if args[i + 1..end].iter().all(|a| a.to_str().is_some()) => {
                let mut word = String::from("[");
                for a in &args[i + 1..end] {
                    word.push(WORD);
                    word.push_str(a.to_str().unwrap_or_default());
                }
                word.push(WORD);
                word.push(']');
                out.push(OsString::from(word));
                i = end + 1;
            }
            _ => {
                out.push(args[i].clone());
                i += 1;
            }
        }
    }
    out
}

/// The words of a `[ CMD ... ]` group joined by [`group_brackets`].
fn bracket_words(s: &str) -> Option<Vec<String>> {
    let (open, close) = (format!("[{WORD}"), format!("{WORD}]"));
    if !(s.starts_with(&open) && s.ends_with(&close)) {
        return None;
    }
    if s.len() <= open.len() + 1 {
        return Some(Vec::new());
    }
    Some(s[open.len()..s.len() - close.len()].split(WORD).map(str::to_string).collect())
}

/// A location as the user wrote it (a `[ CMD ]` group with spaces again),
/// without an iSCSI password: for messages and the report.
pub(crate) fn shown(s: &str) -> String {
    if let Some(argv) = bracket_words(s) {
        return local_server::show(&argv);
    }
    if let Some(rest) = s.strip_prefix("iscsi://")
        && let Some((user, host)) = rest.split_once('@')
    {
        let user = user.split_once('%').map_or(user, |(u, _)| u);
        return format!("iscsi://{user}@{host}");
    }
    s.to_string()
}

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
    /// `-`: standard input as a source, standard output as a destination.
    Stdio,
    /// `[ CMD ARGS ... ]`: a local NBD server run for the command.
    Command(Vec<String>),
}

impl Location {
    /// Parses a location as users write it.
    pub(crate) fn parse(s: &str) -> anyhow::Result<Location> {
        if s == "-" {
            return Ok(Location::Stdio);
        }
        if let Some(argv) = bracket_words(s) {
            if argv.first().is_none_or(String::is_empty) {
                bail!("[ ]: no command between [ and ]");
            }
            return Ok(Location::Command(argv));
        }
        if s == "[" || s == "]" {
            bail!(
                "`{s}` without its partner: write a local NBD server as [ CMD ARGS ... ], with [ and ] as words of their own"
            );
        }
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
            if path.is_empty() {
                bail!("{s:?} names no file: write file:///path/to/file or just the path");
            }
            return Ok(Location::File(PathBuf::from(path)));
        }
        if let Some((scheme, _)) = s.split_once("://") {
            bail!(
                "unknown location scheme {scheme:?} in {s:?}: expected nbd://, nbd+unix://, iscsi://, null:, random:, -, [ CMD ] or a file path"
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
    /// Standard input or output (`-`): read or written once, in order.
    pub(crate) stdio: bool,
    /// The local server of a `[ CMD ]` location.
    pub(crate) server: Option<LocalServer>,
}

impl Opened {
    fn plain(endpoint: Arc<dyn Endpoint>) -> Opened {
        Opened { endpoint, part: None, known_zero: false, notes: Vec::new(), stdio: false, server: None }
    }

    /// Standard input as a source. It is copied as a stream
    /// (`wanblk_copy::copy_from_stream`), never through an endpoint: the
    /// endpoint here is an empty stand-in.
    pub(crate) fn stdin() -> Opened {
        let mut o = Opened::plain(Arc::new(NullEndpoint::new(0)));
        o.stdio = true;
        o
    }

    /// After a successful copy: flush a new file and move it into place;
    /// write out what a pipe or a local server holds.
    pub(crate) async fn commit(&self) -> anyhow::Result<()> {
        if let Some((part, fin)) = &self.part {
            self.endpoint.flush().await.with_context(|| format!("flushing {}", part.display()))?;
            std::fs::rename(part, fin)
                .with_context(|| format!("renaming {} to {}", part.display(), fin.display()))?;
        }
        if self.stdio || (self.server.is_some() && self.endpoint.capabilities().can_flush) {
            self.endpoint.flush().await.with_context(|| format!("flushing {}", self.endpoint.name()))?;
        }
        Ok(())
    }

    /// Ends a session this location owns (a pipe, a local server's; a
    /// pool is closed by its `Remote`) and stops the local server.
    pub(crate) async fn close(&mut self) -> anyhow::Result<()> {
        let mut result = Ok(());
        if self.stdio || self.server.is_some() {
            result = self.endpoint.close().await.with_context(|| format!("closing {}", self.endpoint.name()));
        }
        if let Some(server) = self.server.as_mut() {
            server.stop().await;
        }
        result
    }
}

/// Starts the local server of `[ CMD ]` and opens a session to it.
async fn open_command(argv: &[String], remote: &Remote) -> anyhow::Result<Opened> {
    let o = remote.options();
    let opts = wanblk_nbd::NbdOptions {
        structured_replies: o.structured_replies,
        block_status: o.structured_replies,
        ..wanblk_nbd::NbdOptions::default()
    };
    let (server, session) = LocalServer::start(argv, opts).await?;
    let mut opened = Opened::plain(Arc::new(session));
    opened.notes.push(format!("{}: a local NBD server, one session", server.name()));
    opened.server = Some(server);
    Ok(opened)
}

/// A note (source) or an error (destination) for a file in a disk image
/// format: wanblk copies raw bytes.
fn image_format_check(p: &Path, destination: bool) -> anyhow::Result<Option<String>> {
    let Some(f) = Format::of_file(p) else { return Ok(None) };
    let (name, fmt) = (p.display(), f.qemu_name());
    if destination {
        bail!(
            "{name} is a {fmt} image: writing raw bytes over it would destroy it. To write into the disk it holds, use `[ qemu-nbd -f {fmt} {name} ]` as the destination; to replace the file, remove it first"
        );
    }
    Ok(Some(format!(
        "{name} looks like a {fmt} image: it is copied as raw bytes (the {fmt} file itself, not the disk it holds). To copy the disk, use `[ qemu-nbd -r -f {fmt} {name} ]` as the source"
    )))
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
        Location::File(p) => {
            let mut o = Opened::plain(Arc::new(FileEndpoint::open(p, false)?));
            o.notes.extend(image_format_check(p, false)?);
            Ok(o)
        }
        Location::Command(argv) => open_command(argv, remote).await,
        Location::Stdio => bail!("standard input is copied as a stream, not opened as a store"),
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

/// The location is a file that does not exist yet: a copy writes it as
/// `.wanblk-part` and renames it when complete.
pub(crate) fn is_new_file(loc: &Location) -> bool {
    matches!(loc, Location::File(p) if matches!(std::fs::metadata(p), Err(e) if e.kind() == std::io::ErrorKind::NotFound))
}

/// Reopens the `.wanblk-part` file of a new destination `p` that an
/// earlier, interrupted copy of `size` bytes left behind; `None` if it is
/// not there (or not of that size).
pub(crate) fn reopen_part(p: &Path, size: u64) -> anyhow::Result<Option<Opened>> {
    let part = part_path(p);
    match std::fs::metadata(&part) {
        Ok(m) if m.is_file() && m.len() == size => {
            let ep = FileEndpoint::open(&part, true)?;
            let mut o = Opened::plain(Arc::new(ep));
            o.part = Some((part, p.to_path_buf()));
            Ok(Some(o))
        }
        _ => Ok(None),
    }
}

/// Opens a copy destination for a source of `size` bytes.
pub(crate) async fn open_destination(
    loc: &Location,
    size: u64,
    remote: &mut Remote,
) -> anyhow::Result<Opened> {
    match loc {
        Location::Remote(uri) => open_remote(uri, remote).await,
        Location::Command(argv) => open_command(argv, remote).await,
        Location::Stdio => {
            use std::io::IsTerminal;
            if std::io::stdout().is_terminal() {
                bail!(
                    "standard output is a terminal: redirect it (`> disk.img`, `| sha256sum`) or name a file"
                );
            }
            let sink = PipeSink::new("-", size, Box::new(std::io::stdout()))?;
            let mut o = Opened::plain(Arc::new(sink));
            o.stdio = true;
            o.notes.push(
                "-: standard output is written in order, as one stream (nothing else goes to stdout)"
                    .to_string(),
            );
            Ok(o)
        }
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
                image_format_check(p, true)?;
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
        assert!(Location::parse("file://").unwrap_err().to_string().contains("names no file"));
        assert_eq!(Location::parse("-").unwrap(), Location::Stdio);
        assert!(Location::parse("[").unwrap_err().to_string().contains("without its partner"));
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_bracket_group_is_one_location() {
        let args = group_brackets(os(&[
            "wanblk", "copy", "-C", "4", "[", "qemu-nbd", "-f", "qcow2", "d.qcow2", "]", "out.img",
        ]));
        assert_eq!(args.len(), 6, "{args:?}");
        let loc = args[4].to_str().unwrap();
        assert_eq!(
            Location::parse(loc).unwrap(),
            Location::Command(vec!["qemu-nbd".into(), "-f".into(), "qcow2".into(), "d.qcow2".into()])
        );
        assert_eq!(shown(loc), "[ qemu-nbd -f qcow2 d.qcow2 ]");
        assert_eq!(args[5], "out.img");
        // Two groups, and `--` before them.
        let args = group_brackets(os(&["copy", "--", "[", "a", "]", "[", "b", "-x", "]"]));
        assert_eq!(args.len(), 4, "{args:?}");
        assert!(
            matches!(Location::parse(args[3].to_str().unwrap()).unwrap(), Location::Command(v) if v == ["b", "-x"])
        );
        // An unmatched [ is left alone (and refused by the parser).
        assert_eq!(group_brackets(os(&["copy", "[", "a"])).len(), 3);
        assert!(Location::parse(group_brackets(os(&["[", "]"]))[0].to_str().unwrap()).is_err());
    }

    #[test]
    fn shown_locations_hide_iscsi_passwords() {
        assert_eq!(shown("iscsi://u%secret@h/iqn.x/1"), "iscsi://u@h/iqn.x/1");
        assert_eq!(shown("nbd://h/x"), "nbd://h/x");
    }

    #[test]
    fn part_names() {
        assert_eq!(part_path(Path::new("/a/b.img")), PathBuf::from("/a/b.img.wanblk-part"));
    }
}
