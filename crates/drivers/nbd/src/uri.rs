//! NBD URIs: `nbd://host[:port]/export`, `nbd+unix:///export?socket=PATH`
//! and their TLS forms `nbds://` and `nbds+unix://` (the NBD project's URI
//! format), with libnbd's TLS query parameters: `tls-certificates=DIR`,
//! `tls-verify-peer=BOOL`, `tls-hostname=NAME`, `tls-psk-file=FILE`,
//! `tls-username=NAME`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::tls::TlsClientOptions;

/// The IANA port of NBD.
pub const DEFAULT_PORT: u16 = 10809;

/// Why a string is not a usable NBD URI. The message is the doc comment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    /// The scheme is not an NBD scheme.
    #[error("`{0}` is not an NBD URI (expected nbd://host[:port]/export or nbd+unix:///export?socket=PATH)")]
    Scheme(String),
    /// A `tls-*` parameter on a URI without TLS.
    #[error("`{uri}`: `{param}` needs TLS (nbds:// or nbds+unix://)")]
    TlsParamWithoutTls {
        /// The URI.
        uri: String,
        /// The parameter.
        param: String,
    },
    /// A boolean parameter that is not one.
    #[error("`{uri}`: `{param}` must be true or false")]
    BadBool {
        /// The URI.
        uri: String,
        /// The parameter.
        param: String,
    },
    /// `nbd+vsock://`: NBD over AF_VSOCK (virtual machine sockets).
    #[error("`{0}`: NBD over vsock is not supported (use nbd://, nbd+unix://, nbds:// or nbds+unix://)")]
    Vsock(String),
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

/// TLS settings given in the URI (`nbds://...?tls-...`); each overrides
/// the command line's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UriTls {
    /// `tls-certificates=DIR`.
    pub certificates: Option<PathBuf>,
    /// `tls-verify-peer=BOOL`.
    pub verify_peer: Option<bool>,
    /// `tls-hostname=NAME`.
    pub hostname: Option<String>,
    /// `tls-psk-file=FILE`.
    pub psk_file: Option<PathBuf>,
    /// `tls-username=NAME`.
    pub username: Option<String>,
}

impl UriTls {
    /// These settings over `base` (the command line's).
    pub fn over(&self, base: &TlsClientOptions) -> TlsClientOptions {
        TlsClientOptions {
            certificates: self.certificates.clone().or_else(|| base.certificates.clone()),
            verify_peer: self.verify_peer.unwrap_or(base.verify_peer),
            hostname: self.hostname.clone().or_else(|| base.hostname.clone()),
            psk_file: self.psk_file.clone().or_else(|| base.psk_file.clone()),
            username: self.username.clone().or_else(|| base.username.clone()),
        }
    }
}

/// A parsed NBD URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NbdUri {
    /// Where the server is.
    pub transport: Transport,
    /// Export name ("" for the default export).
    pub export: String,
    /// `nbds://` / `nbds+unix://`: TLS is required, with these settings.
    pub tls: Option<UriTls>,
}

impl NbdUri {
    /// A TCP URI.
    pub fn tcp(host: impl Into<String>, port: u16, export: impl Into<String>) -> Self {
        NbdUri { transport: Transport::Tcp { host: host.into(), port }, export: export.into(), tls: None }
    }

    /// A Unix socket URI.
    pub fn unix(path: impl Into<PathBuf>, export: impl Into<String>) -> Self {
        NbdUri { transport: Transport::Unix(path.into()), export: export.into(), tls: None }
    }

