//! A server that breaks the protocol or hangs up makes `wanblk copy` fail
//! with a clear error naming the endpoint and the offset, a non-zero exit
//! code, and no destination file that pretends to be complete.

mod common;

use std::path::Path;
use std::process::Output;

use common::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use wanblk_nbd_proto::wire::RequestHeader;
use wanblk_testkit::nbd_hostile::{Hostile, chunk, hostile, linger, read_request, simple};

/// A copy to a new file first reads a few 64 KiB blocks of the source to
/// identify it in its resume journal. Answers those (with `fill` bytes)
/// and returns the first request of the copy itself, so each script
/// misbehaves in the middle of the copy, with a partial file on disk.
async fn answer_identity_samples(s: &mut TcpStream, structured: bool, fill: u8) -> RequestHeader {
    loop {
        let r = read_request(s).await;
        if r.length != 64 << 10 {
            return r;
        }
        let data = vec![fill; r.length as usize];
        let reply = if structured {
            let mut payload = r.offset.to_be_bytes().to_vec();
            payload.extend_from_slice(&data);
            chunk(1, 1, r.cookie, &payload)
        } else {
            let mut reply = simple(r.cookie, 0);
            reply.extend_from_slice(&data);
            reply
        };
        s.write_all(&reply).await.unwrap();
    }
}

async fn copy_to_new_file(uri: &str, dst: &Path) -> Output {
    let (uri, dst) = (uri.to_string(), dst.to_str().unwrap().to_string());
    // A hang-up is worth reconnecting for (the default rides out five
    // minutes of it); these servers hang up on every connection, so give
    // up after two seconds of retrying.
    tokio::task::spawn_blocking(move || copy(&[&uri, &dst, "-C", "1", "--retry-for", "2s"])).await.unwrap()
}

/// Checks the failure: exit code, message, and what is left on disk.
fn assert_failed(out: &Output, uri: &str, dst: &Path, expect: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "copy from a hostile server succeeded: {err}");
    assert!(err.contains(uri), "error names the endpoint {uri}: {err}");
    assert!(err.contains("offset"), "error names the offset: {err}");
    assert!(err.contains(expect), "error says {expect:?}: {err}");
    assert!(!dst.exists(), "{} must not exist after a failed copy", dst.display());
    let part = dst.with_file_name(format!("{}.wanblk-part", dst.file_name().unwrap().to_str().unwrap()));
    assert!(part.exists(), "the partial copy is kept under its .wanblk-part name: {err}");
    assert!(
        err.contains("wanblk-part") && err.contains("not renamed"),
        "error says where the partial data is: {err}"
    );
    err
}

/// Copies from `server` to a new file, checks the failure says `expect`,
/// stops the server and returns the error text.
async fn copy_fails_with(server: Hostile, expect: &str) -> String {
    let uri = server.uri.clone();
    let dir = tempdir();
    let dst = dir.path().join("out.img");
    let out = copy_to_new_file(&uri, &dst).await;
    let err = assert_failed(&out, &uri, &dst, expect);
    server.finish().await;
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_instead_of_a_reply() {
    let server = hostile(false, |mut s| async move {
        answer_identity_samples(&mut s, false, 0).await;
        let _ = s.write_all(b"this is certainly not an NBD reply header!!").await;
        linger(s).await;
    })
    .await;
    copy_fails_with(server, "protocol error").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_with_an_unknown_cookie() {
    let server = hostile(true, |mut s| async move {
        let r = answer_identity_samples(&mut s, true, 0).await;
        let _ = s.write_all(&chunk(1, 0, r.cookie ^ 0xdead_beef, &[])).await;
        linger(s).await;
    })
    .await;
    copy_fails_with(server, "cookie").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_reply_then_hang_up() {
    let server = hostile(false, |mut s| async move {
        let r = answer_identity_samples(&mut s, false, 0).await;
        let reply = simple(r.cookie, 0);
        // Half a reply header, then close.
        let _ = s.write_all(&reply[..7]).await;
    })
    .await;
    copy_fails_with(server, "I/O error").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_up_mid_transfer_keeps_only_what_was_copied() {
    let server = hostile(false, |mut s| async move {
        // Answer two reads with real data, then hang up (FIN) with the rest
        // pending. (Closing with unread requests would send a RST, and the
        // client's kernel may then discard the replies before they are read.)
        let mut first = Some(answer_identity_samples(&mut s, false, 0).await);
        for _ in 0..2 {
            let r = match first.take() {
                Some(r) => r,
                None => read_request(&mut s).await,
            };
            let mut reply = simple(r.cookie, 0);
            reply.extend(std::iter::repeat_n(0xa5u8, r.length as usize));
            if s.write_all(&reply).await.is_err() {
                return;
            }
        }
        let _ = s.shutdown().await;
        linger(s).await;
    })
    .await;
    let uri = server.uri.clone();
    let dir = tempdir();
    let dst = dir.path().join("out.img");
    let out = copy_to_new_file(&uri, &dst).await;
    let err = assert_failed(&out, &uri, &dst, "I/O error");
    // The message says how far the copy got, and the part file holds
    // exactly the answered data.
    assert!(err.contains("bytes copied"), "{err}");
    let part = dir.path().join("out.img.wanblk-part");
    let bytes = std::fs::read(&part).unwrap();
    let copied = bytes.iter().filter(|&&b| b == 0xa5).count();
    // The hostile export allows at most 1 MiB per request.
    assert_eq!(copied, 2 << 20, "exactly the two answered requests were written");
    assert!(err.contains("reconnecting failed"), "the error keeps the original failure: {err}");
    server.finish().await;
}
