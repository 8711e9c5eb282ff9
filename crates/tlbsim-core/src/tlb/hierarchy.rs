//! One core's translation hardware: L1 data TLBs per page size, L1 instruction TLB, a
//! unified L2 (STLB), the page-walk caches, and the tagging state (docs/ARCHITECTURE.md "TLBs (per
//! core)"; tag paper §4 for CR3 tags).
//!
//! Lookups go L1 (the one for the access's kind; the per-size data TLBs are probed in
//! parallel, as hardware does) → L2 → walk. A walk fills the L2 and the L1. Every insert
//! and every eviction is reported to a [`TlbListener`] (DiDi's directory needs both).
//!
//! Tagging, one mode per run:
//! - `none`: a CR3 write flushes every non-global entry;
//! - `pcid`: entries carry a 12-bit PCID; a CR3 write changes the current tag, no flush;
//! - `domain`: entries carry the VM id (VPID/ASID style): only a VM switch changes tags,
//!   a switch between processes of one VM flushes non-global entries;
//! - `cr3`: the Tag Manager Table assigns VASIs (tag paper §4); forced and capacity
//!   flushes flush the TLB and the TMT.
//!
//! A structure with `entries = 0` is absent: not looked up, not counted.
//!
//! Simplified: the L2 is neither inclusive nor exclusive of the L1s (Intel's STLB is not
//! documented as either); the page-walk caches are flushed with the TLB on full flushes
//! and, for invalidations of one page, entirely (x86 allows INVLPG to drop any
//! paging-structure-cache entry).

use super::level::TlbLevel;
use super::partition::{Controller, PartitionController, Settings};
use super::set_assoc::{TlbEntry, TlbGeometry, FLAG_GLOBAL, FLAG_STALE};
use super::tmt::{Cr3WriteOutcome, Tmt};
use super::walk_cache::WalkCache;
use crate::config::{LevelConfig, Tagging, TlbConfig};
use crate::error::{Error, Result};
use crate::stats::StructCounters;
use crate::types::{AccessKind, CoreId, PageSize, Vpn};

/// Index of each structure (`TlbHierarchy::structs` for the TLB levels, the page-walk
/// caches through `TlbHierarchy::pwc`) and its stats name.
pub const L1D_4K: usize = 0;
pub const L1D_2M: usize = 1;
pub const L1D_1G: usize = 2;
pub const L1I: usize = 3;
pub const L2: usize = 4;
pub const PWC_PML4: usize = 5;
pub const PWC_PDPT: usize = 6;
pub const PWC_PD: usize = 7;
pub const NAMES: [&str; 8] = ["l1d", "l1d_2m", "l1d_1g", "l1i", "l2", "pwc_pml4", "pwc_pdpt", "pwc_pd"];

/// Observer of TLB contents (DiDi's directory, the stale-translation checker).
pub trait TlbListener {
    /// Whether `evicted` does anything (if not, the levels are spared copying out what
    /// they displace).
    const SEES_EVICTIONS: bool = true;
    fn inserted(&mut self, core: CoreId, structure: usize, entry: &TlbEntry);
    fn evicted(&mut self, core: CoreId, structure: usize, entry: &TlbEntry);
}

impl<T: TlbListener + ?Sized> TlbListener for &mut T {
    const SEES_EVICTIONS: bool = T::SEES_EVICTIONS;
    #[inline(always)]
    fn inserted(&mut self, core: CoreId, structure: usize, entry: &TlbEntry) {
        (**self).inserted(core, structure, entry)
    }
    #[inline(always)]
    fn evicted(&mut self, core: CoreId, structure: usize, entry: &TlbEntry) {
        (**self).evicted(core, structure, entry)
    }
}

/// A listener that does nothing; compiles away.
pub struct NoTlbListener;
impl TlbListener for NoTlbListener {
    const SEES_EVICTIONS: bool = false;
    #[inline]
    fn inserted(&mut self, _: CoreId, _: usize, _: &TlbEntry) {}
    #[inline]
    fn evicted(&mut self, _: CoreId, _: usize, _: &TlbEntry) {}
}

/// Why a full flush happened (stats `full_flushes_by_cause`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushCause {
    ContextSwitch,
    TagCapacity,
    TagForced,
    Other,
}

