//! TLB-coherence policies: who is flushed after a page-table change, how, and when
//! (docs/ARCHITECTURE.md "The shootdown", "Axes and their hooks"). One file per policy, each
//! implementing [`Coherence`] (the hooks, all with no-op defaults) and [`Policy`] (its
//! parameters and constructor), registered by one line in [`policies!`] below, which makes
//! the name list, the parameter defaults and the dispatch. The OS model calls the trait and
//! never names a policy; [`dispatch`] monomorphises the engine for the chosen one, so the
//! per-access hooks (TLB inserts and evictions, A-bit sets) cost nothing for a policy that
//! leaves them at their defaults.
//!
//! The split of work: the OS model (crate::os) owns the kernel's state — per address space
//! its `mm_cpumask` and `tlb_gen`, per core its loaded mm, lazy flag and PCID slots — and
//! the mechanics and timing of delivery (IPI send, delivery latency, interrupt entry,
//! INVLPG or full flush, ack, the initiator's wait; DiDi §V-A's anatomy; or a hardware
//! message, or a deferred flush). A policy makes the decisions and may observe:
//!
//! | hook | when |
//! |---|---|
//! | [`Coherence::plan`] | a page-table change needs coherence: targets, per-target pages, delivery path |
//! | [`Coherence::on_deliver`] | the request reaches a core: nothing, pages, full flush, leave the mask |
//! | [`Coherence::on_switch`] | a core loads an address space whose tag may hold old entries |
//! | [`Coherence::on_tlb_insert`], [`Coherence::on_tlb_evict`] | every TLB fill and removal of every core |
//! | [`Coherence::on_accessed_set`] | the walker set a leaf's A bit (0 → 1) |
//! | [`Coherence::on_full_flush`] | a core flushed an address space or everything, with the cause |
//! | [`Coherence::on_cr3_load`] | every CR3 write, in every tagging mode |
//! | [`Coherence::on_tick`] | a periodic timer tick per core ([`Coherence::tick_interval`]) |
//! | [`Coherence::on_frame_alloc`], [`Coherence::on_frame_free`] | a data frame leaves or enters the allocator (with its `technique_word`, [`crate::memory::FrameWord::Technique`]) |
//! | [`Coherence::choose_mmap_va`], [`Coherence::on_range_unmapped`] | placing an mmap; an unmapped range that the policy may hold back |
//! | [`Coherence::on_demand_fault`] | a demand fault mapped a PTE: fill the faulting core's TLB directly instead of a walk |
//! | [`Coherence::pte_accessed`], [`Coherence::on_accessed_cleared`] | the OS's view of the A bit, and its clears |
//! | [`Coherence::on_pte_write`] | every PTE write of the OS (the PTE-write layer, `os/pte.rs`) |
//! | [`Coherence::on_mm_exit`] | an address space was torn down (its last thread exited) |
//!
//! Hooks that want the machine to do something (invalidate another core's entry, charge
//! cycles, start a flush, release a held range) push an [`Effect`]; the engine applies
//! them right after the hook returns.

pub mod abis;
pub mod arm_tlbi;
pub mod didi;
pub mod latr;
pub mod linux;
pub mod linux_invlpgb;
pub mod none;
pub mod oracle;
pub mod rar;
pub mod template;

use crate::config::{Config, CostsConfig};
use crate::error::Result;
use crate::registry::Plugin;
use crate::tlb::TlbEntry;
use crate::types::{CoreId, Pfn, Vpn};

