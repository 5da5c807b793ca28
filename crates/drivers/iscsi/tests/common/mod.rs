//! Shared support for the iSCSI integration tests: a real tgtd on free
//! ports (stopped by PID, targets deleted first), and a scripted fake
//! target on a TcpListener for protocol-violation tests.
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use wanblk_iscsi_proto::keys::Params;
use wanblk_iscsi_proto::pdu::{
    Codec, DataIn, Header, LoginResponse, NopIn, Pdu, RESERVED_TAG, ScsiCommand, ScsiResponse, Stage,
};
use wanblk_iscsi_proto::text;
use wanblk_testkit::{Peer, free_port, require_tool, run, wait_for_tcp};

/// A tgtd on 127.0.0.1 with its own portal and control ports.
pub struct Tgt {
    peer: Option<Peer>,
    pub port: u16,
    pub ctl: u16,
    tids: Mutex<Vec<u32>>,
    pub dir: tempfile::TempDir,
}

/// Long-fat-network settings raised on a target (tgt's maxima).
pub const LFN_TARGET_PARAMS: &[(&str, &str)] = &[
    ("MaxRecvDataSegmentLength", "16777215"),
    ("MaxXmitDataSegmentLength", "16777215"),
    ("MaxBurstLength", "16777215"),
    ("FirstBurstLength", "16777215"),
    ("InitialR2T", "No"),
    ("MaxOutstandingR2T", "16"),
];

impl Tgt {
    /// Starts tgtd and waits for its portal.
    pub fn start() -> Tgt {
        let tgtd = require_tool("tgtd", "tgt");
        require_tool("tgtadm", "tgt");
        let port = free_port();
        // The control "port" names tgtd's Unix socket; any unused number works.
        // tgtd 1.0.85 refuses large -C values ("out of range"): keep it small.
        let ctl = loop {
            let c = 6000 + free_port() % 24000;
            if c != port && !Path::new(&format!("/var/run/tgtd/socket.{c}")).exists() {
                break c;
            }
        };
        let peer = Peer::spawn(
            "tgtd",
            Command::new(tgtd)
                .args(["-f", "-C", &ctl.to_string(), "--iscsi", &format!("portal=127.0.0.1:{port}")])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
        );
        wait_for_tcp(SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_secs(10));
        let t =
            Tgt { peer: Some(peer), port, ctl, tids: Mutex::new(Vec::new()), dir: wanblk_testkit::tempdir() };
        // The Unix control socket may appear a moment after the portal.
        for _ in 0..100 {
            let ok = Command::new("tgtadm")
                .args(["-C", &ctl.to_string(), "--lld", "iscsi", "--op", "show", "--mode", "target"])
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        t
    }

    /// Runs tgtadm with this daemon's control port.
    pub fn tgtadm(&self, args: &[&str]) -> String {
        let ctl = self.ctl.to_string();
        let mut c = Command::new("tgtadm");
        c.args(["-C", &ctl, "--lld", "iscsi"]).args(args);
        run(&mut c)
    }

    /// A backing file of `size` bytes in the temp dir.
    pub fn file(&self, name: &str, size: u64) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::File::create(&p).and_then(|f| f.set_len(size)).expect("create backing file");
        p
    }

    /// Creates target `tid` named `iqn` with LUN 1 on `file`.
    pub fn target(&self, tid: u32, iqn: &str, file: &Path, block_size: Option<u32>, thin: bool) {
        let t = tid.to_string();
        self.tgtadm(&["--op", "new", "--mode", "target", "--tid", &t, "-T", iqn]);
        self.tids.lock().unwrap().push(tid);
        let path = file.to_str().unwrap().to_string();
        let mut args = vec![
            "--op",
            "new",
            "--mode",
            "logicalunit",
            "--tid",
            &t,
            "--lun",
            "1",
            "-b",
            &path,
            "--bstype",
            "rdwr",
        ];
        let bs = block_size.map(|b| b.to_string());
        if let Some(b) = &bs {
            args.extend(["--blocksize", b]);
        }
        self.tgtadm(&args);
        if thin {
            self.tgtadm(&[
                "--op",
                "update",
                "--mode",
                "logicalunit",
                "--tid",
                &t,
                "--lun",
                "1",
                "--params",
                "thin_provisioning=1",
            ]);
        }
        self.tgtadm(&["--op", "bind", "--mode", "target", "--tid", &t, "-I", "ALL"]);
    }