pub struct TlbHierarchy {
    pub core: CoreId,
    /// The TLB levels, L1D_4K .. L2.
    pub structs: [TlbLevel; 5],
    /// The page-walk caches, PWC_PML4 .. PWC_PD (`pwc`).
    pwcs: [WalkCache; 3],
    present: [bool; 8],
    latency: [u32; 8],
    /// Per structure, entries allotted to each service level (empty: no quotas).
    quotas: [Vec<u32>; 8],
    pub counters: [StructCounters; 8],
    tagging: Tagging,
    tmt: Option<Tmt>,
    /// Tag new entries get and lookups compare.
    tag: u16,
    /// Service level of the running context.
    sl: u8,
    /// Current CR3 value and VM, for the untagged and domain modes.
    cr3: u64,
    vm: u16,
    /// Domain tags: per VM, the CR3 its tag's entries were filled under on this CPU (a VM's
    /// tag keeps its entries while other VMs run; a switch to another address space of the
    /// VM drops them).
    domain_cr3: Vec<(u16, u64)>,
    /// Whether the last CR3 write kept entries the loaded context may have filled before
    /// (PCID always; CR3 tags on a TMT hit; domain tags when no flush happened).
    kept_entries: bool,
    /// ABIS §7 walker quirks (`machine.tlb.quirk_*`).
    pub quirk_dirty_sets_accessed: bool,
    pub quirk_faulting_walk_sets_accessed: bool,
    /// Set by the access path around a dirty-bit walk (a write through a cached clean entry).
    pub dirty_walk: bool,
    /// The `utility` partition controller (`tlb::partition`), if configured.
    pub partition: Option<Box<Controller>>,
    /// Instructions this core retired (told by the engine through `retire`).
    retired: u64,
    /// When the controller's epoch ends (`u64::MAX` without one).
    next_epoch: u64,
}

/// The TLB levels the `utility` controller partitions (the page-walk caches keep static
/// quotas).
const PARTITIONED: [usize; 5] = [L1D_4K, L1D_2M, L1D_1G, L1I, L2];

#[inline(always)]
fn size_index(size: PageSize) -> u8 {
    match size {
        PageSize::Size4K => 0,
        PageSize::Size2M => 1,
        PageSize::Size1G => 2,
    }
}

/// Where a lookup found its translation.
#[derive(Clone, Copy, Debug)]
pub enum Found {
    L1(TlbEntry),
    L2(TlbEntry),
    Miss,
}

impl TlbHierarchy {
    pub fn new(core: CoreId, cfg: &TlbConfig, seed: u64) -> Result<Self> {
        let levels = cfg.levels();
        let geometry = |i: usize| {
            let l: &LevelConfig = levels[i].1;
            (TlbGeometry { entries: l.entries, ways: l.ways, replacement: l.replacement }, seed ^ ((i as u64) << 56) ^ core.0 as u64)
        };
        let named = |i: usize| move |m: String| Error::config(format!("machine.tlb.{}", NAMES[i]), m);
        let present = std::array::from_fn(|i| levels[i].1.entries > 0);
        let latency = std::array::from_fn(|i| levels[i].1.latency);
        let quotas: [Vec<u32>; 8] = std::array::from_fn(|i| {
            if cfg.partition_controller == PartitionController::None {
                return Vec::new();
            }
            cfg.sl_quota_fraction.iter().map(|f| (f * levels[i].1.entries as f64).round() as u32).collect()
        });
        // A page-walk cache's quotas are the ones set here for the whole run (the `utility`
        // controller changes only the TLB levels': `PARTITIONED`).
        let mk_pwc = |i: usize| -> Result<WalkCache> {
            let (g, seed) = geometry(i);
            WalkCache::new(&g, seed, !quotas[i].is_empty()).map_err(named(i))
        };
        // A TLB level has the quotas set here, or any the `utility` controller sets later.
        let mk = |i: usize| -> Result<TlbLevel> {
            let (g, seed) = geometry(i);
            let quotas_possible = !quotas[i].is_empty() || cfg.partition_controller == PartitionController::Utility;
            TlbLevel::new(&g, seed, quotas_possible).map_err(named(i))
        };
        let structs = [mk(0)?, mk(1)?, mk(2)?, mk(3)?, mk(4)?];
        let pwcs = [mk_pwc(PWC_PML4)?, mk_pwc(PWC_PDPT)?, mk_pwc(PWC_PD)?];
        let partition = (cfg.partition_controller == PartitionController::Utility).then(|| {
            let settings = Settings {
                goal: cfg.partition_goal,
                goal_domain: cfg.partition_goal_domain.min(255) as u8,
                goal_mptti: cfg.partition_goal_mptti,
                epoch_instructions: cfg.partition_epoch_instructions,
                at_flush: cfg.partition_at_flush,
            };
            let present: Vec<(usize, u32)> = PARTITIONED.iter().map(|&i| (i, levels[i].1.entries)).collect();
            Box::new(Controller::new(settings, &present))
        });
        let next_epoch = partition.as_ref().map_or(u64::MAX, |p| p.settings().epoch_instructions);
        Ok(TlbHierarchy {
            core,
            structs,
            pwcs,
            present,
            latency,
            quotas,
            counters: Default::default(),
            tagging: cfg.tagging,
            tmt: (cfg.tagging == Tagging::Cr3).then(|| Tmt::new(cfg.tmt_entries)),
            tag: 0,
            sl: 0,
            cr3: 0,
            vm: 0,
            domain_cr3: vec![(0, 0)],
            kept_entries: false,
            quirk_dirty_sets_accessed: cfg.quirk_dirty_sets_accessed,
            quirk_faulting_walk_sets_accessed: cfg.quirk_faulting_walk_sets_accessed,
            dirty_walk: false,
            partition,
            retired: 0,
            next_epoch,
        })
    }

