//! `abis`, `abis-gap1`: ABIS (Amit, ATC'17, §3–§4; MECHANISMS.md "ABIS"): access-bit based
//! detection of PTEs no other core can cache, and TLB version tracking per address space.
//!
//! Modelled:
//! - software PTEs (§4.3): per PTE a version (with an UNCACHED value), a software A bit and
//!   the caching core (0 = all CPUs); their memory is reported as `spt_bytes` (2 bytes per
//!   PTE of every page-table page that holds one, the paper's +25%);
//! - direct TLB insertion on demand faults (§4.1): the faulting core's TLB is filled without
//!   a walk, so the PTE's hardware A bit stays clear, and the PTE becomes private to that
//!   core; `[coherence.abis] insertion_cycles` (550 per PTE, §4.1) spread over the PTEs one
//!   fault maps (fault-around), or free with `hardware_insertion = true` (§7);
//! - Linux's view of the A bit is swA OR hwA (E3); reclaim's A-clear marks a PTE that was
//!   accessed "all CPUs" and stamps the address space's version (E2); the OS clears hwA
//!   opportunistically whenever it rewrites a present PTE in place (mprotect, msync,
//!   fork's write-protect: E4), keeping what Linux saw in swA; a PTE rewritten to another
//!   frame with the young bit (migration, which keeps it since Linux 5.19) gets hwA clear
//!   and swA set, since no TLB holds the new translation;
//! - per address space a version and the set of cores that have not done a full flush in it;
//!   when that set empties the version advances and the set is refilled (E5). Every full
//!   flush of every core counts (the engine reports them all);
//! - the flush decision per page (Fig. 3, E6): A clear and UNCACHED → no flush; A clear and
//!   the address space two versions ahead of the PTE's → no flush; A clear and private →
//!   only the caching core (local if the initiator); else every core that may hold the
//!   address space's entries; afterwards the PTE is UNCACHED. A batch longer than the
//!   flush ceiling is decided page by page too; a core given more pages than the ceiling
//!   flushes whole;
//! - a lazy core services up to `idle_page_flushes` page flushes (§4.1: "a few"; 4
//!   assumed), then falls back to Linux's full flush and leaves the borrowed address space;
//! - §7's hardware quirks are the machine's (`machine.tlb.quirk_dirty_sets_accessed`,
//!   `quirk_faulting_walk_sets_accessed`, `involuntary_full_flush_per_mcycles`, in the
//!   walker and the engine): every A bit they set, and every full flush, reaches ABIS as
//!   any other does.
//!
//! `abis-gap1` skips at a version gap of one: deliberately unsafe (§4.2), `tlbsim fuzz`
//! catches it. `abis-naive-insert` approximates direct insertion as §3.1 rejects it: the
//! page is touched (a walk caches it and sets A) and A is cleared only at the core's next
//! tick, one insertion's time later; a core that caches the PTE in between has its A bit
//! wiped, the PTE still counts as private, and its munmap misses that core (`tlbsim fuzz`
//! catches it).
//!
//! Simplified: versions are 64-bit (no 7-bit wrap-around); "cores currently using the
//! address space" (E5) is widened to every core that may hold its entries under any tag
//! (PCID, CR3 tags), which the paper's untagged Linux 4.5 did not need; for pages ABIS
//! cannot prove private it reaches every core that may hold the address space's entries,
//! lazy ones included, so that no core falls a generation behind by ABIS' choice.

use super::{linux_targets, Coherence, CoreView, Cr3Load, Delivery, Effects, FlushPlan, FlushRequest, FullFlushCause, LocalFlush, OsView, Policy};
use crate::config::Config;
use crate::error::Result;
use crate::fasthash::{FastMap as HashMap, FastSet as HashSet};
use crate::page_table::{PTE_ACCESSED, PTE_PFN_MASK, PTE_PRESENT};
use crate::types::{CoreId, Vpn};
use serde::Serialize;

crate::params! {
    /// `[coherence.abis]`.
    pub struct AbisParams {
        /// Cycles of one direct TLB insertion (ABIS §4.1: "≈ 550 cycles per PTE").
        pub insertion_cycles: u64 = 550,
        /// Insertion in hardware, at no cost (§7's proposal).
        pub hardware_insertion: bool = false,
        /// Page flushes a lazy (idle) core services before it falls back to a full flush and
        /// leaves the address space (§4.1: "a few individual PTE flushes"; the number is not
        /// stated: 4 assumed).
        pub idle_page_flushes: u32 = 4,
    }
}

const UNCACHED: u64 = u64::MAX;
/// A PTE ABIS knows nothing about: Linux's rule (a zeroed SPT behaves like legacy Linux).
const UNKNOWN: u64 = u64::MAX - 1;
const ALL_CPUS: u32 = 0;

