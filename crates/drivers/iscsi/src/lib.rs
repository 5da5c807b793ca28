//! iSCSI initiator endpoint over tokio: the second network endpoint of the
//! block device layer.
//!
//! I/O boundary: this crate owns the TCP sockets and the tokio tasks; every
//! protocol decision (PDUs, login, negotiation, task bookkeeping) is in the
//! sans-I/O `wanblk-iscsi-proto`.
//!
//! Parallelism comes two ways, chosen by [`Mode`]:
//! - [`Mode::Sessions`]: each [`Connector::connect`] logs in a new session
//!   with its own ISID (BDL-APT). Works with any target.
//! - [`Mode::Mcs`]: multiple connections per session (iSCSI-APT).
//!   The first `connect` logs in the leading connection; later ones add a
//!   connection (same ISID and TSIH, new CID). Each endpoint issues its
//!   commands on its own connection (connection allegiance) while CmdSN and
//!   MaxCmdSN are shared session-wide. A connection is logged out only after
//!   its outstanding commands finish.
//!
//! Defaults are tuned for long-fat networks (the iSCSI remote-write study's table 1, the iSCSI read-latency study
//! section 5): InitialR2T=No, ImmediateData=Yes, bursts and segments as large
//! as the target allows, large READ/WRITE commands (4 MiB), many in flight.
//! In MC/S mode the initiator offers InitialR2T=Yes instead and keeps each
//! connection's unsent bytes short: the target runs the session's commands
//! in CmdSN order over all its connections, so commands must reach it
//! early (they overtake queued Data-Out) and data must follow only for
//! commands it has taken in order.
//!
//! Behaviour of tgt 1.0.85 this crate copes with (verified by the tests):
//! its first operational Login Response may lack the transit bit (one more
//! empty request follows); on an added MC/S connection it repeats
//! session-wide keys (ignored); it answers `None` to a digest offer of
//! `CRC32C` unless its own setting allows CRC32C; it does not enforce
//! MaxConnections (the connector does); the first command of a session gets
//! UNIT ATTENTION 29/00 (retried); it pings idle connections with NOP-In
//! when `nop_interval` is set and drops those that do not answer.

mod endpoint;
pub mod identity;
mod login;
mod transport;
pub mod uri;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use wanblk_blockdev::{Connector, Endpoint, EndpointError, Result};
use wanblk_iscsi_proto::discovery::DiscoveredTarget;
use wanblk_iscsi_proto::keys::{self, Params};
use wanblk_iscsi_proto::{Auth, CmdWindow, Connection, LoginConfig, TargetAuth, encode_lun};

pub use endpoint::IscsiEndpoint;
pub use identity::{Secret, default_initiator_name};
pub use uri::{IscsiUri, UriError, redact};

use crate::endpoint::LunInfo;
use crate::transport::{Link, Liveness, Window};

/// Bytes an MC/S connection's socket holds written but not sent
/// (`TCP_NOTSENT_LOWAT`): a command written behind them waits this long
/// at the connection's rate (0.2 s at 10 Mbit/s, early in slow start).
const MCS_UNSENT_LIMIT: usize = 256 << 10;

/// How parallel sessions are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// One iSCSI session per `connect()` (new ISID each time).
    #[default]
    Sessions,
    /// One session, one more connection per `connect()` (MC/S).
    Mcs,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Mode, String> {
        match s {
            "sessions" | "session" => Ok(Mode::Sessions),
            "mcs" | "mc/s" | "connections" => Ok(Mode::Mcs),
            _ => Err(format!("unknown iSCSI mode {s:?} (sessions or mcs)")),
        }
    }
}

/// Default size of one READ/WRITE command (the iSCSI read-latency study: 4 MB commands recover
/// what 127.5 KB commands lose on long paths).
pub const DEFAULT_MAX_REQUEST_BYTES: u32 = 4 << 20;

