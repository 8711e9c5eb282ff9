//! The system calls that rewrite PTEs of a live range: madvise(MADV_DONTNEED)
//! (mm/madvise.c), mprotect (mm/mprotect.c change_protection) and msync(MS_SYNC) of a
//! shared file mapping (mm/msync.c + mm/rmap.c page_mkclean).
//!
//! Simplified: msync's page_mkclean flushes per page in Linux
//! (clear_page_dirty_for_io → page_mkclean → ptep_clear_flush); here one batched request
//! covers the pages an msync cleans.

use super::{HUGE, PAGE};
use crate::coherence::{Coherence, FlushReason};
use crate::error::Result;
use crate::os::locks::PtlCursor;
use crate::os::{Gather, Os, Vma};
use crate::page_table::{pte_pfn, PTE_DIRTY, PTE_WRITABLE};
use crate::types::Vpn;
use crate::workload::program::Backing;

impl<P: Coherence> Os<P> {
    /// mprotect's work before it rewrites PTEs: split VMAs at the range's ends and set
    /// the new protection (mprotect_fixup).
    pub(super) fn mprotect_vmas(&mut self, pid: u32, va: u64, len: u64, writable: bool) {
        let end = va + len;
        let vmas = &mut self.spaces[pid as usize].vmas;
        let hit: Vec<u64> = vmas.range(..end).filter(|(_, v)| v.end > va && !v.reserved).map(|(&s, _)| s).collect();
        for s in hit {
            let v = vmas.remove(&s).expect("listed");
            let offset_of = |at: u64| match v.backing {
                Backing::File { file, offset_pages } => Backing::File { file, offset_pages: offset_pages + (at - s) / PAGE },
                b => b,
            };
            if s < va {
                vmas.insert(s, Vma { end: va, ..v.clone() });
            }
            let lo = s.max(va);
            let hi = v.end.min(end);
            vmas.insert(lo, Vma { end: hi, writable, backing: offset_of(lo), ..v.clone() });
            if v.end > end {
                vmas.insert(end, Vma { backing: offset_of(end), ..v.clone() });
            }
        }
    }

    /// One step of mprotect (change_protection → change_pte_range over one PMD's range,
    /// under that table's PTE lock; mm/mprotect.c change_pmd_range goes PMD by PMD, with
    /// cond_resched() between): every present PTE of `[from, end)` in the page-table page
    /// holding `from` is rewritten and joins the gather (tlb_flush_pte_range; Linux
    /// flushes for RW→RO and RO→RW alike). change_pte_range never forces a flush: the
    /// range is flushed once, by tlb_finish_mmu at the call's end. Returns where the next
    /// step starts (`end`: done).
    pub(super) fn change_step(&mut self, core: usize, pid: u32, from: u64, end: u64, writable: bool, gather: &mut Gather) -> u64 {
        let step_end = ((from & !(HUGE - 1)) + HUGE).min(end);
        let mut page = from;
        let mut ptl = PtlCursor::default();
        while let Some((at, leaf)) = self.next_leaf(pid, page, step_end) {
            page = at;
            self.ptl_at(core, &mut ptl, pid, page);
            let pfn = pte_pfn(leaf.pte);
            let step = if leaf.level == 2 { HUGE } else { PAGE };
            // Pages still shared copy-on-write (or the zero page, or a private file page)
            // stay read-only; the next write faults.
            let shared_cow = leaf.level == 1 && (Some(pfn) == self.zero_page || self.m.mem.mapcount(pfn) > 1 || self.m.mem.mapping(pfn) != 0);
            let vma_shared = self.vma_at(pid, page).is_some_and(|(_, v)| v.shared);
            let mut e = leaf.pte;
            if writable && (!shared_cow || (vma_shared && e & PTE_DIRTY != 0)) {
                e |= PTE_WRITABLE;
            } else if !writable {
                e &= !PTE_WRITABLE;
            }
            let old_pte = self.pte_write(core, pid, page, &leaf, e);
            gather.page(Vpn((page & !(step - 1)) >> 12), old_pte);
            self.charge(core, self.settings.costs().per_page);
            page = (page & !(step - 1)) + step;
        }
        self.ptl_release(core, &mut ptl);
        // Empty page-table ranges that follow cost nothing here (change_pmd_range's
        // pmd_none check): the next step starts where work remains.
        let mut next = step_end.max(page.min(end));
        while next < end && next.is_multiple_of(HUGE) && self.pmd_none(pid, next) {
            next = (next + HUGE).min(end);
        }
        next
    }

    /// msync(MS_SYNC) of a shared file mapping: write back dirty pages, cleaning and
    /// write-protecting their PTEs. Linux cleans each page as writeback reaches it
    /// (clear_page_dirty_for_io → page_mkclean → ptep_clear_flush): one flush per page,
    /// each waited for before the next page. Returns where to go on from when a flush left
    /// the core waiting for acks (None: done).
    pub(crate) fn sys_msync(&mut self, core: usize, thread: usize, va: u64, len: u64) -> Result<Option<u64>> {
        let pid = self.threads[thread].pid;
        let end = va + len;
        let mut page = va;
        while page < end {
            let shared_file = self.vma_at(pid, page).is_some_and(|(_, v)| v.shared && matches!(v.backing, Backing::File { .. }));
            match self.pte_lookup(pid, page) {
                Some(leaf) if shared_file && leaf.level == 1 && leaf.pte & PTE_DIRTY != 0 => {
                    let mut ptl = PtlCursor::default();
                    self.ptl_at(core, &mut ptl, pid, page);
                    let old_pte = self.pte_write(core, pid, page, &leaf, leaf.pte & !(PTE_DIRTY | PTE_WRITABLE));
                    self.ptl_release(core, &mut ptl);
                    self.charge(core, self.settings.costs().per_page + self.settings.costs().write_page);
                    let mut gather = Gather::default();
                    gather.page(Vpn(page >> 12), old_pte);
                    page += PAGE;
                    if self.flush(core, pid, FlushReason::Msync, false, gather) && page < end {
                        return Ok(Some(page));
                    }
                }
                Some(_) => page += PAGE,
                None => page = self.next_candidate(pid, page, end),
            }
        }
        Ok(None)
    }
}
