//! `didi`, `didi-directory-only`, `didi-ptlbi-only`: DiDi (Villavieja et al., PACT'11,
//! §VI; MECHANISMS.md "DiDi"): a shared TLB directory, inclusive of every core's TLBs, that
//! knows exactly which cores hold a translation, and PTLBI, a hardware path that invalidates
//! a remote TLB entry without interrupting the core.
//!
//! Modelled:
//! - the directory (`[coherence.didi]`: `directory_entries`, `_ways`, `_latency`; Table I: 4096, 2-way, 6
//!   cycles), set associative with LRU, keyed by address space (the ASID) and page (with its
//!   size, so a large page is one entry, §VI), each entry with a sharer count per core
//!   (its bitmap is "count > 0"): it hears every TLB insert and eviction of every core
//!   through the policy hooks (one directory message each, `directory_messages`);
//! - inclusion: a directory eviction back-invalidates the entry on every sharer (hardware,
//!   no interrupt: `back_invalidations`), and a later refill of such an entry by that core
//!   counts as a `back_invalidation_misses`;
//! - a shootdown: the directory is looked up for each changed page (every page size that
//!   could cover it: `directory_lookups`), the request goes to exactly the sharers, each
//!   for its own pages, by PTLBI (`Delivery::Message`: latency one off-chip memory round
//!   trip, §VI's upper bound; a per-target cost of a few hundred cycles for the load/store
//!   queue drain, §VI "will not take more than a few hundred cycles"; the initiator pays the
//!   directory access and waits for the directory's final ack). A request of more pages
//!   than the flush ceiling, or a full one, goes to every core holding any entry of the
//!   address space, which flushes it entirely. Requests that free page tables, and global
//!   ones, go to Linux's targets (the directory tracks TLB entries, not the page-walk
//!   caches), still by PTLBI.
//!
//! The kernel side (what DiDi changes and keeps): DiDi replaces the IPI send and the
//! handler with the directory path; it keeps Linux's `mm_cpumask`, lazy-TLB mode, batching
//! (mmu_gather) and the per-CPU `tlb_gen` tracking, so a core switching back to an address
//! space flushes its tag if it missed a generation (`on_switch` as Linux).
//!
//! Variants, to tell the two halves of the gain apart: `didi-directory-only` (the exact
//! sharers, reached by IPI), `didi-ptlbi-only` (Linux's targets, reached by PTLBI).
//!
//! Simplified: the directory is not also an L2 TLB (§VI mentions the option); messages to
//! the directory cost nothing on the core that inserts or evicts (they are off the critical
//! path, §VI: TLB updates happen at "a ratio of 1% or less"); contention on the directory
//! is not modelled.

use super::{linux_on_deliver, linux_targets, Coherence, CoreView, Cr3Load, Delivery, Effect, Effects, FlushPlan, FlushRequest, LocalFlush, OsView, Policy};
use crate::config::{Config, CostsConfig};
use crate::error::{Error, Result};
use crate::fasthash::{FastMap as HashMap, FastSet as HashSet};
use crate::tlb::hierarchy::{L1D_4K, L2};
use crate::tlb::TlbEntry;
use crate::types::{CoreId, PageSize, Vpn};
use serde::Serialize;

crate::params! {
    /// `[coherence.didi]` (shared by the variants).
    pub struct DidiParams {
        /// PTLBI latency in cycles; 0 = one off-chip memory round trip, the machine's
        /// `memory.local_latency` (DiDi §VI: "upper bound latency equal to a round-trip access to
        /// off-chip memory").
        pub ptlbi_latency: u64 = 0,
        /// What a PTLBI costs the target core (draining its load/store queue before the
        /// invalidation); DiDi §VI: "will not take more than a few hundred cycles" — 200.
        pub ptlbi_target_cycles: u64 = 200,
        /// Directory entries (Table I: 4096); entries / ways sets must be a power of two.
        pub directory_entries: u32 = 4096,
        /// Directory associativity (Table I: 2-way).
        pub directory_ways: u32 = 2,
        /// Cycles per directory access (Table I: 6).
        pub directory_latency: u32 = 6,
    }
}

const INVALID: u64 = u64::MAX;

/// The shared directory: set associative, LRU, a sharer count per core per entry.
pub struct Directory {
    sets: usize,
    ways: usize,
    cores: usize,
    keys: Vec<u64>,
    stamps: Vec<u64>,
    counts: Vec<u8>,
    clock: u64,
}

/// Directory key of a translation: address space, page size, page-aligned VPN.
pub fn key(mm: u32, vpn: Vpn, size: PageSize) -> u64 {
    ((mm as u64) << 40) | ((size as u64) << 38) | (vpn.align(size).0 & ((1 << 38) - 1))
}

fn key_mm(k: u64) -> u32 {
    (k >> 40) as u32
}

