//! The PTE-write layer: every page-table entry the kernel model reads or writes (fault,
//! munmap, mprotect, madvise, msync, copy-on-write, fork, migration, reclaim) goes through
//! these functions, so that the page-table backend (`crate::placement`: one tree, or
//! Mitosis' replicas) applies it to every copy and returns A/D bits OR-ed over them, and
//! the coherence policy sees every change (`Coherence::on_pte_write`, e.g. ABIS' software
//! PTEs) and may amend it. The hardware walker does not come here: it sets A/D in the tree
//! its core loaded, as hardware does.

use super::Os;
use crate::coherence::Coherence;
use crate::error::Result;
use crate::page_table::{make_pte, Leaf, PTE_HUGE, PTE_PFN_MASK, PTE_PRESENT};
use crate::placement::PtCtx;
use crate::types::{CoreId, PageSize, Pfn};

impl<P: Coherence> Os<P> {
    /// The leaf entry mapping `va` in `pid`, A/D OR-ed over every copy of the tree.
    #[inline]
    pub(crate) fn pte_lookup(&self, pid: u32, va: u64) -> Option<Leaf> {
        self.m.backend.lookup(&self.m.pt, pid, self.procs[pid as usize].root, self.pt_levels, va)
    }

    /// Write the leaf `leaf` of `va` in `pid` (found by [`Os::pte_lookup`]) to `new`, on
    /// behalf of `core`. Returns the old entry (A/D OR-ed over copies).
    pub(crate) fn pte_write(&mut self, core: usize, pid: u32, va: u64, leaf: &Leaf, new: u64) -> u64 {
        let mut new = new;
        self.policy.on_pte_write(CoreId(core as u32), pid, va, leaf.pte, &mut new, &mut self.fx);
        let m = &mut self.m;
        let mut ctx = PtCtx { pt: &mut m.pt, mem: &mut m.mem, levels: self.pt_levels };
        let old = m.backend.write(&mut ctx, pid, va, leaf, new);
        self.apply_effects();
        old
    }

    /// Map `va` (aligned to `size`) to `pfn` with `flags` in `pid`, for a fault or system
    /// call on `core`; missing tables are placed by the backend. Returns the old leaf.
    pub(crate) fn pte_map(&mut self, core: usize, pid: u32, va: u64, pfn: Pfn, size: PageSize, flags: u64) -> Result<u64> {
        let huge = if size == PageSize::Size4K { 0 } else { PTE_HUGE };
        let old = self.pte_lookup(pid, va).map_or(0, |l| l.pte);
        let mut new = make_pte(pfn, flags | PTE_PRESENT | huge);
        self.policy.on_pte_write(CoreId(core as u32), pid, va, old, &mut new, &mut self.fx);
        // The policy may amend the flags, not the frame.
        let flags = new & !PTE_PFN_MASK & !(PTE_PRESENT | PTE_HUGE);
        let socket = self.m.cores[core].socket;
        let root = self.procs[pid as usize].root;
        let m = &mut self.m;
        let mut ctx = PtCtx { pt: &mut m.pt, mem: &mut m.mem, levels: self.pt_levels };
        let old = m.backend.map(&mut ctx, pid, root, va, pfn, size, flags, socket)?;
        self.apply_effects();
        Ok(old)
    }

    /// After `[start, end)` of `pid` was unmapped: unlink the page-table pages left covering
    /// no mapping, in every copy; returns them (freed after the flush).
    pub(crate) fn pte_free_tables(&mut self, pid: u32, start: u64, end: u64) -> Vec<u32> {
        let root = self.procs[pid as usize].root;
        let vmas = &self.procs[pid as usize].vmas;
        let in_use = |lo: u64, hi: u64| vmas.range(..hi).any(|(_, v)| v.end > lo);
        let m = &mut self.m;
        let mut ctx = PtCtx { pt: &mut m.pt, mem: &mut m.mem, levels: self.pt_levels };
        m.backend.free_tables(&mut ctx, pid, root, start, end, &in_use)
    }
}
