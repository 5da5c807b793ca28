//! A pipe as a destination (`-`, standard output): writes arrive at any
//! offset, in any order, and leave in offset order.
//!
//! A pipe cannot seek, so each range must be written exactly once and the
//! bytes go out only when every byte before them has. Ranges that arrive
//! early wait in memory; the caller bounds how far ahead of the first
//! missing byte it writes (the copy engine's in-order window). A thread
//! does the blocking writes, so a slow reader (`| sha256sum`) slows the
//! copy instead of blocking the runtime.

use std::collections::BTreeMap;
use std::io::{self, Write};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::{Mutex, mpsc, oneshot};

use super::check_range;
use crate::endpoint::{BlockSizes, Capabilities, Endpoint, EndpointError, Result};

/// What goes to the writer thread.
enum Msg {
    Data(Bytes),
    Zero(u64),
    Flush(oneshot::Sender<io::Result<()>>),
}

/// A range waiting for the bytes before it.
enum Chunk {
    Data(Bytes),
    Zero(u64),
}

impl Chunk {
    fn len(&self) -> u64 {
        match self {
            Chunk::Data(b) => b.len() as u64,
            Chunk::Zero(n) => *n,
        }
    }
}

struct State {
    /// Bytes handed to the writer so far (the next offset it takes).
    next: u64,
    /// Ranges that arrived before the bytes in front of them.
    pending: BTreeMap<u64, Chunk>,
    tx: Option<mpsc::Sender<Msg>>,
    writer: Option<std::thread::JoinHandle<io::Result<()>>>,
}

/// A write-only endpoint of `size` bytes over a byte stream (standard
/// output). See the module docs.
pub struct PipeSink {
    name: String,
    size: u64,
    state: Mutex<State>,
}

impl std::fmt::Debug for PipeSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipeSink").field("name", &self.name).field("size", &self.size).finish()
    }
}

/// Messages queued for the writer thread (each up to a request long).
const QUEUE: usize = 16;
/// Zeroes written per call for a zero range.
const ZERO_CHUNK: usize = 1 << 20;

fn writer_loop(mut out: Box<dyn Write + Send>, mut rx: mpsc::Receiver<Msg>) -> io::Result<()> {
    let zeros = vec![0u8; ZERO_CHUNK];
    while let Some(msg) = rx.blocking_recv() {
        match msg {
            Msg::Data(b) => out.write_all(&b)?,
            Msg::Zero(mut n) => {
                while n > 0 {
                    let k = n.min(ZERO_CHUNK as u64) as usize;
                    out.write_all(&zeros[..k])?;
                    n -= k as u64;
                }
            }
            Msg::Flush(done) => {
                let _ = done.send(out.flush());
            }
        }
    }
    out.flush()
}

impl PipeSink {
    /// A sink of `size` bytes writing to `out` (e.g. `std::io::stdout()`),
    /// named `name` in errors.
    ///
    /// # Errors
    /// The writer thread cannot be started.
    pub fn new(name: impl Into<String>, size: u64, out: Box<dyn Write + Send>) -> Result<PipeSink> {
        let name = name.into();
        let (tx, rx) = mpsc::channel(QUEUE);
        let writer = std::thread::Builder::new()
            .name("wanblk-pipe".into())
            .spawn(move || writer_loop(out, rx))
            .map_err(|e| EndpointError::io(&name, None, format!("cannot start the writer: {e}")))?;
        Ok(PipeSink {
            name,
            size,
            state: Mutex::new(State {
                next: 0,
                pending: BTreeMap::new(),
                tx: Some(tx),
                writer: Some(writer),
            }),
        })
    }

    /// Bytes handed to the output so far, in order.
    pub async fn written(&self) -> u64 {
        self.state.lock().await.next
    }

    /// Why the writer stopped, once it has (the output closed: `EPIPE`).
    async fn writer_error(&self, st: &mut State, offset: Option<u64>) -> EndpointError {
        st.tx = None;
        let why = match st.writer.take() {
            Some(h) => match tokio::task::spawn_blocking(move || h.join()).await {
                Ok(Ok(Err(e))) => e.to_string(),
                Ok(Ok(Ok(()))) => "the output was closed".to_string(),
                _ => "the writer failed".to_string(),
            },
            None => "the output was closed".to_string(),
        };
        EndpointError::io(&self.name, offset, why)
    }

