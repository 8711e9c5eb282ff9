//! `linux-invlpgb`: Linux 6.15+'s TLB coherence on AMD CPUs with INVLPGB/TLBSYNC
//! (arch/x86/mm/tlb.c; Rik van Riel's "AMD broadcast TLB invalidation" series, v15 of
//! 4 Mar 2025, merged for v6.15 through tip x86/core, merge commit 4afeb0ed1753; notes in
//! ../shared/research/modern_invalidation.md §1–2).
//!
//! Modelled:
//! - Until a process has a global ASID, `linux`'s protocol (`flush_tlb_multi`, IPIs to the
//!   mask, lazy CPUs skipped unless tables are freed). After such an IPI flush,
//!   `consider_global_asid()`: only when `(pid & 0x1f) == (jiffies & 0x1f)` (one jiffy in
//!   32 for a given process; the model's process id and `jiffy_cycles`) and when
//!   `mm_active_cpus_exceeds(mm, 3)` sees it loaded on `min_cpus` (4) or more non-lazy CPUs.
//! - `use_global_asid()` / `allocate_global_asid()`: a global ASID for the process's life,
//!   from the space `[TLB_NR_DYN_ASIDS = 6, MAX_ASID_AVAILABLE = 4094)`, handed out
//!   round-robin from `last_global_asid`; at the end of the space, `reset_global_asid_space()`:
//!   one broadcast flush of every non-global entry (`invlpgb_flush_all_nonglobals`), and
//!   only then the ASIDs freed at process exit (`mm_free_global_asid`, through the engine's
//!   `on_mm_exit` hook) become usable again ([`GlobalAsids`]).
//! - The transition (`mm->context.asid_transition`): while a CPU running the process has
//!   not switched to the global ASID (at its next CR3 load of the process, or when a flush
//!   IPI reaches it: `flush_tlb_func()` → `switch_mm_irqs_off()`), flushes IPI every CPU of
//!   the mask, lazy ones included (`finish_asid_transition()` → `flush_tlb_multi()`); the
//!   first flush that finds no straggler ends it (`mm_clear_asid_transition()`).
//! - Then `broadcast_tlb_flush()`: INVLPGBs by PCID and range in chunks of at most
//!   `invlpgb_count_max` pages (one per 2 MiB page; one per PCID for a full flush over the
//!   33-page ceiling), no FINAL_ONLY (page-walk caches dropped), one TLBSYNC, no IPI, no
//!   lazy special case: the engine's [`Delivery::Broadcast`] reaches every CPU of the
//!   machine, the initiator and CPUs running other processes included.
//! - Context switches to a global-ASID process never flush: broadcasts keep every CPU's
//!   entries of it current (the stats count `switch_flushes_global`, which stays at the
//!   cases below).
//! - Reclaim's batched flush (`arch_tlbbatch_flush()` with `unmapped_pages`): one
//!   broadcast of every non-global entry, when a remote CPU is in the mask.
//! - Page tables are freed after the broadcast's TLBSYNC (x86's unconditional
//!   `MMU_GATHER_RCU_TABLE_FREE`, commit a37259732a7d); the RCU grace period only protects
//!   GUP-fast's lockless walk, which the OS model does not have, so it adds nothing here.
//!
//! Simplified: the global ASID is not a hardware tag of its own: the engine's six per-CPU
//! PCID slots stand in for it, so a CPU that evicted the process's slot flushes when it
//! loads it again, and a CPU switching to the process while a broadcast for it is still on
//! its way flushes (real hardware needs neither); a broadcast reaching a slot that missed
//! a generation flushes that slot whole. During the transition the flush is modelled by its
//! IPIs (the INVLPGB Linux issues too is not charged). Pending flushes of the rollover are
//! issued at the next timer tick (`jiffy_cycles`) of any CPU, and allocation waits for them.
//! Kernel-address flushes (`flush_tlb_kernel_range`) are not modelled (the OS model has
//! none). INVLPGB, its propagation and TLBSYNC have no public latency measurement: their
//! costs are parameters, marked assumed.
//!
//! Unsafe on purpose, each its own registered policy (the const parameter `UNSAFE`, same
//! code; `tlbsim fuzz` catches each, tests/unsafe_hw.rs):
//! - `linux-invlpgb-no-tlbsync` ([`NO_TLBSYNC`]): no TLBSYNC before freeing: the initiator
//!   frees the frames and page tables while its INVLPGBs are still on their way, so a
//!   freed frame is reused while other CPUs still translate to it.
//! - `linux-invlpgb-final-only` ([`FINAL_ONLY`]): INVLPGB with FINAL_ONLY even when page
//!   tables are freed (the variant dropped before merge, "Only invalidate final
//!   translations with INVLPGB", without its freed-tables exception): page-walk-cache
//!   entries survive pointing to the freed tables.
//! - `linux-invlpgb-early-asid-reuse` ([`EARLY_ASID_REUSE`]): a global ASID freed at process
//!   exit is handed out again at once, before the rollover's broadcast flush; the new
//!   process's CR3 loads then find whatever the old one left under the same PCID
//!   ([`Coherence::tag_inherited_from`]: the engine's per-CPU slot of the old process is
//!   taken over without a flush, what it holds marked stale for the checker, rule 1).
//!   **Not caught, and not exposed on Linux's own exit path either** (so the fuzz is right
//!   not to catch it; no speculative-fill rule is added, since one would find nothing):
//!   1. The ASID is freed last. `mm_free_global_asid()` is called only from
//!      `destroy_context()` (arch/x86/include/asm/mmu_context.h), which `__mmdrop()`
//!      (kernel/fork.c) calls once `mm_count` drops to zero, right after `mm_free_pgd()`
//!      has freed the page directory. x86 counts lazy users in `mm_count`
//!      (`mmgrab_lazy_tlb()` in `context_switch()`, `mmdrop_lazy_tlb_sched()` in
//!      `finish_task_switch()`; x86 does not select `MMU_LAZY_TLB_SHOOTDOWN`), and a CPU's
//!      `cpu_tlbstate.loaded_mm` is its `active_mm` or `init_mm` (after `leave_mm()`); so
//!      when the ASID is freed no CPU, lazy or not, has the dead page table and its PCID
//!      in CR3: nothing can be filled under the ASID from then on.
//!   2. Before that, `exit_mmap()` (mm/mmap.c) unmaps everything (`unmap_vmas()`), frees
//!      every user page table and clears the user half of the PGD (`free_pgtables(...,
//!      FIRST_USER_ADDRESS, USER_PGTABLES_CEILING)`), then `tlb_finish_mmu()` →
//!      `tlb_flush()` (arch/x86/include/asm/tlb.h: `TLB_FLUSH_ALL` for a `fullmm` gather)
//!      → `flush_tlb_mm_range()` → `broadcast_tlb_flush()` →
//!      `invlpgb_flush_single_pcid_nosync(kern_pcid(asid))` (no FINAL_ONLY: walk caches
//!      too), then `__tlbsync()`: nothing of the process is left under the ASID on any
//!      CPU, whatever the mask (unlike arm64, whose `tlb_flush()` skips the leaf flush of a
//!      `fullmm` teardown and relies on its ASID allocator's rollover:
//!      arch/arm64/include/asm/tlb.h).
//!   3. Between that flush and step 1, a CPU that keeps the dead mm loaded lazily (the
//!      exiting CPU itself after `exit_mm()`'s `enter_lazy_tlb()`, or one running a kernel
//!      thread) may walk it speculatively (Intel SDM Vol. 3A §4.10.2.3, §4.10.3.1; AMD APM
//!      Vol. 2 §5.5): but only through present entries. SDM §4.10.2.3 ("Details of TLB
//!      Use"): "there can be a TLB entry for a page number only if the P flag is 1 and the
//!      reserved bits are 0 in each of the paging-structure entries used to translate that
//!      page number"; §4.10.3.1: "The processor does not create a PML4-cache entry unless
//!      the P flag is 1 [...] in the PML4E in memory" (likewise for the PDPTE and PDE
//!      caches). The user half of the PGD is empty by then; the kernel half is the same in
//!      every PGD (`pgd_ctor()` copies
//!      swapper_pg_dir's) and its leaves are global (`_PAGE_GLOBAL` in `__PAGE_KERNEL`
//!      without PTI), so what such a walk caches under the ASID is what any process would.
//!   Linux's wait for the rollover is thus a second guarantee on this path (tlb.c says only
//!   "The global ASID can be re-used only after flush at wrap-around"). The model agrees:
//!   `exit_process()` zaps and frees the tables before the exit's flush (a broadcast of the
//!   whole PCID to every CPU) and a lazy CPU fills nothing; it frees the ASID at exit_mmap
//!   (`on_mm_exit`) rather than at `__mmdrop()`, earlier than Linux, which for this variant
//!   only lets a lazy CPU still hold the dead mm when the ASID moves on (with nothing under
//!   it). Two simplifications lean the other way, and the fuzz's silence is no evidence by
//!   itself: when no other CPU is in the mask at exit the engine flushes nothing, where
//!   Linux still broadcasts for a global-ASID process, so the dead process's entries stay
//!   on the exiting core under its slot; and a process given the dead one's ASID inherits
//!   its slot only on a core where it has no slot of its own (the global ASID is not a tag
//!   of its own, "Simplified" above), which the fuzz's processes, alive from the start,
//!   almost never are: 0 slot takeovers in 2,000 PCID scenarios, and an ASID reused early
//!   at all in only 3 of the first 955 (tests/unsafe_hw.rs,
//!   `the_early_reuse_variant_reuses_asids_in_the_fuzz_without_exposure`). The evidence
//!   that the variant is safe in practice is the source chain above, not the fuzz.

