//! The [`Endpoint`] over one iSCSI connection: block I/O as SCSI commands.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use wanblk_blockdev::{
    BlockSizes, Capabilities, Endpoint, EndpointError, ErrorKind, Result, SendBacklog, TcpInfo,
};
use wanblk_iscsi_proto::keys::Params;
use wanblk_iscsi_proto::scsi::{self, Sense};
use wanblk_iscsi_proto::{Command, CommandError, ConnError, DataDir, Outcome};

use crate::Members;
use crate::transport::Link;

/// The most bytes one `read`/`write` call may carry (split into commands).
const MAX_REQUEST: u32 = 64 << 20;
/// Most blocks one WRITE SAME / UNMAP descriptor covers here.
const MAX_ZERO_BLOCKS: u64 = 1 << 22;
/// UNIT ATTENTION retries while probing (a fresh session may report several).
pub(crate) const PROBE_UA_RETRIES: usize = 8;
/// How long [`Endpoint::abort`] waits for the target's answers (task
/// management responses, then the logout) before it drops the connection.
const ABORT_BOUND: Duration = Duration::from_secs(5);

/// What the probe learnt about the LUN; shared by the connections of an MC/S session.
#[derive(Debug)]
pub(crate) struct LunInfo {
    pub(crate) block_len: u32,
    pub(crate) blocks: u64,
    /// Largest READ/WRITE command, bytes (multiple of block_len).
    pub(crate) max_request_bytes: u32,
    pub(crate) can_unmap: bool,
    pub(crate) unmap_reads_zero: bool,
    pub(crate) max_unmap_blocks: u64,
    pub(crate) max_unmap_descriptors: usize,
    pub(crate) max_write_same_blocks: u64,
    pub(crate) write_same: AtomicBool,
    pub(crate) vendor: String,
    pub(crate) product: String,
    /// The Unit Serial Number VPD page, where the target gives one: the
    /// LUN's identity in the resume journal.
    pub(crate) serial: Option<String>,
}

pub(crate) fn command_error(name: &str, offset: Option<u64>, e: CommandError) -> EndpointError {
    let kind = match &e {
        CommandError::Status { status, sense } => ErrorKind::Server {
            code: sense.map_or(u32::from(*status), |s| u32::from(s.key)),
            message: e.to_string(),
            transient: scsi::is_transient(*status, sense.map(|s| s.key)),
        },
        CommandError::TargetFailure(r) => {
            ErrorKind::Server { code: u32::from(*r), message: e.to_string(), transient: true }
        }
        CommandError::Rejected(_) | CommandError::Short { .. } => ErrorKind::Protocol(e.to_string()),
        CommandError::Connection(ConnError::Closed(_) | ConnError::LoggedOut) | CommandError::Aborted(_) => {
            ErrorKind::Io(e.to_string())
        }
        CommandError::Connection(_) => ErrorKind::Protocol(e.to_string()),
    };
    EndpointError::new(name, offset, kind)
}

fn sense_of(e: &CommandError) -> Option<Sense> {
    match e {
        CommandError::Status { sense, .. } => *sense,
        _ => None,
    }
}

/// Runs `cmd`, retrying up to `retries` times on UNIT ATTENTION.
pub(crate) async fn exec(
    link: &Link,
    cmd: Command,
    retries: usize,
) -> std::result::Result<Outcome, CommandError> {
    let mut left = retries;
    loop {
        match link.execute(cmd.clone()).await {
            Err(e) if left > 0 && sense_of(&e).is_some_and(|s| s.is_unit_attention()) => {
                tracing::debug!("iSCSI: retrying after {e}");
                left -= 1;
            }
            r => return r,
        }
    }
}

