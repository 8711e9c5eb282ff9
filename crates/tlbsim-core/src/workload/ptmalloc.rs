//! glibc's malloc (ptmalloc2): where a program's `malloc` and `free` put memory, and which
//! whole pages a `free` gives back to the kernel, so that the page faults and the
//! madvise(MADV_DONTNEED) shootdowns of an allocation-heavy program come from what its
//! allocator does (issue 11, ABIS §5.4's PARSEC runs). The engine runs it (issue 46 item 6):
//! `Op::Malloc`, `Op::Free` and `Op::Realloc` act on the process's [`Allocator`] when the
//! thread executes them, so the order of the calls is the run's, frees by a thread other
//! than the allocating one included (os/alloc.rs makes the system calls it asks for).
//!
//! Followed: glibc 2.23's malloc/malloc.c and malloc/arena.c (the C library of the ABIS
//! paper's era, Linux 4.5), and where they differ for trims, 2.26 and later (2.36 is this
//! machine's, [`Glibc`]):
//! - **Thread arenas.** A thread's first malloc gives it an arena (arena_get2): one from
//!   the free list (arenas of threads that exited, arena_thread_freeres) if there is one,
//!   else a new one while there are fewer than 8 × cores (NARENAS_FROM_NCORES on 64-bit),
//!   else an existing one in turn (reuse_arena's next_to_use). Each is one heap of
//!   HEAP_MAX_SIZE = 64 MiB, reserved PROT_NONE and made read-write as it grows (grow_heap's
//!   mprotect: no flush). Here the heap is one read-write anonymous mapping made at the
//!   arena's creation (new_heap's mmap; its alignment munmaps and mprotects are not made);
//!   its untouched pages cost nothing.
//! - **free goes to the chunk's arena** (arena_for_chunk: the heap_info at the chunk's
//!   64 MiB-aligned base), whichever thread frees it.
//! - **Chunks.** A request takes `bytes + SIZE_SZ` rounded up to 16, at least MINSIZE = 32
//!   bytes. It is split from a free chunk (best fit, the lowest address on a tie) or else
//!   from the top chunk, the heap growing by what is missing (sysmalloc → grow_heap).
//! - **free** coalesces with free neighbours and with the top chunk. When the chunk it
//!   makes is at least FASTBIN_CONSOLIDATION_THRESHOLD (64 KiB), a thread arena runs
//!   heap_trim: the top beyond M_TOP_PAD (128 KiB, DEFAULT_TOP_PAD of glibc's
//!   malloc-machine.h) goes back in whole pages through shrink_heap, which is
//!   madvise(MADV_DONTNEED). 2.23's heap_trim has no trim-threshold test; 2.26 added one
//!   (heap_trim returns unless the top chunk is at least mp_.trim_threshold, 128 KiB at
//!   first and twice the mmap threshold once that has risen, see below). As the pad is
//!   128 KiB, the test only changes anything once the threshold has risen.
//!   The kernel unmaps and flushes those pages; their next use faults them in again.
//! - **Large requests** (≥ the mmap threshold, 128 KiB at first) get a mapping of their own;
//!   freeing one of at most DEFAULT_MMAP_THRESHOLD_MAX (32 MiB) raises the threshold to its
//!   size and the trim threshold to twice that (the dynamic threshold, in free). The
//!   caller maps and unmaps; [`MmapThreshold`] decides.
//!
//! Simplified: fastbins (chunks of ≤ 128 bytes freed without coalescing) are not kept
//! apart; ptmalloc's bins are one best-fit set; a large request is mapped even when the
//! top chunk could hold it (sysmalloc is reached only when it cannot); 2.26's tcache
//! (frees of chunks up to 1,032 bytes kept by the freeing thread) is not modelled, so a
//! 2.36 run is right only for larger chunks; the main arena (brk, systrim) is not modelled,
//! as every thread here gets a thread arena; an arena outgrowing its heap is an error
//! (glibc would chain another heap); arena locks cost nothing.

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

/// The C library whose malloc runs (the differences that matter to trims: module header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Glibc {
    /// glibc 2.23 (2016; the ABIS paper's era): heap_trim without a trim-threshold test.
    V2_23,
    /// glibc 2.26 and later (2.36 is Debian 12's): heap_trim returns while the top chunk is
    /// under mp_.trim_threshold. The default: today's Linux.
    #[default]
    V2_26,
}

