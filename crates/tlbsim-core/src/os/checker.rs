//! The stale-translation checker (docs/ARCHITECTURE.md "Safety checker"): when a flush protocol
//! ends, every cached translation that still disagrees with the page table is marked
//! (`FLAG_STALE`); a later use of a marked entry that still disagrees is a violation,
//! *security* when the frame is free, a page table, or another process's anonymous page,
//! else *consistency*. Page-walk-cache entries pointing to freed page-table pages are
//! marked too, and a walk through one is a security violation. The same knowledge tells a
//! target that held nothing stale (a false positive) and gives the oracle its holders.
//!
//! Speculative walks (docs/OS_MODEL.md "The checker", rule 3): the hardware may walk the
//! page table of the address space loaded in a CPU's CR3, and fill its walk caches, at any
//! time, for addresses no instruction touched (Intel SDM Vol. 3A §4.10.3.1 and §4.10.4.2:
//! paging-structure caches may be filled speculatively; AMD APM Vol. 2 §5.5.1 likewise).
//! A lazy CPU runs no user code, so it never *uses* a stale walk-cache entry that the model
//! could see; but while it still has the address space loaded, a speculative walk may go
//! through an entry pointing to a table just freed and read, or cache, whatever the frame
//! holds next. That is why Linux sends lazy CPUs the IPI when page tables are freed
//! (`native_flush_tlb_multi`'s `freed_tables`; x86 now frees them after an RCU grace
//! period instead). So when a protocol that freed tables ends, a lazy CPU with the address
//! space loaded whose walk caches still point to one of them is a security violation.

use super::{Os, ViolationRecord, VIOLATION_RECORDS};
use crate::coherence::Coherence;
use crate::memory::FrameKind;
use crate::page_table::pte_pfn;
use crate::tlb::TlbEntry;
use crate::types::{CoreId, Pfn, Vpn};

impl<P: Coherence> Os<P> {
    pub(super) fn mark_stale(&mut self, pid: u32, pages: &[Vpn], tables: &[u32], flushed: &[usize]) {
        let current = self.current_leaves(pid, pages);
        for core in 0..self.cores.len() {
            // A core that flushed the pages can only have refilled them from the new page
            // table since.
            if flushed.contains(&core) && tables.is_empty() {
                continue;
            }
            if let Some(tag) = self.tag_on(core, pid) {
                for (&vpn, &cur) in pages.iter().zip(&current) {
                    let stale = |e: &crate::tlb::TlbEntry| entry_is_stale(e, vpn, cur);
                    let n = self.m.cores[core].tlbs.mark_stale_if(vpn, tag, &stale);
                    self.stats[core].stale_entries_marked += n as u64;
                }
            }
            if !tables.is_empty() {
                // Rule 3 looks only at the entries a walk of the lazily loaded address space
                // can reach: those under its tag. With tagged walk caches (PCID, CR3 tags)
                // an entry under another tag points to this slot from another address space
                // or an earlier life of the table (marked stale when that one was freed).
                let lazy_tag = (self.cores[core].lazy && self.cores[core].loaded_mm == Some(pid)).then(|| self.tag_on(core, pid)).flatten();
                for &t in tables {
                    let held = self.m.cores[core].tlbs.mark_pwc_stale(t);
                    let reachable = held > 0 && lazy_tag.is_some_and(|tag| self.m.cores[core].tlbs.holds_pwc_to(t, Some(tag)));
                    if reachable && !flushed.contains(&core) {
                        self.record_speculative_exposure(core, pid, t);
                    }
                }
            }
        }
    }

    /// Rule 3 (module doc): lazy `core`, with `pid` loaded, still reaches freed table `slot`
    /// through its walk caches once the protocol that freed it has ended.
    fn record_speculative_exposure(&mut self, core: usize, pid: u32, slot: u32) {
        self.stats[core].violations_security += 1;
        if self.violations.len() < VIOLATION_RECORDS {
            let cycle = self.clock(core);
            let table = self.m.pt.pfn_of(slot).0;
            self.violations.push(ViolationRecord {
                cycle,
                core: core as u32,
                process: pid,
                vpn: 0,
                old_pfn: table,
                new_pfn: None,
                security: true,
                freed_table: true,
            });
        }
    }

    /// Mark, on every core but `except`, the entries of `pid` that translate each page to
    /// the given frame (a translation just unmapped without a flush; other stale ones are
    /// left to the flush in flight that covers the page).
    pub(super) fn mark_stale_caching(&mut self, pid: u32, pages: &[(Vpn, Pfn)], except: usize) {
        for core in 0..self.cores.len() {
            if core == except {
                continue;
            }
            let Some(tag) = self.tag_on(core, pid) else { continue };
            for &(vpn, frame) in pages {
                let caches = |e: &crate::tlb::TlbEntry| Pfn(e.pfn.0 + (vpn.0 - e.vpn.0)) == frame;
                let n = self.m.cores[core].tlbs.mark_stale_if(vpn, tag, &caches);
                self.stats[core].stale_entries_marked += n as u64;
            }
        }
    }

