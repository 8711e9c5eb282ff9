//! NUMA page migration (move_pages / migrate_pages, mm/migrate.c): each page not on the
//! target node gets a new frame there; every mapping's PTE, found through rmap, is cleared
//! and flushed, in batches of `os.migrate_batch` pages (Linux's TTU_BATCH_FLUSH), and the
//! new frame takes over the old one's identity.

use super::{HUGE, PAGE};
use crate::coherence::{Coherence, FlushReason};
use crate::error::{Error, Result};
use crate::memory::{FrameKind, FrameWord};
use crate::os::locks::PtlCursor;
use crate::os::{Gather, Os};
use crate::page_table::pte_pfn;
use crate::types::{NodeId, Pfn, Vpn};

impl<P: Coherence> Os<P> {
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
            self.charge(core, self.settings.costs().copy_page + self.settings.costs().per_page);
            page += PAGE;
            batched += 1;
            if batched == self.settings.migrate_batch() {
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
        if self.settings.recycling_on() {
            let context = self.recycling.migration_context(self.m.mem.word(old, FrameWord::Tracking));
            self.settle_claims(core, Some((new, context)));
        }
        let group = self.groups.move_charge(old, new);
        let stamp = self.groups.next_stamp();
        self.m.mem.desc_mut(new).set_index(d.index());
        self.m.mem.set_mapcount(new, mapcount);
        self.m.mem.set_mapping(new, mapping);
        self.m.mem.set_word(new, FrameWord::LruStamp, stamp);
        if let Some(g) = group {
            self.groups.lru_push(g as usize, new, stamp);
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
    pub(super) fn flush_migrated(&mut self, core: usize, per_mm: Vec<(u32, Gather)>) -> bool {
        let mut waits = false;
        for (p, g) in per_mm {
            waits |= self.flush(core, p, FlushReason::Migration, false, g);
        }
        waits
    }
}
