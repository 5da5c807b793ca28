//! Connecting and logging in one TCP connection, and SendTargets discovery.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wanblk_blockdev::{EndpointError, ErrorKind};
use wanblk_iscsi_proto::discovery::{DiscoveredTarget, Discovery, DiscoveryStep};
use wanblk_iscsi_proto::{Login, LoginConfig, LoginError, LoginOutcome, LoginStep, OutPdu};

/// Maps a login failure to an endpoint error: refusals by the target are
/// server errors (code = class << 8 | detail), broken exchanges protocol
/// errors, bad local settings configuration errors.
pub(crate) fn login_error(name: &str, e: LoginError) -> EndpointError {
    let kind = match &e {
        LoginError::Status { class, detail, .. } => {
            // Class 3 (target error: service unavailable, out of resources)
            // may pass; class 2 (initiator error: not found, auth) will not.
            ErrorKind::Server {
                code: (u32::from(*class) << 8) | u32::from(*detail),
                message: e.to_string(),
                transient: *class == 3,
            }
        }
        LoginError::Config(_) | LoginError::AuthRequired(_) => ErrorKind::Config(e.to_string()),
        // The target failed mutual CHAP: it is not who it says; trying
        // again would not change that.
        LoginError::TargetAuth(_) => ErrorKind::Config(format!("login: {e}")),
        _ => ErrorKind::Protocol(format!("login: {e}")),
    };
    EndpointError::new(name, None, kind)
}

async fn write_pdu(stream: &mut TcpStream, pdu: &OutPdu) -> std::io::Result<()> {
    stream.write_all(&pdu.to_vec()).await
}

/// Opens a TCP connection to `addr` with the TCP options applied (Nagle off).
pub(crate) async fn connect_tcp(
    name: &str,
    addr: &str,
    tcp: &wanblk_sys::tcp::TcpOptions,
    timeout: Duration,
) -> Result<TcpStream, EndpointError> {
    let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| EndpointError::io(name, None, format!("connect to {addr} timed out after {timeout:?}")))?
        .map_err(|e| EndpointError::io(name, None, format!("connect to {addr}: {e}")))?;
    wanblk_sys::tcp::apply(std::os::fd::AsFd::as_fd(&stream), tcp)
        .map_err(|e| EndpointError::config(name, None, format!("socket options: {e}")))?;
    Ok(stream)
}

/// Runs the login exchange on `stream`. Returns the outcome and any bytes
/// read past the final Login Response.
pub(crate) async fn login(
    name: &str,
    stream: &mut TcpStream,
    cfg: LoginConfig,
    timeout: Duration,
) -> Result<(LoginOutcome, BytesMut), EndpointError> {
    let initiator = cfg.initiator_name.clone();
    // What to check when the target refuses: tgtd answers "target not
    // found" to an initiator its ACL leaves out.
    let login_error = |name: &str, e: LoginError| {
        let hint = match &e {
            LoginError::Status { class: 2, detail: 1, .. } => {
                "; check the CHAP user and its secret (--secret-file)".to_string()
            }
            LoginError::Status { class: 2, detail: 2 | 3, .. } => {
                format!("; or the target does not allow InitiatorName {initiator} (--initiator-name)")
            }
            _ => String::new(),
        };
        let mut err = login_error(name, e);
        if let ErrorKind::Server { message, .. } = &mut err.kind {
            message.push_str(&hint);
        }
        err
    };
    let fut = async {
        let (mut login, first) = Login::new(cfg).map_err(|e| login_error(name, e))?;
        write_pdu(stream, &first).await.map_err(|e| EndpointError::io(name, None, format!("login: {e}")))?;
        let mut buf = BytesMut::with_capacity(16 * 1024);
        loop {
            while let Some(step) = login.handle_input(&mut buf).map_err(|e| login_error(name, e))? {
                match step {
                    LoginStep::Send(pdu) => write_pdu(stream, &pdu)
                        .await
                        .map_err(|e| EndpointError::io(name, None, format!("login: {e}")))?,
                    LoginStep::Done(out) => return Ok((out, buf)),
                }
            }
            let n = stream
                .read_buf(&mut buf)
                .await
                .map_err(|e| EndpointError::io(name, None, format!("login: {e}")))?;
            if n == 0 {
                return Err(EndpointError::io(name, None, "target closed the connection during login"));
            }
        }
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| EndpointError::io(name, None, format!("login timed out after {timeout:?}")))?
}

/// Runs SendTargets on a logged-in discovery connection and logs out.
pub(crate) async fn send_targets(
    name: &str,
    stream: &mut TcpStream,
    outcome: &LoginOutcome,
    mut buf: BytesMut,
    cmd_sn: u32,
    timeout: Duration,
) -> Result<Vec<DiscoveredTarget>, EndpointError> {
    let fut = async {
        let (mut d, first) = Discovery::new(outcome, cmd_sn, 0x100);
        write_pdu(stream, &first).await.map_err(|e| EndpointError::io(name, None, e))?;
        let mut found = None;
        loop {
            while let Some(step) = d.handle_input(&mut buf).map_err(|e| login_error(name, e))? {
                match step {
                    DiscoveryStep::Send(p) => {
                        write_pdu(stream, &p).await.map_err(|e| EndpointError::io(name, None, e))?
                    }
                    DiscoveryStep::Targets(t, logout) => {
                        found = Some(t);
                        write_pdu(stream, &logout).await.map_err(|e| EndpointError::io(name, None, e))?;
                    }
                    DiscoveryStep::LoggedOut => return Ok(found.unwrap_or_default()),
                }
            }
            let n = stream.read_buf(&mut buf).await.map_err(|e| EndpointError::io(name, None, e))?;
            if n == 0 {
                // Some targets close instead of answering the logout.
                return found.ok_or_else(|| EndpointError::io(name, None, "target closed during discovery"));
            }
        }
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| EndpointError::io(name, None, format!("discovery timed out after {timeout:?}")))?
}
