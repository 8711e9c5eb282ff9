//! The run-time allocator (issue 46 item 6): `Op::Malloc`, `Op::Free`, `Op::Realloc` and
//! `Op::UsePtr` run glibc's malloc ([`crate::workload::ptmalloc::Allocator`], one per
//! process) when the thread executes them, so heap trims follow the order in which the
//! threads really call it, a free by a thread other than the allocating one going to the
//! chunk's own arena (arena_for_chunk).
//!
//! The system calls malloc makes go through the kernel model's own paths: a thread's
//! first malloc maps its arena's heap (new_heap's mmap), a request at or above the mmap
//! threshold maps a region of its own (sysmalloc's mmap), both as `Op::Mmap` does them
//! (mmap_lock written, counted as mmap calls); a free's heap trim is an
//! madvise(MADV_DONTNEED) and a mapped chunk's free a munmap, run as the thread's next
//! operation (`Thread::pending`, on the engine's region slot [`ALLOC_SLOT`]) exactly as
//! `Op::MadviseDontneed` and `Op::Munmap` run, flushes and all.
//!
//! Ordering: an allocator call changes state other threads' calls read (the arenas, the
//! thresholds, the pointers), so it runs only when its core is not ahead of any other in
//! simulated time, as a system call does (`ahead_of_others`): the calls take effect in
//! simulated-time order, not in the order the engine steps cores within a quantum.
//!
//! Simplified: malloc's own instructions (tens of cycles a call) are not charged, as the
//! programs' `Compute` carries their work; new_heap's alignment munmaps and grow_heap's
//! mprotects (no flush: they only widen access) are not made.

use super::locks::LockMode;
use super::Os;
use crate::coherence::Coherence;
use crate::error::{Error, Result};
use crate::workload::builder::anon;
use crate::workload::program::Op;
use crate::workload::ptmalloc::{Allocator, Freed, HEAP_BYTES};

/// Arenas a process may make per core: NARENAS_FROM_NCORES on 64-bit (glibc arena.c).
const ARENAS_PER_CORE: usize = 8;

impl<P: Coherence> Os<P> {
    /// The engine's own region slot: the last of every thread's table (os/mod.rs), where
    /// a free's trim or munmap range is put for the system call that follows.
    pub(super) fn alloc_slot(&self) -> usize {
        self.w.slots
    }

    fn allocator(&mut self, pid: u32) -> &mut Allocator {
        let (glibc, pointers) = (self.w.glibc, self.w.pointers as usize);
        self.spaces[pid as usize].alloc.get_or_insert_with(|| Box::new(Allocator::new(glibc, pointers)))
    }

    fn alloc_error(&self, thread: usize, what: String) -> Error {
        Error::Sim(format!("thread {:?}: {what}", self.threads[thread].name))
    }

    /// An mmap of an anonymous read-write region of `bytes` made by malloc, as `Op::Mmap`
    /// makes one: None while the thread waits for `mmap_lock` (the operation runs again).
    fn alloc_mmap(&mut self, core: usize, thread: usize, bytes: u64) -> Result<Option<u64>> {
        let pid = self.threads[thread].pid;
        if !self.mmap_lock(core, thread, pid, LockMode::Write) {
            return Ok(None);
        }
        let start = self.clock(core);
        self.stats[core].syscalls += 1;
        self.charge(core, self.settings.costs().syscall + self.settings.costs().mmap);
        let va = self.mmap_region(core, pid, &anon(bytes, true), None)?;
        self.mmap_unlock_after_syscall(core, thread, pid);
        self.stats[core].syscall_calls[0] += 1;
        self.stats[core].syscall_cycles[0] += self.clock(core) - start;
        self.set_kernel_span(core, start);
        Ok(Some(va))
    }

    /// The thread's arena, given (or made: its heap mapped) at its first call, with its
    /// tcache set up (2.26+); None while it waits for `mmap_lock`.
    fn ensure_arena(&mut self, core: usize, thread: usize) -> Result<Option<usize>> {
        let pid = self.threads[thread].pid;
        if let Some(a) = self.allocator(pid).arena_of(thread) {
            return Ok(Some(a));
        }
        let limit = ARENAS_PER_CORE * self.cores.len();
        let a = match self.allocator(pid).assign(thread, limit) {
            Some(a) => a,
            None => {
                let Some(base) = self.alloc_mmap(core, thread, HEAP_BYTES)? else { return Ok(None) };
                self.allocator(pid).add_arena(thread, base)
            }
        };
        let r = self.allocator(pid).tcache_init(a);
        r.map_err(|e| self.alloc_error(thread, e))?;
        Ok(Some(a))
    }

