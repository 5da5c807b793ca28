//! NFQUEUE over a raw `NETLINK_NETFILTER` socket: bind queues, receive packet
//! metadata in batches, send (batch) verdicts.
//!
//! Message layout (see the kernel uapi headers `linux/netlink.h`,
//! `linux/netfilter/nfnetlink.h`, `linux/netfilter/nfnetlink_queue.h`):
//!
//! ```text
//! nlmsghdr { u32 len; u16 type; u16 flags; u32 seq; u32 pid }   host order
//! nfgenmsg { u8 family; u8 version; be16 res_id (= queue number) }
//! nlattr*  { u16 len; u16 type; payload; pad to 4 }             payloads big endian
//! ```
//!
//! Parsing ([`parse_messages`]) is safe Rust with a bounds check on every
//! length; only the socket system calls below are `unsafe`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// `NFNL_SUBSYS_QUEUE`.
const SUBSYS_QUEUE: u16 = 3;
/// `NFQNL_MSG_PACKET`.
const MSG_PACKET: u16 = 0;
/// `NFQNL_MSG_VERDICT`.
const MSG_VERDICT: u16 = 1;
/// `NFQNL_MSG_CONFIG`.
const MSG_CONFIG: u16 = 2;
/// `NFQNL_MSG_VERDICT_BATCH`.
const MSG_VERDICT_BATCH: u16 = 3;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
const NLA_HDRLEN: usize = 4;
const NLA_TYPE_MASK: u16 = 0x3fff;

// enum nfqnl_attr_type
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_TIMESTAMP: u16 = 4;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CAP_LEN: u16 = 13;
// enum nfqnl_attr_config
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
// enum nfqnl_msg_config_cmds
const CFG_CMD_BIND: u8 = 1;
const CFG_CMD_UNBIND: u8 = 2;
/// `NFQA_CFG_F_FAIL_OPEN`.
const CFG_F_FAIL_OPEN: u32 = 1;
/// `NFQA_CFG_F_GSO`.
const CFG_F_GSO: u32 = 4;

/// `NETLINK_NO_ENOBUFS` (socket option level `SOL_NETLINK`).
const NETLINK_NO_ENOBUFS: libc::c_int = 5;

/// A verdict for a queued packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// `NF_DROP`.
    Drop,
    /// `NF_ACCEPT`.
    Accept,
}

impl Verdict {
    fn code(self) -> u32 {
        match self {
            Verdict::Drop => 0,
            Verdict::Accept => 1,
        }
    }
}

/// How much of each packet the kernel copies to user space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyMode {
    /// Metadata only (`NFQNL_COPY_META`).
    Meta,
    /// The first `n` bytes of the packet (`NFQNL_COPY_PACKET`).
    Packet(u32),
}

/// Per-queue configuration sent when binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// How much of each packet to copy.
    pub copy: CopyMode,
    /// Kernel queue length (`NFQA_CFG_QUEUE_MAXLEN`); the kernel default is 1024.
    pub max_len: u32,
    /// Accept packets instead of dropping them when the kernel queue is full.
    pub fail_open: bool,
    /// Ask for unsegmented GSO packets (`NFQA_CFG_F_GSO`).
    pub gso: bool,
}

impl Default for QueueConfig {
    fn default() -> QueueConfig {
        QueueConfig { copy: CopyMode::Packet(64), max_len: 1024, fail_open: false, gso: false }
    }
}

/// The metadata of one queued packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketMeta {
    /// Queue number (`res_id`).
    pub queue: u16,
    /// Packet id, to name it in a verdict.
    pub id: u32,
    /// Netfilter hook number.
    pub hook: u8,
    /// Length of the packet in bytes (IPv4 total length when the copied
    /// header shows it, else `NFQA_CAP_LEN`, else the copied length).
    pub len: u32,
    /// Kernel receive timestamp (`NFQA_TIMESTAMP`), ns since the Unix epoch,
    /// when the kernel stamped the packet.
    pub timestamp_ns: Option<u64>,
}

/// One message received from the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// A queued packet.
    Packet(PacketMeta),
    /// An acknowledgement (`errno == 0`) or an error for the request with `seq`.
    Ack {
        /// Zero for an ack, else the positive errno.
        errno: i32,
        /// Sequence number of the request.
        seq: u32,
    },
    /// Any other message type (ignored).
    Other(u16),
}