    /// Instructions that can retire before the next partition epoch ends (about u64::MAX
    /// without partitioning): the OS engine's compute leaps stop short of it, so that an
    /// epoch ends where it would have in pieces.
    pub fn instructions_before_epoch(&self) -> u64 {
        self.next_epoch.saturating_sub(self.retired).saturating_sub(1)
    }

    /// Take back `n` retired instructions that did not run after all (a compute leap cut
    /// short; it never crosses an epoch).
    pub fn unretire(&mut self, n: u64) {
        self.retired -= n;
    }

    /// The core retired `n` instructions (the partition controller's clock).
    #[inline(always)]
    pub fn retire(&mut self, n: u64) {
        self.retired += n;
        if self.retired >= self.next_epoch {
            self.partition_epoch();
        }
    }

    #[cold]
    fn partition_epoch(&mut self) {
        let Some(p) = self.partition.as_mut() else { return };
        let epoch = p.settings().epoch_instructions;
        while self.next_epoch <= self.retired {
            self.next_epoch += epoch;
        }
        for (i, quotas) in p.epoch_end(self.retired, self.sl) {
            self.quotas[i] = quotas;
        }
    }

    /// Tell the partition controller of a lookup of structure `i` (its hits where they
    /// happen, its misses where the fill goes).
    #[inline(always)]
    fn observe(&mut self, i: usize, e: &TlbEntry) {
        // Out of line: the lookup path of a run without the controller keeps its shape.
        if self.partition.is_some() {
            self.observe_cold(i, e);
        }
    }

    #[cold]
    #[inline(never)]
    fn observe_cold(&mut self, i: usize, e: &TlbEntry) {
        if let Some(p) = self.partition.as_mut() {
            p.observe(i, e.vpn.0, size_index(e.size), e.tag, self.sl);
        }
    }

    /// The controller learns that structure `i` was flushed whole (and may apply quotas
    /// it kept for this moment).
    fn partition_flushed(&mut self, i: usize) {
        if let Some(p) = self.partition.as_mut() {
            if let Some(q) = p.flushed(i) {
                self.quotas[i] = q;
            }
        }
    }

    /// stats.json's `per_core[].partition` under the `utility` controller: epochs, the
    /// quotas in force at the end per structure, and each epoch's quotas (`history`, at
    /// the instructions retired when it ended).
    pub fn partition_json(&self) -> Option<serde_json::Value> {
        let p = self.partition.as_ref()?;
        let quotas: serde_json::Map<String, serde_json::Value> =
            PARTITIONED.iter().filter(|&&i| self.present[i]).map(|&i| (NAMES[i].to_string(), serde_json::json!(self.quotas[i]))).collect();
        let history: Vec<serde_json::Value> = p
            .history
            .iter()
            .map(|r| {
                let mut e = serde_json::json!({"instructions": r.instructions});
                for (name, q) in &r.quotas {
                    e[*name] = serde_json::json!(q);
                }
                e
            })
            .collect();
        Some(serde_json::json!({
            "controller": "utility",
            "goal": p.settings().goal,
            "epochs": p.epochs,
            "quotas": quotas,
            "history": history,
        }))
    }

