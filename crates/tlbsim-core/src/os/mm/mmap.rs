//! mmap and munmap of the OS model: VMA placement top-down below the lowest gap that fits
//! (mm/mmap.c unmapped_area_topdown) or at MAP_FIXED, populate, and unmapping
//! (__do_munmap → unmap_region: zap_pte_range, free_pgtables, tlb_finish_mmu, with
//! mmu_gather's tlb_remove_page), including huge-page splits and the recycling axis's
//! skipped remote flushes. Also the zap that madvise and exit share.

use super::{HUGE, PAGE, USER_TOP};
use crate::coherence::{Coherence, FlushReason};
use crate::error::{Error, Result};
use crate::memory::FrameWord;
use crate::os::locks::PtlCursor;
use crate::os::{Gather, Os, Vma, MMAP_TOP};
use crate::page_table::{pte_pfn, PTE_DIRTY, PTE_PRESENT, PTE_WRITABLE};
use crate::types::{CoreId, PageSize, Pfn, Vpn};
use crate::workload::program::{Backing, MapSpec};

/// Pages an `mmu_gather` can batch before it must flush (mm/mmu_gather.c,
/// include/asm-generic/tlb.h): the on-stack bundle (MMU_GATHER_BUNDLE = 8) and up to
/// MAX_GATHER_BATCH_COUNT = 10000 / MAX_GATHER_BATCH extra batch pages, each holding
/// MAX_GATHER_BATCH = (PAGE_SIZE - 16) / 8 = 510 page pointers (x86-64); tlb_next_batch
/// refuses a 20th batch page, and __tlb_remove_page then reports the gather full. Assumed:
/// the batch pages' GFP_NOWAIT allocations succeed.
pub(crate) const GATHER_CAPACITY: u64 = 8 + (10_000 / 510) * 510;

/// Slots left in a zap's `mmu_gather` batches.
pub(crate) struct ZapBatch {
    used: u64,
    capacity: u64,
}

impl ZapBatch {
    /// A gather that never fills (the all-at-once zaps: exit, MAP_FIXED).
    pub(crate) fn unbounded() -> ZapBatch {
        ZapBatch { used: 0, capacity: u64::MAX }
    }

    /// Linux's gather (`GATHER_CAPACITY`).
    pub(crate) fn linux() -> ZapBatch {
        ZapBatch { used: 0, capacity: GATHER_CAPACITY }
    }

    fn bounded(&self) -> bool {
        self.capacity != u64::MAX
    }

    /// One more page batched: whether the batches are now full.
    fn add(&mut self) -> bool {
        self.used += 1;
        self.used >= self.capacity
    }

    fn reset(&mut self) {
        self.used = 0;
    }
}

/// Where a zap step ended.
pub(crate) struct ZapStepEnd {
    /// Address the next step starts from (the range's end: done).
    pub next: u64,
    /// The gather must be flushed (and its pages freed) before the next step.
    pub force_flush: bool,
}