/// A malformed netlink message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Fewer bytes than a header needs.
    #[error("netlink message truncated at offset {0}")]
    Truncated(usize),
    /// A length field that points outside the buffer or below the header size.
    #[error("bad netlink length {len} at offset {offset}")]
    BadLength {
        /// Offset of the header.
        offset: usize,
        /// The length field.
        len: usize,
    },
    /// A packet message without `NFQA_PACKET_HDR`.
    #[error("NFQUEUE packet message without a packet header")]
    MissingPacketHeader,
}

fn u16_ne(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
fn u32_ne(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}
fn u16_be(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
fn u32_be(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(off..off + 4)?.try_into().ok()?))
}
fn u64_be(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Parses every netlink message in `buf` (one datagram), calling `f` for each.
///
/// # Errors
/// The first malformed message stops the walk with a [`ParseError`]; messages
/// before it have been passed to `f`.
pub fn parse_messages(buf: &[u8], mut f: impl FnMut(Message)) -> Result<(), ParseError> {
    let mut off = 0;
    while off < buf.len() {
        let len = u32_ne(buf, off).ok_or(ParseError::Truncated(off))? as usize;
        if len < NLMSG_HDRLEN || len > buf.len() - off {
            return Err(ParseError::BadLength { offset: off, len });
        }
        let msg = &buf[off..off + len];
        let ty = u16_ne(msg, 4).ok_or(ParseError::Truncated(off))?;
        let seq = u32_ne(msg, 8).ok_or(ParseError::Truncated(off))?;
        let body = &msg[NLMSG_HDRLEN..];
        match ty {
            NLMSG_ERROR => {
                let err = u32_ne(body, 0).ok_or(ParseError::Truncated(off + NLMSG_HDRLEN))? as i32;
                // The embedded original header carries the request's seq.
                let req_seq = u32_ne(body, 4 + 8).unwrap_or(seq);
                f(Message::Ack { errno: -err, seq: req_seq });
            }
            t if t == (SUBSYS_QUEUE << 8) | MSG_PACKET => f(Message::Packet(parse_packet(body)?)),
            NLMSG_DONE => f(Message::Other(ty)),
            t => f(Message::Other(t)),
        }
        off += align4(len).min(buf.len() - off);
    }
    Ok(())
}

/// Parses the body (after `nlmsghdr`) of an `NFQNL_MSG_PACKET`.
fn parse_packet(body: &[u8]) -> Result<PacketMeta, ParseError> {
    let queue = u16_be(body, 2).ok_or(ParseError::Truncated(NLMSG_HDRLEN))?;
    if body.len() < NFGENMSG_LEN {
        return Err(ParseError::Truncated(NLMSG_HDRLEN));
    }
    let mut meta = PacketMeta { queue, ..PacketMeta::default() };
    let mut have_hdr = false;
    let mut cap_len = None;
    let mut payload_len = 0u32;
    let mut ip_len = None;
    let mut off = NFGENMSG_LEN;
    while off + NLA_HDRLEN <= body.len() {
        let alen = u16_ne(body, off).ok_or(ParseError::Truncated(off))? as usize;
        let aty = u16_ne(body, off + 2).ok_or(ParseError::Truncated(off))? & NLA_TYPE_MASK;
        if alen < NLA_HDRLEN || alen > body.len() - off {
            return Err(ParseError::BadLength { offset: NLMSG_HDRLEN + off, len: alen });
        }
        let data = &body[off + NLA_HDRLEN..off + alen];
        match aty {
            NFQA_PACKET_HDR if data.len() >= 7 => {
                meta.id = u32_be(data, 0).unwrap_or(0);
                meta.hook = data[6];
                have_hdr = true;
            }
            NFQA_TIMESTAMP if data.len() >= 16 => {
                let sec = u64_be(data, 0).unwrap_or(0);
                let usec = u64_be(data, 8).unwrap_or(0);
                meta.timestamp_ns =
                    Some(sec.saturating_mul(1_000_000_000).saturating_add(usec.saturating_mul(1000)));
            }
            NFQA_CAP_LEN if data.len() >= 4 => cap_len = u32_be(data, 0),
            NFQA_PAYLOAD => {
                payload_len = data.len() as u32;
                // IPv4: version 4 and a total length at bytes 2..4.
                if data.len() >= 4 && data[0] >> 4 == 4 {
                    ip_len = u16_be(data, 2).map(u32::from);
                } else if data.len() >= 6 && data[0] >> 4 == 6 {
                    ip_len = u16_be(data, 4).map(|p| u32::from(p) + 40);
                }
            }
            _ => {}
        }
        off += align4(alen);
    }
    if !have_hdr {
        return Err(ParseError::MissingPacketHeader);
    }
    meta.len = ip_len.or(cap_len).unwrap_or(payload_len);
    Ok(meta)
}

fn push_u16(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_ne_bytes());
}
fn push_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_ne_bytes());
}