/// Options of an [`IscsiConnector`].
#[derive(Debug, Clone)]
pub struct IscsiOptions {
    /// Sessions or MC/S.
    pub mode: Mode,
    /// `--iscsi-param KEY=VALUE` overrides of the offered login keys (e.g.
    /// `HeaderDigest=CRC32C`, `MaxBurstLength=1048576`).
    pub params: Vec<(String, String)>,
    /// InitiatorName ([`default_initiator_name`] by default).
    pub initiator_name: String,
    /// The CHAP secret when the URI names a user without `%password`
    /// (`--secret-file`); else the `WANBLK_ISCSI_PASSWORD` environment
    /// variable is used.
    pub secret: Option<Secret>,
    /// Mutual CHAP: the CHAP user name the target must answer with (any
    /// if `None`).
    pub target_user: Option<String>,
    /// Mutual CHAP: the target's secret (`--target-secret-file`, else the
    /// `WANBLK_ISCSI_TARGET_PASSWORD` environment variable); the target is
    /// authenticated when one is given.
    pub target_secret: Option<Secret>,
    /// Largest READ/WRITE command, bytes (lowered to the target's Block
    /// Limits maximum transfer length).
    pub max_request_bytes: u32,
    /// Options of every TCP connection (congestion control, buffers, keepalive).
    pub tcp: wanblk_sys::tcp::TcpOptions,
    /// Timeout of TCP connect plus login.
    pub login_timeout: Duration,
    /// A NOP-Out ping is sent after this much silence from the target...
    pub ping_after: Duration,
    /// ...and the connection is declared dead after this much.
    pub dead_after: Duration,
}

impl Default for IscsiOptions {
    fn default() -> Self {
        IscsiOptions {
            mode: Mode::Sessions,
            params: Vec::new(),
            initiator_name: default_initiator_name(),
            secret: None,
            target_user: None,
            target_secret: None,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            tcp: wanblk_sys::tcp::TcpOptions::default(),
            login_timeout: Duration::from_secs(15),
            ping_after: Duration::from_secs(10),
            dead_after: Duration::from_secs(60),
        }
    }
}

/// An MC/S session: what every added connection shares.
struct McsSession {
    isid: [u8; 6],
    tsih: u16,
    params: Params,
    window: Arc<Window>,
    lun: Arc<LunInfo>,
    members: Arc<Members>,
}

/// The CIDs of an MC/S session's live connections. A new connection takes
/// the next CID after the last one handed out that no live connection
/// holds (wrapping below 0xFFFF, see [`wanblk_iscsi_proto::login_tag`]):
/// never a live connection's (a login with a live CID reinstates, that is
/// ends, that connection: RFC 7143 section 6.2.1), and a closed one's only
/// after the whole range went round.
#[derive(Debug)]
pub(crate) struct Members {
    state: std::sync::Mutex<Cids>,
}

#[derive(Debug)]
struct Cids {
    live: std::collections::BTreeSet<u16>,
    /// Where the search for the next free CID starts.
    next: u16,
}

impl Members {
    /// A session whose first connection has CID 0.
    fn new() -> Members {
        Members {
            state: std::sync::Mutex::new(Cids { live: std::collections::BTreeSet::from([0]), next: 1 }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cids> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Live connections.
    pub(crate) fn count(&self) -> usize {
        self.lock().live.len()
    }

    /// A CID for a new connection, unless `limit` connections live.
    fn join(&self, limit: usize) -> Option<u16> {
        let mut g = self.lock();
        let Cids { live, next } = &mut *g;
        if live.len() >= limit.min(usize::from(u16::MAX)) {
            return None;
        }
        let mut cid = *next;
        while live.contains(&cid) || cid == u16::MAX {
            cid = cid.wrapping_add(1);
        }
        live.insert(cid);
        *next = cid.wrapping_add(1);
        Some(cid)
    }

    /// Connection `cid` ends; true if it was the last one.
    pub(crate) fn leave(&self, cid: u16) -> bool {
        let mut g = self.lock();
        g.live.remove(&cid);
        g.live.is_empty()
    }
}

/// Opens iSCSI sessions (or MC/S connections) to one LUN.
pub struct IscsiConnector {
    uri: IscsiUri,
    name: String,
    opts: IscsiOptions,
    offer: Vec<(String, String)>,
    isid_base: [u8; 3],
    isid_counter: AtomicU16,
    /// Challenges made without the system's random source: each one's
    /// salt, so no two logins send the same challenge.
    fallback_challenges: AtomicU32,
    mcs: tokio::sync::Mutex<Option<Arc<McsSession>>>,
    max_connections: AtomicUsize,
    /// What the first session's probe learnt about the LUN; later sessions
    /// (sessions mode) share it instead of probing again.
    lun: std::sync::Mutex<Option<Arc<LunInfo>>>,
}

impl std::fmt::Debug for IscsiConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IscsiConnector").field("name", &self.name).field("mode", &self.opts.mode).finish()
    }
}

impl IscsiConnector {
    /// A connector for `uri` (`iscsi://[user[%password]@]host[:port]/target-iqn/lun`).
    ///
    /// # Errors
    /// [`wanblk_blockdev::ErrorKind::Config`] for a bad URI or a bad `--iscsi-param`.
    pub fn new(uri: &str, opts: IscsiOptions) -> Result<IscsiConnector> {
        Self::from_parsed(uri, IscsiUri::parse(uri), opts)
    }

