//! Page faults of the OS model: the demand-fault entry, anonymous zero-fill with the shared
//! zero page (do_anonymous_page), transparent huge pages with fallback
//! (do_huge_pmd_anonymous_page), and page-cache pages with fault-around (do_read_fault,
//! do_fault_around, do_shared_fault, do_cow_fault), all in mm/memory.c. Copy-on-write
//! faults are in `fork.rs`.
//!
//! Simplified: a page-cache miss stalls the core for `costs.read_page`, except in a demand
//! fault on a storage device whose reads sleep (`machine.storage`: the SSDs), where the
//! thread blocks for it.

use super::{HUGE, PAGE, PAGE_CACHE_OWNER};
use crate::coherence::{Coherence, FrameUse};
use crate::error::Result;
use crate::memory::{FrameKind, FrameWord};
use crate::os::{Os, Vma, FAULT_AROUND_PAGES};
use crate::page_table::pte_pfn;
use crate::types::{CoreId, NodeId, PageSize, Pfn, Vpn};
use crate::workload::program::Backing;

impl<P: Coherence> Os<P> {
    /// Handle a page fault of `pid` at `va` (on `core`; `thread` = usize::MAX for
    /// MAP_POPULATE). Returns false for SIGSEGV.
    pub(crate) fn page_fault(&mut self, core: usize, thread: usize, pid: u32, va: u64, write: bool, present: bool) -> Result<bool> {
        // A fault of a thread (not MAP_POPULATE): the policy may fill the faulting core's TLB
        // with what the handler mapped or made writable, instead of the walk that follows.
        let demand = thread != usize::MAX;
        if demand {
            self.fault_mapped = Some(Vec::new());
        }
        self.io.set_in_demand_fault(demand);
        // The PTE is installed under its page-table lock (finish_fault, do_anonymous_page);
        // charged first, so that a flush the handler starts cannot absorb it.
        self.ptl_section(core, pid, va, self.fault_ptl_hold());
        let handled = self.handle_fault(core, pid, va, write, present);
        self.alloc_context = 0;
        self.io.set_in_demand_fault(false);
        if self.settings.recycling_on() && !self.m.mem.tracked_claims.is_empty() {
            self.settle_claims(core, None);
        }
        let mapped = self.fault_mapped.take();
        let handled = handled?;
        if let (true, Some(mapped)) = (handled, mapped) {
            self.direct_fill(core, pid, va, write, &mapped);
        }
        Ok(handled)
    }

    /// Cycles of a page fault's work done under the page-table lock: one PTE's update, rmap
    /// and counters (`per_page`), out of `page_fault`.
    pub(super) fn fault_ptl_hold(&self) -> u64 {
        self.settings.costs().per_page.min(self.settings.costs().page_fault)
    }

    /// `Coherence::on_demand_fault` for each PTE a demand fault mapped.
    pub(super) fn direct_fill(&mut self, core: usize, pid: u32, va: u64, write: bool, mapped: &[u64]) {
        let n = mapped.len() as u32;
        for &at in mapped {
            let Some(leaf) = self.pte_lookup(pid, at) else { continue };
            let Some(cycles) = self.policy.on_demand_fault(CoreId(core as u32), pid, at, leaf.pte, n, &mut self.fx) else { continue };
            self.charge(core, cycles);
            self.stats[core].direct_fills += 1;
            let faulting = at >> 12 == va >> 12;
            let kind = if write && faulting { crate::types::AccessKind::Store } else { crate::types::AccessKind::Load };
            let size = crate::page_table::PageTables::size_at(leaf.level);
            let flags = crate::tlb::set_assoc::flags_of_pte(leaf.pte);
            let mut pl = crate::os::PolicyTlb { policy: &mut self.policy, fx: &mut self.fx };
            let tlbs = &mut self.m.cores[core].tlbs;
            let e = tlbs.entry(Vpn(at >> 12), pte_pfn(leaf.pte), size, flags);
            tlbs.fill(e, kind, &mut pl);
            if faulting {
                self.direct_filled = true;
            }
        }
        self.apply_effects();
    }

    pub(super) fn handle_fault(&mut self, core: usize, pid: u32, va: u64, write: bool, present: bool) -> Result<bool> {
        self.m.cores[core].stats.page_faults += 1;
        // The part held under the page-table lock is charged by the caller.
        self.charge(core, self.settings.costs().page_fault - self.fault_ptl_hold());
        let Some((start, vma)) = self.vma_at(pid, va) else { return Ok(false) };
        if vma.reserved || (write && !vma.writable) {
            return Ok(false);
        }
        if vma.needs_anon_vma(write) {
            // The private page this write makes needs the VMA's anon_vma
            // (vmf_anon_prepare); os/locks.rs `fault_must_wait` took mmap_lock for it.
            if let Some(v) = self.spaces[pid as usize].vmas.get_mut(&start) {
                v.anon_vma = true;
            }
        }
        self.alloc_context = vma.recycling;
        let page = va & !(PAGE - 1);
        if present {
            return self.write_protect_fault(core, pid, page, &vma).map(|_| true);
        }
        if self.numa.is_some() {
            if let Some(leaf) = self.pte_lookup(pid, page).filter(|l| l.pte & crate::page_table::PTE_PROTNONE != 0) {
                self.numa_hint_fault(core, pid, page, leaf)?;
                return Ok(true);
            }
        }
        let vpn = page >> 12;
        if self.spaces[pid as usize].swapped.remove(&vpn) {
            // Swap-in (do_swap_page): read the page back into a new frame.
            let pfn = self.alloc_data(core, pid, None, vpn)?;
            self.read_from_device(core);
            self.map_page(core, pid, page, pfn, PageSize::Size4K, vma.writable, write)?;
            return Ok(true);
        }
        match vma.backing {
            Backing::Anonymous => self.anon_fault(core, pid, page, start, &vma, write)?,
            Backing::File { file, offset_pages } => {
                let index = offset_pages + (page - start) / PAGE;
                self.file_fault(core, pid, page, start, &vma, file, index, write)?
            }
        }
        Ok(true)
    }