/// Starts a message: header with a placeholder length, then `nfgenmsg`.
/// Returns the offset of the message start, for [`finish_msg`].
fn begin_msg(b: &mut Vec<u8>, msg: u16, flags: u16, seq: u32, queue: u16) -> usize {
    let start = b.len();
    push_u32(b, 0);
    push_u16(b, (SUBSYS_QUEUE << 8) | msg);
    push_u16(b, NLM_F_REQUEST | flags);
    push_u32(b, seq);
    push_u32(b, 0);
    b.push(libc::AF_UNSPEC as u8);
    b.push(0); // NFNETLINK_V0
    b.extend_from_slice(&queue.to_be_bytes());
    start
}

fn put_attr(b: &mut Vec<u8>, ty: u16, data: &[u8]) {
    push_u16(b, (NLA_HDRLEN + data.len()) as u16);
    push_u16(b, ty);
    b.extend_from_slice(data);
    b.resize(align4(b.len()), 0);
}

fn finish_msg(b: &mut [u8], start: usize) {
    let len = (b.len() - start) as u32;
    b[start..start + 4].copy_from_slice(&len.to_ne_bytes());
}

/// Appends a verdict message to `buf`. With `batch`, the verdict applies to
/// every packet of `queue` with an id up to and including `id` that is still
/// queued (`NFQNL_MSG_VERDICT_BATCH`); without it, to `id` alone.
pub fn push_verdict(buf: &mut Vec<u8>, queue: u16, id: u32, verdict: Verdict, batch: bool) {
    let msg = if batch { MSG_VERDICT_BATCH } else { MSG_VERDICT };
    let start = begin_msg(buf, msg, 0, 0, queue);
    let mut v = [0u8; 8];
    v[..4].copy_from_slice(&verdict.code().to_be_bytes());
    v[4..].copy_from_slice(&id.to_be_bytes());
    put_attr(buf, NFQA_VERDICT_HDR, &v);
    finish_msg(buf, start);
}

/// Builds the configuration request that binds `queue` (`seq` names it in the ack).
pub fn config_message(queue: u16, cfg: &QueueConfig, seq: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(80);
    let start = begin_msg(&mut b, MSG_CONFIG, NLM_F_ACK, seq, queue);
    let mut cmd = [CFG_CMD_BIND, 0, 0, 0];
    cmd[2..].copy_from_slice(&(libc::AF_INET as u16).to_be_bytes());
    put_attr(&mut b, NFQA_CFG_CMD, &cmd);
    let (mode, range) = match cfg.copy {
        CopyMode::Meta => (1u8, 0u32),
        CopyMode::Packet(n) => (2u8, n),
    };
    let mut params = [0u8; 5];
    params[..4].copy_from_slice(&range.to_be_bytes());
    params[4] = mode;
    put_attr(&mut b, NFQA_CFG_PARAMS, &params);
    put_attr(&mut b, NFQA_CFG_QUEUE_MAXLEN, &cfg.max_len.to_be_bytes());
    let flags = if cfg.fail_open { CFG_F_FAIL_OPEN } else { 0 } | if cfg.gso { CFG_F_GSO } else { 0 };
    put_attr(&mut b, NFQA_CFG_MASK, &(CFG_F_FAIL_OPEN | CFG_F_GSO).to_be_bytes());
    put_attr(&mut b, NFQA_CFG_FLAGS, &flags.to_be_bytes());
    finish_msg(&mut b, start);
    b
}

fn unbind_message(queue: u16, seq: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(32);
    let start = begin_msg(&mut b, MSG_CONFIG, NLM_F_ACK, seq, queue);
    put_attr(&mut b, NFQA_CFG_CMD, &[CFG_CMD_UNBIND, 0, 0, 0]);
    finish_msg(&mut b, start);
    b
}