impl Glibc {
    /// The version as a config value names it.
    pub fn parse(key: &str, v: &str) -> crate::error::Result<Glibc> {
        match v {
            "2.23" => Ok(Glibc::V2_23),
            "2.26" | "2.36" | "" => Ok(Glibc::V2_26),
            _ => Err(crate::error::Error::config(key, format!("{v:?} is not a modelled glibc: use \"2.23\" or \"2.36\" (any 2.26 or later)"))),
        }
    }
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

    /// free() of the chunk at `offset`; the pages heap_trim gave back, if any, under glibc
    /// 2.23 (no trim-threshold test).
    pub fn free(&mut self, offset: u64) -> Released {
        self.free_with(offset, None)
    }

    /// free() of the chunk at `offset` with heap_trim's trim-threshold test (2.26+:
    /// `Some(mp_.trim_threshold)`) or without it (2.23: None).
    pub fn free_with(&mut self, offset: u64, trim_threshold: Option<u64>) -> Released {
        let size = self.used.remove(&offset).expect("free of a chunk not in use");
        self.release(offset, size, trim_threshold)
    }

    /// Whether a chunk starts at `offset` and is in use.
    pub fn in_use(&self, offset: u64) -> bool {
        self.used.contains_key(&offset)
    }

    /// realloc() to fewer bytes, in place (\_int_realloc splits off the tail and frees it).
    pub fn shrink(&mut self, offset: u64, bytes: u64) -> Released {
        self.shrink_with(offset, bytes, None)
    }

    /// [`Arena::shrink`] with heap_trim's trim-threshold test or without it (as `free_with`).
    pub fn shrink_with(&mut self, offset: u64, bytes: u64, trim_threshold: Option<u64>) -> Released {
        let size = self.used[&offset];
        let need = Self::chunk_size(bytes);
        if size < need + MIN_CHUNK {
            return None;
        }
        self.used.insert(offset, need);
        self.release(offset + need, size - need, trim_threshold)
    }

    /// Coalesce the free chunk `[offset, offset + size)` and trim if it is big enough.
    fn release(&mut self, mut offset: u64, mut size: u64, trim_threshold: Option<u64>) -> Released {
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
        // heap_trim: extra = (top_size - pad - MINSIZE - 1) & ~(pagesz - 1), if a page or more
        // (2.26+: only once top_size reaches mp_.trim_threshold).
        let top_size = self.size - self.top;
        if trim_threshold.is_some_and(|t| top_size < t) {
            return None;
        }
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
    /// most DEFAULT_MMAP_THRESHOLD_MAX (32 MiB) becomes the new threshold (true then).
    pub fn unmapped(&mut self, bytes: u64) -> bool {
        if bytes > self.0 && bytes <= 32 << 20 {
            self.0 = bytes;
            return true;
        }
        false
    }
}

/// DEFAULT_TRIM_THRESHOLD, 128 KiB (malloc.c): mp_.trim_threshold until the mmap
/// threshold rises.
const TRIM_THRESHOLD: u64 = 128 << 10;

/// sizeof(tcache_perthread_struct) in glibc 2.36 (TCACHE_MAX_BINS = 64).
const TCACHE_STRUCT: u64 = 64 * 2 + 64 * 8;

/// What a pointer of the program names (the engine's pointer table, `Op::Malloc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chunk {
    /// A chunk of arena `arena`'s heap at byte `offset` of it; the user's pointer is 16
    /// bytes on; `bytes` asked for.
    Heap { arena: usize, offset: u64, bytes: u64 },
    /// A chunk mapped on its own (`len` bytes at `va`); the user's pointer is 16 bytes on.
    Mapped { va: u64, len: u64, bytes: u64 },
}

/// What a free (or a shrinking realloc) asks of the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freed {
    Nothing,
    /// heap_trim's shrink_heap: madvise(MADV_DONTNEED) of `[va, va + len)`.
    Dontneed {
        va: u64,
        len: u64,
    },
    /// munmap_chunk: munmap of `[va, va + len)`.
    Munmap {
        va: u64,
        len: u64,
    },
}

