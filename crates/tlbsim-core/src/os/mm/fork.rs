//! fork, copy-on-write and exit of the OS model: kernel/fork.c dup_mmap (the child copies
//! the VMAs and every present PTE, private pages write-protected in both, the parent's
//! address space flushed with flush_tlb_mm), the write-protect fault that follows
//! (mm/memory.c wp_page_copy / wp_page_reuse), and exit_mmap (unmap everything, free the
//! page tables).

use super::{HUGE, PAGE};
use crate::coherence::{Coherence, FlushReason};
use crate::error::{Error, Result};
use crate::os::locks::PtlCursor;
use crate::os::{Gather, Os, Vma, MMAP_TOP};
use crate::page_table::{pte_pfn, PTE_ACCESSED, PTE_DIRTY, PTE_WRITABLE};
use crate::types::{PageSize, Vpn};

impl<P: Coherence> Os<P> {
    /// A write to a present read-only PTE in a writable VMA: copy-on-write (wp_page_copy,
    /// whose ptep_clear_flush is a one-page flush request) or reuse (wp_page_reuse: the
    /// only mapper gets write permission, no flush, as Linux).
    pub(super) fn write_protect_fault(&mut self, core: usize, pid: u32, page: u64, vma: &Vma) -> Result<()> {
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
        self.charge(core, if Some(old) == self.zero_page { self.settings.costs().zero_page } else { self.settings.costs().copy_page });
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

    /// fork (dup_mmap): the child gets a copy of the VMAs and of every present PTE; private
    /// writable pages become read-only in both (copy-on-write); then the parent's whole
    /// address space is flushed (flush_tlb_mm).
    pub(crate) fn syscall_fork(&mut self, core: usize, thread: usize, program: usize, child_core: Option<usize>) -> Result<()> {
        self.stats[core].syscalls += 1;
        self.charge(core, self.settings.costs().syscall + self.settings.costs().fork);
        let parent = self.threads[thread].pid;
        let family = self.spaces[parent as usize].family;
        let group = self.spaces[parent as usize].group;
        let page_tables = self.spaces[parent as usize].page_tables.clone();
        let child = self.create_process(group, Some(family), core, page_tables)?;
        let vmas: Vec<(u64, Vma)> = self.spaces[parent as usize].vmas.iter().map(|(&s, v)| (s, v.clone())).collect();
        self.spaces[child as usize].vmas = vmas
            .iter()
            .map(|(s, v)| {
                let recycling = if v.recycling != 0 { self.recycling.fork_context(v.recycling, parent, child, family) } else { 0 };
                (*s, Vma { recycling, ..v.clone() })
            })
            .collect();
        self.spaces[child as usize].swapped = self.spaces[parent as usize].swapped.clone();
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
                self.charge(core, self.settings.costs().fork_per_page);
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
        let id = self.spawn_thread(child, name, class, daemon, program, target, child_core.is_some(), slots, now, false);
        self.threads[id].allowed = self.threads[thread].allowed;
        // flush_tlb_mm(parent): a full flush of the parent's address space.
        if !gather.pages.is_empty() {
            self.flush(core, parent, FlushReason::Fork, true, gather);
        }
        Ok(())
    }

    /// The last thread of `pid` exited (exit_mmap): unmap everything, free the page
    /// tables; flush_tlb_mm with freed tables reaches every CPU still in the mask.
    pub(crate) fn exit_process(&mut self, core: usize, pid: u32) {
        self.spaces[pid as usize].alive = false;
        if let Some(dump) = self.ptdump.as_mut().filter(|_| self.ptdump_at.is_none()) {
            dump.add(&self.m.pt, self.m.backend.as_ref(), pid, self.spaces[pid as usize].root);
        }
        let ranges: Vec<(u64, u64)> = self.spaces[pid as usize].vmas.iter().filter(|(_, v)| !v.reserved).map(|(&s, v)| (s, v.end - s)).collect();
        let mut gather = Gather::default();
        // exit_mmap's lru_add_drain(), unless the kernel removed it.
        self.lru_drain_on_unmap(core);
        for (va, len) in ranges {
            // Errors here can only come from splitting huge pages, which needs no allocation
            // beyond page tables; ignore them at exit.
            let _ = self.zap(core, pid, va, len, &mut gather);
        }
        self.spaces[pid as usize].vmas.clear();
        self.spaces[pid as usize].swapped.clear();
        gather.tables = self.pte_free_tables(pid, 0, MMAP_TOP + (1 << 39));
        // Only CPUs still holding it need reaching; the mm dies with it.
        let anyone = self.spaces[pid as usize].cpumask.iter().enumerate().any(|(c, &b)| b && c != core);
        if anyone {
            self.flush(core, pid, FlushReason::Munmap, true, gather);
        } else {
            let Gather { frames, tables, .. } = gather;
            self.release(core, frames, tables);
        }
        self.policy.on_mm_exit(crate::types::CoreId(core as u32), pid, &mut self.fx);
        self.apply_effects();
    }
}
