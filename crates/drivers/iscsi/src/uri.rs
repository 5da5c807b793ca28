//! `iscsi://[user[%password]@]host[:port]/target-iqn/lun` (libiscsi's form).
//!
//! The user information ends at the *last* `@` of the URI (no IQN, host or
//! LUN has one), so a `/`, `@`, `?` or `#` in a password never moves the
//! host; the first `%` separates the user from the password. Both are
//! percent-decoded (`%2F` is `/`, `%40` is `@`, `%25` is `%`); a `%` not
//! followed by two hex digits is kept as it is (libiscsi does not decode,
//! so its URIs keep working). [`redact`] uses the same split, so what it
//! hides is exactly what the parser takes as the password.

use std::fmt;

/// Default iSCSI port (RFC 7143 section 13.2... well-known port 3260).
pub const DEFAULT_PORT: u16 = 3260;

/// Environment variable holding the CHAP secret when the URI names a user
/// without a password (keeps the secret out of the process list).
pub const PASSWORD_ENV: &str = "WANBLK_ISCSI_PASSWORD";

/// Environment variable holding the target's CHAP secret (mutual CHAP).
pub const TARGET_PASSWORD_ENV: &str = "WANBLK_ISCSI_TARGET_PASSWORD";

/// A parsed iSCSI URI.
#[derive(Clone, PartialEq, Eq)]
pub struct IscsiUri {
    /// CHAP user name, if any.
    pub user: Option<String>,
    /// CHAP secret, if any (never shown by `Display` or `Debug`).
    pub password: Option<String>,
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Target IQN.
    pub target: String,
    /// Logical unit number.
    pub lun: u16,
}

/// Why a URI does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    /// Not `iscsi://`.
    #[error("not an iSCSI URI (expected iscsi://[user[%password]@]host[:port]/target-iqn/lun)")]
    Scheme,
    /// No host.
    #[error("missing host in iSCSI URI")]
    Host,
    /// The port is not a number in 1..=65535.
    #[error("bad port {0:?} in iSCSI URI")]
    Port(String),
    /// No target name.
    #[error("missing target IQN in iSCSI URI (iscsi://host/iqn.YYYY-MM.domain:name/lun)")]
    Target,
    /// No or bad LUN.
    #[error("missing or bad LUN {0:?} in iSCSI URI (a number 0..16383 after the target IQN)")]
    Lun(String),
    /// A user with an empty name.
    #[error("empty user name in iSCSI URI")]
    User,
    /// `user:password@`: the password would be taken as part of the user
    /// name and sent in clear text.
    #[error("iSCSI URIs take user%password@ (libiscsi's form), not user:password@")]
    Colon,
    /// A user name or password that is not UTF-8 once decoded.
    #[error("bad percent-encoding in the iSCSI URI's user or password")]
    Encoding,
}

/// Splits `iscsi://USERINFO@REST` at the last `@`: the one rule the parser
/// and [`redact`] share. `rest` is everything after `iscsi://` when there
/// is no `@`.
fn split_userinfo(after_scheme: &str) -> (Option<&str>, &str) {
    match after_scheme.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, after_scheme),
    }
}

/// The user part of the user information: up to the first `%` (or `:`).
fn user_part(userinfo: &str) -> &str {
    userinfo.split(['%', ':']).next().unwrap_or("")
}

/// `s` with any password removed, for messages and logs: the user
/// information is cut at the same `@` the parser uses and only the user
/// name (before the first `%` or `:`) is kept. Anything that is not an
/// `iscsi://` URI is returned as it is.
pub fn redact(s: &str) -> String {
    let Some(after) = s.get(..8).filter(|p| p.eq_ignore_ascii_case("iscsi://")).map(|_| &s[8..]) else {
        return s.to_string();
    };
    match split_userinfo(after) {
        (Some(u), rest) => format!("iscsi://{}@{rest}", user_part(u)),
        (None, _) => s.to_string(),
    }
}

/// Decodes `%XX`; a `%` without two hex digits stays a `%`.
fn percent_decode(s: &str) -> Result<String, UriError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (b[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| UriError::Encoding)
}

