//! Arbitrary target bytes into the login state machine (security stage with
//! AuthMethod None or CHAP, operational negotiation, continuation text).
//! The first byte picks the authentication and whether the connection is
//! added to an existing session (MC/S).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use wanblk_iscsi_proto::keys::{Params, long_fat_network_offer};
use wanblk_iscsi_proto::login::{Auth, Login, LoginConfig, LoginStep};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let added = flags & 2 != 0;
    let cfg = LoginConfig {
        initiator_name: "iqn.2024-01.invalid.fuzz:i".into(),
        target_name: if flags & 4 != 0 { None } else { Some("iqn.2024-01.invalid.fuzz:t".into()) },
        isid: [0x80, 0, 0, 0, 0, 1],
        tsih: if added { 7 } else { 0 },
        cid: u16::from(added),
        itt: 0x10,
        cmd_sn: 1,
        exp_stat_sn: 0,
        auth: if flags & 1 != 0 {
            Auth::Chap { user: "u".into(), secret: b"0123456789abcdef".to_vec() }
        } else {
            Auth::None
        },
        offer: long_fat_network_offer(8),
        session: added.then(Params::default),
    };
    let Ok((mut login, _first)) = Login::new(cfg) else { return };
    // Feed in pieces whose sizes come from the data itself.
    let mut buf = BytesMut::new();
    let mut rest = rest;
    while !rest.is_empty() {
        let n = (usize::from(rest[0]) + 1).min(rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        loop {
            match login.handle_input(&mut buf) {
                Ok(Some(LoginStep::Send(_))) => continue,
                Ok(Some(LoginStep::Done(_))) | Err(_) => return,
                Ok(None) => break,
            }
        }
    }
});