crate::registry! {
    what: "a coherence policy", select: "os.coherence", table: "coherence", bound: Policy;
    "linux" => linux::Linux, "Linux 6.x's shootdown (arch/x86/mm/tlb.c): mm_cpumask targets, lazy CPUs skipped, per-page flush up to the ceiling, synchronous IPIs";
    "linux-invlpgb" => linux_invlpgb::LinuxInvlpgb, "Linux 6.15+ on AMD INVLPGB/TLBSYNC (arch/x86/mm/tlb.c): IPIs until a process runs on 4+ CPUs, then a global ASID and broadcast invalidation";
    "rar" => rar::Rar, "Intel RAR (Remote Action Request, Linux RFC 2025): microcode applies the flush on the targets, even with interrupts off; the initiator polls status bytes";
    "arm-tlbi" => arm_tlbi::ArmTlbi, "arm64 broadcast TLBI (asm/tlbflush.h): TLBI …IS per page to every core, one DSB ISH waits for all; never an IPI";
    "oracle" => oracle::Oracle, "lower bound: flushes exactly the TLBs that hold a stale entry, instantly and at no cost";
    "none" => none::NoRemoteFlush, "never flushes a remote TLB: unsafe on purpose, for testing the checker";
    "didi" => didi::Didi<0>, "DiDi (PACT 2011): a shared TLB directory names the sharers, PTLBI messages invalidate without an IPI";
    "didi-directory-only" => didi::Didi<1>, "DiDi's directory for the target set, delivered by IPIs";
    "didi-ptlbi-only" => didi::Didi<2>, "DiDi's PTLBI delivery to Linux's target set";
    "abis" => abis::Abis<2, false>, "ABIS (ATC 2017): access-bit tracking of the cores that may cache a PTE";
    "abis-gap1" => abis::Abis<1, false>, "ABIS with a version gap of 1: unsafe on purpose (ABIS §4.2)";
    "abis-naive-insert" => abis::Abis<2, true>, "ABIS with a naive direct insertion: unsafe on purpose (ABIS §4.1)";
    "latr" => latr::Latr<true>, "LATR (ASPLOS 2018): lazy invalidation at the next tick or context switch, memory held back until every core swept";
    "latr-early-reuse" => latr::Latr<false>, "LATR that reuses memory before every core swept: unsafe on purpose";
    "linux-invlpgb-no-tlbsync" => linux_invlpgb::LinuxInvlpgb<1>, "linux-invlpgb that frees pages and page tables without waiting for TLBSYNC: unsafe on purpose (freed frames reused while INVLPGBs are still on their way)";
    "linux-invlpgb-final-only" => linux_invlpgb::LinuxInvlpgb<2>, "linux-invlpgb with FINAL_ONLY INVLPGBs even when page tables are freed: unsafe on purpose (walk caches keep pointing to freed tables)";
    "linux-invlpgb-early-asid-reuse" => linux_invlpgb::LinuxInvlpgb<3>, "linux-invlpgb that reuses a freed global ASID before the rollover's flush: unsafe on purpose (the new process hits the old one's entries)";
    "arm-tlbi-final-only" => arm_tlbi::ArmTlbi<false>, "arm-tlbi with last-level TLBIs (VALE1IS) even when page tables are freed: unsafe on purpose (walk caches keep pointing to freed tables)";
    "rar-no-wait" => rar::Rar<false>, "RAR whose initiator does not wait for the status bytes: unsafe on purpose (frees pages while targets still translate to them)";
}

/// Build the policy `cfg.os.coherence` names (with its `[coherence.<name>]` parameters)
/// and hand it to `f`, monomorphised: the per-access hooks of a policy that leaves them
/// at their defaults cost nothing.
pub fn dispatch<F: WithPolicy>(cfg: &Config, f: F) -> Result<F::Output> {
    struct Build<'a, F>(&'a Config, F);
    impl<F: WithPolicy> Visit for Build<'_, F> {
        type Output = Result<F::Output>;
        fn visit<T: Policy>(self, name: &'static str) -> Self::Output {
            let params = crate::registry::parse::<T::Params>("coherence", name, self.0.coherence.get(name))?;
            Ok(self.1.run(T::build(self.0, params)?))
        }
    }
    visit(&cfg.os.coherence, Build(cfg, f))?
}

/// Check every `[coherence.<name>]` table (names and keys), and the selected name; the
/// selected policy is built once and dropped, so its own checks (DiDi's directory shape)
/// run before any run starts, in `tlbsim config` too.
pub fn check(cfg: &Config) -> Result<()> {
    check_name(&cfg.os.coherence)?;
    check_params(&cfg.coherence)?;
    struct Discard;
    impl WithPolicy for Discard {
        type Output = ();
        fn run<P: Coherence>(self, _policy: P) {}
    }
    dispatch(cfg, Discard)
}

