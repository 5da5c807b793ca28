//! Construction of protocol connectors from URIs: the only place the binary
//! names protocol driver crates.

use std::sync::Arc;

use wanblk_blockdev::Connector;

use crate::location::NetOptions;

/// An NBD connector for `uri`.
pub(crate) fn nbd_connector(uri: &str, opts: &NetOptions) -> anyhow::Result<Arc<dyn Connector>> {
    let nbd = wanblk_nbd::NbdOptions {
        structured_replies: opts.structured_replies,
        block_status: opts.structured_replies,
        tcp: opts.tcp.clone(),
        ..wanblk_nbd::NbdOptions::default()
    };
    let c = wanblk_nbd::NbdConnector::new(uri, nbd).map_err(|e| anyhow::anyhow!("{uri}: {e}"))?;
    Ok(Arc::new(c))
}

/// An iSCSI connector for `uri`.
pub(crate) fn iscsi_connector(uri: &str, opts: &NetOptions) -> anyhow::Result<Arc<dyn Connector>> {
    let iscsi = wanblk_iscsi::IscsiOptions {
        mode: if opts.iscsi_mcs { wanblk_iscsi::Mode::Mcs } else { wanblk_iscsi::Mode::Sessions },
        params: opts.iscsi_params.clone(),
        max_request_bytes: opts.pool.max_request_bytes,
        tcp: opts.tcp.clone(),
        ..wanblk_iscsi::IscsiOptions::default()
    };
    Ok(Arc::new(wanblk_iscsi::IscsiConnector::new(uri, iscsi)?))
}
