//! Memory management of the OS model: mmap placement, page faults (anonymous zero-fill
//! with the shared zero page, transparent huge pages with fallback, page-cache pages with
//! fault-around, copy-on-write, swap-in), the system calls that change page tables
//! (munmap, mprotect, madvise(MADV_DONTNEED), msync, fork, exit, NUMA page migration),
//! reverse mapping, per-group accounting and kswapd-style reclaim.
//!
//! Each path follows the Linux function named in its comment (mm/mmap.c, mm/memory.c,
//! mm/mprotect.c, mm/madvise.c, mm/msync.c + mm/rmap.c page_mkclean, kernel/fork.c
//! dup_mmap, mm/migrate.c, mm/vmscan.c) at the level of which PTEs change, which frames
//! come and go through which lists, and which TLB flush request results.
//!
//! Simplified: msync's page_mkclean flushes per page in Linux; here one batched request
//! covers the pages an msync cleans. Reclaim skips huge pages. A page-cache miss stalls
//! the core for `costs.read_page`, except in a demand fault on a storage device whose
//! reads sleep (`machine.storage`: the SSDs), where the thread blocks for it.

use super::locks::PtlCursor;
use super::{Gather, Os, Vma, FAULT_AROUND_PAGES, MMAP_TOP};
use crate::coherence::{Coherence, FlushReason, FrameUse};
use crate::error::{Error, Result};
use crate::memory::{FrameKind, FrameWord};
use crate::page_table::{pte_pfn, PTE_ACCESSED, PTE_DIRTY, PTE_PRESENT, PTE_USER, PTE_WRITABLE};
use crate::types::{CoreId, NodeId, PageSize, Pfn, Vpn};
use crate::workload::program::{Backing, MapSpec};

pub(super) const PAGE: u64 = 4096;
pub(super) const HUGE: u64 = 2 << 20;
/// End of x86-64's 47-bit user address space (TASK_SIZE_MAX, rounded).
const USER_TOP: u64 = 1 << 47;

impl<P: Coherence> Os<P> {
    /// Node a new data frame comes from for a fault on `core`.
    fn data_node(&mut self, core: usize) -> NodeId {
        let nodes = self.m.mem.nodes();
        self.data_placement.node(self.m.cores[core].socket, nodes, &mut self.interleave_next)
    }

    /// mmap: place a new VMA top-down below the lowest gap that fits (Linux's
    /// unmapped_area_topdown), or at `fixed_at` (MAP_FIXED), populate it if asked. Returns
    /// its address.
    pub(crate) fn mmap_region(&mut self, core: usize, pid: u32, spec: &MapSpec, fixed_at: Option<u64>) -> Result<u64> {
        let len = spec.bytes.div_ceil(PAGE) * PAGE;
        let p = &self.procs[pid as usize];
        // Free: neither the VMA nor the held range starting last below `hi` reaches `lo`.
        let (vma_map, held_map) = (&p.vmas, &p.held);
        let is_free = |lo: u64, hi: u64| {
            lo < hi
                && hi <= MMAP_TOP
                && !vma_map.range(..hi).next_back().is_some_and(|(_, v)| v.end > lo)
                && !held_map.range(..hi).next_back().is_some_and(|(_, &e)| e > lo)
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
            let default_va = if self.recycling_on { self.recycling.choose_mmap_va(pid, len, default_va, &is_free) } else { default_va };
            let va = self.policy.choose_mmap_va(pid, len, default_va, &is_free);
            if va % PAGE != 0 || !is_free(va, va + len) {
                return Err(Error::Sim(format!(
                    "process {pid}: the coherence policy chose {va:#x} for a {len}-byte mapping, which is not a free, page-aligned range"
                )));
            }
            va
        };
        let family = p.family;
        let recycling = if self.recycling_on { self.recycling.mapping_context(pid, family, spec) } else { 0 };
        if fixed_at.is_some() && self.recycling_on && self.recycling.fixed_mapping_needs_flush(pid, va, len) {
            // Stale entries of an earlier mapping at this address may have survived a
            // skipped flush: flush the range on every core of the address space.
            let pages: Vec<Vpn> = (va >> 12..(va + len) >> 12).map(Vpn).collect();
            self.flush(core, pid, FlushReason::Policy, false, Gather::of_pages(pages));
        }
        self.procs[pid as usize]
            .vmas
            .insert(va, Vma { end: va + len, writable: spec.writable, shared: spec.shared, backing: spec.backing, reserved: false, recycling });
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
        self.procs[pid as usize].vmas.range(..va.saturating_add(len)).next_back().is_some_and(|(_, v)| v.end > va)
    }

    fn vma_at(&self, pid: u32, va: u64) -> Option<(u64, Vma)> {
        let (&start, vma) = self.procs[pid as usize].vmas.range(..=va).next_back()?;
        (va < vma.end).then(|| (start, vma.clone()))
    }

    /// Map one page in `pid`'s tree, page-table pages placed by `os.pt_placement`.
    #[allow(clippy::too_many_arguments)]
    fn map_page(&mut self, core: usize, pid: u32, va: u64, pfn: Pfn, size: PageSize, writable: bool, dirty: bool) -> Result<()> {
        // A PTE never maps a free frame (checked in release builds too: a frame freed
        // under a fault would be handed out again while mapped, its map count reset).
        if self.m.mem.desc(pfn).kind == FrameKind::Free {
            return Err(Error::Sim(format!("process {pid}: mapping {va:#x} to frame {:#x}, which is free", pfn.0)));
        }
        let mut flags = PTE_USER;
        if writable {
            flags |= PTE_WRITABLE;
        }
        if dirty {
            flags |= PTE_DIRTY;
        }
        self.pte_map(core, pid, va, pfn, size, flags)?;
        if let Some(mapped) = self.fault_mapped.as_mut() {
            mapped.push(va);
        }
        if Some(pfn) != self.zero_page {
            let count = self.m.mem.mapcount(pfn);
            self.m.mem.set_mapcount(pfn, count + 1);
        }
        Ok(())
    }