impl<P: Coherence> Os<P> {
    /// mmap: place a new VMA top-down below the lowest gap that fits (Linux's
    /// unmapped_area_topdown), or at `fixed_at` (MAP_FIXED), populate it if asked. Returns
    /// its address.
    pub(crate) fn mmap_region(&mut self, core: usize, pid: u32, spec: &MapSpec, fixed_at: Option<u64>) -> Result<u64> {
        let len = spec.bytes.div_ceil(PAGE) * PAGE;
        let p = &self.spaces[pid as usize];
        // Free: neither the VMA nor the held range starting last below `hi` reaches `lo`.
        let (vma_map, held_map) = (&p.vmas, &p.held);
        let is_free = |lo: u64, hi: u64| {
            lo < hi
                && hi <= MMAP_TOP
                && vma_map.range(..hi).next_back().is_none_or(|(_, v)| v.end <= lo)
                && held_map.range(..hi).next_back().is_none_or(|(_, &e)| e <= lo)
        };
        let va = if let Some(va) = fixed_at {
            // MAP_FIXED: the caller's address (a range a policy holds back included).
            // Anywhere in the 47-bit user address space: a recorded program's stack and
            // mappings may lie above the mmap area this model places mappings in.
            if va % PAGE != 0 || va + len > USER_TOP || self.overlaps_mapping(pid, va, len) {
                return Err(Error::Sim(format!("process {pid}: MAP_FIXED at {va:#x} for {len} bytes overlaps a mapping (munmap the region first)")));
            }
            va
        } else {
            // Occupied ranges, highest first: the VMAs and the ranges the policy holds back
            // (two sorted maps, merged without a copy; neither overlaps itself).
            let mut vmas = p.vmas.iter().rev().map(|(&s, v)| (s, v.end)).peekable();
            let mut held = p.held.iter().rev().map(|(&s, &e)| (s, e)).peekable();
            // Highest gap below MMAP_TOP that holds `len`.
            let mut top = MMAP_TOP;
            let mut addr = None;
            loop {
                let next = match (vmas.peek(), held.peek()) {
                    (Some(a), Some(b)) if a.0 >= b.0 => vmas.next(),
                    (Some(_), Some(_)) => held.next(),
                    (Some(_), None) => vmas.next(),
                    (None, Some(_)) => held.next(),
                    (None, None) => None,
                };
                let Some((start, end)) = next else { break };
                if end <= top && top - end >= len {
                    addr = Some(top - len);
                    break;
                }
                top = top.min(start);
            }
            let default_va = match addr {
                Some(a) => a,
                None if top >= len + (1 << 30) => top - len,
                None => return Err(Error::Sim(format!("process {pid}: no virtual address space left for a {len}-byte mapping"))),
            };
            let default_va = if self.settings.recycling_on() { self.recycling.choose_mmap_va(pid, len, default_va, &is_free) } else { default_va };
            let va = self.policy.choose_mmap_va(pid, len, default_va, &is_free);
            if va % PAGE != 0 || !is_free(va, va + len) {
                return Err(Error::Sim(format!(
                    "process {pid}: the coherence policy chose {va:#x} for a {len}-byte mapping, which is not a free, page-aligned range"
                )));
            }
            va
        };
        let family = p.family;
        let recycling = if self.settings.recycling_on() { self.recycling.mapping_context(pid, family, spec) } else { 0 };
        if fixed_at.is_some() && self.settings.recycling_on() && self.recycling.fixed_mapping_needs_flush(pid, va, len) {
            // Stale entries of an earlier mapping at this address may have survived a
            // skipped flush: flush the range on every core of the address space.
            let pages: Vec<Vpn> = (va >> 12..(va + len) >> 12).map(Vpn).collect();
            self.flush(core, pid, FlushReason::Policy, false, Gather::of_pages(pages));
        }
        self.spaces[pid as usize].vmas.insert(
            va,
            Vma { end: va + len, writable: spec.writable, shared: spec.shared, backing: spec.backing, reserved: false, recycling, anon_vma: false },
        );
        if spec.populate {
            let mut page = va;
            while page < va + len {
                let present = self.pte_lookup(pid, page).is_some();
                if !present {
                    self.page_fault(core, usize::MAX, pid, page, spec.writable && !spec.shared, false)?;
                }
                page += PAGE;
            }
        }
        Ok(va)
    }

    /// Whether `[va, va+len)` overlaps a mapping of `pid` (the libraries' reserved range
    /// included).
    pub(crate) fn overlaps_mapping(&self, pid: u32, va: u64, len: u64) -> bool {
        self.spaces[pid as usize].vmas.range(..va.saturating_add(len)).next_back().is_some_and(|(_, v)| v.end > va)
    }

    /// The last PTE of the anonymous page `pfn` is gone: the frame is freed after the flush
    /// `gather` becomes (tlb_remove_page). It leaves the LRU now: until then Linux's
    /// mmu_gather holds a reference that keeps reclaim from freeing it; here reclaim would
    /// free it at once, and the flush's end free it again, maybe mapped by a new owner.
    pub(super) fn free_after_flush(&mut self, pfn: Pfn, gather: &mut Gather) {
        self.lru_unmapped(pfn);
        gather.frames.push((pfn, 0));
    }

    /// Clear the leaf entries of `[va, va+len)` (zap_pte_range), gathering pages to flush
    /// and frames to free, all at once (exit's teardown and MAP_FIXED's replacement; the
    /// system calls go one page-table page at a time, `zap_step`). Huge pages partly in the
    /// range are split first.
    pub(super) fn zap(&mut self, core: usize, pid: u32, va: u64, len: u64, gather: &mut Gather) -> Result<()> {
        let end = va + len;
        let mut at = va;
        while at < end {
            at = self.zap_step(core, pid, at, end, gather, &mut ZapBatch::unbounded())?.next;
        }
        self.forget_swapped(pid, va, end);
        Ok(())
    }

