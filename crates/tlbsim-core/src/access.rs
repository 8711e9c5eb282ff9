//! The one per-access path, shared by trace mode (`sim.rs`) and the OS model (`os/`): TLB
//! lookup, hit and miss counting, the walk a write to a clean entry makes to set the dirty
//! bit (Intel SDM §4.8), the walk on a miss and the fill, and the page fault. What differs
//! between the two engines is behind [`AccessEnv`]: which listeners see TLB and walker
//! events (a coherence policy's hooks in OS mode, nothing in trace mode), what a hit on an
//! entry the checker marked stale means, and what a fault does (trace mode maps the page
//! on first touch; the OS model runs its fault handler, which may map, copy, send a
//! shootdown or raise SIGSEGV).
//!
//! This is the hot path: [`access`] is generic over the environment, so each engine gets
//! its own monomorphised copy, with no dynamic dispatch and no allocation.

use crate::error::Result;
use crate::machine::{Machine, CLOCK_SHIFT};
use crate::tlb::hierarchy::{Found, L2};
use crate::tlb::set_assoc::{FLAG_DIRTY, FLAG_STALE, FLAG_WRITABLE};
use crate::tlb::TlbEntry;
use crate::types::{AccessKind, Vpn};
use crate::walk::WalkOutcome;

/// What the fault handler did.
pub enum FaultOutcome {
    /// The page is mapped now: walk again.
    Retry,
    /// The access is over: it completed some other way (the handler filled the TLB
    /// directly), was refused (SIGSEGV), or waits (the handler started a shootdown and the
    /// core now spins; the thread retries it later).
    Done,
}