#[derive(Clone, Copy, Debug)]
struct Spte {
    version: u64,
    sw_a: bool,
    /// Caching core + 1, or ALL_CPUS.
    caching: u32,
}

#[derive(Default)]
struct Space {
    version: u64,
    /// Cores that have not done a full flush in this version.
    pending: HashSet<u32>,
}

#[derive(Default, Debug, Clone, Copy, Serialize)]
struct Counters {
    avoided_uncached: u64,
    avoided_version: u64,
    private_local: u64,
    private_remote: u64,
    shared: u64,
    direct_insertions: u64,
    insertion_cycles: u64,
}

/// `GAP`: the version gap at which a flush is skipped (2 is ABIS; 1 is the unsafe variant).
/// `NAIVE`: §3.1's rejected approximation of direct insertion (touch the page, clear A
/// afterwards), unsafe on purpose.
pub struct Abis<const GAP: u64, const NAIVE: bool> {
    p: AbisParams,
    sptes: HashMap<(u32, u64), Spte>,
    spaces: HashMap<u32, Space>,
    /// Per core: the address spaces whose entries it may hold (any tag).
    may_hold: Vec<HashSet<u32>>,
    /// Per core: the address space its CR3 last loaded (it may cache again right after a
    /// flush).
    current: Vec<Option<u32>>,
    /// Per core: page flushes serviced while lazy since it last loaded an address space.
    idle_flushes: Vec<u32>,
    /// Per core: PTEs a naive insertion touched and has yet to clear A of (its next tick).
    naive_pending: Vec<Vec<(u32, u64)>>,
    /// Per core: direct insertions.
    insertions_per_core: Vec<u64>,
    c: Counters,
}

impl<const GAP: u64, const NAIVE: bool> crate::registry::Plugin for Abis<GAP, NAIVE> {
    type Params = AbisParams;
}

impl<const GAP: u64, const NAIVE: bool> Policy for Abis<GAP, NAIVE> {
    fn build(cfg: &Config, p: AbisParams) -> Result<Self> {
        let n = cfg.cores() as usize;
        Ok(Abis {
            p,
            sptes: HashMap::default(),
            spaces: HashMap::default(),
            may_hold: vec![HashSet::default(); n],
            current: vec![None; n],
            idle_flushes: vec![0; n],
            naive_pending: vec![Vec::new(); n],
            insertions_per_core: vec![0; n],
            c: Counters::default(),
        })
    }
}

impl<const GAP: u64, const NAIVE: bool> Abis<GAP, NAIVE> {
    fn version(&self, mm: u32) -> u64 {
        self.spaces.get(&mm).map_or(0, |s| s.version)
    }

    /// E5: core `core` flushed address space `mm` entirely.
    fn flushed(&mut self, core: u32, mm: u32) {
        let holders: HashSet<u32> = (0..self.may_hold.len() as u32).filter(|&c| self.may_hold[c as usize].contains(&mm)).collect();
        let s = self.spaces.entry(mm).or_default();
        s.pending.remove(&core);
        if s.pending.is_empty() {
            s.version += 1;
            s.pending = holders;
        }
    }
}

impl<const GAP: u64, const NAIVE: bool> Coherence for Abis<GAP, NAIVE> {
    fn tick_interval(&self) -> Option<u64> {
        // The naive insertion clears A "shortly after" touching the page: at the core's
        // next tick, one insertion's time later.
        NAIVE.then_some(self.p.insertion_cycles.max(1))
    }

    fn on_tick(&mut self, core: CoreId, _now: u64, fx: &mut Effects) {
        for (mm, va) in std::mem::take(&mut self.naive_pending[core.0 as usize]) {
            fx.push(super::Effect::ClearAccessed { core, mm, va });
        }
    }