    /// A connector for SendTargets discovery ([`IscsiConnector::discover`])
    /// at a portal, `iscsi://[user[%password]@]host[:port]` (any target
    /// and LUN after it are ignored).
    ///
    /// # Errors
    /// As [`IscsiConnector::new`].
    pub fn for_portal(uri: &str, opts: IscsiOptions) -> Result<IscsiConnector> {
        Self::from_parsed(uri, IscsiUri::parse_portal(uri), opts)
    }

    fn from_parsed(
        uri: &str,
        parsed: std::result::Result<IscsiUri, UriError>,
        opts: IscsiOptions,
    ) -> Result<IscsiConnector> {
        // The raw URI may hold a password: name the endpoint without it.
        let parsed = parsed.map_err(|e| EndpointError::config(redact(uri), None, e.to_string()))?;
        let name = parsed.to_string();
        identity::valid_name(&opts.initiator_name).map_err(|e| {
            EndpointError::config(&name, None, format!("InitiatorName {:?}: {e}", opts.initiator_name))
        })?;
        let mut opts = opts;
        if opts.target_secret.is_none() {
            opts.target_secret = Secret::from_env(uri::TARGET_PASSWORD_ENV);
        }
        if parsed.user.is_none() && (opts.secret.is_some() || opts.target_secret.is_some()) {
            return Err(EndpointError::config(
                &name,
                None,
                "a CHAP secret was given but the URI names no user (iscsi://USER@host/iqn/lun)",
            ));
        }
        if parsed.password.is_some() {
            tracing::warn!(
                "{name}: the CHAP secret is in the URI, where other local users can read it (ps); use --secret-file or WANBLK_ISCSI_PASSWORD"
            );
        }
        let max_conn = match opts.mode {
            Mode::Sessions => 1,
            Mode::Mcs => 65535,
        };
        let mut offer = keys::long_fat_network_offer(max_conn);
        if opts.mode == Mode::Mcs {
            // No unsolicited data across connections: a target runs an MC/S
            // session's commands in CmdSN order, so a write whose command
            // arrives before its predecessor's waits with its unsolicited
            // Data-Out still arriving; tgt 1.0.85 then may run and free it
            // while a Data-Out is still being read into it (it counts the
            // bytes when the PDU starts) and crash. Solicited data flows
            // only for commands the target has already taken in order.
            keys::apply_overrides(&mut offer, &[("InitialR2T".to_string(), "Yes".to_string())])
                .map_err(|e| EndpointError::config(&name, None, e.to_string()))?;
            if opts.params.iter().any(|(k, v)| k == "InitialR2T" && v.eq_ignore_ascii_case("No")) {
                tracing::warn!(
                    "{name}: MC/S with InitialR2T=No sends write data before the target has taken the command in order; tgt 1.0.85 can crash on it"
                );
            }
        }
        keys::apply_overrides(&mut offer, &opts.params)
            .map_err(|e| EndpointError::config(&name, None, format!("--iscsi-param: {e}")))?;
        if opts.max_request_bytes < 4096 {
            return Err(EndpointError::config(&name, None, "command size under 4096 bytes"));
        }
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
        );
        let r = h.finish().to_be_bytes();
        Ok(IscsiConnector {
            uri: parsed,
            name,
            opts,
            offer,
            isid_base: [r[0], r[1], r[2]],
            isid_counter: AtomicU16::new(u16::from_be_bytes([r[3], r[4]])),
            fallback_challenges: AtomicU32::new(0),
            mcs: tokio::sync::Mutex::new(None),
            max_connections: AtomicUsize::new(0),
            lun: std::sync::Mutex::new(None),
        })
    }

