//! Hostile NBD servers: a real handshake (our sans-I/O server machine),
//! then a test-written script on the raw socket (garbage, unknown cookies,
//! truncated replies, hang-ups). Needs a tokio runtime.
//!
//! The server runs as a task the test joins with [`Hostile::finish`]: a
//! test that expects the client to fail must not pass because the server
//! itself crashed (a panic in the handshake or the script fails the test).

use std::future::Future;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wanblk_nbd_proto::client::BlockSizes;
use wanblk_nbd_proto::consts::tflags;
use wanblk_nbd_proto::wire::{ChunkHeader, RequestHeader, SimpleReplyHeader};
use wanblk_nbd_proto::{Codec, Command, ExportConfig, Reader, Server, ServerConfig, ServerEvent};

/// Size of the hostile export.
pub const SIZE: u64 = 16 << 20;

/// How long [`Hostile::finish`] waits for the server task (the client must
/// be gone by then: a script that lingers ends when the client closes).
const FINISH_WITHIN: Duration = Duration::from_secs(30);

/// A running hostile server.
#[derive(Debug)]
pub struct Hostile {
    /// The server's URI (`nbd://127.0.0.1:PORT/x`).
    pub uri: String,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Hostile {
    /// Waits for the server task to end (close or drop the client first).
    ///
    /// # Panics
    /// The server panicked (in the handshake or the script), or did not end
    /// within 30 s.
    pub async fn finish(mut self) {
        let task = self.task.take().expect("finished once");
        match tokio::time::timeout(FINISH_WITHIN, task).await {
            Err(_) => panic!("the hostile server at {} did not finish within {FINISH_WITHIN:?}", self.uri),
            Ok(Err(e)) if e.is_panic() => panic!(
                "the hostile server at {} panicked: {}",
                self.uri,
                crate::wait::panic_message(&*e.into_panic())
            ),
            Ok(Err(e)) => panic!("the hostile server at {} did not finish: {e}", self.uri),
            Ok(Ok(())) => {}
        }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        // Every test joins its server; one that forgot would lose its panics.
        if let Some(task) = self.task.take() {
            task.abort();
            assert!(
                std::thread::panicking(),
                "the hostile server at {} was dropped without Hostile::finish: its panics would be lost",
                self.uri
            );
        }
    }
}

/// Starts a one-connection server. `script` runs after the handshake with
/// the socket.
pub async fn hostile<F, Fut>(structured: bool, script: F) -> Hostile
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("nbd://127.0.0.1:{}/x", l.local_addr().unwrap().port());
    let task = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut m = Server::new(ServerConfig {
            exports: vec![ExportConfig {
                name: "x".into(),
                description: String::new(),
                size: SIZE,
                flags: tflags::SEND_FLUSH | tflags::SEND_FUA,
                block_sizes: BlockSizes { minimum: 1, preferred: 4096, maximum: 1 << 20 },
                base_allocation: true,
            }],
            structured_replies: structured,
            ..Default::default()
        });
        let mut buf = [0u8; 4096];
        'hs: loop {
            while let Some(b) = m.poll_transmit() {
                s.write_all(&b).await.unwrap();
            }
            while let Some(ev) = m.poll_event() {
                if let ServerEvent::Selected { .. } = ev {
                    break 'hs;
                }
            }
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "client left during the handshake");
            m.handle_input(&buf[..n]).unwrap();
        }
        while let Some(b) = m.poll_transmit() {
            s.write_all(&b).await.unwrap();
        }
        script(s).await;
    });
    Hostile { uri, task: Some(task) }
}

/// Reads one request header (and skips a write's payload).
pub async fn read_request(s: &mut TcpStream) -> RequestHeader {
    let mut h = [0u8; 28];
    s.read_exact(&mut h).await.unwrap();
    let r = RequestHeader::decode(&mut Reader::new(&h, "request")).unwrap();
    if r.command == Command::Write {
        let mut skip = vec![0u8; r.length as usize];
        s.read_exact(&mut skip).await.unwrap();
    }
    r
}

/// A simple reply header.
pub fn simple(cookie: u64, error: u32) -> Vec<u8> {
    SimpleReplyHeader { error, cookie }.to_bytes().to_vec()
}

/// A structured reply chunk with its payload.
pub fn chunk(flags: u16, kind: u16, cookie: u64, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    ChunkHeader { flags, kind, cookie, length: payload.len() as u32 }.encode(&mut b);
    b.put_slice(payload);
    b.to_vec()
}

/// Keeps the socket open (reading and discarding) until the client leaves.
pub async fn linger(mut s: TcpStream) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}