    /// Allocate a data frame for `pid` (anonymous at `vpn`, or page `index` of `file`),
    /// charge its group, reclaim if the group runs low, and put the frame on the group's
    /// LRU.
    fn alloc_data(&mut self, core: usize, pid: u32, file: Option<u32>, index: u64) -> Result<Pfn> {
        let node = self.data_node(core);
        let pfn = self.alloc_frame_on(core, node, FrameKind::Data, pid)?;
        if self.recycling_on {
            self.settle_claims(core, Some((pfn, self.alloc_context)));
        }
        let usage = FrameUse { mm: if file.is_some() { u32::MAX } else { pid }, file: file.is_some() };
        let (policy, fx) = (&mut self.policy, &mut self.fx);
        self.m.mem.update_word(pfn, FrameWord::Technique, |w| policy.on_frame_alloc(CoreId(core as u32), pfn, w, usage, fx));
        self.apply_effects();
        let group = self.procs[pid as usize].group;
        self.m.mem.set_mapping(pfn, file.map_or(0, |f| f + 1));
        self.m.mem.desc_mut(pfn).set_index(index);
        let g = &mut self.groups[group];
        g.used_pages += 1;
        self.frame_group.insert(pfn.0, group as u32);
        if g.limit_pages > 0 {
            let min = (g.limit_pages / 64).max(8);
            let (low, high) = (min + min / 4, min + min / 2);
            if g.limit_pages.saturating_sub(g.used_pages) < low {
                self.reclaim(core, group, high)?;
            }
        }
        // On the LRU only now: Linux adds a new page to it once it is mapped
        // (folio_add_lru_vma), so the reclaim its charge runs never meets it. On the LRU
        // before, reclaim found it unmapped and freed it under the fault about to map it.
        self.lru_push(pfn, group);
        if !self.recycling_on || !self.recycling.reclaim_holds(&self.m.mem.word(pfn, FrameWord::Tracking)) {
            self.groups[group].only_held = false;
        }
        Ok(pfn)
    }

    /// Put `pfn` at the young end of `group`'s LRU (a new stamp; older entries of it in the
    /// queue go stale).
    fn lru_push(&mut self, pfn: Pfn, group: usize) {
        self.lru_stamp += 1;
        self.m.mem.set_word(pfn, FrameWord::LruStamp, self.lru_stamp);
        self.groups[group].lru.push_back((pfn, self.lru_stamp));
    }

    /// One frame from `core`'s per-CPU list of `node`; a refill from the buddy allocator
    /// runs under the node's zone lock.
    pub(super) fn alloc_frame_on(&mut self, core: usize, node: NodeId, kind: FrameKind, owner: u32) -> Result<Pfn> {
        let before = self.m.mem.zone_frames_moved;
        let pfn = self.m.mem.alloc_on(CoreId(core as u32), node, kind, owner)?;
        let moved = self.m.mem.zone_frames_moved - before;
        if moved > 0 {
            self.zone_section(core, node.0 as usize, moved);
        }
        Ok(pfn)
    }

    /// The recycling axis hears of every frame claimed since the last call: `data`, a data
    /// frame for a mapping of the given context, and any other claimed frame whose tracking
    /// word was not 0 (a page table, a huge page, the zero page: a plain use). Frames
    /// leaving their recycling context may need one global shootdown, sent from `core`.
    pub(crate) fn settle_claims(&mut self, core: usize, data: Option<(Pfn, u32)>) {
        use crate::recycling::{AllocAction, AllocUse};
        // Frames that need a new global request, and frames the core's own request in
        // flight covers.
        let mut transit = Vec::new();
        let mut joined = Vec::new();
        let c = CoreId(core as u32);
        let (in_flight_sd, global_in_flight) = self.global_in_flight[core].unwrap_or((usize::MAX, 0));
        if let Some((pfn, context)) = data {
            let recycling = &mut self.recycling;
            let (before, action) = self.m.mem.update_word(pfn, FrameWord::Tracking, |w| (*w, recycling.on_alloc(c, w, AllocUse { context, global_in_flight })));
            match action {
                AllocAction::GlobalShootdown => transit.push((pfn, before)),
                AllocAction::JoinGlobal => joined.push((pfn, before)),
                AllocAction::None => {}
            }
        }
        if !self.m.mem.tracked_claims.is_empty() {
            for (head, order) in std::mem::take(&mut self.m.mem.tracked_claims) {
                for f in head.0..head.0 + (1 << order) {
                    if data.is_some_and(|(p, _)| p.0 == f) {
                        continue;
                    }
                    let before = self.m.mem.word(Pfn(f), FrameWord::Tracking);
                    if before != 0 {
                        let recycling = &mut self.recycling;
                        match self.m.mem.update_word(Pfn(f), FrameWord::Tracking, |w| recycling.on_alloc(c, w, AllocUse { context: 0, global_in_flight })) {
                            AllocAction::GlobalShootdown => transit.push((Pfn(f), before)),
                            AllocAction::JoinGlobal => joined.push((Pfn(f), before)),
                            AllocAction::None => {}
                        }
                    }
                }
            }
        }
        for (f, w) in joined {
            self.frames_in_transit.insert(f.0, w);
            self.shootdowns[in_flight_sd].frames_in_transit.push(f);
        }
        if !transit.is_empty() {
            self.flush_global_for(core, Gather::default(), transit);
        }
    }

    /// Free a data frame (after any flush that needed it gone from TLBs).
    pub(crate) fn free_frame(&mut self, core: usize, pfn: Pfn, order: u32) {
        if Some(pfn) == self.zero_page {
            return;
        }
        let d = *self.m.mem.desc(pfn);
        if d.kind == FrameKind::Free {
            return;
        }
        let mapping = self.m.mem.mapping(pfn);
        if let Some(numa) = self.numa.as_mut() {
            numa.forget(pfn);
        }
        if mapping != 0 {
            // Its page-cache entry, unless reclaim took the page out of the page cache
            // before its flush and a fault has read the file page in again since.
            let key = (mapping - 1, d.index());
            if self.page_cache.get(&key) == Some(&pfn) {
                self.page_cache.remove(&key);
            }
        }
        if let Some(g) = self.frame_group.remove(&pfn.0) {
            let g = &mut self.groups[g as usize];
            g.used_pages = g.used_pages.saturating_sub(1 << order);
        }
        for f in pfn.0..pfn.0 + (1 << order) {
            let (policy, fx) = (&mut self.policy, &mut self.fx);
            self.m.mem.update_word(Pfn(f), FrameWord::Technique, |w| policy.on_frame_free(CoreId(core as u32), Pfn(f), w, fx));
            if self.recycling_on {
                let recycling = &mut self.recycling;
                self.m.mem.update_word(Pfn(f), FrameWord::Tracking, |w| recycling.on_free(w));
            }
        }
        self.apply_effects();
        if order == 0 {
            let before = self.m.mem.zone_frames_moved;
            self.m.mem.free_on(CoreId(core as u32), pfn);
            let moved = self.m.mem.zone_frames_moved - before;
            if moved > 0 {
                self.zone_section(core, crate::memory::node_of(pfn).0 as usize, moved);
            }
        } else {
            self.m.mem.free_order(pfn, order);
        }
    }

