//! Help that teaches: `wanblk SUBCOMMAND --help` names every location form
//! (with the ones a subcommand does not take said to be for another), the
//! examples and the pointer to the usage guide; no paper numbers.

mod common;

use common::*;

/// Every location form, as the help writes it.
const FORMS: &[&str] = &[
    "nbd://",
    "nbd+unix://",
    "nbds://",
    "nbd+vsock://",
    "iscsi://",
    "FILE",
    "null:",
    "random:",
    "\n  -\n",
    "[ CMD ARGS ... ]",
];

fn help(args: &[&str]) -> String {
    let out = wanblk_testkit::run_with_timeout(
        wanblk().args(args).arg("--help"),
        std::time::Duration::from_secs(30),
    );
    assert!(out.status.success(), "wanblk {args:?} --help failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

#[test]
fn every_subcommand_that_takes_a_location_names_every_form() {
    for sub in ["copy", "info", "serve", "mount"] {
        let text = help(&[sub]);
        for form in FORMS {
            assert!(text.contains(form), "`wanblk {sub} --help` does not name {form:?}:\n{text}");
        }
        assert!(text.contains("EXAMPLE"), "`wanblk {sub} --help` has no examples");
        assert!(text.contains("man wanblk"), "`wanblk {sub} --help` does not point to the guide");
    }
    // The embedded target serves the NBD forms its clients use.
    let text = help(&["target"]);
    for form in ["nbd://", "nbd+unix://", "EXAMPLES"] {
        assert!(text.contains(form), "`wanblk target --help` does not name {form:?}");
    }
}

#[test]
fn the_long_help_is_shown_not_only_the_one_liner() {
    let text = help(&["copy"]);
    assert!(text.contains("FILE.wanblk-part"), "the long description is missing:\n{text}");
    assert!(text.contains("cat disk.img | wanblk copy - nbd://"), "{text}");
    // -h stays short: the one-line doc and the options.
    let out =
        wanblk_testkit::run_with_timeout(wanblk().args(["copy", "-h"]), std::time::Duration::from_secs(30));
    let short = String::from_utf8_lossy(&out.stdout);
    assert!(!short.contains("LOCATIONS:"), "{short}");
}

#[test]
fn the_main_help_points_to_the_usage_guide_in_plain_words() {
    let text = help(&[]);
    for want in
        ["copy", "info", "serve", "completions", "man wanblk", "For storage", "--help lists the locations"]
    {
        assert!(text.contains(want), "`wanblk --help` lacks {want:?}:\n{text}");
    }
    for sub in ["", "copy", "info", "serve", "mount", "target"] {
        let text = if sub.is_empty() { help(&[]) } else { help(&[sub]) };
        for jargon in ["seed 000", "seed 00", "Table 1", "section 4.4"] {
            assert!(!text.contains(jargon), "`wanblk {sub} --help` says {jargon:?}");
        }
    }
}
