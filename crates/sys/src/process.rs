//! Signals to processes wanblk started itself.

use std::io;

/// Sends signal `sig` (e.g. `libc::SIGTERM`) to process `pid`.
///
/// Callers only signal processes they spawned and still own (not yet reaped),
/// so the pid cannot have been recycled.
///
/// # Errors
/// `ESRCH` if there is no such process, `EINVAL` for a bad signal, or a pid
/// that does not fit a `pid_t`.
pub fn signal(pid: u32, sig: i32) -> io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    if pid <= 0 {
        // 0 and negatives address process groups: never what a caller means here.
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: kill(2) takes plain integers and has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc != 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

pub use libc::{SIGINT, SIGKILL, SIGTERM};

/// CPU time this process has used so far: (user, system), from `getrusage(RUSAGE_SELF)`.
///
/// # Errors
/// The `getrusage` error (not expected on Linux).
pub fn self_cpu_time() -> io::Result<(std::time::Duration, std::time::Duration)> {
    rusage(libc::RUSAGE_SELF)
}

/// CPU time used by this process's children that have ended and been
/// waited for (and their waited-for descendants): (user, system).
///
/// # Errors
/// The `getrusage` error (not expected on Linux).
pub fn children_cpu_time() -> io::Result<(std::time::Duration, std::time::Duration)> {
    rusage(libc::RUSAGE_CHILDREN)
}

fn rusage(who: libc::c_int) -> io::Result<(std::time::Duration, std::time::Duration)> {
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a live, writable rusage the kernel fills in.
    let rc = unsafe { libc::getrusage(who, &mut ru) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let tv = |t: libc::timeval| {
        std::time::Duration::from_secs(t.tv_sec.max(0) as u64)
            + std::time::Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Ok((tv(ru.ru_utime), tv(ru.ru_stime)))
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, the unit of /proc times).
pub fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf takes an integer name and has no memory-safety preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 { v as u64 } else { 100 }
}

/// CPU time (user + system) process `pid` has used, from `/proc/PID/stat`.
///
/// # Errors
/// The process does not exist, or the file is malformed.
pub fn proc_cpu_time(pid: u32) -> io::Result<std::time::Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).ok_or_else(|| io::Error::other("malformed stat"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime field 15.
    let num = |i: usize| {
        f.get(i).and_then(|v| v.parse::<u64>().ok()).ok_or_else(|| io::Error::other("malformed stat"))
    };
    let ticks = num(11)? + num(12)?;
    Ok(std::time::Duration::from_secs_f64(ticks as f64 / clock_ticks_per_sec() as f64))
}

/// Makes the child started by `cmd` receive SIGTERM when the thread that
/// spawned it exits (`PR_SET_PDEATHSIG`), so helpers such as a benchmark's
/// target never outlive a killed parent.
pub fn terminate_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and only
    // calls prctl(2), which is async-signal-safe, with plain integer
    // arguments; it allocates nothing and touches no parent state.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The first file descriptor systemd socket activation passes
/// (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: i32 = 3;

/// Makes the child started by `cmd` find `fd` (a listening socket) as file
/// descriptor 3, without close-on-exec, as systemd socket activation
/// passes it. The caller sets `LISTEN_FDS=1` and arranges `LISTEN_PID` (the
/// child's own pid, known only in the child).
///
/// `fd` must stay open in the parent until `spawn` returns.
pub fn pass_listen_fd(cmd: &mut std::process::Command, fd: std::os::fd::RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and only
    // calls dup2(2) and fcntl(2), both async-signal-safe, on integer file
    // descriptors; it allocates nothing and touches no parent state. `fd`
    // is open in the parent when it forks (the caller's contract), so it
    // is open in the child.
    unsafe {
        cmd.pre_exec(move || {
            if fd == LISTEN_FDS_START {
                // dup2 onto itself keeps close-on-exec: clear it instead.
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            } else if libc::dup2(fd, LISTEN_FDS_START) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Host-wide CPU ticks from the first line of `/proc/stat`: (all ticks,
/// steal ticks). Steal is time the hypervisor gave this VM's CPUs to
/// someone else; benchmarks record its share so a noisy run shows as one.
///
/// # Errors
/// `/proc/stat` unreadable or malformed.
pub fn host_cpu_ticks() -> io::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    parse_host_cpu_ticks(&stat).ok_or_else(|| io::Error::other("malformed /proc/stat"))
}

fn parse_host_cpu_ticks(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().next()?;
    let mut f = line.split_whitespace();
    if f.next()? != "cpu" {
        return None;
    }
    // user nice system idle iowait irq softirq steal [guest guest_nice]:
    // guest time is already counted in user and nice, so stop at steal.
    let v: Vec<u64> = f.take(8).map(|x| x.parse().ok()).collect::<Option<_>>()?;
    (v.len() == 8).then(|| (v.iter().sum(), v[7]))
}

/// Raises this process's soft limit on open descriptors (RLIMIT_NOFILE)
/// to `want`, or to the hard limit if that is lower; returns the new soft
/// limit.
///
/// # Errors
/// getrlimit/setrlimit failed.
pub fn raise_nofile(want: u64) -> std::io::Result<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit through a pointer to a live local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let target = want.min(r.rlim_max);
    if r.rlim_cur < target {
        r.rlim_cur = target;
        // SAFETY: setrlimit reads one rlimit through a pointer to a live local.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(r.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_cpu_ticks_parse() {
        let s = "cpu  10 1 5 100 2 0 3 7 4 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(parse_host_cpu_ticks(s), Some((128, 7)));
        assert_eq!(parse_host_cpu_ticks("cpu 1 2 3\n"), None);
        assert_eq!(parse_host_cpu_ticks("intr 1 2 3 4 5 6 7 8\n"), None);
        assert_eq!(parse_host_cpu_ticks(""), None);
        let (all, steal) = host_cpu_ticks().unwrap();
        assert!(all > 0 && steal <= all);
    }

    #[test]
    fn cpu_times_are_readable_and_consistent() {
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        let (u, s) = self_cpu_time().unwrap();
        assert!(u + s > std::time::Duration::ZERO);
        let proc = proc_cpu_time(std::process::id()).unwrap();
        // /proc counts in ticks (10 ms): the two agree within a few ticks.
        assert!(proc <= u + s + std::time::Duration::from_millis(50), "{proc:?} vs {:?}", u + s);
        assert!(proc_cpu_time(0).is_err());
        assert!(clock_ticks_per_sec() >= 1);
    }
}