    /// Tag of the running context (what lookups compare and new entries carry).
    #[inline]
    pub fn tag(&self) -> u16 {
        self.tag
    }

    #[inline]
    pub fn present(&self, structure: usize) -> bool {
        self.present[structure]
    }

    #[inline]
    pub fn latency(&self, structure: usize) -> u32 {
        self.latency[structure]
    }

    /// Look `vpn` up in the L1 for `kind`, then the L2; an L2 hit fills the L1. Counts hits
    /// and misses; returns where it was found and the lookup cycles.
    #[inline(always)]
    pub fn lookup<L: TlbListener>(&mut self, vpn: Vpn, kind: AccessKind, listener: &mut L) -> (Found, u32) {
        let tag = self.tag;
        let mut cycles = 0;
        if kind.is_fetch() {
            if self.present[L1I] {
                cycles += self.latency[L1I];
                // The instruction TLB holds every page size.
                for size in PageSize::ALL {
                    if let Some(e) = self.probe(L1I, vpn, size, tag) {
                        self.counters[L1I].hits += 1;
                        self.observe(L1I, &e);
                        return (Found::L1(e), cycles);
                    }
                }
                self.counters[L1I].misses += 1;
            }
        } else {
            // The per-size L1 DTLBs are probed in parallel: one latency, one hit at most.
            let mut lat = 0;
            for (i, size) in [(L1D_4K, PageSize::Size4K), (L1D_2M, PageSize::Size2M), (L1D_1G, PageSize::Size1G)] {
                if self.present[i] {
                    lat = lat.max(self.latency[i]);
                    if let Some(e) = self.probe(i, vpn, size, tag) {
                        self.counters[i].hits += 1;
                        self.observe(i, &e);
                        return (Found::L1(e), lat);
                    }
                }
            }
            cycles += lat;
            for i in [L1D_4K, L1D_2M, L1D_1G] {
                if self.present[i] {
                    self.counters[i].misses += 1;
                }
            }
        }
        if self.present[L2] {
            cycles += self.latency[L2];
            for size in PageSize::ALL {
                if let Some(e) = self.probe(L2, vpn, size, tag) {
                    self.counters[L2].hits += 1;
                    self.observe(L2, &e);
                    self.fill_l1(e, kind, listener);
                    return (Found::L2(e), cycles);
                }
            }
            self.counters[L2].misses += 1;
        }
        (Found::Miss, cycles)
    }

    /// Look up the page of `size` holding `vpn` in structure `i`. A large-page probe of a
    /// structure holding no page of that size misses without a call (the 2 MiB and 1 GiB
    /// probes of a 4 KiB workload).
    #[inline(always)]
    fn probe(&mut self, i: usize, vpn: Vpn, size: PageSize, tag: u16) -> Option<TlbEntry> {
        if size != PageSize::Size4K && !self.structs[i].holds(size) {
            return None;
        }
        self.structs[i].lookup(vpn.align(size), size, tag)
    }

    /// Build an entry for the running context.
    #[inline]
    pub fn entry(&self, vpn: Vpn, pfn: crate::types::Pfn, size: PageSize, flags: u8) -> TlbEntry {
        let tag = if flags & FLAG_GLOBAL != 0 { 0 } else { self.tag };
        TlbEntry { vpn: vpn.align(size), pfn, size, tag, sl: self.sl, flags }
    }

    /// Fill after a walk: the L2 and the L1 for `kind`.
    pub fn fill<L: TlbListener>(&mut self, e: TlbEntry, kind: AccessKind, listener: &mut L) {
        if self.present[L2] {
            self.observe(L2, &e);
            self.insert(L2, e, listener);
        }
        self.fill_l1(e, kind, listener);
    }

    fn fill_l1<L: TlbListener>(&mut self, e: TlbEntry, kind: AccessKind, listener: &mut L) {
        let i = if kind.is_fetch() {
            L1I
        } else {
            match e.size {
                PageSize::Size4K => L1D_4K,
                PageSize::Size2M => L1D_2M,
                PageSize::Size1G => L1D_1G,
            }
        };
        if self.present[i] {
            self.observe(i, &e);
            self.insert(i, e, listener);
        }
    }