/// A registered policy: its `[coherence.<name>]` parameters ([`crate::registry::Plugin`])
/// and its constructor.
pub trait Policy: Coherence + Plugin + Sized {
    fn build(cfg: &Config, params: Self::Params) -> Result<Self>;
}

pub use crate::registry::NoParams;

/// Why the page tables changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushReason {
    /// munmap, and exit's teardown of the address space.
    Munmap,
    Mprotect,
    MadviseDontneed,
    Msync,
    CopyOnWrite,
    Fork,
    Migration,
    Reclaim,
    /// AutoNUMA's scan made a range PROT_NONE (change_prot_numa; os/numa.rs).
    NumaHint,
    /// A policy asked for it (an [`Effect::Flush`], e.g. an allocation-time shootdown).
    Policy,
}

impl FlushReason {
    /// Names in stats.json (`shootdowns_sent_by_reason`), in declaration order.
    pub const NAMES: [&'static str; 10] =
        ["munmap", "mprotect", "madvise_dontneed", "msync", "copy_on_write", "fork", "migration", "reclaim", "numa_hint", "policy"];
}

/// One flush request: a batch of page-table changes to one address space (mmu_gather's
/// `tlb_finish_mmu`, one mprotect, one copy-on-write break ...), or a global one.
#[derive(Clone, Debug)]
pub struct FlushRequest {
    pub initiator: CoreId,
    /// Address space (process id). For a global request, the initiator's (or u32::MAX).
    pub mm: u32,
    /// Not one address space: every core reached flushes every address space's entries
    /// (e.g. a frame leaving its recycling context may be cached under any of them).
    pub global: bool,
    /// The 4 KiB pages whose translations changed (for a 2 MiB page, its first page).
    pub pages: Vec<Vpn>,
    /// Per page of `pages`, its leaf PTE before the change, with the A/D bits as read
    /// atomically with the change (OR-ed over replicas); 0 when the page was not mapped.
    pub old_ptes: Vec<u64>,
    /// Frames the change frees once the protocol is over (mmu_gather).
    pub frames: Vec<Pfn>,
    /// Of `old_ptes`, how many mapped a page-cache page (file data: it stays in the page
    /// cache, so it is not among `frames`).
    pub page_cache_pages: u32,
    pub reason: FlushReason,
    /// Page-table pages are being freed (page-walk caches may point to them).
    pub freed_tables: bool,
    /// The request asks for a full flush whatever its size (fork's flush_tlb_mm).
    pub full: bool,
    /// The address space's `tlb_gen` this request brings it to.
    pub new_gen: u64,
}

/// How a policy reaches its targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Inter-processor interrupts, with the initiator waiting for every ack.
    Ipi,
    /// Instantly and at no cost (the `oracle` lower bound).
    Free,
    /// A hardware invalidation message (e.g. DiDi's PTLBI): reaches each target
    /// `latency` cycles after the initiator sent it (having paid `initiator_cycles`), is
    /// applied without interrupting the target (which pays `target_cycles`, e.g. draining
    /// its load/store queue), and acked; the initiator waits for the last ack.
    Message { latency: u64, initiator_cycles: u64, target_cycles: u64 },
    /// The machine's broadcast invalidation (AMD INVLPGB, completed by TLBSYNC; see
    /// `linux_invlpgb.rs`): the initiator pays `issue_cycles` (its INVLPGB instructions),
    /// then every target receives the invalidation `latency` cycles later, applied by
    /// hardware (no interrupt, no cost to the target: [`LocalFlush::Broadcast`] says what
    /// it drops); the initiator's TLBSYNC waits for the last one and costs `sync_cycles`
    /// more. A policy names every core of the machine (the initiator included): INVLPGB
    /// reaches them all. `tlbsync: false` (unsafe on purpose) skips the TLBSYNC: the
    /// initiator goes on and frees the request's frames and page tables at once, while
    /// the invalidations are still on their way.
    Broadcast { issue_cycles: u64, latency: u64, sync_cycles: u64, tlbsync: bool },
    /// Intel's Remote Action Request (`rar.rs`): the initiator writes the payload and each
    /// target's action byte, then signals the targets through the APIC (the IPI's send
    /// cost and delivery latency); each target's microcode applies it on arrival, even with
    /// interrupts disabled (no handler, no interrupt window), paying `service_cycles`; the
    /// initiator polls every target's status byte, the last read `status_cycles` after
    /// that target finished.
    /// `wait: false` (unsafe on purpose, `rar-no-wait`): the initiator does not poll the
    /// status bytes; it goes on and frees what the request releases at once.
    RemoteAction { service_cycles: u64, status_cycles: u64, wait: bool },
    /// Queued on each target and applied at its next timer tick or context switch; the
    /// initiator does not wait. What the request frees is released when every target has
    /// applied it.
    Deferred,
}

