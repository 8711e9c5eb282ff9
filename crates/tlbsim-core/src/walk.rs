//! The hardware page walker (docs/ARCHITECTURE.md "Page tables"; Mitosis §3 for where its time goes).
//!
//! A walk first asks the page-walk caches for the deepest upper-level entry they hold
//! (PD entry, else PDPT entry, else PML4 entry), then reads each remaining level from the
//! socket's cache of page-table lines or, on a miss there, from the DRAM of the node the
//! table page lives on, at that node's latency from the walking socket. It sets the
//! accessed bit of every entry it uses and, on a write, the dirty bit of the leaf, in
//! memory, and reports every leaf A-bit 0→1 transition (ABIS consumes them).
//!
//! Simplified: the walk's reads are serial (each level needs the previous one's pointer,
//! so this is what hardware does too); A/D updates cost nothing beyond the read (they are
//! locked read-modify-writes of a line the walk just brought in); the page-walk caches are
//! looked up in parallel and charged once.

use crate::memory::node_of;
use crate::page_table::{level_index, pte_pfn, PageTables, PTE_ACCESSED, PTE_DIRTY, PTE_HUGE, PTE_PRESENT, PTE_PROTNONE, PTE_WRITABLE};
use crate::stats::CoreStats;
use crate::tlb::hierarchy::{TlbHierarchy, PWC_PD, PWC_PDPT, PWC_PML4};
use crate::tlb::TlbEntry;
use crate::types::{CoreId, PageSize, Pfn, Vpn};

/// Observer of A/D-bit transitions the walker makes.
pub trait WalkListener {
    /// The walker set the accessed bit of the leaf entry mapping `va` (0 → 1).
    fn accessed_set(&mut self, core: CoreId, root: u32, va: u64);
}

pub struct NoWalkListener;
impl WalkListener for NoWalkListener {
    #[inline]
    fn accessed_set(&mut self, _: CoreId, _: u32, _: u64) {}
}

/// What a walk found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkOutcome {
    /// A present leaf that allows the access: (leaf entry after A/D update, page size).
    Mapped { pte: u64, size: PageSize },
    /// Not present, or a write to a read-only page: the OS must handle a fault.
    Fault { present: bool },
}

/// The socket-level memory system a walk reads through.
pub struct WalkMemory<'a> {
    /// The socket's page-table-line cache (`None`: off).
    pub pt_cache: Option<&'a mut crate::tlb::LineCache>,
    pub pt_cache_latency: u32,
    /// Latency to each node from the walking socket.
    pub node_latency: &'a [u32],
    pub socket: u32,
    /// The memory system of model "cache" (DRAM bandwidth for reads that miss), the
    /// walking core and its clock.
    pub mem: Option<&'a mut crate::memsys::MemSys>,
    pub core: usize,
    pub now: u64,
}

/// Page-walk-cache index and key shift for the entry at `level` (the entry pointing to a
/// table of level `level - 1`): PML4E → PDPT, PDPTE → PD, PDE → PT.
#[inline]
fn pwc_for_level(level: u32) -> Option<(usize, u32)> {
    match level {
        4 => Some((PWC_PML4, 39)),
        3 => Some((PWC_PDPT, 30)),
        2 => Some((PWC_PD, 21)),
        _ => None,
    }
}

