//! Address-space switches (arch/x86/mm/tlb.c switch_mm_irqs_off, docs/LINUX_BASELINE.md):
//! the CR3 load with the root the page-table backend gives this core's socket, the six
//! PCID slots and the `tlb_gen` each has caught up with, lazy TLB, and full flushes of an
//! address space or of everything. With PCID, domain or CR3 tags, a switch that keeps the
//! loaded context's old entries asks the coherence policy whether they are current
//! (`Coherence::on_switch`); the same slot bookkeeping serves every tagged mode (a kernel
//! aware of CR3 tags must track their generations as it tracks PCIDs').

use super::{Cause, Os, PolicyTlb};
use crate::coherence::{Coherence, CoreView, Cr3Load};
use crate::config::Tagging;
use crate::tlb::hierarchy::{FlushCause, PWC_PD, PWC_PDPT, PWC_PML4};
use crate::types::CoreId;

/// CR3 value of the kernel's own page table (init_mm), for a lazy core that stops
/// borrowing an address space in the tagged modes where that write matters.
const KERNEL_CR3: u64 = u64::MAX - 1;

impl<P: Coherence> Os<P> {
    /// switch_mm_irqs_off(): load address space `pid` on `core`.
    pub(super) fn load_mm(&mut self, core: usize, pid: u32) {
        let mm_gen = self.spaces[pid as usize].tlb_gen;
        let c = &mut self.cores[core];
        if c.loaded_mm == Some(pid) {
            // Same mm: leaving lazy mode, catch up if flushes were skipped meanwhile.
            let was_lazy = std::mem::replace(&mut c.lazy, false);
            let slot = c.pcid_current;
            let slot_gen = c.pcid[slot].1;
            self.spaces[pid as usize].cpumask[core] = true;
            // A switch between two threads of the loaded mm is no switch at all: the TLB's
            // generation is whatever the flushes it took made it.
            if was_lazy && self.policy.on_switch(CoreId(core as u32), Some(slot_gen), mm_gen) {
                self.full_flush_mm(core, pid, Cause::LazySwitch);
            }
            return;
        }
        let from = c.loaded_mm;
        c.lazy = false;
        // A policy that handed this mm the hardware tag (global ASID) of an exited mm
        // without flushing it first (`Coherence::tag_inherited_from`): with PCIDs, the
        // slot still holding the exited mm is this mm's PCID, its entries kept.
        let inherited = match self.settings.tagging() {
            Tagging::Pcid => self.policy.tag_inherited_from(pid).filter(|&old| !self.spaces[old as usize].alive),
            _ => None,
        };
        let c = &mut self.cores[core];
        let own = c.pcid.iter().position(|&(p, _)| p == pid);
        let takeover = inherited.and_then(|old| c.pcid.iter().position(|&(p, _)| p == old)).filter(|_| own.is_none());
        // Choose a PCID slot: the one already holding this mm, else the next round-robin.
        let (slot, slot_gen) = match (own, takeover) {
            (Some(s), _) => (s, Some(c.pcid[s].1)),
            (None, Some(s)) => (s, Some(mm_gen)),
            (None, None) => {
                let s = c.pcid_next;
                c.pcid_next = (s + 1) % super::PCID_SLOTS;
                (s, None)
            }
        };
        if let (Some(s), true) = (takeover, self.settings.checker()) {
            // What the exited mm left under the tag is stale for this one.
            self.mark_tag_stale(core, s as u16 + 1);
        }
        let c = &mut self.cores[core];
        c.pcid_current = slot;
        c.loaded_mm = Some(pid);
        // The slot is this mm's from now on (a reused slot still holds the previous mm's
        // entries until the flush below).
        c.pcid[slot] = (pid, slot_gen.unwrap_or(0));
        let socket = self.m.cores[core].socket;
        let root = self.m.backend.root_for(pid, self.spaces[pid as usize].root, socket);
        self.cores[core].cr3_root = root;
        self.spaces[pid as usize].cpumask[core] = true;
        if !self.spaces[pid as usize].former_roots.is_empty() {
            self.drop_former_root_tags(core, pid, root);
        }
        let cr3 = self.m.pt.pfn_of(root).0;
        // The VM of the address space loaded before on this CPU: a switch into another VM
        // is inter-VM (a VCPU switch), else intra-VM (the guest's own process switch).
        let vm = self.spaces[pid as usize].vm;
        let inter_vm = from.is_some_and(|f| self.spaces[f as usize].vm != vm);
        let domain_prev = self.domain_holder(core, vm);
        let mut pl = PolicyTlb { policy: &mut self.policy, fx: &mut self.fx };
        let hw = self.m.cores[core].tlbs.write_cr3(cr3, slot as u16 + 1, vm as u16, &mut pl);
        match self.cores[core].domain_mm.iter_mut().find(|(v, _)| *v == vm) {
            Some(e) => e.1 = pid,
            None => self.cores[core].domain_mm.push((vm, pid)),
        }
        let mut kept = false;
        if let Some(cause) = hw {
            self.count_cr3_flush(core, cause, domain_prev);
            if cause == FlushCause::ContextSwitch {
                self.stats[core].full_flushes_by_cause[super::INTRA_VM + inter_vm as usize] += 1;
            }
        } else if self.m.cores[core].tlbs.kept_entries() {
            // A reused slot must lose the previous mm's entries; a slot holding this mm at
            // an older generation is the policy's call.
            let flush = match slot_gen {
                None => true,
                Some(g) => self.policy.on_switch(CoreId(core as u32), Some(g), mm_gen),
            };
            if flush {
                self.full_flush_mm(core, pid, Cause::ContextSwitch);
                self.stats[core].full_flushes_by_cause[super::INTRA_VM + inter_vm as usize] += 1;
            } else {
                kept = true;
            }
        }
        self.cores[core].pcid[slot] = (pid, mm_gen);
        let tag = self.m.cores[core].tlbs.tag();
        self.policy.on_cr3_load(CoreId(core as u32), &Cr3Load { from, to: pid, tag, kept_entries: kept }, &mut self.fx);
        self.apply_effects();
    }

