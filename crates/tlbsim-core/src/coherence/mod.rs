//! TLB-coherence policies: who is flushed after a page-table change, how, and when
//! (DESIGN.md "The shootdown"). One file per policy, each implementing [`Coherence`];
//! the OS model calls the trait and never names a policy. `os.coherence` selects one by
//! name through [`dispatch`], which monomorphises the engine for it (no dynamic dispatch
//! on the access path).
//!
//! The split of work: the OS model (crate::os) owns the kernel's state — per address space
//! its `mm_cpumask` and `tlb_gen`, per core its loaded mm, lazy flag and PCID slots — and
//! the mechanics and timing of delivery (IPI send, delivery latency, interrupt entry,
//! INVLPG or full flush, ack, the initiator's wait; DiDi §V-A's anatomy). A policy makes
//! the decisions: the target set and delivery path of a request ([`Coherence::plan`]),
//! what a target does when the request reaches it ([`Coherence::on_deliver`]), and whether
//! loading an address space on a core must flush it ([`Coherence::on_switch`]).

pub mod linux;
pub mod none;
pub mod oracle;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::types::{CoreId, Vpn};

/// Policy names `os.coherence` accepts.
pub const NAMES: [&str; 3] = ["linux", "oracle", "none"];

/// Why the page tables changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushReason {
    Munmap,
    Mprotect,
    MadviseDontneed,
    Msync,
    CopyOnWrite,
    Fork,
    Migration,
    Reclaim,
}

/// One flush request: a batch of page-table changes to one address space (mmu_gather's
/// `tlb_finish_mmu`, one mprotect, one copy-on-write break ...).
#[derive(Clone, Debug)]
pub struct FlushRequest {
    pub initiator: CoreId,
    /// Address space (process id).
    pub mm: u32,
    /// The 4 KiB pages whose translations changed (for a 2 MiB page, its first page).
    pub pages: Vec<Vpn>,
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
}

/// A policy's answer to a request.
#[derive(Clone, Debug, Default)]
pub struct FlushPlan {
    /// Cores to reach. The initiator, if named, flushes itself at no delivery cost (it
    /// always does when it runs the address space).
    pub targets: Vec<CoreId>,
    pub delivery: Option<Delivery>,
}

/// What a core does with a request that reached it (or, for the initiator, with its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalFlush {
    /// Nothing to do (already caught up).
    Nothing,
    /// INVLPG each page of the request.
    Pages,
    /// Flush the address space's entries entirely.
    Full,
    /// The core no longer runs this address space: it leaves its `mm_cpumask`, flushes
    /// nothing.
    LeaveMask,
    /// A lazy core: stop borrowing the address space (switch to the kernel's own page
    /// table), which flushes its entries.
    DropLazyMm,
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
}

pub trait Coherence {
    /// Whether `plan` reads `OsView::holders` (computing it costs a probe of every TLB).
    fn wants_holders(&self) -> bool {
        false
    }

    /// Targets and delivery path of `req`. The initiator's own flush is decided by
    /// `on_deliver` on the initiator.
    fn plan(&mut self, view: &OsView<'_>, req: &FlushRequest, plan: &mut FlushPlan);

    /// What core `core` (in state `me`) does when `req` reaches it.
    fn on_deliver(&mut self, core: CoreId, me: &CoreView, req: &FlushRequest, flush_ceiling: u32) -> LocalFlush;

    /// Core `core` loads address space `mm` whose `tlb_gen` is `mm_gen`, into a PCID slot
    /// that last held it at generation `slot_gen` (`None`: the slot held another address
    /// space or nothing). True: flush the slot's entries.
    fn on_switch(&mut self, core: CoreId, slot_gen: Option<u64>, mm_gen: u64) -> bool;
}

/// The engine, generic over the policy: [`dispatch`] calls `run` with the policy
/// `os.coherence` names.
pub trait WithPolicy {
    type Output;
    fn run<P: Coherence>(self, policy: P) -> Self::Output;
}

/// Build the policy `cfg.os.coherence` names and hand it to `f`.
pub fn dispatch<F: WithPolicy>(cfg: &Config, f: F) -> Result<F::Output> {
    Ok(match cfg.os.coherence.as_str() {
        "linux" => f.run(linux::Linux::new(cfg)),
        "oracle" => f.run(oracle::Oracle),
        "none" => f.run(none::NoRemoteFlush),
        other => return Err(unknown(other)),
    })
}

/// Check a policy name (config validation).
pub fn check_name(name: &str) -> Result<()> {
    if NAMES.contains(&name) {
        Ok(())
    } else {
        Err(unknown(name))
    }
}

fn unknown(name: &str) -> Error {
    Error::config("os.coherence", format!("{name:?} is not a coherence policy: use one of {}", NAMES.map(|n| format!("{n:?}")).join(", ")))
}

/// Linux's decision for a core a request reached (arch/x86/mm/tlb.c flush_tlb_func), shared
/// by the policies that keep Linux's generation tracking.
pub fn linux_on_deliver(me: &CoreView, req: &FlushRequest, flush_ceiling: u32) -> LocalFlush {
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
