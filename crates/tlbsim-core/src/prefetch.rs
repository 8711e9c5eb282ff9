//! Host-cache prefetch hints. They change no simulated state; they only let the host CPU
//! overlap the cache misses that large simulated structures (page tables of a 16 GiB
//! mapping, a 32 K-line page-table cache) cause.

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