    /// Page-walk cache `i` (PWC_PML4, PWC_PDPT or PWC_PD).
    #[inline(always)]
    pub fn pwc(&mut self, i: usize) -> &mut WalkCache {
        &mut self.pwcs[i - PWC_PML4]
    }

    /// Insert into TLB level `i`, honouring service-level quotas, counting and reporting
    /// the eviction.
    #[inline]
    pub fn insert<L: TlbListener>(&mut self, i: usize, e: TlbEntry, listener: &mut L) {
        // The displaced entry is copied out only for a listener that sees it, and shown to
        // it after the insertion.
        let mut victim = None;
        let displaced = self.structs[i].insert_reporting(e, &self.quotas[i], |v| {
            if L::SEES_EVICTIONS {
                victim = Some(*v);
            }
        });
        listener.inserted(self.core, i, &e);
        if displaced {
            self.counters[i].evictions += 1;
        }
        if let Some(v) = victim {
            listener.evicted(self.core, i, &v);
        }
    }

    /// Insert a walk's entry into page-walk cache `i` (PWC_PML4..PWC_PD), honouring its
    /// quotas and counting the eviction (listeners see TLB levels only). Apart from
    /// `insert`, so that the walker carries no TLB level's code.
    #[inline]
    pub fn insert_pwc(&mut self, i: usize, e: TlbEntry) {
        if self.pwcs[i - PWC_PML4].insert(e, &self.quotas[i]).is_some() {
            self.counters[i].evictions += 1;
        }
    }

    /// A write hit an entry filled by a read: mark it dirty in every data structure holding
    /// it (the PTE's D bit is the caller's business).
    pub fn mark_dirty(&mut self, e: &TlbEntry) {
        for i in [L1D_4K, L1D_2M, L1D_1G, L2] {
            if self.present[i] {
                self.structs[i].mark_dirty(e.vpn, e.size, e.tag);
            }
        }
    }

    /// INVLPG: drop every translation of 4 KiB page `vpn` (any page size covering it) for
    /// `tag` (`None`: every tag), and the page-walk caches. Returns entries removed.
    pub fn invalidate_page<L: TlbListener>(&mut self, vpn: Vpn, tag: Option<u16>, listener: &mut L) -> u32 {
        let core = self.core;
        let mut n = 0;
        for i in 0..8 {
            if !self.present[i] {
                continue;
            }
            let removed = if i >= PWC_PML4 {
                self.pwcs[i - PWC_PML4].flush(false, &mut |_| {})
            } else {
                self.structs[i].invalidate_page(vpn, tag, &mut |e| listener.evicted(core, i, e))
            };
            self.counters[i].invalidations += removed as u64;
            if i < PWC_PML4 {
                n += removed;
            }
        }
        n
    }

    /// The checker marks every page-walk-cache entry that points to page-table arena slot
    /// `slot` (a table being freed) stale; returns how many.
    pub fn mark_pwc_stale(&mut self, slot: u32) -> u32 {
        let mut n = 0;
        for i in [PWC_PML4, PWC_PDPT, PWC_PD] {
            if self.present[i] {
                n += self.pwcs[i - PWC_PML4].mark_where(|e| e.pfn.0 == slot as u64, FLAG_STALE);
            }
        }
        n
    }

    /// Drop every page-walk-cache entry (what INVLPG does to them, for a request that frees
    /// page tables but names no page).
    pub fn flush_pwc(&mut self) {
        for i in [PWC_PML4, PWC_PDPT, PWC_PD] {
            if self.present[i] {
                let removed = self.pwcs[i - PWC_PML4].flush(false, &mut |_| {});
                self.counters[i].invalidations += removed as u64;
            }
        }
    }

    /// Whether a page-walk cache holds an entry pointing to table `slot`: under any tag, or
    /// under `tag` only (one a walk of the address space loaded with that tag may go through).
    pub fn holds_pwc_to(&self, slot: u32, tag: Option<u16>) -> bool {
        let wanted = |e: &TlbEntry| e.pfn.0 == slot as u64 && tag.is_none_or(|t| e.tag == t);
        [PWC_PML4, PWC_PDPT, PWC_PD].iter().any(|&i| self.present[i] && self.pwcs[i - PWC_PML4].any(wanted))
    }