/// Builds a packet message as the kernel would (for tests and fuzzing).
pub fn encode_packet_message(p: &PacketMeta, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    let start = b.len();
    push_u32(&mut b, 0);
    push_u16(&mut b, (SUBSYS_QUEUE << 8) | MSG_PACKET);
    push_u16(&mut b, 0);
    push_u32(&mut b, 0);
    push_u32(&mut b, 0);
    b.extend_from_slice(&[libc::AF_INET as u8, 0]);
    b.extend_from_slice(&p.queue.to_be_bytes());
    let mut hdr = [0u8; 7];
    hdr[..4].copy_from_slice(&p.id.to_be_bytes());
    hdr[4..6].copy_from_slice(&0x0800u16.to_be_bytes());
    hdr[6] = p.hook;
    put_attr(&mut b, NFQA_PACKET_HDR, &hdr);
    if let Some(ts) = p.timestamp_ns {
        let mut t = [0u8; 16];
        t[..8].copy_from_slice(&(ts / 1_000_000_000).to_be_bytes());
        t[8..].copy_from_slice(&((ts % 1_000_000_000) / 1000).to_be_bytes());
        put_attr(&mut b, NFQA_TIMESTAMP, &t);
    }
    put_attr(&mut b, NFQA_PAYLOAD, payload);
    if (payload.len() as u32) < p.len {
        put_attr(&mut b, NFQA_CAP_LEN, &p.len.to_be_bytes());
    }
    finish_msg(&mut b, start);
    b
}

/// Counters of one socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// Datagrams received.
    pub datagrams: u64,
    /// Error messages from the kernel (e.g. a verdict for an unknown id).
    pub errors: u64,
    /// The last such errno.
    pub last_errno: i32,
    /// Malformed messages skipped.
    pub malformed: u64,
}

const SLOT: usize = 512;
const SLOTS: usize = 128;

/// A `NETLINK_NETFILTER` socket bound to one or more NFQUEUE queues.
///
/// Create it from a thread that is inside the network namespace whose
/// queues it should serve: a netlink socket belongs to the namespace it was
/// created in.
#[derive(Debug)]
pub struct NfQueue {
    fd: OwnedFd,
    seq: u32,
    bound: Vec<u16>,
    rx: Vec<u8>,
    stats: SocketStats,
}

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc) }
}

