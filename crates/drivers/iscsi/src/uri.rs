//! `iscsi://[user[%password]@]host[:port]/target-iqn/lun` (libiscsi's form).

use std::fmt;

/// Default iSCSI port (RFC 7143 section 13.2... well-known port 3260).
pub const DEFAULT_PORT: u16 = 3260;

/// Environment variable holding the CHAP secret when the URI names a user
/// without a password (keeps the secret out of the process list).
pub const PASSWORD_ENV: &str = "WANBLK_ISCSI_PASSWORD";

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
}

impl IscsiUri {
    /// Parses a URI. A user without `%password` takes the secret from the
    /// `WANBLK_ISCSI_PASSWORD` environment variable, if set.
    ///
    /// # Errors
    /// [`UriError`] naming what is missing or malformed.
    pub fn parse(s: &str) -> Result<IscsiUri, UriError> {
        let rest = s.strip_prefix("iscsi://").ok_or(UriError::Scheme)?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                let (name, pw) = match u.split_once('%') {
                    Some((n, p)) => (n, Some(p.to_string())),
                    None => (u, None),
                };
                if name.is_empty() {
                    return Err(UriError::User);
                }
                let pw = pw.or_else(|| std::env::var(PASSWORD_ENV).ok());
                (Some(name.to_string()), pw)
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