use super::{
    linux_on_deliver, linux_targets, Coherence, CoreView, Cr3Load, Delivery, Effect, Effects, FlushPlan, FlushReason, FlushRequest, LocalFlush, OsView, Policy,
};
use crate::config::{Config, CostsConfig};
use crate::error::{Error, Result};
use crate::fasthash::FastSet;
use crate::types::{CoreId, Vpn};

/// `TLB_NR_DYN_ASIDS`: the per-CPU dynamic ASIDs below the global space.
pub const TLB_NR_DYN_ASIDS: u32 = 6;

crate::params! {
    /// `[coherence.linux-invlpgb]`: the INVLPGB/TLBSYNC capability's costs and Linux's knobs.
    pub struct LinuxInvlpgbParams {
        /// Pages one INVLPGB may invalidate (`invlpgb_count_max` = CPUID 0x80000008 EDX[15:0] + 1).
        /// Default 8: assumed (no published per-CPU value was found).
        pub invlpgb_count_max: u32 = 8,
        /// Cycles the initiator spends per INVLPGB instruction. Default 100: assumed (no public measurement).
        pub invlpgb_issue_cycles: u64 = 100,
        /// Cycles from issue until a CPU has applied the invalidation. Default 1,500 (0.5 us at 3 GHz): assumed (no public measurement).
        pub invlpgb_latency_cycles: u64 = 1_500,
        /// Cycles TLBSYNC costs after the last invalidation completed. Default 100: assumed (no public measurement).
        pub tlbsync_cycles: u64 = 100,
        /// CPUs a process must be loaded on, not lazy, to get a global ASID (tlb.c `mm_active_cpus_exceeds(mm, 3)`: 4).
        pub min_cpus: u32 = 4,
        /// consider_global_asid runs for a process one jiffy in this many (tlb.c `(pid & 0x1f) == (jiffies & 0x1f)`: 32).
        pub sample_period: u64 = 32,
        /// Cycles per jiffy (and between two timer ticks). Default 3,000,000: HZ=1000 at 3 GHz (assumed).
        pub jiffy_cycles: u64 = 3_000_000,
        /// MAX_ASID_AVAILABLE: global ASIDs are [6, this). Default 4094 = 2^12 - 2 (tlbflush.h, without PTI).
        pub asid_space: u32 = 4094,
    }
}

