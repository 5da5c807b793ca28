//! NBD URIs: `nbd://host[:port]/export` and `nbd+unix:///export?socket=PATH`
//! (the NBD project's URI format; TLS schemes are recognised and refused).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// The IANA port of NBD.
pub const DEFAULT_PORT: u16 = 10809;

/// Why a string is not a usable NBD URI. The message is the doc comment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    /// The scheme is not an NBD scheme.
    #[error("`{0}` is not an NBD URI (expected nbd://host[:port]/export or nbd+unix:///export?socket=PATH)")]
    Scheme(String),
    /// `nbds://` / `nbds+unix://`: NBD over TLS.
    #[error("`{0}`: TLS is not supported (use nbd:// or nbd+unix://)")]
    Tls(String),
    /// `nbd://` without a host.
    #[error("`{0}`: missing host (nbd://host[:port]/export)")]
    MissingHost(String),
    /// The port is not a number from 1 to 65535.
    #[error("`{uri}`: bad port `{port}`")]
    BadPort {
        /// The URI.
        uri: String,
        /// The port text.
        port: String,
    },
    /// An IPv6 literal without its closing bracket.
    #[error("`{0}`: unterminated IPv6 literal (nbd://[::1]:10809/export)")]
    BadIpv6(String),
    /// `nbd+unix://` without `?socket=PATH`.
    #[error("`{0}`: nbd+unix:// needs ?socket=PATH")]
    MissingSocket(String),
    /// `nbd+unix://` with a host.
    #[error("`{0}`: nbd+unix:// takes no host (nbd+unix:///export?socket=PATH)")]
    UnixWithHost(String),
    /// A query parameter this client does not know, or `socket` on TCP.
    #[error("`{uri}`: unsupported query parameter `{param}`")]
    BadQuery {
        /// The URI.
        uri: String,
        /// The parameter.
        param: String,
    },
    /// A `%` not followed by two hex digits, or an export name that is not UTF-8.
    #[error("`{0}`: bad percent-encoding")]
    BadEncoding(String),
}

/// How to reach the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// TCP to a host name or address.
    Tcp {
        /// Host name or IP address (IPv6 without brackets).
        host: String,
        /// Port.
        port: u16,
    },
    /// A Unix domain socket.
    Unix(PathBuf),
}

/// A parsed NBD URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NbdUri {
    /// Where the server is.
    pub transport: Transport,
    /// Export name ("" for the default export).
    pub export: String,
}

impl NbdUri {
    /// A TCP URI.
    pub fn tcp(host: impl Into<String>, port: u16, export: impl Into<String>) -> Self {
        NbdUri { transport: Transport::Tcp { host: host.into(), port }, export: export.into() }
    }

    /// A Unix socket URI.
    pub fn unix(path: impl Into<PathBuf>, export: impl Into<String>) -> Self {
        NbdUri { transport: Transport::Unix(path.into()), export: export.into() }
    }
}

fn percent_decode(s: &str, uri: &str) -> Result<String, UriError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            let v =
                hex.and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or(UriError::BadEncoding(uri.into()))?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| UriError::BadEncoding(uri.into()))
}

fn percent_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        if c.is_ascii_alphanumeric() || b"-._~".contains(&c) || (keep_slash && c == b'/') {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

impl FromStr for NbdUri {
    type Err = UriError;

    fn from_str(uri: &str) -> Result<Self, UriError> {
        let (scheme, rest) = uri.split_once("://").ok_or_else(|| UriError::Scheme(uri.into()))?;
        let scheme = scheme.to_ascii_lowercase();
        let unix = match scheme.as_str() {
            "nbd" => false,
            "nbd+unix" => true,
            "nbds" | "nbds+unix" => return Err(UriError::Tls(uri.into())),
            _ => return Err(UriError::Scheme(uri.into())),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let export = percent_decode(path, uri)?;
        let mut socket = None;
        for param in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
            let (k, v) = param.split_once('=').unwrap_or((param, ""));
            match k {
                "socket" if unix => socket = Some(PathBuf::from(percent_decode(v, uri)?)),
                _ => return Err(UriError::BadQuery { uri: uri.into(), param: k.into() }),
            }
        }
        if unix {
            if !authority.is_empty() && authority != "localhost" {
                return Err(UriError::UnixWithHost(uri.into()));
            }
            let path = socket.ok_or_else(|| UriError::MissingSocket(uri.into()))?;
            return Ok(NbdUri { transport: Transport::Unix(path), export });
        }
        // Userinfo is not used by NBD; drop it rather than leak it into names.
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| UriError::BadIpv6(uri.into()))?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(|| UriError::BadIpv6(uri.into()))?),
            };
            (h, port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(UriError::MissingHost(uri.into()));
        }
        let port = match port {
            None | Some("") => DEFAULT_PORT,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => n,
                _ => return Err(UriError::BadPort { uri: uri.into(), port: p.into() }),
            },
        };
        Ok(NbdUri { transport: Transport::Tcp { host: host.into(), port }, export })
    }
}

