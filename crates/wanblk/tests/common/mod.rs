//! Helpers for the command-level tests: run the `wanblk` binary, read its
//! JSON report, make test images.
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

pub use wanblk_testkit::{peers, random_file, sha256_file, tempdir};

/// How long one `wanblk copy` of a test may run before it is killed and
/// the test fails: the largest copies (1 GiB through a rate limit, 256 MiB
/// round trips) take seconds; a hang must not block CI.
pub const COPY_TIMEOUT: Duration = Duration::from_secs(120);

/// The `wanblk` binary built for this test run.
pub fn wanblk() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wanblk"))
}

/// Runs `wanblk copy --no-progress ARGS...` and returns its output.
///
/// # Panics
/// After [`COPY_TIMEOUT`] (the copy is killed by PID first), naming the
/// command.
pub fn copy(args: &[&str]) -> Output {
    copy_within(args, COPY_TIMEOUT)
}

/// Like [`copy`], with its own timeout.
pub fn copy_within(args: &[&str], timeout: Duration) -> Output {
    wanblk_testkit::run_with_timeout(wanblk().arg("copy").arg("--no-progress").args(args), timeout)
}

/// Like [`copy`], but panics with the command's stderr if it fails.
pub fn copy_ok(args: &[&str]) -> Output {
    let out = copy(args);
    assert!(
        out.status.success(),
        "wanblk copy {args:?} failed: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Reads a `--report` JSON file.
pub fn report(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("report {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("report {} is not JSON: {e}\n{text}", path.display()))
}

/// Asserts that the report's one network store was reached over exactly
/// `n` sessions and that each of them carried data: the sessions that
/// really opened and worked, not the count asked for (`connections`).
pub fn assert_sessions_carried(r: &serde_json::Value, n: usize) {
    let stores = r["stores"].as_array().unwrap_or_else(|| panic!("report without stores: {r}"));
    assert_eq!(stores.len(), 1, "one network store: {r}");
    let bytes = session_bytes(r);
    assert_eq!(bytes.len(), n, "{n} sessions opened: bytes per session {bytes:?}");
    assert!(bytes.iter().all(|&b| b > 0), "each of the {n} sessions carried data: {bytes:?}");
    assert!(
        bytes.iter().sum::<u64>() >= r["data_bytes"].as_u64().unwrap_or(u64::MAX),
        "the sessions carried at least the data copied: {bytes:?}, {r}"
    );
}

/// Bytes each session of the report's first network store carried.
pub fn session_bytes(r: &serde_json::Value) -> Vec<u64> {
    r["stores"][0]["session_bytes"]
        .as_array()
        .unwrap_or_else(|| panic!("store without session_bytes: {r}"))
        .iter()
        .map(|b| b.as_u64().expect("session bytes are a number"))
        .collect()
}

/// `wanblk copy URI null: ARGS... --checksum --report REPORT` from nbdkit's
/// `pattern` plugin of `size` bytes: checks the data read is the pattern
/// (sha256) and returns the report.
pub fn copy_pattern(uri: &str, size: u64, args: &[&str], report_path: &Path) -> serde_json::Value {
    let mut all = vec![uri, "null:"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--checksum", "--report", report_path.to_str().expect("UTF-8 path")]);
    let out = copy_ok(&all);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        pattern_sha256(size),
        "the data is nbdkit's pattern"
    );
    report(report_path)
}

/// Creates a sparse file of `size` bytes.
pub fn sparse_file(path: &Path, size: u64) {
    std::fs::File::create(path).and_then(|f| f.set_len(size)).expect("create sparse file");
}

/// Backs up a random image to `uri` with `conns` connections, reads it back
/// with nbdcopy and restores it with wanblk; every copy is checked by sha256
/// against the source.
pub fn round_trip(dir: &Path, src: &Path, src_sha: &str, uri: &str, conns: usize) {
    let n = conns.to_string();
    let rep = dir.join(format!("backup-{conns}.json"));
    copy_ok(&[src.to_str().unwrap(), uri, "-C", &n, "--report", rep.to_str().unwrap()]);
    let r = report(&rep);
    assert_eq!(r["connections"], conns, "backup used the sessions asked for: {r}");
    assert_sessions_carried(&r, conns);
    assert_eq!(r["bytes"], std::fs::metadata(src).unwrap().len());
    // What the server holds, read by an independent client.
    let readback = dir.join(format!("readback-{conns}.img"));
    peers::nbdcopy(uri, readback.to_str().unwrap(), &[]);
    assert_eq!(sha256_file(&readback).unwrap(), src_sha, "server holds what was backed up");
    std::fs::remove_file(&readback).unwrap();
    // Restore with wanblk, hashing on the fly.
    let restored = dir.join(format!("restored-{conns}.img"));
    let rep = dir.join(format!("restore-{conns}.json"));
    let out = copy_ok(&[
        uri,
        restored.to_str().unwrap(),
        "-C",
        &n,
        "--checksum",
        "--report",
        rep.to_str().unwrap(),
    ]);
    assert_eq!(sha256_file(&restored).unwrap(), src_sha, "restored image equals the source");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), src_sha, "--checksum printed the image's sha256");
    let r = report(&rep);
    assert_eq!(r["sha256"], src_sha);
    assert_eq!(r["connections"], conns);
    assert_sessions_carried(&r, conns);
    assert!(r["samples"].as_array().is_some_and(|s| !s.is_empty()), "goodput samples recorded: {r}");
    std::fs::remove_file(&restored).unwrap();
}

/// Image size for the round-trip tests.
pub const IMAGE: u64 = 256 << 20;

/// A tgtd serving one target whose LUN 1 is a backing file of [`IMAGE`]
/// bytes, with the long-fat-network limits raised (as `wanblk copy` users
/// are told to), for the `copy_iscsi_*` tests.
pub struct IscsiLun {
    /// The daemon (stopped on drop).
    pub tgt: wanblk_testkit::tgt::Tgt,
    /// LUN 1's backing file.
    pub file: std::path::PathBuf,
    /// LUN 1's URI.
    pub uri: String,
}

/// Starts tgtd with target `iqn` (tid 1), LUN 1 of [`IMAGE`] bytes in
/// blocks of `block_size` bytes (tgt's default 512 if `None`).
pub fn iscsi_lun(iqn: &str, block_size: Option<u32>) -> IscsiLun {
    let tgt = wanblk_testkit::tgt::Tgt::start();
    let file = tgt.file("lun.img", IMAGE);
    tgt.target(1, iqn, &file, block_size, false);
    tgt.lfn(1);
    let uri = tgt.uri(iqn);
    IscsiLun { tgt, file, uri }
}

/// Backs up `src` (sha256 `src_sha`) to the LUN with `-C conns` and
/// `extra` flags, checks the LUN's backing file, then restores the LUN to
/// a new file with `--checksum` and checks that and the reports. Returns the
/// restore's stderr (with `--log` in `extra`, the driver's log).
pub fn iscsi_round_trip(
    dir: &Path,
    src: &Path,
    src_sha: &str,
    lun: &IscsiLun,
    conns: usize,
    extra: &[&str],
) -> String {
    let n = conns.to_string();
    let rep = dir.join("backup.json");
    let mut args = vec![src.to_str().unwrap(), &lun.uri, "-C", &n, "--report", rep.to_str().unwrap()];
    args.extend(extra);
    copy_ok(&args);
    let r = report(&rep);
    assert_eq!(r["connections"], conns, "backup used the connections asked for: {r}");
    assert_sessions_carried(&r, conns);
    assert_eq!(r["complete"], true, "{r}");
    assert_eq!(r["bytes"], IMAGE);
    assert_eq!(sha256_file(&lun.file).unwrap(), src_sha, "the LUN's backing file holds what was backed up");

    let restored = dir.join("restored.img");
    let rep = dir.join("restore.json");
    let mut args = vec![
        lun.uri.as_str(),
        restored.to_str().unwrap(),
        "-C",
        &n,
        "--checksum",
        "--report",
        rep.to_str().unwrap(),
    ];
    args.extend(extra);
    let out = copy_ok(&args);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), src_sha, "--checksum printed the image's sha256");
    assert_eq!(sha256_file(&restored).unwrap(), src_sha, "restored image equals the source");
    let r = report(&rep);
    assert_eq!(r["sha256"], src_sha, "{r}");
    assert_eq!(r["connections"], conns, "restore used the connections asked for: {r}");
    assert_sessions_carried(&r, conns);
    assert_eq!(r["bytes"], IMAGE);
    std::fs::remove_file(&restored).unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The TSIH of every iSCSI login in a `--log wanblk_iscsi=debug` stderr,
