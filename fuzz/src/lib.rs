//! Helpers shared by the fuzz targets: machines put into the state a target
//! starts from. One module per protocol.

pub mod nbd;
