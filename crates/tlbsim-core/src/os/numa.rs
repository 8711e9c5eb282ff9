//! AutoNUMA, Linux's automatic NUMA balancing (`os.numa_balancing`), as Mitosis §3.1 and
//! Table 3's F-A configurations use it: data pages move toward the node of the cores that
//! access them; page-table pages never move (Mitosis §3.1, observation 4).
//!
//! Modelled, after Linux 6.x:
//! - **The scan** (kernel/sched/fair.c `task_numa_work`). A thread of the process that
//!   returns to user space once the process's next scan is due (`numa_scan_delay_ms` after
//!   its start, then every `numa_scan_period_ms`) scans its address space from where the
//!   last scan stopped, VMA by VMA, in chunks of at most `numa_scan_size_mb`:
//!   `change_prot_numa` makes every mapped 4 KiB PTE of a data page PROT_NONE
//!   (`PTE_PROTNONE`: not accessible, its frame kept) at `costs.per_page` each, and each
//!   chunk ends with one TLB flush of its range (`numa_hint` in `shootdowns_sent_by_reason`;
//!   above the flush ceiling, a full flush). A scan stops after `numa_scan_size_mb` of
//!   chunks that changed a PTE, or 8 times that of address space (Linux's `virtpages`), and
//!   the next one goes on from there; past the last VMA it starts again from the first.
//!   The scan takes `mmap_lock` with a trylock: when a writer holds it, this period's scan
//!   is skipped.
//! - **The NUMA hinting fault** (mm/memory.c `do_numa_page`). The walker finds the PTE
//!   not accessible and faults (`numa_hint_faults`, `numa_hint_faults_local` when the page
//!   is already on the faulting core's node). The target is the faulting core's node (the
//!   default memory policy's MPOL_F_MORON). `should_numa_migrate_memory`'s two-stage
//!   filter: each frame remembers the thread and node of its last hinting fault (its
//!   `last_cpupid`); a page migrates if that was unset, the same thread (a private fault),
//!   or the same node. The page then moves to a new frame there
//!   (`migrate_misplaced_folio`: a copy, `costs.copy_page`), and its PTE points to it with
//!   its protection back. Because the PTE was PROT_NONE, no TLB can hold it, so the move
//!   needs no flush (`ptep_clear_flush` flushes only an accessible PTE), unless a flush of
//!   the page is still in flight (`pte_accessible`'s `tlb_flush_pending` check): then the
//!   old frame is freed after a flush of its own. Otherwise the PTE gets its protection
//!   back (writable if it was: Linux's saved write bit), and nothing else changes.
//!
//! - `os.numa_hint_order = "restore-first"`: Linux 3.19 to 4.x (the ABIS paper's 4.5)
//!   restored the PTE (present, young) before migrate_misplaced_page, whose
//!   try_to_unmap → ptep_clear_flush then flushed the accessible PTE: every page moved
//!   costs a flush of its own (`migration` in `shootdowns_sent_by_reason`).
//!
//! Simplified:
//! - 2 MiB pages are left out of the scan (Linux marks PMDs too and moves a THP whole).
//! - Pages mapped more than once (fork's copy-on-write, shared file pages) are restored,
//!   not moved (Linux moves them subject to its NUMA-group statistics).
//! - **The scan period** adapts per process as `update_task_scan_period` does, at each scan
//!   from the hinting faults since the last: none, or a failed migration: doubled; local
//!   faults (a migrated page's fault counts as local) at least 7 in 10: longer by
//!   (ratio − 7, at least 1) tenths; else shorter by (7 − max(local, private ratio))
//!   tenths; within [`numa_scan_period_ms`, `numa_scan_period_max_ms`]. Linux updates it
//!   once per pass over the address space and raises the floor for small address spaces
//!   (`task_scan_min`); here every scan updates it and the floor is the configured one.
//!
//! Simplified, besides: the task placement part of NUMA balancing (moving threads toward
//! their memory, `numa_preferred_nid`, NUMA groups) is not modelled: threads stay where
//! the workload pins them.

use super::mm::{HUGE, PAGE};
use super::{Gather, Os};
use crate::coherence::{Coherence, FlushReason};
use crate::config::Config;
use crate::error::Result;
use crate::fasthash::FastMap;
use crate::memory::FrameKind;
use crate::page_table::{make_pte, pte_pfn, Leaf, PTE_PFN_MASK, PTE_PROTNONE};
use crate::types::{NodeId, Pfn, Vpn};