/// Clears the UNIT ATTENTION a fresh I_T nexus reports (tgtd: 29/00 on
/// the first command of every session) in one round trip: two TEST UNIT
/// READY at once, the first to take the attention, the second (retried
/// while attentions remain) to see the LUN ready.
pub(crate) async fn clear_unit_attention(link: &Link) -> std::result::Result<(), CommandError> {
    let tur = || Command { cdb: scsi::test_unit_ready(), dir: DataDir::None };
    let (first, second) = tokio::join!(exec(link, tur(), 0), exec(link, tur(), PROBE_UA_RETRIES));
    match first {
        Err(e) if !sense_of(&e).is_some_and(|s| s.is_unit_attention()) => return Err(e),
        _ => {}
    }
    second.map(|_| ())
}

/// Learns the LUN: TEST UNIT READY (clearing UNIT ATTENTIONs), INQUIRY,
/// READ CAPACITY(16), and the Unit Serial Number, Block Limits and Logical
/// Block Provisioning VPD pages where supported.
///
/// Every command is sent at once (one round trip on a long path instead of
/// seven one after another): the TEST UNIT READY go first and take the
/// session's UNIT ATTENTION; a command that gets one all the same is
/// retried. The VPD pages are asked for before the target said which it
/// supports; an answer is used only when the supported-pages list names
/// its page (an unsupported page is a harmless CHECK CONDITION).
pub(crate) async fn probe(
    name: &str,
    link: &Link,
    params: &Params,
    max_request_bytes: u32,
) -> Result<LunInfo> {
    let err = |e| command_error(name, None, e);
    let vpd = |page: u8| async move {
        exec(link, Command { cdb: scsi::inquiry(Some(page), 252), dir: DataDir::Read(252) }, PROBE_UA_RETRIES)
            .await
            .ok()
    };
    let (ready, inq, cap, pages, serial, limits, prov) = tokio::join!(
        clear_unit_attention(link),
        exec(link, Command { cdb: scsi::inquiry(None, 96), dir: DataDir::Read(96) }, PROBE_UA_RETRIES),
        exec(link, Command { cdb: scsi::read_capacity16(32), dir: DataDir::Read(32) }, PROBE_UA_RETRIES),
        vpd(0x00),
        vpd(0x80),
        vpd(0xb0),
        vpd(0xb2),
    );
    ready.map_err(err)?;
    let inq = inq.map_err(err)?;
    let inq =
        scsi::parse_inquiry(&inq.data).map_err(|e| EndpointError::protocol(name, None, e.to_string()))?;
    if inq.qualifier != 0 || inq.device_type != 0 {
        return Err(EndpointError::config(
            name,
            None,
            format!(
                "LUN is not a block device (peripheral qualifier {}, device type {:#x}); check the LUN number",
                inq.qualifier, inq.device_type
            ),
        ));
    }
    let cap = cap.map_err(err)?;
    let cap = scsi::parse_read_capacity16(&cap.data)
        .map_err(|e| EndpointError::protocol(name, None, e.to_string()))?;
    let pages = pages.map(|o| scsi::parse_supported_vpd(&o.data).unwrap_or_default()).unwrap_or_default();
    // A serial the target gets wrong is no reason to refuse the LUN: it is
    // only an identity check for resuming, and then there is none.
    let serial = if pages.contains(&0x80) {
        serial.and_then(|o| scsi::parse_unit_serial(&o.data).ok()).flatten()
    } else {
        None
    };
    let limits = if pages.contains(&0xb0) {
        limits.and_then(|o| scsi::parse_block_limits(&o.data).ok()).unwrap_or_default()
    } else {
        Default::default()
    };
    let prov = if pages.contains(&0xb2) {
        prov.and_then(|o| scsi::parse_provisioning(&o.data).ok()).unwrap_or_default()
    } else {
        Default::default()
    };
    let bl = cap.block_len;
    let mut cmd = max_request_bytes.max(bl) / bl * bl;
    if limits.max_transfer > 0 {
        cmd = cmd.min(limits.max_transfer.saturating_mul(bl));
    }
    cmd = cmd.clamp(bl, MAX_REQUEST);
    let can_unmap = prov.unmap && limits.max_unmap_lba_count > 0 && limits.max_unmap_descriptors > 0;
    tracing::debug!(
        target = name,
        ?cap,
        ?limits,
        ?prov,
        max_request_bytes = cmd,
        ?params,
        "iSCSI LUN probed"
    );
    Ok(LunInfo {
        block_len: bl,
        blocks: cap.blocks,
        max_request_bytes: cmd,
        can_unmap,
        unmap_reads_zero: prov.reads_zero || cap.reads_zero,
        max_unmap_blocks: u64::from(limits.max_unmap_lba_count).min(MAX_ZERO_BLOCKS),
        max_unmap_descriptors: (limits.max_unmap_descriptors as usize).clamp(1, 64),
        max_write_same_blocks: if limits.max_write_same > 0 {
            limits.max_write_same.min(MAX_ZERO_BLOCKS)
        } else {
            MAX_ZERO_BLOCKS
        },
        write_same: AtomicBool::new(true),
        vendor: inq.vendor,
        product: inq.product,
        serial,
    })
}

