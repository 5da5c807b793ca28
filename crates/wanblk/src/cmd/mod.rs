//! One module per subcommand.

pub(crate) mod copy;
pub(crate) mod docs;
pub(crate) mod frontend;
pub(crate) mod help;
pub(crate) mod info;
pub(crate) mod mount;
pub(crate) mod netem;
pub(crate) mod serve;
pub(crate) mod session;
pub(crate) mod target;