    /// Swap entries of `[va, end)` go with the range.
    pub(super) fn forget_swapped(&mut self, pid: u32, va: u64, end: u64) {
        let swapped = &mut self.spaces[pid as usize].swapped;
        if !swapped.is_empty() {
            swapped.retain(|&v| v < va >> 12 || v >= end >> 12);
        }
    }

    /// One step of a zap: the leaf entries of `[from, end)` in the page-table page that
    /// holds `from` (zap_pte_range over one PMD's range, under that table's PTE lock;
    /// mm/memory.c zap_pmd_range calls it once per PMD, with cond_resched() between). A
    /// 2 MiB leaf is one PMD range (zap_huge_pmd). The step stops early when the gather's
    /// batches are full (`__tlb_remove_page` returned true: zap_pte_range breaks out with
    /// `force_flush`), and asks for a flush at its end when it removed a dirty page-cache
    /// page (`delay_rmap`: the rmap removal waits for the flush, which zap_pte_range then
    /// does before dropping the PTE lock).
    pub(in crate::os) fn zap_step(&mut self, core: usize, pid: u32, from: u64, end: u64, gather: &mut Gather, batch: &mut ZapBatch) -> Result<ZapStepEnd> {
        let step_end = ((from & !(HUGE - 1)) + HUGE).min(end);
        let mut page = from;
        let mut ptl = PtlCursor::default();
        let (mut force_flush, mut full) = (false, false);
        while let Some((at, leaf)) = self.next_leaf(pid, page, step_end) {
            page = at;
            let pfn = pte_pfn(leaf.pte);
            self.ptl_at(core, &mut ptl, pid, page);
            if leaf.level == 2 {
                let base = page & !(HUGE - 1);
                if base < from || base + HUGE > end {
                    self.split_huge(core, pid, base, leaf.pte)?;
                    continue;
                }
                let old_pte = self.pte_write(core, pid, page, &leaf, 0);
                gather.page(Vpn(base >> 12), old_pte);
                self.charge(core, self.settings.costs().per_page);
                let count = self.m.mem.mapcount(pfn).saturating_sub(1);
                self.m.mem.set_mapcount(pfn, count);
                if count == 0 {
                    self.huge_frames.remove(&pfn.0);
                    gather.frames.push((pfn, 9));
                }
                page = base + HUGE;
                if batch.add() {
                    full = true;
                    break;
                }
                continue;
            }
            let old_pte = self.pte_write(core, pid, page, &leaf, 0);
            gather.page(Vpn(page >> 12), old_pte);
            self.charge(core, self.settings.costs().per_page);
            page += PAGE;
            if Some(pfn) != self.zero_page {
                let mapping = self.m.mem.mapping(pfn);
                let count = self.m.mem.mapcount(pfn).saturating_sub(1);
                self.m.mem.set_mapcount(pfn, count);
                if count == 0 && mapping == 0 {
                    self.free_after_flush(pfn, gather);
                }
                // zap_present_folio_ptes: a dirty file page's rmap removal is delayed until
                // after the flush (tlb_delay_rmap), which forces one at the end of this
                // table (mm/memory.c, since Linux 6.3).
                force_flush |= mapping != 0 && old_pte & PTE_DIRTY != 0 && batch.bounded();
                // Every normal page (not the zero page) takes a slot of the gather's batches.
                if batch.add() {
                    full = true;
                    break;
                }
            }
        }
        self.ptl_release(core, &mut ptl);
        let mut next = if full { page } else { step_end };
        force_flush |= full;
        // Empty page-table ranges that follow cost nothing here: skip to the next populated
        // one (zap_pmd_range's pmd_none check), so a step ends where work remains.
        while next < end && next.is_multiple_of(HUGE) && self.pmd_none(pid, next) {
            next = (next + HUGE).min(end);
        }
        if force_flush {
            batch.reset();
        }
        Ok(ZapStepEnd { next, force_flush })
    }

    /// The first page at or after `page` and below `end` that `pid` maps, with its leaf.
    pub(in crate::os) fn next_leaf(&self, pid: u32, mut page: u64, end: u64) -> Option<(u64, crate::page_table::Leaf)> {
        while page < end {
            if let Some(leaf) = self.pte_lookup(pid, page) {
                return Some((page, leaf));
            }
            page = self.next_candidate(pid, page, end);
        }
        None
    }

