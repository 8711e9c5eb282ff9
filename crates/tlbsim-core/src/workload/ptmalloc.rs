//! glibc's malloc (ptmalloc2) as the generators need it: where a program's `malloc` and
//! `free` put memory, and which whole pages a `free` gives back to the kernel, so that the
//! page faults and the madvise(MADV_DONTNEED) shootdowns of an allocation-heavy program
//! come from what its allocator does (issue 11, ABIS §5.4's PARSEC runs).
//!
//! Followed: glibc 2.23's malloc/malloc.c and malloc/arena.c (the C library of the ABIS
//! paper's era, Linux 4.5):
//! - **Thread arenas.** A thread's first malloc gives it an arena of its own while there are
//!   fewer than 8 × cores (arena_get2), each one heap of HEAP_MAX_SIZE = 64 MiB, reserved
//!   PROT_NONE and made read-write as it grows (grow_heap's mprotect: no flush). Here the
//!   heap is one read-write anonymous region; its untouched pages cost nothing.
//! - **Chunks.** A request takes `bytes + SIZE_SZ` rounded up to 16, at least MINSIZE = 32
//!   bytes. It is split from a free chunk (best fit, the lowest address on a tie) or else
//!   from the top chunk, the heap growing by what is missing (sysmalloc → grow_heap).
//! - **free** coalesces with free neighbours and with the top chunk. When the chunk it
//!   makes is at least FASTBIN_CONSOLIDATION_THRESHOLD (64 KiB), a thread arena runs
//!   heap_trim: the top beyond M_TOP_PAD (128 KiB, DEFAULT_TOP_PAD of glibc's
//!   malloc-machine.h) goes back in whole pages through shrink_heap, which is
//!   madvise(MADV_DONTNEED). 2.23's heap_trim has no trim-threshold test (that came in 2.26).
//!   The kernel unmaps and flushes those pages; their next use faults them in again.
//! - **Large requests** (≥ the mmap threshold, 128 KiB at first) get a mapping of their own;
//!   freeing one of at most DEFAULT_MMAP_THRESHOLD_MAX (32 MiB) raises the threshold to its
//!   size (the dynamic threshold). The caller maps and unmaps; [`MmapThreshold`] decides.
//!
//! Simplified: fastbins (chunks of ≤ 128 bytes freed without coalescing) are not kept
//! apart; ptmalloc's bins are one best-fit set; the main arena (brk, systrim) is not
//! modelled, as every thread here has an arena of its own; arena locks cost nothing.

use std::collections::BTreeMap;

const PAGE: u64 = 4096;
/// MINSIZE on 64-bit (4 × SIZE_SZ).
const MIN_CHUNK: u64 = 32;
/// FASTBIN_CONSOLIDATION_THRESHOLD: a free making a chunk this big tries to trim.
const CONSOLIDATION_THRESHOLD: u64 = 64 << 10;
/// M_TOP_PAD's default, 128 KiB (glibc sysdeps/generic/malloc-machine.h DEFAULT_TOP_PAD).
pub const TOP_PAD: u64 = 128 << 10;
/// HEAP_MAX_SIZE on 64-bit (2 × DEFAULT_MMAP_THRESHOLD_MAX).
pub const HEAP_BYTES: u64 = 64 << 20;
/// The heap's own header (heap_info) and the arena's malloc_state at its start: about
/// 2.2 KB on 64-bit, so the first chunk starts here.
const HEAP_HEADER: u64 = 0x8b0;

/// One thread arena's heap: byte offsets within its region.
#[derive(Clone, Debug)]
pub struct Arena {
    /// The heap's size (heap_info.size): the top chunk ends here.
    size: u64,
    /// Where the top chunk starts.
    top: u64,
    /// Free chunks other than the top one: offset → size.
    free: BTreeMap<u64, u64>,
    /// Chunks in use: offset → size.
    used: BTreeMap<u64, u64>,
}

/// Whole pages a call gave back to the kernel: `[offset, offset + len)` of the arena's
/// region, released by madvise(MADV_DONTNEED).
pub type Released = Option<(u64, u64)>;

impl Default for Arena {
    fn default() -> Self {
        Self::new()
    }
}

impl Arena {
    /// A new arena (\_int_new_arena): its heap made read-write for the header and the top pad.
    pub fn new() -> Self {
        Arena { size: (HEAP_HEADER + TOP_PAD).div_ceil(PAGE) * PAGE, top: HEAP_HEADER, free: BTreeMap::new(), used: BTreeMap::new() }
    }

    fn chunk_size(bytes: u64) -> u64 {
        (bytes + 8).div_ceil(16).max(2) * 16
    }

    /// malloc(bytes) below the mmap threshold: the chunk's offset (the user's pointer is
    /// 16 bytes on), or None if the 64 MiB heap is full (glibc would make another heap).
    pub fn malloc(&mut self, bytes: u64) -> Option<u64> {
        let need = Self::chunk_size(bytes);
        let fit = self.free.iter().filter(|&(_, &s)| s >= need).min_by_key(|&(&o, &s)| (s, o)).map(|(&o, &s)| (o, s));
        if let Some((offset, size)) = fit {
            self.free.remove(&offset);
            let rest = size - need;
            if rest >= MIN_CHUNK {
                self.free.insert(offset + need, rest);
                self.used.insert(offset, need);
            } else {
                self.used.insert(offset, size);
            }
            return Some(offset);
        }
        let offset = self.top;
        if offset + need + MIN_CHUNK > self.size {
            // grow_heap by what is missing, in whole pages.
            let size = (offset + need + MIN_CHUNK).div_ceil(PAGE) * PAGE;
            if size > HEAP_BYTES {
                return None;
            }
            self.size = size;
        }
        self.top = offset + need;
        self.used.insert(offset, need);
        Some(offset)
    }

