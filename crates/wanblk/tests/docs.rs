//! Shell completions and man pages come from the command line definition;
//! the pages checked in under docs/man/ must be what this build generates
//! (regenerate with `cargo run -p wanblk -- man --dir docs/man`).

mod common;

use std::time::Duration;

use common::*;

#[test]
fn completions_generate_for_every_shell() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef wanblk"),
        ("fish", "complete -c wanblk"),
        ("elvish", "wanblk"),
        ("powershell", "wanblk"),
    ] {
        let out =
            wanblk_testkit::run_with_timeout(wanblk().args(["completions", shell]), Duration::from_secs(30));
        assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(marker), "{shell}: no {marker:?}");
        assert!(
            text.contains("copy") && text.contains("progress-json") && text.contains("info"),
            "{shell}: subcommands and flags"
        );
    }
    let out =
        wanblk_testkit::run_with_timeout(wanblk().args(["completions", "tcsh"]), Duration::from_secs(30));
    assert!(!out.status.success());
}

#[test]
fn the_checked_in_man_pages_are_current() {
    let dir = tempdir();
    let out = wanblk_testkit::run_with_timeout(
        wanblk().args(["man", "--dir"]).arg(dir.path()),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let checked_in = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/man");
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for must in ["wanblk.1", "wanblk-copy.1", "wanblk-info.1", "wanblk-serve.1", "wanblk-netem-up.1"] {
        assert!(names.iter().any(|n| n == must), "{must} not generated: {names:?}");
    }
    let stale: Vec<&String> = names
        .iter()
        .filter(|n| std::fs::read(checked_in.join(n)).ok() != std::fs::read(dir.path().join(n)).ok())
        .collect();
    assert!(
        stale.is_empty(),
        "docs/man is stale for {stale:?}: run `cargo run -p wanblk -- man --dir docs/man`"
    );
    let mut present: Vec<String> = std::fs::read_dir(&checked_in)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    assert_eq!(present, names, "docs/man holds pages this build does not generate");
    let page = std::fs::read_to_string(dir.path().join("wanblk-copy.1")).unwrap();
    assert!(page.contains("iscsi://") && page.contains("qemu\\-nbd"), "the long help is in the page");
    // `wanblk man` alone prints the main page.
    let out = wanblk_testkit::run_with_timeout(wanblk().arg("man"), Duration::from_secs(30));
    assert_eq!(out.stdout, std::fs::read(dir.path().join("wanblk.1")).unwrap());
}
