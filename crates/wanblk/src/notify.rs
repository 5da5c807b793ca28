//! Telling systemd how a service is doing (`Type=notify`): `READY=1` once
//! `wanblk serve` or `wanblk target` listens, `STOPPING=1` when it begins
//! to stop. The message is one datagram to the Unix socket named by
//! `NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace); without
//! that variable (not under systemd) nothing is sent.

use std::os::unix::net::UnixDatagram;

/// Sends `state` (e.g. `"READY=1"`) to the service manager, if there is
/// one. Failures only go to the debug log: a service works without it.
pub(crate) fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    if let Err(e) = send(&path, state) {
        tracing::debug!("sd_notify {state}: {e}");
    }
}

fn send(path: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    let bytes = path.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_reaches_the_socket() {
        let dir = std::env::temp_dir().join(format!("wanblk-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixDatagram::bind(&path).unwrap();
        send(path.as_os_str(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
