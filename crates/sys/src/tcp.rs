//! TCP socket introspection and tuning: `TCP_INFO`, `TCP_CONGESTION`,
//! `SO_MAX_PACING_RATE`, `SO_RCVLOWAT`, `TCP_NOTSENT_LOWAT`, and [`TcpOptions`], the options every connection
//! wanblk opens or accepts gets from [`apply`]; and the namespace's restart
//! after idle ([`idle_restart`]).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// Options for every TCP connection wanblk opens or accepts (NBD and iSCSI
/// alike), set by [`apply`] right after connect or accept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TcpOptions {
    /// Congestion control algorithm (`TCP_CONGESTION`, e.g. "cubic", "bbr");
    /// the system default when `None`.
    pub congestion: Option<String>,
    /// `SO_SNDBUF` in bytes; kernel autotuning when `None` (setting it
    /// turns autotuning off for this socket).
    pub send_buffer: Option<usize>,
    /// `SO_RCVBUF` in bytes; kernel autotuning when `None`.
    pub recv_buffer: Option<usize>,
    /// Send keepalive probes after this much idle time (then every
    /// `keepalive / 3`, up to 3 unanswered probes); no keepalive when `None`.
    pub keepalive: Option<Duration>,
    /// `TCP_USER_TIMEOUT`: the kernel closes the connection when data it
    /// sent stays unacknowledged this long (and ends keepalive probing
    /// then), so a peer that vanished fails the connection instead of
    /// leaving it in retransmission backoff; the system's default
    /// (about 15 minutes of retries) when `None`.
    pub user_timeout: Option<Duration>,
}

/// Sets `opts` on a connected TCP socket, and turns Nagle's algorithm off
/// (`TCP_NODELAY`: requests are whole messages, never worth delaying).
///
/// # Errors
/// The first `setsockopt` that fails, naming the option (an unknown or
/// forbidden congestion control is `ENOENT` or `EPERM`).
pub fn apply(fd: BorrowedFd<'_>, opts: &TcpOptions) -> io::Result<()> {
    let named = |what: String| move |e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"));
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1).map_err(named("TCP_NODELAY".into()))?;
    if let Some(cc) = &opts.congestion {
        set_congestion(fd, cc).map_err(named(format!("congestion control `{cc}`")))?;
    }
    let int = |v: usize| libc::c_int::try_from(v).unwrap_or(libc::c_int::MAX);
    if let Some(n) = opts.send_buffer {
        set_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, int(n)).map_err(named("send buffer".into()))?;
    }
    if let Some(n) = opts.recv_buffer {
        set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, int(n)).map_err(named("receive buffer".into()))?;
    }
    if let Some(idle) = opts.keepalive {
        let secs = |d: Duration| libc::c_int::try_from(d.as_secs().max(1)).unwrap_or(libc::c_int::MAX);
        set_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1).map_err(named("keepalive".into()))?;
        set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs(idle)).map_err(named("keepalive".into()))?;
        set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, secs(idle / 3))
            .map_err(named("keepalive".into()))?;
        set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3).map_err(named("keepalive".into()))?;
    }
    if let Some(t) = opts.user_timeout {
        let ms = libc::c_int::try_from(t.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        set_int(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, ms)
            .map_err(named("TCP_USER_TIMEOUT".into()))?;
    }
    Ok(())
}

pub(crate) fn set_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: valid fd for the borrow; we pass a pointer to a live c_int and
    // its size, as setsockopt requires for integer options.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The name of a congestion control algorithm as the kernel reports it
/// (`TCP_CA_NAME_MAX` = 16 bytes), copyable so it fits in [`TcpInfo`].
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Congestion([u8; 16]);

impl Congestion {
    /// From the kernel's bytes (NUL-terminated or not; longer names are cut).
    pub fn from_bytes(b: &[u8]) -> Congestion {
        let mut out = [0u8; 16];
        let n = b.iter().position(|c| *c == 0).unwrap_or(b.len()).min(16);
        out[..n].copy_from_slice(&b[..n]);
        Congestion(out)
    }

    /// The name ("" when unknown, or not valid UTF-8).
    pub fn as_str(&self) -> &str {
        let n = self.0.iter().position(|c| *c == 0).unwrap_or(16);
        std::str::from_utf8(&self.0[..n]).unwrap_or("")
    }
}