/// The global ASID space (tlb.c `global_asid_used`, `global_asid_freed`,
/// `last_global_asid`, `global_asid_available`).
#[derive(Clone, Debug)]
pub struct GlobalAsids {
    used: Vec<bool>,
    freed: Vec<bool>,
    last: u32,
    available: u32,
    max: u32,
    /// Rollovers done (each with its broadcast flush of every non-global entry).
    pub rollovers: u64,
    /// ASIDs handed out again while freed and not yet flushed (only after `free_now`).
    pub reused_before_rollover: u64,
}

impl GlobalAsids {
    /// The space `[TLB_NR_DYN_ASIDS, max)` (`max` = MAX_ASID_AVAILABLE).
    pub fn new(max: u32) -> GlobalAsids {
        GlobalAsids {
            used: vec![false; max as usize],
            freed: vec![false; max as usize],
            last: TLB_NR_DYN_ASIDS,
            available: max.saturating_sub(TLB_NR_DYN_ASIDS + 1),
            max,
            rollovers: 0,
            reused_before_rollover: 0,
        }
    }

    /// ASIDs that may still be handed out (freed ones included).
    pub fn available(&self) -> u32 {
        self.available
    }

    /// The next allocation needs a rollover first (`last_global_asid >= MAX_ASID_AVAILABLE - 1`).
    pub fn needs_rollover(&self) -> bool {
        self.last >= self.max - 1
    }