/// AutoNUMA's state: its parameters in cycles and pages, per process its scan, per frame
/// its last hinting fault.
pub(crate) struct NumaBalancing {
    delay: u64,
    period_min: u64,
    period_max: u64,
    /// `numa_scan_size_mb` in pages.
    scan_pages: u64,
    procs: Vec<NumaProc>,
    /// Frame → (thread, node) of its last hinting fault (`last_cpupid`); a freed frame
    /// forgets it.
    last_fault: FastMap<u64, (u32, u32)>,
    /// `os.numa_hint_order = "restore-first"`: a moved page's PTE is accessible when it is
    /// unmapped, and flushed.
    restore_first: bool,
}

#[derive(Clone, Copy, Default)]
struct NumaProc {
    /// When the next scan is due.
    next_scan: u64,
    /// Where the next scan starts (`mm->numa_scan_offset`).
    offset: u64,
    /// A scan that stopped to wait for its flush's acks: (thread, pages left, address
    /// space left, in pages).
    in_progress: Option<(usize, i64, i64)>,
    /// The scan period now (0: not yet set, the configured minimum).
    period: u64,
    /// Hinting faults since the last scan: on the faulting core's node (after any
    /// migration) or not, private (the same thread as the last fault, or the first) or
    /// shared, and migrations that failed.
    faults_local: u64,
    faults_remote: u64,
    faults_private: u64,
    faults_shared: u64,
    migrations_failed: u64,
}

impl NumaProc {
    /// update_task_scan_period (kernel/sched/fair.c): NUMA_PERIOD_SLOTS = 10,
    /// NUMA_PERIOD_THRESHOLD = 7.
    fn update_period(&mut self, min: u64, max: u64) {
        const SLOTS: u64 = 10;
        const THRESHOLD: i64 = 7;
        let period = if self.period == 0 { min } else { self.period };
        let (local, remote) = (self.faults_local, self.faults_remote);
        let (private, shared) = (self.faults_private, self.faults_shared);
        let next = if local + shared == 0 || self.migrations_failed > 0 {
            (period * 2).min(max)
        } else {
            let slot = period.div_ceil(SLOTS) as i64;
            let lr_ratio = (local * SLOTS / (local + remote).max(1)) as i64;
            let ps_ratio = (private * SLOTS / (private + shared).max(1)) as i64;
            let diff = if lr_ratio >= THRESHOLD { (lr_ratio - THRESHOLD).max(1) * slot } else { -(THRESHOLD - lr_ratio.max(ps_ratio)) * slot };
            (period as i64 + diff).clamp(min as i64, max as i64) as u64
        };
        self.period = next;
        self.faults_local = 0;
        self.faults_remote = 0;
        self.faults_private = 0;
        self.faults_shared = 0;
        self.migrations_failed = 0;
    }
}

/// Counters (stats.json `totals.numa_balancing`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NumaStats {
    pub scans: u64,
    pub scans_skipped_locked: u64,
    pub pte_updates: u64,
    pub hint_faults: u64,
    pub hint_faults_local: u64,
    pub pages_migrated: u64,
    pub migrations_flushed: u64,
}

impl NumaBalancing {
    pub(crate) fn new(cfg: &Config) -> Option<Box<NumaBalancing>> {
        let os = &cfg.os;
        os.numa_balancing.then(|| {
            let cycles_per_ms = cfg.machine.frequency_ghz * 1e6;
            Box::new(NumaBalancing {
                delay: (os.numa_scan_delay_ms * cycles_per_ms).round().max(1.0) as u64,
                period_min: (os.numa_scan_period_ms * cycles_per_ms).round().max(1.0) as u64,
                period_max: (os.numa_scan_period_max_ms * cycles_per_ms).round().max(1.0) as u64,
                scan_pages: os.numa_scan_size_mb << 8,
                procs: Vec::new(),
                last_fault: FastMap::default(),
                restore_first: os.numa_hint_order == "restore-first",
            })
        })
    }

    fn proc(&mut self, pid: u32) -> &mut NumaProc {
        let i = pid as usize;
        if self.procs.len() <= i {
            self.procs.resize(i + 1, NumaProc::default());
        }
        &mut self.procs[i]
    }

    /// init_numa_balancing: a new process's first scan is due the delay after its creation.
    pub(crate) fn process_created(&mut self, pid: u32, now: u64) {
        let delay = self.delay;
        *self.proc(pid) = NumaProc { next_scan: now + delay, ..NumaProc::default() };
    }

    /// A frame was freed: its next user starts with no fault history.
    #[inline]
    pub(crate) fn forget(&mut self, pfn: Pfn) {
        if !self.last_fault.is_empty() {
            self.last_fault.remove(&pfn.0);
        }
    }
}