/// One process's malloc state as the engine runs it: its thread arenas (each a heap at a
/// virtual address the engine mapped), which thread uses which, the dynamic thresholds and
/// the program's pointers (named by index: `Op::Malloc` writes one, `Op::Free` of any
/// thread reads it).
#[derive(Clone, Debug)]
pub struct Allocator {
    pub glibc: Glibc,
    /// Arenas: their heap's base address, their state, the threads attached to them.
    arenas: Vec<(u64, Arena, u32)>,
    /// thread_arena: each thread's arena (engine thread index → arena index).
    of_thread: BTreeMap<usize, usize>,
    /// free_list: arenas no thread is attached to (their threads exited), last in first out.
    free_list: Vec<usize>,
    /// reuse_arena's next_to_use.
    next_to_use: usize,
    pub threshold: MmapThreshold,
    /// mp_.trim_threshold (heap_trim's test from 2.26 on).
    trim_threshold: u64,
    pointers: Vec<Option<Chunk>>,
}

impl Allocator {
    /// A process's allocator before its first malloc, with `pointers` pointer names.
    pub fn new(glibc: Glibc, pointers: usize) -> Self {
        Allocator {
            glibc,
            arenas: Vec::new(),
            of_thread: BTreeMap::new(),
            free_list: Vec::new(),
            next_to_use: 0,
            threshold: MmapThreshold::default(),
            trim_threshold: TRIM_THRESHOLD,
            pointers: vec![None; pointers],
        }
    }

    /// The arena `thread` uses, if it has one yet.
    pub fn arena_of(&self, thread: usize) -> Option<usize> {
        self.of_thread.get(&thread).copied()
    }

    /// An arena for `thread`, which has none (arena_get2 at its first call): None when a new
    /// one must be made (the caller maps its heap and calls [`Allocator::add_arena`]).
    /// `limit`: NARENAS_FROM_NCORES, 8 × cores on 64-bit (the main arena counts among them).
    pub fn assign(&mut self, thread: usize, limit: usize) -> Option<usize> {
        if let Some(&a) = self.of_thread.get(&thread) {
            return Some(a);
        }
        let a = if let Some(a) = self.free_list.pop() {
            a
        } else if self.arenas.is_empty() || self.arenas.len() + 1 < limit {
            return None;
        } else {
            let a = self.next_to_use % self.arenas.len();
            self.next_to_use = a + 1;
            a
        };
        self.arenas[a].2 += 1;
        self.of_thread.insert(thread, a);
        Some(a)
    }

    /// A new arena for `thread`, its heap mapped at `base`.
    pub fn add_arena(&mut self, thread: usize, base: u64) -> usize {
        self.arenas.push((base, Arena::new(), 1));
        let a = self.arenas.len() - 1;
        self.of_thread.insert(thread, a);
        a
    }

    /// glibc 2.26+: the thread's first malloc or free sets up its tcache (MAYBE_INIT_TCACHE
    /// → tcache_init), a malloc of tcache_perthread_struct in its arena (640 bytes in 2.36:
    /// 64 uint16_t counts and 64 entry pointers), kept until the thread exits.
    pub fn tcache_init(&mut self, arena: usize) -> Result<(), String> {
        if self.glibc == Glibc::V2_26 {
            self.arenas[arena].1.malloc(TCACHE_STRUCT).ok_or("tcache_init: the arena's heap is full")?;
        }
        Ok(())
    }

    /// `thread` exited (arena_thread_freeres): its arena goes on the free list once no
    /// thread is attached to it.
    pub fn thread_exited(&mut self, thread: usize) {
        if let Some(a) = self.of_thread.remove(&thread) {
            self.arenas[a].2 -= 1;
            if self.arenas[a].2 == 0 {
                self.free_list.push(a);
            }
        }
    }

    /// Arenas made so far.
    pub fn arenas(&self) -> usize {
        self.arenas.len()
    }

    /// The bytes a mapping for malloc(bytes) spans (sysmalloc: the chunk and its size
    /// field, page-rounded).
    pub fn mapped_len(bytes: u64) -> u64 {
        (Arena::chunk_size(bytes) + 8).div_ceil(PAGE) * PAGE
    }

    /// What pointer `ptr` names, if it holds a live allocation.
    pub fn get(&self, ptr: usize) -> Option<Chunk> {
        self.pointers.get(ptr).copied().flatten()
    }