fn key_vpn(k: u64) -> Vpn {
    Vpn(k & ((1 << 38) - 1))
}

impl Directory {
    pub fn new(entries: u32, ways: u32, cores: usize) -> Directory {
        let ways = ways.max(1) as usize;
        let sets = (entries as usize / ways).max(1);
        Directory { sets, ways, cores, keys: vec![INVALID; sets * ways], stamps: vec![0; sets * ways], counts: vec![0; sets * ways * cores], clock: 0 }
    }

    fn set_of(&self, k: u64) -> usize {
        // A multiplicative hash spreads the (mm, page) keys over the sets.
        ((k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize) & (self.sets - 1)
    }

    /// The slot of `k`, if present.
    pub fn find(&self, k: u64) -> Option<usize> {
        let base = self.set_of(k) * self.ways;
        (base..base + self.ways).find(|&i| self.keys[i] == k)
    }

    /// The cores holding entry `slot`.
    pub fn sharers(&self, slot: usize) -> impl Iterator<Item = usize> + '_ {
        let c = &self.counts[slot * self.cores..(slot + 1) * self.cores];
        c.iter().enumerate().filter(|(_, &n)| n > 0).map(|(i, _)| i)
    }

    /// Core `core` inserted a translation keyed `k`. Returns the victim evicted to make room
    /// (its key and sharers), if any.
    pub fn insert(&mut self, k: u64, core: usize) -> Option<(u64, Vec<usize>)> {
        self.clock += 1;
        let slot = match self.find(k) {
            Some(s) => {
                self.stamps[s] = self.clock;
                s
            }
            None => {
                let base = self.set_of(k) * self.ways;
                let s = (base..base + self.ways).min_by_key(|&i| if self.keys[i] == INVALID { 0 } else { self.stamps[i] + 1 }).expect("ways >= 1");
                let victim = (self.keys[s] != INVALID).then(|| {
                    let sharers: Vec<usize> = self.sharers(s).collect();
                    (self.keys[s], sharers)
                });
                self.keys[s] = k;
                self.stamps[s] = self.clock;
                self.counts[s * self.cores..(s + 1) * self.cores].fill(0);
                let c = &mut self.counts[s * self.cores + core];
                *c = c.saturating_add(1);
                return victim;
            }
        };
        let c = &mut self.counts[slot * self.cores + core];
        *c = c.saturating_add(1);
        None
    }

    /// Core `core` evicted a translation keyed `k` from one of its structures.
    pub fn evict(&mut self, k: u64, core: usize) {
        if let Some(s) = self.find(k) {
            let c = &mut self.counts[s * self.cores + core];
            *c = c.saturating_sub(1);
            if self.sharers(s).next().is_none() {
                self.keys[s] = INVALID;
            }
        }
    }

    /// Every entry of address space `mm`: (key, sharers).
    pub fn entries_of(&self, mm: u32) -> Vec<usize> {
        (0..self.keys.len()).filter(|&i| self.keys[i] != INVALID && key_mm(self.keys[i]) == mm).collect()
    }
}

#[derive(Default, Debug, Clone, Copy, Serialize)]
struct Counters {
    directory_lookups: u64,
    directory_messages: u64,
    back_invalidations: u64,
    back_invalidation_misses: u64,
    ptlbi_invalidations: u64,
}

/// `MODE`: 0 = `didi`, 1 = `didi-directory-only`, 2 = `didi-ptlbi-only`.
pub struct Didi<const MODE: u8> {
    dir: Directory,
    /// Per core: which address space each TLB tag holds (from the CR3 loads).
    tag_mm: Vec<HashMap<u16, u32>>,
    back_invalidated: HashSet<(usize, u64)>,
    latency: u64,
    target_cycles: u64,
    directory_latency: u64,
    c: Counters,
}

impl<const MODE: u8> crate::registry::Plugin for Didi<MODE> {
    type Params = DidiParams;
}

impl<const MODE: u8> Policy for Didi<MODE> {
    fn build(cfg: &Config, p: DidiParams) -> Result<Self> {
        if p.directory_entries == 0 || p.directory_entries > 1 << 24 {
            return Err(Error::config("coherence.didi.directory_entries", format!("{} is out of range: allowed 1 to {}", p.directory_entries, 1 << 24)));
        }
        if p.directory_ways == 0 || p.directory_ways > p.directory_entries || !(p.directory_entries / p.directory_ways).is_power_of_two() {
            return Err(Error::config(
                "coherence.didi.directory_ways",
                "1 to directory_entries, and directory_entries / directory_ways sets must be a power of two",
            ));
        }
        let cores = cfg.cores() as usize;
        Ok(Didi {
            dir: Directory::new(p.directory_entries, p.directory_ways, cores),
            tag_mm: vec![HashMap::default(); cores],
            back_invalidated: HashSet::default(),
            latency: if p.ptlbi_latency > 0 { p.ptlbi_latency } else { cfg.machine.memory.local_latency as u64 },
            target_cycles: p.ptlbi_target_cycles,
            directory_latency: p.directory_latency as u64,
            c: Counters::default(),
        })
    }
}

