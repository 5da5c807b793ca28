//! TLS for NBD with rustls (ring provider; no OpenSSL): the client's and
//! the server's configuration, each loaded once from PEM files in the
//! directory layouts the NBD tools share, so one directory of certificates
//! serves libnbd, nbdkit, qemu-nbd and wanblk alike:
//!
//! - client (libnbd's `tls-certificates=DIR`): `ca-cert.pem` (the CA the
//!   server's certificate must chain to), optionally `client-cert.pem` and
//!   `client-key.pem` (a client certificate, sent when the server asks);
//! - server (nbdkit's `--tls-certificates DIR`): `server-cert.pem` and
//!   `server-key.pem`, optionally `ca-cert.pem` (client certificates are
//!   then asked for and verified when presented; required with
//!   `verify_peer`).
//!
//! X.509 only: rustls has no TLS pre-shared keys (TLS-PSK, RFC 4279 /
//! RFC 8446 external PSKs), so a `tls-psk-file` is refused with a message
//! saying so.
//!
//! The upgrade itself happens in [`crate::stream`] between two option
//! replies (NBD_OPT_STARTTLS).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Why a TLS configuration cannot be built. The message is the doc comment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// `tls-psk-file` / `--tls-psk-file` was given.
    #[error(
        "TLS-PSK is not supported: rustls, the TLS library wanblk uses, has no pre-shared keys; \
         use X.509 certificates (tls-certificates=DIR with ca-cert.pem)"
    )]
    Psk,
    /// A file could not be read.
    #[error("{path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A file that must exist in the certificates directory does not.
    #[error("{path} is missing ({what})")]
    Missing {
        /// The file.
        path: PathBuf,
        /// What it is for.
        what: &'static str,
    },
    /// rustls refused the certificates or key.
    #[error("{0}")]
    Invalid(String),
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |message: String| TlsError::Read { path: path.to_path_buf(), message };
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no PEM certificate in the file".into()));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    // The error never quotes the file: it holds a secret.
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::Read {
        path: path.to_path_buf(),
        message: format!("no usable PEM private key ({})", pem_error_kind(&e)),
    })
}

fn pem_error_kind(e: &rustls::pki_types::pem::Error) -> &'static str {
    use rustls::pki_types::pem::Error as E;
    match e {
        E::Io(_) => "cannot read it",
        E::NoItemsFound => "no private key section",
        _ => "malformed PEM",
    }
}

fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for c in read_certs(path)? {
        store.add(c).map_err(|e| TlsError::Invalid(format!("{}: {e}", path.display())))?;
    }
    Ok(store)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client's TLS settings (libnbd's URI query parameters and the
/// matching command-line flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsClientOptions {
    /// `tls-certificates=DIR`: `ca-cert.pem`, and optionally
    /// `client-cert.pem` + `client-key.pem`. Without it the system's trust
    /// store verifies the server.
    pub certificates: Option<PathBuf>,
    /// `tls-verify-peer` (default true): verify the server's certificate
    /// chain and name. Off, anyone on the path can read the data.
    pub verify_peer: bool,
    /// `tls-hostname=NAME`: the name the server's certificate must carry
    /// (default: the URI's host; over a Unix socket only the chain is
    /// verified unless it is given).
    pub hostname: Option<String>,
    /// `tls-psk-file=FILE`: refused (no TLS-PSK in rustls).
    pub psk_file: Option<PathBuf>,
    /// `tls-username=NAME`: the PSK identity (only used with PSK).
    pub username: Option<String>,
}

impl Default for TlsClientOptions {
    fn default() -> Self {
        TlsClientOptions {
            certificates: None,
            verify_peer: true,
            hostname: None,
            psk_file: None,
            username: None,
        }
    }
}

/// A loaded client configuration and the name the server must prove.
#[derive(Clone)]
pub struct ClientTls {
    pub(crate) config: Arc<rustls::ClientConfig>,
    pub(crate) server_name: ServerName<'static>,
    /// What the certificate is checked against, for error messages.
    pub(crate) trust: String,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .field("trust", &self.trust)
            .finish()
    }
}

