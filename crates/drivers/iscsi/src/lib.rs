//! iSCSI initiator endpoint over tokio.
