//! `key=value` text (RFC 7143 section 6.1): the data segment of Login and
//! Text PDUs is a sequence of `key=value` items, each ended by a NUL.

use crate::error::TextError;

/// Longest key name (RFC 7143 section 6.1).
pub const MAX_KEY_LEN: usize = 63;
/// Longest value accepted (RFC 7143 section 6.1: 255 bytes for most keys,
/// 8192 for a few; CHAP values may be long hex strings).
pub const MAX_VALUE_LEN: usize = 8192;
/// Longest text accepted over all PDUs of one exchange (a long SendTargets
/// answer spans many PDUs).
pub const MAX_TEXT_LEN: usize = 1 << 20;

/// The values a responder may answer instead of a result (RFC 7143 section 6.2).
pub mod special {
    /// The key is not understood.
    pub const NOT_UNDERSTOOD: &str = "NotUnderstood";
    /// The key does not apply here.
    pub const IRRELEVANT: &str = "Irrelevant";
    /// The offered value is not acceptable.
    pub const REJECT: &str = "Reject";
}

/// Ordered `key=value` pairs (keys may repeat, as in SendTargets answers).
pub type Pairs = Vec<(String, String)>;

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= MAX_KEY_LEN
        && k.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'+' | b'@' | b'_'))
}

/// Checks a key name and value before sending them.
///
/// # Errors
/// [`TextError::BadKey`] or [`TextError::ValueTooLong`]; a value with a NUL
/// is [`TextError::BadValue`].
pub fn check_pair(key: &str, value: &str) -> Result<(), TextError> {
    if !valid_key(key) {
        return Err(TextError::BadKey(key.to_string()));
    }
    if value.len() > MAX_VALUE_LEN {
        return Err(TextError::ValueTooLong { key: key.to_string(), len: value.len() });
    }
    if value.contains('\0') {
        return Err(TextError::BadValue { key: key.to_string(), value: value.replace('\0', "\\0") });
    }
    Ok(())
}

/// Parses a complete text (all continuation PDUs joined).
///
/// # Errors
/// Any item without `=`, with a bad key, an over-long value, or non-UTF-8 text.
pub fn parse(data: &[u8]) -> Result<Pairs, TextError> {
    if data.len() > MAX_TEXT_LEN {
        return Err(TextError::TooLong(data.len()));
    }
    let mut out = Vec::new();
    for item in data.split(|&b| b == 0) {
        if item.is_empty() {
            continue; // trailing NUL, or padding some targets leave
        }
        let item = std::str::from_utf8(item).map_err(|_| TextError::NotUtf8)?;
        let (k, v) =
            item.split_once('=').ok_or_else(|| TextError::MissingEquals(item.chars().take(80).collect()))?;
        if !valid_key(k) {
            return Err(TextError::BadKey(k.chars().take(80).collect()));
        }
        if v.len() > MAX_VALUE_LEN {
            return Err(TextError::ValueTooLong { key: k.to_string(), len: v.len() });
        }
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

/// Encodes pairs as `key=value\0...`.
pub fn encode<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        out.extend_from_slice(k.as_ref().as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_ref().as_bytes());
        out.push(0);
    }
    out
}

/// The first value of `key`.
pub fn get<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Parses an RFC 7143 numerical value: decimal, `0x` hex (section 5.1).
///
/// # Errors
/// [`TextError::BadValue`] when it does not parse or exceeds `u64`.
pub fn parse_number(key: &str, v: &str) -> Result<u64, TextError> {
    let bad = || TextError::BadValue { key: key.to_string(), value: v.chars().take(80).collect() };
    if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        if h.is_empty() || h.len() > 16 {
            return Err(bad());
        }
        u64::from_str_radix(h, 16).map_err(|_| bad())
    } else {
        if v.is_empty() || v.len() > 20 || !v.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        v.parse().map_err(|_| bad())
    }
}

/// Parses `Yes`/`No`.
///
/// # Errors
/// [`TextError::BadValue`] for anything else.
pub fn parse_bool(key: &str, v: &str) -> Result<bool, TextError> {
    match v {
        "Yes" => Ok(true),
        "No" => Ok(false),
        _ => Err(TextError::BadValue { key: key.to_string(), value: v.chars().take(80).collect() }),
    }
}

/// Formats a boolean as `Yes`/`No`.
pub fn yes_no(b: bool) -> &'static str {
    if b { "Yes" } else { "No" }
}

/// Decodes a binary value in `0x` hex or `0b` base64 form (RFC 7143
/// section 6.1, used by CHAP).
///
/// # Errors
/// [`TextError::BadValue`] when malformed.
pub fn parse_binary(key: &str, v: &str) -> Result<Vec<u8>, TextError> {
    let bad = || TextError::BadValue { key: key.to_string(), value: v.chars().take(80).collect() };
    if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        if h.is_empty() {
            return Err(bad());
        }
        // An odd number of digits has an implied leading zero.
        let padded;
        let h = if h.len() % 2 == 1 {
            padded = format!("0{h}");
            padded.as_str()
        } else {
            h
        };
        let mut out = Vec::with_capacity(h.len() / 2);
        for i in (0..h.len()).step_by(2) {
            out.push(u8::from_str_radix(h.get(i..i + 2).ok_or_else(bad)?, 16).map_err(|_| bad())?);
        }
        Ok(out)
    } else if let Some(b) = v.strip_prefix("0b").or_else(|| v.strip_prefix("0B")) {
        base64_decode(b).ok_or_else(bad)
    } else {
        Err(bad())
    }
}

/// Formats bytes as `0x` hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 + bytes.len() * 2);
    s.push_str("0x");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for &c in s {
        acc = (acc << 6) | val(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let p = vec![("InitiatorName".to_string(), "iqn.x".to_string()), ("A".to_string(), String::new())];
        assert_eq!(parse(&encode(&p)).unwrap(), p);
    }

    #[test]
    fn errors() {
        assert!(matches!(parse(b"novalue\0"), Err(TextError::MissingEquals(_))));
        assert!(matches!(parse(b"bad key=1\0"), Err(TextError::BadKey(_))));
        assert!(matches!(parse(b"k=\xff\0"), Err(TextError::NotUtf8)));
    }

    #[test]
    fn binary_values() {
        assert_eq!(parse_binary("C", "0x0a0B").unwrap(), vec![10, 11]);
        assert_eq!(parse_binary("C", "0xabc").unwrap(), vec![0x0a, 0xbc]);
        assert_eq!(parse_binary("C", "0bAQID").unwrap(), vec![1, 2, 3]);
        assert!(parse_binary("C", "12").is_err());
        assert_eq!(hex(&[1, 255]), "0x01ff");
        assert_eq!(parse_number("N", "0x10").unwrap(), 16);
        assert!(parse_number("N", "-1").is_err());
    }
}