    /// A connector with default options.
    ///
    /// # Errors
    /// As [`IscsiConnector::new`].
    pub fn parse(uri: &str) -> Result<IscsiConnector> {
        IscsiConnector::new(uri, IscsiOptions::default())
    }

    /// The parsed URI.
    pub fn uri(&self) -> &IscsiUri {
        &self.uri
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.opts.mode
    }

    /// The initiator's CHAP secret: the URI's, else `--secret-file`, else
    /// the environment.
    fn auth(&self) -> Auth {
        let Some(user) = &self.uri.user else { return Auth::None };
        let secret = match (&self.uri.password, &self.opts.secret) {
            (Some(p), _) => Some(p.as_bytes().to_vec()),
            (None, Some(s)) => Some(s.expose().to_vec()),
            (None, None) => Secret::from_env(uri::PASSWORD_ENV).map(|s| s.expose().to_vec()),
        };
        match secret {
            Some(secret) => Auth::Chap { user: user.clone(), secret },
            None => Auth::None,
        }
    }

    /// Mutual CHAP with a fresh random challenge, when a target secret is set.
    fn target_auth(&self) -> Option<TargetAuth> {
        let secret = self.opts.target_secret.as_ref()?;
        let mut challenge = vec![0u8; 16];
        let random = std::fs::File::open("/dev/urandom").and_then(|mut f| {
            use std::io::Read;
            f.read_exact(&mut challenge)
        });
        if random.is_err() {
            // Unique per login all the same (never reused, never the target's).
            let mut h = RandomState::new().build_hasher();
            h.write_u32(self.fallback_challenges.fetch_add(1, Ordering::Relaxed));
            challenge[..8].copy_from_slice(&h.finish().to_be_bytes());
        }
        Some(TargetAuth {
            user: self.opts.target_user.clone(),
            secret: secret.expose().to_vec(),
            id: challenge[0],
            challenge,
        })
    }

    /// A fresh ISID: random qualifier (type 10b, RFC 7143 section 11.12.5).
    fn new_isid(&self) -> [u8; 6] {
        let c = self.isid_counter.fetch_add(1, Ordering::Relaxed).to_be_bytes();
        [0x80, self.isid_base[0], self.isid_base[1], self.isid_base[2], c[0], c[1]]
    }

    fn liveness(&self) -> Liveness {
        Liveness { ping_after: self.opts.ping_after, dead_after: self.opts.dead_after }
    }

    fn login_config(
        &self,
        isid: [u8; 6],
        tsih: u16,
        cid: u16,
        cmd_sn: u32,
        session: Option<Params>,
    ) -> LoginConfig {
        LoginConfig {
            initiator_name: self.opts.initiator_name.clone(),
            target_name: Some(self.uri.target.clone()),
            isid,
            tsih,
            cid,
            itt: wanblk_iscsi_proto::login_tag(cid),
            cmd_sn,
            exp_stat_sn: 0,
            auth: self.auth(),
            target_auth: self.target_auth(),
            offer: self.offer.clone(),
            session,
        }
    }