/// in order (one per connection; connections of one MC/S session share it).
pub fn iscsi_login_tsihs(log: &str) -> Vec<u32> {
    // Drop the log's colour escapes (ESC [ ... m).
    let mut plain = String::with_capacity(log.len());
    let mut esc = false;
    for ch in log.chars() {
        match (esc, ch) {
            (false, '\x1b') => esc = true,
            (true, 'm') => esc = false,
            (true, _) => {}
            (false, c) => plain.push(c),
        }
    }
    plain
        .lines()
        .filter(|l| l.contains("iSCSI login complete"))
        .filter_map(|l| l.split("tsih=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

/// A `wanblk target` listening on a free port of 127.0.0.1, its stdout and
/// stderr in files (for tests that read what it printed), stopped by PID
/// on drop.
pub struct Target {
    /// The process.
    pub peer: wanblk_testkit::Peer,
    /// Its TCP port.
    pub port: u16,
    /// Where its stderr goes.
    pub stderr: std::path::PathBuf,
}

/// Starts `wanblk target --listen 127.0.0.1:PORT ARGS...` and waits for it
/// to listen; `name` names its output files in `dir`.
pub fn target(dir: &Path, name: &str, args: &[&str]) -> Target {
    let port = wanblk_testkit::free_port();
    let stderr = dir.join(format!("{name}.stderr"));
    let mut cmd = wanblk();
    cmd.args(["target", "--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        .stdout(std::fs::File::create(dir.join(format!("{name}.stdout"))).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap());
    let peer = wanblk_testkit::Peer::spawn("wanblk target", &mut cmd);
    wanblk_testkit::wait_for_tcp(std::net::SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_secs(20));
    Target { peer, port, stderr }
}

/// Everything a test's commands printed or wrote, to check that no secret
/// (CHAP secret, private key material) ever shows in it.
#[derive(Default)]
pub struct Outputs(Vec<(String, Vec<u8>)>);

impl Outputs {
    /// Adds a command's stdout and stderr.
    pub fn output(&mut self, what: &str, out: &Output) -> &mut Self {
        self.0.push((format!("{what} (stdout)"), out.stdout.clone()));
        self.0.push((format!("{what} (stderr)"), out.stderr.clone()));
        self
    }

    /// Adds a file (a report, a log), if it exists.
    pub fn file(&mut self, path: &Path) -> &mut Self {
        if let Ok(b) = std::fs::read(path) {
            self.0.push((path.display().to_string(), b));
        }
        self
    }

    /// Adds every file of `dir` whose name ends with one of `suffixes`.
    pub fn files_in(&mut self, dir: &Path, suffixes: &[&str]) -> &mut Self {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if suffixes.iter().any(|s| name.ends_with(s)) {
                self.file(&e.path());
            }
        }
        self
    }

    /// How many outputs were collected.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Fails naming the output and the secret if any secret shows (also
    /// percent-encoded or as hex).
    pub fn assert_no_secret(&self, secrets: &[String]) {
        assert!(!self.0.is_empty(), "no output collected");
        for s in secrets {
            assert!(s.len() >= 6, "secret {s:?} is too short to look for reliably");
            let forms = [s.clone(), hex::encode(s.as_bytes()), s.replace('/', "%2F").replace('@', "%40")];
            for (what, bytes) in &self.0 {
                let text = String::from_utf8_lossy(bytes);
                for f in &forms {
                    // The message names where, never the line (it holds the secret).
                    if let Some(n) = text.lines().position(|l| l.contains(f.as_str())) {
                        panic!("a secret shows in line {} of {what}", n + 1);
                    }
                }
            }
        }
    }
}

/// sha256 of nbdkit's `pattern` plugin: each 8-byte big-endian word holds its offset.
pub fn pattern_sha256(size: u64) -> String {
    let mut h = <sha2::Sha256 as sha2::Digest>::new();
    let mut buf = Vec::with_capacity(1 << 20);
    let mut off = 0u64;
    while off < size {
        buf.clear();
        for w in 0..(1u64 << 17) {
            buf.extend_from_slice(&(off + w * 8).to_be_bytes());
        }
        sha2::Digest::update(&mut h, &buf);
        off += 1 << 20;
    }
    hex::encode(sha2::Digest::finalize(h))
}

/// Starts `wanblk copy ARGS... --no-progress` in the background (stdout
/// and stderr captured); it is killed by PID if dropped before waited for.
pub fn spawn_copy(args: &[&str]) -> wanblk_testkit::Running {
    wanblk_testkit::Running::start(wanblk().arg("copy").args(args).arg("--no-progress"))
}

/// Waits until `cond` holds, checking every 10 ms.
///
/// # Panics
/// After `limit`, naming `what`.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Writes nbdkit's log filter (`--filter=log logfile=PATH`) shows as
/// answered successfully so far.
pub fn logged_writes(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().filter(|l| l.contains("...Write id=") && l.contains("return=0")).count())
        .unwrap_or(0)
}

/// Bytes of `path` on disk (allocated blocks), 0 if it does not exist.
pub fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map(|m| m.blocks() * 512).unwrap_or(0)
}

/// Output of a finished command as text: (exit code, stdout, stderr).
pub fn text(out: &Output) -> (Option<i32>, String, String) {
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
