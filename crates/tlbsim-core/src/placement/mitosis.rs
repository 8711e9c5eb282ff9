//! Mitosis: page-table replication across NUMA sockets (Achermann et al., "Mitosis:
//! Transparently Self-Replicating Page-Tables for Large-Memory Machines", ASPLOS 2020,
//! §5 and §6.1; `os.pt_placement = "mitosis"`, `[placement.mitosis]`).
//!
//! Modelled:
//! - A replication mask per address space (`replicas`: `"all"`, `"none"` or a list of
//!   sockets), system-wide (§6.1); a process may have its own instead
//!   ([`PtOptions::replica_sockets`]: a scenario process's `page_tables.replica_sockets`, §6.2's
//!   per-process replication set given through numactl), fixed when its address space is
//!   created and inherited by fork (a mask changed at run time, which §6.2's system call
//!   allows, is not modelled; nor is its empty mask meaning "the default": "none" here is a
//!   single tree, and the default is to give no mask). A process with replicas has one tree per socket of its mask: every upper-level entry of
//!   a replica points to that replica's own lower-level page, leaf entries are identical
//!   (§5.2). The primary tree (the one the OS walks in software) is the replica of the
//!   creating socket, or the mask's first socket when that socket is not in the mask.
//! - The replicas of one logical table page form a circular ring (the `struct page`
//!   pointer of Fig. 8). Every PTE write goes to the local copy, then round the ring: each
//!   other replica costs two memory references, the ring pointer (the descriptor of the
//!   replica's page) and the entry itself (§5.2's "2N references"). They are handed to the
//!   engine ([`PageTableBackend::replica_writes`]), which charges each through the writing
//!   socket's page-table-line cache and, on a miss, the NUMA latency of the replica's node.
//!   The local copy's write is part of the calibrated per-page cost, as without Mitosis.
//! - Hardware sets A/D in the replica its walker reads only; a read (lookup, write) returns
//!   them OR-ed over the ring, and a write stores the same entry in every copy, so a clear
//!   clears them everywhere (§5.3's PV-Ops get/set).
//! - A core loads the replica of its own socket (§5.3's CR3 at context switch); a socket
//!   without one loads the primary.
//! - Per-socket page-table caches (§5.1): `reserve_pages` frames per socket, taken from the
//!   socket's node when first needed and again whenever the cache runs dry. Replica tables
//!   come strictly from their socket's cache. When the node itself has no free frame left
//!   (the strict allocation the paper says "may fail"), the table comes from the nearest
//!   node with memory instead and `strict_allocation_failures` counts it; the paper's
//!   kernel would fail the fault or reclaim.
//! - Process migration (§5.5): a thread moved to a socket where its process has no replica
//!   gets one there (a copy of the primary tree). With `migration_free = "eager"`, every
//!   replica on a socket that no thread of the process runs on any more is freed at once
//!   (after a TLB flush of the process, as any freed page table); with `"lazy"` it is kept
//!   up to date for a migration back. The paper frees lazy replicas "in case physical
//!   memory is becoming scarce": that trigger is not modelled (they live until exit).
//! - Processes without replication (`replicas = "none"`, or a one-socket mask) place their
//!   tables first-touch, as Linux does.
//!
//! Simplified: replicas are created for the whole process at once, not by a counter-based
//! policy (the paper leaves that as future work too); the freed-table path frees every
//! copy to the buddy allocator (the per-socket cache is only refilled from it); the zeroing
//! of a new table page is not charged (nor is it without Mitosis).

use super::{Migration, PageTableBackend, PtCtx, PtOptions};
use crate::error::{Error, Result};
use crate::memory::{node_of, FrameKind, PhysMem};
use crate::page_table::{leaf_level, level_index, make_pte, Leaf, PageTables, NO_SLOT, PTE_ACCESSED, PTE_DIRTY, PTE_HUGE, PTE_PRESENT};
use crate::types::{NodeId, PageSize, Pfn};
use serde::{Deserialize, Serialize};