    /// After a global request: every entry of every core not flushed entirely that
    /// disagrees with its address space's page table.
    pub(super) fn mark_stale_everywhere(&mut self, flushed: &[usize]) {
        for core in 0..self.cores.len() {
            if flushed.contains(&core) {
                continue;
            }
            let pids: Vec<u32> = self.spaces.iter().filter(|p| p.alive).map(|p| p.pid).collect();
            for pid in pids {
                let Some(tag) = self.tag_on(core, pid) else { continue };
                let root = self.spaces[pid as usize].root;
                let (pt, backend, levels) = (&self.m.pt, &self.m.backend, self.settings.pt_levels());
                let tlbs = &mut self.m.cores[core].tlbs;
                let mut n = 0;
                for i in [
                    crate::tlb::hierarchy::L1D_4K,
                    crate::tlb::hierarchy::L1D_2M,
                    crate::tlb::hierarchy::L1D_1G,
                    crate::tlb::hierarchy::L1I,
                    crate::tlb::hierarchy::L2,
                ] {
                    if !tlbs.present(i) {
                        continue;
                    }
                    n += tlbs.structs[i].mark_where(
                        |e| {
                            e.tag == tag && e.flags & crate::tlb::set_assoc::FLAG_GLOBAL == 0 && {
                                let cur = backend.lookup(pt, pid, root, levels, e.vpn.0 << 12).map(|l| l.pte);
                                entry_is_stale(e, e.vpn, cur)
                            }
                        },
                        crate::tlb::set_assoc::FLAG_STALE,
                    );
                }
                self.stats[core].stale_entries_marked += n as u64;
            }
        }
    }

    /// Mark every entry `core` holds under hardware tag `tag` (an exited address space's,
    /// now another's: `Coherence::tag_inherited_from`); a use is judged against the page
    /// table of the address space that hits it.
    pub(super) fn mark_tag_stale(&mut self, core: usize, tag: u16) {
        let tlbs = &mut self.m.cores[core].tlbs;
        let mut n = 0;
        for i in
            [crate::tlb::hierarchy::L1D_4K, crate::tlb::hierarchy::L1D_2M, crate::tlb::hierarchy::L1D_1G, crate::tlb::hierarchy::L1I, crate::tlb::hierarchy::L2]
        {
            if tlbs.present(i) {
                n += tlbs.structs[i].mark_where(|e| e.tag == tag && e.flags & crate::tlb::set_assoc::FLAG_GLOBAL == 0, crate::tlb::set_assoc::FLAG_STALE);
            }
        }
        self.stats[core].stale_entries_marked += n as u64;
    }

    /// The page table's leaf entry now for each of `pages`.
    pub(super) fn current_leaves(&self, pid: u32, pages: &[Vpn]) -> Vec<Option<u64>> {
        pages.iter().map(|v| self.pte_lookup(pid, v.0 << 12).map(|l| l.pte)).collect()
    }

    /// Whether `core`'s TLB holds a translation of one of `pages` of `pid` that disagrees
    /// with `current`, the page table's leaf entries of those pages.
    pub(super) fn holds_stale_with(&mut self, core: usize, pid: u32, pages: &[Vpn], current: &[Option<u64>]) -> bool {
        let Some(tag) = self.tag_on(core, pid) else { return false };
        pages.iter().zip(current).any(|(&vpn, &cur)| {
            let stale = |e: &crate::tlb::TlbEntry| entry_is_stale(e, vpn, cur);
            self.m.cores[core].tlbs.holds_if(vpn, tag, &stale)
        })
    }

    /// A walk met a page-walk-cache entry pointing to a freed table: a security violation.
    pub(super) fn count_stale_pwc(&mut self, core: usize, pid: u32, va: u64) {
        let s = &mut self.m.cores[core].stats;
        if s.stale_pwc_uses > self.stats[core].stale_pwc_seen {
            self.stats[core].stale_pwc_seen = s.stale_pwc_uses;
            if self.settings.checker() {
                self.record_violation(core, pid, Vpn::of_va(va), Pfn(u64::MAX), None, true);
            }
        }
    }