impl IscsiUri {
    /// Parses a URI (the password, if any, from the URI only; see
    /// [`crate::IscsiConnector`] for the secret file and environment).
    ///
    /// # Errors
    /// [`UriError`] naming what is missing or malformed, never quoting the
    /// user information.
    pub fn parse(s: &str) -> Result<IscsiUri, UriError> {
        let after = s.get(..8).filter(|p| p.eq_ignore_ascii_case("iscsi://")).ok_or(UriError::Scheme)?;
        let (userinfo, rest) = split_userinfo(&s[after.len()..]);
        let (hostport, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (user, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                let (name, pw) = match u.split_once('%') {
                    Some((n, p)) => (n, Some(percent_decode(p)?)),
                    None if u.contains(':') => return Err(UriError::Colon),
                    None => (u, None),
                };
                if name.is_empty() {
                    return Err(UriError::User);
                }
                (Some(percent_decode(name)?), pw)
            }
        };
        let (host, port) = if let Some(r) = hostport.strip_prefix('[') {
            let (h, after) = r.split_once(']').ok_or(UriError::Host)?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(UriError::Port(after.to_string())),
            };
            (h, port)
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(UriError::Host);
        }
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => n,
                _ => return Err(UriError::Port(p.to_string())),
            },
        };
        let path = path.trim_end_matches('/');
        let (target, lun) = path.rsplit_once('/').ok_or(if path.is_empty() {
            UriError::Target
        } else {
            UriError::Lun(String::new())
        })?;
        if target.is_empty() {
            return Err(UriError::Target);
        }
        let lun = match lun.parse::<u16>() {
            Ok(n) if n < 16384 => n,
            _ => return Err(UriError::Lun(lun.to_string())),
        };
        Ok(IscsiUri { user, password, host: host.to_string(), port, target: target.to_string(), lun })
    }

    /// Parses a portal for discovery, `iscsi://[user[%password]@]host[:port][/]`
    /// (a target and LUN after it are ignored): the target is empty and the
    /// LUN 0.
    ///
    /// # Errors
    /// [`UriError`] naming what is missing or malformed.
    pub fn parse_portal(s: &str) -> Result<IscsiUri, UriError> {
        let after = s.get(..8).filter(|p| p.eq_ignore_ascii_case("iscsi://")).ok_or(UriError::Scheme)?;
        // The same split as `parse`: a `/` in a password stays in it.
        let (userinfo, rest) = split_userinfo(&s[after.len()..]);
        let hostport = rest.split_once('/').map_or(rest, |(a, _)| a);
        let mut u = IscsiUri::parse(&match userinfo {
            Some(ui) => format!("iscsi://{ui}@{hostport}/portal/0"),
            None => format!("iscsi://{hostport}/portal/0"),
        })?;
        u.target.clear();
        Ok(u)
    }

    /// `host:port` for connecting (IPv6 in brackets).
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for IscsiUri {
    /// The URI without the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "iscsi://")?;
        if let Some(u) = &self.user {
            write!(f, "{u}@")?;
        }
        write!(f, "{}/{}/{}", self.address(), self.target, self.lun)
    }
}

