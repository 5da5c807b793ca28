//! `--parts`: which parts of a profile run, checked the same way for every
//! profile that has them.

/// Every part named in `parts` is one of `known`, the parts of `profile`.
pub fn check(parts: &[String], known: &[&str], profile: &str) -> anyhow::Result<()> {
    if let Some(bad) = parts.iter().find(|p| !known.contains(&p.as_str())) {
        anyhow::bail!("unknown part {bad:?} of --profile {profile} (known: {})", known.join(", "));
    }
    Ok(())
}

/// Whether the part `name` runs: every part when none was named.
pub fn selects(parts: &[String], name: &str) -> bool {
    parts.is_empty() || parts.iter().any(|p| p == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_parts_are_named_and_none_means_all() {
        let named = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check(&named(&["a", "b"]), &["a", "b", "c"], "p").is_ok());
        let e = check(&named(&["a", "x"]), &["a", "b"], "share").unwrap_err().to_string();
        assert!(e.contains("\"x\"") && e.contains("--profile share") && e.contains("a, b"), "{e}");
        assert!(selects(&[], "a"));
        assert!(selects(&named(&["a"]), "a") && !selects(&named(&["a"]), "b"));
    }
}