/// One iSCSI connection to a LUN, as an [`Endpoint`].
pub struct IscsiEndpoint {
    name: String,
    link: Arc<Link>,
    lun: Arc<LunInfo>,
    cid: u16,
    /// Logging out ends the session (own session, or the last MC/S connection).
    own_session: bool,
    /// The MC/S session's connections, this one among them.
    mcs: Option<Arc<Members>>,
    closed: AtomicBool,
}

impl std::fmt::Debug for IscsiEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IscsiEndpoint").field("name", &self.name).field("cid", &self.cid).finish()
    }
}

impl IscsiEndpoint {
    pub(crate) fn new(
        name: String,
        link: Arc<Link>,
        lun: Arc<LunInfo>,
        cid: u16,
        own_session: bool,
        mcs: Option<Arc<Members>>,
    ) -> IscsiEndpoint {
        IscsiEndpoint { name, link, lun, cid, own_session, mcs, closed: AtomicBool::new(false) }
    }

    /// This connection leaves its session: true if its logout ends the
    /// session (its own session, or the last connection of an MC/S one).
    fn leave(&self) -> bool {
        match &self.mcs {
            Some(m) => m.leave(self.cid),
            None => self.own_session,
        }
    }

    /// Logical block length of the LUN.
    pub fn block_len(&self) -> u32 {
        self.lun.block_len
    }

    /// Size of one READ/WRITE command, bytes.
    pub fn max_request_bytes(&self) -> u32 {
        self.lun.max_request_bytes
    }

    /// The connection id within the session.
    pub fn cid(&self) -> u16 {
        self.cid
    }

    /// The negotiated login values of this connection.
    pub fn params(&self) -> wanblk_iscsi_proto::Params {
        self.link.params()
    }

    /// Vendor and product from INQUIRY.
    pub fn product(&self) -> (String, String) {
        (self.lun.vendor.clone(), self.lun.product.clone())
    }

    fn check(&self, offset: u64, len: u64, write: bool) -> Result<()> {
        let _ = write;
        if self.closed.load(Ordering::SeqCst) {
            return Err(EndpointError::io(&self.name, Some(offset), "endpoint is closed"));
        }
        let bl = u64::from(self.lun.block_len);
        // The block length is a power of two (checked when READ CAPACITY is parsed).
        if (offset | len) & (bl - 1) != 0 {
            return Err(EndpointError::config(
                &self.name,
                Some(offset),
                format!("request of {len} bytes at {offset} is not aligned to the {bl}-byte block size"),
            ));
        }
        if offset.checked_add(len).is_none_or(|end| end > self.size()) {
            return Err(EndpointError::config(
                &self.name,
                Some(offset),
                format!("request of {len} bytes at {offset} beyond the end ({} bytes)", self.size()),
            ));
        }
        Ok(())
    }

    async fn run(&self, offset: u64, cmd: Command) -> Result<Outcome> {
        exec(&self.link, cmd, 1).await.map_err(|e| command_error(&self.name, Some(offset), e))
    }