    /// INVLPG of each of `pages` (as `invalidate_page`), the page-walk caches dropped once
    /// for all of them. Returns entries removed from the TLB levels.
    pub fn invalidate_pages<L: TlbListener>(&mut self, pages: &[Vpn], tag: Option<u16>, listener: &mut L) -> u32 {
        let n = self.invalidate_leaves(pages, tag, listener);
        if !pages.is_empty() {
            self.flush_pwc();
        }
        n
    }

    /// Drop the translations of `pages` (of `tag`, or any) and keep the page-walk caches
    /// (INVLPGB with FINAL_ONLY).
    pub fn invalidate_leaves<L: TlbListener>(&mut self, pages: &[Vpn], tag: Option<u16>, listener: &mut L) -> u32 {
        let core = self.core;
        let mut n = 0;
        for i in 0..PWC_PML4 {
            if !self.present[i] {
                continue;
            }
            let mut removed = 0;
            for &vpn in pages {
                removed += self.structs[i].invalidate_page(vpn, tag, &mut |e| listener.evicted(core, i, e));
            }
            self.counters[i].invalidations += removed as u64;
            n += removed;
        }
        n
    }

    /// Drop every non-global entry of `tag` (INVPCID single-context).
    pub fn invalidate_tag<L: TlbListener>(&mut self, tag: u16, listener: &mut L) -> u32 {
        let core = self.core;
        let mut n = 0;
        for i in 0..8 {
            if self.present[i] {
                let removed = if i >= PWC_PML4 {
                    self.pwcs[i - PWC_PML4].invalidate_tag(tag, &mut |e| listener.evicted(core, i, e))
                } else {
                    self.structs[i].invalidate_tag(tag, &mut |e| listener.evicted(core, i, e))
                };
                self.counters[i].invalidations += removed as u64;
                if let Some(p) = self.partition.as_mut() {
                    p.flushed_tag(i, tag);
                }
                if i < PWC_PML4 {
                    n += removed;
                }
            }
        }
        n
    }

    /// Flush every structure (keeping global entries if asked). With CR3 tags the TMT is
    /// flushed too, keeping only the current context (tag paper §4).
    pub fn flush_all<L: TlbListener>(&mut self, keep_global: bool, listener: &mut L) -> u32 {
        let core = self.core;
        let mut n = 0;
        for i in 0..8 {
            if self.present[i] {
                let removed = if i >= PWC_PML4 {
                    self.pwcs[i - PWC_PML4].flush(keep_global, &mut |e| listener.evicted(core, i, e))
                } else {
                    self.structs[i].flush(keep_global, &mut |e| listener.evicted(core, i, e))
                };
                self.counters[i].invalidations += removed as u64;
                if i < PWC_PML4 {
                    n += removed;
                }
                self.partition_flushed(i);
            }
        }
        if let Some(t) = self.tmt.as_mut() {
            t.flush_keep_current();
        }
        n
    }

    /// The OS writes CR3 to switch to address space `cr3` with PCID `pcid`, in VM `vm` (its
    /// service level). Returns the full flush this caused, if any.
    pub fn write_cr3<L: TlbListener>(&mut self, cr3: u64, pcid: u16, vm: u16, listener: &mut L) -> Option<FlushCause> {
        let mut hit = false;
        let cause = match self.tagging {
            Tagging::None => {
                self.tag = 0;
                Some(FlushCause::ContextSwitch)
            }
            Tagging::Pcid => {
                self.tag = pcid & 0xfff;
                hit = true;
                None
            }
            Tagging::Domain => {
                self.tag = vm;
                // A VM switch changes the tag; loading another address space of the VM than
                // the one its tag holds entries of flushes them (a MOV CR3 under a VPID
                // flushes that VPID's non-global entries).
                let last = match self.domain_cr3.iter_mut().find(|(v, _)| *v == vm) {
                    Some(e) => Some(std::mem::replace(&mut e.1, cr3)),
                    None => {
                        self.domain_cr3.push((vm, cr3));
                        None
                    }
                };
                // Entries kept only when the tag holds this address space's already.
                hit = last == Some(cr3);
                last.is_some_and(|c| c != cr3).then_some(FlushCause::ContextSwitch)
            }
            Tagging::Cr3 => {
                let tmt = self.tmt.as_mut().expect("cr3 tagging has a TMT");
                let outcome = tmt.write_cr3(cr3, vm as u8);
                self.tag = tmt.current_vasi();
                hit = outcome == Cr3WriteOutcome::Hit;
                match outcome {
                    Cr3WriteOutcome::ForcedFlush => Some(FlushCause::TagForced),
                    Cr3WriteOutcome::CapacityFlush => Some(FlushCause::TagCapacity),
                    Cr3WriteOutcome::Hit | Cr3WriteOutcome::Inserted => None,
                }
            }
        };
        self.kept_entries = hit && cause.is_none();
        self.cr3 = cr3;
        self.vm = vm;
        let sl = vm.min(255) as u8;
        if sl != self.sl {
            if let Some(p) = self.partition.as_mut() {
                p.switch_level(self.sl, self.retired);
            }
        }
        self.sl = sl;
        if let Some(c) = cause {
            if self.tagging == Tagging::Domain {
                // Only this VM's entries (and the untagged page-walk caches).
                self.invalidate_tag(vm, listener);
                self.flush_pwc();
            } else {
                // The TMT was already reset by the outcome; flush_all resets it again harmlessly.
                self.flush_all(c == FlushCause::ContextSwitch, listener);
            }
        }
        cause
    }