impl NfQueue {
    /// Opens the socket (non-blocking, close-on-exec), sets the receive
    /// buffer to `rcvbuf` bytes with `SO_RCVBUFFORCE` (falling back to
    /// `SO_RCVBUF`), and turns on `NETLINK_NO_ENOBUFS`.
    ///
    /// # Errors
    /// `EPROTONOSUPPORT` without nfnetlink; `EPERM` without `CAP_NET_ADMIN`.
    pub fn open(rcvbuf: usize) -> io::Result<NfQueue> {
        // SAFETY: socket(2) takes plain integers; the result is checked.
        let fd = cvt(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                libc::NETLINK_NETFILTER,
            )
        })?;
        // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut addr: libc::sockaddr_nl = {
            // SAFETY: sockaddr_nl is plain old data; all-zero is a valid value.
            unsafe { std::mem::zeroed() }
        };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `addr` is a valid sockaddr_nl and we pass its exact size.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        })?;
        let q = NfQueue {
            fd,
            seq: 1,
            bound: Vec::new(),
            rx: vec![0u8; SLOT * SLOTS],
            stats: SocketStats::default(),
        };
        let size = libc::c_int::try_from(rcvbuf).unwrap_or(libc::c_int::MAX);
        if q.setsockopt_int(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, size).is_err() {
            q.setsockopt_int(libc::SOL_SOCKET, libc::SO_RCVBUF, size)?;
        }
        q.setsockopt_int(libc::SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)?;
        Ok(q)
    }

    fn setsockopt_int(&self, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
        // SAFETY: valid fd; pointer and size describe a live c_int.
        cvt(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    /// The receive buffer size the kernel granted, bytes.
    ///
    /// # Errors
    /// The `getsockopt` error.
    pub fn rcvbuf(&self) -> io::Result<usize> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: valid fd; `v` and `len` are live and describe a c_int.
        cvt(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        })?;
        Ok(v as usize)
    }

    /// Binds `queue` with `cfg` and waits (up to 2 s) for the kernel's ack.
    ///
    /// # Errors
    /// `EBUSY` if another socket owns the queue, `EPERM` without privileges,
    /// `ETIMEDOUT` without an answer.
    pub fn bind_queue(&mut self, queue: u16, cfg: &QueueConfig) -> io::Result<()> {
        self.seq += 1;
        let msg = config_message(queue, cfg, self.seq);
        self.request(&msg, self.seq)?;
        self.bound.push(queue);
        Ok(())
    }

    fn request(&mut self, msg: &[u8], seq: u32) -> io::Result<()> {
        self.send(msg)?;
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        loop {
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
            }
            self.wait_readable(deadline - now)?;
            let mut answer = None;
            let n = match self.recv_one() {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            };
            let _ = parse_messages(&self.rx[..n], |m| {
                if let Message::Ack { errno, seq: s } = m
                    && s == seq
                {
                    answer = Some(errno);
                }
            });
            match answer {
                Some(0) => return Ok(()),
                Some(e) => return Err(io::Error::from_raw_os_error(e)),
                None => {}
            }
        }
    }

    fn recv_one(&mut self) -> io::Result<usize> {
        // SAFETY: valid fd; `rx` is a writable buffer of the length passed.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), self.rx.as_mut_ptr().cast(), self.rx.len(), 0) };
        if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
    }

    /// Sends `buf` (one or more complete messages) to the kernel in one datagram.
    ///
    /// # Errors
    /// The `send` error (`EAGAIN` if the socket's send buffer is full).
    pub fn send(&self, buf: &[u8]) -> io::Result<()> {
        let mut addr: libc::sockaddr_nl = {
            // SAFETY: plain old data; all-zero is valid (pid 0 = the kernel).
            unsafe { std::mem::zeroed() }
        };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: valid fd; `buf` is readable for its length; `addr` is a
        // valid sockaddr_nl of the size passed.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                0,
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives every datagram waiting (up to 128 per system call, without
    /// blocking) and calls `f` with each queued packet's metadata, in the
    /// order the kernel sent them. Returns the number of packets.
    ///
    /// Kernel error messages (e.g. for a verdict on an id that is gone) are
    /// counted in [`stats`](Self::stats), not returned.
    ///
    /// # Errors
    /// A `recvmmsg` error other than `EAGAIN`.
    pub fn recv_packets(&mut self, mut f: impl FnMut(PacketMeta)) -> io::Result<usize> {
        let mut total = 0;
        loop {
            let mut iov: [libc::iovec; SLOTS] =
                [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; SLOTS];
            // SAFETY: mmsghdr is plain old data; all-zero is valid.
            let mut hdrs: [libc::mmsghdr; SLOTS] = unsafe { std::mem::zeroed() };
            let base = self.rx.as_mut_ptr();
            for i in 0..SLOTS {
                // SAFETY: i * SLOT + SLOT <= rx.len(), so the pointer stays in the buffer.
                iov[i].iov_base = unsafe { base.add(i * SLOT) }.cast();
                iov[i].iov_len = SLOT;
                hdrs[i].msg_hdr.msg_iov = &mut iov[i];
                hdrs[i].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: valid fd; `hdrs` holds SLOTS headers, each pointing at
            // one iovec that describes a disjoint SLOT-byte part of `rx`; all
            // live until the call returns.
            let n = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    SLOTS as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS) {
                    return Ok(total);
                }
                return Err(e);
            }
            let n = n as usize;
            for h in &hdrs[..n] {
                self.stats.datagrams += 1;
                if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                    self.stats.malformed += 1;
                    continue;
                }
                let i =
                    (h.msg_hdr.msg_iov as usize - iov.as_ptr() as usize) / std::mem::size_of::<libc::iovec>();
                let len = (h.msg_len as usize).min(SLOT);
                let slot = &self.rx[i * SLOT..i * SLOT + len];
                let stats = &mut self.stats;
                let r = parse_messages(slot, |m| match m {
                    Message::Packet(p) => {
                        total += 1;
                        f(p)
                    }
                    Message::Ack { errno, .. } if errno != 0 => {
                        stats.errors += 1;
                        stats.last_errno = errno;
                    }
                    _ => {}
                });
                if r.is_err() {
                    self.stats.malformed += 1;
                }
            }
            if n < SLOTS {
                return Ok(total);
            }
        }
    }

    /// Waits until the socket is readable or `timeout` passes (`ppoll`, ns
    /// resolution). Returns whether it is readable.
    ///
    /// # Errors
    /// The `ppoll` error other than `EINTR` (which returns `false`).
    pub fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        wait_readable(self.fd.as_fd(), timeout)
    }

    /// Counters.
    pub fn stats(&self) -> SocketStats {
        self.stats
    }

    /// Unbinds every queue this socket bound (also implied by closing it).
    pub fn unbind_all(&mut self) {
        for q in std::mem::take(&mut self.bound) {
            self.seq += 1;
            let msg = unbind_message(q, self.seq);
            let _ = self.request(&msg, self.seq);
        }
    }
}