    /// Sets a target parameter (tgtadm --op update).
    pub fn set(&self, tid: u32, key: &str, value: &str) {
        let t = tid.to_string();
        self.tgtadm(&["--op", "update", "--mode", "target", "--tid", &t, "--name", key, "--value", value]);
    }

    /// Raises the target's limits for long-fat networks.
    pub fn lfn(&self, tid: u32) {
        for (k, v) in LFN_TARGET_PARAMS {
            self.set(tid, k, v);
        }
    }

    /// Adds CHAP account `user`/`password` and binds it to `tid`.
    pub fn chap(&self, tid: u32, user: &str, password: &str) {
        self.tgtadm(&["--op", "new", "--mode", "account", "--user", user, "--password", password]);
        self.tgtadm(&["--op", "bind", "--mode", "account", "--tid", &tid.to_string(), "--user", user]);
    }

    /// Deletes target `tid` at once (drops its connections).
    /// tgt refuses ("this logical unit is still active") while commands are
    /// queued on the LU, even with --force: retry for a while.
    pub fn delete_target(&self, tid: u32) {
        let ctl = self.ctl.to_string();
        let t = tid.to_string();
        for _ in 0..200 {
            let out = Command::new("tgtadm")
                .args([
                    "-C", &ctl, "--lld", "iscsi", "--op", "delete", "--force", "--mode", "target", "--tid",
                    &t,
                ])
                .output()
                .expect("run tgtadm");
            if out.status.success() {
                self.tids.lock().unwrap().retain(|&x| x != tid);
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("tgtadm could not delete target {tid}");
    }

    /// The URI of LUN 1 of `iqn`.
    pub fn uri(&self, iqn: &str) -> String {
        format!("iscsi://127.0.0.1:{}/{iqn}/1", self.port)
    }

    /// Kills tgtd at once (SIGKILL): every connection drops.
    pub fn kill(&mut self) {
        if let Some(p) = &self.peer {
            let _ = wanblk_sys::process::signal(p.pid(), wanblk_sys::process::SIGKILL);
        }
        if let Some(mut p) = self.peer.take() {
            p.stop();
        }
        self.tids.lock().unwrap().clear();
    }
}

impl Drop for Tgt {
    fn drop(&mut self) {
        if self.peer.is_none() {
            return;
        }
        let ctl = self.ctl.to_string();
        // tgtd ignores SIGTERM while targets exist: delete them, then the system.
        for tid in self.tids.lock().unwrap().drain(..) {
            let _ = Command::new("tgtadm")
                .args([
                    "-C", &ctl, "--lld", "iscsi", "--op", "delete", "--force", "--mode", "target", "--tid",
                ])
                .arg(tid.to_string())
                .output();
        }
        let _ = Command::new("tgtadm").args(["-C", &ctl, "--op", "delete", "--mode", "system"]).output();
        if let Some(mut p) = self.peer.take() {
            p.stop();
        }
    }
}

/// Deterministic pseudo-random bytes.
pub fn pattern(len: usize, seed: u64) -> Bytes {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    Bytes::from(v)
}

/// Reads `len` bytes at `offset` of `file`.
pub fn file_bytes(file: &Path, offset: u64, len: usize) -> Vec<u8> {
    use std::io::Seek;
    let mut f = std::fs::File::open(file).unwrap();
    f.seek(std::io::SeekFrom::Start(offset)).unwrap();
    let mut v = vec![0u8; len];
    f.read_exact(&mut v).unwrap();
    v
}

/// Runs `f` with a time limit: a hang is a test failure, not a stuck CI.
pub async fn within<T>(secs: u64, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f).await.expect("operation hung")
}

/// One scripted target connection.
pub struct FakeConn {
    pub stream: TcpStream,
    pub buf: BytesMut,
    pub codec: Codec,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    /// Login answers overriding "Irrelevant" for these keys.
    pub answers: Vec<(String, String)>,
}

impl FakeConn {
    /// Reads the next PDU from the initiator (None on EOF).
    pub fn recv(&mut self) -> Option<Pdu> {
        loop {
            if let Some(p) = self.codec.decode(&mut self.buf).expect("initiator sent a malformed PDU") {
                return Some(p);
            }
            let mut tmp = [0u8; 65536];
            let n = self.stream.read(&mut tmp).ok()?;
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&tmp[..n]);
        }
    }