impl<const MODE: u8> Didi<MODE> {
    fn tracked(structure: usize) -> bool {
        (L1D_4K..=L2).contains(&structure)
    }

    fn mm_of(&self, core: CoreId, tag: u16) -> Option<u32> {
        self.tag_mm[core.0 as usize].get(&tag).copied()
    }

    fn delivery(&self) -> Delivery {
        if MODE == 1 {
            Delivery::Ipi
        } else {
            Delivery::Message { latency: self.latency, initiator_cycles: self.directory_latency, target_cycles: self.target_cycles }
        }
    }
}

impl<const MODE: u8> Coherence for Didi<MODE> {
    fn min_latency(&self, _costs: &CostsConfig) -> Option<u64> {
        (MODE != 1).then_some(self.latency)
    }

    fn plan(&mut self, view: &OsView<'_>, req: &FlushRequest, plan: &mut FlushPlan) {
        plan.delivery = Some(self.delivery());
        if MODE == 2 || req.global || req.freed_tables {
            // Linux's targets (the directory does not know the page-walk caches).
            linux_targets(view, req, plan);
            return;
        }
        let whole = req.full || req.pages.len() as u64 > view.flush_ceiling as u64;
        let mut pages_of: Vec<Option<Vec<Vpn>>> = vec![None; view.cores.len()];
        if whole {
            self.c.directory_lookups += 1;
            for slot in self.dir.entries_of(req.mm) {
                for core in self.dir.sharers(slot) {
                    pages_of[core].get_or_insert_with(Vec::new);
                }
            }
        } else {
            for &p in &req.pages {
                for size in PageSize::ALL {
                    self.c.directory_lookups += 1;
                    if let Some(slot) = self.dir.find(key(req.mm, p, size)) {
                        for core in self.dir.sharers(slot) {
                            let v = pages_of[core].get_or_insert_with(Vec::new);
                            if v.last() != Some(&p) {
                                v.push(p);
                            }
                        }
                    }
                }
            }
        }
        for (core, pages) in pages_of.into_iter().enumerate() {
            if let Some(pages) = pages {
                if whole {
                    plan.push(CoreId(core as u32));
                } else {
                    self.c.ptlbi_invalidations += pages.len() as u64;
                    plan.push_pages(CoreId(core as u32), pages);
                }
            }
        }
    }

    fn on_deliver(&mut self, _core: CoreId, me: &CoreView, req: &FlushRequest, flush_ceiling: u32) -> LocalFlush {
        if MODE == 2 || req.global || req.freed_tables {
            return linux_on_deliver(me, req, flush_ceiling);
        }
        // The directory's invalidation reaches the entry whatever the core runs now.
        if req.full || req.pages.len() as u64 > flush_ceiling as u64 {
            LocalFlush::Full
        } else {
            LocalFlush::Pages
        }
    }

    fn on_switch(&mut self, _core: CoreId, slot_gen: Option<u64>, mm_gen: u64) -> bool {
        slot_gen != Some(mm_gen)
    }

    fn on_cr3_load(&mut self, core: CoreId, load: &Cr3Load, _fx: &mut Effects) {
        self.tag_mm[core.0 as usize].insert(load.tag, load.to);
    }

    #[inline]
    fn on_tlb_insert(&mut self, core: CoreId, structure: usize, e: &TlbEntry, fx: &mut Effects) {
        if !Self::tracked(structure) {
            return;
        }
        let Some(mm) = self.mm_of(core, e.tag) else { return };
        self.c.directory_messages += 1;
        let k = key(mm, e.vpn, e.size);
        let c = core.0 as usize;
        if !self.back_invalidated.is_empty() && self.back_invalidated.remove(&(c, k)) {
            self.c.back_invalidation_misses += 1;
        }
        if let Some((victim, sharers)) = self.dir.insert(k, c) {
            for s in sharers {
                self.c.back_invalidations += 1;
                self.back_invalidated.insert((s, victim));
                fx.push(Effect::InvalidatePage { core: CoreId(s as u32), mm: key_mm(victim), vpn: key_vpn(victim) });
            }
        }
    }

    #[inline]
    fn on_tlb_evict(&mut self, core: CoreId, structure: usize, e: &TlbEntry, _fx: &mut Effects) {
        if !Self::tracked(structure) {
            return;
        }
        let Some(mm) = self.mm_of(core, e.tag) else { return };
        self.c.directory_messages += 1;
        self.dir.evict(key(mm, e.vpn, e.size), core.0 as usize);
    }

    fn stats_json(&self) -> serde_json::Value {
        serde_json::to_value(self.c).unwrap_or_default()
    }
}
