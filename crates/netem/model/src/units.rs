//! Parsing of the human units used on the command line and in profile files:
//! rates (`1gbit`, `500mbit`), durations (`20ms`, `1.5s`), sizes (`512K`).

use crate::ParseError;

fn split_number(s: &str) -> Result<(f64, &str), ParseError> {
    let s = s.trim();
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    if num.is_empty() {
        return Err(ParseError::new(format!("`{s}`: expected a number")));
    }
    let v: f64 = num.parse().map_err(|_| ParseError::new(format!("`{s}`: bad number `{num}`")))?;
    if !v.is_finite() || v < 0.0 {
        return Err(ParseError::new(format!("`{s}`: must be a finite, non-negative number")));
    }
    Ok((v, unit))
}

fn to_u64(v: f64, what: &str, s: &str) -> Result<u64, ParseError> {
    if v >= u64::MAX as f64 {
        return Err(ParseError::new(format!("`{s}`: {what} too large")));
    }
    Ok(v.round() as u64)
}

/// Parses a rate in bits per second: `1gbit`, `500mbit`, `12mbit`, `100kbit`,
/// `2.5gbit`, `1g`, `800m`, `64000bit` or a bare number of bit/s (decimal prefixes, as tc).
///
/// # Errors
/// A [`ParseError`] naming the bad input.
pub fn parse_rate(s: &str) -> Result<u64, ParseError> {
    let (v, unit) = split_number(s)?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "bit" | "bps" => 1e0,
        "k" | "kbit" | "kbps" => 1e3,
        "m" | "mbit" | "mbps" => 1e6,
        "g" | "gbit" | "gbps" => 1e9,
        "t" | "tbit" => 1e12,
        other => {
            return Err(ParseError::new(format!(
                "`{s}`: unknown rate unit `{other}` (use bit, kbit, mbit, gbit)"
            )));
        }
    };
    to_u64(v * mult, "rate", s)
}

/// Parses a duration in nanoseconds: `20ms`, `1.5s`, `100us`, `250ns`, `2m` (minutes).
/// A bare number is milliseconds.
///
/// # Errors
/// A [`ParseError`] naming the bad input.
pub fn parse_duration_ns(s: &str) -> Result<u64, ParseError> {
    let (v, unit) = split_number(s)?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "ns" => 1e0,
        "us" | "µs" => 1e3,
        "" | "ms" => 1e6,
        "s" | "sec" => 1e9,
        "m" | "min" => 60e9,
        other => return Err(ParseError::new(format!("`{s}`: unknown time unit `{other}` (use us, ms, s)"))),
    };
    to_u64(v * mult, "duration", s)
}

/// Parses a size in bytes: `512K`, `4M`, `1G` (binary multiples), `1500`, `64KB`.
///
/// # Errors
/// A [`ParseError`] naming the bad input.
pub fn parse_size(s: &str) -> Result<u64, ParseError> {
    let (v, unit) = split_number(s)?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        other => return Err(ParseError::new(format!("`{s}`: unknown size unit `{other}` (use K, M, G)"))),
    };
    to_u64(v * mult, "size", s)
}

/// Parses a probability: `0.001`, `0.1%`, `1e-4`.
///
/// # Errors
/// A [`ParseError`] unless the value is within 0..=1.
pub fn parse_probability(s: &str) -> Result<f64, ParseError> {
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (t, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| ParseError::new(format!("`{s}`: bad probability")))?;
    let v = v * scale;
    if !(0.0..=1.0).contains(&v) {
        return Err(ParseError::new(format!("`{s}`: probability must be within 0..1")));
    }
    Ok(v)
}

/// Formats a rate for humans: `1gbit`, `12.5mbit`.
pub fn format_rate(bps: u64) -> String {
    let (v, u) = if bps >= 1_000_000_000 {
        (bps as f64 / 1e9, "gbit")
    } else if bps >= 1_000_000 {
        (bps as f64 / 1e6, "mbit")
    } else if bps >= 1_000 {
        (bps as f64 / 1e3, "kbit")
    } else {
        (bps as f64, "bit")
    };
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{u}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("500mbit").unwrap(), 500_000_000);
        assert_eq!(parse_rate("2.5Gbit").unwrap(), 2_500_000_000);
        assert_eq!(parse_rate("12m").unwrap(), 12_000_000);
        assert_eq!(parse_rate("64000").unwrap(), 64_000);
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("1 furlong").is_err());
        assert_eq!(format_rate(1_000_000_000), "1gbit");
        assert_eq!(format_rate(12_500_000), "12.5mbit");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("20ms").unwrap(), 20_000_000);
        assert_eq!(parse_duration_ns("1.5s").unwrap(), 1_500_000_000);
        assert_eq!(parse_duration_ns("100us").unwrap(), 100_000);
        assert_eq!(parse_duration_ns("7").unwrap(), 7_000_000);
        assert!(parse_duration_ns("-1s").is_err());
        assert!(parse_duration_ns("3h").is_err());
    }

    #[test]
    fn sizes_and_probabilities() {
        assert_eq!(parse_size("512K").unwrap(), 524_288);
        assert_eq!(parse_size("4M").unwrap(), 4 << 20);
        assert_eq!(parse_size("1500").unwrap(), 1500);
        assert_eq!(parse_probability("0.001").unwrap(), 0.001);
        assert!((parse_probability("0.1%").unwrap() - 0.001).abs() < 1e-12);
        assert!(parse_probability("1.5").is_err());
    }
}