const AD: u64 = PTE_ACCESSED | PTE_DIRTY;

pub use crate::types::ReplicaSet;

/// What happens to the replica a migrated process leaves behind (§5.5).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MigrationFree {
    Eager,
    Lazy,
}

crate::params! {
    /// `[placement.mitosis]`.
    pub struct MitosisParams {
        /// Sockets holding a replica of every process' page tables: `"all"` (§6.1's state iv),
        /// `"none"` (no replication; tables placed first-touch) or a list of sockets.
        pub replicas: ReplicaSet = ReplicaSet::Named("all".into()),
        /// Frames of each socket's page-table cache (§5.1's sysctl; its value is not stated:
        /// 1,024 pages = 4 MiB per socket is assumed). 0: every table page straight from the
        /// node's allocator.
        pub reserve_pages: u32 = 1024,
        /// `"eager"` (default) or `"lazy"`: free a migrated process' old replica at once, or
        /// keep it up to date (§5.5).
        pub migration_free: MigrationFree = MigrationFree::Eager,
    }
}

impl crate::registry::ParamKind for ReplicaSet {
    const KIND: &'static str = "\"all\", \"none\" or a list of sockets";
}

impl crate::registry::ParamKind for MigrationFree {
    const KIND: &'static str = "\"eager\" or \"lazy\"";
}

impl MitosisParams {
    /// The replication mask as a list of sockets (empty: none), checked against `sockets`.
    pub fn mask(&self, sockets: u32) -> Result<Vec<u32>> {
        self.replicas.sockets("placement.mitosis.replicas", sockets)
    }
}

#[derive(Default, Serialize)]
struct MitosisStats {
    /// Table pages allocated for replicas beyond the first copy.
    replica_tables_allocated: u64,
    /// Entries written in a replica other than the one written first (each also reads a
    /// ring pointer).
    replica_entry_writes: u64,
    /// Times a socket's page-table cache ran dry and was refilled from its node.
    reserve_refills: u64,
    /// Table pages that could not come from their socket (its node was out of memory).
    strict_allocation_failures: u64,
    /// Replicas created because a process moved to a socket without one.
    migration_replicas: u64,
    /// Replicas freed after a migration (`migration_free = "eager"`).
    replicas_freed: u64,
    /// Table pages of those freed replicas.
    replica_tables_freed: u64,
}

struct MmReplicas {
    /// Root slot per socket (`NO_SLOT`: no replica there).
    roots: Vec<u32>,
    /// Socket of the primary tree.
    primary: u32,
    /// Where a single tree's new tables go: the mask's one socket, or `None` (a mask of
    /// none: first-touch, the faulting socket).
    single_socket: Option<u32>,
}

pub struct Mitosis {
    nodes: u32,
    /// The system-wide mask (`[placement.mitosis] replicas`).
    mask: Vec<u32>,
    /// Address spaces created with a mask of their own (`PtOptions::replica_sockets`).
    own_masks: u64,
    reserve_pages: u32,
    migration_free: MigrationFree,
    /// Per socket: its page-table cache (free frames on that node).
    reserves: Vec<Vec<Pfn>>,
    /// Per arena slot: the next replica of the same logical table page (`NO_SLOT`: none).
    ring_next: Vec<u32>,
    /// Per address space.
    mms: Vec<Option<MmReplicas>>,
    /// (table frame, entry index) of every replica write since the engine last took them.
    writes: Vec<(Pfn, u32)>,
    /// Scratch for lock-step walks: (socket, slot) per replica, primary first.
    cursor: Vec<(u32, u32)>,
    stats: MitosisStats,
}

impl crate::registry::Plugin for Mitosis {
    type Params = MitosisParams;
}

impl super::Backend for Mitosis {
    fn build(cfg: &crate::config::Config, _spec: &str, params: MitosisParams) -> Result<Mitosis> {
        Mitosis::new(&params, cfg.machine.sockets)
    }
}