    /// Handle a page fault of `pid` at `va` (on `core`; `thread` = usize::MAX for
    /// MAP_POPULATE). Returns false for SIGSEGV.
    pub(crate) fn page_fault(&mut self, core: usize, thread: usize, pid: u32, va: u64, write: bool, present: bool) -> Result<bool> {
        // A fault of a thread (not MAP_POPULATE): the policy may fill the faulting core's TLB
        // with what the handler mapped or made writable, instead of the walk that follows.
        let demand = thread != usize::MAX;
        if demand {
            self.fault_mapped = Some(Vec::new());
        }
        self.in_demand_fault = demand;
        // The PTE is installed under its page-table lock (finish_fault, do_anonymous_page);
        // charged first, so that a flush the handler starts cannot absorb it.
        self.ptl_section(core, pid, va, self.fault_ptl_hold());
        let handled = self.handle_fault(core, pid, va, write, present);
        self.alloc_context = 0;
        self.in_demand_fault = false;
        if self.recycling_on && !self.m.mem.tracked_claims.is_empty() {
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
    fn fault_ptl_hold(&self) -> u64 {
        self.costs.per_page.min(self.costs.page_fault)
    }

    /// `Coherence::on_demand_fault` for each PTE a demand fault mapped.
    fn direct_fill(&mut self, core: usize, pid: u32, va: u64, write: bool, mapped: &[u64]) {
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
            let mut pl = super::PolicyTlb { policy: &mut self.policy, fx: &mut self.fx };
            let tlbs = &mut self.m.cores[core].tlbs;
            let e = tlbs.entry(Vpn(at >> 12), pte_pfn(leaf.pte), size, flags);
            tlbs.fill(e, kind, &mut pl);
            if faulting {
                self.direct_filled = true;
            }
        }
        self.apply_effects();
    }

    fn handle_fault(&mut self, core: usize, pid: u32, va: u64, write: bool, present: bool) -> Result<bool> {
        self.m.cores[core].stats.page_faults += 1;
        // The part held under the page-table lock is charged by the caller.
        self.charge(core, self.costs.page_fault - self.fault_ptl_hold());
        let Some((start, vma)) = self.vma_at(pid, va) else { return Ok(false) };
        if vma.reserved || (write && !vma.writable) {
            return Ok(false);
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
        if self.procs[pid as usize].swapped.remove(&vpn) {
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
    fn anon_fault(&mut self, core: usize, pid: u32, page: u64, start: u64, vma: &Vma, write: bool) -> Result<()> {
        if self.thp && !vma.shared {
            let huge = page & !(HUGE - 1);
            if huge >= start && huge + HUGE <= vma.end && !self.m.pt.has_page_table(self.procs[pid as usize].root, self.pt_levels, huge) {
                let node = self.data_node(core);
                if let Some(pfn) = self.m.huge_block(core, node, pid) {
                    for f in pfn.0..pfn.0 + 512 {
                        let (policy, fx) = (&mut self.policy, &mut self.fx);
                        self.m.mem.update_word(Pfn(f), FrameWord::Technique, |w| {
                            policy.on_frame_alloc(CoreId(core as u32), Pfn(f), w, FrameUse { mm: pid, file: false }, fx)
                        });
                    }
                    self.apply_effects();
                    self.charge(core, self.costs.zero_page * 512);
                    let group = self.procs[pid as usize].group;
                    self.groups[group].used_pages += 512;
                    self.frame_group.insert(pfn.0, group as u32);
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
        self.charge(core, self.costs.zero_page);
        self.map_page(core, pid, page, pfn, PageSize::Size4K, vma.writable, write)
    }

    fn zero_page(&mut self) -> Result<Pfn> {
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
    fn read_from_device(&mut self, core: usize) {
        if self.io_sleeps && self.in_demand_fault {
            self.io_wait += self.costs.read_page;
        } else {
            self.charge(core, self.costs.read_page);
        }
    }

    /// The page-cache page `index` of `file`, read in on a miss.
    fn cache_page(&mut self, core: usize, pid: u32, file: u32, index: u64) -> Result<Pfn> {
        if let Some(&pfn) = self.page_cache.get(&(file, index)) {
            return Ok(pfn);
        }
        self.stats[core].page_cache_misses += 1;
        let pfn = self.alloc_data(core, pid, Some(file), index)?;
        self.m.mem.set_owner(pfn, PAGE_CACHE_OWNER);
        self.read_from_device(core);
        self.page_cache.insert((file, index), pfn);
        Ok(pfn)
    }

    /// do_read_fault (with do_fault_around) / do_shared_fault / do_cow_fault.
    #[allow(clippy::too_many_arguments)]
    fn file_fault(&mut self, core: usize, pid: u32, page: u64, start: u64, vma: &Vma, file: u32, index: u64, write: bool) -> Result<()> {
        self.stats[core].file_faults += 1;
        let pfn = self.cache_page(core, pid, file, index)?;
        if write && !vma.shared {
            // Private write: copy the file page into an anonymous one.
            let copy = self.alloc_data(core, pid, None, page >> 12)?;
            self.charge(core, self.costs.copy_page);
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

    /// A write to a present read-only PTE in a writable VMA: copy-on-write (wp_page_copy,
    /// whose ptep_clear_flush is a one-page flush request) or reuse (wp_page_reuse: the
    /// only mapper gets write permission, no flush, as Linux).
    fn write_protect_fault(&mut self, core: usize, pid: u32, page: u64, vma: &Vma) -> Result<()> {
        let leaf = self.pte_lookup(pid, page).expect("present");
        let old = pte_pfn(leaf.pte);
        if leaf.level != 1 {
            // A write-protected huge page (after fork): make it writable in place if this
            // process is its only mapper, else split-free copy is not modelled: reuse.
            self.pte_write(core, pid, page, &leaf, leaf.pte | PTE_WRITABLE | PTE_DIRTY);
            return Ok(());
        }
        let shared_frame = Some(old) == self.zero_page || self.m.mem.mapping(old) != 0 || self.m.mem.mapcount(old) > 1;
        if vma.shared || !shared_frame {
            // wp_page_reuse: made writable in place.
            self.pte_write(core, pid, page, &leaf, leaf.pte | PTE_WRITABLE | PTE_DIRTY);
            if let Some(mapped) = self.fault_mapped.as_mut() {
                mapped.push(page);
            }
            return Ok(());
        }
        let new = self.alloc_data(core, pid, None, page >> 12)?;
        self.charge(core, if Some(old) == self.zero_page { self.costs.zero_page } else { self.costs.copy_page });
        // wp_page_copy allocates and copies without the page-table lock, then retakes it
        // and breaks the sharing only if the PTE is still the one the fault read
        // (pte_same): the allocation may have run the group's reclaim, which can evict this
        // very page (every PTE of it cleared, its map count 0). Then the new page goes
        // back and the access faults again on what the PTE is now (a swap-in). The
        // accessed bit alone, which reclaim clears for a second chance, does not count
        // here (Linux would refault once for it).
        let Some(leaf) = self.pte_lookup(pid, page).filter(|l| l.level == 1 && l.pte & !PTE_ACCESSED == leaf.pte & !PTE_ACCESSED) else {
            self.free_frame(core, new, 0);
            return Ok(());
        };
        self.stats[core].cow_faults += 1;
        let old_pte = self.pte_write(core, pid, page, &leaf, 0);
        let mut gather = Gather::default();
        gather.page(Vpn(page >> 12), old_pte);
        if Some(old) != self.zero_page {
            let mapping = self.m.mem.mapping(old);
            // A mapped page has a map count of at least 1 (checked in release builds too:
            // a wrapped count would go unnoticed, and a fault is no hot path).
            let count = self
                .m
                .mem
                .mapcount(old)
                .checked_sub(1)
                .ok_or_else(|| Error::Sim(format!("copy-on-write at {page:#x} of process {pid}: its frame {:#x} has a map count of 0", old.0)))?;
            self.m.mem.set_mapcount(old, count);
            if count == 0 && mapping == 0 {
                self.free_after_flush(old, &mut gather);
            }
        }
        self.map_page(core, pid, page, new, PageSize::Size4K, true, true)?;
        self.flush(core, pid, FlushReason::CopyOnWrite, false, gather);
        Ok(())
    }

    /// The last PTE of the anonymous page `pfn` is gone: the frame is freed after the flush
    /// `gather` becomes (tlb_remove_page). It leaves the LRU now: until then Linux's
    /// mmu_gather holds a reference that keeps reclaim from freeing it; here reclaim would
    /// free it at once, and the flush's end free it again, maybe mapped by a new owner.
    fn free_after_flush(&mut self, pfn: Pfn, gather: &mut Gather) {
        self.m.mem.set_word(pfn, FrameWord::LruStamp, 0);
        gather.frames.push((pfn, 0));
    }

    /// Clear the leaf entries of `[va, va+len)` (zap_pte_range), gathering pages to flush
    /// and frames to free. Huge pages partly in the range are split first.
    fn zap(&mut self, core: usize, pid: u32, va: u64, len: u64, gather: &mut Gather) -> Result<()> {
        let end = va + len;
        let mut page = va;
        let mut ptl = PtlCursor::default();
        while let Some((at, leaf)) = self.next_leaf(pid, page, end) {
            page = at;
            let pfn = pte_pfn(leaf.pte);
            self.ptl_at(core, &mut ptl, pid, page);
            if leaf.level == 2 {
                let base = page & !(HUGE - 1);
                if base < va || base + HUGE > end {
                    self.split_huge(core, pid, base, leaf.pte)?;
                    continue;
                }
                let old_pte = self.pte_write(core, pid, page, &leaf, 0);
                gather.page(Vpn(base >> 12), old_pte);
                self.charge(core, self.costs.per_page);
                let count = self.m.mem.mapcount(pfn).saturating_sub(1);
                self.m.mem.set_mapcount(pfn, count);
                if count == 0 {
                    self.huge_frames.remove(&pfn.0);
                    gather.frames.push((pfn, 9));
                }
                page = base + HUGE;
                continue;
            }
            let old_pte = self.pte_write(core, pid, page, &leaf, 0);
            gather.page(Vpn(page >> 12), old_pte);
            self.charge(core, self.costs.per_page);
            if Some(pfn) != self.zero_page {
                let mapping = self.m.mem.mapping(pfn);
                let count = self.m.mem.mapcount(pfn).saturating_sub(1);
                self.m.mem.set_mapcount(pfn, count);
                if count == 0 && mapping == 0 {
                    self.free_after_flush(pfn, gather);
                }
            }
            page += PAGE;
        }
        self.ptl_release(core, &mut ptl);
        let swapped = &mut self.procs[pid as usize].swapped;
        if !swapped.is_empty() {
            swapped.retain(|&v| v < va >> 12 || v >= end >> 12);
        }
        Ok(())
    }

    /// The first page at or after `page` and below `end` that `pid` maps, with its leaf.
    pub(super) fn next_leaf(&self, pid: u32, mut page: u64, end: u64) -> Option<(u64, crate::page_table::Leaf)> {
        while page < end {
            if let Some(leaf) = self.pte_lookup(pid, page) {
                return Some((page, leaf));
            }
            page = self.next_candidate(pid, page, end);
        }
        None
    }

    /// Next address at or after `page` that may have a leaf (skips unmapped 2 MiB regions).
    fn next_candidate(&self, pid: u32, page: u64, end: u64) -> u64 {
        if self.m.pt.pd_entry(self.procs[pid as usize].root, self.pt_levels, page) & PTE_PRESENT == 0 {
            ((page & !(HUGE - 1)) + HUGE).min(end)
        } else {
            page + PAGE
        }
    }

    /// Split a 2 MiB mapping into 512 4 KiB PTEs of the same frames (split_huge_pmd).
    fn split_huge(&mut self, core: usize, pid: u32, base: u64, pte: u64) -> Result<()> {
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
    fn remove_vmas(&mut self, pid: u32, va: u64, len: u64) {
        let end = va + len;
        let vmas = &mut self.procs[pid as usize].vmas;
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

    /// munmap (__do_munmap → unmap_region: zap, free_pgtables, tlb_finish_mmu).
    pub(crate) fn sys_munmap(&mut self, core: usize, thread: usize, va: u64, len: u64) -> Result<()> {
        self.unmap_range(core, thread, va, len, true)
    }

    /// Unmap `[va, va+len)` of `thread`'s process: munmap's work, which MAP_FIXED also does
    /// to whatever its range overlaps (there without downgrading `mmap_lock`).
    pub(crate) fn unmap_range(&mut self, core: usize, thread: usize, va: u64, len: u64, downgrade: bool) -> Result<()> {
        let pid = self.threads[thread].pid;
        if len == 0 {
            return Ok(());
        }
        let mut gather = Gather::default();
        // Recycling contexts of the VMAs in the range, before they go.
        let contexts: Vec<(u64, u64, u32)> = if self.recycling_on {
            let vmas = &self.procs[pid as usize].vmas;
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
        self.zap(core, pid, va, len, &mut gather)?;
        gather.tables = self.pte_free_tables(pid, va, va + len);
        if !contexts.is_empty() {
            self.skip_recycled_flushes(core, pid, &contexts, &mut gather);
        }
        if self.policy.on_range_unmapped(CoreId(core as u32), pid, va, va + len, &mut self.fx) {
            self.procs[pid as usize].held.insert(va, va + len);
        }
        self.apply_effects();
        self.flush(core, pid, FlushReason::Munmap, false, gather);
        Ok(())
    }

    /// The recycling axis may skip the remote flush of unmapped pages that stay in their
    /// mapping's recycling context (FPR §IV-A): they leave the gather; the initiator still
    /// invalidates its own entries, and the checker marks what other cores still cache
    /// (each later use is judged by the axis' rule, `permits_stale_use`).
    fn skip_recycled_flushes(&mut self, core: usize, pid: u32, contexts: &[(u64, u64, u32)], gather: &mut Gather) {
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
            let family = self.procs[pid as usize].family;
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
            let mut pl = super::PolicyTlb { policy: &mut self.policy, fx: &mut self.fx };
            self.m.cores[core].tlbs.invalidate_pages(&skipped, Some(tag), &mut pl);
        }
        self.stats[core].pages_flushed += skipped.len() as u64;
        self.charge(core, self.costs.invlpg * skipped.len() as u64);
        self.apply_effects();
        if self.checker {
            // A page a flush still in flight covers (a copy-on-write break a moment ago)
            // may be cached by a core under the translation that flush removes, and used
            // until it arrives: that is the flush's to judge when it completes. Marked now
            // is only what caches the frame this munmap unmapped.
            let (mut now, mut in_flight) = (Vec::new(), Vec::new());
            for (&vpn, &old) in skipped.iter().zip(&skipped_ptes) {
                if self.pages_in_flight.contains_key(&(pid, vpn.0)) {
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

    /// madvise(MADV_DONTNEED): zap the range, keep the VMA and the page tables.
    pub(crate) fn sys_dontneed(&mut self, core: usize, thread: usize, va: u64, len: u64) -> Result<()> {
        let pid = self.threads[thread].pid;
        let mut gather = Gather::default();
        self.zap(core, pid, va, len, &mut gather)?;
        self.flush(core, pid, FlushReason::MadviseDontneed, false, gather);
        Ok(())
    }

    /// mprotect (change_protection): every present PTE of the range is rewritten; any
    /// rewrite means a flush of the range (Linux flushes for RW→RO and RO→RW alike).
    pub(crate) fn sys_mprotect(&mut self, core: usize, thread: usize, va: u64, len: u64, writable: bool) -> Result<()> {
        let pid = self.threads[thread].pid;
        let end = va + len;
        // Split VMAs at the range's ends and set the new protection.
        let vmas = &mut self.procs[pid as usize].vmas;
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
        let mut gather = Gather::default();
        let mut page = va;
        let mut ptl = PtlCursor::default();
        while let Some((at, leaf)) = self.next_leaf(pid, page, end) {
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
            self.charge(core, self.costs.per_page);
            page = (page & !(step - 1)) + step;
        }
        self.ptl_release(core, &mut ptl);
        self.flush(core, pid, FlushReason::Mprotect, false, gather);
        Ok(())
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
                    self.charge(core, self.costs.per_page + self.costs.write_page);
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

    /// move_pages / migrate_pages: each page of the range not on `node` gets a new frame
    /// there (migrate_pages: every mapping's PTE, found through rmap, is cleared and
    /// flushed, the data copied, the PTEs pointed at the new frame; a page-cache page
    /// moves in the page cache too). One flush request per address space for every
    /// `os.migrate_batch` pages migrated (Linux's TTU_BATCH_FLUSH batches), waited for
    /// before the next batch. Returns where to go on from when a flush left the core
    /// waiting for acks (None: done).
    pub(crate) fn sys_migrate_pages(&mut self, core: usize, thread: usize, va: u64, len: u64, node: NodeId) -> Result<Option<u64>> {
        let pid = self.threads[thread].pid;
        if node.0 >= self.m.mem.nodes() {
            return Err(Error::Sim(format!("migrate to node {}: the machine has {} nodes", node.0, self.m.mem.nodes())));
        }
        let mut per_mm: Vec<(u32, Gather)> = vec![(pid, Gather::default())];
        let end = va + len;
        let mut page = va;
        let mut batched = 0;
        while let Some((at, leaf)) = self.next_leaf(pid, page, end) {
            page = at;
            let old = pte_pfn(leaf.pte);
            if leaf.level != 1 || crate::memory::node_of(old) == node || Some(old) == self.zero_page {
                page += if leaf.level == 2 { HUGE - (page & (HUGE - 1)) } else { PAGE };
                continue;
            }
            let owner = self.m.mem.owner(old);
            let new = self.alloc_frame_on(core, node, FrameKind::Data, owner)?;
            self.take_frame_identity(core, old, new);
            for (p, at) in self.mappings(old) {
                let l = self.pte_lookup(p, at).expect("rmap found it mapped");
                let flags = l.pte & !crate::page_table::PTE_PFN_MASK;
                let mut ptl = PtlCursor::default();
                self.ptl_at(core, &mut ptl, p, at);
                let old_pte = self.pte_write(core, p, at, &l, crate::page_table::make_pte(new, flags));
                self.ptl_release(core, &mut ptl);
                let g = match per_mm.iter_mut().find(|(q, _)| *q == p) {
                    Some((_, g)) => g,
                    None => {
                        per_mm.push((p, Gather::default()));
                        &mut per_mm.last_mut().expect("pushed").1
                    }
                };
                g.page(Vpn(at >> 12), old_pte);
            }
            // The old frame is freed once the caller's flush is over.
            self.drop_frame_identity(old);
            per_mm[0].1.frames.push((old, 0));
            self.stats[core].pages_migrated += 1;
            self.charge(core, self.costs.copy_page + self.costs.per_page);
            page += PAGE;
            batched += 1;
            if batched == self.migrate_batch {
                batched = 0;
                let batch = std::mem::replace(&mut per_mm, vec![(pid, Gather::default())]);
                if self.flush_migrated(core, batch) && page < end {
                    return Ok(Some(page));
                }
            }
        }
        self.flush_migrated(core, per_mm);
        Ok(None)
    }

    /// Migration: `new`, just allocated, takes over what `old` is (its recycling context,
    /// memory group and LRU place, page-cache index, map count); `old`'s PTEs still point
    /// to it (`mappings` finds them) until the caller rewrites them.
    pub(crate) fn take_frame_identity(&mut self, core: usize, old: Pfn, new: Pfn) {
        let d = *self.m.mem.desc(old);
        let (mapping, mapcount) = (self.m.mem.mapping(old), self.m.mem.mapcount(old));
        if self.recycling_on {
            let context = self.recycling.migration_context(self.m.mem.word(old, FrameWord::Tracking));
            self.settle_claims(core, Some((new, context)));
        }
        let group = self.frame_group.remove(&old.0);
        if let Some(g) = group {
            self.frame_group.insert(new.0, g);
        }
        self.lru_stamp += 1;
        let stamp = self.lru_stamp;
        self.m.mem.desc_mut(new).set_index(d.index());
        self.m.mem.set_mapcount(new, mapcount);
        self.m.mem.set_mapping(new, mapping);
        self.m.mem.set_word(new, FrameWord::LruStamp, stamp);
        if let Some(g) = group {
            self.groups[g as usize].lru.push_back((new, stamp));
        }
        if mapping != 0 {
            self.page_cache.insert((mapping - 1, d.index()), new);
        }
    }

    /// Migration: the old frame, no longer mapped, waits to be freed.
    pub(crate) fn drop_frame_identity(&mut self, old: Pfn) {
        self.m.mem.set_mapcount(old, 0);
        self.m.mem.set_mapping(old, 0);
        self.m.mem.set_word(old, FrameWord::LruStamp, 0);
    }

    /// One flush request per address space of a migration batch; whether any left the core
    /// waiting for acks.
    fn flush_migrated(&mut self, core: usize, per_mm: Vec<(u32, Gather)>) -> bool {
        let mut waits = false;
        for (p, g) in per_mm {
            waits |= self.flush(core, p, FlushReason::Migration, false, g);
        }
        waits
    }

    /// fork (dup_mmap): the child gets a copy of the VMAs and of every present PTE; private
    /// writable pages become read-only in both (copy-on-write); then the parent's whole
    /// address space is flushed (flush_tlb_mm).
    pub(crate) fn syscall_fork(&mut self, core: usize, thread: usize, program: usize, child_core: Option<usize>) -> Result<()> {
        self.stats[core].syscalls += 1;
        self.charge(core, self.costs.syscall + self.costs.fork);
        let parent = self.threads[thread].pid;
        let family = self.procs[parent as usize].family;
        let group = self.procs[parent as usize].group;
        let page_tables = self.procs[parent as usize].page_tables.clone();
        let child = self.create_process(group, Some(family), core, page_tables)?;
        let vmas: Vec<(u64, Vma)> = self.procs[parent as usize].vmas.iter().map(|(&s, v)| (s, v.clone())).collect();
        self.procs[child as usize].vmas = vmas
            .iter()
            .map(|(s, v)| {
                let recycling = if v.recycling != 0 { self.recycling.fork_context(v.recycling, parent, child, family) } else { 0 };
                (*s, Vma { recycling, ..v.clone() })
            })
            .collect();
        self.procs[child as usize].swapped = self.procs[parent as usize].swapped.clone();
        let mut gather = Gather::default();
        for (start, v) in vmas.iter().filter(|(_, v)| !v.reserved) {
            let mut page = *start;
            // copy_pte_range holds the child's and the parent's page-table locks.
            let (mut dst_ptl, mut src_ptl) = (PtlCursor::default(), PtlCursor::default());
            while let Some((at, leaf)) = self.next_leaf(parent, page, v.end) {
                page = at;
                self.ptl_at(core, &mut dst_ptl, child, page);
                self.ptl_at(core, &mut src_ptl, parent, page);
                let pfn = pte_pfn(leaf.pte);
                let size = if leaf.level == 2 { PageSize::Size2M } else { PageSize::Size4K };
                let step = if leaf.level == 2 { HUGE } else { PAGE };
                let base = page & !(step - 1);
                let mut writable = leaf.pte & PTE_WRITABLE != 0;
                if !v.shared && writable {
                    let old_pte = self.pte_write(core, parent, page, &leaf, leaf.pte & !PTE_WRITABLE);
                    gather.page(Vpn(base >> 12), old_pte);
                    writable = false;
                }
                self.map_page(core, child, base, pfn, size, writable, leaf.pte & PTE_DIRTY != 0)?;
                self.charge(core, self.costs.fork_per_page);
                page = base + step;
            }
            self.ptl_release(core, &mut src_ptl);
            self.ptl_release(core, &mut dst_ptl);
        }
        let slots = self.threads[thread].slots.clone();
        let target = child_core.map_or(self.threads[thread].core, |c| self.cpu_index(thread, c));
        let now = self.clock(core);
        let name = format!("{}-child", self.threads[thread].name);
        let class = self.threads[thread].class.clone();
        // A child whose program the workload marks as a daemon (it sleeps or spins
        // forever) does not keep the run going.
        let daemon = self.w.daemon_programs.contains(&program);
        self.spawn_thread(child, name, class, daemon, program, target, child_core.is_some(), slots, now, false);
        // flush_tlb_mm(parent): a full flush of the parent's address space.
        if !gather.pages.is_empty() {
            self.flush(core, parent, FlushReason::Fork, true, gather);
        }
        Ok(())
    }

    /// The last thread of `pid` exited (exit_mmap): unmap everything, free the page
    /// tables; flush_tlb_mm with freed tables reaches every CPU still in the mask.
    pub(crate) fn exit_process(&mut self, core: usize, pid: u32) {
        self.procs[pid as usize].alive = false;
        if let Some(dump) = self.ptdump.as_mut().filter(|_| self.ptdump_at.is_none()) {
            dump.add(&self.m.pt, self.m.backend.as_ref(), pid, self.procs[pid as usize].root);
        }
        let ranges: Vec<(u64, u64)> = self.procs[pid as usize].vmas.iter().filter(|(_, v)| !v.reserved).map(|(&s, v)| (s, v.end - s)).collect();
        let mut gather = Gather::default();
        for (va, len) in ranges {
            // Errors here can only come from splitting huge pages, which needs no allocation
            // beyond page tables; ignore them at exit.
            let _ = self.zap(core, pid, va, len, &mut gather);
        }
        self.procs[pid as usize].vmas.clear();
        self.procs[pid as usize].swapped.clear();
        gather.tables = self.pte_free_tables(pid, 0, MMAP_TOP + (1 << 39));
        // Only CPUs still holding it need reaching; the mm dies with it.
        let anyone = self.procs[pid as usize].cpumask.iter().enumerate().any(|(c, &b)| b && c != core);
        if anyone {
            self.flush(core, pid, FlushReason::Munmap, true, gather);
        } else {
            let Gather { frames, tables, .. } = gather;
            self.release(core, frames, tables);
        }
    }

    /// Every (process, virtual address) whose page table maps `pfn` (Linux rmap: anon_vma
    /// for anonymous pages, the file's i_mmap for page-cache pages).
    pub(crate) fn mappings(&self, pfn: Pfn) -> Vec<(u32, u64)> {
        let d = self.m.mem.desc(pfn);
        let (owner, mapping) = (self.m.mem.owner(pfn), self.m.mem.mapping(pfn));
        let mut out = Vec::new();
        for p in self.procs.iter().filter(|p| p.alive) {
            let candidates: Vec<u64> = if mapping == 0 {
                if owner != u32::MAX && (owner as usize) < self.procs.len() && self.procs[owner as usize].family == p.family {
                    vec![d.index() << 12]
                } else {
                    vec![]
                }
            } else {
                p.vmas
                    .iter()
                    .filter_map(|(&s, v)| match v.backing {
                        Backing::File { file, offset_pages } if file + 1 == mapping && d.index() >= offset_pages => {
                            let va = s + (d.index() - offset_pages) * PAGE;
                            (va < v.end).then_some(va)
                        }
                        _ => None,
                    })
                    .collect()
            };
            for va in candidates {
                if let Some(l) = self.pte_lookup(p.pid, va) {
                    if l.level == 1 && pte_pfn(l.pte) == pfn {
                        out.push((p.pid, va));
                    }
                }
            }
        }
        out
    }

    /// Whether a process other than `pid` maps `pfn`.
    pub(crate) fn mapped_by_other(&self, pfn: Pfn, pid: u32) -> bool {
        self.mappings(pfn).iter().any(|&(p, _)| p != pid)
    }

    /// kswapd-style reclaim of `group` until it has `target` free pages under its limit
    /// (run by the allocating thread: a memory cgroup's limit is enforced by direct reclaim
    /// in Linux, try_to_free_mem_cgroup_pages, with kswapd's scan of the LRU):
    /// batches of 32 from the LRU's cold end; a referenced page (A bit set in any mapping)
    /// has its A bits cleared without a flush (x86 ptep_clear_flush_young does not flush)
    /// and gets a second chance; an unreferenced one is unmapped everywhere (one flush
    /// request per address space per batch, try_to_unmap_flush; a page whose PTE was dirty
    /// sends the flushes pending so far before its write-out, try_to_unmap_flush_dirty),
    /// written back if dirty or anonymous (to swap), and freed.
    ///
    /// With a recycling axis (FPR §IV-B), pages it holds (in a recycling context) are not
    /// evicted while free memory is above the min watermark; below it, one huge batch
    /// evicts back to the target with a single (global) shootdown.
    fn reclaim(&mut self, core: usize, group: usize, target: u64) -> Result<()> {
        let mut scanned = 0u64;
        let limit = self.groups[group].limit_pages;
        let budget = 4 * self.groups[group].lru.len() as u64 + 64;
        let min = (limit / 64).max(8);
        let batch_mode = self.recycling_on && limit.saturating_sub(self.groups[group].used_pages) < min;
        if self.recycling_on && !batch_mode && self.groups[group].only_held {
            return Ok(());
        }
        let mut held_in_a_row = 0u64;
        let (mut batch, mut batch_held) = (Gather::default(), 0u64);
        while limit.saturating_sub(self.groups[group].used_pages) < target && scanned < budget {
            let mut per_mm: Vec<(u32, Gather)> = Vec::new();
            let mut taken = 0;
            while (taken < 32 || batch_mode) && scanned < budget && (!batch_mode || limit.saturating_sub(self.groups[group].used_pages) < target) {
                let Some((pfn, stamp)) = self.groups[group].lru.pop_front() else { break };
                scanned += 1;
                let d = *self.m.mem.desc(pfn);
                if d.kind != FrameKind::Data || self.m.mem.word(pfn, FrameWord::LruStamp) != stamp || self.huge_frames.contains(&pfn.0) {
                    continue;
                }
                let mapping = self.m.mem.mapping(pfn);
                let held = self.recycling_on && self.recycling.reclaim_holds(&self.m.mem.word(pfn, FrameWord::Tracking));
                if held && !batch_mode {
                    // Kept until the min watermark; a whole pass over held pages ends it.
                    self.groups[group].lru.push_back((pfn, stamp));
                    held_in_a_row += 1;
                    if held_in_a_row > self.groups[group].lru.len() as u64 {
                        break;
                    }
                    continue;
                }
                held_in_a_row = 0;
                let maps = self.mappings(pfn);
                let mut referenced = false;
                for &(p, va) in &maps {
                    let l = self.pte_lookup(p, va).expect("mapped");
                    // The OS's view of the A bit (a policy may keep its own).
                    if self.policy.pte_accessed(p, va, l.pte) {
                        referenced = true;
                        let old = self.pte_write(core, p, va, &l, l.pte & !PTE_ACCESSED);
                        self.policy.on_accessed_cleared(CoreId(core as u32), p, va, old, &mut self.fx);
                        self.apply_effects();
                    }
                }
                self.charge(core, self.costs.per_page);
                if referenced {
                    self.lru_push(pfn, group);
                    continue;
                }
                let mut dirty = false;
                for &(p, va) in &maps {
                    let l = self.pte_lookup(p, va).expect("mapped");
                    dirty |= l.pte & PTE_DIRTY != 0;
                    // try_to_unmap: each mapping's PTE under its page-table lock.
                    let mut ptl = PtlCursor::default();
                    self.ptl_at(core, &mut ptl, p, va);
                    let old_pte = self.pte_write(core, p, va, &l, 0);
                    self.ptl_release(core, &mut ptl);
                    if mapping == 0 {
                        self.procs[p as usize].swapped.insert(va >> 12);
                    }
                    if batch_mode {
                        batch.page(Vpn(va >> 12), old_pte);
                        continue;
                    }
                    let g = match per_mm.iter_mut().find(|(q, _)| *q == p) {
                        Some((_, g)) => g,
                        None => {
                            per_mm.push((p, Gather::default()));
                            &mut per_mm.last_mut().unwrap().1
                        }
                    };
                    g.page(Vpn(va >> 12), old_pte);
                }
                let writes = dirty || (mapping == 0 && !maps.is_empty());
                if writes && batch_mode {
                    self.charge(core, self.costs.write_page);
                }
                self.m.mem.set_mapcount(pfn, 0);
                if mapping != 0 {
                    // __remove_mapping: out of the page cache now, before the flush the
                    // frame is freed after (shrink_folio_list frees its batch after
                    // try_to_unmap_flush). Left in it, a fault before the flush's end
                    // would map the page again and the flush's end free it under that
                    // mapping. The frame keeps its file identity until then.
                    self.page_cache.remove(&(mapping - 1, d.index()));
                }
                self.stats[core].pages_reclaimed += 1;
                taken += 1;
                if batch_mode {
                    batch_held += held as u64;
                    if maps.is_empty() {
                        self.free_frame(core, pfn, 0);
                    } else {
                        batch.frames.push((pfn, 0));
                        // Uncharged now so that the loop's watermark test sees the progress;
                        // the frame is freed after the batch's shootdown.
                        if let Some(gi) = self.frame_group.remove(&pfn.0) {
                            let g = &mut self.groups[gi as usize];
                            g.used_pages = g.used_pages.saturating_sub(1);
                        }
                    }
                    continue;
                }
                // Freed after the flush of its last mapper's address space (or now). Uncharged
                // now: Linux's shrink_folio_list waits for the batch's flush
                // (try_to_unmap_flush) and frees the batch before the next, so each batch is
                // progress the watermark test sees; here the flush completes later in
                // simulated time, and without this the loop would go on evicting until its
                // scan budget ran out.
                match per_mm.last_mut() {
                    Some((_, g)) if !maps.is_empty() => {
                        g.frames.push((pfn, 0));
                        if let Some(gi) = self.frame_group.remove(&pfn.0) {
                            let g = &mut self.groups[gi as usize];
                            g.used_pages = g.used_pages.saturating_sub(1);
                        }
                    }
                    _ => self.free_frame(core, pfn, 0),
                }
                if dirty {
                    // try_to_unmap_flush_dirty (Linux 4.3+, shrink_page_list): a page whose
                    // PTE was dirty may have writable TLB entries, which must be gone before
                    // its write-out starts: every flush pending so far is sent now. So each
                    // dirty page evicted costs a shootdown of its own (ABIS §5.3: "nearly
                    // 200k shootdowns regardless of the number of threads").
                    for (p, g) in per_mm.drain(..) {
                        self.flush(core, p, FlushReason::Reclaim, false, g);
                    }
                }
                if writes {
                    self.charge(core, self.costs.write_page);
                }
            }
            // The batch's flushes (before any early end below: its PTEs are already cleared).
            for (p, g) in per_mm {
                self.flush(core, p, FlushReason::Reclaim, false, g);
            }
            // Every page left is held: so will the next pass find them.
            let only_held = held_in_a_row > self.groups[group].lru.len() as u64;
            self.groups[group].only_held |= only_held;
            if only_held || (taken == 0 && self.groups[group].lru.is_empty()) {
                break;
            }
            if batch_mode {
                break;
            }
        }
        if batch_mode {
            self.groups[group].only_held = false;
        }
        if batch_mode && !(batch.pages.is_empty() && batch.frames.is_empty()) {
            // One shootdown for the whole batch (every core, every address space).
            self.recycling.on_batch_eviction(batch_held, 1);
            self.flush_global(core, batch);
        }
        Ok(())
    }
}

/// Owner recorded for page-cache frames (they belong to a file, not a process).
pub(crate) const PAGE_CACHE_OWNER: u32 = u32::MAX - 1;
