//! x86-64 radix page tables (4 or 5 levels) whose table pages are simulated frames.
//!
//! docs/ARCHITECTURE.md "Page tables": entries in x86 format (present, writable, user, accessed,
//! dirty, huge/PS, global, pfn); 2 MiB leaves at the PD level and 1 GiB leaves at the PDPT
//! level; each table page is a frame on a NUMA node chosen by the placement policy, and
//! records its arena slot in the frame descriptor so the walker can follow physical
//! pointers as hardware does.
//!
//! Levels are numbered as the SDM does: 1 = PT, 2 = PD, 3 = PDPT, 4 = PML4, 5 = PML5.
//! Table pages are freed by the OS model ([`PageTables::free_tables`]) when an unmapped
//! range leaves a table covering no mapping (Linux's free_pgtables with its floor and
//! ceiling); freed arena slots are reused.
//!
//! Host storage (no simulated effect): a table starts *small*, its non-zero entries kept
//! as up to [`SMALL_ENTRIES`] (index, value) pairs in 80 bytes, and becomes a dense
//! 4 KiB array when it needs more. Random first touches over a large region make a new
//! table nearly every fault, each with one or two entries: 4 KiB of host memory to
//! allocate and zero per fault was most of that stream's time and memory (issue 16).
//! Reads of an absent entry give 0, as a zeroed table page does, so nothing above this
//! module can tell the two apart.

use crate::error::Result;
use crate::memory::{FrameKind, PhysMem};
use crate::types::{NodeId, PageSize, Pfn, PT_ENTRIES};

pub const PTE_PRESENT: u64 = 1 << 0;
pub const PTE_WRITABLE: u64 = 1 << 1;
pub const PTE_USER: u64 = 1 << 2;
pub const PTE_ACCESSED: u64 = 1 << 5;
pub const PTE_DIRTY: u64 = 1 << 6;
/// PS: this entry at level 2 or 3 maps a huge page.
pub const PTE_HUGE: u64 = 1 << 7;
pub const PTE_GLOBAL: u64 = 1 << 8;
/// Software bit (one of x86's available bits 9-11): a NUMA-hinting PTE made PROT_NONE by
/// AutoNUMA's scan (`os/numa.rs`; Linux's `_PAGE_PROTNONE`). The walker treats it as not
/// present; the kernel still sees the page mapped to its frame.
pub const PTE_PROTNONE: u64 = 1 << 9;
pub const PTE_PFN_MASK: u64 = 0x000F_FFFF_FFFF_F000;

#[inline]
pub fn pte_pfn(pte: u64) -> Pfn {
    Pfn((pte & PTE_PFN_MASK) >> 12)
}

#[inline]
pub fn make_pte(pfn: Pfn, flags: u64) -> u64 {
    (pfn.0 << 12) & PTE_PFN_MASK | flags
}

/// Index into the table at `level` for virtual address `va`.
#[inline]
pub fn level_index(va: u64, level: u32) -> usize {
    ((va >> (12 + 9 * (level - 1))) & 511) as usize
}

/// The level whose entry maps a page of `size`.
#[inline]
pub fn leaf_level(size: PageSize) -> u32 {
    1 + size.shift_4k() / 9
}

/// All page-table pages of the simulation (every address space), in one arena.
///
/// Besides the entries (whose pfn fields are real simulated frame numbers), each
/// upper-level table keeps the arena slots of its children, the simulator's handle for
/// "the table page at that frame", so a walk follows a pointer without a frame-descriptor
/// lookup: on a large mapping the descriptors are far too big to stay in the host's cache,
/// while these few upper-level arrays always do.
pub struct PageTables {
    /// Dense tables' entries, by dense id.
    pages: Vec<[u64; PT_ENTRIES]>,
    /// Small tables, by small id.
    small: Vec<SmallTable>,
    /// Per slot: the dense id, or `SMALL | small id`.
    repr: Vec<u32>,
    /// Dense and small ids of freed tables (all their entries 0), reused first.
    free_dense: Vec<u32>,
    free_small: Vec<u32>,
    pfn_of_slot: Vec<Pfn>,
    /// Per slot: index into `children`, or `NO_CHILDREN` (leaf tables, empty tables).
    children_of_slot: Vec<u32>,
    children: Vec<[u32; PT_ENTRIES]>,
    /// Arena slots of freed table pages, reused first.
    free_slots: Vec<u32>,
    /// Tables detached from their tree but kept, frame and slot, for reuse by an address
    /// space with the same reuse key: (key, slot). A page-walk cache that still points to
    /// one then reads a table of the same key, never another key's or a data page.
    parked: Vec<(u32, u32)>,
    /// Per owner (address space): its reuse key (0 or absent: none).
    reuse_key: Vec<u32>,
    /// Parked tables taken again by `alloc_table`.
    pub tables_reused: u64,
    /// Most table pages live at once.
    pub peak_live: usize,
}

