//! OS mode's memory access: the `Access` operation's address stream and one access through
//! the core's TLBs, walker and the OS's fault handler, with the stale-translation check on
//! every TLB hit (DESIGN.md "Safety checker").

use super::{Os, ViolationRecord, VIOLATION_RECORDS};
use crate::coherence::Coherence;
use crate::error::Result;
use crate::memory::FrameKind;
use crate::page_table::pte_pfn;
use crate::sim::AddressSpace;
use crate::tlb::hierarchy::{Found, NoTlbListener, L2};
use crate::tlb::set_assoc::{FLAG_DIRTY, FLAG_STALE, FLAG_WRITABLE};
use crate::tlb::TlbEntry;
use crate::types::{AccessKind, Pfn, Vpn};
use crate::walk::{NoWalkListener, WalkOutcome};
use crate::workload::program::{AccessMode, Op, Pattern};

impl<P: Coherence> Os<P> {
    /// Run the `Access` op at the thread's pc until it is done or `until`.
    pub(super) fn exec_access(&mut self, core: usize, thread: usize, op: &Op, until: u64) -> Result<()> {
        let Op::Access { slot, pattern, mode, count, offset, len, stride } = *op else { unreachable!() };
        if self.threads[thread].access_left == 0 {
            if count == 0 {
                self.advance(thread);
                return Ok(());
            }
            self.threads[thread].access_left = count;
            self.threads[thread].access_cursor = 0;
        }
        let (base, region_len) = self.threads[thread].slots[slot];
        let start = base + offset.min(region_len);
        let window = if len == 0 { region_len.saturating_sub(offset) } else { len.min(region_len.saturating_sub(offset)) };
        let words = (window / 8).max(1);
        let pid = self.threads[thread].pid;
        let stride = stride.max(8);
        if let Pattern::Zipf { theta } = pattern {
            let pages = window.div_ceil(4096).max(1);
            let key = (pages, theta.to_bits());
            if self.threads[thread].zipf.as_ref().map(|z| (z.0, z.1)) != Some(key) {
                self.threads[thread].zipf = Some((pages, theta.to_bits(), zipf_cdf(pages, theta)));
            }
        }
        let cpi = self.m.cpi_fixed;
        while self.threads[thread].access_left > 0 {
            if self.clock(core) >= until || self.cores[core].current != Some(thread) || self.cores[core].waiting > 0 {
                return Ok(());
            }
            let t = &mut self.threads[thread];
            let off = match pattern {
                Pattern::Sequential | Pattern::Strided => {
                    let o = t.access_cursor % (words * 8);
                    t.access_cursor += stride;
                    o
                }
                Pattern::Random => t.rng.below(words) * 8,
                Pattern::Zipf { .. } => {
                    let cdf = &t.zipf.as_ref().expect("built above").2;
                    let u = (t.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                    let page = cdf.partition_point(|&c| c < u).min(cdf.len() - 1) as u64;
                    (page * 4096 + t.rng.below(512) * 8).min(window.saturating_sub(8))
                }
            };
            let write = match mode {
                AccessMode::Read => false,
                AccessMode::Write => true,
                AccessMode::Mixed(f) => ((t.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < f,
            };
            t.access_left -= 1;
            t.accesses += 1;
            self.m.cores[core].stats.instructions += 1;
            self.m.cores[core].clock += cpi;
            self.access(core, thread, pid, start + off, write)?;
        }
        self.advance(thread);
        Ok(())
    }

    fn space(&self, pid: u32) -> AddressSpace {
        AddressSpace { id: pid, root: self.procs[pid as usize].root, levels: self.pt_levels }
    }

    /// One data access by `thread` of process `pid` on `core`.
    pub(crate) fn access(&mut self, core: usize, thread: usize, pid: u32, va: u64, write: bool) -> Result<()> {
        let kind = if write { AccessKind::Store } else { AccessKind::Load };
        let vpn = Vpn::of_va(va);
        let c = &mut self.m.cores[core];
        c.stats.accesses += 1;
        let (found, cycles) = c.tlbs.lookup(vpn, kind, &mut NoTlbListener);
        let mut spent = cycles as u64;
        let hit = match found {
            Found::L1(e) => {
                c.stats.l1_tlb_hits += 1;
                Some(e)
            }
            Found::L2(e) => {
                c.stats.l1_tlb_misses += 1;
                c.stats.l2_tlb_hits += 1;
                Some(e)
            }
            Found::Miss => {
                c.stats.l1_tlb_misses += 1;
                if c.tlbs.present(L2) {
                    c.stats.l2_tlb_misses += 1;
                }
                None
            }
        };
        let space = self.space(pid);
        if let Some(e) = hit {
            if e.flags & FLAG_STALE != 0 && self.checker {
                self.stale_use(core, pid, vpn, &e);
            }
            let writable = e.flags & FLAG_WRITABLE != 0;
            if !write || (writable && e.flags & FLAG_DIRTY != 0) {
                self.finish_access(core, spent);
                return Ok(());
            }
            if writable {
                // A write hit a clean entry: the processor walks to set D (SDM §4.8).
                let (outcome, cyc) = self.m.walk(core, &space, va, true, &mut NoWalkListener);
                spent += cyc;
                if let WalkOutcome::Mapped { .. } = outcome {
                    let c = &mut self.m.cores[core];
                    c.stats.dirty_walks += 1;
                    c.tlbs.mark_dirty(&e);
                    self.finish_access(core, spent);
                    return Ok(());
                }
            }
            // A write through a read-only (or vanished) translation raises #PF; the handler
            // finds the page table's view and the core drops its entry.
            let tag = self.m.cores[core].tlbs.tag();
            self.m.cores[core].tlbs.invalidate_page(vpn, Some(tag), &mut NoTlbListener);
        }
        // Walk; at most a few rounds: fault → handler → walk again.
        for _ in 0..4 {
            let (outcome, cyc) = self.m.walk(core, &space, va, write, &mut NoWalkListener);
            spent += cyc;
            self.count_stale_pwc(core, pid, va);
            match outcome {
                WalkOutcome::Mapped { pte, size } => {
                    let flags = crate::tlb::set_assoc::flags_of_pte(pte);
                    let c = &mut self.m.cores[core];
                    let e = c.tlbs.entry(vpn, pte_pfn(pte), size, flags);
                    c.tlbs.fill(e, kind, &mut NoTlbListener);
                    self.finish_access(core, spent);
                    return Ok(());
                }
                WalkOutcome::Fault { present } => {
                    self.finish_access(core, spent);
                    spent = 0;
                    if !self.page_fault(core, thread, pid, va, write, present)? {
                        self.stats[core].segv_signals += 1;
                        self.charge(core, self.costs.signal);
                        return Ok(());
                    }
                    if self.cores[core].waiting > 0 {
                        // The fault started a shootdown (copy-on-write): the access retries
                        // once the core is back, which a later walk does for free here.
                        return Ok(());
                    }
                }
            }
        }
        Err(crate::error::Error::Sim(format!("access to {va:#x} by thread {thread}: still faulting after its handler ran")))
    }

    fn finish_access(&mut self, core: usize, spent: u64) {
        let c = &mut self.m.cores[core];
        c.stats.translation_cycles += spent;
        c.clock += spent << crate::sim::CLOCK_SHIFT;
    }

    /// A walk met a page-walk-cache entry pointing to a freed table: a security violation.
    fn count_stale_pwc(&mut self, core: usize, pid: u32, va: u64) {
        let s = &mut self.m.cores[core].stats;
        if s.stale_pwc_uses > self.stats[core].stale_pwc_seen {
            self.stats[core].stale_pwc_seen = s.stale_pwc_uses;
            if self.checker {
                self.record_violation(core, pid, Vpn::of_va(va), Pfn(u64::MAX), None, true);
            }
        }
    }

    /// A TLB hit on an entry the checker marked: a violation unless the page table has
    /// come back to agree with it.
    fn stale_use(&mut self, core: usize, pid: u32, vpn: Vpn, e: &TlbEntry) {
        let root = self.procs[pid as usize].root;
        let cur = self.m.pt.lookup(root, self.pt_levels, vpn.0 << 12).map(|l| l.pte);
        if !super::entry_is_stale(e, vpn, cur) {
            return;
        }
        let old = Pfn(e.pfn.0 + (vpn.0 - e.vpn.0));
        let new = cur.map(|p| pte_pfn(p).0);
        let security = if new == Some(old.0) {
            false
        } else {
            let d = *self.m.mem.desc(old);
            match d.kind {
                FrameKind::Free | FrameKind::PageTable => true,
                // A page-cache page holds the file's data whoever reads it; an anonymous
                // page belongs to the process that owns it and those that map it.
                FrameKind::Data => d.mapping == 0 && (d.owner != pid || self.mapped_by_other(old, pid)),
            }
        };
        self.record_violation(core, pid, vpn, old, new, security);
    }

    fn record_violation(&mut self, core: usize, pid: u32, vpn: Vpn, old: Pfn, new: Option<u64>, security: bool) {
        if security {
            self.stats[core].violations_security += 1;
        } else {
            self.stats[core].violations_consistency += 1;
        }
        if self.violations.len() < VIOLATION_RECORDS {
            let cycle = self.clock(core);
            self.violations.push(ViolationRecord { cycle, core: core as u32, process: pid, vpn: vpn.0, old_pfn: old.0, new_pfn: new, security });
        }
    }
}

/// Cumulative Zipf(theta) weights over `n` ranks (rank 1 most popular).
fn zipf_cdf(n: u64, theta: f64) -> Vec<f64> {
    let n = n.min(1 << 22) as usize;
    let mut cdf = Vec::with_capacity(n);
    let mut sum = 0.0;
    for k in 1..=n {
        sum += 1.0 / (k as f64).powf(theta);
        cdf.push(sum);
    }
    for c in cdf.iter_mut() {
        *c /= sum;
    }
    cdf
}