impl ClientTls {
    /// Loads the client configuration for a server reached as `host`
    /// (`None` over a Unix socket).
    ///
    /// # Errors
    /// [`TlsError`] for PSK, unreadable or missing files, or keys rustls refuses.
    pub fn new(opts: &TlsClientOptions, host: Option<&str>) -> Result<ClientTls, TlsError> {
        if opts.psk_file.is_some() {
            return Err(TlsError::Psk);
        }
        let provider = provider();
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Invalid(e.to_string()))?;
        let (store, trust) = match &opts.certificates {
            Some(dir) => {
                let ca = dir.join("ca-cert.pem");
                if opts.verify_peer && !ca.exists() {
                    return Err(TlsError::Missing {
                        path: ca,
                        what: "the CA that signed the server's certificate",
                    });
                }
                let store = if ca.exists() { roots(&ca)? } else { RootCertStore::empty() };
                (store, format!("the CA in {}", ca.display()))
            }
            None => {
                let mut store = RootCertStore::empty();
                let found = rustls_native_certs::load_native_certs();
                for c in found.certs {
                    let _ = store.add(c);
                }
                (store, "the system's trusted CAs (give tls-certificates=DIR for your own CA)".to_string())
            }
        };
        let named = opts.hostname.as_deref().or(host);
        let verifier: Arc<dyn ServerCertVerifier> = if !opts.verify_peer {
            Arc::new(NoVerification(provider.clone()))
        } else {
            let inner =
                rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
                    .build()
                    .map_err(|e| TlsError::Invalid(format!("{trust}: {e}")))?;
            if named.is_some() { inner } else { Arc::new(ChainOnly(inner)) }
        };
        let builder = builder.dangerous().with_custom_certificate_verifier(verifier);
        let config = match &opts.certificates {
            Some(dir) if dir.join("client-cert.pem").exists() || dir.join("client-key.pem").exists() => {
                let cert = dir.join("client-cert.pem");
                let key = dir.join("client-key.pem");
                for (p, what) in [(&cert, "the client certificate"), (&key, "the client certificate's key")] {
                    if !p.exists() {
                        return Err(TlsError::Missing { path: p.clone(), what });
                    }
                }
                builder
                    .with_client_auth_cert(read_certs(&cert)?, read_key(&key)?)
                    .map_err(|e| TlsError::Invalid(format!("{}: {e}", cert.display())))?
            }
            _ => builder.with_no_client_auth(),
        };
        let name = named.unwrap_or("localhost");
        let server_name = ServerName::try_from(
            name.trim_start_matches('[').trim_end_matches(']').to_string(),
        )
        .map_err(|_| TlsError::Invalid(format!("`{name}` is not a valid TLS server name (tls-hostname)")))?;
        Ok(ClientTls { config: Arc::new(config), server_name, trust })
    }
}

/// Verifies the chain but not the name (a Unix socket has no host name to
/// check, as libnbd does without `tls-hostname`).
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain first and the name last, so a name
        // mismatch means the chain was good.
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `tls-verify-peer=false`: any certificate is accepted (the handshake's
/// signatures are still checked, so the data is encrypted to whoever
/// answered; it is not authenticated).
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The server's TLS settings (`--tls-certificates DIR`, `--tls-verify-peer`,
/// `--tls-allow`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsServerOptions {
    /// nbdkit's layout: `server-cert.pem`, `server-key.pem`, optionally
    /// `ca-cert.pem` for client certificates.
    pub certificates: PathBuf,
    /// Require a client certificate signed by `ca-cert.pem`.
    pub verify_peer: bool,
    /// Client certificate subjects allowed to use the export (empty: any
    /// client). Each is `attr=value` pairs separated by commas (`CN=backup1,
    /// O=Example`), compared with the certificate's subject as a set.
    pub allow_subjects: Vec<String>,
}