    /// Logs in one connection; returns the link, the session's values and TSIH.
    async fn open(
        &self,
        isid: [u8; 6],
        tsih: u16,
        cid: u16,
        window: Option<Arc<Window>>,
        session: Option<Params>,
    ) -> Result<(Arc<Link>, Params, u16, Arc<Window>)> {
        let mut stream =
            login::connect_tcp(&self.name, &self.uri.address(), &self.opts.tcp, self.opts.login_timeout)
                .await?;
        let cmd_sn = window.as_ref().map_or(1, |w| w.lock().current());
        let cfg = self.login_config(isid, tsih, cid, cmd_sn, session);
        let (out, leftover) = login::login(&self.name, &mut stream, cfg, self.opts.login_timeout).await?;
        tracing::debug!(target = %self.name, ?out.params, tsih = out.tsih, "iSCSI login complete");
        let window = match window {
            Some(w) => {
                let opened = w.lock().update(out.exp_cmd_sn, out.max_cmd_sn);
                if opened {
                    w.opened.notify_waiters();
                }
                w
            }
            None => Window::new(CmdWindow::new(cmd_sn, out.exp_cmd_sn, out.max_cmd_sn)),
        };
        let mut conn =
            Connection::new(out.params.clone(), encode_lun(self.uri.lun), out.exp_stat_sn).with_cid(cid);
        if self.opts.mode == Mode::Mcs {
            // The target runs the session's commands in CmdSN order, so a
            // command this connection sends late holds back the later ones
            // sent on every other connection: short Data-Out segments in
            // its queue, and little written but not sent in its socket, so
            // a new command (which overtakes queued Data-Out, see
            // `Connection::poll_transmit`) goes out soon.
            conn = conn.with_short_segments();
            use std::os::fd::AsFd;
            if let Err(e) = wanblk_sys::tcp::set_unsent_limit(stream.as_fd(), MCS_UNSENT_LIMIT) {
                tracing::debug!(target = %self.name, "TCP_NOTSENT_LOWAT: {e}");
            }
        }
        let link = Link::spawn(stream, conn, Arc::clone(&window), leftover, self.liveness())
            .map_err(|e| EndpointError::io(&self.name, None, e))?;
        Ok((link, out.params, out.tsih, window))
    }

    async fn connect_session(&self) -> Result<Arc<IscsiEndpoint>> {
        let (link, params, _tsih, _window) = self.open(self.new_isid(), 0, 0, None, None).await?;
        // The LUN is the same behind every session: probe it once (seven
        // commands), and on later sessions only take the UNIT ATTENTION a
        // new session reports (one round trip instead of the probe's).
        let known = self.lun.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let lun = match known {
            Some(lun) => endpoint::clear_unit_attention(&link)
                .await
                .map(|()| lun)
                .map_err(|e| endpoint::command_error(&self.name, None, e)),
            None => endpoint::probe(&self.name, &link, &params, self.opts.max_request_bytes).await.map(|l| {
                let l = Arc::new(l);
                *self.lun.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::clone(&l));
                l
            }),
        };
        let lun = match lun {
            Ok(l) => l,
            Err(e) => {
                let _ = link.logout(true, 0, Duration::from_secs(2)).await;
                return Err(e);
            }
        };
        Ok(Arc::new(IscsiEndpoint::new(self.name.clone(), link, lun, 0, true, None)))
    }

    async fn connect_mcs(&self) -> Result<Arc<IscsiEndpoint>> {
        let mut guard = self.mcs.lock().await;
        // Join the session while one of its connections lives; after a
        // session failure (ERL 0) the next connect starts a new session.
        if let Some(s) = guard.as_ref()
            && s.members.count() > 0
            && s.window.healthy()
        {
            let s = Arc::clone(s);
            drop(guard);
            let limit = s.params.max_connections as usize;
            // RFC 7143 section 13.2: never more connections than MaxConnections.
            let Some(cid) = s.members.join(limit) else {
                return Err(EndpointError::config(
                    &self.name,
                    None,
                    format!("the session already has {limit} connections (the target's MaxConnections)"),
                ));
            };
            let opened =
                self.open(s.isid, s.tsih, cid, Some(Arc::clone(&s.window)), Some(s.params.clone())).await;
            let (link, _, _, _) = match opened {
                Ok(o) => o,
                Err(e) => {
                    s.members.leave(cid);
                    return Err(e);
                }
            };
            return Ok(Arc::new(IscsiEndpoint::new(
                self.name.clone(),
                link,
                Arc::clone(&s.lun),
                cid,
                false,
                Some(Arc::clone(&s.members)),
            )));
        }
        let isid = self.new_isid();
        let (link, params, tsih, window) = self.open(isid, 0, 0, None, None).await?;
        self.max_connections.store(params.max_connections as usize, Ordering::SeqCst);
        let lun = match endpoint::probe(&self.name, &link, &params, self.opts.max_request_bytes).await {
            Ok(l) => Arc::new(l),
            Err(e) => {
                let _ = link.logout(true, 0, Duration::from_secs(2)).await;
                return Err(e);
            }
        };
        let members = Arc::new(Members::new());
        *guard = Some(Arc::new(McsSession {
            isid,
            tsih,
            params,
            window,
            lun: Arc::clone(&lun),
            members: Arc::clone(&members),
        }));
        Ok(Arc::new(IscsiEndpoint::new(self.name.clone(), link, lun, 0, false, Some(members))))
    }

    /// Opens one session (or MC/S connection) and returns the concrete endpoint.
    ///
    /// # Errors
    /// Connection, login, or LUN probe failures.
    pub async fn connect_endpoint(&self) -> Result<Arc<IscsiEndpoint>> {
        match self.opts.mode {
            Mode::Sessions => self.connect_session().await,
            Mode::Mcs => self.connect_mcs().await,
        }
    }

    /// The LUNs of the URI's target (REPORT LUNS, sent to the URI's LUN in
    /// a session of its own, logged out after).
    ///
    /// # Errors
    /// Connection, login or command failures.
    pub async fn report_luns(&self) -> Result<Vec<u16>> {
        use wanblk_iscsi_proto::scsi;
        const ALLOC: u32 = 8 + 8 * 1024;
        let (link, _params, _tsih, _window) = self.open(self.new_isid(), 0, 0, None, None).await?;
        let cmd = wanblk_iscsi_proto::Command {
            cdb: scsi::report_luns(ALLOC),
            dir: wanblk_iscsi_proto::DataDir::Read(ALLOC),
        };
        let answer = endpoint::exec(&link, cmd, endpoint::PROBE_UA_RETRIES).await;
        let _ = link.logout(true, 0, Duration::from_secs(5)).await;
        let answer = answer.map_err(|e| endpoint::command_error(&self.name, None, e))?;
        scsi::parse_report_luns(&answer.data)
            .map_err(|e| EndpointError::protocol(&self.name, None, e.to_string()))
    }

    /// SendTargets discovery at the URI's portal: every target and its addresses.
    ///
    /// # Errors
    /// Connection, login or protocol failures.
    pub async fn discover(&self) -> Result<Vec<DiscoveredTarget>> {
        let mut stream =
            login::connect_tcp(&self.name, &self.uri.address(), &self.opts.tcp, self.opts.login_timeout)
                .await?;
        let mut cfg = self.login_config(self.new_isid(), 0, 0, 1, None);
        cfg.target_name = None;
        cfg.offer.retain(|(k, _)| {
            matches!(k.as_str(), "HeaderDigest" | "DataDigest" | "MaxRecvDataSegmentLength")
        });
        let (out, buf) = login::login(&self.name, &mut stream, cfg, self.opts.login_timeout).await?;
        login::send_targets(&self.name, &mut stream, &out, buf, 1, self.opts.login_timeout).await
    }
}