    /// The bytes the chunk at `offset` spans (its whole chunk, header included).
    pub fn extent(&self, offset: u64) -> u64 {
        self.used[&offset]
    }

    /// free() of the chunk at `offset`; the pages heap_trim gave back, if any.
    pub fn free(&mut self, offset: u64) -> Released {
        let size = self.used.remove(&offset).expect("free of a chunk not in use");
        self.release(offset, size)
    }

    /// realloc() to fewer bytes, in place (\_int_realloc splits off the tail and frees it).
    pub fn shrink(&mut self, offset: u64, bytes: u64) -> Released {
        let size = self.used[&offset];
        let need = Self::chunk_size(bytes);
        if size < need + MIN_CHUNK {
            return None;
        }
        self.used.insert(offset, need);
        self.release(offset + need, size - need)
    }

    /// Coalesce the free chunk `[offset, offset + size)` and trim if it is big enough.
    fn release(&mut self, mut offset: u64, mut size: u64) -> Released {
        if let Some((&before, &s)) = self.free.range(..offset).next_back() {
            if before + s == offset {
                self.free.remove(&before);
                offset = before;
                size += s;
            }
        }
        if offset + size == self.top {
            self.top = offset;
            size = self.size - offset;
        } else {
            if let Some(s) = self.free.remove(&(offset + size)) {
                size += s;
            }
            self.free.insert(offset, size);
        }
        if size < CONSOLIDATION_THRESHOLD {
            return None;
        }
        // heap_trim: extra = (top_size - pad - MINSIZE - 1) & ~(pagesz - 1), if a page or more.
        let top_size = self.size - self.top;
        let extra = top_size.saturating_sub(TOP_PAD + MIN_CHUNK + 1) / PAGE * PAGE;
        if extra < PAGE {
            return None;
        }
        self.size -= extra;
        Some((self.size, extra))
    }

    /// Bytes from the heap's start to the top chunk's end (what the heap spans now).
    pub fn heap_size(&self) -> u64 {
        self.size
    }
}

/// The dynamic mmap threshold (M_MMAP_THRESHOLD and its adjustment in free).
#[derive(Clone, Debug)]
pub struct MmapThreshold(pub u64);

impl Default for MmapThreshold {
    fn default() -> Self {
        // DEFAULT_MMAP_THRESHOLD_MIN, 128 KiB.
        MmapThreshold(128 << 10)
    }
}

impl MmapThreshold {
    /// Whether malloc(bytes) maps a region of its own.
    pub fn maps(&self, bytes: u64) -> bool {
        bytes >= self.0
    }

    /// free() of a mapped chunk of `bytes`: munmap, and a chunk above the threshold and at
    /// most DEFAULT_MMAP_THRESHOLD_MAX (32 MiB) becomes the new threshold.
    pub fn unmapped(&mut self, bytes: u64) {
        if bytes > self.0 && bytes <= 32 << 20 {
            self.0 = bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_come_from_the_top_and_freed_ones_are_reused() {
        let mut a = Arena::new();
        let x = a.malloc(100).unwrap();
        let y = a.malloc(100).unwrap();
        assert_eq!(x, HEAP_HEADER);
        assert_eq!(y, x + 112);
        assert_eq!(a.free(x), None);
        // Best fit: the freed 112-byte chunk serves a 96-byte request.
        assert_eq!(a.malloc(90).unwrap(), x);
    }

    #[test]
    fn a_free_next_to_the_top_trims_what_exceeds_the_pad_in_whole_pages() {
        let mut a = Arena::new();
        let keep = a.malloc(1000).unwrap();
        let big: Vec<u64> = (0..4).map(|_| a.malloc(65536).unwrap()).collect();
        let size = a.heap_size();
        // Freed from the top down, as zlib's deflateEnd frees its buffers: the first frees
        // leave the top under the pad, then each one gives back what exceeds it.
        let mut released = 0;
        for &o in big.iter().rev() {
            if let Some((at, len)) = a.free(o) {
                assert_eq!(at % PAGE, 0);
                assert_eq!(len % PAGE, 0);
                assert_eq!(at + len, size - released);
                released += len;
            }
        }
        let top_size = a.heap_size() - (keep + 1008);
        assert!(top_size > TOP_PAD && top_size <= TOP_PAD + MIN_CHUNK + PAGE, "top {top_size}");
        assert!(released >= 4 * 65536 - TOP_PAD - PAGE, "released {released}");
    }

    #[test]
    fn a_free_below_live_chunks_gives_nothing_back() {
        let mut a = Arena::new();
        let low = a.malloc(200_000 - 8).unwrap();
        let _live = a.malloc(100).unwrap();
        assert_eq!(a.free(low), None);
        assert_eq!(a.malloc(150_000).unwrap(), low);
    }

    #[test]
    fn shrinking_in_place_frees_the_tail() {
        let mut a = Arena::new();
        let x = a.malloc(300_000).unwrap();
        let end = a.heap_size();
        let r = a.shrink(x, 1000).unwrap();
        assert_eq!(r.0 + r.1, end);
        assert_eq!(a.extent(x), 1008);
    }

    #[test]
    fn the_mmap_threshold_rises_to_a_freed_mapping_up_to_32_mib() {
        let mut t = MmapThreshold::default();
        assert!(t.maps(128 << 10) && !t.maps((128 << 10) - 1));
        t.unmapped(1 << 20);
        assert!(!t.maps(1 << 19) && t.maps(1 << 20));
        t.unmapped(128 << 20);
        assert_eq!(t.0, 1 << 20);
    }
}