    /// reset_global_asid_space(), once its broadcast flush of every non-global entry has
    /// been issued: the ASIDs freed since the last rollover become usable again.
    pub fn rollover(&mut self) {
        for (u, f) in self.used.iter_mut().zip(self.freed.iter_mut()) {
            if *f {
                *u = false;
                *f = false;
            }
        }
        self.last = TLB_NR_DYN_ASIDS;
        self.rollovers += 1;
    }

    /// allocate_global_asid() after any rollover: the next unused ASID from the last one
    /// handed out; `None` if the rest of the space is used (the caller rolls over).
    pub fn allocate(&mut self) -> Option<u32> {
        if self.needs_rollover() || self.available == 0 {
            return None;
        }
        let asid = (self.last..self.max).find(|&a| !self.used[a as usize])?;
        self.used[asid as usize] = true;
        if std::mem::take(&mut self.freed[asid as usize]) {
            self.reused_before_rollover += 1;
        }
        self.last = asid;
        self.available -= 1;
        Some(asid)
    }

    /// mm_free_global_asid(): `asid` is usable again after the next rollover.
    pub fn free(&mut self, asid: u32) {
        self.freed[asid as usize] = true;
        self.available += 1;
    }

    /// mm_free_global_asid() without waiting for the rollover's flush (unsafe on purpose,
    /// `linux-invlpgb-early-asid-reuse`): `asid` may be handed out again at once.
    pub fn free_now(&mut self, asid: u32) {
        self.used[asid as usize] = false;
        self.freed[asid as usize] = true;
        self.available += 1;
    }

    /// Whether `asid` is in use or freed but not yet flushed (not to be handed out).
    pub fn taken(&self, asid: u32) -> bool {
        self.used[asid as usize]
    }
}

/// Per process.
#[derive(Clone, Copy, Debug)]
struct MmState {
    global_asid: Option<u32>,
    /// `asid_transition`: some CPU running it may still use a per-CPU ASID.
    transition: bool,
    /// The first generation flushed by broadcast (`u64::MAX`: none yet); kept after exit,
    /// for the broadcasts still on their way.
    broadcast_from: u64,
}

const NO_MM: MmState = MmState { global_asid: None, transition: false, broadcast_from: u64::MAX };

/// `UNSAFE` of [`LinuxInvlpgb`]: Linux's protocol (`linux-invlpgb`).
pub const SAFE: u8 = 0;
/// `linux-invlpgb-no-tlbsync`: frees without waiting for TLBSYNC (unsafe on purpose).
pub const NO_TLBSYNC: u8 = 1;
/// `linux-invlpgb-final-only`: FINAL_ONLY INVLPGBs when page tables are freed (unsafe on purpose).
pub const FINAL_ONLY: u8 = 2;
/// `linux-invlpgb-early-asid-reuse`: a freed global ASID reused before the rollover's flush
/// (unsafe on purpose).
pub const EARLY_ASID_REUSE: u8 = 3;

