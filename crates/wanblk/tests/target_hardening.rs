//! The embedded target against hostile or careless clients: one that
//! pipelines large reads and never reads its socket, thousands of idle
//! connections, running out of descriptors, a client that never finishes
//! its handshake; and how it may be exposed (clear text beyond loopback,
//! Unix socket permissions). Memory and descriptors stay bounded, other
//! clients are served (bytes checked by sha256), and the target says why
//! it dropped someone.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const DISK: u64 = 64 << 20;

/// A field of /proc/PID/status, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("target's /proc status");
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Descriptors the process holds.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// Polls `cond` every 50 ms for up to `secs` seconds; panics naming `what`.
fn wait_until(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < end, "timed out after {secs} s waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The fixed newstyle handshake by hand (NBD_OPT_EXPORT_NAME of the
/// default export, no zero padding): returns the export size.
fn handshake(s: &mut TcpStream) -> u64 {
    let mut hello = [0u8; 18];
    s.read_exact(&mut hello).unwrap();
    assert_eq!(&hello[..16], b"NBDMAGICIHAVEOPT");
    let flags = u16::from_be_bytes([hello[16], hello[17]]) & 3;
    s.write_all(&u32::from(flags).to_be_bytes()).unwrap();
    let mut opt = b"IHAVEOPT".to_vec();
    opt.extend(1u32.to_be_bytes()); // NBD_OPT_EXPORT_NAME
    opt.extend(0u32.to_be_bytes());
    s.write_all(&opt).unwrap();
    let mut info = vec![0u8; if flags & 2 != 0 { 10 } else { 134 }];
    s.read_exact(&mut info).unwrap();
    u64::from_be_bytes(info[..8].try_into().unwrap())
}

/// NBD_CMD_READ.
fn read_request(cookie: u64, offset: u64, len: u32) -> Vec<u8> {
    let mut r = 0x2560_9513u32.to_be_bytes().to_vec();
    r.extend([0, 0, 0, 0]); // flags, type READ
    r.extend(cookie.to_be_bytes());
    r.extend(offset.to_be_bytes());
    r.extend(len.to_be_bytes());
    r
}

/// Backs a random image of [`DISK`] bytes up to the target; its sha256.
fn fill(dir: &Path, uri: &str) -> String {
    let src = dir.join("src.img");
    let sha = random_file(&src, DISK, 0x5eed).unwrap();
    copy_ok(&[src.to_str().unwrap(), uri, "-C", "2"]);
    sha
}

/// Restores the target's disk with `-C 2` and checks its sha256.
fn restore_matches(dir: &Path, uri: &str, sha: &str, what: &str) {
    let out = dir.join("restored.img");
    copy_ok(&[uri, out.to_str().unwrap(), "-C", "2"]);
    assert_eq!(sha256_file(&out).unwrap(), sha, "{what}: another client restored the disk intact");
    std::fs::remove_file(out).unwrap();
}

#[test]
fn a_client_that_never_reads_holds_bounded_memory_and_is_dropped_when_idle() {
    const REQUEST: u32 = 4 << 20;
    const REQUESTS: u64 = 256; // 1 GiB of replies asked for
    let dir = tempdir();
    let t = target(
        dir.path(),
        "slow",
        &["--size", &DISK.to_string(), "--max-in-flight", "4", "--idle-timeout", "3s"],
    );
    let uri = format!("nbd://127.0.0.1:{}/", t.port);
    let sha = fill(dir.path(), &uri);
    let pid = t.peer.pid();
    let before = status_kib(pid, "VmRSS");

    let mut slow = TcpStream::connect(("127.0.0.1", t.port)).unwrap();
    assert_eq!(handshake(&mut slow), DISK);
    slow.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut reqs = Vec::new();
    for i in 0..REQUESTS {
        reqs.extend(read_request(i, i * u64::from(REQUEST) % DISK, REQUEST));
    }
    slow.write_all(&reqs).unwrap(); // 7 KiB of requests; never a byte read back

    // Others are served meanwhile.
    restore_matches(dir.path(), &uri, &sha, "beside a client that does not read");
    // Let the target serve what it will, then look at its peak.
    let mut last = 0;
    let mut stable = 0;
    wait_until(20, "the target's peak memory settles", || {
        let peak = status_kib(pid, "VmHWM");
        stable = if peak == last { stable + 1 } else { 0 };
        last = peak;
        stable >= 20
    });
    let grown_mib = (last.saturating_sub(before)) / 1024;
    // Bound: 64 MiB of queued replies (ServeOptions::max_queued_bytes), 4
    // requests in flight, the restore's buffers; the client asked for 1 GiB.
    let asked_mib = (REQUESTS * u64::from(REQUEST)) >> 20;
    eprintln!("the target grew by {grown_mib} MiB for {asked_mib} MiB of reads never read back");
    assert!(
        grown_mib < asked_mib / 4,
        "the target grew by {grown_mib} MiB for a client that reads nothing ({asked_mib} MiB asked for)"
    );

    // --idle-timeout: a client that reads no reply is dropped, and says why.
    wait_until(30, "the target drops the client that does not read", || {
        std::fs::read_to_string(&t.stderr).unwrap_or_default().contains("read no reply")
    });
    restore_matches(dir.path(), &uri, &sha, "after dropping the slow client");
}

#[test]
fn thousands_of_idle_connections_do_not_lock_others_out() {
    const IDLE: usize = 2000;
    const MAX: usize = 100;
    let dir = tempdir();
    let t = target(dir.path(), "idle", &["--size", &DISK.to_string(), "--max-clients", &MAX.to_string()]);
    let uri = format!("nbd://127.0.0.1:{}/", t.port);
    let sha = fill(dir.path(), &uri);
    let pid = t.peer.pid();
    let (fds_before, rss_before) = (fds(pid), status_kib(pid, "VmRSS"));
    let limit = wanblk_sys::process::raise_nofile(IDLE as u64 + 256).expect("getrlimit");
    assert!(limit >= IDLE as u64 + 64, "this test needs {IDLE} descriptors; the hard limit is {limit}");

    // Connections that never say a word (each waits in its handshake).
    let mut idle: Vec<TcpStream> =
        (0..IDLE).map(|_| TcpStream::connect(("127.0.0.1", t.port)).expect("connect")).collect();
    // Every one was accepted: it got the greeting, or was dropped to make
    // room (the oldest handshaking one goes for each newcomer).
    for s in &mut idle {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut hello = [0u8; 18];
        let _ = s.read_exact(&mut hello);
    }
    restore_matches(dir.path(), &uri, &sha, "with 2000 idle connections open");
    assert!(
        fds(pid) <= fds_before + MAX,
        "{} descriptors open in the target with --max-clients {MAX} ({fds_before} before)",
        fds(pid)
    );
    let grown_mib = status_kib(pid, "VmHWM").saturating_sub(rss_before) / 1024;
    assert!(grown_mib < 64, "the target grew by {grown_mib} MiB for {IDLE} idle connections");
    drop(idle);
}

#[test]
fn running_out_of_descriptors_backs_off_and_recovers() {
    let dir = tempdir();
    let port = wanblk_testkit::free_port();
    let stderr = dir.path().join("emfile.stderr");
    let mut cmd = std::process::Command::new("sh");
    // A low descriptor limit for the target only.
    cmd.args(["-c", "ulimit -n 40 && exec \"$0\" \"$@\"", env!("CARGO_BIN_EXE_wanblk")])
        .args(["target", "--size", &DISK.to_string(), "--listen", &format!("127.0.0.1:{port}")])
        .args(["--handshake-timeout", "1s", "--max-clients", "1000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap());
    let _peer = wanblk_testkit::Peer::spawn("wanblk target (40 descriptors)", &mut cmd);
    wanblk_testkit::wait_for_tcp(std::net::SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_secs(20));
    let uri = format!("nbd://127.0.0.1:{port}/");

    // More silent connections than the target has descriptors: it runs out,
    // waits, and takes the rest as the handshake timeout frees descriptors.
    let idle: Vec<TcpStream> = (0..120).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    let sha = fill(dir.path(), &uri);
    restore_matches(dir.path(), &uri, &sha, "after running out of descriptors");
    drop(idle);
    let log = std::fs::read_to_string(&stderr).unwrap();
    assert!(log.contains("backing off"), "the target said it ran out of descriptors:\n{log}");
    // One warning per episode, not one per failed accept (a spinning loop
    // writes thousands).
    let lines = log.lines().filter(|l| l.contains("accept failed")).count();
    assert!(lines < 40, "{lines} accept warnings:\n{log}");
}

#[test]
fn a_silent_client_is_dropped_after_the_handshake_timeout() {
    let dir = tempdir();
    let t = target(dir.path(), "hs", &["--size", "1M", "--handshake-timeout", "1s"]);
    let mut s = TcpStream::connect(("127.0.0.1", t.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut all = Vec::new();
    // The greeting, then the target closes: read_to_end returns (a timeout
    // would be an error).
    s.read_to_end(&mut all).expect("the target closes a connection that never finishes its handshake");
    assert!(all.starts_with(b"NBDMAGICIHAVEOPT"), "{all:?}");
    wait_until(10, "the target logs why", || {
        std::fs::read_to_string(&t.stderr).unwrap_or_default().contains("--handshake-timeout")
    });
}

#[test]
fn exposure_is_refused_or_restricted() {
    let dir = tempdir();
    // Clear text beyond loopback: refused, saying what to do.
    let out = wanblk_testkit::run_with_timeout(
        wanblk().args(["target", "--size", "1M", "--listen", "0.0.0.0:0"]),
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("refusing to listen") && e.contains("--tls require") && e.contains("--insecure"),
        "{e}"
    );

    // A Unix socket only its owner may use, unless asked otherwise.
    for (mode, want) in [(None, 0o600), (Some("660"), 0o660)] {
        let sock = dir.path().join(format!("t{want:o}.sock"));
        let mut cmd = wanblk();
        cmd.args(["target", "--size", "1M", "--socket", sock.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if let Some(m) = mode {
            cmd.args(["--socket-mode", m]);
        }
        let _p = wanblk_testkit::Peer::spawn("wanblk target (unix)", &mut cmd);
        wanblk_testkit::wait_for_path(&sock, Duration::from_secs(20));
        let got = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
        assert_eq!(got, want, "socket mode with --socket-mode {mode:?}");
    }
}