    /// `Op::Malloc`: the thread's arena (made now if it has none), then the chunk from it
    /// or a mapping of its own; the pointer and the thread's region slot name it.
    pub(super) fn exec_malloc(&mut self, core: usize, thread: usize, ptr: u32, bytes: u64, slot: usize) -> Result<()> {
        let pid = self.threads[thread].pid;
        let name_free = self.allocator(pid).check_free_name(ptr as usize);
        name_free.map_err(|e| self.alloc_error(thread, e))?;
        // arena_get2 runs first, whatever the size (__libc_malloc's arena_get).
        let Some(arena) = self.ensure_arena(core, thread)? else { return Ok(()) };
        if self.allocator(pid).threshold.maps(bytes) {
            let Some(va) = self.alloc_mmap(core, thread, Allocator::mapped_len(bytes))? else { return Ok(()) };
            let r = self.allocator(pid).malloc_mapped(ptr as usize, va, bytes);
            r.map_err(|e| self.alloc_error(thread, e))?;
        } else {
            let r = self.allocator(pid).malloc_heap(ptr as usize, arena, bytes);
            r.map_err(|e| self.alloc_error(thread, e))?;
        }
        let range = self.allocator(pid).user_range(ptr as usize).expect("allocated above");
        self.threads[thread].slots[slot] = range;
        self.advance(thread);
        Ok(())
    }

    /// `Op::Free` and `Op::Realloc`: the allocator's part now; the system call it asks for
    /// as the thread's next operation.
    pub(super) fn exec_free(&mut self, core: usize, thread: usize, ptr: u32, shrink_to: Option<u64>) -> Result<()> {
        let pid = self.threads[thread].pid;
        // 2.26+: free sets up the caller's tcache first (MAYBE_INIT_TCACHE in __libc_free;
        // realloc's malloc path likewise), which gives a thread that never malloc'd an
        // arena. Not for a mapped chunk (munmap_chunk returns before it).
        let mapped = matches!(self.allocator(pid).get(ptr as usize), Some(crate::workload::ptmalloc::Chunk::Mapped { .. }));
        if self.w.glibc == crate::workload::ptmalloc::Glibc::V2_26 && !mapped && self.ensure_arena(core, thread)?.is_none() {
            return Ok(());
        }
        let a = self.allocator(pid);
        let freed = match shrink_to {
            None => a.free(ptr as usize),
            Some(bytes) => a.shrink(ptr as usize, bytes),
        };
        let freed = freed.map_err(|e| self.alloc_error(thread, e))?;
        self.advance(thread);
        let slot = self.alloc_slot();
        let (range, op) = match freed {
            Freed::Nothing => return Ok(()),
            Freed::Dontneed { va, len } => ((va, len), Op::MadviseDontneed { slot }),
            Freed::Munmap { va, len } => ((va, len), Op::Munmap { slot }),
        };
        let t = &mut self.threads[thread];
        t.slots[slot] = range;
        t.pending = Some(op);
        Ok(())
    }

    /// `Op::UsePtr`: the thread's region slot names a pointer's bytes.
    pub(super) fn exec_use_ptr(&mut self, thread: usize, slot: usize, ptr: u32) -> Result<()> {
        let pid = self.threads[thread].pid;
        let range = self.allocator(pid).user_range(ptr as usize);
        let range = range.ok_or_else(|| self.alloc_error(thread, format!("use of pointer {ptr}, which holds no live allocation")))?;
        self.threads[thread].slots[slot] = range;
        self.advance(thread);
        Ok(())
    }

    /// A thread exited: its arena may go on the free list (arena_thread_freeres).
    pub(super) fn alloc_thread_exited(&mut self, thread: usize) {
        let pid = self.threads[thread].pid as usize;
        if let Some(a) = self.spaces[pid].alloc.as_mut() {
            a.thread_exited(thread);
        }
    }
}
