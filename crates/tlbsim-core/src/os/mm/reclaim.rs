//! kswapd-style reclaim of the OS model (mm/vmscan.c: try_to_free_mem_cgroup_pages,
//! shrink_folio_list, try_to_unmap_flush and try_to_unmap_flush_dirty): the LRU is
//! scanned, referenced pages get a second chance, unreferenced ones are unmapped
//! everywhere, written back if dirty or anonymous (to swap), and freed.
//!
//! Simplified: reclaim skips huge pages.

use crate::coherence::{Coherence, FlushReason};
use crate::error::Result;
use crate::memory::{FrameKind, FrameWord};
use crate::os::locks::PtlCursor;
use crate::os::{Gather, Os};
use crate::page_table::{PTE_ACCESSED, PTE_DIRTY};
use crate::types::{CoreId, Vpn};

impl<P: Coherence> Os<P> {
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
    pub(super) fn reclaim(&mut self, core: usize, group: usize, target: u64) -> Result<()> {
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