impl AsRawFd for NfQueue {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Waits until `fd` is readable or `timeout` passes (`ppoll`). Returns whether it is readable.
///
/// # Errors
/// The `ppoll` error other than `EINTR` (which returns `false`).
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: one valid pollfd and a valid timespec, both live for the call;
    // a null sigmask leaves the mask unchanged.
    let rc = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(rc > 0)
}

/// Makes the kernel timestamp received packets (`skb->tstamp`, which NFQUEUE
/// reports as `NFQA_TIMESTAMP`) for as long as the returned socket is open:
/// one socket with `SO_TIMESTAMPNS` turns receive timestamping on
/// system-wide (it is otherwise off until some socket asks for it).
///
/// # Errors
/// The `socket` or `setsockopt` error.
pub fn enable_rx_timestamps() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes plain integers; the result is checked.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: valid fd; pointer and size describe a live c_int.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(fd)
}

/// Reads `/proc/net/netfilter/nfnetlink_queue` as seen from the calling
/// thread's network namespace (`/proc/thread-self/net/...`).
///
/// # Errors
/// The read error (the file exists only once `nfnetlink_queue` is in use).
pub fn kernel_queue_stats() -> io::Result<Vec<KernelQueueStats>> {
    let text = std::fs::read_to_string("/proc/thread-self/net/netfilter/nfnetlink_queue")?;
    Ok(parse_kernel_queue_stats(&text))
}

/// One line of `/proc/net/netfilter/nfnetlink_queue`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KernelQueueStats {
    /// Queue number.
    pub queue: u16,
    /// Port id of the owning socket.
    pub portid: u32,
    /// Packets queued now.
    pub queued: u32,
    /// Copy mode.
    pub copy_mode: u32,
    /// Copy range.
    pub copy_range: u32,
    /// Packets dropped because the kernel queue was full.
    pub queue_dropped: u64,
    /// Packets dropped because the netlink socket could not take them.
    pub user_dropped: u64,
    /// Last packet id issued.
    pub id_sequence: u32,
}