/// Walk the tree at `root` (depth `levels`) for `va`. Charges `stats` (walks, walk cycles,
/// page-table reads by locality, PWC and line-cache hits, A/D transitions) and returns the
/// outcome and the cycles the walk took.
#[allow(clippy::too_many_arguments)]
pub fn walk<W: WalkListener>(
    pt: &mut PageTables,
    tlbs: &mut TlbHierarchy,
    memsys: &mut WalkMemory<'_>,
    root: u32,
    levels: u32,
    va: u64,
    write: bool,
    stats: &mut CoreStats,
    listener: &mut W,
) -> (WalkOutcome, u64) {
    stats.walks += 1;
    let tag = tlbs.tag();
    let mut cycles: u64 = 0;
    // Deepest page-walk-cache hit decides where the walk starts.
    let mut level = levels;
    // Arena slot of the table being read (PWC entries hold slots: see below).
    let mut slot = root;
    let mut pwc_probed = false;
    for (i, shift, start_level) in [(PWC_PD, 21, 1), (PWC_PDPT, 30, 2), (PWC_PML4, 39, 3)] {
        if tlbs.present(i) {
            pwc_probed = true;
            cycles = cycles.max(tlbs.latency(i) as u64);
            if let Some(e) = tlbs.pwc(i).lookup(Vpn(va >> shift), tag) {
                if e.flags & crate::tlb::set_assoc::FLAG_STALE != 0 {
                    // It points to a freed page-table page: the checker counts the use and
                    // the walk goes on from memory (a real walker would read freed memory).
                    stats.stale_pwc_uses += 1;
                    tlbs.counters[i].misses += 1;
                    continue;
                }
                tlbs.counters[i].hits += 1;
                level = start_level;
                slot = e.pfn.0 as u32;
                stats.pwc_hits += 1;
                break;
            }
            tlbs.counters[i].misses += 1;
        }
    }
    let _ = pwc_probed;
    loop {
        let index = level_index(va, level);
        cycles += read_cost(memsys, pt.pfn_of(slot), index, stats);
        // Read first: a write (A/D bits) only where the entry changes.
        let pte = pt.entry(slot, index);
        // A PROT_NONE (NUMA-hinting) leaf faults as not present.
        if pte & (PTE_PRESENT | PTE_PROTNONE) != PTE_PRESENT {
            stats.walk_cycles += cycles;
            return (WalkOutcome::Fault { present: false }, cycles);
        }
        let leaf = level == 1 || (pte & PTE_HUGE != 0 && level <= 3);
        if !leaf {
            // Hardware sets A on every paging-structure entry it uses.
            if pte & PTE_ACCESSED == 0 {
                *pt.entry_mut(slot, index) = pte | PTE_ACCESSED;
            }
            let child = pt.child_slot(slot, index);
            debug_assert_eq!(pt.pfn_of(child), pte_pfn(pte));
            if let Some((i, shift)) = pwc_for_level(level) {
                if tlbs.present(i) {
                    // A paging-structure-cache entry names the next table; we store the
                    // simulator's handle for it (its arena slot) in the pfn field.
                    let e = TlbEntry { vpn: Vpn(va >> shift), pfn: Pfn(child as u64), size: PageSize::Size4K, tag, sl: 0, flags: 0 };
                    tlbs.insert_pwc(i, e);
                }
            }
            slot = child;
            level -= 1;
            continue;
        }
        if write && pte & PTE_WRITABLE == 0 {
            if tlbs.quirk_faulting_walk_sets_accessed && pte & PTE_ACCESSED == 0 {
                // ABIS §7: the walk before the #PF sets A although the access is refused.
                *pt.entry_mut(slot, index) = pte | PTE_ACCESSED;
                stats.accessed_bits_set += 1;
                listener.accessed_set(tlbs.core, root, va);
            }
            stats.walk_cycles += cycles;
            return (WalkOutcome::Fault { present: true }, cycles);
        }
        // A dirty-bit walk (the entry is cached) sets A too only with the §7 quirk.
        let set_accessed = !tlbs.dirty_walk || tlbs.quirk_dirty_sets_accessed;
        let mut new = if set_accessed { pte | PTE_ACCESSED } else { pte };
        if write {
            new |= PTE_DIRTY;
        }
        if new & PTE_ACCESSED != 0 && pte & PTE_ACCESSED == 0 {
            stats.accessed_bits_set += 1;
            listener.accessed_set(tlbs.core, root, va);
        }
        if new & PTE_DIRTY != 0 && pte & PTE_DIRTY == 0 {
            stats.dirty_bits_set += 1;
        }
        if new != pte {
            *pt.entry_mut(slot, index) = new;
        }
        stats.walk_cycles += cycles;
        let size = PageTables::size_at(level);
        return (WalkOutcome::Mapped { pte: new, size }, cycles);
    }
}

/// Cycles to read the entry `index` of table page `table`, and the stats it touches.
#[inline(always)]
fn read_cost(memsys: &mut WalkMemory<'_>, table: Pfn, index: usize, stats: &mut CoreStats) -> u64 {
    let line = (table.0 << 6) | (index as u64 >> 3);
    if let Some(cache) = memsys.pt_cache.as_deref_mut() {
        if cache.access(crate::memsys::llc_key(line)) {
            stats.pt_cache_hits += 1;
            return memsys.pt_cache_latency as u64;
        }
    }
    let node = node_of(table);
    if node.0 == memsys.socket {
        stats.pt_accesses_local += 1;
    } else {
        stats.pt_accesses_remote += 1;
    }
    let wait = match memsys.mem.as_deref_mut() {
        Some(m) => m.table_read(memsys.core, memsys.socket, node.0, memsys.now),
        None => 0,
    };
    memsys.node_latency[node.0 as usize] as u64 + wait
}