    async fn put(&self, offset: u64, chunk: Chunk) -> Result<()> {
        let len = chunk.len();
        check_range(&self.name, self.size, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let mut st = self.state.lock().await;
        let overlaps_before =
            st.pending.range(..offset).next_back().is_some_and(|(o, c)| o + c.len() > offset);
        let overlaps_after = st.pending.range(offset..).next().is_some_and(|(o, _)| *o < offset + len);
        if offset < st.next || overlaps_before || overlaps_after {
            return Err(EndpointError::config(
                &self.name,
                Some(offset),
                "a pipe is written once, in order: this range was already written",
            ));
        }
        st.pending.insert(offset, chunk);
        loop {
            let next = st.next;
            let Some(entry) = st.pending.first_entry() else { break };
            if *entry.key() != next {
                break;
            }
            let chunk = entry.remove();
            st.next += chunk.len();
            let msg = match chunk {
                Chunk::Data(b) => Msg::Data(b),
                Chunk::Zero(n) => Msg::Zero(n),
            };
            let sent = match &st.tx {
                Some(tx) => tx.send(msg).await.is_ok(),
                None => false,
            };
            if !sent {
                return Err(self.writer_error(&mut st, Some(next)).await);
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Endpoint for PipeSink {
    fn name(&self) -> &str {
        &self.name
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            read_only: false,
            can_flush: true,
            can_fua: false,
            can_trim: false,
            can_zero: true,
            can_block_status: false,
            can_multi_conn: true,
            block_sizes: BlockSizes { minimum: 1, preferred: 1 << 20, maximum: 1 << 30 },
        }
    }

    async fn read(&self, offset: u64, _len: u32) -> Result<Bytes> {
        Err(EndpointError::config(&self.name, Some(offset), "a pipe cannot be read back"))
    }

    async fn write(&self, offset: u64, data: Bytes, _fua: bool) -> Result<()> {
        self.put(offset, Chunk::Data(data)).await
    }

    async fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool) -> Result<()> {
        self.put(offset, Chunk::Zero(len)).await
    }

    async fn trim(&self, offset: u64, _len: u64) -> Result<()> {
        Err(EndpointError::config(&self.name, Some(offset), "a pipe cannot be trimmed"))
    }

    /// Waits until every byte handed over so far has been written out.
    async fn flush(&self) -> Result<()> {
        let mut st = self.state.lock().await;
        let (done, wait) = oneshot::channel();
        let sent = match &st.tx {
            Some(tx) => tx.send(Msg::Flush(done)).await.is_ok(),
            None => false,
        };
        match (sent, if sent { wait.await.ok() } else { None }) {
            (true, Some(Ok(()))) => Ok(()),
            (true, Some(Err(e))) => Err(EndpointError::io(&self.name, None, e)),
            _ => Err(self.writer_error(&mut st, None).await),
        }
    }

    /// Writes out what is pending and ends the output. Fails if a range
    /// before the end was never written (the output would be short).
    async fn close(&self) -> Result<()> {
        let mut st = self.state.lock().await;
        let missing = (st.next < self.size).then_some(st.next);
        st.tx = None;
        if let Some(h) = st.writer.take() {
            match tokio::task::spawn_blocking(move || h.join()).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => return Err(EndpointError::io(&self.name, None, e)),
                _ => return Err(EndpointError::io(&self.name, None, "the writer failed")),
            }
        }
        match missing {
            Some(at) => Err(EndpointError::io(
                &self.name,
                Some(at),
                format!("only {at} of {} bytes reached the output", self.size),
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex as StdMutex};

    /// A `Write` that keeps what it got.
    #[derive(Clone, Default)]
    struct Kept(Arc<StdMutex<Vec<u8>>>);

    impl Write for Kept {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A `Write` whose reader went away.
    struct Broken;

    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn ranges_out_of_order_leave_in_order() {
        let kept = Kept::default();
        let sink = PipeSink::new("-", 10, Box::new(kept.clone())).unwrap();
        sink.write(6, Bytes::from_static(b"ghij"), false).await.unwrap();
        sink.write_zeroes(3, 3, true).await.unwrap();
        assert_eq!(sink.written().await, 0);
        sink.write(0, Bytes::from_static(b"abc"), false).await.unwrap();
        assert_eq!(sink.written().await, 10);
        sink.flush().await.unwrap();
        sink.close().await.unwrap();
        assert_eq!(&kept.0.lock().unwrap()[..], b"abc\0\0\0ghij");
    }

    #[tokio::test]
    async fn a_range_written_twice_or_past_the_end_is_refused() {
        let sink = PipeSink::new("-", 8, Box::new(Kept::default())).unwrap();
        sink.write(4, Bytes::from_static(b"efgh"), false).await.unwrap();
        assert!(sink.write(2, Bytes::from_static(b"cdef"), false).await.is_err(), "overlaps a waiting range");
        sink.write(0, Bytes::from_static(b"abcd"), false).await.unwrap();
        assert!(sink.write(0, Bytes::from_static(b"a"), false).await.is_err(), "already out");
        assert!(sink.write(8, Bytes::from_static(b"x"), false).await.is_err(), "past the end");
        assert!(sink.read(0, 1).await.is_err());
        sink.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_short_output_or_a_closed_reader_is_an_error() {
        let sink = PipeSink::new("-", 8, Box::new(Kept::default())).unwrap();
        sink.write(0, Bytes::from_static(b"abcd"), false).await.unwrap();
        let e = sink.close().await.unwrap_err().to_string();
        assert!(e.contains("only 4 of 8 bytes"), "{e}");

        let sink = PipeSink::new("-", 1 << 30, Box::new(Broken)).unwrap();
        let mut failed = None;
        for i in 0..64u64 {
            if let Err(e) = sink.write(i << 20, Bytes::from(vec![1u8; 1 << 20]), false).await {
                failed = Some(e);
                break;
            }
        }
        let e = match failed {
            Some(e) => e,
            None => sink.flush().await.unwrap_err(),
        };
        assert!(e.to_string().to_lowercase().contains("broken pipe"), "{e}");
    }
}