const NO_CHILDREN: u32 = u32::MAX;

/// Entries a small table holds before it becomes dense: one SSE2 compare of their
/// indices finds an entry.
pub const SMALL_ENTRIES: usize = 8;
/// `repr` bit: the slot's table is small.
const SMALL: u32 = 1 << 31;
/// Index of a position that has never held an entry (no table index is this large).
const NO_INDEX: u16 = u16::MAX;
/// `repr` of a freed slot: small table 0, kept empty, never written. A walk through a stale
/// page-walk-cache entry may still read a freed table (a real walker reads freed memory):
/// it reads zeros, as from the freed page, until the slot holds a new table; never the
/// entries of another table that took the freed one's storage.
const FREED: u32 = SMALL;

/// Where a table's entries live (a decoded `repr` value).
#[derive(Clone, Copy)]
enum Storage {
    Dense(usize),
    Small(usize),
}

/// A table with few non-zero entries. Position `i` holds the entry of table index
/// `index[i]`, `value[i]`; a position whose value is 0 is free (an absent entry reads 0),
/// so a position is reused without being cleared. An index is at one position at most.
#[derive(Clone, Copy)]
struct SmallTable {
    index: [u16; SMALL_ENTRIES],
    value: [u64; SMALL_ENTRIES],
}

impl SmallTable {
    const EMPTY: SmallTable = SmallTable { index: [NO_INDEX; SMALL_ENTRIES], value: [0; SMALL_ENTRIES] };

    /// Position holding table index `index`.
    #[inline(always)]
    fn find(&self, index: usize) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE2 is part of the x86_64 baseline; the load reads the 8 u16 indices
        // (16 bytes) of `self.index`, unaligned.
        unsafe {
            use std::arch::x86_64::{__m128i, _mm_cmpeq_epi16, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi16};
            let v = _mm_loadu_si128(self.index.as_ptr() as *const __m128i);
            let m = _mm_movemask_epi8(_mm_cmpeq_epi16(v, _mm_set1_epi16(index as i16))) as u32;
            (m != 0).then(|| m.trailing_zeros() as usize / 2)
        }
        #[cfg(not(target_arch = "x86_64"))]
        self.index.iter().position(|&i| i == index as u16)
    }

    /// A position whose entry is 0.
    #[inline]
    fn free_position(&self) -> Option<usize> {
        self.value.iter().position(|&v| v == 0)
    }
}
/// Child slot value of an entry with no child table.
pub const NO_SLOT: u32 = u32::MAX;

/// Where a software walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leaf {
    pub slot: u32,
    pub index: usize,
    pub level: u32,
    pub pte: u64,
}

impl Default for PageTables {
    fn default() -> Self {
        Self::new()
    }
}

impl PageTables {
    pub fn new() -> Self {
        PageTables {
            pages: Vec::new(),
            small: vec![SmallTable::EMPTY],
            repr: Vec::new(),
            free_dense: Vec::new(),
            free_small: Vec::new(),
            pfn_of_slot: Vec::new(),
            children_of_slot: Vec::new(),
            children: Vec::new(),
            free_slots: Vec::new(),
            parked: Vec::new(),
            reuse_key: Vec::new(),
            tables_reused: 0,
            peak_live: 0,
        }
    }

