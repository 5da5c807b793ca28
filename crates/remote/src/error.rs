//! Errors of opening and tuning network stores.

use wanblk_blockdev::EndpointError;

/// Why a network store could not be opened or tuned.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The location is not a network store.
    #[error("{0:?} is not a network store (nbd://, nbd+unix:// or iscsi://)")]
    NotRemote(String),
    /// The URI is malformed or asks for something unsupported.
    #[error("{uri}: {message}")]
    Uri {
        /// The URI as given.
        uri: String,
        /// What is wrong with it.
        message: String,
    },
    /// The store refused or failed (connection, handshake, bad option);
    /// the message names the store.
    #[error(transparent)]
    Store(#[from] EndpointError),
    /// The tuner's configuration is invalid.
    #[error("tuner configuration rejected: {0}")]
    Tuning(#[from] wanblk_tune::ConfigError),
}
