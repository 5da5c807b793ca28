//! Helpers shared by the integration tests: our server on a free port,
//! real peers started through testkit, timeouts, and data patterns.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::local::{Fill, MemoryEndpoint};
use wanblk_nbd::{NbdConnector, NbdOptions, NbdServer, NbdSession, ServeOptions};
pub mod hostile;

use wanblk_testkit::{Peer, free_port, require_tool, wait_for_path};

/// Every test step is bounded: nothing may hang.
pub async fn within<T>(secs: u64, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f).await.expect("timed out: something hangs")
}

/// Deterministic bytes for `len` at `seed`.
pub fn pattern(len: usize, seed: u64) -> Bytes {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

/// Our server on 127.0.0.1, stopped when the guard drops.
pub struct TestServer {
    pub addr: std::net::SocketAddr,
    pub uri: String,
    pub server: Arc<NbdServer>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub async fn start(backend: Arc<dyn Endpoint>, opts: ServeOptions) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let uri = format!("nbd://127.0.0.1:{}/{}", addr.port(), opts.export_name);
        let server = NbdServer::new(backend, opts);
        let (tx, rx) = oneshot::channel::<()>();
        let s = server.clone();
        let task = tokio::spawn(async move {
            s.serve_tcp(listener, async {
                let _ = rx.await;
            })
            .await
        });
        TestServer { addr, uri, server, stop: Some(tx), task: Some(task) }
    }

    pub async fn memory(size: u64, opts: ServeOptions) -> TestServer {
        Self::start(Arc::new(MemoryEndpoint::new("mem", size, Fill::Zero)), opts).await
    }

    /// Stops accepting and waits for the connections to end.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            within(10, t).await.unwrap().unwrap();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

pub async fn connect(uri: &str) -> NbdSession {
    connect_with(uri, NbdOptions::default()).await
}

pub async fn connect_with(uri: &str, opts: NbdOptions) -> NbdSession {
    let c = NbdConnector::new(uri, opts).unwrap();
    within(20, c.open()).await.unwrap_or_else(|e| panic!("connect {uri}: {e}"))
}

/// nbdkit on a Unix socket in `dir`; returns the guard and the URI.
pub fn nbdkit(dir: &Path, args: &[&str]) -> (Peer, String) {
    require_tool("nbdkit", "nbdkit");
    let id = free_port();
    let sock = dir.join(format!("nbdkit-{id}.sock"));
    // nbdkit writes its pid file once it accepts connections (the socket
    // path alone appears a moment before it listens).
    let pid = dir.join(format!("nbdkit-{id}.pid"));
    let peer = Peer::spawn(
        "nbdkit",
        Command::new("nbdkit")
            .args(["-f", "--exit-with-parent", "-P"])
            .arg(&pid)
            .arg("-U")
            .arg(&sock)
            .args(args),
    );
    wait_for_path(&pid, Duration::from_secs(10));
    (peer, format!("nbd+unix:///?socket={}", sock.display()))
}

/// nbdkit on a TCP port of 127.0.0.1.
pub fn nbdkit_tcp(args: &[&str]) -> (Peer, String) {
    require_tool("nbdkit", "nbdkit");
    let port = free_port();
    let peer = Peer::spawn(
        "nbdkit",
        Command::new("nbdkit")
            .args(["-f", "--exit-with-parent", "-i", "127.0.0.1", "-p"])
            .arg(port.to_string())
            .args(args),
    );
    wait_listening(port, Duration::from_secs(10));
    (peer, format!("nbd://127.0.0.1:{port}/"))
}

/// qemu-nbd serving a raw file on 127.0.0.1.
pub fn qemu_nbd(file: &Path, export: &str, extra: &[&str]) -> (Peer, String) {
    require_tool("qemu-nbd", "qemu-utils");
    let port = free_port();
    let peer = Peer::spawn(
        "qemu-nbd",
        Command::new("qemu-nbd")
            .args(["-f", "raw", "-b", "127.0.0.1", "-p"])
            .arg(port.to_string())
            .args(["-x", export])
            .args(extra)
            .arg(file),
    );
    // No probe connection: it would count against --shared.
    wait_listening(port, Duration::from_secs(10));
    (peer, format!("nbd://127.0.0.1:{port}/{export}"))
}

/// nbd-server (foreground) exporting `file` as `export`, from a generated config file.
pub fn nbd_server(dir: &Path, file: &Path, export: &str, extra: &str) -> (Peer, String) {
    require_tool("nbd-server", "nbd-server");
    let port = free_port();
    let cfg: PathBuf = dir.join("nbd-server.conf");
    std::fs::write(
        &cfg,
        format!(
            "[generic]\nlistenaddr = 127.0.0.1\nport = {port}\nallowlist = true\n\n[{export}]\nexportname = {}\n{extra}\n",
            file.display()
        ),
    )
    .unwrap();
    // -d keeps it in the foreground (so the guard can stop it by PID), but
    // then it serves a single connection: wait for the listening socket
    // without connecting to it.
    let peer = Peer::spawn("nbd-server", Command::new("nbd-server").arg("-d").arg("-C").arg(&cfg));
    wait_listening(port, Duration::from_secs(10));
    (peer, format!("nbd://127.0.0.1:{port}/{export}"))
}

/// Write, read back, flush, trim, zero and block status on any endpoint.
pub async fn exercise(ep: &dyn Endpoint) {
    let caps = ep.capabilities();
    let data = pattern(1 << 20, 7);
    ep.write(4 << 20, data.clone(), false).await.unwrap();
    assert_eq!(ep.read(4 << 20, 1 << 20).await.unwrap(), data, "read back what was written");
    // an unaligned small write inside
    ep.write((4 << 20) + 4096, Bytes::from_static(&[0xab; 512]), true).await.unwrap();
    let back = ep.read(4 << 20, 8192).await.unwrap();
    assert_eq!(&back[..4096], &data[..4096]);
    assert!(back[4096..4608].iter().all(|b| *b == 0xab));
    assert_eq!(&back[4608..], &data[4608..8192]);
    ep.flush().await.unwrap();
    ep.write_zeroes(4 << 20, 65536, false).await.unwrap();
    assert!(ep.read(4 << 20, 65536).await.unwrap().iter().all(|b| *b == 0), "zeroed");
    ep.write_zeroes((4 << 20) + 65536, 65536, true).await.unwrap();
    assert!(
        ep.read((4 << 20) + 65536, 65536).await.unwrap().iter().all(|b| *b == 0),
        "zeroed with trim allowed"
    );
    ep.trim((4 << 20) + (512 << 10), 512 << 10).await.unwrap();
    if caps.can_block_status {
        let ext = ep.block_status(0, ep.size()).await.unwrap();
        assert_eq!(ext[0].offset, 0);
        let mut pos = 0;
        for e in &ext {
            assert_eq!(e.offset, pos, "extents are contiguous");
            assert!(e.length > 0);
            pos += e.length;
        }
        assert!(pos <= ep.size());
    }
}

/// Waits until a socket listens on 127.0.0.1:`port` (from /proc/net/tcp),
/// without connecting to it.
pub fn wait_listening(port: u16, timeout: Duration) {
    let needle = format!("0100007F:{port:04X}");
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
        if table.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1] == needle && f[3] == "0A"
        }) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listens on port {port} after {timeout:?}");
}