    /// A TLB hit on an entry the checker marked: a violation unless the page table has
    /// come back to agree with it.
    pub(super) fn stale_use(&mut self, core: usize, pid: u32, vpn: Vpn, e: &TlbEntry) {
        let cur = self.pte_lookup(pid, vpn.0 << 12).map(|l| l.pte);
        if !entry_is_stale(e, vpn, cur) {
            return;
        }
        let old = Pfn(e.pfn.0 + (vpn.0 - e.vpn.0));
        if self.in_lazy_window(core, pid, vpn, old, cur) {
            self.stats[core].stale_uses_in_lazy_window += 1;
            return;
        }
        if cur.is_none() && self.settings.recycling_on() {
            // The virtual page is unmapped (the program would have had a SIGSEGV) and the
            // frame may still be in the process's recycling context: the axis' rule
            // decides (FPR §IV-B: such a program reads its own stale data).
            let d = self.m.mem.desc(old);
            let own_data = d.kind != FrameKind::PageTable;
            let family = self.spaces[pid as usize].family;
            let word = self.shootdowns.word_in_transit(old).unwrap_or_else(|| self.m.mem.word(old, crate::memory::FrameWord::Tracking));
            if own_data && self.recycling.permits_stale_use(pid, family, word) {
                self.stale_uses_permitted_by_recycling += 1;
                return;
            }
        }
        let new = cur.map(|p| pte_pfn(p).0);
        let security = if new == Some(old.0) {
            false
        } else {
            let d = *self.m.mem.desc(old);
            let mem = &self.m.mem;
            match d.kind {
                FrameKind::Free | FrameKind::PageTable => true,
                // A page-cache page holds the file's data whoever reads it; an anonymous
                // page belongs to the process that owns it and those that map it.
                FrameKind::Data => mem.mapping(old) == 0 && (mem.owner(old) != pid || self.mapped_by_other(old, pid)),
            }
        };
        self.record_violation(core, pid, vpn, old, new, security);
    }

    /// A deferred request that covers `vpn` of `pid` still waits for `core` to apply it
    /// (a lazy window, e.g. LATR's), the virtual page is not reused (the page table maps
    /// nothing there) and the old frame is not either (it is still held by the request,
    /// or is a page-cache page): the one case in which a stale translation may be used.
    fn in_lazy_window(&self, core: usize, pid: u32, vpn: Vpn, old: Pfn, cur: Option<u64>) -> bool {
        if cur.is_some() {
            return false;
        }
        let file_page = {
            let d = self.m.mem.desc(old);
            d.kind == FrameKind::Data && self.m.mem.mapping(old) != 0
        };
        self.cores[core].deferred.iter().any(|&(sd, k)| {
            let s = self.shootdowns.record(sd);
            let pages: &[Vpn] = match s.pages_of.get(k) {
                Some(Some(sub)) => sub.as_slice(),
                _ => &s.req.pages,
            };
            !s.done
                && !s.req.global
                && s.req.mm == pid
                && pages.contains(&vpn)
                && (file_page || s.frames.iter().any(|&(p, order)| old.0 >= p.0 && old.0 < p.0 + (1u64 << order)))
        })
    }

    fn record_violation(&mut self, core: usize, pid: u32, vpn: Vpn, old: Pfn, new: Option<u64>, security: bool) {
        if security {
            self.stats[core].violations_security += 1;
        } else {
            self.stats[core].violations_consistency += 1;
        }
        if self.violations.len() < VIOLATION_RECORDS {
            let cycle = self.clock(core);
            self.violations.push(ViolationRecord {
                cycle,
                core: core as u32,
                process: pid,
                vpn: vpn.0,
                old_pfn: old.0,
                new_pfn: new,
                security,
                freed_table: false,
            });
        }
    }
}

/// Whether TLB entry `e` (covering 4 KiB page `vpn`) disagrees with the page table's
/// current leaf entry `cur` for that page: gone, another frame, or more rights than the
/// page table now grants.
pub(crate) fn entry_is_stale(e: &crate::tlb::TlbEntry, vpn: Vpn, cur: Option<u64>) -> bool {
    use crate::page_table::{pte_pfn, PTE_WRITABLE};
    use crate::tlb::set_assoc::FLAG_WRITABLE;
    let Some(pte) = cur else { return true };
    if pte & crate::page_table::PTE_PROTNONE != 0 {
        // A NUMA-hinting PTE grants no access.
        return true;
    }
    let frame = Pfn(e.pfn.0 + (vpn.0 - e.vpn.0));
    let cur_frame = Pfn(pte_pfn(pte).0 + (vpn.0 & (pte_size_pages(pte, e) - 1)));
    frame != cur_frame || (e.flags & FLAG_WRITABLE != 0 && pte & PTE_WRITABLE == 0)
}

fn pte_size_pages(pte: u64, e: &crate::tlb::TlbEntry) -> u64 {
    if pte & crate::page_table::PTE_HUGE != 0 {
        // A huge leaf is 2 MiB here (1 GiB leaves are not made by the OS model).
        512
    } else {
        let _ = e;
        1
    }
}

/// Sees the entries a per-page flush removes; notes whether one was stale.
pub(super) struct StaleSeen<'a> {
    pub pages: &'a [Vpn],
    pub leaves: &'a [Option<u64>],
    pub held: bool,
}

impl crate::tlb::hierarchy::TlbListener for StaleSeen<'_> {
    fn inserted(&mut self, _: CoreId, _: usize, _: &crate::tlb::TlbEntry) {}
    fn evicted(&mut self, _: CoreId, structure: usize, e: &crate::tlb::TlbEntry) {
        if self.held || structure >= crate::tlb::hierarchy::PWC_PML4 {
            return;
        }
        let end = e.vpn.0 + e.size.pages_4k();
        if let Some(i) = self.pages.iter().position(|v| v.0 >= e.vpn.0 && v.0 < end) {
            self.held = entry_is_stale(e, self.pages[i], self.leaves[i]);
        }
    }
}