    /// The PMD entry covering `va` maps nothing (no page-table page, no 2 MiB leaf).
    pub(super) fn pmd_none(&self, pid: u32, va: u64) -> bool {
        self.m.pt.pd_entry(self.spaces[pid as usize].root, self.settings.pt_levels(), va) & PTE_PRESENT == 0
    }

    /// Next address at or after `page` that may have a leaf (skips unmapped 2 MiB regions).
    pub(super) fn next_candidate(&self, pid: u32, page: u64, end: u64) -> u64 {
        if self.m.pt.pd_entry(self.spaces[pid as usize].root, self.settings.pt_levels(), page) & PTE_PRESENT == 0 {
            ((page & !(HUGE - 1)) + HUGE).min(end)
        } else {
            page + PAGE
        }
    }

    /// Split a 2 MiB mapping into 512 4 KiB PTEs of the same frames (split_huge_pmd).
    pub(super) fn split_huge(&mut self, core: usize, pid: u32, base: u64, pte: u64) -> Result<()> {
        let pfn = pte_pfn(pte);
        let leaf = self.pte_lookup(pid, base).expect("huge leaf");
        self.pte_write(core, pid, base, &leaf, 0);
        self.huge_frames.remove(&pfn.0);
        for i in 0..512u64 {
            self.map_page(core, pid, base + i * PAGE, Pfn(pfn.0 + i), PageSize::Size4K, pte & PTE_WRITABLE != 0, pte & PTE_DIRTY != 0)?;
            if i > 0 {
                self.m.mem.desc_mut(Pfn(pfn.0 + i)).set_index((base >> 12) + i);
            }
        }
        // The head frame's mapcount was 1 for the PMD and got 1 more from the loop.
        let count = self.m.mem.mapcount(pfn).saturating_sub(1);
        self.m.mem.set_mapcount(pfn, count);
        // The 2 MiB TLB entries still name the same frames; the zap that follows flushes
        // the pages it removes, and INVLPG of a 4 KiB page drops any entry covering it.
        Ok(())
    }

    /// Remove `[va, va+len)` from the VMA tree, splitting VMAs that straddle it.
    pub(super) fn remove_vmas(&mut self, pid: u32, va: u64, len: u64) {
        let end = va + len;
        let vmas = &mut self.spaces[pid as usize].vmas;
        let hit: Vec<u64> = vmas.range(..end).filter(|(_, v)| v.end > va).map(|(&s, _)| s).collect();
        for s in hit {
            let v = vmas.remove(&s).expect("listed");
            if v.reserved {
                vmas.insert(s, v);
                continue;
            }
            if s < va {
                vmas.insert(s, Vma { end: va, ..v.clone() });
            }
            if v.end > end {
                let backing = match v.backing {
                    Backing::File { file, offset_pages } => Backing::File { file, offset_pages: offset_pages + (end - s) / PAGE },
                    b => b,
                };
                vmas.insert(end, Vma { backing, ..v });
            }
        }
    }

    /// Unmap `[va, va+len)` of `thread`'s process all at once: what MAP_FIXED does to
    /// whatever its range overlaps, under the write lock it holds (munmap itself goes one
    /// page-table page at a time, `steps.rs`).
    pub(crate) fn unmap_range(&mut self, core: usize, thread: usize, va: u64, len: u64) -> Result<()> {
        let pid = self.threads[thread].pid;
        if len == 0 {
            return Ok(());
        }
        let mut gather = Gather::default();
        let contexts = self.unmap_begin(core, thread, va, len, false);
        self.zap(core, pid, va, len, &mut gather)?;
        self.unmap_finish(core, pid, va, va + len, &contexts, gather);
        Ok(())
    }

    /// munmap's work before its zap: the recycling contexts of the VMAs in the range
    /// (returned), the VMAs detached (`mmap_lock` downgraded to read after, for munmap),
    /// and unmap_region's lru_add_drain().
    pub(super) fn unmap_begin(&mut self, core: usize, thread: usize, va: u64, len: u64, downgrade: bool) -> Vec<(u64, u64, u32)> {
        let pid = self.threads[thread].pid;
        // Recycling contexts of the VMAs in the range, before they go.
        let contexts: Vec<(u64, u64, u32)> = if self.settings.recycling_on() {
            let vmas = &self.spaces[pid as usize].vmas;
            vmas.range(..va + len).filter(|(_, v)| v.end > va && v.recycling != 0 && !v.reserved).map(|(&s, v)| (s, v.end, v.recycling)).collect()
        } else {
            Vec::new()
        };
        self.remove_vmas(pid, va, len);
        // The VMAs are detached: the rest runs under mmap_lock for read.
        if downgrade {
            let now = self.clock(core);
            self.mmap_downgrade(thread, pid, now);
        }
        // unmap_region's (vms_clear_ptes') lru_add_drain(), unless the kernel removed it.
        self.lru_drain_on_unmap(core);
        contexts
    }