    /// Sends raw bytes.
    pub fn send_raw(&mut self, b: &[u8]) {
        let _ = self.stream.write_all(b);
    }

    /// Sends a PDU.
    pub fn send(&mut self, h: Header, data: &[u8]) {
        let out = self.codec.encode(&h, Bytes::copy_from_slice(data));
        self.send_raw(&out.to_vec());
    }

    fn next_stat(&mut self) -> u32 {
        let s = self.stat_sn;
        self.stat_sn += 1;
        s
    }

    /// Answers the login: no authentication, every offered key answered
    /// Irrelevant (so RFC defaults apply), full feature phase at once.
    pub fn login(&mut self) {
        loop {
            let p = self.recv().expect("login request");
            let Header::LoginRequest(r) = p.header else { panic!("expected login, got {:?}", p.header) };
            let keys = text::parse(&p.data).unwrap();
            let mut answer: Vec<(String, String)> = Vec::new();
            for (k, _) in &keys {
                match k.as_str() {
                    "AuthMethod" => answer.push((k.clone(), "None".into())),
                    "InitiatorName" | "TargetName" | "SessionType" | "MaxRecvDataSegmentLength" => {}
                    _ => match self.answers.iter().find(|(a, _)| a == k) {
                        Some((_, v)) => answer.push((k.clone(), v.clone())),
                        None => answer.push((k.clone(), "Irrelevant".into())),
                    },
                }
            }
            self.exp_cmd_sn = r.cmd_sn;
            let done = r.transit && r.nsg == Stage::FullFeature;
            let stat = self.next_stat();
            let h = Header::LoginResponse(LoginResponse {
                transit: r.transit,
                cont: false,
                csg: r.csg,
                nsg: r.nsg,
                version_max: 0,
                version_active: 0,
                isid: r.isid,
                tsih: if done { 1 } else { 0 },
                itt: r.itt,
                stat_sn: stat,
                exp_cmd_sn: r.cmd_sn,
                max_cmd_sn: r.cmd_sn + 32,
                status_class: 0,
                status_detail: 0,
            });
            self.send(h, &text::encode(&answer));
            if done {
                for (k, v) in &self.answers {
                    match (k.as_str(), v.as_str()) {
                        ("HeaderDigest", "CRC32C") => self.codec.header_digest = true,
                        ("DataDigest", "CRC32C") => self.codec.data_digest = true,
                        _ => {}
                    }
                }
                return;
            }
        }
    }

    /// Completes a command with GOOD status and `data` in one Data-In.
    pub fn data_in_good(&mut self, c: &ScsiCommand, data: &[u8]) {
        let stat = self.next_stat();
        let h = Header::DataIn(DataIn {
            final_: true,
            ack: false,
            overflow: false,
            underflow: (data.len() as u32) < c.expected_len,
            has_status: true,
            status: 0,
            lun: c.lun,
            itt: c.itt,
            ttt: RESERVED_TAG,
            stat_sn: stat,
            exp_cmd_sn: c.cmd_sn + 1,
            max_cmd_sn: c.cmd_sn + 32,
            data_sn: 0,
            buffer_offset: 0,
            residual: c.expected_len.saturating_sub(data.len() as u32),
        });
        self.send(h, data);
    }

    /// Completes a command with a status and optional sense.
    pub fn response(&mut self, c: &ScsiCommand, status: u8, sense: &[u8]) {
        let stat = self.next_stat();
        let h = Header::ScsiResponse(ScsiResponse {
            bidi_overflow: false,
            bidi_underflow: false,
            overflow: false,
            underflow: false,
            response: 0,
            status,
            itt: c.itt,
            snack_tag: 0,
            stat_sn: stat,
            exp_cmd_sn: c.cmd_sn + 1,
            max_cmd_sn: c.cmd_sn + 32,
            exp_data_sn: 0,
            bidi_residual: 0,
            residual: 0,
        });
        let mut d = Vec::new();
        if !sense.is_empty() {
            d.extend_from_slice(&(sense.len() as u16).to_be_bytes());
            d.extend_from_slice(sense);
        }
        self.send(h, &d);
    }