/// A policy's answer to a request.
#[derive(Clone, Debug, Default)]
pub struct FlushPlan {
    /// Cores to reach. The initiator, if named, flushes itself at no delivery cost (it
    /// always does when it runs the address space).
    pub targets: Vec<CoreId>,
    /// Per target (parallel to `targets`; shorter = the rest get all pages): the subset of
    /// the request's pages that target flushes (`None`: all of them).
    pub pages_of: Vec<Option<Vec<Vpn>>>,
    /// `None`: nobody to reach (the same as `Some(Free)` with no targets).
    pub delivery: Option<Delivery>,
    /// Per target (parallel to `targets`; shorter, or `None` = `delivery`): a path of its
    /// own, so that one request reaches some cores by IPI and queues on others. A request
    /// mixes at most one synchronous path (IPI or message) with deferred and free ones, and
    /// a broadcast is never mixed (it reaches every core).
    pub delivery_of: Vec<Option<Delivery>>,
}

impl FlushPlan {
    /// Reach `core` for all pages.
    pub fn push(&mut self, core: CoreId) {
        self.targets.push(core);
    }
    /// Reach `core` for `pages` only.
    pub fn push_pages(&mut self, core: CoreId, pages: Vec<Vpn>) {
        while self.pages_of.len() < self.targets.len() {
            self.pages_of.push(None);
        }
        self.targets.push(core);
        self.pages_of.push(Some(pages));
    }
    /// Reach the target last pushed by `delivery` instead of the plan's.
    pub fn set_last_delivery(&mut self, delivery: Delivery) {
        let last = self.targets.len() - 1;
        self.delivery_of.resize(self.targets.len(), None);
        self.delivery_of[last] = Some(delivery);
    }
}

/// What a core does with a request that reached it (or, for the initiator, with its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalFlush {
    /// Nothing to do (already caught up).
    Nothing,
    /// INVLPG each page of the request.
    Pages,
    /// Flush the address space's entries entirely (every address space's for a global
    /// request).
    Full,
    /// The core no longer runs this address space: it leaves its `mm_cpumask`, flushes
    /// nothing.
    LeaveMask,
    /// A lazy core: stop borrowing the address space (switch to the kernel's own page
    /// table), which flushes its entries.
    DropLazyMm,
    /// A hardware invalidation by address-space tag reached this core (AMD INVLPGB, Arm's
    /// broadcast TLBI, Intel RAR's microcode): drop the request's pages of the address
    /// space's tag whatever the core runs (idle, lazy or another mm), with the page-walk
    /// caches unless `final_only`; the whole tag if the request is full, has more pages
    /// than `ceiling` (the mechanism's own limit: Linux's 33-page flush ceiling for
    /// INVLPGB, 512 TLBIs for arm64, 63 pages per RAR payload), or the tag missed an
    /// earlier generation; every non-global entry of every tag if `all` (or the request is
    /// global). Costs the core nothing (hardware).
    Broadcast { final_only: bool, all: bool, ceiling: u32 },
}

