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
        self.m.backend.lookup(&self.m.pt, pid, self.spaces[pid as usize].root, self.settings.pt_levels(), va)
    }

    /// Write the leaf `leaf` of `va` in `pid` (found by [`Os::pte_lookup`]) to `new`, on
    /// behalf of `core`. Returns the old entry (A/D OR-ed over copies).
    pub(crate) fn pte_write(&mut self, core: usize, pid: u32, va: u64, leaf: &Leaf, new: u64) -> u64 {
        let mut new = new;
        self.policy.on_pte_write(CoreId(core as u32), pid, va, leaf.pte, &mut new, &mut self.fx);
        let m = &mut self.m;
        let mut ctx = PtCtx { pt: &mut m.pt, mem: &mut m.mem, levels: self.settings.pt_levels() };
        let old = m.backend.write(&mut ctx, pid, va, leaf, new);
        let replicas = m.take_replica_write_cycles(core, self.settings.costs().replica_entry_write);
        self.charge(core, replicas);
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
        let root = self.spaces[pid as usize].root;
        let m = &mut self.m;
        let mut ctx = PtCtx { pt: &mut m.pt, mem: &mut m.mem, levels: self.settings.pt_levels() };
        let old = m.backend.map(&mut ctx, pid, root, va, pfn, size, flags, socket)?;
        let replicas = m.take_replica_write_cycles(core, self.settings.costs().replica_entry_write);
        self.charge(core, replicas);
        self.apply_effects();
        Ok(old)
    }

    /// After `[start, end)` of `pid` was unmapped: unlink the page-table pages left covering
    /// no mapping, in every copy; returns them (freed after the flush).
    pub(crate) fn pte_free_tables(&mut self, pid: u32, start: u64, end: u64) -> Vec<u32> {
        let root = self.spaces[pid as usize].root;
        let vmas = &self.spaces[pid as usize].vmas;
        let in_use = |lo: u64, hi: u64| vmas.range(..hi).any(|(_, v)| v.end > lo);
        let m = &mut self.m;
        let mut ctx = PtCtx { pt: &mut m.pt, mem: &mut m.mem, levels: self.settings.pt_levels() };
        m.backend.free_tables(&mut ctx, pid, root, start, end, &in_use)
    }

    /// A thread of `pid` moved from `core` to a core of socket `to`: the backend may give
    /// the process page tables there (Mitosis §5.5) and free a copy nothing uses any more,
    /// after a flush of the process (freed tables reach lazy cores too).
    pub(crate) fn migrate_page_tables(&mut self, core: usize, thread: usize, pid: u32, to: u32) -> Result<()> {
        let sockets = self.m.mem.nodes() as usize;
        let mut threads_on = vec![false; sockets];
        for (i, t) in self.threads.iter().enumerate() {
            if i != thread && t.pid == pid && t.state != super::ThreadState::Exited {
                threads_on[self.m.cores[self.home_cpu(t.core)].socket as usize] = true;
            }
        }
        // The core the thread left, and lazy cores, on a socket no thread of the process
        // runs on: they switch to init_mm now (Linux would keep them lazy until the
        // freed-table flush), so the copy they borrowed can go.
        for c in 0..self.cores.len() {
            let s = self.m.cores[c].socket;
            if self.cores[c].loaded_mm == Some(pid) && (c == core || self.cores[c].lazy) && !threads_on[s as usize] && s != to {
                self.drop_lazy_mm(c, pid);
            }
        }
        let primary = self.spaces[pid as usize].root;
        let roots_before: Vec<u32> = (0..sockets as u32).map(|s| self.m.backend.root_for(pid, primary, s)).collect();
        let loaded: Vec<u32> = (0..self.cores.len()).filter(|&c| self.cores[c].loaded_mm == Some(pid)).map(|c| self.cores[c].cr3_root).collect();
        let in_use = |socket: u32, root: u32| threads_on[socket as usize] || loaded.contains(&root);
        let m = &mut self.m;
        let mut ctx = PtCtx { pt: &mut m.pt, mem: &mut m.mem, levels: self.settings.pt_levels() };
        let migration = m.backend.on_migrate(&mut ctx, pid, to, &in_use)?;
        let copy = m.take_replica_write_cycles(core, self.settings.costs().replica_entry_write);
        self.charge(core, copy);
        if let Some(primary) = migration.primary {
            self.spaces[pid as usize].root = primary;
        }
        // Sockets whose cores load another root from now on: with CR3 tags, entries under
        // the old one must not outlive it (its frame may become another process' root).
        let primary = self.spaces[pid as usize].root;
        for (s, &old) in roots_before.iter().enumerate() {
            let new = self.m.backend.root_for(pid, primary, s as u32);
            if new != old && !self.spaces[pid as usize].former_roots.contains(&old) {
                self.spaces[pid as usize].former_roots.push(old);
            }
        }
        for c in 0..self.cores.len() {
            // A core running on its old root keeps it until its next switch (load_mm).
            let keep = if self.cores[c].loaded_mm == Some(pid) { self.cores[c].cr3_root } else { u32::MAX };
            self.drop_former_root_tags(c, pid, keep);
        }
        if !migration.freed.is_empty() {
            // Simplified: the freed copy is frozen (emptied) now, so page-walk caches that
            // point into it are dropped at once on every core rather than when the flush
            // below reaches it; the flush still carries the IPIs' cost.
            for c in 0..self.cores.len() {
                let tlbs = &mut self.m.cores[c].tlbs;
                if migration.freed.iter().any(|&t| tlbs.holds_pwc_to(t, None)) {
                    tlbs.flush_pwc();
                }
            }
            let gather = super::Gather { tables: migration.freed, ..Default::default() };
            self.flush(core, pid, crate::coherence::FlushReason::Migration, true, gather);
        }
        Ok(())
    }
}