/// `UNSAFE`: [`SAFE`] or one of the unsafe-on-purpose variants.
pub struct LinuxInvlpgb<const UNSAFE: u8 = SAFE> {
    params: LinuxInvlpgbParams,
    /// Per global ASID, the last process that held it (for the engine's tag aliasing).
    asid_owner: Vec<Option<u32>>,
    /// Per process, the exited process whose global ASID (and PCID entries) it inherited.
    inherited: Vec<Option<u32>>,
    /// Per global ASID: freed at a process's exit since the last rollover's flush.
    asids: GlobalAsids,
    mms: Vec<MmState>,
    /// Per CPU: the process it loaded with its global ASID (switched over).
    on_global: Vec<Option<u32>>,
    /// Reclaim requests (process, generation) flushed by one broadcast of everything.
    reclaim_broadcasts: FastSet<(u32, u64)>,
    /// A rollover is due: its broadcast is issued at the next tick, allocation waits.
    rollover_due: bool,
    // Stats.
    ipi_flushes: u64,
    transition_flushes: u64,
    broadcasts: u64,
    invlpgb_instructions: u64,
    reclaim_all_broadcasts: u64,
    global_asids_assigned: u64,
    global_asids_freed: u64,
    considered: u64,
    switch_flushes_global: u64,
}

impl<const UNSAFE: u8> crate::registry::Plugin for LinuxInvlpgb<UNSAFE> {
    type Params = LinuxInvlpgbParams;
}

impl<const UNSAFE: u8> Policy for LinuxInvlpgb<UNSAFE> {
    fn build(cfg: &Config, params: LinuxInvlpgbParams) -> Result<Self> {
        let name = ["linux-invlpgb", "linux-invlpgb-no-tlbsync", "linux-invlpgb-final-only", "linux-invlpgb-early-asid-reuse"][UNSAFE as usize];
        let key = |k: &str| format!("coherence.{name}.{k}");
        if params.invlpgb_count_max == 0 {
            return Err(Error::config(key("invlpgb_count_max"), "must be at least 1 page"));
        }
        if params.jiffy_cycles == 0 || params.sample_period == 0 {
            return Err(Error::config(key("jiffy_cycles"), "jiffy_cycles and sample_period must be at least 1"));
        }
        if params.asid_space < TLB_NR_DYN_ASIDS + 2 || params.asid_space > 4096 {
            return Err(Error::config(key("asid_space"), "must be between 8 and 4096 (12-bit PCIDs)"));
        }
        Ok(LinuxInvlpgb {
            asids: GlobalAsids::new(params.asid_space),
            asid_owner: vec![None; params.asid_space as usize],
            inherited: Vec::new(),
            params,
            mms: Vec::new(),
            on_global: vec![None; cfg.cores() as usize],
            reclaim_broadcasts: FastSet::default(),
            rollover_due: false,
            ipi_flushes: 0,
            transition_flushes: 0,
            broadcasts: 0,
            invlpgb_instructions: 0,
            reclaim_all_broadcasts: 0,
            global_asids_assigned: 0,
            global_asids_freed: 0,
            considered: 0,
            switch_flushes_global: 0,
        })
    }
}

/// INVLPGB instructions for `pages` (4 KiB page numbers, a 2 MiB page by its first):
/// each run of consecutive pages in chunks of at most `max`.
pub fn invlpgb_chunks(pages: &[Vpn], max: u32) -> u64 {
    let mut sorted: Vec<u64> = pages.iter().map(|v| v.0).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let (mut chunks, mut run) = (0u64, 0u64);
    for (i, &v) in sorted.iter().enumerate() {
        if i > 0 && sorted[i - 1] + 1 == v {
            run += 1;
        } else {
            chunks += run.div_ceil(max as u64);
            run = 1;
        }
    }
    chunks + run.div_ceil(max as u64)
}

impl<const UNSAFE: u8> LinuxInvlpgb<UNSAFE> {
    fn mm(&mut self, mm: u32) -> &mut MmState {
        let i = mm as usize;
        if self.mms.len() <= i {
            self.mms.resize(i + 1, NO_MM);
        }
        &mut self.mms[i]
    }

    fn global_of(&self, mm: u32) -> Option<u32> {
        self.mms.get(mm as usize).and_then(|s| s.global_asid)
    }

    /// The global ASID of `mm`, if it has one.
    pub fn global_asid(&self, mm: u32) -> Option<u32> {
        self.global_of(mm)
    }

    /// Whether `mm` is in its transition to a global ASID.
    pub fn in_transition(&self, mm: u32) -> bool {
        self.mms.get(mm as usize).is_some_and(|s| s.transition)
    }

    /// The allocator (for tests and stats).
    pub fn asids(&self) -> &GlobalAsids {
        &self.asids
    }

