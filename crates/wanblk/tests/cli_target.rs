//! `wanblk target` from the command line (the README's `wanblk target
//! --size 4G`): it prints its URIs, nbdinfo sees the export as served,
//! clients write and read it over TCP and a Unix socket, and SIGTERM
//! stops it cleanly (exit 0, socket and pid file removed). With `--file`
//! what clients wrote is in the file.

mod common;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use wanblk_testkit::{require_tool, run, wait_child};

const SIZE: u64 = 32 << 20;

/// `wanblk target ARGS...` with stdout piped; returns it and the first
/// `lines` lines it printed (its URIs).
fn start_target(args: &[&str], lines: usize) -> (Child, Vec<String>) {
    let mut child = wanblk()
        .arg("target")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start wanblk target");
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        std::io::BufReader::new(stdout).lines().take(lines).collect::<Result<Vec<_>, _>>()
    });
    // If the target never prints, kill it so the reader ends, then fail.
    let pid = child.id();
    let uris = wanblk_testkit::try_join_within(reader, Duration::from_secs(20), "reading the target's URIs")
        .unwrap_or_else(|e| {
            let _ = child.kill();
            let _ = child.wait();
            panic!("wanblk target (pid {pid}): {e}")
        })
        .expect("the target's stdout");
    (child, uris)
}

/// SIGTERM, then the target must exit 0 by itself.
fn stop(mut child: Child) {
    wanblk_sys::process::signal(child.id(), wanblk_sys::process::SIGTERM).unwrap();
    let st = wait_child(&mut child, Duration::from_secs(20), "wanblk target after SIGTERM");
    assert!(st.success(), "wanblk target exits 0 on SIGTERM: {st}");
}

#[test]
fn a_memory_target_serves_nbd_clients_over_tcp_and_unix() {
    require_tool("nbdinfo", "libnbd-bin");
    let dir = tempdir();
    let (sock, pid_file) = (dir.path().join("t.sock"), dir.path().join("t.pid"));
    let (child, uris) = start_target(
        &[
            "--size",
            "32M",
            "--listen",
            "127.0.0.1:0",
            "--socket",
            sock.to_str().unwrap(),
            "--export",
            "disk",
            "--pid-file",
            pid_file.to_str().unwrap(),
        ],
        2,
    );
    let (tcp, unix) = (&uris[0], &uris[1]);
    assert!(tcp.starts_with("nbd://127.0.0.1:") && tcp.ends_with("/disk"), "{uris:?}");
    assert!(unix.starts_with("nbd+unix:///disk?socket="), "{uris:?}");
    let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert_eq!(pid, child.id(), "the pid file names the target");

    let info = run(Command::new("nbdinfo").args(["--json", tcp]));
    let json: serde_json::Value = serde_json::from_str(&info).expect("nbdinfo JSON");
    let export = &json["exports"][0];
    assert_eq!(export["export-name"], "disk", "{json}");
    assert_eq!(export["export-size"], SIZE, "{json}");
    assert_eq!(export["description"], "wanblk embedded target", "{json}");
    assert_eq!(export["is_read_only"], false, "{json}");

    // Write over the Unix socket with wanblk, read back over TCP with nbdcopy.
    let src = dir.path().join("src.img");
    let sha = random_file(&src, SIZE, 0x7a67).unwrap();
    copy_ok(&[src.to_str().unwrap(), unix, "-C", "2", "--flush"]);
    let back = dir.path().join("back.img");
    peers::nbdcopy(tcp, back.to_str().unwrap(), &[]);
    assert_eq!(sha256_file(&back).unwrap(), sha, "the target holds what was written");

    stop(child);
    assert!(!sock.exists(), "the socket is removed on exit");
    assert!(!pid_file.exists(), "the pid file is removed on exit");
}

#[test]
fn a_file_target_keeps_what_clients_wrote() {
    let dir = tempdir();
    let disk = dir.path().join("disk.img");
    let (child, uris) =
        start_target(&["--file", disk.to_str().unwrap(), "--create", "32M", "--listen", "127.0.0.1:0"], 1);
    assert_eq!(std::fs::metadata(&disk).unwrap().len(), SIZE, "--create made the file");
    let src = dir.path().join("src.img");
    let sha = random_file(&src, SIZE, 0x7a68).unwrap();
    peers::nbdcopy(src.to_str().unwrap(), &uris[0], &["--flush"]);
    stop(child);
    assert_eq!(sha256_file(&disk).unwrap(), sha, "the file holds what the client wrote");

    // --create never overwrites.
    let out = wanblk_testkit::run_with_timeout(
        wanblk().args([
            "target",
            "--file",
            disk.to_str().unwrap(),
            "--create",
            "1M",
            "--listen",
            "127.0.0.1:0",
        ]),
        Duration::from_secs(20),
    );
    assert!(!out.status.success(), "refused");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(sha256_file(&disk).unwrap(), sha, "the file is untouched");
}