/// What a core's kernel state looks like to a policy.
#[derive(Clone, Copy, Debug)]
pub struct CoreView {
    /// Address space whose page table is loaded (`None`: the kernel's own).
    pub loaded_mm: Option<u32>,
    /// Running the idle task or a kernel thread with `loaded_mm` borrowed.
    pub lazy: bool,
    /// `tlb_gen` of `loaded_mm` this core's TLB has caught up with.
    pub caught_up_gen: u64,
    /// Socket of the core.
    pub socket: u32,
}

/// The kernel state a policy may read when planning.
pub struct OsView<'a> {
    pub cores: &'a [CoreView],
    /// `mm_cpumask` of the request's address space.
    pub cpumask: &'a [bool],
    /// Per core: whether its TLB holds a translation the request makes stale (what only a
    /// simulator knows; filled only for a policy whose `wants_holders` is true).
    pub holders: &'a [bool],
    /// `os.flush_ceiling` (Linux's tlb_single_page_flush_ceiling).
    pub flush_ceiling: u32,
    /// The engine's clock on the initiator.
    pub now: u64,
}

/// Why a core flushed entirely (passed to [`Coherence::on_full_flush`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FullFlushCause {
    Shootdown,
    Ceiling,
    ContextSwitch,
    LazySwitch,
    TagCapacity,
    TagForced,
    /// A policy's own [`Effect::FlushMm`].
    Policy,
    /// The MMU flushed on its own (`machine.tlb.involuntary_full_flush_per_mcycles`).
    Involuntary,
}

/// A CR3 write on a core (passed to [`Coherence::on_cr3_load`]).
#[derive(Clone, Copy, Debug)]
pub struct Cr3Load {
    /// The address space loaded before (`None`: the kernel's own page table).
    pub from: Option<u32>,
    pub to: u32,
    /// The hardware tag the TLB now fills and looks up with.
    pub tag: u16,
    /// Whether entries were kept (false: the write flushed the TLB or the tag).
    pub kept_entries: bool,
}

/// What a frame is being allocated for (passed to [`Coherence::on_frame_alloc`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameUse {
    /// Address space it will be mapped in (u32::MAX for the page cache or the zero page).
    pub mm: u32,
    /// A page-cache page (file data) rather than anonymous memory.
    pub file: bool,
}

/// What a hook asks the machine to do; applied by the engine right after the hook returns.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Remove core `core`'s translations of 4 KiB page `vpn` in address space `mm` (every
    /// page size covering it), by hardware: no interrupt, no IPI (e.g. an inclusive
    /// directory's back-invalidation).
    InvalidatePage { core: CoreId, mm: u32, vpn: Vpn },
    /// Flush every translation of `mm` on `core` (`mm = None`: everything).
    FlushMm { core: CoreId, mm: Option<u32> },
    /// Charge `cycles` of work to `core`.
    Charge { core: CoreId, cycles: u64 },
    /// Start a flush request from `initiator` (an allocation-time shootdown, ...): of
    /// `pages` of `mm`, or global (`mm = None`: every address space).
    Flush { initiator: CoreId, mm: Option<u32>, pages: Vec<Vpn>, full: bool },
    /// A range this policy held back in [`Coherence::on_range_unmapped`] may be reused.
    ReleaseRange { mm: u32, start: u64, end: u64 },
    /// Clear the A bit of the leaf mapping `va` in `mm` (no flush), as the kernel on `core`.
    ClearAccessed { core: CoreId, mm: u32, va: u64 },
}

/// Effects pushed by hooks.
pub type Effects = Vec<Effect>;

pub trait Coherence {
    // ----- Capabilities -----

    /// Whether `plan` reads `OsView::holders` (computing it costs a probe of every TLB).
    fn wants_holders(&self) -> bool {
        false
    }

    /// Cycles between two timer ticks of a core ([`Coherence::on_tick`]); `None`: no ticks.
    fn tick_interval(&self) -> Option<u64> {
        None
    }

    /// The smallest latency a delivery path of this policy can have (the engine's quantum
    /// is derived from the smallest latency of any active path, so no message reaches a
    /// core that ran past its arrival by more than the quantum).
    fn min_latency(&self, _costs: &CostsConfig) -> Option<u64> {
        None
    }