/// Parses the text of `/proc/net/netfilter/nfnetlink_queue`
/// (`queue portid queued copy_mode copy_range queue_dropped user_dropped id_sequence 1`).
pub fn parse_kernel_queue_stats(text: &str) -> Vec<KernelQueueStats> {
    text.lines()
        .filter_map(|l| {
            let v: Vec<u64> = l.split_whitespace().filter_map(|w| w.parse().ok()).collect();
            (v.len() >= 8).then(|| KernelQueueStats {
                queue: v[0] as u16,
                portid: v[1] as u32,
                queued: v[2] as u32,
                copy_mode: v[3] as u32,
                copy_range: v[4] as u32,
                queue_dropped: v[5],
                user_dropped: v[6],
                id_sequence: v[7] as u32,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_header(total_len: u16) -> Vec<u8> {
        let mut h = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 77, 1, 2, 10, 77, 2, 2];
        h[2..4].copy_from_slice(&total_len.to_be_bytes());
        h
    }

    #[test]
    fn round_trips_a_packet_message() {
        let p = PacketMeta {
            queue: 7,
            id: 123_456,
            hook: 2,
            len: 1500,
            timestamp_ns: Some(1_700_000_000_123_456_000),
        };
        let msg = encode_packet_message(&p, &ipv4_header(1500));
        let mut got = Vec::new();
        parse_messages(&msg, |m| got.push(m)).unwrap();
        assert_eq!(got, vec![Message::Packet(p)]);
    }

    #[test]
    fn length_falls_back_to_cap_len() {
        let p = PacketMeta { queue: 0, id: 1, hook: 0, len: 9000, timestamp_ns: None };
        let msg = encode_packet_message(&p, &[0u8; 2]); // not an IP header
        let mut got = Vec::new();
        parse_messages(&msg, |m| got.push(m)).unwrap();
        assert_eq!(got, vec![Message::Packet(p)]);
    }

    #[test]
    fn several_messages_in_one_datagram_and_acks() {
        let a = PacketMeta { queue: 1, id: 1, hook: 0, len: 60, timestamp_ns: None };
        let b = PacketMeta { queue: 1, id: 2, hook: 0, len: 1500, timestamp_ns: None };
        let mut buf = encode_packet_message(&a, &ipv4_header(60));
        buf.extend(encode_packet_message(&b, &ipv4_header(1500)));
        // An NLMSG_ERROR with errno -ENOENT answering seq 9.
        let mut err = Vec::new();
        push_u32(&mut err, 36);
        push_u16(&mut err, NLMSG_ERROR);
        push_u16(&mut err, 0);
        push_u32(&mut err, 0);
        push_u32(&mut err, 0);
        err.extend_from_slice(&(-libc::ENOENT).to_ne_bytes());
        push_u32(&mut err, 16);
        push_u16(&mut err, 0x301);
        push_u16(&mut err, 1);
        push_u32(&mut err, 9);
        push_u32(&mut err, 0);
        buf.extend(err);
        let mut got = Vec::new();
        parse_messages(&buf, |m| got.push(m)).unwrap();
        assert_eq!(
            got,
            vec![Message::Packet(a), Message::Packet(b), Message::Ack { errno: libc::ENOENT, seq: 9 }]
        );
    }

    #[test]
    fn malformed_lengths_are_errors_not_panics() {
        let p = PacketMeta { queue: 1, id: 1, hook: 0, len: 60, timestamp_ns: None };
        let good = encode_packet_message(&p, &ipv4_header(60));
        // Message length beyond the buffer.
        let mut bad = good.clone();
        bad[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(matches!(parse_messages(&bad, |_| {}), Err(ParseError::BadLength { .. })));
        // Attribute length beyond the message.
        let mut bad = good.clone();
        bad[20..22].copy_from_slice(&500u16.to_ne_bytes());
        assert!(matches!(parse_messages(&bad, |_| {}), Err(ParseError::BadLength { .. })));
        // No packet header.
        let mut bad = good.clone();
        bad[22..24].copy_from_slice(&99u16.to_ne_bytes());
        assert_eq!(parse_messages(&bad, |_| {}), Err(ParseError::MissingPacketHeader));
        // Truncations at every length.
        for n in 0..good.len() {
            let _ = parse_messages(&good[..n], |_| {});
        }
    }

    #[test]
    fn verdict_and_config_layout() {
        let mut b = Vec::new();
        push_verdict(&mut b, 3, 77, Verdict::Accept, true);
        assert_eq!(b.len(), 16 + 4 + 12);
        assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), 32);
        assert_eq!(u16::from_ne_bytes(b[4..6].try_into().unwrap()), 0x303);
        assert_eq!(&b[18..20], &3u16.to_be_bytes());
        assert_eq!(u16::from_ne_bytes(b[22..24].try_into().unwrap()), NFQA_VERDICT_HDR);
        assert_eq!(&b[24..28], &1u32.to_be_bytes());
        assert_eq!(&b[28..32], &77u32.to_be_bytes());
        let c = config_message(5, &QueueConfig { max_len: 300_000, ..QueueConfig::default() }, 4);
        assert_eq!(c.len() % 4, 0);
        assert_eq!(u32::from_ne_bytes(c[0..4].try_into().unwrap()) as usize, c.len());
    }

    #[test]
    fn kernel_stats_lines() {
        let s = parse_kernel_queue_stats(
            "    0  12345     3 2    64  17  4 9999 1\n    1  12345  0 2 64 0 0 5 1\n",
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].queue_dropped, 17);
        assert_eq!(s[0].user_dropped, 4);
        assert_eq!(s[1].id_sequence, 5);
    }

    mod prop {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..512)) {
                let _ = parse_messages(&buf, |_| {});
            }

            #[test]
            fn encoded_packets_parse_back(queue: u16, id: u32, hook in 0u8..5, len in 20u16.., ts in proptest::option::of(0u64..4_000_000_000_000_000_000)) {
                let mut h = vec![0x45u8, 0, 0, 0];
                h[2..4].copy_from_slice(&len.to_be_bytes());
                let p = PacketMeta { queue, id, hook, len: u32::from(len), timestamp_ns: ts.map(|t| t / 1000 * 1000) };
                let msg = encode_packet_message(&p, &h);
                let mut got = Vec::new();
                parse_messages(&msg, |m| got.push(m)).unwrap();
                prop_assert_eq!(got, vec![Message::Packet(p)]);
            }
        }
    }
}