    /// The same URI with TLS required (`nbds://`, `nbds+unix://`).
    pub fn with_tls(mut self, tls: UriTls) -> Self {
        self.tls = Some(tls);
        self
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Some(true),
        "false" | "off" | "no" | "0" => Some(false),
        _ => None,
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
        let (unix, tls) = match scheme.as_str() {
            "nbd" => (false, false),
            "nbd+unix" => (true, false),
            "nbds" => (false, true),
            "nbds+unix" => (true, true),
            "nbd+vsock" | "nbds+vsock" => return Err(UriError::Vsock(uri.into())),
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
        let mut t = UriTls::default();
        for param in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
            let (k, v) = param.split_once('=').unwrap_or((param, ""));
            if k.starts_with("tls-") && !tls {
                return Err(UriError::TlsParamWithoutTls { uri: uri.into(), param: k.into() });
            }
            let v = percent_decode(v, uri)?;
            match k {
                "socket" if unix => socket = Some(PathBuf::from(v)),
                "tls-certificates" => t.certificates = Some(PathBuf::from(v)),
                "tls-verify-peer" => {
                    t.verify_peer = Some(
                        parse_bool(&v)
                            .ok_or_else(|| UriError::BadBool { uri: uri.into(), param: k.into() })?,
                    )
                }
                "tls-hostname" => t.hostname = Some(v),
                "tls-psk-file" => t.psk_file = Some(PathBuf::from(v)),
                "tls-username" => t.username = Some(v),
                _ => return Err(UriError::BadQuery { uri: uri.into(), param: k.into() }),
            }
        }
        let tls = tls.then_some(t);
        if unix {
            if !authority.is_empty() && authority != "localhost" {
                return Err(UriError::UnixWithHost(uri.into()));
            }
            // `?socket=` with nothing after it names no socket either.
            let path = socket
                .filter(|p| !p.as_os_str().is_empty())
                .ok_or_else(|| UriError::MissingSocket(uri.into()))?;
            return Ok(NbdUri { transport: Transport::Unix(path), export, tls });
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
        Ok(NbdUri { transport: Transport::Tcp { host: host.into(), port }, export, tls })
    }
}

impl fmt::Display for NbdUri {
    /// The canonical URI (no secrets are ever part of it: the TLS
    /// parameters are file and directory names, never their contents).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let export = percent_encode(&self.export, true);
        let s = if self.tls.is_some() { "s" } else { "" };
        let mut query: Vec<String> = Vec::new();
        match &self.transport {
            Transport::Tcp { host, port } if host.contains(':') => {
                write!(f, "nbd{s}://[{host}]:{port}/{export}")?
            }
            Transport::Tcp { host, port } => write!(f, "nbd{s}://{host}:{port}/{export}")?,
            Transport::Unix(p) => {
                write!(f, "nbd{s}+unix:///{export}")?;
                query.push(format!("socket={}", percent_encode(&p.to_string_lossy(), true)));
            }
        }
        if let Some(t) = &self.tls {
            let path = |p: &PathBuf| percent_encode(&p.to_string_lossy(), true);
            query.extend(t.certificates.as_ref().map(|p| format!("tls-certificates={}", path(p))));
            query.extend(t.verify_peer.map(|v| format!("tls-verify-peer={v}")));
            query.extend(t.hostname.as_ref().map(|h| format!("tls-hostname={}", percent_encode(h, false))));
            query.extend(t.psk_file.as_ref().map(|p| format!("tls-psk-file={}", path(p))));
            query.extend(t.username.as_ref().map(|u| format!("tls-username={}", percent_encode(u, false))));
        }
        if !query.is_empty() {
            write!(f, "?{}", query.join("&"))?;
        }
        Ok(())
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
    fn parses_tls_uris() {
        let u = p("nbds://h:5/e?tls-certificates=/etc/pki/x&tls-verify-peer=false&tls-hostname=srv").unwrap();
        let t = u.tls.clone().unwrap();
        assert_eq!(t.certificates.as_deref(), Some(std::path::Path::new("/etc/pki/x")));
        assert_eq!(t.verify_peer, Some(false));
        assert_eq!(t.hostname.as_deref(), Some("srv"));
        let u = p("nbds+unix:///e?socket=/s&tls-psk-file=/k.psk&tls-username=bob").unwrap();
        assert_eq!(u.transport, Transport::Unix("/s".into()));
        assert_eq!(u.tls.as_ref().unwrap().username.as_deref(), Some("bob"));
        assert_eq!(p("nbds://h/e").unwrap().tls, Some(UriTls::default()));
        assert!(matches!(p("nbd://h/e?tls-certificates=/x"), Err(UriError::TlsParamWithoutTls { .. })));
        assert!(matches!(p("nbds://h/e?tls-verify-peer=maybe"), Err(UriError::BadBool { .. })));
        // URI settings override the command line's.
        let base = TlsClientOptions { hostname: Some("cli".into()), verify_peer: true, ..Default::default() };
        let o = UriTls { verify_peer: Some(false), ..Default::default() }.over(&base);
        assert!(!o.verify_peer);
        assert_eq!(o.hostname.as_deref(), Some("cli"));
    }

    #[test]
    fn refuses_bad_uris_clearly() {
        assert!(matches!(p("http://h/x"), Err(UriError::Scheme(_))));
        let e = p("nbd+vsock://2:10809/x").unwrap_err().to_string();
        assert!(e.contains("vsock is not supported"), "{e}");
        assert!(matches!(p("just-a-path"), Err(UriError::Scheme(_))));
        assert!(matches!(p("nbd:///x"), Err(UriError::MissingHost(_))));
        assert!(matches!(p("nbd://h:0/x"), Err(UriError::BadPort { .. })));
        assert!(matches!(p("nbd://h:70000/x"), Err(UriError::BadPort { .. })));
        assert!(matches!(p("nbd://h:abc/x"), Err(UriError::BadPort { .. })));
        assert!(matches!(p("nbd://[::1/x"), Err(UriError::BadIpv6(_))));
        assert!(matches!(p("nbd+unix:///x"), Err(UriError::MissingSocket(_))));
        assert!(matches!(p("nbd+unix://host/x?socket=/s"), Err(UriError::UnixWithHost(_))));
        assert!(matches!(p("nbd+unix:///x?socket="), Err(UriError::MissingSocket(_))));
        assert!(matches!(p("nbd+unix:///x?socket"), Err(UriError::MissingSocket(_))));
        assert!(matches!(p("nbd://h/x?socket=/s"), Err(UriError::BadQuery { .. })));
        assert!(matches!(p("nbd://h/%zz"), Err(UriError::BadEncoding(_))));
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "nbd://h:1/a%20b",
            "nbd://[::1]:10809/x",
            "nbd+unix:///e?socket=/tmp/x.sock",
            "nbd://h:5/",
            "nbds://h:5/e?tls-certificates=/a%20b&tls-verify-peer=false&tls-hostname=n",
            "nbds+unix:///e?socket=/s&tls-psk-file=/k&tls-username=u",
        ] {
            let u = p(s).unwrap();
            assert_eq!(p(&u.to_string()).unwrap(), u, "{s}");
        }
    }
}