impl std::fmt::Debug for Congestion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::fmt::Display for Congestion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Congestion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Reads the socket's congestion control algorithm (`TCP_CONGESTION`).
///
/// # Errors
/// The `getsockopt` error (e.g. `EOPNOTSUPP` for a non-TCP socket).
pub fn congestion(fd: BorrowedFd<'_>) -> io::Result<Congestion> {
    let mut buf = [0u8; 16];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: valid fd for the borrow; `buf` is writable for `len` bytes and
    // `len` points to its size; the kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Congestion::from_bytes(&buf[..(len as usize).min(buf.len())]))
}

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
    /// The receiver's estimate of the peer's segment size, bytes.
    pub rcv_mss: u32,
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
    /// The delivery rate sample was limited by the application (it had
    /// nothing more to send), not by the network.
    pub delivery_rate_app_limited: bool,
    /// Time (us) the connection had data in flight.
    pub busy_time_us: u64,
    /// Time (us) the sender was limited by the peer's receive window.
    pub rwnd_limited_us: u64,
    /// Time (us) the sender was limited by its send buffer.
    pub sndbuf_limited_us: u64,
    /// Bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// Bytes retransmitted.
    pub bytes_retrans: u64,
    /// Segments that arrived out of order (`tcpi_rcv_ooopack`, Linux 5.4
    /// on): behind a hole, a segment the path lost (or reordered) on its
    /// way to us. Where we mostly receive, the peer's losses show here and
    /// not in [`total_retrans`](Self::total_retrans).
    pub rcv_ooopack: u32,
    /// The peer's advertised receive window, bytes.
    pub snd_wnd: u32,
    /// The congestion control algorithm in use (`TCP_CONGESTION`, read by
    /// [`tcp_info`]; not part of the kernel's `tcp_info`).
    pub congestion: Congestion,
}

impl TcpInfo {
    /// The smoothed RTT the data sees, microseconds (0 if unknown).
    ///
    /// `tcpi_rtt` is measured on what this side sends. A connection that
    /// mostly receives (an NBD read, an iSCSI Data-In) sends only its small
    /// requests and ACKs, so that RTT stays where its last request left it:
    /// a session that joined a full path keeps the empty path's RTT for
    /// seconds while its data waits in the queue. There the receiver's
    /// estimate (`tcpi_rcv_rtt`, from the timestamps its data echoes) is
    /// the one that follows the path.
    pub fn data_rtt_us(&self) -> u32 {
        if self.bytes_received > self.bytes_acked && self.rcv_rtt_us > 0 {
            self.rcv_rtt_us
        } else {
            self.rtt_us
        }
    }
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
            rcv_mss: u32_at(b, 20),
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
            delivery_rate_app_limited: b.get(7).is_some_and(|f| f & 1 == 1),
            busy_time_us: u64_at(b, 168),
            rwnd_limited_us: u64_at(b, 176),
            sndbuf_limited_us: u64_at(b, 184),
            bytes_sent: u64_at(b, 200),
            bytes_retrans: u64_at(b, 208),
            rcv_ooopack: u32_at(b, 224),
            snd_wnd: u32_at(b, 228),
            congestion: Congestion::default(),
        }
    }
}

/// Reads `TCP_INFO` from a TCP socket, and its congestion control.
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
    let mut info = TcpInfo::from_bytes(&buf[..(len as usize).min(buf.len())]);
    info.congestion = congestion(fd).unwrap_or_default();
    Ok(info)
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

/// Sets the socket's receive low-water mark (`SO_RCVLOWAT`): readiness (and
/// so a reader's wake-up) waits until `bytes` are queued, or the receive
/// window is nearly closed, or the connection ends. A reader that knows
/// that many bytes will come uses it to wake once per `bytes` instead of
/// once per arriving segment; it must lower it again before waiting for
/// fewer bytes than that. 1 is the default.
///
/// # Errors
/// The `setsockopt` error.
pub fn set_recv_low_water(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes.max(1)).unwrap_or(libc::c_int::MAX);
    set_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, v)
}

/// Bounds the bytes the socket holds that it has not sent yet
/// (`TCP_NOTSENT_LOWAT`): a write takes no more once that many wait, and
/// the socket reads as writable again only when they drop below it. Data
/// then waits in the writer's own queue, where what is urgent can still
/// overtake it, instead of behind a send buffer of several megabytes.
///
/// # Errors
/// The `setsockopt` error.
pub fn set_unsent_limit(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes.max(1)).unwrap_or(libc::c_int::MAX);
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, v)
}

/// Caps the window the socket advertises to its peer at `bytes`
/// (`TCP_WINDOW_CLAMP`; the kernel raises it to half its smallest receive
/// buffer at least); `None` lifts the cap (the largest value). Receive
/// buffer autotuning raises the clamp again as it grows the buffer.
///
/// # Errors
/// The `setsockopt` error.
pub fn set_window_clamp(fd: BorrowedFd<'_>, bytes: Option<u64>) -> io::Result<()> {
    let v = bytes.map_or(libc::c_int::MAX, |b| libc::c_int::try_from(b.max(1)).unwrap_or(libc::c_int::MAX));
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, v)
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