    /// The hypervisor writes CR3 with the value it holds (after updating the current page
    /// table for the guest, or carrying out a guest's full-flush hypercall): the tag paper
    /// §4's forced flush. Every mode flushes the whole TLB; with CR3 tags the TMT is reset
    /// to the current context.
    pub fn rewrite_cr3<L: TlbListener>(&mut self, listener: &mut L) {
        if let Some(t) = self.tmt.as_mut() {
            let cr3 = t.current_cr3().unwrap_or(self.cr3);
            t.write_cr3(cr3, self.sl);
            self.tag = t.current_vasi();
        }
        self.flush_all(false, listener);
        self.kept_entries = false;
    }

    /// Tag under which this core's TLB holds entries of the address space with page-table
    /// root `cr3`, PCID `pcid`, VM `vm`, if it can hold any: untagged TLBs hold only the
    /// loaded address space's entries (a switch flushes the others), domain-tagged ones
    /// per VM those of the address space the VM loaded last, PCID-tagged ones the PCID's,
    /// CR3-tagged ones the VASI the TMT gave it.
    pub fn tag_of(&self, cr3: u64, pcid: u16, vm: u16) -> Option<u16> {
        match self.tagging {
            Tagging::None => (self.cr3 == cr3 && self.vm == vm).then_some(self.tag),
            Tagging::Domain => self.domain_cr3.iter().any(|&(v, c)| v == vm && c == cr3).then_some(vm),
            Tagging::Pcid => Some(pcid & 0xfff),
            Tagging::Cr3 => self.tmt.as_ref().and_then(|t| t.vasi_of(cr3)),
        }
    }

    /// Whether the last CR3 write kept entries that the context it loaded may have filled
    /// earlier (so the OS must decide whether they are current).
    pub fn kept_entries(&self) -> bool {
        self.kept_entries
    }

    /// The address space loaded now (CR3 value).
    pub fn cr3(&self) -> u64 {
        self.cr3
    }

    /// Mark stale (FLAG_STALE) every TLB-level entry of 4 KiB page `vpn` with `tag` for
    /// which `stale(entry)` holds; returns how many.
    pub fn mark_stale_if(&mut self, vpn: Vpn, tag: u16, stale: &dyn Fn(&TlbEntry) -> bool) -> u32 {
        let mut n = 0;
        for i in [L1D_4K, L1D_2M, L1D_1G, L1I, L2] {
            if self.present[i] {
                n += self.structs[i].mark_page_if(vpn, Some(tag), FLAG_STALE, stale);
            }
        }
        n
    }

    /// Whether a TLB level holds an entry of 4 KiB page `vpn` with `tag` for which
    /// `stale(entry)` holds.
    pub fn holds_if(&mut self, vpn: Vpn, tag: u16, stale: &dyn Fn(&TlbEntry) -> bool) -> bool {
        [L1D_4K, L1D_2M, L1D_1G, L1I, L2].into_iter().any(|i| self.present[i] && self.structs[i].mark_page_if(vpn, Some(tag), 0, stale) > 0)
    }

    /// (name, counters) of every present structure.
    pub fn named_counters(&self) -> Vec<(&'static str, StructCounters)> {
        (0..8).filter(|&i| self.present[i]).map(|i| (NAMES[i], self.counters[i])).collect()
    }
}
