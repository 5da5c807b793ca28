//! X.509 certificates made at test time (rcgen), never committed: a CA,
//! a server certificate for 127.0.0.1, ::1 and localhost, and client
//! certificates, written in the directory layout nbdkit, qemu, libnbd and
//! wanblk all read (`ca-cert.pem`, `server-cert.pem`, `server-key.pem`,
//! `client-cert.pem`, `client-key.pem`).
//!
//! qemu checks more than most: the CA carries basic constraints CA:TRUE
//! and keyCertSign, leaf certificates digitalSignature + keyEncipherment
//! and the matching extended key usage, so the same files work with every
//! peer.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, SanType,
};

/// A certificate authority that signs test certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ca")
    }
}

/// What a leaf certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Server,
    Client,
}

fn dn(cn: &str) -> DistinguishedName {
    let mut d = DistinguishedName::new();
    d.push(DnType::OrganizationName, "wanblk tests");
    d.push(DnType::CommonName, cn);
    d
}

impl Ca {
    /// A new CA named `cn`.
    ///
    /// # Panics
    /// rcgen fails (it does not for these parameters).
    pub fn new(cn: &str) -> Ca {
        let mut p = CertificateParams::default();
        p.distinguished_name = dn(cn);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        let cert = p.self_signed(&key).expect("CA certificate");
        Ca { pem: cert.pem(), issuer: Issuer::new(p, key) }
    }

    /// The CA certificate (PEM).
    pub fn pem(&self) -> &str {
        &self.pem
    }

    fn leaf(&self, role: Role, cn: &str, expired: bool) -> (String, String) {
        let names = match role {
            Role::Server => vec!["localhost".to_string()],
            Role::Client => vec![],
        };
        let mut p = CertificateParams::new(names).expect("params");
        p.distinguished_name = dn(cn);
        if role == Role::Server {
            for ip in ["127.0.0.1", "::1"] {
                p.subject_alt_names.push(SanType::IpAddress(ip.parse().expect("ip")));
            }
        }
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        p.extended_key_usages = vec![match role {
            Role::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Role::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        if expired {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        } else {
            p.not_before = rcgen::date_time_ymd(2024, 1, 1);
            p.not_after = rcgen::date_time_ymd(2099, 1, 1);
        }
        let key = KeyPair::generate().expect("leaf key");
        let cert = p.signed_by(&key, &self.issuer).expect("leaf certificate");
        (cert.pem(), key.serialize_pem())
    }

    /// Writes `ca-cert.pem`, `server-cert.pem` and `server-key.pem` (a
    /// certificate for localhost, 127.0.0.1 and ::1) into `dir`; `expired`
    /// makes one that ran out in 2021.
    ///
    /// # Panics
    /// The files cannot be written.
    pub fn write_server(&self, dir: &Path, expired: bool) -> PathBuf {
        let (cert, key) = self.leaf(Role::Server, "localhost", expired);
        write(dir, "ca-cert.pem", &self.pem);
        write(dir, "server-cert.pem", &cert);
        write_key(dir, "server-key.pem", &key);
        dir.to_path_buf()
    }

    /// Writes `ca-cert.pem`, `client-cert.pem` and `client-key.pem` (a client
    /// certificate with subject `O=wanblk tests, CN=<cn>`) into `dir`.
    ///
    /// # Panics
    /// The files cannot be written.
    pub fn write_client(&self, dir: &Path, cn: &str) -> PathBuf {
        let (cert, key) = self.leaf(Role::Client, cn, false);
        write(dir, "ca-cert.pem", &self.pem);
        write(dir, "client-cert.pem", &cert);
        write_key(dir, "client-key.pem", &key);
        dir.to_path_buf()
    }

    /// Writes only `ca-cert.pem` into `dir` (a client that verifies the
    /// server but has no certificate of its own).
    ///
    /// # Panics
    /// The file cannot be written.
    pub fn write_ca(&self, dir: &Path) -> PathBuf {
        write(dir, "ca-cert.pem", &self.pem);
        dir.to_path_buf()
    }
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::create_dir_all(dir).expect("create certificate directory");
    std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("write {name}: {e}"));
}

fn write_key(dir: &Path, name: &str, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    write(dir, name, text);
    std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o600)).expect("chmod key");
}

/// Lines of a PEM private key that are key material (the base64 body), to
/// look for in outputs that must never show a secret.
pub fn key_material(pem: &str) -> Vec<String> {
    pem.lines().filter(|l| !l.starts_with("-----") && l.len() >= 16).map(str::to_string).collect()
}

/// A server directory and a client directory signed by one fresh CA, in
/// `base`: `base/server` (nbdkit's layout) and `base/client` (libnbd's,
/// with a client certificate `CN=<client_cn>`).
///
/// # Panics
/// The files cannot be written.
pub fn pki(base: &Path, client_cn: &str) -> (Ca, PathBuf, PathBuf) {
    let ca = Ca::new("wanblk test CA");
    let server = ca.write_server(&base.join("server"), false);
    let client = ca.write_client(&base.join("client"), client_cn);
    (ca, server, client)
}
