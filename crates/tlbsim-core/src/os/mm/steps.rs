//! The long page-table system calls — munmap, mprotect and madvise(MADV_DONTNEED) — run
//! one page-table page at a time, as Linux's do: mm/memory.c unmap_page_range →
//! zap_pmd_range calls zap_pte_range once per PMD's range (512 PTEs) under that table's
//! PTE lock, with cond_resched() between; mm/mprotect.c change_pmd_range likewise calls
//! change_pte_range. Each step here is one such range, done at the simulated time it is
//! reached: the thread's operation stays at its pc between steps (`Thread::range_call`,
//! `syscall_resume`), and other cores run up to the initiator's clock before its next
//! step (a system call waits for cores behind it, interp.rs). So another core's walk sees
//! each PTE change at its own time, not the whole call applied at its start.
//!
//! Flushes where Linux's `mmu_gather` has them (mm/mmu_gather.c, include/asm-generic/tlb.h):
//! a zap flushes in mid-call when the gather's batches are full (__tlb_remove_page →
//! tlb_next_batch refused: `force_flush`, tlb_flush_mmu, then the zap goes on) or at the
//! end of a table that removed a dirty page-cache page (delayed rmap); every call flushes
//! what is left at its end (tlb_finish_mmu). mprotect's change_pte_range gathers ranges
//! only (tlb_flush_pte_range) and flushes once at the end.
//!
//! Simplified: a step is the unit of interleaving; within it the PTE writes happen at once
//! (the PTE lock keeps other writers of that table out in Linux too, but a hardware walk
//! on another core may see a table half done). Empty PMD ranges are skipped within a step.
//! MAP_FIXED's replacement of what its range overlaps and exit's teardown still zap all
//! at once (the write lock held, or no other user of the address space).

use super::mmap::ZapBatch;
use crate::coherence::{Coherence, FlushReason};
use crate::error::Result;
use crate::os::{Gather, Os};

/// Which call a `RangeCall` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RangeKind {
    Munmap,
    Mprotect { writable: bool },
    Dontneed,
}

/// A long page-table system call under way: its range, its `mmu_gather` and what its end
/// needs.
pub(crate) struct RangeCall {
    kind: RangeKind,
    va: u64,
    end: u64,
    gather: Gather,
    batch: ZapBatch,
    /// munmap: the recycling contexts of the VMAs it removed.
    contexts: Vec<(u64, u64, u32)>,
}

impl RangeCall {
    /// Where the call's first step starts.
    pub(crate) fn start(&self) -> u64 {
        self.va
    }
}

impl<P: Coherence> Os<P> {
    /// The call's work before its first step, under the lock the caller took (munmap:
    /// the VMAs detached, `mmap_lock` downgraded; mprotect: the VMAs split and changed).
    pub(crate) fn range_call_begin(&mut self, core: usize, thread: usize, kind: RangeKind, va: u64, len: u64) -> RangeCall {
        let pid = self.threads[thread].pid;
        let end = va.saturating_add(len);
        let mut contexts = Vec::new();
        match kind {
            RangeKind::Munmap if len > 0 => contexts = self.unmap_begin(core, thread, va, len, true),
            RangeKind::Munmap => {}
            RangeKind::Mprotect { writable } => self.mprotect_vmas(pid, va, len, writable),
            // zap_page_range_single's lru_add_drain(), unless the kernel removed it.
            RangeKind::Dontneed => self.lru_drain_on_unmap(core),
        }
        RangeCall { kind, va, end, gather: Gather::default(), batch: ZapBatch::linux(), contexts }
    }

    /// One step of `call` from `from`: one page-table page's PTEs, and the flush that ends
    /// the step if Linux's would. Returns where the next step starts, or None when the
    /// call is done (its last flush sent).
    pub(crate) fn range_call_step(&mut self, core: usize, thread: usize, call: &mut RangeCall, from: u64) -> Result<Option<u64>> {
        let pid = self.threads[thread].pid;
        let end = call.end;
        let next = if from >= end {
            end
        } else {
            match call.kind {
                RangeKind::Mprotect { writable } => self.change_step(core, pid, from, end, writable, &mut call.gather),
                RangeKind::Munmap | RangeKind::Dontneed => {
                    let step = self.zap_step(core, pid, from, end, &mut call.gather, &mut call.batch)?;
                    self.forget_swapped(pid, from, step.next);
                    if step.force_flush && step.next < end {
                        // tlb_flush_mmu in mid-call: the pages gathered so far are flushed
                        // and freed; the zap goes on after.
                        let mut gather = std::mem::take(&mut call.gather);
                        let reason = if call.kind == RangeKind::Munmap {
                            if !call.contexts.is_empty() {
                                self.skip_recycled_flushes(core, pid, &call.contexts, &mut gather);
                            }
                            FlushReason::Munmap
                        } else {
                            FlushReason::MadviseDontneed
                        };
                        self.flush(core, pid, reason, false, gather);
                    }
                    step.next
                }
            }
        };
        if next < end {
            return Ok(Some(next));
        }
        // tlb_finish_mmu.
        let gather = std::mem::take(&mut call.gather);
        match call.kind {
            RangeKind::Munmap if call.end > call.va => self.unmap_finish(core, pid, call.va, end, &call.contexts, gather),
            RangeKind::Munmap => {}
            RangeKind::Mprotect { .. } => {
                self.flush(core, pid, FlushReason::Mprotect, false, gather);
            }
            RangeKind::Dontneed => {
                self.flush(core, pid, FlushReason::MadviseDontneed, false, gather);
            }
        }
        Ok(None)
    }
}