impl Mitosis {
    pub fn new(params: &MitosisParams, sockets: u32) -> Result<Mitosis> {
        Ok(Mitosis {
            nodes: sockets,
            mask: params.mask(sockets)?,
            own_masks: 0,
            reserve_pages: params.reserve_pages,
            migration_free: params.migration_free,
            reserves: vec![Vec::new(); sockets as usize],
            ring_next: Vec::new(),
            mms: Vec::new(),
            writes: Vec::new(),
            cursor: Vec::new(),
            stats: MitosisStats::default(),
        })
    }

    fn mm(&self, mm: u32) -> &MmReplicas {
        self.mms[mm as usize].as_ref().expect("address space created by this backend")
    }

    fn set_next(&mut self, slot: u32, next: u32) {
        let s = slot as usize;
        if self.ring_next.len() <= s {
            self.ring_next.resize(s + 1, NO_SLOT);
        }
        self.ring_next[s] = next;
    }

    #[inline]
    fn next(&self, slot: u32) -> u32 {
        self.ring_next.get(slot as usize).copied().unwrap_or(NO_SLOT)
    }

    /// An empty table page for `mm` on `socket`, from the socket's page-table cache.
    fn alloc_table(&mut self, ctx: &mut PtCtx<'_>, mm: u32, socket: u32) -> Result<u32> {
        let (reserve_pages, nodes) = (self.reserve_pages.max(1), self.nodes);
        let reserve = &mut self.reserves[socket as usize];
        let stats = &mut self.stats;
        let slot = ctx.pt.alloc_table_with(ctx.mem, NodeId(socket), mm, &mut |mem: &mut PhysMem| {
            if reserve.is_empty() {
                stats.reserve_refills += 1;
                while reserve.len() < reserve_pages as usize {
                    match mem.alloc(NodeId(socket), FrameKind::PageTable, 0) {
                        Ok(p) => reserve.push(p),
                        Err(_) => break,
                    }
                }
                // Handed out lowest frame first.
                reserve.reverse();
            }
            if let Some(p) = reserve.pop() {
                return Ok(p);
            }
            // The node has nothing left: the strict allocation fails; take the nearest
            // node that has a frame (sockets in order from this one).
            stats.strict_allocation_failures += 1;
            let mut last = None;
            for d in 1..nodes {
                match mem.alloc(NodeId((socket + d) % nodes), FrameKind::PageTable, 0) {
                    Ok(p) => return Ok(p),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| Error::Sim(format!("node {socket} has no frame for a page table"))))
        })?;
        self.set_next(slot, NO_SLOT);
        Ok(slot)
    }

    /// One table per socket of `sockets` (primary first), linked into a ring; their slots
    /// are written to `self.cursor` beside the sockets.
    fn alloc_ring(&mut self, ctx: &mut PtCtx<'_>, mm: u32, sockets: &[u32], out: &mut Vec<u32>) -> Result<()> {
        out.clear();
        for (i, &s) in sockets.iter().enumerate() {
            out.push(self.alloc_table(ctx, mm, s)?);
            if i > 0 {
                self.stats.replica_tables_allocated += 1;
            }
        }
        if out.len() > 1 {
            for i in 0..out.len() {
                self.set_next(out[i], out[(i + 1) % out.len()]);
            }
        }
        Ok(())
    }

    /// Every table slot of the tree under `slot` (level `level`), the slot included.
    fn collect(pt: &PageTables, slot: u32, level: u32, out: &mut Vec<u32>) {
        out.push(slot);
        if level == 1 {
            return;
        }
        for index in 0..crate::types::PT_ENTRIES {
            let e = pt.entry(slot, index);
            if e & PTE_PRESENT != 0 && e & PTE_HUGE == 0 {
                Self::collect(pt, pt.child_slot(slot, index), level - 1, out);
            }
        }
    }

