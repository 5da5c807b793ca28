//! The host's coordinator, over a Unix socket: copies on one machine that
//! use the same path share one session budget
//! ([`wanblk_tune::share::host`] holds the protocol and the rule).
//!
//! Every copy runs one [`HostLink`] task. It tries to take the lock file
//! `coord.lock` in the runtime directory (`$XDG_RUNTIME_DIR/wanblk`, else
//! `/run/wanblk`, else a directory of its own under the temporary
//! directory; mode 0700, files 0600); the copy that holds it serves the
//! socket `coord.sock`, and every copy, that one included, connects to it,
//! says which path it uses and reports after every interval. The kernel
//! drops the lock when the process ends, however it ends, so when the
//! coordinator's copy stops, the next copy to try takes the lock and binds
//! the socket again; the others reconnect. Until then (or when nothing
//! answers) a copy has no host ceiling and goes on alone: the link never
//! holds up the copy.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, timeout};
use wanblk_tune::share::host::{Decoder, Message, VERSION};
use wanblk_tune::share::{CopyReport, Grant, HostBudget};

/// How often a copy re-sends its last report when nothing changed.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// A coordinator that has not answered for this long is taken for dead.
const SILENCE: Duration = Duration::from_secs(10);
/// A copy that has not written for this long is dropped by the coordinator.
const IDLE: Duration = Duration::from_secs(30);
/// Bound on one write to the socket.
const WRITE: Duration = Duration::from_secs(2);
/// Pause between attempts to reach or become the coordinator.
const RETRY: Duration = Duration::from_millis(200);

/// The directory of the host's coordinator: `$XDG_RUNTIME_DIR/wanblk`,
/// else `/run/wanblk` where it can be created, else
/// `wanblk-USER` in the temporary directory.
pub fn runtime_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("wanblk");
    }
    let run = PathBuf::from("/run/wanblk");
    if make_dir(&run).is_ok() {
        return run;
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    std::env::temp_dir().join(format!("wanblk-{user}"))
}

