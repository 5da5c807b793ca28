//! Construction of protocol connectors from URIs: the only place the binary
//! names protocol driver crates.

use std::sync::Arc;

use wanblk_blockdev::Connector;

use crate::location::NetOptions;

/// An NBD connector for `uri`.
pub(crate) fn nbd_connector(uri: &str, _opts: &NetOptions) -> anyhow::Result<Arc<dyn Connector>> {
    anyhow::bail!("{uri}: the NBD client is not wired in yet")
}

/// An iSCSI connector for `uri`.
pub(crate) fn iscsi_connector(uri: &str, _opts: &NetOptions) -> anyhow::Result<Arc<dyn Connector>> {
    anyhow::bail!("{uri}: the iSCSI initiator is not wired in yet")
}
