//! Property tests of the iSCSI URI parser and its redaction: any input
//! parses or is refused without panicking, passwords come back whatever
//! they hold (raw or percent-encoded), and a redacted URI names the same
//! host, port, target and LUN with no password left in it.

use proptest::prelude::*;
use wanblk_iscsi::{IscsiUri, redact};

/// Percent-encodes every byte but the unreserved ones.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn host() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z][a-z0-9.-]{0,20}", "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}"]
}

proptest! {
    #[test]
    fn any_input_parses_or_is_refused(
        s in prop_oneof!["(?s)(iscsi://)?.{0,80}", "iscsi://[a-z0-9%@:/.\\[\\]-]{0,60}", "iscsi://[a-z%@]{1,9}@[a-z]{1,4}/[a-z:.]{1,6}/[0-9]"],
    ) {
        let r = redact(&s);
        if let Ok(u) = IscsiUri::parse(&s) {
            let back = IscsiUri::parse(&r).expect("a redacted URI still parses");
            prop_assert_eq!(back.password, None);
            prop_assert_eq!((&back.host, back.port, &back.target, back.lun), (&u.host, u.port, &u.target, u.lun));
        }
    }

    #[test]
    fn passwords_come_back_and_never_show(
        user in "[a-z][a-z0-9_-]{0,8}",
        password in "\\PC{1,24}",
        host in host(),
        port in 1u16..,
        target in "iqn\\.[0-9]{4}-[0-9]{2}\\.[a-z]{1,8}:[a-z0-9.-]{1,12}",
        lun in 0u16..16384,
    ) {
        let encoded = format!("iscsi://{user}%{}@{host}:{port}/{target}/{lun}", encode(&password));
        let u = IscsiUri::parse(&encoded).expect("an encoded password parses");
        prop_assert_eq!(u.password.as_deref(), Some(password.as_str()));
        prop_assert_eq!((u.host.as_str(), u.port, u.target.as_str(), u.lun), (host.as_str(), port, target.as_str(), lun));
        prop_assert_eq!(redact(&encoded), format!("iscsi://{user}@{host}:{port}/{target}/{lun}"));
        // Raw (as libiscsi takes it): anything but a % goes through as it is.
        if !password.contains('%') {
            let raw = format!("iscsi://{user}%{password}@{host}:{port}/{target}/{lun}");
            let u = IscsiUri::parse(&raw).expect("a raw password parses");
            prop_assert_eq!(u.password.as_deref(), Some(password.as_str()));
            prop_assert_eq!(u.host.as_str(), host.as_str());
            prop_assert_eq!(redact(&raw), format!("iscsi://{user}@{host}:{port}/{target}/{lun}"));
            prop_assert_eq!(u.to_string(), format!("iscsi://{}@{}:{}/{}/{}", user, host, port, target, lun));
        }
    }
}