    /// munmap's end after its zap (unmap_region: free_pgtables, then tlb_finish_mmu).
    pub(super) fn unmap_finish(&mut self, core: usize, pid: u32, va: u64, end: u64, contexts: &[(u64, u64, u32)], mut gather: Gather) {
        gather.tables = self.pte_free_tables(pid, va, end);
        if !contexts.is_empty() {
            self.skip_recycled_flushes(core, pid, contexts, &mut gather);
        }
        if self.policy.on_range_unmapped(CoreId(core as u32), pid, va, end, &mut self.fx) {
            self.spaces[pid as usize].held.insert(va, end);
        }
        self.apply_effects();
        self.flush(core, pid, FlushReason::Munmap, false, gather);
    }

    /// The recycling axis may skip the remote flush of unmapped pages that stay in their
    /// mapping's recycling context (FPR §IV-A): they leave the gather; the initiator still
    /// invalidates its own entries, and the checker marks what other cores still cache
    /// (each later use is judged by the axis' rule, `permits_stale_use`).
    pub(super) fn skip_recycled_flushes(&mut self, core: usize, pid: u32, contexts: &[(u64, u64, u32)], gather: &mut Gather) {
        let (mut skipped, mut kept_pages, mut kept_ptes) = (Vec::new(), Vec::new(), Vec::new());
        let mut skipped_ptes = Vec::new();
        for (&vpn, &old) in gather.pages.iter().zip(&gather.old_ptes) {
            let va = vpn.0 << 12;
            let context = contexts.iter().find(|&&(s, e, _)| va >= s && va < e).map_or(0, |c| c.2);
            let skip = context != 0 && old & PTE_PRESENT != 0 && Some(pte_pfn(old)) != self.zero_page && {
                let word = self.m.mem.word(pte_pfn(old), FrameWord::Tracking);
                self.recycling.skip_unmap_flush(context, word)
            };
            if skip {
                skipped.push(vpn);
                skipped_ptes.push(old);
            } else {
                kept_pages.push(vpn);
                kept_ptes.push(old);
            }
        }
        self.recycling.on_unmap(skipped.len() as u64, kept_pages.len() as u64);
        if skipped.is_empty() {
            return;
        }
        if kept_pages.is_empty() && !gather.tables.is_empty() {
            // Every page stays in its context: the freed tables may too (kept for the
            // context's next tables instead of a flush of every core's walk caches).
            let family = self.spaces[pid as usize].family;
            let key = self.recycling.table_reuse_key(pid, family);
            if key != 0 && contexts.iter().all(|c| c.2 == key) {
                self.recycling.on_tables_kept(gather.tables.len() as u64);
                let tables = std::mem::take(&mut gather.tables);
                self.m.pt.park(&tables, key);
            }
        }
        gather.pages = kept_pages;
        gather.old_ptes = kept_ptes;
        if let Some(tag) = self.tag_on(core, pid) {
            let mut pl = crate::os::PolicyTlb { policy: &mut self.policy, fx: &mut self.fx };
            self.m.cores[core].tlbs.invalidate_pages(&skipped, Some(tag), &mut pl);
        }
        self.stats[core].pages_flushed += skipped.len() as u64;
        self.charge(core, self.settings.costs().invlpg * skipped.len() as u64);
        self.apply_effects();
        if self.settings.checker() {
            // A page a flush still in flight covers (a copy-on-write break a moment ago)
            // may be cached by a core under the translation that flush removes, and used
            // until it arrives: that is the flush's to judge when it completes. Marked now
            // is only what caches the frame this munmap unmapped.
            let (mut now, mut in_flight) = (Vec::new(), Vec::new());
            for (&vpn, &old) in skipped.iter().zip(&skipped_ptes) {
                if self.shootdowns.page_in_flight(pid, vpn.0) {
                    in_flight.push((vpn, pte_pfn(old)));
                } else {
                    now.push(vpn);
                }
            }
            self.mark_stale(pid, &now, &[], &[core]);
            if !in_flight.is_empty() {
                self.mark_stale_caching(pid, &in_flight, core);
            }
        }
    }
}