impl fmt::Display for NbdUri {
    /// The canonical URI (no secrets are ever part of it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let export = percent_encode(&self.export, true);
        match &self.transport {
            Transport::Tcp { host, port } if host.contains(':') => {
                write!(f, "nbd://[{host}]:{port}/{export}")
            }
            Transport::Tcp { host, port } => write!(f, "nbd://{host}:{port}/{export}"),
            Transport::Unix(p) => {
                write!(f, "nbd+unix:///{export}?socket={}", percent_encode(&p.to_string_lossy(), true))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<NbdUri, UriError> {
        s.parse()
    }

    #[test]
    fn parses_tcp_uris() {
        assert_eq!(p("nbd://example.com/disk").unwrap(), NbdUri::tcp("example.com", 10809, "disk"));
        assert_eq!(p("nbd://127.0.0.1:1234/").unwrap(), NbdUri::tcp("127.0.0.1", 1234, ""));
        assert_eq!(p("nbd://127.0.0.1:1234").unwrap(), NbdUri::tcp("127.0.0.1", 1234, ""));
        assert_eq!(p("nbd://[::1]:99/a/b").unwrap(), NbdUri::tcp("::1", 99, "a/b"));
        assert_eq!(p("nbd://[::1]/x").unwrap(), NbdUri::tcp("::1", 10809, "x"));
        assert_eq!(p("NBD://h/a%20b").unwrap(), NbdUri::tcp("h", 10809, "a b"));
    }

    #[test]
    fn parses_unix_uris() {
        assert_eq!(p("nbd+unix:///disk?socket=/tmp/s.sock").unwrap(), NbdUri::unix("/tmp/s.sock", "disk"));
        assert_eq!(p("nbd+unix://?socket=/tmp/s").unwrap(), NbdUri::unix("/tmp/s", ""));
    }

    #[test]
    fn refuses_bad_uris_clearly() {
        assert!(matches!(p("nbds://h/x"), Err(UriError::Tls(_))));
        assert!(p("nbds+unix:///x?socket=/s").unwrap_err().to_string().contains("TLS is not supported"));
        assert!(matches!(p("http://h/x"), Err(UriError::Scheme(_))));
        assert!(matches!(p("just-a-path"), Err(UriError::Scheme(_))));
        assert!(matches!(p("nbd:///x"), Err(UriError::MissingHost(_))));
        assert!(matches!(p("nbd://h:0/x"), Err(UriError::BadPort { .. })));
        assert!(matches!(p("nbd://h:70000/x"), Err(UriError::BadPort { .. })));
        assert!(matches!(p("nbd://h:abc/x"), Err(UriError::BadPort { .. })));
        assert!(matches!(p("nbd://[::1/x"), Err(UriError::BadIpv6(_))));
        assert!(matches!(p("nbd+unix:///x"), Err(UriError::MissingSocket(_))));
        assert!(matches!(p("nbd+unix://host/x?socket=/s"), Err(UriError::UnixWithHost(_))));
        assert!(matches!(p("nbd://h/x?socket=/s"), Err(UriError::BadQuery { .. })));
        assert!(matches!(p("nbd://h/%zz"), Err(UriError::BadEncoding(_))));
    }

    #[test]
    fn display_round_trips() {
        for s in ["nbd://h:1/a%20b", "nbd://[::1]:10809/x", "nbd+unix:///e?socket=/tmp/x.sock", "nbd://h:5/"]
        {
            let u = p(s).unwrap();
            assert_eq!(p(&u.to_string()).unwrap(), u, "{s}");
        }
    }
}