    /// Copy the tree under `src` (level `level`) onto `socket`, each new page joining its
    /// source's ring. Returns the copy's slot.
    fn copy_tree(&mut self, ctx: &mut PtCtx<'_>, mm: u32, src: u32, level: u32, socket: u32) -> Result<u32> {
        let slot = self.alloc_table(ctx, mm, socket)?;
        self.stats.replica_tables_allocated += 1;
        let after = match self.next(src) {
            NO_SLOT => src,
            n => n,
        };
        self.set_next(slot, after);
        self.set_next(src, slot);
        for index in 0..crate::types::PT_ENTRIES {
            let e = ctx.pt.entry(src, index);
            if e & PTE_PRESENT == 0 {
                continue;
            }
            if level > 1 && e & PTE_HUGE == 0 {
                let child = self.copy_tree(ctx, mm, ctx.pt.child_slot(src, index), level - 1, socket)?;
                ctx.pt.link(slot, index, child);
            } else {
                *ctx.pt.entry_mut(slot, index) = e;
            }
            self.writes.push((ctx.pt.pfn_of(slot), index as u32));
            self.stats.replica_entry_writes += 1;
        }
        Ok(slot)
    }

    /// Take `slot` out of its ring.
    fn unlink(&mut self, slot: u32) {
        let next = self.next(slot);
        if next != NO_SLOT {
            let mut prev = next;
            while self.next(prev) != slot {
                prev = self.next(prev);
            }
            self.set_next(prev, if next == prev { NO_SLOT } else { next });
        }
        self.set_next(slot, NO_SLOT);
    }
}

impl PageTableBackend for Mitosis {
    fn create(&mut self, ctx: &mut PtCtx<'_>, mm: u32, socket: u32, opts: &PtOptions) -> Result<u32> {
        // The process's own mask, else the system-wide one.
        let mask = match &opts.replica_sockets {
            Some(list) => {
                opts.check("ProcessSpec.page_tables.replica_sockets", self.nodes)?;
                let mut own = list.clone();
                own.sort_unstable();
                own.dedup();
                self.own_masks += 1;
                own
            }
            None => self.mask.clone(),
        };
        let single_socket = if mask.len() == 1 { Some(mask[0]) } else { None };
        let mut roots = vec![NO_SLOT; self.nodes as usize];
        let (primary, root) = if mask.len() <= 1 {
            // No replication: one tree, placed first-touch (or on the one masked socket).
            let s = single_socket.unwrap_or(socket);
            (s, self.alloc_table(ctx, mm, s)?)
        } else {
            let primary = if mask.contains(&socket) { socket } else { mask[0] };
            let mut order = vec![primary];
            order.extend(mask.iter().copied().filter(|&s| s != primary));
            let mut slots = Vec::new();
            self.alloc_ring(ctx, mm, &order, &mut slots)?;
            for (&s, &slot) in order.iter().zip(&slots) {
                roots[s as usize] = slot;
            }
            (primary, slots[0])
        };
        roots[primary as usize] = root;
        let i = mm as usize;
        if self.mms.len() <= i {
            self.mms.resize_with(i + 1, || None);
        }
        self.mms[i] = Some(MmReplicas { roots, primary, single_socket });
        Ok(root)
    }

    fn root_for(&self, mm: u32, primary: u32, socket: u32) -> u32 {
        match self.mms.get(mm as usize).and_then(|m| m.as_ref()) {
            Some(m) => match m.roots[socket as usize] {
                NO_SLOT => primary,
                r => r,
            },
            None => primary,
        }
    }

    fn trees(&self, mm: u32, primary: u32) -> Vec<u32> {
        match self.mms.get(mm as usize).and_then(|m| m.as_ref()) {
            Some(m) => m.roots.iter().copied().filter(|&r| r != NO_SLOT).collect(),
            None => vec![primary],
        }
    }