    fn plan(&mut self, view: &OsView<'_>, req: &FlushRequest, plan: &mut FlushPlan) {
        plan.delivery = Some(Delivery::Ipi);
        if req.global {
            // Every address space (e.g. a frame leaving its recycling context): every core.
            // The software PTEs stay as they are: the flush lands on each core only when its
            // IPI is handled, and a core may insert a live PTE directly before that; forgetting
            // its state would let a later clear-then-set (copy-on-write) read it as a fresh,
            // uncached mapping and skip the flush. A kept state is only conservative.
            linux_targets(view, req, plan);
            return;
        }
        let holders: Vec<u32> = (0..view.cores.len() as u32)
            .filter(|&c| c != req.initiator.0 && (self.may_hold[c as usize].contains(&req.mm) || (view.cpumask[c as usize] && req.freed_tables)))
            .collect();
        if req.global || req.full || req.freed_tables {
            // Whole-address-space and table-freeing requests: every possible holder. (A
            // long list of pages is still decided page by page, as ABIS checks each PTE of
            // a batch: a core that must flush more than the ceiling does it whole.)
            for c in holders {
                plan.push(CoreId(c));
            }
            for p in &req.pages {
                self.sptes.remove(&(req.mm, p.0));
            }
            return;
        }
        let as_version = self.version(req.mm);
        let mut pages_of: HashMap<u32, Vec<Vpn>> = HashMap::default();
        for (i, &p) in req.pages.iter().enumerate() {
            let old = req.old_ptes.get(i).copied().unwrap_or(PTE_ACCESSED);
            // A/D as read with the change; 0 (unknown) counts as accessed.
            let hw_a = old == 0 || old & PTE_ACCESSED != 0;
            let s = self.sptes.get(&(req.mm, p.0)).copied().unwrap_or(Spte { version: UNKNOWN, sw_a: true, caching: ALL_CPUS });
            if !hw_a && s.version == UNCACHED {
                self.c.avoided_uncached += 1;
            } else if !hw_a && s.version < UNKNOWN && as_version >= s.version + GAP {
                self.c.avoided_version += 1;
            } else if !hw_a && s.caching != ALL_CPUS {
                let core = s.caching - 1;
                if core == req.initiator.0 {
                    self.c.private_local += 1;
                } else {
                    self.c.private_remote += 1;
                }
                pages_of.entry(core).or_default().push(p);
            } else {
                self.c.shared += 1;
                pages_of.entry(req.initiator.0).or_default().push(p);
                for &c in &holders {
                    pages_of.entry(c).or_default().push(p);
                }
            }
            // Flushed (or proven uncached): UNCACHED from now on, until a walk sets A or a
            // fault inserts it.
            self.sptes.insert((req.mm, p.0), Spte { version: UNCACHED, sw_a: s.sw_a, caching: ALL_CPUS });
        }
        let mut cores: Vec<u32> = pages_of.keys().copied().collect();
        cores.sort_unstable();
        for c in cores {
            let pages = pages_of.remove(&c).unwrap_or_default();
            plan.push_pages(CoreId(c), pages);
        }
    }

    fn on_deliver(&mut self, core: CoreId, me: &CoreView, req: &FlushRequest, flush_ceiling: u32) -> LocalFlush {
        if req.global || req.full || req.pages.len() as u64 > flush_ceiling as u64 {
            return LocalFlush::Full;
        }
        // A lazy core services a few page flushes (E7), then falls back to Linux's full
        // flush and leaves the address space (§4.1).
        if me.lazy && me.loaded_mm == Some(req.mm) {
            let n = &mut self.idle_flushes[core.0 as usize];
            if *n >= self.p.idle_page_flushes {
                return LocalFlush::DropLazyMm;
            }
            *n += 1;
        }
        // Wherever else the core is (running the address space, or running another one
        // with the entries kept under their tag), the pages go.
        LocalFlush::Pages
    }

    fn on_switch(&mut self, _core: CoreId, slot_gen: Option<u64>, mm_gen: u64) -> bool {
        slot_gen != Some(mm_gen)
    }

    fn on_demand_fault(&mut self, core: CoreId, mm: u32, va: u64, pte: u64, mapped_together: u32, fx: &mut Effects) -> Option<u64> {
        let version = self.version(mm);
        // Private to this core only if no other TLB can hold the PTE: it was uncached (a
        // fresh mapping, or flushed since) or already private to this core, and no walk has
        // set its A bit. A write fault on a present PTE (made writable in place) may find it
        // cached elsewhere: then it stays shared (the fill still leaves A clear).
        let prev = self.sptes.get(&(mm, va >> 12)).copied();
        let private = pte & PTE_ACCESSED == 0 && prev.is_some_and(|s| s.version == UNCACHED || s.caching == core.0 + 1);
        let caching = if private { core.0 + 1 } else { ALL_CPUS };
        self.sptes.insert((mm, va >> 12), Spte { version, sw_a: true, caching });
        self.c.direct_insertions += 1;
        self.insertions_per_core[core.0 as usize] += 1;
        if NAIVE {
            // §3.1's race: the page is touched (a walk caches it and sets A), and A is
            // cleared only later; another core that caches it meanwhile has its A wiped
            // too, and the PTE still counts as private to this core.
            self.naive_pending[core.0 as usize].push((mm, va));
            let cycles = self.p.insertion_cycles / mapped_together.max(1) as u64;
            self.c.insertion_cycles += cycles;
            fx.push(super::Effect::Charge { core, cycles });
            // No direct insertion: the retried access walks (the touch).
            return None;
        }
        let cost = if self.p.hardware_insertion { 0 } else { self.p.insertion_cycles / mapped_together.max(1) as u64 };
        self.c.insertion_cycles += cost;
        Some(cost)
    }

