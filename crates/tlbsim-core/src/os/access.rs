//! The OS model's side of the one access path (`crate::access`): the coherence policy
//! hears every TLB fill and eviction and every A-bit set by the walker; walks read the
//! page table the core loaded in CR3; a hit on an entry the checker marked is judged; a
//! fault runs the kernel's handler (`mm/fault.rs`), which may map the page, fill the TLB directly
//! (a policy's `on_demand_fault`), start a shootdown (copy-on-write) or raise SIGSEGV.

use super::{Os, PolicyTlb, PolicyWalk};
use crate::access::{AccessEnv, FaultOutcome};
use crate::coherence::Coherence;
use crate::error::Result;
use crate::machine::{AddressSpace, Machine};
use crate::tlb::TlbEntry;
use crate::types::{AccessKind, Vpn};
use crate::walk::WalkOutcome;

impl<P: Coherence> Os<P> {
    /// The process whose thread runs on `core`.
    #[inline]
    fn running_pid(&self, core: usize) -> u32 {
        self.cores[core].loaded_mm.expect("an access runs in a loaded address space")
    }
}

impl<P: Coherence> AccessEnv for Os<P> {
    type Listener<'a>
        = PolicyTlb<'a, P>
    where
        Self: 'a;

    #[inline(always)]
    fn machine(&mut self) -> &mut Machine {
        &mut self.m
    }

    #[inline(always)]
    fn core_and_listener(&mut self, core: usize) -> (&mut crate::machine::Core, PolicyTlb<'_, P>) {
        (&mut self.m.cores[core], PolicyTlb { policy: &mut self.policy, fx: &mut self.fx })
    }

    #[inline]
    fn walk(&mut self, core: usize, va: u64, write: bool) -> (WalkOutcome, u64) {
        let mm = self.running_pid(core);
        let space = AddressSpace { id: mm, root: self.cores[core].cr3_root, levels: self.settings.pt_levels() };
        let mut wl = PolicyWalk { policy: &mut self.policy, fx: &mut self.fx, mm };
        self.m.walk(core, &space, va, write, &mut wl)
    }

    #[inline]
    fn fill(&mut self, core: usize, e: TlbEntry, kind: AccessKind) {
        let mut pl = PolicyTlb { policy: &mut self.policy, fx: &mut self.fx };
        self.m.cores[core].tlbs.fill(e, kind, &mut pl);
    }

    fn drop_entry(&mut self, core: usize, vpn: Vpn) {
        let mut pl = PolicyTlb { policy: &mut self.policy, fx: &mut self.fx };
        let tlbs = &mut self.m.cores[core].tlbs;
        let tag = tlbs.tag();
        tlbs.invalidate_page(vpn, Some(tag), &mut pl);
    }

    #[cold]
    fn stale_hit(&mut self, core: usize, vpn: Vpn, e: &TlbEntry) {
        if self.settings.checker() {
            let pid = self.running_pid(core);
            self.stale_use(core, pid, vpn, e);
        }
    }

    #[inline]
    fn after_walk(&mut self, core: usize, va: u64) {
        let pid = self.running_pid(core);
        self.count_stale_pwc(core, pid, va);
    }

    fn fault(&mut self, core: usize, va: u64, kind: AccessKind, present: bool, spent: &mut u64) -> Result<FaultOutcome> {
        // The translation time so far is the access's; the handler charges its own.
        let c = &mut self.m.cores[core];
        c.stats.translation_cycles += *spent;
        c.clock += *spent << crate::machine::CLOCK_SHIFT;
        *spent = 0;
        let thread = self.cores[core].current.expect("a faulting access has a thread");
        let pid = self.threads[thread].pid;
        if self.fault_must_wait(core, thread, pid, va, kind.is_write()) {
            // The thread sleeps for the lock; the access runs again when it is granted.
            self.threads[thread].retry_access = Some((va, kind));
            return Ok(FaultOutcome::Done);
        }
        if !present
            && self
                .pte_lookup(pid, va)
                .is_some_and(|l| l.pte & crate::page_table::PTE_PROTNONE == 0 && (!kind.is_write() || l.pte & crate::page_table::PTE_WRITABLE != 0))
        {
            // Spurious: the walk reached a table the page is no longer in (a page-walk-cache
            // entry into a table a lazy munmap unlinked). A #PF invalidates the paging-
            // structure-cache entries of the faulting address (Intel SDM vol. 3 §4.10.4.1);
            // the retried walk goes through memory. Modelled only where it changes the
            // outcome: here the whole page-walk cache is dropped.
            self.stats[core].spurious_faults += 1;
            self.m.cores[core].tlbs.flush_pwc();
            return Ok(FaultOutcome::Retry);
        }
        self.direct_filled = false;
        let fault_start = self.clock(core);
        let mapped = self.page_fault(core, thread, pid, va, kind.is_write(), present)?;
        self.set_kernel_span(core, fault_start);
        if !mapped {
            self.stats[core].segv_signals += 1;
            self.charge(core, self.settings.costs().signal);
            return Ok(FaultOutcome::Done);
        }
        let wait = self.io.take_wait();
        if wait > 0 {
            // The fault read from a device whose reads sleep: the thread blocks until the
            // read completes (its core may go idle, lazy for shootdowns); the access is
            // done once it runs again (the page is mapped).
            self.stats[core].io_sleeps += 1;
            let now = self.clock(core);
            self.block(core, thread, now + wait);
            return Ok(FaultOutcome::Done);
        }
        if self.direct_filled {
            return Ok(FaultOutcome::Done);
        }
        if self.cores[core].waiting > 0 {
            // The fault started a shootdown (copy-on-write): the access retries once the
            // core is back, which a later walk does for free here.
            return Ok(FaultOutcome::Done);
        }
        Ok(FaultOutcome::Retry)
    }

    #[inline(always)]
    fn finish(&mut self, _core: usize) {
        if !self.fx.is_empty() {
            self.apply_effects();
        }
    }
}
