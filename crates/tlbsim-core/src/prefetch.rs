//! Host-memory hints. They change no simulated state; they only let the host CPU overlap
//! the cache misses that large simulated structures (page tables of a 16 GiB mapping, a
//! 32 K-line page-table cache) cause, and the host kernel fault in a growing arena in bulk.

#[inline(always)]
pub fn read<T>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint; it never faults, even on an invalid address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const T as *const i8, std::arch::x86_64::_MM_HINT_T0)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Fault in, writable, the host pages wholly inside `[start, start + bytes)` now, in one
/// system call, instead of one host page fault per page when each is first written. Linux
/// 5.14+ (`MADV_POPULATE_WRITE`); elsewhere, or where the kernel refuses, nothing happens
/// and the pages fault in on first use as before. Contents are unchanged (fresh anonymous
/// memory stays zero). On a KVM guest the arena's first writes were 60% of the random
/// first-touch stream's time (`perf`); in bulk the kernel still allocates and zeroes each
/// page, but the exception round trip per page is gone (0.31 → 0.46 M faults/s here).
pub fn populate_write(start: *const u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        const MADV_POPULATE_WRITE: i32 = 23;
        extern "C" {
            fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
        }
        let first = (start as usize).next_multiple_of(4096);
        let end = (start as usize + bytes) & !4095;
        if end > first {
            // SAFETY: the range lies inside an allocation the caller owns; populating
            // reads or changes no byte of it. A refusal (EINVAL on older kernels) is fine.
            unsafe {
                madvise(first as *mut std::ffi::c_void, end - first, MADV_POPULATE_WRITE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, bytes);
}