/// A loaded server configuration.
#[derive(Clone)]
pub struct ServerTls {
    pub(crate) config: Arc<rustls::ServerConfig>,
    allow: Vec<Subject>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").field("allow", &self.allow).finish()
    }
}

impl ServerTls {
    /// Loads the server configuration.
    ///
    /// # Errors
    /// [`TlsError`] for unreadable or missing files, keys rustls refuses,
    /// `verify_peer` or an allow-list without `ca-cert.pem`, or a subject
    /// that does not parse.
    pub fn new(opts: &TlsServerOptions) -> Result<ServerTls, TlsError> {
        let dir = &opts.certificates;
        let cert = dir.join("server-cert.pem");
        let key = dir.join("server-key.pem");
        let ca = dir.join("ca-cert.pem");
        for (p, what) in [(&cert, "the server's certificate"), (&key, "the server certificate's key")] {
            if !p.exists() {
                return Err(TlsError::Missing { path: p.clone(), what });
            }
        }
        let needs_ca = opts.verify_peer || !opts.allow_subjects.is_empty();
        if needs_ca && !ca.exists() {
            return Err(TlsError::Missing { path: ca, what: "the CA that signs client certificates" });
        }
        let allow = opts.allow_subjects.iter().map(|s| Subject::parse(s)).collect::<Result<Vec<_>, _>>()?;
        let provider = provider();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Invalid(e.to_string()))?;
        let builder = if ca.exists() {
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots(&ca)?), provider);
            let v = if needs_ca { v } else { v.allow_unauthenticated() };
            builder.with_client_cert_verifier(
                v.build().map_err(|e| TlsError::Invalid(format!("{}: {e}", ca.display())))?,
            )
        } else {
            builder.with_no_client_auth()
        };
        let config = builder
            .with_single_cert(read_certs(&cert)?, read_key(&key)?)
            .map_err(|e| TlsError::Invalid(format!("{}: {e}", cert.display())))?;
        Ok(ServerTls { config: Arc::new(config), allow })
    }

    /// Whether the allow-list is in force.
    pub fn restricts_clients(&self) -> bool {
        !self.allow.is_empty()
    }

    /// Checks the client's certificate chain (end entity first) against the
    /// allow-list: `Err` is the reason given to the client.
    pub(crate) fn check_client(&self, chain: Option<&[CertificateDer<'_>]>) -> Result<(), String> {
        if self.allow.is_empty() {
            return Ok(());
        }
        let Some(cert) = chain.and_then(|c| c.first()) else {
            return Err("this export needs a client certificate".into());
        };
        let subject =
            Subject::of(cert).ok_or_else(|| "cannot read the client certificate's subject".to_string())?;
        if self.allow.contains(&subject) {
            Ok(())
        } else {
            Err(format!("client certificate subject {subject} is not allowed on this export"))
        }
    }
}

/// An X.509 subject as a set of `attr=value` pairs (attribute names in
/// upper case as OpenSSL prints them: CN, O, OU, C, ST, L...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Subject(Vec<(String, String)>);

impl Subject {
    fn normalise(mut pairs: Vec<(String, String)>) -> Subject {
        pairs.sort();
        Subject(pairs)
    }

