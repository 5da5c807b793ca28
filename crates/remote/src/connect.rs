//! Connectors from URIs: the only place that names the protocol drivers.

use std::sync::Arc;

use wanblk_blockdev::Connector;

use crate::{RemoteError, RemoteOptions};

/// The protocol of a network store's URI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `nbd://`, `nbd+unix://`, `nbds://`, `nbds+unix://` (and vsock, refused when opened).
    Nbd,
    /// `iscsi://`.
    Iscsi,
}

impl Scheme {
    /// The protocol of `uri`, if it names a network store.
    pub fn of(uri: &str) -> Option<Scheme> {
        let lower = uri.to_ascii_lowercase();
        if ["nbd://", "nbd+unix://", "nbds://", "nbds+unix://", "nbd+vsock://"]
            .iter()
            .any(|p| lower.starts_with(p))
        {
            Some(Scheme::Nbd)
        } else if lower.starts_with("iscsi://") {
            Some(Scheme::Iscsi)
        } else {
            None
        }
    }
}

/// `uri` names a network store (NBD or iSCSI).
pub fn is_remote(uri: &str) -> bool {
    Scheme::of(uri).is_some()
}

/// A connector that opens sessions to the store `uri` with `opts`.
///
/// # Errors
/// Not a network store, or a malformed URI or option.
pub fn connector(uri: &str, opts: &RemoteOptions) -> Result<Arc<dyn Connector>, RemoteError> {
    match Scheme::of(uri) {
        Some(Scheme::Nbd) => {
            let nbd = wanblk_nbd::NbdOptions {
                structured_replies: opts.structured_replies,
                block_status: opts.structured_replies,
                tcp: opts.tcp.clone(),
                tls: opts.tls.clone(),
                connect_timeout: opts.connect_timeout(),
                ..wanblk_nbd::NbdOptions::default()
            };
            let c = wanblk_nbd::NbdConnector::new(uri, nbd).map_err(|e| match e {
                wanblk_nbd::ConfigError::Tls { uri, source } => RemoteError::Store(
                    wanblk_blockdev::EndpointError::config(uri, None, format!("TLS: {source}")),
                ),
                e => RemoteError::Uri { uri: uri.to_string(), message: e.to_string() },
            })?;
            Ok(Arc::new(c))
        }
        Some(Scheme::Iscsi) => {
            let iscsi = wanblk_iscsi::IscsiOptions {
                mode: opts.iscsi_mode,
                params: opts.iscsi_params.clone(),
                max_request_bytes: opts.max_request_bytes,
                tcp: opts.tcp.clone(),
                secret: opts.iscsi_secret.clone(),
                target_user: opts.iscsi_target_user.clone(),
                target_secret: opts.iscsi_target_secret.clone(),
                login_timeout: opts.connect_timeout(),
                ..wanblk_iscsi::IscsiOptions::default()
            };
            let iscsi = match &opts.initiator_name {
                Some(n) => wanblk_iscsi::IscsiOptions { initiator_name: n.clone(), ..iscsi },
                None => iscsi,
            };
            Ok(Arc::new(wanblk_iscsi::IscsiConnector::new(uri, iscsi)?))
        }
        None => Err(RemoteError::NotRemote(uri.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        assert_eq!(Scheme::of("nbd://h/e"), Some(Scheme::Nbd));
        assert_eq!(Scheme::of("NBD+unix:///e?socket=/s"), Some(Scheme::Nbd));
        assert_eq!(Scheme::of("iscsi://h/iqn.x/1"), Some(Scheme::Iscsi));
        assert_eq!(Scheme::of("/tmp/x.img"), None);
        assert_eq!(Scheme::of("null:"), None);
        assert!(matches!(connector("file.img", &RemoteOptions::default()), Err(RemoteError::NotRemote(_))));
        let e =
            connector("nbd://h/e?tls-certificates=/x", &RemoteOptions::default()).err().unwrap().to_string();
        assert!(e.starts_with("nbd://h/e?tls-certificates=/x: "), "{e}");
        assert!(e.contains("needs TLS"), "{e}");
    }
}