    fn map(&mut self, ctx: &mut PtCtx<'_>, mm: u32, root: u32, va: u64, pfn: Pfn, size: PageSize, flags: u64, socket: u32) -> Result<u64> {
        let (replicated, primary, single_socket) = {
            let m = self.mm(mm);
            (m.roots.iter().filter(|&&r| r != NO_SLOT).count() > 1, m.primary, m.single_socket)
        };
        if !replicated {
            // One tree: its tables on the faulting socket (first-touch), or the mask's one
            // socket; still through that socket's page-table cache.
            let place = single_socket.unwrap_or(socket);
            let leaf = leaf_level(size);
            let mut slot = root;
            for level in (leaf + 1..=ctx.levels).rev() {
                let idx = level_index(va, level);
                let e = ctx.pt.entry(slot, idx);
                slot = if e & PTE_PRESENT != 0 && e & PTE_HUGE == 0 {
                    ctx.pt.child_slot(slot, idx)
                } else {
                    let child = self.alloc_table(ctx, mm, place)?;
                    ctx.pt.link(slot, idx, child);
                    child
                };
            }
            let huge = if size == PageSize::Size4K { 0 } else { PTE_HUGE };
            let idx = level_index(va, leaf);
            return Ok(std::mem::replace(ctx.pt.entry_mut(slot, idx), make_pte(pfn, flags | PTE_PRESENT | huge)));
        }
        // Lock-step over the replicas, primary first.
        let mut cursor = std::mem::take(&mut self.cursor);
        cursor.clear();
        {
            let m = self.mm(mm);
            cursor.push((primary, root));
            cursor.extend(m.roots.iter().enumerate().filter(|&(s, &r)| r != NO_SLOT && s as u32 != primary).map(|(s, &r)| (s as u32, r)));
        }
        let leaf = leaf_level(size);
        let mut sockets = Vec::with_capacity(cursor.len());
        let mut fresh = Vec::with_capacity(cursor.len());
        let result = (|| -> Result<u64> {
            for level in (leaf + 1..=ctx.levels).rev() {
                let idx = level_index(va, level);
                let e = ctx.pt.entry(cursor[0].1, idx);
                if e & PTE_PRESENT != 0 && e & PTE_HUGE == 0 {
                    for c in cursor.iter_mut() {
                        c.1 = ctx.pt.child_slot(c.1, idx);
                    }
                } else {
                    sockets.clear();
                    sockets.extend(cursor.iter().map(|c| c.0));
                    self.alloc_ring(ctx, mm, &sockets, &mut fresh)?;
                    for (i, c) in cursor.iter_mut().enumerate() {
                        ctx.pt.link(c.1, idx, fresh[i]);
                        if i > 0 {
                            self.writes.push((ctx.pt.pfn_of(c.1), idx as u32));
                            self.stats.replica_entry_writes += 1;
                        }
                        c.1 = fresh[i];
                    }
                }
            }
            let huge = if size == PageSize::Size4K { 0 } else { PTE_HUGE };
            let idx = level_index(va, leaf);
            let new = make_pte(pfn, flags | PTE_PRESENT | huge);
            let mut old = 0;
            for (i, c) in cursor.iter().enumerate() {
                let o = std::mem::replace(ctx.pt.entry_mut(c.1, idx), new);
                if i == 0 {
                    old = o;
                } else {
                    old |= o & AD;
                    self.writes.push((ctx.pt.pfn_of(c.1), idx as u32));
                    self.stats.replica_entry_writes += 1;
                }
            }
            Ok(old)
        })();
        self.cursor = cursor;
        result
    }

    fn write(&mut self, ctx: &mut PtCtx<'_>, _mm: u32, _va: u64, leaf: &Leaf, new: u64) -> u64 {
        let mut old = std::mem::replace(ctx.pt.entry_mut(leaf.slot, leaf.index), new);
        let mut s = self.next(leaf.slot);
        if s == NO_SLOT {
            return old;
        }
        while s != leaf.slot {
            old |= std::mem::replace(ctx.pt.entry_mut(s, leaf.index), new) & AD;
            self.writes.push((ctx.pt.pfn_of(s), leaf.index as u32));
            self.stats.replica_entry_writes += 1;
            s = self.next(s);
        }
        old
    }

