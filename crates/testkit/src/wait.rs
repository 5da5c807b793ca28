//! Every wait a test does has a deadline, so a hang fails the test instead
//! of blocking CI: commands run with a timeout and are killed by PID (only
//! the ones the test started) when it passes; threads are joined with one,
//! and their panics fail the test.
//!
//! The messages name what was waited for and the timeout.

use std::io::{self, Read};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long [`crate::run`] lets a command run: far more than any tool the
/// tests run needs on a busy 2-core machine (the longest take seconds),
/// far less than CI's budget.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a command's output pipes may stay open after the command
/// ended (a daemon it forked could hold them): then what was read is kept.
const PIPE_GRACE: Duration = Duration::from_secs(5);

/// A command a test started, with stdout and stderr captured (stdin
/// closed). If it is dropped before [`Running::wait`] returned, the
/// process is killed by its PID and reaped.
#[derive(Debug)]
pub struct Running {
    child: Option<Child>,
    what: String,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> Option<JoinHandle<Vec<u8>>> {
    pipe.map(|mut p| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = p.read_to_end(&mut buf);
            buf
        })
    })
}

/// Joins a pipe reader if it ends within `grace`; an empty buffer if not.
fn collect(h: Option<JoinHandle<Vec<u8>>>, grace: Duration) -> Vec<u8> {
    let Some(h) = h else { return Vec::new() };
    let deadline = Instant::now() + grace;
    while !h.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    if h.is_finished() { h.join().unwrap_or_default() } else { Vec::new() }
}

impl Running {
    /// Starts `cmd` with stdin closed and stdout and stderr captured.
    ///
    /// # Errors
    /// The program cannot be started.
    pub fn try_start(cmd: &mut Command) -> io::Result<Running> {
        let what = format!("{cmd:?}");
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        Ok(Running { child: Some(child), what, stdout, stderr })
    }

    /// Like [`Running::try_start`].
    ///
    /// # Panics
    /// The program cannot be started.
    pub fn start(cmd: &mut Command) -> Running {
        Running::try_start(cmd).unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits for the command to end and returns its exit status and
    /// output. After `timeout` it is killed (by PID) and reaped, and the
    /// error (kind [`io::ErrorKind::TimedOut`]) names the command, the
    /// timeout and what it printed.
    ///
    /// # Errors
    /// The timeout passed, or waiting failed.
    pub fn try_wait(mut self, timeout: Duration) -> io::Result<Output> {
        let mut child = self.child.take().expect("a Running has its child until it is waited for");
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(st) = child.try_wait()? {
                break Some(st);
            }
            if Instant::now() >= deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let Some(status) = status else {
            let pid = child.id();
            let _ = child.kill();
            let _ = child.wait();
            let stdout = collect(self.stdout.take(), PIPE_GRACE);
            let stderr = collect(self.stderr.take(), PIPE_GRACE);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{} did not finish within {timeout:?}: killed it (pid {pid})\nstdout: {}\nstderr: {}",
                    self.what,
                    String::from_utf8_lossy(&stdout),
                    String::from_utf8_lossy(&stderr)
                ),
            ));
        };
        let stdout = collect(self.stdout.take(), PIPE_GRACE);
        let stderr = collect(self.stderr.take(), PIPE_GRACE);
        Ok(Output { status, stdout, stderr })
    }

    /// Like [`Running::try_wait`].
    ///
    /// # Panics
    /// After `timeout` (the command is killed first), with the command,
    /// the timeout and its output in the message.
    pub fn wait(self, timeout: Duration) -> Output {
        self.try_wait(timeout).unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take()
            && child.try_wait().ok().flatten().is_none()
        {
            eprintln!("testkit: killing {} (pid {}): the test ended before it did", self.what, child.id());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `cmd` (stdin closed, output captured) and returns its exit status
/// and output, whatever the status.
///
/// # Errors
/// The program cannot be started, or it ran longer than `timeout` (it is
/// killed by PID first; the error, of kind [`io::ErrorKind::TimedOut`],
/// names the command and the timeout).
pub fn output_within(cmd: &mut Command, timeout: Duration) -> io::Result<Output> {
    Running::try_start(cmd)?.try_wait(timeout)
}

/// Runs `cmd` (stdin closed, output captured) and returns its exit status
/// and output, whatever the status.
///
/// # Panics
/// The program cannot be started, or it ran longer than `timeout` (it is
/// killed by PID first; the message names the command and the timeout).
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    Running::start(cmd).wait(timeout)
}

/// Waits for a child the test started (e.g. in a network namespace) to exit.
///
/// # Panics
/// After `timeout` (the child is killed by PID and reaped first), naming
/// `what` and the timeout; or if waiting fails.
pub fn wait_child(child: &mut Child, timeout: Duration, what: &str) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return st,
            Ok(None) if Instant::now() >= deadline => {
                let pid = child.id();
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what} did not finish within {timeout:?}: killed it (pid {pid})");
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    }
}

/// The message of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic without a message)".to_string())
}

/// Joins a thread the test started and returns its result.
///
/// # Errors
/// The thread did not end within `timeout` (it is left running: threads
/// cannot be killed; make what it waits on end with the test), or it
/// panicked; the message names `what`, the timeout or the panic.
pub fn try_join_within<T>(h: JoinHandle<T>, timeout: Duration, what: &str) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    while !h.is_finished() {
        if Instant::now() >= deadline {
            return Err(format!("{what} did not finish within {timeout:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    h.join().map_err(|p| format!("{what} panicked: {}", panic_message(&*p)))
}

/// Like [`try_join_within`].
///
/// # Panics
/// The thread did not end within `timeout`, or it panicked.
pub fn join_within<T>(h: JoinHandle<T>, timeout: Duration, what: &str) -> T {
    try_join_within(h, timeout, what).unwrap_or_else(|e| panic!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_that_hangs_is_killed_and_named() {
        let started = Instant::now();
        let r = Running::start(Command::new("sleep").arg("30"));
        let pid = r.pid();
        let e = r.try_wait(Duration::from_millis(300)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let msg = e.to_string();
        assert!(
            msg.contains("\"sleep\" \"30\"") && msg.contains("300ms") && msg.contains(&pid.to_string()),
            "{msg}"
        );
        assert!(started.elapsed() < Duration::from_secs(20), "waited for the command instead of killing it");
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "pid {pid} was not reaped");
    }

    #[test]
    fn a_command_that_ends_gives_its_output() {
        let out =
            run_with_timeout(Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]), RUN_TIMEOUT);
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    fn dropping_a_running_command_kills_it() {
        let r = Running::start(Command::new("sleep").arg("30"));
        let pid = r.pid();
        drop(r);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "pid {pid} still exists");
    }

    #[test]
    fn a_thread_panic_is_reported() {
        let h = std::thread::spawn(|| panic!("fake server broke"));
        let e = try_join_within(h, Duration::from_secs(10), "the fake server").unwrap_err();
        assert!(e.contains("the fake server panicked: fake server broke"), "{e}");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            let _ = rx.recv();
        });
        let e = try_join_within(h, Duration::from_millis(100), "the waiter").unwrap_err();
        assert!(e.contains("the waiter did not finish within 100ms"), "{e}");
        drop(tx);
    }
}
