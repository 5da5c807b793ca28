//! Scheduling of the calling thread: CPU affinity, `SCHED_FIFO`, timer
//! slack, and its CPU time.

use std::io;

fn cvt(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Number of CPUs this process may run on.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Pins the calling thread to the given CPUs.
///
/// # Errors
/// `EINVAL` if none of them exists or is allowed.
pub fn set_thread_affinity(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: `c` < CPU_SETSIZE (checked above), so the bit lies inside `set`.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; `set` is a live cpu_set_t of the size passed.
    cvt(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) })
}

/// Puts the calling thread under `SCHED_FIFO` at `priority` (1..=99).
///
/// # Errors
/// `EPERM` without `CAP_SYS_NICE`, `EINVAL` for a bad priority.
pub fn set_thread_fifo(priority: i32) -> io::Result<()> {
    let p = libc::sched_param { sched_priority: priority };
    // SAFETY: pid 0 is the calling thread; `p` is a live sched_param.
    cvt(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) })
}

/// Sets the calling thread's timer slack in ns (how late the kernel may
/// coalesce its timer wake-ups; the default is 50 us, RT threads ignore it).
///
/// # Errors
/// The `prctl` error.
pub fn set_timer_slack_ns(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long value and no pointers.
    cvt(unsafe {
        libc::prctl(
            libc::PR_SET_TIMERSLACK,
            ns as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })
}

/// CPU time consumed by the calling thread, ns (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// `CLOCK_MONOTONIC` in ns.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` in ns since the Unix epoch.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live, writable timespec; the clock ids used are valid,
    // so clock_gettime cannot fail.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Sleeps until `CLOCK_MONOTONIC` reaches `deadline_ns` (absolute
/// `clock_nanosleep`; returns early on a signal).
pub fn sleep_until_monotonic_ns(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `ts` is a valid timespec; the remainder pointer may be null with TIMER_ABSTIME.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
}

/// The kernel thread id of the calling thread.
pub fn gettid() -> u32 {
    // SAFETY: gettid(2) has no arguments and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// The effective user id of the process.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_advance_and_sleep_reaches_the_deadline() {
        let a = monotonic_ns();
        sleep_until_monotonic_ns(a + 2_000_000);
        let b = monotonic_ns();
        assert!(b >= a + 2_000_000);
        assert!(realtime_ns() > 1_500_000_000_000_000_000);
        let c0 = thread_cpu_time_ns();
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_time_ns() > c0);
        assert!(gettid() > 0);
    }

    #[test]
    fn affinity_to_cpu_zero_and_timer_slack() {
        std::thread::spawn(|| {
            set_thread_affinity(&[0]).unwrap();
            set_timer_slack_ns(1).unwrap();
            assert!(set_thread_affinity(&[libc::CPU_SETSIZE as usize]).is_err());
        })
        .join()
        .unwrap();
    }
}