    fn lookup(&self, pt: &PageTables, _mm: u32, root: u32, levels: u32, va: u64) -> Option<Leaf> {
        let mut leaf = pt.lookup(root, levels, va)?;
        let mut s = self.next(leaf.slot);
        if s != NO_SLOT {
            while s != leaf.slot {
                leaf.pte |= pt.entry(s, leaf.index) & AD;
                s = self.next(s);
            }
        }
        Some(leaf)
    }

    fn free_tables(&mut self, ctx: &mut PtCtx<'_>, mm: u32, root: u32, start: u64, end: u64, in_use: &dyn Fn(u64, u64) -> bool) -> Vec<u32> {
        let mut freed = ctx.pt.free_tables(root, ctx.levels, start, end, in_use);
        let others: Vec<u32> = self.mm(mm).roots.iter().copied().filter(|&r| r != NO_SLOT && r != root).collect();
        for r in others {
            freed.extend(ctx.pt.free_tables(r, ctx.levels, start, end, in_use));
        }
        for &s in &freed {
            self.set_next(s, NO_SLOT);
        }
        freed
    }

    fn on_migrate(&mut self, ctx: &mut PtCtx<'_>, mm: u32, socket: u32, in_use: &dyn Fn(u32, u32) -> bool) -> Result<Migration> {
        let (primary, root) = {
            let m = self.mm(mm);
            if m.roots[socket as usize] != NO_SLOT {
                return Ok(Migration::default());
            }
            (m.primary, m.roots[m.primary as usize])
        };
        let copy = self.copy_tree(ctx, mm, root, ctx.levels, socket)?;
        self.stats.migration_replicas += 1;
        let mut out = Migration::default();
        let roots = {
            let m = self.mms[mm as usize].as_mut().expect("created");
            m.roots[socket as usize] = copy;
            m.roots.clone()
        };
        if self.migration_free == MigrationFree::Lazy {
            return Ok(out);
        }
        let mut new_primary = primary;
        for (s, &r) in roots.iter().enumerate() {
            let s = s as u32;
            if r == NO_SLOT || s == socket || in_use(s, r) {
                continue;
            }
            let mut slots = Vec::new();
            Self::collect(ctx.pt, r, ctx.levels, &mut slots);
            for &t in &slots {
                self.unlink(t);
                for index in 0..crate::types::PT_ENTRIES {
                    if ctx.pt.entry(t, index) != 0 {
                        ctx.pt.unlink_entry(t, index);
                    }
                }
            }
            self.stats.replicas_freed += 1;
            self.stats.replica_tables_freed += slots.len() as u64;
            out.freed.extend(slots);
            self.mms[mm as usize].as_mut().expect("created").roots[s as usize] = NO_SLOT;
            if s == new_primary {
                new_primary = socket;
            }
        }
        if new_primary != primary {
            self.mms[mm as usize].as_mut().expect("created").primary = new_primary;
            out.primary = Some(copy);
        }
        Ok(out)
    }

    fn replica_writes(&mut self) -> Option<&mut Vec<(Pfn, u32)>> {
        Some(&mut self.writes)
    }

    fn stats_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(&self.stats).unwrap_or_default();
        v["backend"] = serde_json::json!("mitosis");
        v["mask"] = serde_json::json!(self.mask);
        if self.own_masks > 0 {
            // Only when a workload gave processes masks of their own (stats unchanged otherwise).
            v["address_spaces_with_own_mask"] = serde_json::json!(self.own_masks);
        }
        v["reserve_frames_held"] = serde_json::json!(self.reserves.iter().map(|r| r.len()).collect::<Vec<_>>());
        v["replicated_address_spaces"] = serde_json::json!(self.mms.iter().flatten().filter(|m| m.roots.iter().filter(|&&r| r != NO_SLOT).count() > 1).count());
        v
    }
}

/// Node of table `slot` (for tests and dumps).
pub fn node_of_table(pt: &PageTables, slot: u32) -> NodeId {
    node_of(pt.pfn_of(slot))
}