    /// The user's bytes of a live pointer: its address and the bytes asked for.
    pub fn user_range(&self, ptr: usize) -> Option<(u64, u64)> {
        Some(match self.get(ptr)? {
            Chunk::Heap { arena, offset, bytes } => (self.arenas[arena].0 + offset + 16, bytes),
            Chunk::Mapped { va, bytes, .. } => (va + 16, bytes),
        })
    }

    /// malloc(bytes) from arena `arena` into pointer `ptr`; Err names what went wrong.
    pub fn malloc_heap(&mut self, ptr: usize, arena: usize, bytes: u64) -> Result<(), String> {
        self.check_free_name(ptr)?;
        let offset = self.arenas[arena]
            .1
            .malloc(bytes)
            .ok_or_else(|| format!("malloc({bytes}): arena {arena} outgrew its 64 MiB heap (another heap is not modelled)"))?;
        self.pointers[ptr] = Some(Chunk::Heap { arena, offset, bytes });
        Ok(())
    }

    /// malloc(bytes) served by a mapping of its own at `va` into pointer `ptr`.
    pub fn malloc_mapped(&mut self, ptr: usize, va: u64, bytes: u64) -> Result<(), String> {
        self.check_free_name(ptr)?;
        self.pointers[ptr] = Some(Chunk::Mapped { va, len: Self::mapped_len(bytes), bytes });
        Ok(())
    }

    /// Whether pointer `ptr` may receive a new allocation (it exists and holds none).
    pub fn check_free_name(&self, ptr: usize) -> Result<(), String> {
        match self.pointers.get(ptr) {
            None => Err(format!("pointer {ptr} does not exist")),
            Some(Some(_)) => Err(format!("malloc into pointer {ptr}, which holds a live allocation (free it first)")),
            Some(None) => Ok(()),
        }
    }

    fn trim_test(&self) -> Option<u64> {
        match self.glibc {
            Glibc::V2_23 => None,
            Glibc::V2_26 => Some(self.trim_threshold),
        }
    }

    /// free() of pointer `ptr`, whichever thread calls it: into the chunk's own arena
    /// (arena_for_chunk), or munmap of a mapped chunk.
    pub fn free(&mut self, ptr: usize) -> Result<Freed, String> {
        let chunk = self.pointers.get_mut(ptr).and_then(Option::take).ok_or_else(|| format!("free of pointer {ptr}, which holds no live allocation"))?;
        Ok(match chunk {
            Chunk::Heap { arena, offset, .. } => {
                let trim = self.trim_test();
                let base = self.arenas[arena].0;
                match self.arenas[arena].1.free_with(offset, trim) {
                    Some((o, len)) => Freed::Dontneed { va: base + o, len },
                    None => Freed::Nothing,
                }
            }
            Chunk::Mapped { va, len, .. } => {
                if self.threshold.unmapped(len) {
                    self.trim_threshold = 2 * self.threshold.0;
                }
                Freed::Munmap { va, len }
            }
        })
    }

    /// realloc(ptr, bytes) to at most its size: in place (\_int_realloc frees the tail). A
    /// mapped chunk keeps its mapping (mremap_chunk is not modelled). Growing is an error.
    pub fn shrink(&mut self, ptr: usize, bytes: u64) -> Result<Freed, String> {
        let chunk = self.get(ptr).ok_or_else(|| format!("realloc of pointer {ptr}, which holds no live allocation"))?;
        let trim = self.trim_test();
        match chunk {
            Chunk::Heap { arena, offset, bytes: had } => {
                if bytes > had {
                    return Err(format!("realloc of pointer {ptr} from {had} to {bytes} bytes: growing is not modelled"));
                }
                self.pointers[ptr] = Some(Chunk::Heap { arena, offset, bytes });
                let base = self.arenas[arena].0;
                Ok(match self.arenas[arena].1.shrink_with(offset, bytes, trim) {
                    Some((o, len)) => Freed::Dontneed { va: base + o, len },
                    None => Freed::Nothing,
                })
            }
            Chunk::Mapped { va, len, bytes: had } => {
                if bytes > had {
                    return Err(format!("realloc of pointer {ptr} from {had} to {bytes} bytes: growing is not modelled"));
                }
                self.pointers[ptr] = Some(Chunk::Mapped { va, len, bytes });
                Ok(Freed::Nothing)
            }
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