    fn pte_accessed(&self, mm: u32, va: u64, pte: u64) -> bool {
        pte & PTE_ACCESSED != 0 || self.sptes.get(&(mm, va >> 12)).is_some_and(|s| s.sw_a)
    }

    fn on_accessed_cleared(&mut self, _core: CoreId, mm: u32, va: u64, old: u64, _fx: &mut Effects) {
        let version = self.version(mm);
        let s = self.sptes.entry((mm, va >> 12)).or_insert(Spte { version, sw_a: false, caching: ALL_CPUS });
        if old & PTE_ACCESSED != 0 {
            s.caching = ALL_CPUS;
        }
        s.sw_a = false;
        s.version = version;
    }

    fn on_pte_write(&mut self, _core: CoreId, mm: u32, va: u64, old: u64, new: &mut u64, _fx: &mut Effects) {
        let same_frame = old & PTE_PRESENT != 0 && *new & PTE_PRESENT != 0 && old & PTE_PFN_MASK == *new & PTE_PFN_MASK;
        if old & PTE_PRESENT == 0 && *new & PTE_PRESENT != 0 {
            // A fresh mapping: no TLB holds it until a walk sets A or a fault inserts it. A
            // state already there belongs to the change whose flush is about to be planned
            // (copy-on-write maps the new frame before its flush): the plan reads it, then
            // leaves the PTE UNCACHED.
            self.sptes.entry((mm, va >> 12)).or_insert(Spte { version: UNCACHED, sw_a: false, caching: ALL_CPUS });
        } else if old & PTE_PRESENT != 0 && *new & PTE_PRESENT != 0 && !same_frame && *new & PTE_ACCESSED != 0 {
            // The PTE now maps another frame (migration keeps the young bit, Linux 5.19+):
            // no TLB holds the new translation, so hwA is cleared and Linux's young bit is
            // kept in swA. The state of the old translation stays for the flush to read.
            *new &= !PTE_ACCESSED;
            self.sptes.entry((mm, va >> 12)).or_insert(Spte { version: UNKNOWN, sw_a: true, caching: ALL_CPUS }).sw_a = true;
        } else if same_frame && old & PTE_ACCESSED != 0 && *new & PTE_ACCESSED != 0 {
            // E4: the OS rewrites this PTE anyway: clear hwA, keep what Linux saw in swA.
            *new &= !PTE_ACCESSED;
            let version = self.version(mm);
            self.sptes.insert((mm, va >> 12), Spte { version, sw_a: true, caching: ALL_CPUS });
        }
    }

    fn on_full_flush(&mut self, core: CoreId, mm: Option<u32>, _cause: FullFlushCause, _fx: &mut Effects) {
        let c = core.0;
        let mms: Vec<u32> = match mm {
            Some(m) => vec![m],
            None => self.may_hold[c as usize].iter().copied().collect(),
        };
        for m in mms {
            if self.current[c as usize] != Some(m) {
                self.may_hold[c as usize].remove(&m);
            }
            self.flushed(c, m);
        }
    }

    fn on_cr3_load(&mut self, core: CoreId, load: &Cr3Load, _fx: &mut Effects) {
        self.idle_flushes[core.0 as usize] = 0;
        self.may_hold[core.0 as usize].insert(load.to);
        self.current[core.0 as usize] = Some(load.to);
    }

    fn stats_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self.c).unwrap_or_default();
        // 2 bytes of software PTE per PTE of each page-table page holding a tracked PTE.
        let tables: HashSet<(u32, u64)> = self.sptes.keys().map(|&(mm, vpn)| (mm, vpn >> 9)).collect();
        v["spt_bytes"] = serde_json::json!(tables.len() as u64 * 512 * 2);
        // The software PTEs' states at the end of the run (Fig. 2).
        let (mut uncached, mut private, mut shared, mut unknown) = (0u64, 0u64, 0u64, 0u64);
        for s in self.sptes.values() {
            match (s.version, s.caching) {
                (UNCACHED, _) => uncached += 1,
                (UNKNOWN, _) => unknown += 1,
                (_, ALL_CPUS) => shared += 1,
                _ => private += 1,
            }
        }
        v["ptes_by_state"] = serde_json::json!({"uncached": uncached, "private": private, "shared": shared, "unknown": unknown});
        v
    }

    fn core_stats_json(&self, core: CoreId) -> Option<serde_json::Value> {
        Some(
            serde_json::json!({"direct_insertions": self.insertions_per_core[core.0 as usize], "idle_page_flushes_pending": self.idle_flushes[core.0 as usize]}),
        )
    }
}