#[async_trait]
impl Connector for IscsiConnector {
    fn name(&self) -> &str {
        &self.name
    }

    async fn connect(&self) -> Result<Arc<dyn Endpoint>> {
        Ok(self.connect_endpoint().await?)
    }

    fn max_sessions(&self) -> Option<usize> {
        match self.opts.mode {
            Mode::Sessions => None,
            Mode::Mcs => match self.max_connections.load(Ordering::SeqCst) {
                0 => None,
                n => Some(n),
            },
        }
    }
}

#[cfg(test)]
mod members_tests {
    use super::Members;

    #[test]
    fn cids_are_never_a_live_connections_and_stay_below_the_reserved_range() {
        let m = Members::new();
        assert_eq!(m.join(3), Some(1));
        assert_eq!(m.join(3), Some(2));
        assert_eq!(m.join(3), None, "MaxConnections reached");
        assert!(!m.leave(1));
        // The next CID, not the one just freed.
        assert_eq!(m.join(3), Some(3));
        // Round the whole range with connection 0 and 3 alive: every CID
        // handed out is free, never 0xFFFF, never 0 or 3.
        assert!(!m.leave(2));
        for _ in 0..70_000 {
            let c = m.join(3).expect("room for one more");
            assert!(c != u16::MAX && c != 0 && c != 3, "cid {c}");
            assert!(!m.leave(c));
        }
        assert!(!m.leave(3));
        assert!(m.leave(0), "the last connection");
        assert_eq!(m.count(), 0);
    }
}
