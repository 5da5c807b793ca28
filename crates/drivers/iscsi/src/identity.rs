//! Who the initiator is and what it proves: the default InitiatorName and
//! CHAP secrets read from files or the environment.
//!
//! The default InitiatorName is, in order:
//! 1. the `InitiatorName=` of open-iscsi's `/etc/iscsi/initiatorname.iscsi`,
//!    so a host keeps one iSCSI identity and the targets' ACLs written for
//!    it apply to wanblk too;
//! 2. else `iqn.2024-01.<reversed domain>:<host>`, from the host name
//!    (`/proc/sys/kernel/hostname`): the domain of a fully qualified host
//!    name reversed (`db1.example.com` gives `iqn.2024-01.com.example:db1`),
//!    `invalid.wanblk` when it has none; the host is the first label, or
//!    the first 12 hex digits of `/etc/machine-id` when the host name is
//!    empty or `localhost`. Stable across runs on one host.

use std::path::Path;

/// The naming authority's date in derived names (RFC 3720 section 3.2.6.3.1:
/// a month the authority held the domain; the form is what matters here).
const DATE: &str = "2024-01";

/// A CHAP secret: never shown by `Debug`, never part of a message.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<hidden>)")
    }
}

/// Why a secret cannot be read. Messages never quote the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The file cannot be read.
    #[error("{path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// Nothing in it.
    #[error("{0}: the secret is empty")]
    Empty(String),
}

impl Secret {
    /// A secret from bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Secret {
        Secret(bytes.into())
    }

    /// The bytes, for the CHAP computation.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// Reads a secret file: its contents, without one trailing newline.
    /// Warns when others may read it.
    ///
    /// # Errors
    /// [`SecretError`] when it cannot be read or is empty.
    pub fn from_file(path: &Path) -> Result<Secret, SecretError> {
        use std::os::unix::fs::PermissionsExt;
        let name = path.display().to_string();
        let mut b = std::fs::read(path)
            .map_err(|e| SecretError::Read { path: name.clone(), message: e.to_string() })?;
        if b.last() == Some(&b'\n') {
            b.pop();
            if b.last() == Some(&b'\r') {
                b.pop();
            }
        }
        if b.is_empty() {
            return Err(SecretError::Empty(name));
        }
        if let Ok(m) = std::fs::metadata(path)
            && m.permissions().mode() & 0o077 != 0
        {
            tracing::warn!("{name}: the secret file can be read by other users (chmod 600 it)");
        }
        Ok(Secret(b))
    }

    /// The secret in environment variable `var`, if set and not empty.
    pub fn from_env(var: &str) -> Option<Secret> {
        std::env::var_os(var).filter(|v| !v.is_empty()).map(|v| Secret(v.into_encoded_bytes()))
    }
}

/// The InitiatorName wanblk uses without `--initiator-name` (see the module docs).
pub fn default_initiator_name() -> String {
    if let Some(n) = open_iscsi_name(Path::new("/etc/iscsi/initiatorname.iscsi")) {
        return n;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let machine_id = std::fs::read_to_string("/etc/machine-id").unwrap_or_default();
    derived_name(host.trim(), machine_id.trim())
}

/// The `InitiatorName=` line of an open-iscsi file.
fn open_iscsi_name(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| l.trim().strip_prefix("InitiatorName="))
        .map(|n| n.trim().to_string())
        .filter(|n| valid_name(n).is_ok())
}

/// Keeps what an iSCSI name may hold (RFC 3722: lower case, digits, `-`, `.`).
fn label(s: &str) -> String {
    s.to_ascii_lowercase().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect()
}

/// `iqn.2024-01.<reversed domain>:<host>` from a host name and a machine id.
fn derived_name(hostname: &str, machine_id: &str) -> String {
    let mut parts: Vec<String> = hostname.split('.').map(label).filter(|p| !p.is_empty()).collect();
    let host = if parts.is_empty() { String::new() } else { parts.remove(0) };
    let authority = if parts.is_empty() {
        "invalid.wanblk".to_string()
    } else {
        parts.iter().rev().cloned().collect::<Vec<_>>().join(".")
    };
    let host = if host.is_empty() || host == "localhost" {
        let id: String = machine_id.chars().filter(char::is_ascii_hexdigit).take(12).collect();
        if id.is_empty() { "wanblk".to_string() } else { id.to_ascii_lowercase() }
    } else {
        host
    };
    format!("iqn.{DATE}.{authority}:{host}")
}

/// Checks an InitiatorName against RFC 7143 section 4.2.7.2 (`iqn.`, `eui.`
/// or `naa.` names, at most 223 bytes, lower case letters, digits and
/// `-.:`).
///
/// # Errors
/// What is wrong with it.
pub fn valid_name(name: &str) -> Result<(), String> {
    if name.len() > 223 {
        return Err(format!("{} bytes is longer than an iSCSI name may be (223)", name.len()));
    }
    if !(name.starts_with("iqn.") || name.starts_with("eui.") || name.starts_with("naa.")) {
        return Err("an iSCSI name starts with iqn., eui. or naa.".into());
    }
    if let Some(c) =
        name.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | ':')))
    {
        return Err(format!("{c:?} is not allowed in an iSCSI name (lower case letters, digits, - . :)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names() {
        assert_eq!(derived_name("db1.example.com", "abc"), "iqn.2024-01.com.example:db1");
        assert_eq!(derived_name("Backup_Host", ""), "iqn.2024-01.invalid.wanblk:backuphost");
        assert_eq!(
            derived_name("localhost", "0123456789abcdef0123"),
            "iqn.2024-01.invalid.wanblk:0123456789ab"
        );
        assert_eq!(derived_name("", ""), "iqn.2024-01.invalid.wanblk:wanblk");
        for n in [derived_name("db1.example.com", ""), derived_name("", "ffff"), default_initiator_name()] {
            valid_name(&n).unwrap_or_else(|e| panic!("{n}: {e}"));
        }
        assert_eq!(default_initiator_name(), default_initiator_name(), "stable");
    }

    #[test]
    fn names_are_checked() {
        assert!(valid_name("iqn.2024-01.com.example:host").is_ok());
        assert!(valid_name("IQN.2024").is_err());
        assert!(valid_name("iqn.x y").is_err());
        assert!(valid_name("host").is_err());
    }

    #[test]
    fn open_iscsi_file() {
        let dir = std::env::temp_dir().join(format!("wanblk-iname-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("initiatorname.iscsi");
        std::fs::write(
            &f,
            "## generated\n#InitiatorName=iqn.x:old\nInitiatorName=iqn.1993-08.org.debian:01:abc\n",
        )
        .unwrap();
        assert_eq!(open_iscsi_name(&f).as_deref(), Some("iqn.1993-08.org.debian:01:abc"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn secret_files() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("wanblk-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("s");
        std::fs::write(&f, "pa/ss@word\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let s = Secret::from_file(&f).unwrap();
        assert_eq!(s.expose(), b"pa/ss@word");
        assert!(!format!("{s:?}").contains("pa/ss"));
        std::fs::write(&f, "\n").unwrap();
        assert!(matches!(Secret::from_file(&f), Err(SecretError::Empty(_))));
        let e = Secret::from_file(&dir.join("missing")).unwrap_err();
        assert!(e.to_string().contains("missing"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