    /// Serves the initiator's LUN probe (TEST UNIT READY, INQUIRY, READ
    /// CAPACITY, VPD pages refused) for a LUN of `blocks` x 512 bytes, and
    /// returns the first other command.
    pub fn serve_probe(&mut self, blocks: u64) -> Option<(ScsiCommand, Bytes)> {
        loop {
            let p = self.recv()?;
            match p.header {
                Header::ScsiCommand(c) => match c.cdb[0] {
                    0x00 => self.response(&c, 0, &[]),
                    0x12 if c.cdb[1] & 1 == 0 => {
                        let mut inq = vec![0u8; 36];
                        inq[8..16].copy_from_slice(b"FAKE    ");
                        inq[16..32].copy_from_slice(b"SCRIPTED TARGET ");
                        self.data_in_good(&c, &inq);
                    }
                    0x12 => {
                        let sense = [0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x24, 0, 0, 0, 0, 0];
                        self.response(&c, 2, &sense);
                    }
                    0x9e => {
                        let mut cap = vec![0u8; 32];
                        cap[0..8].copy_from_slice(&(blocks - 1).to_be_bytes());
                        cap[8..12].copy_from_slice(&512u32.to_be_bytes());
                        self.data_in_good(&c, &cap);
                    }
                    _ => return Some((c, p.data)),
                },
                Header::NopOut(n) if n.itt != RESERVED_TAG => {
                    let stat = self.next_stat();
                    self.send(
                        Header::NopIn(NopIn {
                            lun: 0,
                            itt: n.itt,
                            ttt: RESERVED_TAG,
                            stat_sn: stat,
                            exp_cmd_sn: n.cmd_sn,
                            max_cmd_sn: n.cmd_sn + 32,
                        }),
                        &[],
                    );
                }
                _ => {}
            }
        }
    }
}

/// A scripted target: accepts one connection and runs `script` on it in a thread.
pub struct FakeTarget {
    pub port: u16,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl FakeTarget {
    pub fn spawn(script: impl FnOnce(&mut FakeConn) + Send + 'static) -> FakeTarget {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let handle = std::thread::spawn(move || {
            let (stream, _) = l.accept().unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut c = FakeConn {
                stream,
                buf: BytesMut::new(),
                codec: Codec { header_digest: false, data_digest: false, max_recv_data: 1 << 24 },
                stat_sn: 1,
                exp_cmd_sn: 0,
                answers: Vec::new(),
            };
            script(&mut c);
            // Keep the connection open a moment so the initiator sees the
            // scripted bytes before any EOF.
            std::thread::sleep(Duration::from_millis(200));
        });
        FakeTarget { port, handle: Some(handle) }
    }

    /// Accepts `n` connections, running `script(index, conn)` on each in its own thread.
    pub fn spawn_many(n: usize, script: impl Fn(usize, &mut FakeConn) + Send + Sync + 'static) -> FakeTarget {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let script = std::sync::Arc::new(script);
        let handle = std::thread::spawn(move || {
            let mut threads = Vec::new();
            for i in 0..n {
                let (stream, _) = l.accept().unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let script = std::sync::Arc::clone(&script);
                threads.push(std::thread::spawn(move || {
                    let mut c = FakeConn {
                        stream,
                        buf: BytesMut::new(),
                        codec: Codec { header_digest: false, data_digest: false, max_recv_data: 1 << 24 },
                        stat_sn: 1,
                        exp_cmd_sn: 0,
                        answers: Vec::new(),
                    };
                    script(i, &mut c);
                    std::thread::sleep(Duration::from_millis(200));
                }));
            }
            for t in threads {
                let _ = t.join();
            }
        });
        FakeTarget { port, handle: Some(handle) }
    }

    pub fn uri(&self) -> String {
        format!("iscsi://127.0.0.1:{}/iqn.2024-01.test:fake/1", self.port)
    }
}

impl Drop for FakeTarget {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Params of the fake target's session (RFC defaults).
pub fn fake_params() -> Params {
    Params::default()
}
