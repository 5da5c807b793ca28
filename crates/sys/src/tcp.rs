//! TCP socket introspection and tuning: `TCP_INFO`, `TCP_CONGESTION`,
//! `SO_MAX_PACING_RATE`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The fields of Linux `struct tcp_info` that wanblk uses, in plain units.
///
/// Fields the running kernel does not report are zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TcpInfo {
    /// TCP state (1 = ESTABLISHED).
    pub state: u8,
    /// Congestion avoidance state (0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss).
    pub ca_state: u8,
    /// Retransmission timeout, microseconds.
    pub rto_us: u32,
    /// Sender maximum segment size, bytes.
    pub snd_mss: u32,
    /// Segments sent but not yet acknowledged.
    pub unacked: u32,
    /// Segments considered lost.
    pub lost: u32,
    /// Segments retransmitted and not yet acknowledged.
    pub retrans: u32,
    /// Smoothed round-trip time, microseconds.
    pub rtt_us: u32,
    /// Round-trip time variance, microseconds.
    pub rttvar_us: u32,
    /// Slow-start threshold, segments.
    pub snd_ssthresh: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// Receiver-side RTT estimate, microseconds.
    pub rcv_rtt_us: u32,
    /// Receive space (auto-tuned receive window target), bytes.
    pub rcv_space: u32,
    /// Retransmitted segments over the connection's life.
    pub total_retrans: u32,
    /// Current pacing rate, bytes per second.
    pub pacing_rate: u64,
    /// Bytes acknowledged by the peer.
    pub bytes_acked: u64,
    /// Bytes received from the peer.
    pub bytes_received: u64,
    /// Bytes queued in the socket but not yet sent.
    pub notsent_bytes: u32,
    /// Minimum RTT observed, microseconds.
    pub min_rtt_us: u32,
    /// Most recent delivery rate estimate, bytes per second.
    pub delivery_rate: u64,
    /// Time (us) the sender was limited by the peer's receive window.
    pub rwnd_limited_us: u64,
    /// Time (us) the sender was limited by its send buffer.
    pub sndbuf_limited_us: u64,
    /// Bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// Bytes retransmitted.
    pub bytes_retrans: u64,
    /// The peer's advertised receive window, bytes.
    pub snd_wnd: u32,
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4).map_or(0, |s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8).map_or(0, |s| {
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        u64::from_ne_bytes(a)
    })
}

impl TcpInfo {
    /// Decodes the bytes the kernel returned for `TCP_INFO` (any length;
    /// missing fields read as zero). Offsets follow `linux/tcp.h`.
    pub fn from_bytes(b: &[u8]) -> TcpInfo {
        TcpInfo {
            state: b.first().copied().unwrap_or(0),
            ca_state: b.get(1).copied().unwrap_or(0),
            rto_us: u32_at(b, 8),
            snd_mss: u32_at(b, 16),
            unacked: u32_at(b, 24),
            lost: u32_at(b, 32),
            retrans: u32_at(b, 36),
            rtt_us: u32_at(b, 68),
            rttvar_us: u32_at(b, 72),
            snd_ssthresh: u32_at(b, 76),
            snd_cwnd: u32_at(b, 80),
            rcv_rtt_us: u32_at(b, 92),
            rcv_space: u32_at(b, 96),
            total_retrans: u32_at(b, 100),
            pacing_rate: u64_at(b, 104),
            bytes_acked: u64_at(b, 120),
            bytes_received: u64_at(b, 128),
            notsent_bytes: u32_at(b, 144),
            min_rtt_us: u32_at(b, 148),
            delivery_rate: u64_at(b, 160),
            rwnd_limited_us: u64_at(b, 176),
            sndbuf_limited_us: u64_at(b, 184),
            bytes_sent: u64_at(b, 200),
            bytes_retrans: u64_at(b, 208),
            snd_wnd: u32_at(b, 228),
        }
    }
}

/// Reads `TCP_INFO` from a TCP socket.
///
/// # Errors
/// The `getsockopt` error, e.g. `ENOTSOCK` or `EOPNOTSUPP` for a non-TCP socket.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<TcpInfo> {
    let mut buf = [0u8; 256];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `fd` is a valid open descriptor for the borrow's lifetime; `buf`
    // is a writable buffer of `len` bytes and `len` points to its size, as
    // getsockopt requires. The kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, buf.as_mut_ptr().cast(), &mut len)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(TcpInfo::from_bytes(&buf[..(len as usize).min(buf.len())]))
}

/// Sets the socket's congestion control algorithm (`TCP_CONGESTION`), e.g. "cubic" or "bbr".
///
/// # Errors
/// `ENOENT` if the kernel lacks the algorithm, or another `setsockopt` error.
pub fn set_congestion(fd: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    // SAFETY: valid fd for the borrow; the pointer and length describe `name`'s bytes.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Caps the socket's pacing rate in bytes per second (`SO_MAX_PACING_RATE`);
/// `u64::MAX` removes the cap.
///
/// # Errors
/// The `setsockopt` error.
pub fn set_max_pacing_rate(fd: BorrowedFd<'_>, bytes_per_sec: u64) -> io::Result<()> {
    let v: u64 = bytes_per_sec;
    // SAFETY: valid fd for the borrow; we pass a pointer to a live u64 and its
    // size (the kernel accepts a 32- or 64-bit value).
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&v as *const u64).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn reads_tcp_info_of_a_loopback_connection() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, _) = l.accept().unwrap();
        let info = tcp_info(c.as_fd()).unwrap();
        assert_eq!(info.state, 1, "ESTABLISHED");
        assert!(info.snd_cwnd > 0);
        assert!(info.snd_mss > 0);
    }

    #[test]
    fn short_buffers_decode_as_zero() {
        let info = TcpInfo::from_bytes(&[1, 0, 0]);
        assert_eq!(info.state, 1);
        assert_eq!(info.snd_cwnd, 0);
    }

    #[test]
    fn non_tcp_socket_is_an_error() {
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(tcp_info(f.as_fd()).is_err());
    }
}
