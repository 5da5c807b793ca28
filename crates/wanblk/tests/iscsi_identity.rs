//! iSCSI identity against tgtd: an InitiatorName ACL (`tgtadm --op bind
//! --initiator-name`) and mutual CHAP (an incoming account for us, an
//! outgoing one for the target). Login works with the right name and both
//! secrets, from files, the environment or a percent-encoded URI, and fails
//! clearly with a wrong name, a wrong secret or a target that does not know
//! its own. No output, report or log shows either secret.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;
use wanblk_testkit::tgt::Tgt;

const IQN: &str = "iqn.2024-01.test.wanblk:identity";
const ALLOWED: &str = "iqn.2024-01.test.wanblk:allowed-host";
const USER: &str = "alice";
/// A `/` and an `@` in it: the URI parser and the redaction must agree.
const SECRET: &str = "in/itiator@Secret1";
const TARGET_USER: &str = "tgtd-out";
const TARGET_SECRET: &str = "TargetSecret-2xyz";
const SIZE: u64 = 8 << 20;

fn secret_file(dir: &std::path::Path, name: &str, secret: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p.to_str().unwrap().to_string()
}

fn err(out: &std::process::Output) -> String {
    assert!(!out.status.success(), "must fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn initiator_acl_and_mutual_chap() {
    let tgt = Tgt::start();
    let lun = tgt.file("lun.img", SIZE);
    tgt.target(1, IQN, &lun, None, false);
    tgt.allow_only_initiator(1, ALLOWED);
    tgt.chap(1, USER, SECRET);
    tgt.chap_outgoing(1, TARGET_USER, TARGET_SECRET);

    let dir = tempdir();
    let d = dir.path();
    let mine = secret_file(d, "initiator.secret", SECRET);
    let theirs = secret_file(d, "target.secret", TARGET_SECRET);
    let wrong = secret_file(d, "wrong.secret", "NotTheSecret-9");
    let addr = format!("127.0.0.1:{}", tgt.port);
    let uri = format!("iscsi://{USER}@{addr}/{IQN}/1");
    let ident = ["--initiator-name", ALLOWED, "--target-user", TARGET_USER];
    let mut outs = Outputs::default();

    // The right name and both secrets from files: a round trip.
    let src = d.join("src.img");
    let sha = random_file(&src, SIZE, 0x1de).unwrap();
    let rep = d.join("backup.json");
    let tcplog = d.join("tcp.csv");
    let mut args =
        vec![src.to_str().unwrap(), &uri, "-C", "2", "--secret-file", &mine, "--target-secret-file", &theirs];
    args.extend(ident);
    args.extend(["--report", rep.to_str().unwrap(), "--tcp-log", tcplog.to_str().unwrap(), "--log", "trace"]);
    let out = copy_ok(&args);
    outs.output("backup", &out).file(&rep).file(&tcplog);
    assert_eq!(sha256_file(&lun).unwrap(), sha, "the LUN holds what was backed up");

    // The target secret from the environment, the initiator's in the URI
    // (percent-encoded, then raw: the last @ ends it).
    let encoded = SECRET.replace('/', "%2F").replace('@', "%40");
    for (label, u) in [
        ("encoded", format!("iscsi://{USER}%{encoded}@{addr}/{IQN}/1")),
        ("raw", format!("iscsi://{USER}%{SECRET}@{addr}/{IQN}/1")),
    ] {
        let back = d.join(format!("back-{label}.img"));
        let rep = d.join(format!("restore-{label}.json"));
        let mut c = wanblk();
        c.args(["copy", &u, back.to_str().unwrap(), "--no-progress", "--verify", "--log", "debug"])
            .args(["--report", rep.to_str().unwrap()])
            .args(ident)
            .env("WANBLK_ISCSI_TARGET_PASSWORD", TARGET_SECRET);
        let out = wanblk_testkit::run_with_timeout(&mut c, COPY_TIMEOUT);
        assert!(out.status.success(), "{label}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(sha256_file(&back).unwrap(), sha, "{label}: restored over mutual CHAP");
        outs.output(label, &out).file(&rep);
    }

    // Failures, each with a clear message.
    let run = |extra: &[&str], env: Option<(&str, &str)>| {
        let mut c = wanblk();
        c.args(["copy", &uri, "null:", "--no-progress"]).args(extra);
        if let Some((k, v)) = env {
            c.env(k, v);
        }
        wanblk_testkit::run_with_timeout(&mut c, COPY_TIMEOUT)
    };
    let out = run(
        &[
            "--initiator-name",
            "iqn.2024-01.test.wanblk:someone-else",
            "--secret-file",
            &mine,
            "--target-secret-file",
            &theirs,
        ],
        None,
    );
    let e = err(&out);
    eprintln!("failure message: {}", e.trim());
    assert!(
        e.contains("login")
            && e.contains("does not allow InitiatorName iqn.2024-01.test.wanblk:someone-else"),
        "wrong name: {e}"
    );
    outs.output("wrong name", &out);

    let mut a = vec!["--secret-file", wrong.as_str(), "--target-secret-file", theirs.as_str()];
    a.extend(ident);
    let out = run(&a, None);
    let e = err(&out);
    eprintln!("failure message: {}", e.trim());
    assert!(
        e.contains("authentication failed") && e.contains("check the CHAP user"),
        "wrong initiator secret: {e}"
    );
    outs.output("wrong initiator secret", &out);

    let mut a = vec!["--secret-file", mine.as_str(), "--target-secret-file", wrong.as_str()];
    a.extend(ident);
    let out = run(&a, None);
    let e = err(&out);
    eprintln!("failure message: {}", e.trim());
    assert!(
        e.contains("failed mutual CHAP") && e.contains("does not know the target secret"),
        "wrong target secret: {e}"
    );
    outs.output("wrong target secret", &out);

    let out = run(
        &["--initiator-name", ALLOWED, "--target-user", "impostor", "--secret-file", &mine],
        Some(("WANBLK_ISCSI_TARGET_PASSWORD", TARGET_SECRET)),
    );
    let e = err(&out);
    eprintln!("failure message: {}", e.trim());
    assert!(e.contains("expected \"impostor\""), "wrong target user: {e}");
    outs.output("wrong target user", &out);

    // The same secret both ways is refused before anything is sent.
    let out =
        run(&["--initiator-name", ALLOWED, "--secret-file", &mine, "--target-secret-file", &mine], None);
    assert!(err(&out).contains("must differ"));
    outs.output("same secret", &out);

    // A bad InitiatorName is refused locally.
    let out = run(&["--initiator-name", "Not An IQN", "--secret-file", &mine], None);
    assert!(err(&out).contains("InitiatorName"));
    outs.output("bad name", &out);

    assert!(outs.len() >= 18);
    outs.assert_no_secret(&[SECRET.to_string(), encoded, TARGET_SECRET.to_string()]);
}
