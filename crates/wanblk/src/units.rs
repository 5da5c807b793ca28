//! Parsing of sizes on the command line (`4M`, `1GiB`, `512k`, `1000`).

/// Parses a byte size: a number with an optional binary suffix K, M, G, T
/// (optionally followed by `iB` or `B`), case-insensitive. `4M` is 4 MiB.
///
/// # Errors
/// A message naming the bad value.
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower.strip_suffix("ib").or_else(|| lower.strip_suffix('b')).unwrap_or(&lower);
    let (num, shift) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 10),
        Some('m') => (&body[..body.len() - 1], 20),
        Some('g') => (&body[..body.len() - 1], 30),
        Some('t') => (&body[..body.len() - 1], 40),
        _ => (body, 0),
    };
    let num = num.trim();
    let bad = || format!("invalid size {s:?}: expected a number with an optional K, M, G or T suffix");
    if num.is_empty() {
        return Err(bad());
    }
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(1u64 << shift).ok_or_else(|| format!("size {s:?} is too large"));
    }
    let f: f64 = num.parse().map_err(|_| bad())?;
    if !f.is_finite() || f < 0.0 {
        return Err(bad());
    }
    let v = f * (1u64 << shift) as f64;
    if v >= u64::MAX as f64 {
        return Err(format!("size {s:?} is too large"));
    }
    Ok(v.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("2tb"), Ok(2 << 40));
        assert!(parse_size("").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}