    /// Address space `owner` may take parked tables of `key` (0: none).
    pub fn set_reuse_key(&mut self, owner: u32, key: u32) {
        let o = owner as usize;
        if self.reuse_key.len() <= o {
            self.reuse_key.resize(o + 1, 0);
        }
        self.reuse_key[o] = key;
    }

    /// Keep the (empty, detached) tables at `slots` for reuse under `key` instead of
    /// freeing them.
    pub fn park(&mut self, slots: &[u32], key: u32) {
        for &slot in slots {
            debug_assert!(self.is_empty_table(slot), "parking a non-empty table");
            self.parked.push((key, slot));
        }
    }

    /// Tables parked now.
    pub fn parked_count(&self) -> usize {
        self.parked.len()
    }

    /// Allocate an empty table page on `node`.
    pub fn alloc_table(&mut self, mem: &mut PhysMem, node: NodeId, owner: u32) -> Result<u32> {
        self.alloc_table_with(mem, node, owner, &mut |mem: &mut PhysMem| mem.alloc(node, FrameKind::PageTable, owner))
    }

    /// Allocate an empty table page in a frame `frame` supplies (a backend's own reserve,
    /// e.g. Mitosis' per-socket page-table cache) for `owner`; parked tables of the owner's
    /// reuse key on `node` are taken first, as in [`PageTables::alloc_table`].
    pub fn alloc_table_with(&mut self, mem: &mut PhysMem, node: NodeId, owner: u32, frame: &mut dyn FnMut(&mut PhysMem) -> Result<Pfn>) -> Result<u32> {
        let key = self.reuse_key.get(owner as usize).copied().unwrap_or(0);
        if key != 0 {
            let pfn_of = &self.pfn_of_slot;
            if let Some(i) = self.parked.iter().rposition(|&(k, s)| k == key && crate::memory::node_of(pfn_of[s as usize]) == node) {
                let (_, slot) = self.parked.swap_remove(i);
                mem.set_owner(self.pfn_of_slot[slot as usize], owner);
                self.tables_reused += 1;
                return Ok(slot);
            }
        }
        let pfn = frame(mem)?;
        mem.desc_mut(pfn).kind = FrameKind::PageTable;
        mem.set_owner(pfn, owner);
        Ok(self.install_table(pfn))
    }