impl<P: Coherence> Os<P> {
    /// Whether `thread`, about to run its next operation on `core`, first runs (or goes on
    /// with) its process's NUMA scan.
    pub(super) fn numa_scan_due(&mut self, core: usize, thread: usize) -> bool {
        let now = self.clock(core);
        let pid = self.threads[thread].pid;
        let Some(numa) = self.numa.as_mut() else { return false };
        let p = numa.proc(pid);
        match p.in_progress {
            Some((t, _, _)) if t == thread => true,
            // Another thread's scan waits for its acks; one whose thread exited meanwhile
            // is dropped (the next period's scan starts from where it stopped).
            Some((t, _, _)) => {
                if self.threads[t].state == super::ThreadState::Exited {
                    p.in_progress = None;
                }
                false
            }
            None => now >= p.next_scan,
        }
    }

    /// Run (or go on with) the process's scan on `core`: `task_numa_work`.
    pub(super) fn numa_scan(&mut self, core: usize, thread: usize) -> Result<()> {
        let now = self.clock(core);
        let pid = self.threads[thread].pid;
        let numa = self.numa.as_mut().expect("numa balancing on");
        let (min, max, scan_pages) = (numa.period_min, numa.period_max, numa.scan_pages);
        let p = numa.proc(pid);
        let (mut pages, mut virt) = match p.in_progress.take() {
            Some((_, pages, virt)) => (pages, virt),
            None => {
                p.update_period(min, max);
                p.next_scan = now + p.period;
                // mmap_read_trylock: a writer holding the lock skips this period's scan.
                if self.locks.enabled() && !self.spaces[pid as usize].mmap_lock.read_free(now) {
                    self.numa_stats.scans_skipped_locked += 1;
                    return Ok(());
                }
                self.numa_stats.scans += 1;
                (scan_pages as i64, 8 * scan_pages as i64)
            }
        };
        let mut start = self.numa.as_ref().map_or(0, |n| n.procs[pid as usize].offset);
        loop {
            // The VMA at or after `start` that the scan may change.
            let next = self.spaces[pid as usize].vmas.range(..).find(|(_, v)| v.end > start && !v.reserved && scannable(v)).map(|(&s, v)| (s, v.end));
            let Some((vma_start, vma_end)) = next else {
                // Past the last VMA: the next scan starts over (reset_ptenuma_scan).
                start = 0;
                break;
            };
            let from = start.max(vma_start);
            let end = ((from + (pages.max(1) as u64) * PAGE).div_ceil(HUGE) * HUGE).min(vma_end);
            let (changed, waits) = self.change_prot_numa(core, pid, from, end);
            let span = ((end - from) / PAGE) as i64;
            if changed > 0 {
                pages -= span;
            }
            virt -= span;
            start = end;
            if waits {
                if pages > 0 && virt > 0 {
                    // Go on from `start` when the core is back.
                    let numa = self.numa.as_mut().expect("numa balancing on");
                    let p = numa.proc(pid);
                    p.offset = start;
                    p.in_progress = Some((thread, pages, virt));
                    self.set_kernel_span(core, now);
                    return Ok(());
                }
                break;
            }
            if pages <= 0 || virt <= 0 {
                break;
            }
        }
        self.numa.as_mut().expect("numa balancing on").proc(pid).offset = start;
        self.set_kernel_span(core, now);
        Ok(())
    }

    /// change_prot_numa over `[from, end)`: PROT_NONE on each mapped 4 KiB data page, then
    /// one flush of the range. Returns the PTEs changed and whether the flush left the core
    /// waiting for acks.
    fn change_prot_numa(&mut self, core: usize, pid: u32, from: u64, end: u64) -> (u64, bool) {
        let mut gather = Gather::default();
        let mut page = from;
        let mut ptl = super::locks::PtlCursor::default();
        let mut changed = 0;
        while let Some((at, leaf)) = self.next_leaf(pid, page, end) {
            page = at;
            if leaf.level != 1 {
                page = (page & !(HUGE - 1)) + HUGE;
                continue;
            }
            page += PAGE;
            let pfn = pte_pfn(leaf.pte);
            // Already PROT_NONE, the zero page, or not a data frame: left alone (Linux skips
            // the zero page and pages already prot_none).
            if leaf.pte & PTE_PROTNONE != 0 || Some(pfn) == self.zero_page || self.m.mem.desc(pfn).kind != FrameKind::Data {
                continue;
            }
            self.ptl_at(core, &mut ptl, pid, at);
            let old = self.pte_write(core, pid, at, &leaf, leaf.pte | PTE_PROTNONE);
            gather.page(Vpn(at >> 12), old);
            self.charge(core, self.settings.costs().per_page);
            changed += 1;
        }
        self.ptl_release(core, &mut ptl);
        self.numa_stats.pte_updates += changed;
        // As mprotect's change_protection: the request lists its pages, and a core with more
        // than the ceiling to flush flushes whole when it takes the request (the delivery
        // path decides). Marking the request itself full made a policy lose each page's
        // state (ABIS could not tell a page moved later was uncached).
        let waits = self.flush(core, pid, FlushReason::NumaHint, false, gather);
        (changed, waits)
    }

