//! Giving up on a command the target never answers (what the pool does
//! when a request passes its deadline): `Endpoint::abort` sends ABORT TASK
//! for the command (RFC 7143 section 11.5: its task tag, its CmdSN, the
//! LUN), the command fails with an I/O error (so the pool sends it again
//! elsewhere) once the target answers "function complete", and the
//! connection logs out. A target that does not answer the abort is given
//! up on within the bound, and nothing hangs.

mod common;

use common::{FakeConn, FakeTarget, within};
use wanblk_blockdev::{Endpoint, ErrorKind};
use wanblk_iscsi::IscsiConnector;
use wanblk_iscsi_proto::pdu::{Header, LogoutResponse, TaskMgmtResponse, tmf};

/// A target that holds the READ, then answers the abort if `answer`, then
/// the logout; returns what it saw of the abort.
fn holding_target(answer: bool) -> FakeTarget {
    FakeTarget::spawn(move |c: &mut FakeConn| {
        c.login();
        let Some((read, _)) = c.serve_probe(1 << 16) else { return };
        loop {
            let Some(p) = c.recv() else { return };
            match p.header {
                Header::TaskMgmtRequest(r) => {
                    assert_eq!(r.function, tmf::ABORT_TASK);
                    assert!(r.immediate);
                    assert_eq!((r.rtt, r.ref_cmd_sn, r.lun), (read.itt, read.cmd_sn, read.lun));
                    if answer {
                        let stat_sn = c.stat_sn;
                        c.stat_sn += 1;
                        c.send(
                            Header::TaskMgmtResponse(TaskMgmtResponse {
                                response: 0,
                                itt: r.itt,
                                stat_sn,
                                exp_cmd_sn: read.cmd_sn + 1,
                                max_cmd_sn: read.cmd_sn + 32,
                            }),
                            &[],
                        );
                    }
                }
                Header::LogoutRequest(l) => {
                    let stat_sn = c.stat_sn;
                    c.stat_sn += 1;
                    c.send(
                        Header::LogoutResponse(LogoutResponse {
                            response: 0,
                            itt: l.itt,
                            stat_sn,
                            exp_cmd_sn: read.cmd_sn + 1,
                            max_cmd_sn: read.cmd_sn + 32,
                            time2wait: 0,
                            time2retain: 0,
                        }),
                        &[],
                    );
                    return;
                }
                h => panic!("unexpected {h:?}"),
            }
        }
    })
}

async fn abort_a_held_read(answer: bool) {
    let fake = holding_target(answer);
    let conn = IscsiConnector::parse(&fake.uri()).unwrap();
    let ep = std::sync::Arc::new(within(20, conn.connect_endpoint()).await.unwrap());
    let read = tokio::spawn({
        let ep = std::sync::Arc::clone(&ep);
        async move { ep.read(8192, 4096).await }
    });
    // The read is held: give it time to reach the target, then give up on it.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(!read.is_finished(), "the target holds the read");
    within(20, ep.abort()).await;
    let e = within(20, read).await.unwrap().unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Io(_)), "an aborted command can be sent again elsewhere: {e}");
    assert_eq!(e.offset, Some(8192), "{e}");
    assert!(within(20, ep.read(0, 512)).await.is_err(), "an aborted endpoint takes no more commands");
    fake.finish().await;
}

#[tokio::test]
async fn abort_task_then_logout() {
    abort_a_held_read(true).await;
}

#[tokio::test]
async fn a_target_that_ignores_the_abort_is_given_up_on() {
    abort_a_held_read(false).await;
}