/// The network namespace's TCP settings that decide how a connection
/// restarts after idling (read from `/proc/sys/net/ipv4`, which shows the
/// namespace of the reading process).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleRestart {
    /// `tcp_slow_start_after_idle`: a connection idle for an RTO starts
    /// again from its initial window (loss-based congestion controls only;
    /// bbr paces from its bandwidth estimate instead).
    pub slow_start_after_idle: bool,
    /// `tcp_congestion_control`: what a socket that does not choose gets.
    pub default_congestion: String,
}

/// Reads [`IdleRestart`]; `None` where `/proc/sys/net/ipv4` cannot be read
/// or says something unexpected.
pub fn idle_restart() -> Option<IdleRestart> {
    let read = |name: &str| std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}")).ok();
    let slow_start_after_idle = match read("tcp_slow_start_after_idle")?.trim() {
        "0" => false,
        "1" => true,
        _ => return None,
    };
    let default_congestion = read("tcp_congestion_control")?.trim().to_string();
    Some(IdleRestart { slow_start_after_idle, default_congestion })
}

/// The largest window a connection opened with `opts` can use in either
/// direction, bytes: the larger of its receive and send buffers' largest
/// size. That is autotuning's maximum (`tcp_rmem` / `tcp_wmem`, third
/// field) or, where `opts` sets `SO_RCVBUF` / `SO_SNDBUF`, twice that value
/// within `rmem_max` / `wmem_max` (the kernel doubles it for its own
/// overhead). The window a peer sees is below it (the kernel advertises
/// part of its receive buffer; a send buffer holds the unsent bytes too),
/// so a session never carries more than this over a round trip. Read from
/// `/proc/sys/net` (the reading process's network namespace); `None` where
/// it cannot be read.
pub fn window_cap(opts: &TcpOptions) -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(format!("/proc/sys/net/{path}")).ok();
    let third = |path: &str| read(path)?.split_whitespace().nth(2)?.parse::<u64>().ok();
    let one = |path: &str| read(path)?.trim().parse::<u64>().ok();
    let side = |set: Option<usize>, auto: &str, most: &str| match set {
        Some(n) => Some((n as u64).min(one(most)?).saturating_mul(2)),
        None => third(auto),
    };
    let recv = side(opts.recv_buffer, "ipv4/tcp_rmem", "core/rmem_max")?;
    let send = side(opts.send_buffer, "ipv4/tcp_wmem", "core/wmem_max")?;
    Some(recv.max(send)).filter(|w| *w > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_rtt_is_the_receivers_where_the_data_comes_in() {
        // A reader: its requests' RTT stayed at the empty path's 101 ms,
        // its data comes over 140 ms.
        let reader = TcpInfo {
            rtt_us: 101_000,
            rcv_rtt_us: 140_000,
            bytes_received: 1 << 30,
            bytes_acked: 1 << 10,
            ..TcpInfo::default()
        };
        assert_eq!(reader.data_rtt_us(), 140_000);
        // A writer: its own RTT, whatever the receiver's estimate says.
        let writer = TcpInfo { bytes_received: 1 << 10, bytes_acked: 1 << 30, ..reader };
        assert_eq!(writer.data_rtt_us(), 101_000);
        // No receiver estimate yet (no full segment received).
        let fresh = TcpInfo { rcv_rtt_us: 0, ..reader };
        assert_eq!(fresh.data_rtt_us(), 101_000);
    }

    fn get_int(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: valid fd for the borrow; `value` is a writable c_int and `len`
        // points to its size; the kernel writes at most `len` bytes.
        let rc = unsafe {
            libc::getsockopt(fd.as_raw_fd(), level, name, (&mut value as *mut libc::c_int).cast(), &mut len)
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(value)
    }
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn sets_the_receive_low_water_mark() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _s = l.accept().unwrap();
        assert_eq!(get_int(c.as_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT).unwrap(), 1);
        set_recv_low_water(c.as_fd(), 256 * 1024).unwrap();
        assert_eq!(get_int(c.as_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT).unwrap(), 256 * 1024);
        set_recv_low_water(c.as_fd(), 0).unwrap();
        assert_eq!(get_int(c.as_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT).unwrap(), 1, "0 means 1");
    }

    #[test]
    fn clamps_the_advertised_window_and_lifts_it() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _s = l.accept().unwrap();
        let clamp = |c: &TcpStream| get_int(c.as_fd(), libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP).unwrap();
        set_window_clamp(c.as_fd(), Some(512 << 10)).unwrap();
        assert_eq!(clamp(&c), 512 << 10);
        set_window_clamp(c.as_fd(), None).unwrap();
        assert_eq!(clamp(&c), libc::c_int::MAX);
        // 0 would mean "unset" only on a closed socket: never passed.
        set_window_clamp(c.as_fd(), Some(0)).unwrap();
        assert!(clamp(&c) > 0);
    }

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
    fn options_apply_and_read_back() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let opts = TcpOptions {
            congestion: Some("reno".into()),
            send_buffer: Some(1 << 20),
            recv_buffer: Some(1 << 20),
            keepalive: Some(Duration::from_secs(30)),
            user_timeout: Some(Duration::from_secs(60)),
        };
        apply(c.as_fd(), &opts).unwrap();
        assert_eq!(get_int(c.as_fd(), libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT).unwrap(), 60_000);
        assert_eq!(tcp_info(c.as_fd()).unwrap().congestion.as_str(), "reno");
        assert_eq!(get_int(c.as_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY).unwrap(), 1);
        assert_eq!(get_int(c.as_fd(), libc::SOL_SOCKET, libc::SO_KEEPALIVE).unwrap(), 1);
        assert_eq!(get_int(c.as_fd(), libc::IPPROTO_TCP, libc::TCP_KEEPIDLE).unwrap(), 30);
        assert_eq!(get_int(c.as_fd(), libc::IPPROTO_TCP, libc::TCP_KEEPINTVL).unwrap(), 10);
        // The kernel doubles SO_SNDBUF for bookkeeping.
        assert!(get_int(c.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF).unwrap() >= 1 << 20);
        let bad = TcpOptions { congestion: Some("no-such-cc".into()), ..TcpOptions::default() };
        let e = apply(c.as_fd(), &bad).unwrap_err().to_string();
        assert!(e.contains("congestion control `no-such-cc`"), "{e}");
    }

    #[test]
    fn congestion_names() {
        assert_eq!(Congestion::from_bytes(b"bbr\0\0\0").as_str(), "bbr");
        assert_eq!(Congestion::from_bytes(b"cubic").to_string(), "cubic");
        assert_eq!(Congestion::from_bytes(&[b'x'; 40]).as_str().len(), 16);
        assert_eq!(Congestion::from_bytes(&[0xff, 0xfe]).as_str(), "");
        assert_eq!(serde_json::to_string(&Congestion::from_bytes(b"reno")).unwrap(), "\"reno\"");
    }

    #[test]
    fn the_tail_of_tcp_info_decodes_at_the_kernels_offsets() {
        // linux/tcp.h: ... tcpi_reord_seen (220), tcpi_rcv_ooopack (224),
        // tcpi_snd_wnd (228).
        let mut b = vec![0u8; 232];
        for (off, v) in [(220usize, 7u32), (224, 11), (228, 65_535)] {
            b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        }
        let info = TcpInfo::from_bytes(&b);
        assert_eq!((info.rcv_ooopack, info.snd_wnd), (11, 65_535));
        // A kernel that stops before them: zero.
        assert_eq!(TcpInfo::from_bytes(&b[..224]).rcv_ooopack, 0);
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

    #[test]
    fn the_window_cap_is_what_the_kernel_gives_the_buffers() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _s = l.accept().unwrap();
        let buf = |c: &TcpStream, name| get_int(c.as_fd(), libc::SOL_SOCKET, name).unwrap() as u64;
        // Autotuning starts each buffer below its maximum.
        let auto = window_cap(&TcpOptions::default()).expect("/proc/sys/net on Linux");
        assert!(auto >= buf(&c, libc::SO_RCVBUF) && auto >= buf(&c, libc::SO_SNDBUF), "{auto}");
        // Set buffers: the kernel's doubled values.
        let opts =
            TcpOptions { recv_buffer: Some(96 << 10), send_buffer: Some(64 << 10), ..TcpOptions::default() };
        apply(c.as_fd(), &opts).unwrap();
        let set = buf(&c, libc::SO_RCVBUF).max(buf(&c, libc::SO_SNDBUF));
        assert_eq!(window_cap(&opts), Some(set));
    }

    #[test]
    fn the_namespace_says_how_connections_restart_after_idle() {
        let r = idle_restart().expect("/proc/sys/net/ipv4 on Linux");
        assert!(!r.default_congestion.is_empty() && r.default_congestion.is_ascii());
    }
}
