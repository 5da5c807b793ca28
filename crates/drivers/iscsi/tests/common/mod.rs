//! Shared support for the iSCSI integration tests: the real tgtd from
//! `wanblk_testkit::tgt` (re-exported), data helpers, and a scripted fake
//! target on a TcpListener for protocol-violation tests.
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use wanblk_iscsi_proto::keys::Params;
use wanblk_iscsi_proto::pdu::{
    Codec, DataIn, Header, LoginResponse, NopIn, Pdu, RESERVED_TAG, ScsiCommand, ScsiResponse, Stage,
};
use wanblk_iscsi_proto::text;
pub use wanblk_testkit::tgt::Tgt;

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

/// How long a fake target waits for the initiator: to connect, and for
/// each PDU (then `recv` returns `None`).
const FAKE_WAIT: Duration = Duration::from_secs(30);

/// Accepts one connection, or panics after [`FAKE_WAIT`] (a test whose
/// initiator never connects must fail, not hang in `accept`).
fn accept(l: &TcpListener, which: usize) -> FakeConn {
    l.set_nonblocking(true).unwrap();
    let deadline = std::time::Instant::now() + FAKE_WAIT;
    let stream = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no initiator connected to the fake target (connection {which}) within {FAKE_WAIT:?}"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("fake target: accept failed: {e}"),
        }
    };
    stream.set_nonblocking(false).unwrap();
    stream.set_read_timeout(Some(FAKE_WAIT)).unwrap();
    FakeConn {
        stream,
        buf: BytesMut::new(),
        codec: Codec { header_digest: false, data_digest: false, max_recv_data: 1 << 24 },
        stat_sn: 1,
        exp_cmd_sn: 0,
        answers: Vec::new(),
    }
}

/// Ends a scripted connection without losing what the script sent: a FIN
/// after the scripted bytes, then what the initiator still sends is read
/// until it closes (at most 2 s), so closing never resets the connection
/// while the initiator has not read everything yet.
fn hang_up(mut c: FakeConn) {
    let _ = c.stream.shutdown(std::net::Shutdown::Write);
    let _ = c.stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut tmp = [0u8; 65536];
    while matches!(c.stream.read(&mut tmp), Ok(n) if n > 0) {}
}

/// A scripted target: accepts one connection and runs `script` on it in a
/// thread. The thread is joined by [`FakeTarget::finish`] (or on drop): a
/// panic in the script (an assertion about what the initiator sent) fails
/// the test.
pub struct FakeTarget {
    pub port: u16,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl FakeTarget {
    pub fn spawn(script: impl FnOnce(&mut FakeConn) + Send + 'static) -> FakeTarget {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let handle = std::thread::spawn(move || {
            let mut c = accept(&l, 0);
            script(&mut c);
            hang_up(c);
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
                let mut c = accept(&l, i);
                let script = std::sync::Arc::clone(&script);
                threads.push(std::thread::spawn(move || {
                    script(i, &mut c);
                    hang_up(c);
                }));
            }
            for (i, t) in threads.into_iter().enumerate() {
                wanblk_testkit::join_within(t, 3 * FAKE_WAIT, &format!("fake target connection {i}"));
            }
        });
        FakeTarget { port, handle: Some(handle) }
    }

    pub fn uri(&self) -> String {
        format!("iscsi://127.0.0.1:{}/iqn.2024-01.test:fake/1", self.port)
    }

    /// Waits for the script to end (without blocking the test's runtime,
    /// so the initiator's tasks can still close their connections).
    ///
    /// # Panics
    /// The script panicked, or did not end within a few [`FAKE_WAIT`]s.
    pub async fn finish(mut self) {
        let h = self.handle.take().expect("finished once");
        let deadline = tokio::time::Instant::now() + 4 * FAKE_WAIT;
        while !h.is_finished() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(h.is_finished(), "the fake target's script did not finish within {:?}", 4 * FAKE_WAIT);
        wanblk_testkit::join_within(h, Duration::ZERO, "the fake target's script");
    }
}

impl Drop for FakeTarget {
    fn drop(&mut self) {
        // A test that did not call `finish` still sees the script's panic
        // (unless it is failing already: a second panic would abort).
        if let Some(h) = self.handle.take()
            && !std::thread::panicking()
        {
            wanblk_testkit::join_within(h, 4 * FAKE_WAIT, "the fake target's script");
        }
    }
}

/// Params of the fake target's session (RFC defaults).
pub fn fake_params() -> Params {
    Params::default()
}