    /// A lazy core stops borrowing `pid` (switch to init_mm): its entries go.
    pub(crate) fn drop_lazy_mm(&mut self, core: usize, pid: u32) {
        self.full_flush_mm(core, pid, Cause::Shootdown);
        let c = &mut self.cores[core];
        c.loaded_mm = None;
        c.lazy = false;
        self.spaces[pid as usize].cpumask[core] = false;
        if let Some(s) = self.cores[core].pcid.iter().position(|&(p, _)| p == pid) {
            self.cores[core].pcid[s] = (u32::MAX, 0);
        }
        if matches!(self.settings.tagging(), Tagging::Cr3 | Tagging::Domain) {
            // init_mm's page table is loaded, so the next load of `pid` is a real switch (with
            // CR3 tags, not a same-value write).
            // The kernel's page table, in this CPU's current VM.
            let vm = self.spaces[pid as usize].vm;
            let domain_prev = self.domain_holder(core, vm);
            let mut pl = PolicyTlb { policy: &mut self.policy, fx: &mut self.fx };
            if let Some(cause) = self.m.cores[core].tlbs.write_cr3(KERNEL_CR3, 0, vm as u16, &mut pl) {
                self.count_cr3_flush(core, cause, domain_prev);
            }
            self.cores[core].domain_mm.retain(|&(v, _)| v != vm);
            self.apply_effects();
        }
    }

    /// With domain tags, the address space whose entries VM `vm`'s tag holds on `core`
    /// (None in the other modes).
    fn domain_holder(&self, core: usize, vm: u32) -> Option<u32> {
        if self.settings.tagging() != Tagging::Domain {
            return None;
        }
        self.cores[core].domain_mm.iter().find(|&&(v, _)| v == vm).map(|&(_, p)| p)
    }

    /// A CR3 write flushed the TLB (untagged switch, CR3-tag capacity or forced flush), or
    /// with domain tags only the entries of `flushed_mm` (its VM's tag).
    fn count_cr3_flush(&mut self, core: usize, cause: FlushCause, flushed_mm: Option<u32>) {
        let cause = match cause {
            FlushCause::TagCapacity => Cause::TagCapacity,
            FlushCause::TagForced => Cause::TagForced,
            _ => Cause::ContextSwitch,
        };
        self.stats[core].full_flushes_by_cause[cause as usize] += 1;
        self.m.cores[core].stats.full_flushes += 1;
        self.charge(core, self.settings.costs().full_flush);
        if self.settings.tagging() == Tagging::Domain {
            // Only the VM's tag went; another VM's entries stay.
            if let Some(p) = flushed_mm {
                if let Some(s) = self.cores[core].pcid.iter().position(|&(q, _)| q == p) {
                    self.cores[core].pcid[s].1 = self.spaces[p as usize].tlb_gen;
                }
                self.policy.on_full_flush(CoreId(core as u32), Some(p), cause, &mut self.fx);
            }
            return;
        }
        self.policy.on_full_flush(CoreId(core as u32), None, cause, &mut self.fx);
    }

    /// Under a hypervisor a guest's full TLB flush is a hypercall, carried out by writing
    /// CR3 with the value it holds: a forced flush of the whole TLB (tag paper §4; Xen's
    /// MMUEXT_TLB_FLUSH_LOCAL and the remote flush of MMUEXT_TLB_FLUSH_MULTI reload CR3).
    fn is_hypercall(&self, cause: Cause) -> bool {
        self.virt.is_some() && matches!(cause, Cause::Shootdown | Cause::Ceiling | Cause::Policy)
    }

