//! An ICMP (IPv4) socket for echo trains: the path's bottleneck rate from
//! how far apart the echo replies of a back-to-back train arrive (the
//! packets are built and the replies read by `wanblk_tune::capacity`).
//!
//! A raw socket (`CAP_NET_RAW`) where we have it, else the unprivileged
//! ping socket (`net.ipv4.ping_group_range`). Replies carry the kernel's
//! receive timestamp (`SO_TIMESTAMPNS`), so when we read them does not
//! matter.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::tcp::set_int;

/// An open ICMP socket.
#[derive(Debug)]
pub struct EchoSocket {
    fd: OwnedFd,
    /// A raw socket hands us the IPv4 header before the ICMP message; a
    /// ping socket does not (and sets the echo identifier itself).
    pub raw: bool,
}

impl EchoSocket {
    /// Opens a raw ICMP socket, or a ping socket where that is refused,
    /// with receive timestamps on and buffers for a train of replies.
    ///
    /// # Errors
    /// Both kinds refused (no `CAP_NET_RAW` and not in the ping group).
    pub fn open() -> io::Result<EchoSocket> {
        let mut last = None;
        for (kind, raw) in [(libc::SOCK_RAW, true), (libc::SOCK_DGRAM, false)] {
            // SAFETY: plain socket(2) call; the result is checked before use.
            let fd = unsafe { libc::socket(libc::AF_INET, kind | libc::SOCK_CLOEXEC, libc::IPPROTO_ICMP) };
            if fd < 0 {
                last = Some(io::Error::last_os_error());
                continue;
            }
            // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            let sock = fd.as_fd();
            set_int(sock, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
            // Best effort: a small buffer only loses replies (counted).
            let big = 8 << 20;
            if set_int(sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, big).is_err() {
                let _ = set_int(sock, libc::SOL_SOCKET, libc::SO_RCVBUF, big);
            }
            if set_int(sock, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, big).is_err() {
                let _ = set_int(sock, libc::SOL_SOCKET, libc::SO_SNDBUF, big);
            }
            return Ok(EchoSocket { fd, raw });
        }
        Err(last.unwrap_or_else(|| io::Error::other("no ICMP socket")))
    }

    /// Sends each of `messages` (whole ICMP messages) to `to`, as fast as
    /// the socket takes them. Returns how many were sent.
    ///
    /// # Errors
    /// The first send error, if nothing was sent.
    pub fn send_all(&self, to: Ipv4Addr, messages: &[Vec<u8>]) -> io::Result<usize> {
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr { s_addr: u32::from(to).to_be() },
            sin_zero: [0; 8],
        };
        let mut sent = 0;
        for m in messages {
            // SAFETY: the buffer and the address live for the call, with
            // their lengths given.
            let rc = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    m.as_ptr().cast(),
                    m.len(),
                    0,
                    (&addr as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if sent == 0 {
                    return Err(e);
                }
                break;
            }
            sent += 1;
        }
        Ok(sent)
    }

    /// Waits up to `timeout` for one datagram; returns its bytes (at most
    /// `buf.len()`, the rest cut) and its kernel receive time in
    /// nanoseconds (`CLOCK_REALTIME`), or `None` on timeout.
    ///
    /// # Errors
    /// A receive error other than the timeout.
    pub fn recv(&self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<(usize, u64)>> {
        let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd for the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        if rc == 0 {
            return Ok(None);
        }
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let mut control = [0u64; 16];
        // SAFETY: an all-zero msghdr is a valid empty one; the fields we set
        // point at live buffers with their lengths.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: `msg` describes live buffers; the kernel writes within them.
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock { Ok(None) } else { Err(e) };
        }
        let mut t_ns = None;
        // SAFETY: CMSG_* walk the control buffer the kernel filled, bounded by
        // msg_controllen; the timestamp is read unaligned from within it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_TIMESTAMPNS {
                    let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    t_ns = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let t_ns = match t_ns {
            Some(t) => t,
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        };
        Ok(Some((n as usize, t_ns)))
    }
}
