//! Frames for the OS model's memory management: data frames for faults (from the node
//! `os.data_placement` picks, charged to the process's group, onto its LRU once mapped),
//! frames of any kind on a node, claims the recycling axis settles, and freeing.
//!
//! Follows the page allocator's use by mm/memory.c's fault paths at the level of which
//! frames come and go through which lists; the buddy allocator itself is `crate::memory`.

use crate::coherence::{Coherence, FrameUse};
use crate::error::Result;
use crate::memory::{FrameKind, FrameWord};
use crate::os::{Gather, Os};
use crate::types::{CoreId, NodeId, Pfn};

impl<P: Coherence> Os<P> {
    /// Allocate a data frame for `pid` (anonymous at `vpn`, or page `index` of `file`),
    /// charge its group, reclaim if the group runs low, and put the frame on the group's
    /// LRU.
    pub(super) fn alloc_data(&mut self, core: usize, pid: u32, file: Option<u32>, index: u64) -> Result<Pfn> {
        let node = self.data_node(core);
        let pfn = self.alloc_frame_on(core, node, FrameKind::Data, pid)?;
        if self.settings.recycling_on() {
            self.settle_claims(core, Some((pfn, self.alloc_context)));
        }
        let usage = FrameUse { mm: if file.is_some() { u32::MAX } else { pid }, file: file.is_some() };
        let (policy, fx) = (&mut self.policy, &mut self.fx);
        self.m.mem.update_word(pfn, FrameWord::Technique, |w| policy.on_frame_alloc(CoreId(core as u32), pfn, w, usage, fx));
        self.apply_effects();
        let group = self.spaces[pid as usize].group;
        self.m.mem.set_mapping(pfn, file.map_or(0, |f| f + 1));
        self.m.mem.desc_mut(pfn).set_index(index);
        self.groups.charge(pfn, group, 1);
        if let Some(high) = self.groups.reclaim_target(group) {
            self.reclaim(core, group, high)?;
        }
        // Toward the LRU only now: Linux adds a new page to it once it is mapped
        // (folio_add_lru_vma), so the reclaim its charge runs never meets it. On the LRU
        // before, reclaim found it unmapped and freed it under the fault about to map it.
        // It waits in the CPU's batch until a drain moves it (os/lru.rs).
        self.lru_add(core, pfn, group);
        if !self.settings.recycling_on() || !self.recycling.reclaim_holds(&self.m.mem.word(pfn, FrameWord::Tracking)) {
            self.groups.clear_only_held(group);
        }
        Ok(pfn)
    }

    /// Put `pfn` at the young end of `group`'s LRU (a new stamp; older entries of it in the
    /// queue go stale).
    pub(super) fn lru_push(&mut self, pfn: Pfn, group: usize) {
        let stamp = self.groups.next_stamp();
        self.m.mem.set_word(pfn, FrameWord::LruStamp, stamp);
        self.groups.lru_push(group, pfn, stamp);
    }

    /// One frame from `core`'s per-CPU list of `node`; a refill from the buddy allocator
    /// runs under the node's zone lock.
    pub(in crate::os) fn alloc_frame_on(&mut self, core: usize, node: NodeId, kind: FrameKind, owner: u32) -> Result<Pfn> {
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
        let (in_flight_sd, global_in_flight) = self.shootdowns.global_of(core);
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
            self.shootdowns.join_global(in_flight_sd, f, w);
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
        self.groups.uncharge(pfn, 1 << order);
        for f in pfn.0..pfn.0 + (1 << order) {
            let (policy, fx) = (&mut self.policy, &mut self.fx);
            self.m.mem.update_word(Pfn(f), FrameWord::Technique, |w| policy.on_frame_free(CoreId(core as u32), Pfn(f), w, fx));
            if self.settings.recycling_on() {
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
}