    // ----- Decisions -----

    /// Targets, per-target pages and delivery path of `req`. The initiator's own flush is
    /// decided by `on_deliver` on the initiator.
    fn plan(&mut self, view: &OsView<'_>, req: &FlushRequest, plan: &mut FlushPlan);

    /// What core `core` (in state `me`) does when `req` reaches it.
    fn on_deliver(&mut self, core: CoreId, me: &CoreView, req: &FlushRequest, flush_ceiling: u32) -> LocalFlush;

    /// Core `core` loads address space `mm` whose `tlb_gen` is `mm_gen`, into a tag that
    /// last held it at generation `slot_gen` (`None`: the tag held another address space or
    /// nothing). True: flush the tag's entries.
    fn on_switch(&mut self, core: CoreId, slot_gen: Option<u64>, mm_gen: u64) -> bool;

    /// A demand fault on `core` mapped `pte` at `va` of `mm` (one of `mapped_together` PTEs
    /// the fault mapped, fault-around included). `Some(cycles)`: fill `core`'s TLB with it
    /// directly (no walk, so the PTE's A bit stays clear), charging `cycles`.
    fn on_demand_fault(&mut self, _core: CoreId, _mm: u32, _va: u64, _pte: u64, _mapped_together: u32, _fx: &mut Effects) -> Option<u64> {
        None
    }

    /// The OS's view of a PTE's accessed bit (Linux's `ptep_test_and_clear_young` reads).
    fn pte_accessed(&self, _mm: u32, _va: u64, pte: u64) -> bool {
        pte & crate::page_table::PTE_ACCESSED != 0
    }

    // ----- Events -----

    /// The OS cleared the accessed bit of `va`'s PTE (reclaim's scan); `old_pte` before.
    fn on_accessed_cleared(&mut self, _core: CoreId, _mm: u32, _va: u64, _old_pte: u64, _fx: &mut Effects) {}

    /// The OS writes a PTE of `mm` (every path: fault, munmap, mprotect, ...). `new` may be
    /// changed (e.g. clear A opportunistically); `old` has A/D OR-ed over replicas.
    fn on_pte_write(&mut self, _core: CoreId, _mm: u32, _va: u64, _old: u64, _new: &mut u64, _fx: &mut Effects) {}

    /// Core `core` inserted `entry` into TLB structure `structure` (`tlb::hierarchy::NAMES`).
    #[inline(always)]
    fn on_tlb_insert(&mut self, _core: CoreId, _structure: usize, _entry: &TlbEntry, _fx: &mut Effects) {}

    /// `entry` left core `core`'s structure `structure` (replacement, invalidation, flush).
    #[inline(always)]
    fn on_tlb_evict(&mut self, _core: CoreId, _structure: usize, _entry: &TlbEntry, _fx: &mut Effects) {}

    /// The walker on `core` set the accessed bit of the leaf PTE mapping `va` in `mm`.
    #[inline(always)]
    fn on_accessed_set(&mut self, _core: CoreId, _mm: u32, _va: u64, _fx: &mut Effects) {}

    /// Core `core` flushed `mm`'s entries entirely (`None`: every entry).
    fn on_full_flush(&mut self, _core: CoreId, _mm: Option<u32>, _cause: FullFlushCause, _fx: &mut Effects) {}

    /// Core `core` wrote CR3.
    fn on_cr3_load(&mut self, _core: CoreId, _load: &Cr3Load, _fx: &mut Effects) {}

    /// Periodic timer tick on `core` (every [`Coherence::tick_interval`] cycles while it
    /// runs or idles).
    fn on_tick(&mut self, _core: CoreId, _now: u64, _fx: &mut Effects) {}

    /// A data frame is allocated for `usage` on `core` (its `technique_word`
    /// is what it was when the frame was freed).
    fn on_frame_alloc(&mut self, _core: CoreId, _pfn: Pfn, _technique_word: &mut u64, _usage: FrameUse, _fx: &mut Effects) {}

    /// A data frame goes back to the allocator from `core` (after any flush it needed).
    fn on_frame_free(&mut self, _core: CoreId, _pfn: Pfn, _technique_word: &mut u64, _fx: &mut Effects) {}

    /// Choose the address of a new `len`-byte mapping of `mm`; `default_va` is Linux's
    /// top-down choice, `is_free(lo, hi)` says whether `[lo, hi)` is unmapped and not held.
    fn choose_mmap_va(&mut self, _mm: u32, _len: u64, default_va: u64, _is_free: &dyn Fn(u64, u64) -> bool) -> u64 {
        default_va
    }

    /// The last thread of `mm` exited and its address space was torn down (exit_mmap):
    /// e.g. give back a per-process resource (`linux-invlpgb`'s global ASID).
    fn on_mm_exit(&mut self, _core: CoreId, _mm: u32, _fx: &mut Effects) {}

    /// The exited address space whose hardware tag `mm` was given (a global ASID handed out
    /// again before any flush of its entries: `linux-invlpgb-early-asid-reuse`): with PCID
    /// tags, a CPU still holding the old one's slot loads `mm` into it without a flush, and
    /// `mm` hits what the old one left there (the checker marks those entries stale).
    fn tag_inherited_from(&self, _mm: u32) -> Option<u32> {
        None
    }

    /// `[start, end)` of `mm` was unmapped. True: hold it back (mmap will not reuse it)
    /// until the policy pushes [`Effect::ReleaseRange`].
    fn on_range_unmapped(&mut self, _core: CoreId, _mm: u32, _start: u64, _end: u64, _fx: &mut Effects) -> bool {
        false
    }

    /// True once the policy cannot go on (e.g. a policy written in Python raised an
    /// exception in a hook): the engine stops the run with an error at its next step.
    fn failed(&self) -> bool {
        false
    }

    // ----- Results -----

    /// Policy statistics, written to `totals.coherence` in stats.json.
    fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({})
    }