    /// consider_global_asid(): one jiffy in `sample_period` for this process, and loaded
    /// on `min_cpus` or more non-lazy CPUs.
    pub fn consider_global_asid(&mut self, cores: &[CoreView], mm: u32, now: u64) {
        let p = self.params.sample_period;
        if (mm as u64) % p != (now / self.params.jiffy_cycles) % p {
            return;
        }
        self.considered += 1;
        let active = cores.iter().filter(|c| c.loaded_mm == Some(mm) && !c.lazy).count();
        if active >= self.params.min_cpus as usize {
            self.use_global_asid(mm);
        }
    }

    /// use_global_asid(): assign a global ASID (the transition starts), unless a rollover
    /// must first flush.
    fn use_global_asid(&mut self, mm: u32) {
        if self.global_of(mm).is_some() {
            return;
        }
        if self.asids.needs_rollover() {
            self.rollover_due = true;
            return;
        }
        if let Some(a) = self.asids.allocate() {
            // The process that held this ASID before: its entries may still be cached
            // under the same PCID (only until the rollover's flush, in Linux).
            // Linux hands an ASID out again only after the rollover's flush (and its
            // TLBSYNC) left nothing under it; the model's rollover flush is asynchronous,
            // so only the variant that skips that wait takes the old slot over.
            let before = self.asid_owner[a as usize].replace(mm).filter(|&p| p != mm && UNSAFE == EARLY_ASID_REUSE);
            if self.inherited.len() <= mm as usize {
                self.inherited.resize(mm as usize + 1, None);
            }
            self.inherited[mm as usize] = before;
            let s = self.mm(mm);
            s.global_asid = Some(a);
            s.transition = true;
            self.global_asids_assigned += 1;
        }
    }

    fn broadcast(&mut self, view: &OsView<'_>, plan: &mut FlushPlan, instructions: u64) {
        self.broadcasts += 1;
        self.invlpgb_instructions += instructions;
        for i in 0..view.cores.len() {
            plan.push(CoreId(i as u32));
        }
        plan.delivery = Some(Delivery::Broadcast {
            issue_cycles: self.params.invlpgb_issue_cycles * instructions,
            latency: self.params.invlpgb_latency_cycles,
            sync_cycles: self.params.tlbsync_cycles,
            tlbsync: UNSAFE != NO_TLBSYNC,
        });
    }
}

impl<const UNSAFE: u8> Coherence for LinuxInvlpgb<UNSAFE> {
    fn tick_interval(&self) -> Option<u64> {
        Some(self.params.jiffy_cycles)
    }

    fn min_latency(&self, _costs: &CostsConfig) -> Option<u64> {
        Some(self.params.invlpgb_latency_cycles.max(1))
    }

    fn plan(&mut self, view: &OsView<'_>, req: &FlushRequest, plan: &mut FlushPlan) {
        let me = req.initiator.0 as usize;
        let others = view.cpumask.iter().enumerate().any(|(c, &b)| b && c != me);
        if req.global {
            // flush_tlb_all() / invlpgb_flush_all_nonglobals(): one INVLPGB, one TLBSYNC.
            return self.broadcast(view, plan, 1);
        }
        if req.reason == FlushReason::Reclaim && others {
            // arch_tlbbatch_flush() with unmapped pages: every non-global entry, everywhere.
            self.reclaim_all_broadcasts += 1;
            self.reclaim_broadcasts.insert((req.mm, req.new_gen));
            return self.broadcast(view, plan, 1);
        }
        let mm = req.mm;
        if self.global_of(mm).is_some() {
            if self.mm(mm).transition {
                // finish_asid_transition(): a CPU running the mm on its per-CPU ASID?
                let straggler = view.cores.iter().enumerate().any(|(c, v)| view.cpumask[c] && v.loaded_mm == Some(mm) && self.on_global[c] != Some(mm));
                if straggler {
                    // flush_tlb_multi() in transition: on_each_cpu_mask, lazy CPUs included.
                    self.transition_flushes += 1;
                    for (c, &b) in view.cpumask.iter().enumerate() {
                        if b && c != me {
                            plan.push(CoreId(c as u32));
                        }
                    }
                    plan.delivery = Some(Delivery::Ipi);
                    return;
                }
                self.mm(mm).transition = false;
            }
            let s = self.mm(mm);
            s.broadcast_from = s.broadcast_from.min(req.new_gen);
            let n = if req.full || req.pages.len() as u64 > view.flush_ceiling as u64 {
                1
            } else {
                invlpgb_chunks(&req.pages, self.params.invlpgb_count_max).max(1)
            };
            return self.broadcast(view, plan, n);
        }
        // flush_tlb_multi(), then consider_global_asid().
        self.ipi_flushes += 1;
        plan.delivery = Some(Delivery::Ipi);
        linux_targets(view, req, plan);
        if others {
            self.consider_global_asid(view.cores, mm, view.now);
        }
    }