    /// `CN=backup1,O=Example` (commas separate; `\,` is a literal comma;
    /// spaces around names and values are ignored; a leading `/` form as
    /// `openssl x509 -subject` prints, `/CN=a/O=b`, is also read).
    fn parse(s: &str) -> Result<Subject, TlsError> {
        let bad =
            || TlsError::Invalid(format!("`{s}` is not a certificate subject (e.g. CN=backup1,O=Example)"));
        let s = s.trim();
        let parts: Vec<String> = if let Some(rest) = s.strip_prefix('/') {
            rest.split('/').map(str::to_string).collect()
        } else {
            let mut parts = vec![String::new()];
            let mut chars = s.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => parts.last_mut().expect("never empty").extend(chars.next()),
                    ',' => parts.push(String::new()),
                    c => parts.last_mut().expect("never empty").push(c),
                }
            }
            parts
        };
        let mut pairs = Vec::new();
        for p in parts {
            let (k, v) = p.split_once('=').ok_or_else(bad)?;
            let k = k.trim().to_ascii_uppercase();
            if k.is_empty() {
                return Err(bad());
            }
            pairs.push((k, v.trim().to_string()));
        }
        if pairs.is_empty() {
            return Err(bad());
        }
        Ok(Subject::normalise(pairs))
    }

    /// The subject of a DER certificate.
    fn of(cert: &CertificateDer<'_>) -> Option<Subject> {
        let (_, x) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
        let reg = x509_parser::objects::oid_registry();
        let mut pairs = Vec::new();
        for rdn in x.subject().iter() {
            for a in rdn.iter() {
                let name = x509_parser::objects::oid2abbrev(a.attr_type(), reg)
                    .map(str::to_string)
                    .unwrap_or_else(|_| a.attr_type().to_id_string());
                let value = a.as_str().ok()?.to_string();
                pairs.push((name.to_ascii_uppercase(), value));
            }
        }
        Some(Subject::normalise(pairs))
    }
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> =
            self.0.iter().map(|(k, v)| format!("{k}={}", v.replace(',', "\\,"))).collect();
        write!(f, "{}", parts.join(","))
    }
}

/// A one-line explanation of a failed TLS handshake.
pub(crate) fn explain(e: &std::io::Error, trust: &str) -> String {
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match inner {
        Some(rustls::Error::InvalidCertificate(c)) => {
            let what = match c {
                CertificateError::UnknownIssuer => format!("is not signed by {trust}"),
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => "has expired".into(),
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    "is not valid yet".into()
                }
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                    "is not valid for this host name (tls-hostname=NAME names the one it carries)".into()
                }
                CertificateError::BadSignature => "has a bad signature".into(),
                CertificateError::Revoked => "is revoked".into(),
                other => format!("was refused ({other:?})"),
            };
            format!("TLS handshake failed: the server's certificate {what}")
        }
        Some(rustls::Error::AlertReceived(a)) => format!(
            "TLS handshake failed: the peer refused it ({a:?}; a client certificate it does not accept, or none?)"
        ),
        Some(other) => format!("TLS handshake failed: {other}"),
        None => format!("TLS handshake failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_compare_as_sets() {
        let a = Subject::parse("CN=backup1, O=Example").unwrap();
        assert_eq!(a, Subject::parse("o=Example,CN=backup1").unwrap());
        assert_eq!(a, Subject::parse("/O=Example/CN=backup1").unwrap());
        assert_ne!(a, Subject::parse("CN=backup1").unwrap());
        assert_eq!(Subject::parse("CN=a\\,b").unwrap().0, vec![("CN".to_string(), "a,b".to_string())]);
        assert_eq!(Subject::parse("CN=a\\,b").unwrap().to_string(), "CN=a\\,b");
        assert!(Subject::parse("nonsense").is_err());
        assert!(Subject::parse("").is_err());
        assert!(Subject::parse("=x").is_err());
    }

    #[test]
    fn psk_is_refused_plainly() {
        let opts = TlsClientOptions { psk_file: Some("/x".into()), ..Default::default() };
        let e = ClientTls::new(&opts, Some("h")).unwrap_err();
        assert_eq!(e, TlsError::Psk);
        assert!(e.to_string().contains("TLS-PSK is not supported"));
    }

    #[test]
    fn missing_files_are_named() {
        let dir = std::env::temp_dir().join(format!("wanblk-tls-missing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let opts = TlsClientOptions { certificates: Some(dir.clone()), ..Default::default() };
        let e = ClientTls::new(&opts, Some("h")).unwrap_err().to_string();
        assert!(e.contains("ca-cert.pem is missing"), "{e}");
        let e = ServerTls::new(&TlsServerOptions { certificates: dir.clone(), ..Default::default() })
            .unwrap_err()
            .to_string();
        assert!(e.contains("server-cert.pem is missing"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
