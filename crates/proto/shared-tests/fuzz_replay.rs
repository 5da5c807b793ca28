// The seed replay shared by the protocol crates' `fuzzing` modules
// (included with `include!` into their test module): every committed seed of
// every fuzz target runs through the target's body, on stable Rust, as a
// normal test. Not a crate: test code two crates include; the including
// module's parent defines `Body`, the type of a fuzz body.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The cargo-fuzz workspace (`fuzz/` at the repository root).
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../fuzz")
}

/// Runs every file of `fuzz/seeds/<target>/` through the target's body.
/// Fails naming every seed that panicked, every `bad_*` seed the machine
/// accepted, every other seed it refused (`odd_*` seeds may go either way)
/// and every target without seeds.
fn replay_seeds(targets: &[(&str, super::Body)]) {
    let mut failures = Vec::new();
    let mut count = 0;
    for &(name, body) in targets {
        let dir = fuzz_dir().join("seeds").join(name);
        let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(d) => d.map(|e| e.expect("directory entry").path()).filter(|p| p.is_file()).collect(),
            Err(e) => {
                failures.push(format!("{name}: cannot read {}: {e}", dir.display()));
                continue;
            }
        };
        files.sort();
        if files.is_empty() {
            failures.push(format!("{name}: no seeds in {}", dir.display()));
        }
        for f in files {
            let data = std::fs::read(&f).expect("read seed");
            let file = f.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            count += 1;
            match (std::panic::catch_unwind(|| body(&data)), file.split('_').next()) {
                (Err(_), _) => failures.push(format!(
                    "{name}: seed {file} panicked (reproduce: cd fuzz && cargo fuzz run {name} seeds/{name}/{file})"
                )),
                (Ok(Ok(())), Some("bad")) => failures.push(format!("{name}: seed {file} was accepted")),
                (Ok(Err(e)), Some(p)) if p != "bad" && p != "odd" => {
                    failures.push(format!("{name}: seed {file} was refused: {e}"))
                }
                _ => {}
            }
        }
    }
    assert!(failures.is_empty(), "{} of {count} seeds failed:\n{}", failures.len(), failures.join("\n"));
    assert!(count >= 3 * targets.len(), "only {count} seeds for {} targets", targets.len());
}

/// The `[[bin]]` targets of `fuzz/Cargo.toml` named `prefix*` are exactly
/// `targets`, and each target's file calls a body of this crate's `fuzzing`
/// module, so a new target cannot skip the replay.
fn targets_are_replayed(prefix: &str, targets: &[(&str, super::Body)]) {
    let toml = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("read fuzz/Cargo.toml");
    let bins: BTreeSet<String> = toml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("name = \"")?.strip_suffix('"').map(String::from))
        .filter(|n| n.starts_with(prefix))
        .collect();
    let ours: BTreeSet<String> = targets.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(bins, ours, "fuzz targets in fuzz/Cargo.toml vs the bodies replayed here");
    let krate = env!("CARGO_PKG_NAME").replace('-', "_");
    for name in ours {
        let path = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        let code = std::fs::read_to_string(&path).expect("read fuzz target");
        assert!(
            code.contains(&format!("{krate}::fuzzing::")),
            "{} does not call {krate}::fuzzing",
            path.display()
        );
    }
}