    async fn read_one(&self, offset: u64, len: u32) -> Result<Bytes> {
        let bl = u64::from(self.lun.block_len);
        let out = self
            .run(
                offset,
                Command { cdb: scsi::read16(offset / bl, len / self.lun.block_len), dir: DataDir::Read(len) },
            )
            .await?;
        if out.data.len() != len as usize {
            return Err(EndpointError::protocol(
                &self.name,
                Some(offset),
                format!("short read: {} of {len} bytes", out.data.len()),
            ));
        }
        Ok(out.data)
    }

    async fn write_one(&self, offset: u64, data: Bytes, fua: bool) -> Result<()> {
        let bl = self.lun.block_len;
        let blocks = data.len() as u32 / bl;
        self.run(
            offset,
            Command { cdb: scsi::write16(offset / u64::from(bl), blocks, fua), dir: DataDir::Write(data) },
        )
        .await
        .map(|_| ())
    }

    fn commands(&self, offset: u64, len: u64, step: u64) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        let mut o = offset;
        while o < offset + len {
            let n = step.min(offset + len - o);
            v.push((o, n));
            o += n;
        }
        v
    }

    async fn write_same(&self, offset: u64, len: u64, unmap: bool) -> Result<()> {
        let bl = u64::from(self.lun.block_len);
        let step = self.lun.max_write_same_blocks * bl;
        let zero = Bytes::from(vec![0u8; bl as usize]);
        let futs = self.commands(offset, len, step).into_iter().map(|(o, n)| {
            let cmd = Command {
                cdb: scsi::write_same16(o / bl, (n / bl) as u32, unmap),
                dir: DataDir::Write(zero.clone()),
            };
            self.run(o, cmd)
        });
        for r in futures::future::join_all(futs).await {
            r?;
        }
        Ok(())
    }

    async fn zero_by_writes(&self, offset: u64, len: u64) -> Result<()> {
        let step = u64::from(self.lun.max_request_bytes);
        let zero = Bytes::from(vec![0u8; step as usize]);
        let pieces = self.commands(offset, len, step);
        for group in pieces.chunks(16) {
            let futs = group.iter().map(|&(o, n)| self.write_one(o, zero.slice(..n as usize), false));
            for r in futures::future::join_all(futs).await {
                r?;
            }
        }
        Ok(())
    }

    async fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        let bl = u64::from(self.lun.block_len);
        let ranges: Vec<(u64, u32)> = self
            .commands(offset, len, self.lun.max_unmap_blocks * bl)
            .into_iter()
            .map(|(o, n)| (o / bl, (n / bl) as u32))
            .collect();
        for group in ranges.chunks(self.lun.max_unmap_descriptors) {
            let params = Bytes::from(scsi::unmap_parameters(group));
            let cmd = Command { cdb: scsi::unmap(params.len() as u16), dir: DataDir::Write(params) };
            self.run(group[0].0 * bl, cmd).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl Endpoint for IscsiEndpoint {
    fn name(&self) -> &str {
        &self.name
    }

    fn size(&self) -> u64 {
        self.lun.blocks * u64::from(self.lun.block_len)
    }

    fn serial(&self) -> Option<String> {
        self.lun.serial.clone()
    }

    fn capabilities(&self) -> Capabilities {
        let bl = self.lun.block_len;
        Capabilities {
            read_only: false,
            can_flush: true,
            can_fua: true,
            can_trim: self.lun.can_unmap,
            can_zero: self.lun.write_same.load(Ordering::Relaxed),
            can_block_status: false,
            can_multi_conn: true,
            block_sizes: BlockSizes { minimum: bl, preferred: bl.max(4096), maximum: MAX_REQUEST },
        }
    }

    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        self.check(offset, u64::from(len), false)?;
        if len > MAX_REQUEST {
            return Err(EndpointError::config(
                &self.name,
                Some(offset),
                format!("read of {len} bytes over {MAX_REQUEST}"),
            ));
        }
        if len <= self.lun.max_request_bytes {
            return self.read_one(offset, len).await;
        }
        let futs = self
            .commands(offset, u64::from(len), u64::from(self.lun.max_request_bytes))
            .into_iter()
            .map(|(o, n)| self.read_one(o, n as u32));
        let parts = futures::future::join_all(futs).await;
        let mut out = BytesMut::with_capacity(len as usize);
        for p in parts {
            out.extend_from_slice(&p?);
        }
        Ok(out.freeze())
    }

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<()> {
        self.check(offset, data.len() as u64, true)?;
        if data.len() > MAX_REQUEST as usize {
            return Err(EndpointError::config(
                &self.name,
                Some(offset),
                format!("write of {} bytes over {MAX_REQUEST}", data.len()),
            ));
        }
        let step = self.lun.max_request_bytes as usize;
        if data.len() <= step {
            return self.write_one(offset, data, fua).await;
        }
        let futs = (0..data.len())
            .step_by(step)
            .map(|o| self.write_one(offset + o as u64, data.slice(o..(o + step).min(data.len())), fua));
        for r in futures::future::join_all(futs).await {
            r?;
        }
        Ok(())
    }

    async fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> Result<()> {
        self.check(offset, len, true)?;
        if len == 0 {
            return Ok(());
        }
        if may_trim && self.lun.can_unmap && self.lun.unmap_reads_zero {
            return self.unmap(offset, len).await;
        }
        if self.lun.write_same.load(Ordering::Relaxed) {
            match self.write_same(offset, len, false).await {
                Ok(()) => return Ok(()),
                Err(e) if matches!(&e.kind, ErrorKind::Server { code, .. } if *code == u32::from(scsi::sense_key::ILLEGAL_REQUEST)) =>
                {
                    tracing::info!("{}: WRITE SAME refused ({e}); zeroing by writes", self.name);
                    self.lun.write_same.store(false, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        self.zero_by_writes(offset, len).await
    }

    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.check(offset, len, true)?;
        if !self.lun.can_unmap || len == 0 {
            return Ok(()); // advisory
        }
        self.unmap(offset, len).await
    }

    async fn flush(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(EndpointError::io(&self.name, None, "endpoint is closed"));
        }
        self.run(0, Command { cdb: scsi::synchronize_cache16(0, 0), dir: DataDir::None })
            .await
            .map(|_| ())
            .map_err(|mut e| {
                e.offset = None;
                e
            })
    }

    async fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let last = self.leave();
        self.link
            .logout(last, self.cid, Duration::from_secs(30))
            .await
            .map_err(|e| EndpointError::io(&self.name, None, format!("logout: {e}")))
    }

    async fn abort(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let last = self.leave();
        self.link.abort(last, self.cid, ABORT_BOUND).await;
    }

    fn tcp_info(&self) -> Vec<TcpInfo> {
        wanblk_sys::tcp::tcp_info(self.link.fd()).map(|t| vec![t]).unwrap_or_default()
    }

    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        socket2::SockRef::from(&self.link.fd()).peer_addr().ok()?.as_socket()
    }

    fn send_backlog(&self) -> Option<SendBacklog> {
        let info = wanblk_sys::tcp::tcp_info(self.link.fd()).ok()?;
        Some(SendBacklog::of_tcp(self.link.unsent_bytes(), &info))
    }

    fn set_pacing_rate(&self, bytes_per_s: Option<u64>) {
        if let Err(e) = wanblk_sys::tcp::set_max_pacing_rate(self.link.fd(), bytes_per_s.unwrap_or(u64::MAX))
        {
            tracing::debug!("{}: pacing rate: {e}", self.name);
        }
    }

    fn set_window_clamp(&self, bytes: Option<u64>) {
        if let Err(e) = wanblk_sys::tcp::set_window_clamp(self.link.fd(), bytes) {
            tracing::debug!("{}: window clamp: {e}", self.name);
        }
    }
}

impl Drop for IscsiEndpoint {
    fn drop(&mut self) {
        // Not closed cleanly: drop the TCP connection so the tasks end.
        if !self.closed.swap(true, Ordering::SeqCst) {
            self.leave();
            self.link.shutdown();
        }
    }
}