    /// Per-core policy statistics (`per_core[i].coherence`), if any.
    fn core_stats_json(&self, _core: CoreId) -> Option<serde_json::Value> {
        None
    }
}

/// The engine, generic over the policy: [`dispatch`] calls `run` with the policy
/// `os.coherence` names.
pub trait WithPolicy {
    type Output;
    fn run<P: Coherence>(self, policy: P) -> Self::Output;
}

/// Linux's decision for a core a request reached (arch/x86/mm/tlb.c flush_tlb_func), shared
/// by the policies that keep Linux's generation tracking.
pub fn linux_on_deliver(me: &CoreView, req: &FlushRequest, flush_ceiling: u32) -> LocalFlush {
    if req.global {
        return LocalFlush::Full;
    }
    if me.loaded_mm != Some(req.mm) {
        return LocalFlush::LeaveMask;
    }
    if me.lazy {
        return LocalFlush::DropLazyMm;
    }
    if me.caught_up_gen >= req.new_gen {
        return LocalFlush::Nothing;
    }
    // A partial flush is enough only if this request is the very next generation: an
    // older one was skipped and its pages are unknown here.
    if !req.full && me.caught_up_gen + 1 == req.new_gen && req.pages.len() as u64 <= flush_ceiling as u64 {
        LocalFlush::Pages
    } else {
        LocalFlush::Full
    }
}

/// Linux's target set for `req` (native_flush_tlb_multi + should_flush_tlb): the CPUs of
/// the mask other than the initiator, skipping lazy CPUs and CPUs running another mm unless
/// page-table pages are freed. A global request reaches every other core.
pub fn linux_targets(view: &OsView<'_>, req: &FlushRequest, plan: &mut FlushPlan) {
    for (i, c) in view.cores.iter().enumerate() {
        if i as u32 == req.initiator.0 {
            continue;
        }
        if req.global {
            plan.targets.push(CoreId(i as u32));
            continue;
        }
        if !view.cpumask[i] {
            continue;
        }
        let wanted = req.freed_tables || (!c.lazy && c.loaded_mm == Some(req.mm));
        if wanted {
            plan.targets.push(CoreId(i as u32));
        }
    }
}