/// The engine side of an access.
pub trait AccessEnv {
    /// False where the engine has established that the machine has no data caches (model
    /// "flat"), so that the access loop compiled for it holds no data-cache code: fewer
    /// registers live across the TLB-hit path (`tlbsim bench`'s L1-hit stream about 5%
    /// faster, session 40).
    const MAY_HAVE_CACHES: bool = true;
    /// The listener that hears `core`'s TLB fills and evictions.
    type Listener<'a>: crate::tlb::hierarchy::TlbListener
    where
        Self: 'a;
    fn machine(&mut self) -> &mut Machine;
    /// `core` and the listener, borrowed together (one bounds check on the hot path).
    fn core_and_listener(&mut self, core: usize) -> (&mut crate::machine::Core, Self::Listener<'_>);
    /// One hardware walk of `core`'s loaded page table.
    fn walk(&mut self, core: usize, va: u64, write: bool) -> (WalkOutcome, u64);
    /// Fill `core`'s TLBs after a walk.
    fn fill(&mut self, core: usize, e: TlbEntry, kind: AccessKind);
    /// INVLPG of `vpn` for the running context (a write met a read-only entry).
    fn drop_entry(&mut self, core: usize, vpn: Vpn);
    /// A hit on an entry the checker marked stale.
    fn stale_hit(&mut self, core: usize, vpn: Vpn, e: &TlbEntry);
    /// After a walk (the checker counts walks through stale page-walk-cache entries).
    fn after_walk(&mut self, core: usize, va: u64);
    /// A walk faulted (`present`: a write to a read-only page, else not mapped). `spent`
    /// is the translation time so far, which the environment may charge or extend.
    fn fault(&mut self, core: usize, va: u64, kind: AccessKind, present: bool, spent: &mut u64) -> Result<FaultOutcome>;
    /// After the access (apply what hooks asked for).
    fn finish(&mut self, _core: usize) {}
}

/// How many walk-fault rounds an access may take before it is an error: fault → handler →
/// walk again, with a copy-on-write or a protection fault in between.
const MAX_WALKS: usize = 4;

/// Simulate one memory access of `core` at `va`.
#[inline(always)]
pub fn access<E: AccessEnv>(env: &mut E, core: usize, va: u64, kind: AccessKind) -> Result<()> {
    let vpn = Vpn::of_va(va);
    let (c, mut listener) = env.core_and_listener(core);
    let (found, cycles) = c.tlbs.lookup(vpn, kind, &mut listener);
    drop(listener);
    c.stats.accesses += 1;
    let e = match found {
        Found::L1(e) => {
            c.stats.l1_tlb_hits += 1;
            e
        }
        Found::L2(e) => {
            c.stats.l1_tlb_misses += 1;
            c.stats.l2_tlb_hits += 1;
            e
        }
        Found::Miss => {
            c.stats.l1_tlb_misses += 1;
            if c.tlbs.present(L2) {
                c.stats.l2_tlb_misses += 1;
            }
            return walk_and_fill(env, core, va, kind, cycles as u64);
        }
    };
    // The common case: a hit on an entry that is not marked and allows the access.
    let needed = if kind.is_write() { FLAG_DIRTY | FLAG_WRITABLE } else { 0 };
    if e.flags & (FLAG_STALE | needed) == needed {
        c.stats.translation_cycles += cycles as u64;
        c.clock += (cycles as u64) << CLOCK_SHIFT;
        data(env, core, &e, vpn, va, kind);
        env.finish(core);
        return Ok(());
    }
    uncommon_hit(env, core, va, kind, &e, cycles as u64)
}

/// A hit on a marked entry, or a write through a clean or read-only one.
#[inline(never)]
// `e` by reference: passed by value, it was copied on the hit path ahead of the check that
// decides whether this call happens at all.
fn uncommon_hit<E: AccessEnv>(env: &mut E, core: usize, va: u64, kind: AccessKind, e: &TlbEntry, cycles: u64) -> Result<()> {
    let vpn = Vpn::of_va(va);
    let mut spent = cycles;
    if e.flags & FLAG_STALE != 0 {
        env.stale_hit(core, vpn, e);
    }
    if !kind.is_write() || e.flags & FLAG_DIRTY != 0 && e.flags & FLAG_WRITABLE != 0 {
        finish(env, core, spent);
        data(env, core, e, vpn, va, kind);
        return Ok(());
    }
    if e.flags & FLAG_WRITABLE != 0 {
        let (cyc, still_mapped) = dirty_walk(env, core, va, e);
        spent += cyc;
        if still_mapped {
            finish(env, core, spent);
            data(env, core, e, vpn, va, kind);
            return Ok(());
        }
    }
    // A write through a read-only (or vanished) translation raises #PF; the handler
    // finds the page table's view and the core drops its entry.
    env.drop_entry(core, vpn);
    walk_and_fill(env, core, va, kind, spent)
}

/// A miss (or a write the entry did not allow): walk, fill, or fault and walk again.
#[inline(never)]
fn walk_and_fill<E: AccessEnv>(env: &mut E, core: usize, va: u64, kind: AccessKind, mut spent: u64) -> Result<()> {
    let vpn = Vpn::of_va(va);
    let write = kind.is_write();
    for _ in 0..MAX_WALKS {
        let (outcome, cyc) = env.walk(core, va, write);
        spent += cyc;
        env.after_walk(core, va);
        match outcome {
            WalkOutcome::Mapped { pte, size } => {
                let flags = crate::tlb::set_assoc::flags_of_pte(pte);
                let e = env.machine().cores[core].tlbs.entry(vpn, crate::page_table::pte_pfn(pte), size, flags);
                env.fill(core, e, kind);
                finish(env, core, spent);
                data(env, core, &e, vpn, va, kind);
                return Ok(());
            }
            WalkOutcome::Fault { present } => match env.fault(core, va, kind, present, &mut spent)? {
                FaultOutcome::Retry => {}
                FaultOutcome::Done => {
                    finish(env, core, spent);
                    return Ok(());
                }
            },
        }
    }
    Err(crate::error::Error::Sim(format!("access to {va:#x} on core {core}: still faulting after its handler ran")))
}

/// A write hit a clean, writable entry: the processor walks again to set the PTE's dirty
/// bit. Returns the walk's cycles and whether the mapping was still there (if not, the
/// access faults like a miss).
#[cold]
fn dirty_walk<E: AccessEnv>(env: &mut E, core: usize, va: u64, e: &TlbEntry) -> (u64, bool) {
    env.machine().cores[core].tlbs.dirty_walk = true;
    let (outcome, cycles) = env.walk(core, va, true);
    env.machine().cores[core].tlbs.dirty_walk = false;
    match outcome {
        WalkOutcome::Mapped { .. } => {
            let c = &mut env.machine().cores[core];
            c.stats.dirty_walks += 1;
            c.tlbs.mark_dirty(e);
            (cycles, true)
        }
        WalkOutcome::Fault { .. } => (cycles, false),
    }
}

/// The data access behind a translation (model "cache" only: `Machine::data_access`;
/// instruction fetches are left to the base CPI, which counts the instruction cache).
#[inline(always)]
fn data<E: AccessEnv>(env: &mut E, core: usize, e: &TlbEntry, vpn: Vpn, va: u64, kind: AccessKind) {
    let m = env.machine();
    if E::MAY_HAVE_CACHES && m.memsys.is_some() && !kind.is_fetch() {
        m.data_access(core, crate::types::Pfn(e.pfn.0 + (vpn.0 - e.vpn.0)), va);
    }
}

#[inline(always)]
fn finish<E: AccessEnv>(env: &mut E, core: usize, spent: u64) {
    let c = &mut env.machine().cores[core];
    c.stats.translation_cycles += spent;
    c.clock += spent << CLOCK_SHIFT;
    env.finish(core);
}
