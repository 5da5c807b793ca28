//! The one byte stream the NBD client and server run on: TCP, a Unix
//! socket, or TLS over either. The handshake runs on the whole stream (the
//! TLS upgrade happens in the middle of it, after NBD_OPT_STARTTLS); for
//! transmission [`Stream::split`] gives a read half and a write half for
//! the reader and writer tasks (plain sockets split without a lock).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::TlsStream;

use crate::tls::{ClientTls, ServerTls};

/// A socket without TLS.
#[derive(Debug)]
pub(crate) enum Plain {
    /// TCP.
    Tcp(TcpStream),
    /// A Unix domain socket.
    Unix(UnixStream),
}

/// A connection: a plain socket, or TLS over one.
#[derive(Debug)]
pub(crate) enum Stream {
    /// No TLS.
    Plain(Plain),
    /// TLS (client or server side).
    Tls(Box<TlsStream<Plain>>),
}

/// The read half of a split stream.
pub(crate) type ReadHalf = Box<dyn AsyncRead + Unpin + Send>;
/// The write half of a split stream.
pub(crate) type WriteHalf = Box<dyn AsyncWrite + Unpin + Send>;

impl From<TcpStream> for Stream {
    fn from(s: TcpStream) -> Self {
        Stream::Plain(Plain::Tcp(s))
    }
}

impl From<UnixStream> for Stream {
    fn from(s: UnixStream) -> Self {
        Stream::Plain(Plain::Unix(s))
    }
}

impl Stream {
    fn plain(self) -> io::Result<Plain> {
        match self {
            Stream::Plain(p) => Ok(p),
            Stream::Tls(_) => Err(io::Error::new(io::ErrorKind::InvalidInput, "TLS is already in use")),
        }
    }

    /// Runs the TLS handshake as the client (after NBD_OPT_STARTTLS).
    ///
    /// # Errors
    /// The handshake failed (see [`crate::tls::explain`] for a message).
    pub(crate) async fn connect_tls(self, tls: &ClientTls) -> io::Result<Stream> {
        let c = tokio_rustls::TlsConnector::from(tls.config.clone());
        let s = c.connect(tls.server_name.clone(), self.plain()?).await?;
        Ok(Stream::Tls(Box::new(TlsStream::Client(s))))
    }

    /// Runs the TLS handshake as the server (after acknowledging
    /// NBD_OPT_STARTTLS).
    ///
    /// # Errors
    /// The handshake failed.
    pub(crate) async fn accept_tls(self, tls: &ServerTls) -> io::Result<Stream> {
        let a = tokio_rustls::TlsAcceptor::from(tls.config.clone());
        let s = a.accept(self.plain()?).await?;
        Ok(Stream::Tls(Box::new(TlsStream::Server(s))))
    }

    /// The certificates the TLS peer presented (end entity first).
    pub(crate) fn peer_certificates(&self) -> Option<&[rustls::pki_types::CertificateDer<'static>]> {
        match self {
            Stream::Tls(t) => t.get_ref().1.peer_certificates(),
            Stream::Plain(_) => None,
        }
    }

    /// Whether TLS is in use.
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// A duplicate of the TCP socket's descriptor (for `TCP_INFO`), if TCP.
    pub(crate) fn tcp_fd(&self) -> Option<OwnedFd> {
        let plain = match self {
            Stream::Plain(p) => p,
            Stream::Tls(t) => t.get_ref().0,
        };
        match plain {
            Plain::Tcp(s) => s.as_fd().try_clone_to_owned().ok(),
            Plain::Unix(_) => None,
        }
    }

    /// Splits into halves for a reader and a writer task. Plain sockets
    /// split without a lock; TLS shares one session under a lock held only
    /// while a half is polled.
    pub(crate) fn split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Plain(Plain::Tcp(s)) => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
            Stream::Plain(Plain::Unix(s)) => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
            Stream::Tls(t) => {
                let (r, w) = tokio::io::split(*t);
                (Box::new(r), Box::new(w))
            }
        }
    }
}

macro_rules! delegate {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Plain::Tcp($s) => {
                let $s = Pin::new($s);
                $e
            }
            Plain::Unix($s) => {
                let $s = Pin::new($s);
                $e
            }
        }
    };
}

impl AsyncRead for Plain {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for Plain {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        delegate!(self, s => s.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_shutdown(cx))
    }
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(p) => Pin::new(p).poll_read(cx, buf),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(p) => Pin::new(p).poll_write(cx, buf),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(p) => Pin::new(p).poll_write_vectored(cx, bufs),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(p) => Pin::new(p).poll_flush(cx),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(p) => Pin::new(p).poll_shutdown(cx),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_shutdown(cx),
        }
    }
}