fn make_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// The path key of a store name (URI without secrets): its host and port,
/// so copies of different exports on one server share a budget; the whole
/// name when it has no host (a Unix socket).
pub fn path_key(name: &str) -> String {
    let rest = name.split_once("://").map_or(name, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if authority.is_empty() { name.to_string() } else { authority.to_string() }
}

/// Aborts the task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One copy's link to the host's coordinator. See the module docs.
pub(crate) struct HostLink {
    reports: watch::Sender<Option<CopyReport>>,
    grants: watch::Receiver<Grant>,
    peak: Arc<AtomicUsize>,
    _task: AbortOnDrop,
}

impl HostLink {
    /// Starts the link for path `key`, coordinating through `dir`.
    pub(crate) fn start(dir: PathBuf, key: String) -> HostLink {
        let (reports, reports_rx) = watch::channel(None);
        let (grants_tx, grants) = watch::channel(Grant::ALONE);
        let peak = Arc::new(AtomicUsize::new(1));
        let task = tokio::spawn(run(dir, key, reports_rx, grants_tx, Arc::clone(&peak)));
        HostLink { reports, grants, peak, _task: AbortOnDrop(task) }
    }

    /// This copy's state after an interval.
    pub(crate) fn report(&self, report: CopyReport) {
        self.reports.send_replace(Some(report));
    }

    /// The last grant (no ceiling while no coordinator answers).
    pub(crate) fn grant(&self) -> Grant {
        *self.grants.borrow()
    }

    /// The most copies seen on the path at once, this one included.
    pub(crate) fn peak_copies(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
}

async fn run(
    dir: PathBuf,
    key: String,
    reports: watch::Receiver<Option<CopyReport>>,
    grants: watch::Sender<Grant>,
    peak: Arc<AtomicUsize>,
) {
    let sock = dir.join("coord.sock");
    let mut server: Option<AbortOnDrop> = None;
    let mut warned = false;
    // The path's budget as last heard: told to the next coordinator when
    // this one ends, so that it does not start from nothing.
    let mut budget: Option<usize> = None;
    loop {
        if server.is_none() {
            match lead(&dir, &sock) {
                Ok(Some((listener, lock))) => {
                    tracing::debug!(socket = %sock.display(), "host coordinator: serving");
                    server = Some(AbortOnDrop(tokio::spawn(serve(listener, lock))));
                }
                Ok(None) => {}
                Err(e) if !warned => {
                    warned = true;
                    tracing::warn!("host coordinator in {}: {e}; going on alone", dir.display());
                }
                Err(_) => {}
            }
        }
        if let Ok(Ok(s)) = timeout(WRITE, UnixStream::connect(&sock)).await {
            match client(s, &key, budget, reports.clone(), &grants, &peak).await {
                Ok(()) => {}
                Err(e) => tracing::debug!("host coordinator: {e}"),
            }
            // Alone until a coordinator answers again, with the budget
            // last heard (a copy whose peers left with the coordinator takes
            // it over).
            budget = grants.borrow().budget.or(budget);
            if grants.send_replace(Grant { budget, ..Grant::ALONE }).copies > 1 {
                tracing::info!("host coordinator gone: going on alone");
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Takes the coordinator's lock and binds its socket, or `None` when
/// another copy holds the lock.
fn lead(dir: &Path, sock: &Path) -> io::Result<Option<(UnixListener, std::fs::File)>> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    make_dir(dir)?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(dir.join("coord.lock"))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
        Err(std::fs::TryLockError::Error(e)) => return Err(e),
    }
    match std::fs::remove_file(sock) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(sock)?;
    std::fs::set_permissions(sock, std::fs::Permissions::from_mode(0o600))?;
    Ok(Some((listener, lock)))
}

/// Serves the socket while the lock is held.
async fn serve(listener: UnixListener, _lock: std::fs::File) {
    let budget = Arc::new(Mutex::new(HostBudget::new()));
    let mut copies = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => { copies.spawn(member(s, Arc::clone(&budget))); }
                Err(e) => {
                    tracing::debug!("host coordinator: accept: {e}");
                    tokio::time::sleep(RETRY).await;
                }
            },
            Some(_) = copies.join_next(), if !copies.is_empty() => {}
        }
    }
}

/// One copy's connection to the coordinator, until it ends or misbehaves.
async fn member(s: UnixStream, budget: Arc<Mutex<HostBudget>>) {
    let (mut rd, mut wr) = s.into_split();
    let mut dec = Decoder::new();
    let mut buf = [0u8; 1024];
    let mut id = None;
    'conn: loop {
        let n = match timeout(IDLE, rd.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => break,
        };
        dec.feed(&buf[..n]);
        while let Some(m) = dec.next() {
            let grant = {
                let mut b = budget.lock().unwrap_or_else(|p| p.into_inner());
                match (m, id) {
                    (Ok(Message::Hello { version: VERSION, key, budget }), None) => {
                        id = Some(b.join(&key, budget));
                        continue;
                    }
                    (Ok(Message::Report(r)), Some(i)) => b.report(i, r),
                    (other, _) => {
                        tracing::debug!("host coordinator: dropping a copy: {other:?}");
                        break 'conn;
                    }
                }
            };
            let line = Message::Grant(grant).encode();
            if !matches!(timeout(WRITE, wr.write_all(&line)).await, Ok(Ok(()))) {
                break 'conn;
            }
        }
    }
    if let Some(i) = id {
        budget.lock().unwrap_or_else(|p| p.into_inner()).leave(i);
    }
}

/// Writes one message, within [`WRITE`].
async fn send(wr: &mut tokio::net::unix::OwnedWriteHalf, m: Message) -> io::Result<()> {
    match timeout(WRITE, wr.write_all(&m.encode())).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "write timed out")),
    }
}

