//! Parsing of sizes (`4M`, `1GiB`, `512k`, `1000`) and durations (`500ms`,
//! `10s`, `5m`) on the command line.

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

/// Parses a duration: a number with a unit `ms`, `s`, `m` or `h` (seconds
/// without one), e.g. `500ms`, `10s`, `5m`.
///
/// # Errors
/// A message naming the bad value.
pub(crate) fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t.as_str(), 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v * scale <= 1e9 => {
            Ok(std::time::Duration::from_secs_f64(v * scale))
        }
        _ => Err(format!("invalid duration {s:?}: expected e.g. 500ms, 10s, 5m or 1h")),
    }
}

/// Parses a rate in bits per second: a number with an optional decimal
/// suffix K, M, G, T (powers of 1000, as link speeds are given), optionally
/// followed by `bit`, `bit/s` or `bps`, case-insensitive: `100M`,
/// `1.5G`, `800mbit`, `250000`.
///
/// # Errors
/// A message naming the bad value (zero is refused: no rate at all).
pub(crate) fn parse_rate(s: &str) -> Result<u64, String> {
    let lower = s.trim().to_ascii_lowercase();
    let body = ["bit/s", "bits/s", "bps", "bit", "bits", "b/s"]
        .iter()
        .find_map(|u| lower.strip_suffix(u))
        .unwrap_or(&lower);
    let (num, scale) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 1e3),
        Some('m') => (&body[..body.len() - 1], 1e6),
        Some('g') => (&body[..body.len() - 1], 1e9),
        Some('t') => (&body[..body.len() - 1], 1e12),
        _ => (body, 1.0),
    };
    let bad = || format!("invalid rate {s:?}: expected bits per second such as 100M, 1.5G or 800000");
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    let bits = v * scale;
    if !bits.is_finite() || bits < 8.0 || bits >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bits.round() as u64)
}

/// Parses a duration as [`parse_duration`] does, and also `0` (with or
/// without a unit), which turns what it sets off.
///
/// # Errors
/// A message naming the bad value.
pub(crate) fn parse_duration_or_zero(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim().to_ascii_lowercase();
    let num = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    if !num.is_empty()
        && num.trim().parse::<f64>() == Ok(0.0)
        && ["", "ms", "s", "m", "h"].contains(&&t[num.len()..])
    {
        return Ok(std::time::Duration::ZERO);
    }
    parse_duration(s)
}

#[cfg(test)]
mod tests {
    use super::{parse_rate, parse_size};

    #[test]
    fn durations_or_zero() {
        use super::parse_duration_or_zero;
        use std::time::Duration;
        assert_eq!(parse_duration_or_zero("60"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration_or_zero("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration_or_zero("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration_or_zero("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration_or_zero("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration_or_zero("0s"), Ok(Duration::ZERO));
        for bad in ["", "s", "-1s", "5 parsecs", "1e400", "0x"] {
            assert!(parse_duration_or_zero(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100M"), Ok(100_000_000));
        assert_eq!(parse_rate("1G"), Ok(1_000_000_000));
        assert_eq!(parse_rate("1.5g"), Ok(1_500_000_000));
        assert_eq!(parse_rate("800mbit"), Ok(800_000_000));
        assert_eq!(parse_rate("800Mbit/s"), Ok(800_000_000));
        assert_eq!(parse_rate("250000"), Ok(250_000));
        for bad in ["", "M", "0", "-1M", "fast", "1e400", "NaN"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(super::parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(super::parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(super::parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(super::parse_duration("2"), Ok(Duration::from_secs(2)));
        assert!(super::parse_duration("0s").is_err());
        assert!(super::parse_duration("soon").is_err());
    }

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