    /// Tag under which `core`'s TLB holds `pid`'s translations, if it can hold any.
    pub(crate) fn tag_on(&self, core: usize, pid: u32) -> Option<u16> {
        let c = &self.cores[core];
        match self.settings.tagging() {
            Tagging::Pcid => c.pcid.iter().position(|&(p, _)| p == pid).map(|s| s as u16 + 1),
            _ => {
                // The root the core has loaded for `pid`, else the one it would load.
                let root = if self.cores[core].loaded_mm == Some(pid) {
                    self.cores[core].cr3_root
                } else {
                    let socket = self.m.cores[core].socket;
                    self.m.backend.root_for(pid, self.spaces[pid as usize].root, socket)
                };
                let cr3 = self.m.pt.pfn_of(root).0;
                self.m.cores[core].tlbs.tag_of(cr3, 0, self.spaces[pid as usize].vm as u16)
            }
        }
    }

    /// With CR3 tags: drop what `core` holds under a former root of `pid` other than
    /// `keep` (the backend gave the core's socket another copy of the tree).
    pub(crate) fn drop_former_root_tags(&mut self, core: usize, pid: u32, keep: u32) {
        if self.settings.tagging() != Tagging::Cr3 {
            return;
        }
        for i in 0..self.spaces[pid as usize].former_roots.len() {
            let r = self.spaces[pid as usize].former_roots[i];
            if r == keep {
                continue;
            }
            let cr3 = self.m.pt.pfn_of(r).0;
            let mut pl = PolicyTlb { policy: &mut self.policy, fx: &mut self.fx };
            let tlbs = &mut self.m.cores[core].tlbs;
            if let Some(tag) = tlbs.tag_of(cr3, 0, 0) {
                if tlbs.invalidate_tag(tag, &mut pl) > 0 {
                    for p in [PWC_PML4, PWC_PDPT, PWC_PD] {
                        if tlbs.present(p) {
                            tlbs.pwc(p).flush(false, &mut |_| {});
                        }
                    }
                }
            }
        }
        self.apply_effects();
    }

    /// Flush every translation of `pid` on `core` (its tag, or everything untagged).
    pub(super) fn full_flush_mm(&mut self, core: usize, pid: u32, cause: Cause) {
        if self.is_hypercall(cause) {
            return self.full_flush_all(core, cause);
        }
        self.stats[core].full_flushes_by_cause[cause as usize] += 1;
        self.m.cores[core].stats.full_flushes += 1;
        self.charge(core, self.settings.costs().full_flush);
        let tag = self.tag_on(core, pid);
        let mut pl = PolicyTlb { policy: &mut self.policy, fx: &mut self.fx };
        let tlbs = &mut self.m.cores[core].tlbs;
        match (self.settings.tagging(), tag) {
            (Tagging::Pcid | Tagging::Cr3, Some(tag)) => {
                tlbs.invalidate_tag(tag, &mut pl);
                // Page-walk caches hold no tag here: drop them too (x86 INVPCID does).
                for i in [PWC_PML4, PWC_PDPT, PWC_PD] {
                    if tlbs.present(i) {
                        tlbs.pwc(i).flush(false, &mut |_| {});
                    }
                }
            }
            _ => {
                tlbs.flush_all(true, &mut pl);
            }
        }
        if let Some(s) = self.cores[core].pcid.iter().position(|&(p, _)| p == pid) {
            self.cores[core].pcid[s].1 = self.spaces[pid as usize].tlb_gen;
        }
        self.policy.on_full_flush(CoreId(core as u32), Some(pid), cause, &mut self.fx);
        self.apply_effects();
    }

    /// Flush everything on `core` (every tag; a global request): every slot caught up.
    /// Under a hypervisor a guest's flush (`is_hypercall`) is a same-value CR3 write.
    pub(super) fn full_flush_all(&mut self, core: usize, cause: Cause) {
        let forced = self.is_hypercall(cause);
        let cause = if forced { Cause::TagForced } else { cause };
        self.stats[core].full_flushes_by_cause[cause as usize] += 1;
        self.m.cores[core].stats.full_flushes += 1;
        self.charge(core, self.settings.costs().full_flush);
        let mut pl = PolicyTlb { policy: &mut self.policy, fx: &mut self.fx };
        if forced {
            self.m.cores[core].tlbs.rewrite_cr3(&mut pl);
        } else {
            self.m.cores[core].tlbs.flush_all(true, &mut pl);
        }
        for s in 0..super::PCID_SLOTS {
            let (p, _) = self.cores[core].pcid[s];
            if p != u32::MAX {
                self.cores[core].pcid[s].1 = self.spaces[p as usize].tlb_gen;
            }
        }
        self.policy.on_full_flush(CoreId(core as u32), None, cause, &mut self.fx);
        self.apply_effects();
    }

    pub(super) fn catch_up(&mut self, core: usize, pid: u32, gen: u64) {
        let c = &mut self.cores[core];
        if let Some(s) = c.pcid.iter().position(|&(p, _)| p == pid) {
            c.pcid[s].1 = c.pcid[s].1.max(gen);
        }
    }

    pub(super) fn core_view(&self, core: usize) -> CoreView {
        let c = &self.cores[core];
        CoreView {
            loaded_mm: c.loaded_mm,
            lazy: c.lazy,
            caught_up_gen: if c.loaded_mm.is_some() { c.pcid[c.pcid_current].1 } else { 0 },
            socket: self.m.cores[core].socket,
        }
    }
}