/// A copy's side: hello (with the `budget` last heard), then its
/// reports; grants come back.
async fn client(
    s: UnixStream,
    key: &str,
    budget: Option<usize>,
    mut reports: watch::Receiver<Option<CopyReport>>,
    grants: &watch::Sender<Grant>,
    peak: &AtomicUsize,
) -> io::Result<()> {
    let (mut rd, mut wr) = s.into_split();
    send(&mut wr, Message::hello(key, budget)).await?;
    let mut dec = Decoder::new();
    let mut buf = [0u8; 1024];
    let mut tick = tokio::time::interval(HEARTBEAT);
    let mut heard = Instant::now();
    let mut asked = false;
    loop {
        let report = tokio::select! {
            r = reports.changed() => {
                if r.is_err() { return Ok(()); }
                *reports.borrow_and_update()
            }
            _ = tick.tick() => {
                if asked && heard.elapsed() > SILENCE {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "the coordinator stopped answering"));
                }
                // A heartbeat repeats the state, not the room: room counts
                // once per interval, and the budget grows on fresh reports.
                reports.borrow().map(|r| CopyReport { room: false, ..r })
            }
            r = rd.read(&mut buf) => {
                let n = r?;
                if n == 0 { return Ok(()); }
                dec.feed(&buf[..n]);
                while let Some(m) = dec.next() {
                    match m {
                        Ok(Message::Grant(g)) => {
                            heard = Instant::now();
                            let Grant { ceiling, copies, .. } = g;
                            let copies = copies.max(1);
                            let before = grants.send_replace(Grant { copies, ..g });
                            peak.fetch_max(copies, Ordering::Relaxed);
                            if before.copies != copies {
                                tracing::info!(copies, ?ceiling, "host coordinator: copies on this path");
                            } else if before.budget != g.budget {
                                tracing::info!(budget = ?g.budget, ?ceiling, "host coordinator: the path's budget");
                            }
                        }
                        other => {
                            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("unexpected {other:?}")));
                        }
                    }
                }
                None
            }
        };
        if let Some(r) = report {
            if !asked {
                heard = Instant::now();
            }
            asked = true;
            send(&mut wr, Message::Report(r)).await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_keys_name_the_server() {
        assert_eq!(path_key("nbd://10.0.0.2:10809/disk"), "10.0.0.2:10809");
        assert_eq!(path_key("nbd://u@h:1/x?tls=on"), "h:1");
        assert_eq!(path_key("iscsi://h:3260/iqn.x/0"), "h:3260");
        assert_eq!(path_key("nbd+unix:///e?socket=/s"), "nbd+unix:///e?socket=/s");
    }

    async fn until(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Two links in one process: the first serves, both see two copies,
    /// and the budget the first set alone is split; when the first stops,
    /// the second takes over, is alone again, and splits the same budget
    /// with a third.
    #[tokio::test]
    async fn links_share_a_budget_and_survive_the_coordinator() {
        let dir = tempfile_dir();
        let a = HostLink::start(dir.clone(), "h:1".into());
        a.report(CopyReport { n: 8, goodput: 1000, settled: true, room: false, left: None });
        let alone = |g: Grant| g.copies == 1 && g.ceiling.is_none();
        until("the first copy alone", || alone(a.grant()) && dir.join("coord.sock").exists()).await;
        // Let the coordinator take the first copy's report before the second joins.
        tokio::time::sleep(HEARTBEAT * 2).await;
        let b = HostLink::start(dir.clone(), "h:1".into());
        b.report(CopyReport { n: 4, goodput: 1000, settled: false, room: false, left: None });
        until("two copies", || a.grant().copies == 2 && b.grant().copies == 2).await;
        a.report(CopyReport { n: 8, goodput: 1000, settled: true, room: false, left: None });
        until("the split", || a.grant().ceiling == Some(4) && b.grant().ceiling == Some(4)).await;
        assert_eq!((a.peak_copies(), b.peak_copies()), (2, 2));
        drop(a);
        until("the second alone", || alone(b.grant())).await;
        // It serves now: a third copy finds it.
        let c = HostLink::start(dir.clone(), "h:1".into());
        c.report(CopyReport { n: 2, goodput: 1, settled: false, room: false, left: None });
        b.report(CopyReport { n: 4, goodput: 1, settled: false, room: false, left: None });
        until("two copies again", || c.grant().copies == 2).await;
        // The budget of 8 the first copy set carried over to the new
        // coordinator: split at once, with no leader tuning again.
        until("the budget carried over", || b.grant().ceiling == Some(4) && c.grant().ceiling == Some(4))
            .await;
        assert_eq!(c.grant().budget, Some(8));
        // Both at their ceilings with room: the budget grows by a quarter.
        b.report(CopyReport { n: 4, goodput: 1, settled: true, room: true, left: None });
        c.report(CopyReport { n: 4, goodput: 1, settled: true, room: true, left: None });
        until("the budget grew", || b.grant().budget == Some(10) && c.grant().ceiling == Some(5)).await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("wanblk-host-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }
}