impl fmt::Debug for IscsiUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IscsiUri({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_with_slash_at_and_percent() {
        // Raw: the last @ ends the user information.
        let u = IscsiUri::parse("iscsi://alice%pa/ss@w?rd#x@10.0.0.1/iqn.2024-01.test:disk/1").unwrap();
        assert_eq!(u.password.as_deref(), Some("pa/ss@w?rd#x"));
        assert_eq!(u.host, "10.0.0.1");
        assert_eq!(u.target, "iqn.2024-01.test:disk");
        // Encoded.
        // The first % ends the user name.
        let u = IscsiUri::parse("iscsi://bob%pa%2Fss%40w%25rd@h/iqn.x:y/0").unwrap();
        assert_eq!(u.user.as_deref(), Some("bob"));
        assert_eq!(u.password.as_deref(), Some("pa/ss@w%rd"));
        assert_eq!(IscsiUri::parse("iscsi://a:b@h/iqn.x:y/0"), Err(UriError::Colon));
    }

    #[test]
    fn redaction_agrees_with_the_parser() {
        let cases = [
            "iscsi://alice%s3cr/t@x@10.0.0.1/iqn.x:y/1",
            "iscsi://alice%s3cr%t@h/iqn.x:y/1",
            "iscsi://alice%@@@h/iqn.x:y/1",
            "ISCSI://alice%pw@h/iqn.x:y/1",
            "iscsi://alice:pw@h/iqn.x:y/1",
            "iscsi://%pw@h/iqn.x/1",
            "iscsi://h/iqn.x:y/1",
        ];
        for c in cases {
            let r = redact(c);
            for secret in ["s3cr", "pw", "@@"] {
                assert!(
                    !r.contains(&format!("%{secret}")) && !r.contains(&format!(":{secret}")),
                    "{c} -> {r}"
                );
            }
            if let Ok(u) = IscsiUri::parse(c) {
                if let Some(p) = u.password.as_deref().filter(|p| !p.is_empty()) {
                    assert!(!r.contains(p), "{c} -> {r} shows the password");
                }
                // What stays is the host the parser connects to.
                assert!(r.ends_with(&format!("{}/{}/{}", u.host, u.target, u.lun)), "{c} -> {r}");
            }
        }
        assert_eq!(redact("nbd://h/x"), "nbd://h/x");
    }

    #[test]
    fn portals() {
        let u = IscsiUri::parse_portal("iscsi://bob%pw@[::1]:3261").unwrap();
        assert_eq!(
            (u.address().as_str(), u.target.as_str(), u.user.as_deref()),
            ("[::1]:3261", "", Some("bob"))
        );
        assert_eq!(IscsiUri::parse_portal("iscsi://h/iqn.x:t/3").unwrap().address(), "h:3260");
        assert!(IscsiUri::parse_portal("iscsi://").is_err());
        assert!(IscsiUri::parse_portal("nbd://h").is_err());
        let u = IscsiUri::parse_portal("iscsi://bob%p/w@h:3261/iqn.x:t/3").unwrap();
        assert_eq!((u.password.as_deref(), u.address().as_str()), (Some("p/w"), "h:3261"));
    }

    #[test]
    fn full() {
        let u = IscsiUri::parse("iscsi://alice%s3cr%t@10.0.0.1:3261/iqn.2024-01.test:disk/2").unwrap();
        assert_eq!(u.user.as_deref(), Some("alice"));
        assert_eq!(u.password.as_deref(), Some("s3cr%t"));
        assert_eq!(u.address(), "10.0.0.1:3261");
        assert_eq!(u.target, "iqn.2024-01.test:disk");
        assert_eq!(u.lun, 2);
        let shown = u.to_string();
        assert!(!shown.contains("s3cr"), "{shown}");
        assert!(!format!("{u:?}").contains("s3cr"));
    }

    #[test]
    fn defaults_and_ipv6() {
        let u = IscsiUri::parse("iscsi://[::1]/iqn.x:y/0").unwrap();
        assert_eq!(u.port, DEFAULT_PORT);
        assert_eq!(u.address(), "[::1]:3260");
        assert_eq!(u.to_string(), "iscsi://[::1]:3260/iqn.x:y/0");
    }

    #[test]
    fn errors() {
        assert_eq!(IscsiUri::parse("nbd://h/x/1"), Err(UriError::Scheme));
        assert_eq!(IscsiUri::parse("iscsi:///iqn.x/1"), Err(UriError::Host));
        assert_eq!(IscsiUri::parse("iscsi://h:0/iqn.x/1"), Err(UriError::Port("0".into())));
        assert_eq!(IscsiUri::parse("iscsi://h:x/iqn.x/1"), Err(UriError::Port("x".into())));
        assert_eq!(IscsiUri::parse("iscsi://h"), Err(UriError::Target));
        assert_eq!(IscsiUri::parse("iscsi://h/iqn.x"), Err(UriError::Lun(String::new())));
        assert_eq!(IscsiUri::parse("iscsi://h/iqn.x/lun"), Err(UriError::Lun("lun".into())));
        assert_eq!(IscsiUri::parse("iscsi://h//1"), Err(UriError::Target));
        assert_eq!(IscsiUri::parse("iscsi://%pw@h/iqn.x/1"), Err(UriError::User));
    }
}