    /// do_anonymous_page / do_huge_pmd_anonymous_page.
    pub(super) fn anon_fault(&mut self, core: usize, pid: u32, page: u64, start: u64, vma: &Vma, write: bool) -> Result<()> {
        if self.settings.thp() && !vma.shared {
            let huge = page & !(HUGE - 1);
            if huge >= start && huge + HUGE <= vma.end && !self.m.pt.has_page_table(self.spaces[pid as usize].root, self.settings.pt_levels(), huge) {
                let node = self.data_node(core);
                if let Some(pfn) = self.m.huge_block(core, node, pid) {
                    for f in pfn.0..pfn.0 + 512 {
                        let (policy, fx) = (&mut self.policy, &mut self.fx);
                        self.m.mem.update_word(Pfn(f), FrameWord::Technique, |w| {
                            policy.on_frame_alloc(CoreId(core as u32), Pfn(f), w, FrameUse { mm: pid, file: false }, fx)
                        });
                    }
                    self.apply_effects();
                    self.charge(core, self.settings.costs().zero_page * 512);
                    let group = self.spaces[pid as usize].group;
                    self.groups.charge(pfn, group, 512);
                    self.m.mem.desc_mut(pfn).set_index(huge >> 12);
                    self.huge_frames.insert(pfn.0);
                    return self.map_page(core, pid, huge, pfn, PageSize::Size2M, vma.writable, write);
                }
                // No free 2 MiB block: fall back to a 4 KiB page (THP's fallback path).
            }
        }
        if !write && !vma.shared {
            // A read maps the shared zero page read-only; the first write copies it.
            let zero = self.zero_page()?;
            return self.map_page(core, pid, page, zero, PageSize::Size4K, false, false);
        }
        let pfn = self.alloc_data(core, pid, None, page >> 12)?;
        self.charge(core, self.settings.costs().zero_page);
        self.map_page(core, pid, page, pfn, PageSize::Size4K, vma.writable, write)
    }

    pub(super) fn zero_page(&mut self) -> Result<Pfn> {
        if let Some(z) = self.zero_page {
            return Ok(z);
        }
        let z = self.m.mem.alloc(NodeId(0), FrameKind::Data, u32::MAX)?;
        self.zero_page = Some(z);
        Ok(z)
    }

    /// One page read from the storage device: the thread sleeps for it in a demand fault
    /// on a device whose reads sleep (access.rs blocks it when the fault returns), else the
    /// core stalls in the kernel.
    pub(super) fn read_from_device(&mut self, core: usize) {
        if !self.io.sleep_for_read(self.settings.costs().read_page) {
            self.charge(core, self.settings.costs().read_page);
        }
    }

    /// The page-cache page `index` of `file`, read in on a miss.
    pub(crate) fn cache_page(&mut self, core: usize, pid: u32, file: u32, index: u64) -> Result<Pfn> {
        self.cache_page_filled(core, pid, file, index, true)
    }

    /// The page-cache page `index` of `file`; on a miss a new page, read from the device if
    /// `read` (a write(2) that overwrites the whole page does not read it:
    /// generic_perform_write's write_begin reads only a partial page that is not uptodate).
    pub(crate) fn cache_page_filled(&mut self, core: usize, pid: u32, file: u32, index: u64, read: bool) -> Result<Pfn> {
        if let Some(&pfn) = self.page_cache.get(&(file, index)) {
            return Ok(pfn);
        }
        self.stats[core].page_cache_misses += 1;
        let pfn = self.alloc_data(core, pid, Some(file), index)?;
        self.m.mem.set_owner(pfn, PAGE_CACHE_OWNER);
        if read {
            self.read_from_device(core);
        }
        self.page_cache.insert((file, index), pfn);
        Ok(pfn)
    }

    /// do_read_fault (with do_fault_around) / do_shared_fault / do_cow_fault.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn file_fault(&mut self, core: usize, pid: u32, page: u64, start: u64, vma: &Vma, file: u32, index: u64, write: bool) -> Result<()> {
        self.stats[core].file_faults += 1;
        let pfn = self.cache_page(core, pid, file, index)?;
        if write && !vma.shared {
            // Private write: copy the file page into an anonymous one.
            let copy = self.alloc_data(core, pid, None, page >> 12)?;
            self.charge(core, self.settings.costs().copy_page);
            return self.map_page(core, pid, page, copy, PageSize::Size4K, true, true);
        }
        // A shared writable mapping is mapped writable on a write fault; a read fault maps
        // read-only (the kernel tracks dirtying with the next write fault).
        self.map_page(core, pid, page, pfn, PageSize::Size4K, vma.shared && write, write)?;
        if !write {
            // Fault-around: map the neighbours already in the page cache, read-only.
            let window = FAULT_AROUND_PAGES * PAGE;
            let lo = (page & !(window - 1)).max(start);
            let hi = ((page & !(window - 1)) + window).min(vma.end);
            let mut va = lo;
            while va < hi {
                if va != page {
                    let idx = index as i64 + (va as i64 - page as i64) / PAGE as i64;
                    if idx >= 0 {
                        if let Some(&p) = self.page_cache.get(&(file, idx as u64)) {
                            if self.pte_lookup(pid, va).is_none() {
                                self.map_page(core, pid, va, p, PageSize::Size4K, false, false)?;
                            }
                        }
                    }
                }
                va += PAGE;
            }
        }
        Ok(())
    }
}