    fn on_deliver(&mut self, core: CoreId, me: &CoreView, req: &FlushRequest, flush_ceiling: u32) -> LocalFlush {
        if req.global || self.reclaim_broadcasts.contains(&(req.mm, req.new_gen)) {
            return LocalFlush::Broadcast { final_only: false, all: true, ceiling: flush_ceiling };
        }
        let s = self.mms.get(req.mm as usize).copied().unwrap_or(NO_MM);
        if req.new_gen >= s.broadcast_from {
            return LocalFlush::Broadcast { final_only: UNSAFE == FINAL_ONLY, all: false, ceiling: flush_ceiling };
        }
        if s.global_asid.is_some() {
            // An IPI of the transition (or one sent before the ASID was assigned, arriving
            // after): flush_tlb_func() switches a CPU running the mm to the global ASID.
            if me.loaded_mm != Some(req.mm) {
                return LocalFlush::LeaveMask;
            }
            self.on_global[core.0 as usize] = Some(req.mm);
            return LocalFlush::Broadcast { final_only: false, all: false, ceiling: flush_ceiling };
        }
        linux_on_deliver(me, req, flush_ceiling)
    }

    fn on_switch(&mut self, _core: CoreId, slot_gen: Option<u64>, mm_gen: u64) -> bool {
        // Always caught up when the broadcasts have reached the slot (see "Simplified").
        slot_gen != Some(mm_gen)
    }

    fn on_cr3_load(&mut self, core: CoreId, load: &Cr3Load, _fx: &mut Effects) {
        let global = self.global_of(load.to).is_some();
        if global && !load.kept_entries {
            self.switch_flushes_global += 1;
        }
        self.on_global[core.0 as usize] = if global { Some(load.to) } else { None };
    }

    fn on_tick(&mut self, core: CoreId, _now: u64, fx: &mut Effects) {
        if self.rollover_due {
            // reset_global_asid_space(): one broadcast of every non-global entry, then the
            // freed ASIDs are usable again.
            self.rollover_due = false;
            fx.push(Effect::Flush { initiator: core, mm: None, pages: Vec::new(), full: true });
            self.asids.rollover();
            // The inherited entries are gone with every non-global one.
            self.inherited.iter_mut().for_each(|i| *i = None);
        }
    }

    fn tag_inherited_from(&self, mm: u32) -> Option<u32> {
        self.inherited.get(mm as usize).copied().flatten()
    }

    fn on_mm_exit(&mut self, _core: CoreId, mm: u32, _fx: &mut Effects) {
        if let Some(a) = self.global_of(mm) {
            if UNSAFE == EARLY_ASID_REUSE {
                self.asids.free_now(a);
            } else {
                self.asids.free(a);
            }
            self.global_asids_freed += 1;
            let s = self.mm(mm);
            s.global_asid = None;
            s.transition = false;
        }
        self.reclaim_broadcasts.retain(|&(m, _)| m != mm);
    }

    fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({
            "ipi_flushes": self.ipi_flushes,
            "transition_flushes": self.transition_flushes,
            "broadcast_flushes": self.broadcasts,
            "invlpgb_instructions": self.invlpgb_instructions,
            "reclaim_all_broadcasts": self.reclaim_all_broadcasts,
            "global_asid_checks": self.considered,
            "global_asids_assigned": self.global_asids_assigned,
            "global_asids_freed": self.global_asids_freed,
            "global_asids_reused_before_rollover": self.asids.reused_before_rollover,
            "global_asid_rollovers": self.asids.rollovers,
            "switch_flushes_global": self.switch_flushes_global,
        })
    }
}
