//! The C allocator's handling of freed memory.
//!
//! Every read request gets a fresh buffer of up to `--request-size` bytes
//! that the destination frees once it has written it. glibc serves such
//! blocks with `mmap` (up to its dynamic threshold) and gives freed memory
//! back to the kernel once the top of a heap holds more than its trim
//! threshold, so the next buffer of the same size faults its pages in
//! again, and the kernel zeroes each page before the socket data overwrites
//! it (measured: page faults, `clear_page` and `madvise` took about a fifth
//! of the client's CPU in a loopback copy; docs/results/cpu). Keeping freed
//! memory in the process lets the next request reuse the same pages.

/// Largest block glibc serves from its heaps instead of `mmap`: requests of
/// up to this size are reused after a free (glibc's own limit for the
/// setting on 64-bit: half of a 64 MiB heap).
pub const KEEP_BLOCKS_UP_TO: usize = 32 << 20;

/// Freed memory glibc keeps at the top of a heap before giving it back.
const TRIM_ABOVE: usize = 1 << 30;

/// Asks the C allocator to keep freed blocks of up to
/// [`KEEP_BLOCKS_UP_TO`] bytes for reuse instead of returning them to the
/// kernel. Call once at start, before threads allocate. Returns whether the
/// allocator took the settings (always false outside glibc).
pub fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let int = |v: usize| libc::c_int::try_from(v).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only changes allocator parameters; both are
        // documented integer settings with values in their valid range (the
        // mmap threshold at most HEAP_MAX_SIZE / 2 on 64-bit).
        let mmap = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, int(KEEP_BLOCKS_UP_TO)) };
        // SAFETY: as above.
        let trim = unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, int(TRIM_ABOVE)) };
        mmap == 1 && trim == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_the_settings() {
        assert!(super::keep_freed_memory());
    }
}