    /// Give the (allocated, zeroed) frame `pfn` an arena slot as an empty table page.
    fn install_table(&mut self, pfn: Pfn) -> u32 {
        let small = self.new_small();
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                // A reused slot keeps its children array (all NO_SLOT after free_table).
                self.pfn_of_slot[slot as usize] = pfn;
                self.repr[slot as usize] = small;
                slot
            }
            None => {
                self.repr.push(small);
                self.pfn_of_slot.push(pfn);
                self.children_of_slot.push(NO_CHILDREN);
                self.repr.len() as u32 - 1
            }
        };
        self.peak_live = self.peak_live.max(self.live_tables());
        slot
    }

    /// A new small table's `repr` value.
    fn new_small(&mut self) -> u32 {
        let id = match self.free_small.pop() {
            Some(id) => id,
            None => {
                self.small.push(SmallTable::EMPTY);
                self.small.len() as u32 - 1
            }
        };
        SMALL | id
    }

    /// A zeroed dense table's id.
    fn new_dense(&mut self) -> u32 {
        if let Some(id) = self.free_dense.pop() {
            return id;
        }
        if self.pages.len().is_multiple_of(PT_ENTRIES) {
            // Every 512 dense tables, the host pages of the next 512 (2 MiB) in one call.
            self.pages.reserve(PT_ENTRIES);
            let spare = self.pages.spare_capacity_mut();
            let n = spare.len().min(PT_ENTRIES);
            crate::prefetch::populate_write(spare.as_ptr() as *const u8, n * std::mem::size_of::<[u64; PT_ENTRIES]>());
        }
        self.pages.push([0; PT_ENTRIES]);
        self.pages.len() as u32 - 1
    }

    #[inline(always)]
    fn storage(&self, slot: u32) -> Storage {
        let r = self.repr[slot as usize];
        if r & SMALL == 0 {
            Storage::Dense(r as usize)
        } else {
            Storage::Small((r & !SMALL) as usize)
        }
    }

    /// Give back the storage of the (empty) table at `slot`, which is being freed.
    fn release_storage(&mut self, slot: u32) {
        match self.storage(slot) {
            Storage::Dense(id) => self.free_dense.push(id as u32),
            Storage::Small(id) => self.free_small.push(id as u32),
        }
        self.repr[slot as usize] = FREED;
    }

    /// Whether every entry of the table at `slot` is 0.
    pub fn is_empty_table(&self, slot: u32) -> bool {
        match self.storage(slot) {
            Storage::Dense(id) => self.pages[id].iter().all(|&v| v == 0),
            Storage::Small(id) => self.small[id].value.iter().all(|&v| v == 0),
        }
    }

    /// Host bytes the tables' entries take (dense arrays and small tables in use or kept
    /// for reuse; not a vector's spare capacity, which may never be touched): what the
    /// simulated page tables' contents cost the host.
    pub fn entry_bytes(&self) -> u64 {
        (self.pages.len() * std::mem::size_of::<[u64; PT_ENTRIES]>() + self.small.len() * std::mem::size_of::<SmallTable>()) as u64
    }

    /// Point entry `index` of table `parent` at table `child` (an upper-level entry,
    /// permissive as Linux sets them).
    pub fn link(&mut self, parent: u32, index: usize, child: u32) {
        *self.entry_mut(parent, index) = make_pte(self.pfn_of(child), PTE_PRESENT | PTE_WRITABLE | PTE_USER);
        self.set_child(parent, index, child);
    }

    /// Clear entry `index` of table `slot` and forget its child (the child is being freed
    /// with it).
    pub fn unlink_entry(&mut self, slot: u32, index: usize) {
        *self.entry_mut(slot, index) = 0;
        if self.children_of_slot[slot as usize] != NO_CHILDREN {
            self.set_child(slot, index, NO_SLOT);
        }
    }

    /// Table pages in use now (allocated and not freed; parked tables count).
    pub fn live_tables(&self) -> usize {
        self.repr.len() - self.free_slots.len()
    }

    /// Table pages in use now, per node (`nodes` entries).
    pub fn live_tables_per_node(&self, nodes: u32) -> Vec<u64> {
        let mut per = vec![0u64; nodes as usize];
        for &pfn in &self.pfn_of_slot {
            if pfn != Pfn(u64::MAX) {
                per[crate::memory::node_of(pfn).0 as usize] += 1;
            }
        }
        per
    }

    /// Free the (empty) table page at `slot`: its frame goes back to the allocator and the
    /// slot to the free list.
    pub fn free_table(&mut self, mem: &mut PhysMem, slot: u32) {
        debug_assert!(self.is_empty_table(slot), "freeing a non-empty table");
        self.release_storage(slot);
        mem.free(self.pfn_of_slot[slot as usize]);
        self.pfn_of_slot[slot as usize] = Pfn(u64::MAX);
        self.free_slots.push(slot);
    }

    /// After `[start, end)` was unmapped from the tree at `root`: free every table page
    /// below the root whose whole virtual range lies in no mapping (`in_use(lo, hi)` says
    /// whether any mapping intersects `[lo, hi)`), clearing the entry that pointed to it.
    /// Returns the freed slots (the caller frees their frames after the TLB flush, as
    /// mmu_gather does, and must tell the page-walk caches).
    pub fn free_tables(&mut self, root: u32, levels: u32, start: u64, end: u64, in_use: &dyn Fn(u64, u64) -> bool) -> Vec<u32> {
        let mut freed = Vec::new();
        self.free_tables_at(root, levels, 0, start, end, in_use, &mut freed);
        freed
    }

    #[allow(clippy::too_many_arguments)]
    fn free_tables_at(&mut self, slot: u32, level: u32, base: u64, start: u64, end: u64, in_use: &dyn Fn(u64, u64) -> bool, freed: &mut Vec<u32>) {
        if level == 1 {
            return;
        }
        let span = 1u64 << (12 + 9 * (level - 1));
        let first = ((start.saturating_sub(base)) / span) as usize;
        let last = (((end - 1).saturating_sub(base)) / span).min(511) as usize;
        for index in first..=last {
            let e = self.entry(slot, index);
            if e & PTE_PRESENT == 0 || e & PTE_HUGE != 0 {
                continue;
            }
            let child = self.child_slot(slot, index);
            let lo = base + index as u64 * span;
            self.free_tables_at(child, level - 1, lo, start.max(lo), end.min(lo + span), in_use, freed);
            if !in_use(lo, lo + span) && self.is_empty_table(child) {
                *self.entry_mut(slot, index) = 0;
                self.set_child(slot, index, NO_SLOT);
                freed.push(child);
            }
        }
    }

    /// Release the frames of tables `free_tables` unlinked.
    pub fn release_tables(&mut self, mem: &mut PhysMem, slots: &[u32]) {
        for &s in slots {
            self.free_table(mem, s);
        }
    }

    /// Arena slot of the table that entry `index` of table `slot` points to (`NO_SLOT`
    /// when it points to none).
    #[inline]
    pub fn child_slot(&self, slot: u32, index: usize) -> u32 {
        match self.children_of_slot[slot as usize] {
            NO_CHILDREN => NO_SLOT,
            c => self.children[c as usize][index],
        }
    }

    fn set_child(&mut self, slot: u32, index: usize, child: u32) {
        if self.children_of_slot[slot as usize] == NO_CHILDREN {
            self.children_of_slot[slot as usize] = self.children.len() as u32;
            self.children.push([NO_SLOT; PT_ENTRIES]);
        }
        let c = self.children_of_slot[slot as usize];
        self.children[c as usize][index] = child;
    }

    #[inline]
    pub fn entry(&self, slot: u32, index: usize) -> u64 {
        match self.storage(slot) {
            Storage::Dense(id) => self.pages[id][index],
            Storage::Small(id) => {
                let t = &self.small[id];
                t.find(index).map_or(0, |i| t.value[i])
            }
        }
    }

    /// The entry, to write. A small table gives an absent entry a position (a 0 written
    /// there leaves it absent), and becomes dense when it has none left.
    #[inline]
    pub fn entry_mut(&mut self, slot: u32, index: usize) -> &mut u64 {
        match self.storage(slot) {
            Storage::Dense(id) => &mut self.pages[id][index],
            Storage::Small(id) => self.small_entry_mut(slot, id, index),
        }
    }

    fn small_entry_mut(&mut self, slot: u32, id: usize, index: usize) -> &mut u64 {
        debug_assert_ne!(id as u32, FREED & !SMALL, "writing entry {index} of freed table slot {slot}");
        let t = &self.small[id];
        if let Some(i) = t.find(index).or_else(|| t.free_position()) {
            let t = &mut self.small[id];
            t.index[i] = index as u16;
            return &mut t.value[i];
        }
        // Full: copy into a dense table, and give the small one back.
        let dense = self.new_dense();
        let t = self.small[id];
        let page = &mut self.pages[dense as usize];
        for (&i, &v) in t.index.iter().zip(&t.value) {
            page[i as usize] = v;
        }
        self.small[id] = SmallTable::EMPTY;
        self.free_small.push(id as u32);
        self.repr[slot as usize] = dense;
        &mut self.pages[dense as usize][index]
    }

    #[inline]
    pub fn pfn_of(&self, slot: u32) -> Pfn {
        self.pfn_of_slot[slot as usize]
    }

    /// Number of table pages allocated.
    pub fn table_pages(&self) -> usize {
        self.repr.len()
    }

    /// Map `va` (aligned to `size`) to `pfn` with `flags` (PRESENT is added) in the tree at
    /// `root` of depth `levels`. Missing intermediate tables are allocated on the node
    /// `place()` returns. Returns the previous leaf entry (0 if none).
    #[allow(clippy::too_many_arguments)]
    pub fn map(
        &mut self,
        mem: &mut PhysMem,
        root: u32,
        levels: u32,
        va: u64,
        pfn: Pfn,
        size: PageSize,
        flags: u64,
        owner: u32,
        place: &mut dyn FnMut() -> NodeId,
    ) -> Result<u64> {
        let leaf = leaf_level(size);
        let mut slot = root;
        for level in (leaf + 1..=levels).rev() {
            let idx = level_index(va, level);
            let e = self.entry(slot, idx);
            slot = if e & PTE_PRESENT != 0 && e & PTE_HUGE == 0 {
                self.child_slot(slot, idx)
            } else {
                let child = self.alloc_table(mem, place(), owner)?;
                // Upper levels are permissive; the leaf decides (as Linux sets them).
                *self.entry_mut(slot, idx) = make_pte(self.pfn_of(child), PTE_PRESENT | PTE_WRITABLE | PTE_USER);
                self.set_child(slot, idx, child);
                child
            };
        }
        let idx = level_index(va, leaf);
        let huge = if size == PageSize::Size4K { 0 } else { PTE_HUGE };
        let old = self.entry(slot, idx);
        *self.entry_mut(slot, idx) = make_pte(pfn, flags | PTE_PRESENT | huge);
        Ok(old)
    }

    /// Software walk (no timing, no A/D updates): the leaf entry mapping `va`, if any.
    pub fn lookup(&self, root: u32, levels: u32, va: u64) -> Option<Leaf> {
        let mut slot = root;
        for level in (1..=levels).rev() {
            let index = level_index(va, level);
            let pte = self.entry(slot, index);
            if pte & PTE_PRESENT == 0 {
                return None;
            }
            if level == 1 || (pte & PTE_HUGE != 0 && level <= 3) {
                return Some(Leaf { slot, index, level, pte });
            }
            slot = self.child_slot(slot, index);
        }
        None
    }

    /// The PD-level (level 2) entry covering `va`, or 0 when an upper level is not
    /// present: present and not huge means a page table exists below it.
    pub fn pd_entry(&self, root: u32, levels: u32, va: u64) -> u64 {
        let mut slot = root;
        for level in (3..=levels).rev() {
            let index = level_index(va, level);
            let e = self.entry(slot, index);
            if e & PTE_PRESENT == 0 || e & PTE_HUGE != 0 {
                return 0;
            }
            slot = self.child_slot(slot, index);
        }
        self.entry(slot, level_index(va, 2))
    }

    /// Whether a 4 KiB page table exists for the 2 MiB region of `va`.
    pub fn has_page_table(&self, root: u32, levels: u32, va: u64) -> bool {
        let e = self.pd_entry(root, levels, va);
        e & PTE_PRESENT != 0 && e & PTE_HUGE == 0
    }

    /// Prefetch hint for a walk of `va`: follows the (host-cached) upper levels through the
    /// child slots and prefetches the deepest entry it reaches. Returns the physical line
    /// (frame << 6 | entry / 8) of that entry, for prefetching the page-table-line cache.
    #[inline]
    pub fn prefetch_walk(&self, root: u32, levels: u32, va: u64) -> u64 {
        let mut slot = root;
        let mut level = levels;
        loop {
            let index = level_index(va, level);
            let child = if level > 1 { self.child_slot(slot, index) } else { NO_SLOT };
            if child == NO_SLOT {
                match self.storage(slot) {
                    Storage::Dense(id) => crate::prefetch::read(&self.pages[id][index]),
                    Storage::Small(id) => crate::prefetch::read(&self.small[id]),
                }
                return (self.pfn_of_slot[slot as usize].0 << 6) | (index as u64 >> 3);
            }
            slot = child;
            level -= 1;
        }
    }

    /// Page size of a leaf at `level`.
    pub fn size_at(level: u32) -> PageSize {
        match level {
            1 => PageSize::Size4K,
            2 => PageSize::Size2M,
            _ => PageSize::Size1G,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parked table goes back only to an owner with the same reuse key, on the same
    /// node; everyone else gets a fresh frame and slot.
    #[test]
    fn parked_tables_are_reused_only_under_their_key() {
        let mut mem = PhysMem::new(2, 64);
        let mut pt = PageTables::new();
        pt.set_reuse_key(1, 7);
        pt.set_reuse_key(2, 8);
        let t = pt.alloc_table(&mut mem, NodeId(0), 1).unwrap();
        let frame = pt.pfn_of_slot[t as usize];
        pt.park(&[t], 7);
        assert_eq!(pt.parked_count(), 1);
        let other_key = pt.alloc_table(&mut mem, NodeId(0), 2).unwrap();
        assert_ne!(other_key, t, "another key never gets it");
        let no_key = pt.alloc_table(&mut mem, NodeId(0), 3).unwrap();
        assert_ne!(no_key, t);
        let other_node = pt.alloc_table(&mut mem, NodeId(1), 1).unwrap();
        assert_ne!(other_node, t, "a table is reused on its own node only");
        let again = pt.alloc_table(&mut mem, NodeId(0), 1).unwrap();
        assert_eq!((again, pt.pfn_of_slot[again as usize]), (t, frame), "same slot, same frame");
        assert_eq!((pt.parked_count(), pt.tables_reused), (0, 1));
    }

    /// Small and dense tables against a plain array per table: random writes (a third of
    /// them zero, which frees a small table's position), reads of every index after each
    /// step, frees and reuse of slots. A table stays small while it has at most
    /// SMALL_ENTRIES non-zero entries at once, and reads the same either way.
    #[test]
    fn small_and_dense_tables_read_as_plain_arrays() {
        let mut mem = PhysMem::new(1, 64);
        let mut pt = PageTables::new();
        let mut rng = crate::rng::SplitMix64::new(9);
        let mut model: Vec<(u32, Vec<u64>)> = Vec::new();
        for step in 0..6000 {
            match rng.below(20) {
                0 if model.len() < 12 => {
                    let slot = pt.alloc_table(&mut mem, NodeId(0), 1).unwrap();
                    assert!(pt.is_empty_table(slot));
                    model.push((slot, vec![0; PT_ENTRIES]));
                }
                1 if !model.is_empty() => {
                    // Clear a table and free it (its slot and storage are reused).
                    let (slot, mut m) = model.swap_remove(rng.below(model.len() as u64) as usize);
                    for (i, v) in m.iter_mut().enumerate() {
                        if *v != 0 {
                            *pt.entry_mut(slot, i) = 0;
                            *v = 0;
                        }
                    }
                    assert!(pt.is_empty_table(slot));
                    pt.free_table(&mut mem, slot);
                }
                _ if !model.is_empty() => {
                    let t = rng.below(model.len() as u64) as usize;
                    // Few distinct indices per table, so tables both fill and stay small.
                    let i = rng.below(if t.is_multiple_of(2) { 12 } else { 512 }) as usize;
                    let v = if rng.below(3) == 0 { 0 } else { rng.next_u64() | 1 };
                    *pt.entry_mut(model[t].0, i) = v;
                    model[t].1[i] = v;
                }
                _ => {}
            }
            if step % 97 == 0 {
                for (slot, m) in &model {
                    for (i, &v) in m.iter().enumerate() {
                        assert_eq!(pt.entry(*slot, i), v, "step {step}: slot {slot} index {i}");
                    }
                    assert_eq!(pt.is_empty_table(*slot), m.iter().all(|&v| v == 0));
                }
            }
        }
        // Storage: a table with at most SMALL_ENTRIES live entries, however many indices it
        // saw, takes 80 bytes; one more makes it dense.
        let mut pt = PageTables::new();
        let none = pt.entry_bytes();
        let slot = pt.alloc_table(&mut mem, NodeId(0), 1).unwrap();
        for i in 0..100 {
            *pt.entry_mut(slot, i) = 1;
            *pt.entry_mut(slot, i) = 0;
        }
        for i in 0..SMALL_ENTRIES {
            *pt.entry_mut(slot, 300 + i) = 5;
        }
        assert_eq!(pt.entry_bytes() - none, std::mem::size_of::<SmallTable>() as u64);
        *pt.entry_mut(slot, 7) = 5;
        assert_eq!(pt.entry_bytes() - none, (PT_ENTRIES * 8 + std::mem::size_of::<SmallTable>()) as u64);
        assert_eq!((pt.entry(slot, 7), pt.entry(slot, 300), pt.entry(slot, 299)), (5, 5, 0));
    }

    /// A freed table reads as zeros until its slot holds a new table, even after another
    /// table took its storage (as the freed page stays zero until it is reused).
    #[test]
    fn a_freed_table_reads_zeros_after_its_storage_is_reused() {
        let mut mem = PhysMem::new(1, 64);
        let mut pt = PageTables::new();
        let freed = pt.alloc_table(&mut mem, NodeId(0), 1).unwrap();
        let kept = pt.alloc_table(&mut mem, NodeId(0), 1).unwrap();
        // `freed` becomes dense, is emptied and freed: its dense array goes back.
        for i in 0..=SMALL_ENTRIES {
            *pt.entry_mut(freed, i) = 7;
        }
        for i in 0..=SMALL_ENTRIES {
            *pt.entry_mut(freed, i) = 0;
        }
        pt.free_table(&mut mem, freed);
        // `kept` grows past a small table and takes that dense array; `freed`'s slot stays
        // free.
        for i in 0..=SMALL_ENTRIES {
            *pt.entry_mut(kept, i) = 1 + i as u64;
        }
        for i in 0..PT_ENTRIES {
            assert_eq!(pt.entry(freed, i), 0);
        }
        assert!(pt.is_empty_table(freed));
        let again = pt.alloc_table(&mut mem, NodeId(0), 1).unwrap();
        assert_eq!(again, freed, "the slot is reused");
        *pt.entry_mut(again, 3) = 9;
        assert_eq!((pt.entry(again, 3), pt.entry(kept, 3)), (9, 4));
    }

    #[test]
    fn map_and_lookup_all_sizes() {
        let mut mem = PhysMem::new(2, 64);
        let mut pt = PageTables::new();
        let root = pt.alloc_table(&mut mem, NodeId(0), 1).unwrap();
        let mut place = || NodeId(1);
        let va4k = 0x7f12_3456_7000u64;
        pt.map(&mut mem, root, 4, va4k, Pfn(42), PageSize::Size4K, PTE_WRITABLE, 1, &mut place).unwrap();
        let va2m = 0x4000_0000u64 + (5 << 21);
        pt.map(&mut mem, root, 4, va2m, Pfn(1024), PageSize::Size2M, 0, 1, &mut place).unwrap();
        let l = pt.lookup(root, 4, va4k + 123).unwrap();
        assert_eq!((l.level, pte_pfn(l.pte)), (1, Pfn(42)));
        assert!(l.pte & PTE_WRITABLE != 0);
        let l = pt.lookup(root, 4, va2m + 0x1234).unwrap();
        assert_eq!((l.level, pte_pfn(l.pte)), (2, Pfn(1024)));
        assert!(pt.lookup(root, 4, 0x1000).is_none());
        // 4K mapping: root + PDPT + PD + PT = 4 pages; 2M: a new PDPT entry → PD (+1 PDPT? same
        // PML4 index 0 vs 0xfe: different) → at least 6 pages, all but the root on node 1.
        assert!(pt.table_pages() >= 6);
        for s in 1..pt.table_pages() as u32 {
            assert_eq!(crate::memory::node_of(pt.pfn_of(s)), NodeId(1));
        }
    }

    #[test]
    fn five_levels() {
        let mut mem = PhysMem::new(1, 64);
        let mut pt = PageTables::new();
        let root = pt.alloc_table(&mut mem, NodeId(0), 1).unwrap();
        let va = 0x00ab_cdef_1234_5000u64 & ((1 << 57) - 1) & !0xfff;
        pt.map(&mut mem, root, 5, va, Pfn(7), PageSize::Size4K, 0, 1, &mut || NodeId(0)).unwrap();
        assert_eq!(pt.table_pages(), 5);
        assert_eq!(pte_pfn(pt.lookup(root, 5, va).unwrap().pte), Pfn(7));
    }
}