    /// A fault on a PROT_NONE PTE (`do_numa_page`): move the page to the faulting core's
    /// node if the two-stage filter lets it, else give the PTE its protection back.
    pub(super) fn numa_hint_fault(&mut self, core: usize, pid: u32, page: u64, leaf: Leaf) -> Result<()> {
        let thread = self.cores[core].current.map_or(u32::MAX, |t| t as u32);
        let node = self.m.cores[core].socket;
        let old = pte_pfn(leaf.pte);
        let page_node = crate::memory::node_of(old).0;
        self.numa_stats.hint_faults += 1;
        let restored = leaf.pte & !PTE_PROTNONE;
        let numa = self.numa.as_mut().expect("numa balancing on");
        let last = numa.last_fault.insert(old.0, (thread, node));
        let private = last.is_none_or(|(t, _)| t == thread);
        let migrate = page_node != node && self.m.mem.mapcount(old) <= 1 && (private || last.is_some_and(|(_, n)| n == node));
        if page_node == node {
            self.numa_stats.hint_faults_local += 1;
        }
        let mut ptl = super::locks::PtlCursor::default();
        self.ptl_at(core, &mut ptl, pid, page);
        let new = if migrate { self.alloc_frame_on(core, NodeId(node), FrameKind::Data, self.m.mem.owner(old)).ok() } else { None };
        let p = self.numa.as_mut().expect("numa balancing on").proc(pid);
        if private {
            p.faults_private += 1;
        } else {
            p.faults_shared += 1;
        }
        if page_node == node || new.is_some() {
            p.faults_local += 1;
        } else {
            p.faults_remote += 1;
        }
        if migrate && new.is_none() {
            p.migrations_failed += 1;
        }
        let Some(new) = new else {
            // No move (or no free frame there: migration fails and the page stays).
            self.pte_write(core, pid, page, &leaf, restored);
            self.ptl_release(core, &mut ptl);
            return Ok(());
        };
        self.take_frame_identity(core, old, new);
        // The old frame forgets its faults when it is freed (`forget`).
        self.numa.as_mut().expect("numa balancing on").last_fault.insert(new.0, (thread, node));
        let old_pte = self.pte_write(core, pid, page, &leaf, make_pte(new, restored & !PTE_PFN_MASK));
        self.ptl_release(core, &mut ptl);
        self.drop_frame_identity(old);
        self.charge(core, self.settings.costs().copy_page + self.settings.costs().per_page);
        self.numa_stats.pages_migrated += 1;
        let restore_first = self.numa.as_ref().is_some_and(|n| n.restore_first);
        if restore_first || self.shootdowns.page_in_flight(pid, page >> 12) {
            // Linux 4.x made the PTE present and young before migrating, so the unmap flushes
            // it (`os.numa_hint_order`); or a flush of the page is still in flight: some core
            // may yet hold the old translation. Either way the old frame waits for a flush.
            self.numa_stats.migrations_flushed += 1;
            // The restored PTE is what the unmap clears. Linux's pte_mkyoung marks it young,
            // but no TLB has walked it (the fault has not returned to user space): the
            // model's accessed bit is the walker's, so it stays clear.
            let flushed = if restore_first { make_pte(old, restored & !PTE_PFN_MASK) } else { old_pte };
            let mut gather = Gather::default();
            gather.page(Vpn(page >> 12), flushed);
            gather.frames.push((old, 0));
            self.flush(core, pid, FlushReason::Migration, false, gather);
        } else {
            self.free_frame(core, old, 0);
        }
        Ok(())
    }
}

/// VMAs task_numa_work changes: not a read-only file mapping (shared libraries' text).
fn scannable(v: &super::Vma) -> bool {
    !matches!(v.backing, crate::workload::program::Backing::File { .. }) || v.writable
}
