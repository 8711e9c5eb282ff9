//! kswapd-style reclaim of the OS model (mm/vmscan.c: try_to_free_mem_cgroup_pages,
//! shrink_folio_list, try_to_unmap_flush and try_to_unmap_flush_dirty): the LRU is
//! scanned, referenced pages get a second chance, unreferenced ones are unmapped
//! everywhere, written back if dirty or anonymous (to swap), and freed.
//!
//! Simplified: reclaim skips huge pages.

use crate::coherence::{Coherence, FlushReason};
use crate::error::Result;
use crate::fasthash::FastMap as HashMap;
use crate::memory::{FrameKind, FrameWord};
use crate::os::locks::PtlCursor;
use crate::os::{Gather, Os};
use crate::page_table::{PTE_ACCESSED, PTE_DIRTY};
use crate::types::{CoreId, Pfn, Vpn};
use std::collections::VecDeque;

/// Memory groups (the memory controller of cgroups): each group's limit, charge and
/// reclaim LRU, and the group each charged frame is accounted to.
pub(crate) struct MemGroups {
    list: Vec<Group>,
    /// Group each charged data frame (or huge-page head) is accounted to.
    frame_group: HashMap<u64, u32>,
    /// Stamp of the latest LRU insertion: an LRU entry whose frame's stamp differs is stale.
    lru_stamp: u64,
}

impl MemGroups {
    /// One group per limit (0: no limit); without any, one group with no limit.
    pub(crate) fn new(limits: impl Iterator<Item = u64>) -> MemGroups {
        let mut list: Vec<Group> = limits.map(Group::new).collect();
        if list.is_empty() {
            list.push(Group::new(0));
        }
        MemGroups { list, frame_group: HashMap::default(), lru_stamp: 0 }
    }

    /// Charge `pages` pages headed by `pfn` to `group`.
    pub(super) fn charge(&mut self, pfn: Pfn, group: usize, pages: u64) {
        self.list[group].used_pages += pages;
        self.frame_group.insert(pfn.0, group as u32);
    }

    /// Uncharge `pages` pages headed by `pfn` from its group, if charged.
    pub(super) fn uncharge(&mut self, pfn: Pfn, pages: u64) {
        if let Some(g) = self.frame_group.remove(&pfn.0) {
            let g = &mut self.list[g as usize];
            g.used_pages = g.used_pages.saturating_sub(pages);
        }
    }

    /// Migration: `new` takes over `old`'s charge. Returns the group.
    pub(super) fn move_charge(&mut self, old: Pfn, new: Pfn) -> Option<u32> {
        let group = self.frame_group.remove(&old.0);
        if let Some(g) = group {
            self.frame_group.insert(new.0, g);
        }
        group
    }

    /// The free-page target a reclaim of `group` should reach, when its free pages fell
    /// below the low watermark (a 64th of the limit, at least 8, plus a quarter; the
    /// target is that plus a half).
    pub(super) fn reclaim_target(&self, group: usize) -> Option<u64> {
        let g = &self.list[group];
        if g.limit_pages == 0 {
            return None;
        }
        let min = (g.limit_pages / 64).max(8);
        let (low, high) = (min + min / 4, min + min / 2);
        (g.limit_pages.saturating_sub(g.used_pages) < low).then_some(high)
    }

    /// A new LRU stamp.
    pub(in crate::os) fn next_stamp(&mut self) -> u64 {
        self.lru_stamp += 1;
        self.lru_stamp
    }

    /// Put `pfn`, stamped `stamp`, at the young end of `group`'s LRU.
    pub(in crate::os) fn lru_push(&mut self, group: usize, pfn: Pfn, stamp: u64) {
        self.list[group].lru.push_back((pfn, stamp));
    }

    /// A page reclaim would evict has joined `group`'s LRU.
    pub(super) fn clear_only_held(&mut self, group: usize) {
        self.list[group].only_held = false;
    }
}

struct Group {
    pub limit_pages: u64,
    pub used_pages: u64,
    /// Reclaim LRU: (frame, stamp), oldest first.
    pub lru: VecDeque<(Pfn, u64)>,
    /// The last reclaim pass above the min watermark met only pages the recycling axis
    /// holds, and no page it would evict has joined the LRU since: the next such pass
    /// would find nothing either (it is skipped, instead of walking the whole LRU again).
    pub only_held: bool,
}

impl Group {
    /// An empty group of `limit_pages` (0: no limit).
    fn new(limit_pages: u64) -> Group {
        Group { limit_pages, used_pages: 0, lru: VecDeque::new(), only_held: false }
    }
}

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
        let limit = self.groups.list[group].limit_pages;
        let budget = 4 * self.groups.list[group].lru.len() as u64 + 64;
        let min = (limit / 64).max(8);
        let batch_mode = self.settings.recycling_on() && limit.saturating_sub(self.groups.list[group].used_pages) < min;
        if self.settings.recycling_on() && !batch_mode && self.groups.list[group].only_held {
            return Ok(());
        }
        let mut held_in_a_row = 0u64;
        let (mut batch, mut batch_held) = (Gather::default(), 0u64);
        while limit.saturating_sub(self.groups.list[group].used_pages) < target && scanned < budget {
            let mut per_mm: Vec<(u32, Gather)> = Vec::new();
            let mut taken = 0;
            while (taken < 32 || batch_mode) && scanned < budget && (!batch_mode || limit.saturating_sub(self.groups.list[group].used_pages) < target) {
                let Some((pfn, stamp)) = self.groups.list[group].lru.pop_front() else { break };
                scanned += 1;
                let d = *self.m.mem.desc(pfn);
                if d.kind != FrameKind::Data || self.m.mem.word(pfn, FrameWord::LruStamp) != stamp || self.huge_frames.contains(&pfn.0) {
                    continue;
                }
                let mapping = self.m.mem.mapping(pfn);
                let held = self.settings.recycling_on() && self.recycling.reclaim_holds(&self.m.mem.word(pfn, FrameWord::Tracking));
                if held && !batch_mode {
                    // Kept until the min watermark; a whole pass over held pages ends it.
                    self.groups.list[group].lru.push_back((pfn, stamp));
                    held_in_a_row += 1;
                    if held_in_a_row > self.groups.list[group].lru.len() as u64 {
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
                self.charge(core, self.settings.costs().per_page);
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
                        self.spaces[p as usize].swapped.insert(va >> 12);
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
                    self.charge(core, self.settings.costs().write_page);
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
                        self.groups.uncharge(pfn, 1);
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
                        self.groups.uncharge(pfn, 1);
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
                    self.charge(core, self.settings.costs().write_page);
                }
            }
            // The batch's flushes (before any early end below: its PTEs are already cleared).
            for (p, g) in per_mm {
                self.flush(core, p, FlushReason::Reclaim, false, g);
            }
            // Every page left is held: so will the next pass find them.
            let only_held = held_in_a_row > self.groups.list[group].lru.len() as u64;
            self.groups.list[group].only_held |= only_held;
            if only_held || (taken == 0 && self.groups.list[group].lru.is_empty()) {
                break;
            }
            if batch_mode {
                break;
            }
        }
        if batch_mode {
            self.groups.list[group].only_held = false;
        }
        if batch_mode && !(batch.pages.is_empty() && batch.frames.is_empty()) {
            // One shootdown for the whole batch (every core, every address space).
            self.recycling.on_batch_eviction(batch_held, 1);
            self.flush_global(core, batch);
        }
        Ok(())
    }
}
