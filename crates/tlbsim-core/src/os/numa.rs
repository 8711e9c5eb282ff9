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
//!   or the same node, subject to the NUMA-group rule below. The page then moves to a new frame there
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
//! - **NUMA groups** (`os.numa_groups`; kernel/sched/fair.c, read at torvalds/linux
//!   000619680c37, a v5.x tree: `task_numa_fault`, `task_numa_group`,
//!   `should_numa_migrate_memory`). Each thread counts its hinting faults per node: by the
//!   page's node after any move (`numa_faults[NUMA_MEM]`) and by the faulting core's node
//!   (`NUMA_CPU`), into buffers that `task_numa_placement` folds in once per pass of the
//!   process's scan (`numa_scan_seq`): each count halves, then gains the buffer (the
//!   CPU count gains 65536 × the node's share of the thread's faults since, Linux's
//!   `f_weight`). A fault on a writable page (a read-only one is `TNF_NO_GROUP`) whose last
//!   fault was another thread's puts the faulting thread in a group of its own if it has
//!   none; it joins the other thread's group if that thread still runs on the core it
//!   faulted from (the cpupid match), has a group, the group is at least as big (ties:
//!   the lower group number), and both are threads of one process; the group's counts
//!   are the sum of its threads'. A fault of a thread of another process counts as
//!   private. `should_numa_migrate_memory` in Linux's order: a first or private fault
//!   moves the page while the thread has no preferred node or in its first 4 passes;
//!   then a fault from another node than the page's last one does not move it; a private
//!   fault, or a thread in no group, does; a shared fault moves it only if the group's
//!   CPU count of the destination is more than 3 (`ACTIVE_NODE_FRACTION`) times the
//!   source's, or CPU(dst)/mem(dst) × 3/4 > CPU(src)/mem(src) (the 3/4 hysteresis). A
//!   shared fault between two of the group's active nodes (CPU count above 1/3 of its
//!   largest) counts as local for the scan period. A thread that exits takes its counts
//!   out of its group (`task_numa_free`). Off: no groups, every fault of another thread
//!   is shared, and the two-stage filter alone decides.
//! - **Task placement** (`os.numa_task_placement`; `task_numa_placement`,
//!   `numa_migrate_preferred`, `task_numa_migrate`, `task_numa_compare`). At a hinting
//!   fault due for a retry (at first, then min(1 s, scan period / 16) after the last),
//!   the thread's preferred node becomes the one with the most decayed faults (its
//!   group's, in a group; 2-socket machines are NUMA_DIRECT, so no distance scoring).
//!   A thread not on it looks at the cores of that node: an idle core takes it if moving
//!   one thread there does not worsen the imbalance of running threads per core between
//!   the two nodes (`load_too_imbalanced` with every thread's load equal); a core running
//!   a thread that may run on the source core is a swap if the gain (fault weights per
//!   mille, `task_weight`/`group_weight`: the thread's gain plus the other's, less 1/16
//!   inside one group) is at least `SMALLIMP` (30) and 15 above the best so far. Pinned
//!   threads neither move nor are swapped. The thread (and its swap partner) moves at its
//!   next operation boundary, as `migrate_task_to`/`migrate_swap` preempt it; a core
//!   already chosen is not chosen again until then (`rq->numa_migrate_on`).
//!
//! Simplified, besides: the runtime weight of the CPU counts is 1 (a thread runs all the
//! period it is not blocked); private and shared counts are summed per node (Linux keeps
//! them apart for the scan period's group scaling, `task_scan_max`, not modelled);
//! `task_numa_migrate` searches only the preferred node (Linux also tries the other
//! nodes when that one has no room, or when the group spans several nodes, and then may
//! change the preferred node), takes the first idle core (Linux the last, then
//! `select_idle_sibling`), and does not move a thread onto a busy core whose thread stays
//! (`maymove && moveimp > imp`); the `TNF_SHARED` join of threads of different processes
//! sharing a file page is not modelled (such pages are not moved here anyway); no task
//! placement under a hypervisor (a guest sees no sockets).

use super::mm::{HUGE, PAGE};
use super::{Gather, Os};
use crate::coherence::{Coherence, FlushReason};
use crate::config::Config;
use crate::error::Result;
use crate::fasthash::FastMap;
use crate::memory::FrameKind;
use crate::page_table::{make_pte, pte_pfn, Leaf, PTE_PFN_MASK, PTE_PROTNONE, PTE_WRITABLE};
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
    /// Frame → (thread, core) of its last hinting fault (`last_cpupid`); a freed frame
    /// forgets it.
    last_fault: FastMap<u64, (u32, u32)>,
    /// `os.numa_hint_order = "restore-first"`: a moved page's PTE is accessible when it is
    /// unmapped, and flushed.
    restore_first: bool,
    /// `os.numa_groups`, `os.numa_task_placement`.
    groups_on: bool,
    placement_on: bool,
    /// NUMA nodes (sockets).
    nodes: usize,
    /// One second in cycles (HZ: `numa_migrate_preferred`'s longest retry interval).
    second: u64,
    /// Per thread, its fault statistics and placement (Linux's task_struct fields).
    tasks: Vec<NumaTask>,
    /// NUMA groups (`struct numa_group`); a group whose threads all left stays, empty.
    groups: Vec<NumaGroup>,
}

/// A thread's NUMA statistics (task_struct's `numa_faults`, `numa_group`,
/// `numa_preferred_nid`, `numa_scan_seq`, `numa_migrate_retry`).
#[derive(Clone, Default)]
struct NumaTask {
    /// Decayed faults per node: by the page's node (`NUMA_MEM`), by the faulting core's
    /// node, CPU-weighted (`NUMA_CPU`); their sum of `mem` (`total_numa_faults`).
    mem: Vec<i64>,
    cpu: Vec<i64>,
    total: i64,
    /// Faults since the last placement (`NUMA_MEMBUF`, `NUMA_CPUBUF`).
    mem_buf: Vec<i64>,
    cpu_buf: Vec<i64>,
    group: Option<usize>,
    preferred: Option<usize>,
    /// The process's scan pass this thread last placed itself at.
    scan_seq: u64,
    /// When `numa_migrate_preferred` may run again.
    migrate_retry: u64,
    /// A core `task_numa_migrate` chose for it: it moves there at its next operation.
    move_to: Option<usize>,
}

/// `struct numa_group`: its threads' counts summed.
#[derive(Clone, Default)]
struct NumaGroup {
    nr_tasks: u32,
    mem: Vec<i64>,
    cpu: Vec<i64>,
    total: i64,
    /// `max_faults_cpu`, `active_nodes` (numa_group_count_active_nodes).
    max_cpu: i64,
    active_nodes: u32,
}

/// `ACTIVE_NODE_FRACTION` (kernel/sched/fair.c): a node with more than 1/3 of the
/// group's largest CPU count is active; a destination with 3 times the source's CPU
/// count takes a shared page at once.
const ACTIVE_NODE_FRACTION: i64 = 3;
/// `SMALLIMP` (kernel/sched/fair.c): the least gain, per mille of faults, for a swap.
const SMALLIMP: i64 = 30;
/// `should_numa_migrate_memory`: private faults move pages at once in a thread's first
/// this many scan passes.
const EARLY_SCAN_PASSES: u64 = 4;

impl NumaGroup {
    fn active(&self, node: usize) -> bool {
        self.cpu[node] * ACTIVE_NODE_FRACTION > self.max_cpu
    }
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
    /// Passes of the scan over the address space so far (`mm->numa_scan_seq`).
    scan_seq: u64,
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
    /// Threads moved by task placement (to an idle core or by a swap), and swaps decided.
    pub task_migrations: u64,
    pub task_swaps: u64,
    /// Threads that joined another thread's NUMA group.
    pub group_joins: u64,
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
                groups_on: os.numa_groups,
                placement_on: os.numa_task_placement,
                nodes: cfg.machine.sockets as usize,
                second: (1000.0 * cycles_per_ms).round() as u64,
                tasks: Vec::new(),
                groups: Vec::new(),
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

    fn task(&mut self, thread: usize, seq: u64) -> &mut NumaTask {
        if self.tasks.len() <= thread {
            self.tasks.resize(thread + 1, NumaTask::default());
        }
        let t = &mut self.tasks[thread];
        if t.mem.is_empty() {
            // task_numa_fault allocates the counts at the thread's first hinting fault; a
            // thread starts at its process's scan pass (init_numa_balancing).
            let n = self.nodes;
            *t = NumaTask { mem: vec![0; n], cpu: vec![0; n], mem_buf: vec![0; n], cpu_buf: vec![0; n], scan_seq: seq, ..NumaTask::default() };
        }
        t
    }

    /// `task_weight` / `group_weight` (NUMA_DIRECT: no nearby-node score): the node's
    /// share of the thread's (its group's) decayed faults, per mille.
    fn task_weight(&self, thread: usize, node: usize) -> i64 {
        self.tasks.get(thread).filter(|t| t.total > 0 && !t.mem.is_empty()).map_or(0, |t| 1000 * t.mem[node] / t.total)
    }

    fn group_weight(&self, thread: usize, node: usize) -> i64 {
        let g = self.tasks.get(thread).and_then(|t| t.group).map(|g| &self.groups[g]);
        g.filter(|g| g.total > 0).map_or(0, |g| 1000 * g.mem[node] / g.total)
    }

    /// should_numa_migrate_memory: whether a hinting fault of `thread` from node `dst` on a
    /// page on node `src`, whose last fault was `last` (thread, node), moves it.
    fn should_migrate(&self, thread: usize, last: Option<(usize, usize)>, src: usize, dst: usize) -> bool {
        let t = self.tasks.get(thread).filter(|t| !t.mem.is_empty());
        let private = last.is_none_or(|(lt, _)| lt == thread);
        let (no_preferred, seq) = t.map_or((true, 0), |t| (t.preferred.is_none(), t.scan_seq));
        if (no_preferred || seq <= EARLY_SCAN_PASSES) && private {
            return true;
        }
        // The two-stage filter: the same node twice in a row.
        if last.is_some_and(|(_, n)| n != dst) {
            return false;
        }
        if private {
            return true;
        }
        let Some(g) = t.and_then(|t| t.group) else { return true };
        let g = &self.groups[g];
        if g.cpu[dst] > g.cpu[src] * ACTIVE_NODE_FRACTION {
            return true;
        }
        // faults_cpu(dst)/faults_mem(dst) * 3/4 > faults_cpu(src)/faults_mem(src).
        (g.cpu[dst] as i128) * (g.mem[src] as i128) * 3 > (g.cpu[src] as i128) * (g.mem[dst] as i128) * 4
    }

    /// task_numa_group: `me` faulted on a page `other` faulted on last. Returns whether the
    /// fault counts as private (false sharing: a thread of another process) and whether
    /// `me` joined `other`'s group.
    fn task_numa_group(&mut self, me: usize, other: usize, other_running: bool, same_mm: bool, seq: u64) -> (bool, bool) {
        if self.task(me, seq).group.is_none() {
            let t = &self.tasks[me];
            let g = NumaGroup { nr_tasks: 1, mem: t.mem.clone(), cpu: t.cpu.clone(), total: t.total, max_cpu: 0, active_nodes: 1 };
            self.groups.push(g);
            self.tasks[me].group = Some(self.groups.len() - 1);
        }
        let mine = self.tasks[me].group.expect("set above");
        let Some(theirs) = self.tasks.get(other).and_then(|t| t.group) else { return (false, false) };
        if !other_running || theirs == mine {
            return (false, false);
        }
        // Only join the bigger group (ties: the lower number, Linux's lower address).
        let (a, b) = (self.groups[mine].nr_tasks, self.groups[theirs].nr_tasks);
        if a > b || (a == b && mine > theirs) {
            return (false, false);
        }
        if !same_mm {
            return (true, false);
        }
        let t = &self.tasks[me];
        for n in 0..self.nodes {
            self.groups[mine].mem[n] -= t.mem[n];
            self.groups[mine].cpu[n] -= t.cpu[n];
            self.groups[theirs].mem[n] += t.mem[n];
            self.groups[theirs].cpu[n] += t.cpu[n];
        }
        self.groups[mine].total -= t.total;
        self.groups[theirs].total += t.total;
        self.groups[mine].nr_tasks -= 1;
        self.groups[theirs].nr_tasks += 1;
        self.tasks[me].group = Some(theirs);
        (false, true)
    }

    /// task_numa_placement: once per scan pass, fold the thread's new faults into its
    /// (and its group's) decayed counts and pick its preferred node.
    fn task_numa_placement(&mut self, thread: usize, seq: u64) {
        let t = &mut self.tasks[thread];
        if t.scan_seq == seq {
            return;
        }
        t.scan_seq = seq;
        let total_buf: i64 = t.mem_buf.iter().sum();
        let group = t.group;
        let (mut max_faults, mut max_nid) = (0, None);
        for n in 0..self.nodes {
            let t = &mut self.tasks[thread];
            let diff = t.mem_buf[n] - t.mem[n] / 2;
            // f_weight with the runtime share taken as 1: 65536 × the node's share.
            let f_weight = (t.cpu_buf[n] << 16) / (total_buf + 1);
            let f_diff = f_weight - t.cpu[n] / 2;
            t.mem_buf[n] = 0;
            t.cpu_buf[n] = 0;
            t.mem[n] += diff;
            t.cpu[n] += f_diff;
            t.total += diff;
            let mut faults = t.mem[n];
            if let Some(g) = group {
                let g = &mut self.groups[g];
                g.mem[n] += diff;
                g.cpu[n] += f_diff;
                g.total += diff;
                faults = g.mem[n];
            }
            if faults > max_faults {
                max_faults = faults;
                max_nid = Some(n);
            }
        }
        if let Some(g) = group {
            let g = &mut self.groups[g];
            g.max_cpu = g.cpu.iter().copied().max().unwrap_or(0);
            g.active_nodes = (0..self.nodes).filter(|&n| g.active(n)).count() as u32;
        }
        if max_faults > 0 {
            self.tasks[thread].preferred = max_nid;
        }
    }

    /// task_numa_free: an exited thread's counts leave its group.
    pub(crate) fn thread_exited(&mut self, thread: usize) {
        let Some(t) = self.tasks.get_mut(thread) else { return };
        t.move_to = None;
        let Some(g) = t.group.take() else { return };
        let t = &self.tasks[thread];
        let g = &mut self.groups[g];
        for n in 0..self.nodes {
            g.mem[n] -= t.mem[n];
            g.cpu[n] -= t.cpu[n];
        }
        g.total -= t.total;
        g.nr_tasks -= 1;
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
                // Past the last VMA: the next scan starts over (reset_ptenuma_scan), a new
                // pass (numa_scan_seq).
                start = 0;
                self.numa.as_mut().expect("numa balancing on").proc(pid).scan_seq += 1;
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
    /// node if `should_numa_migrate_memory` lets it, else give the PTE its protection back;
    /// then `task_numa_fault`.
    pub(super) fn numa_hint_fault(&mut self, core: usize, pid: u32, page: u64, leaf: Leaf) -> Result<()> {
        let thread = self.cores[core].current;
        let node = self.m.cores[core].socket;
        let old = pte_pfn(leaf.pte);
        let page_node = crate::memory::node_of(old).0;
        self.numa_stats.hint_faults += 1;
        let restored = leaf.pte & !PTE_PROTNONE;
        let numa = self.numa.as_mut().expect("numa balancing on");
        let me = thread.unwrap_or(usize::MAX);
        let last = numa.last_fault.insert(old.0, (me as u32, core as u32)).map(|(t, c)| (t as usize, c as usize));
        let last_node = last.map(|(t, c)| (t, self.m.cores[c].socket as usize));
        let numa = self.numa.as_ref().expect("numa balancing on");
        let migrate = page_node != node && self.m.mem.mapcount(old) <= 1 && numa.should_migrate(me, last_node, page_node as usize, node as usize);
        if page_node == node {
            self.numa_stats.hint_faults_local += 1;
        }
        let mut ptl = super::locks::PtlCursor::default();
        self.ptl_at(core, &mut ptl, pid, page);
        let new = if migrate { self.alloc_frame_on(core, NodeId(node), FrameKind::Data, self.m.mem.owner(old)).ok() } else { None };
        let fault = HintFault {
            last,
            mem_node: if new.is_some() { node } else { page_node } as usize,
            local: page_node == node || new.is_some(),
            failed: migrate && new.is_none(),
            writable: restored & PTE_WRITABLE != 0,
        };
        self.task_numa_fault(core, pid, thread, fault);
        let Some(new) = new else {
            // No move (or no free frame there: migration fails and the page stays).
            self.pte_write(core, pid, page, &leaf, restored);
            self.ptl_release(core, &mut ptl);
            return Ok(());
        };
        self.take_frame_identity(core, old, new);
        // The old frame forgets its faults when it is freed (`forget`).
        self.numa.as_mut().expect("numa balancing on").last_fault.insert(new.0, (me as u32, core as u32));
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

    /// task_numa_fault: the fault's share of the scan-period counts, the NUMA group
    /// (task_numa_group), a due placement and move (task_numa_placement,
    /// numa_migrate_preferred), and the thread's per-node counts.
    fn task_numa_fault(&mut self, core: usize, pid: u32, thread: Option<usize>, f: HintFault) {
        let now = self.clock(core);
        let cpu_node = self.m.cores[core].socket as usize;
        let numa = self.numa.as_mut().expect("numa balancing on");
        let seq = numa.proc(pid).scan_seq;
        let mut private = match (thread, f.last) {
            (_, None) => true,
            (Some(me), Some((t, _))) => t == me,
            (None, Some(_)) => false,
        };
        let mut local = f.local;
        if let Some(me) = thread {
            numa.task(me, seq);
            // A read-only page gives no grouping (do_numa_page's TNF_NO_GROUP).
            if let (false, true, true, Some((other, other_core))) = (private, numa.groups_on, f.writable, f.last) {
                let running = self.cores[other_core].current == Some(other);
                let same_mm = self.threads.get(other).is_some_and(|t| t.pid == pid);
                let joined;
                (private, joined) = numa.task_numa_group(me, other, running, same_mm, seq);
                self.numa_stats.group_joins += joined as u64;
            }
            // A shared fault within the group's active nodes counts as local.
            if let Some(g) = numa.tasks[me].group.map(|g| &numa.groups[g]) {
                if !private && !local && g.active_nodes > 1 && g.active(cpu_node) && g.active(f.mem_node) {
                    local = true;
                }
            }
        }
        let p = numa.proc(pid);
        if private {
            p.faults_private += 1;
        } else {
            p.faults_shared += 1;
        }
        if local {
            p.faults_local += 1;
        } else {
            p.faults_remote += 1;
        }
        if f.failed {
            p.migrations_failed += 1;
        }
        let period = p.period;
        let Some(me) = thread else { return };
        let period = if period == 0 { numa.period_min } else { period };
        if now >= numa.tasks[me].migrate_retry {
            numa.task_numa_placement(me, seq);
            self.numa_migrate_preferred(core, me, now, period);
        }
        let t = &mut self.numa.as_mut().expect("numa balancing on").tasks[me];
        t.mem_buf[f.mem_node] += 1;
        t.cpu_buf[cpu_node] += 1;
    }

    /// numa_migrate_preferred: retry later; a thread off its preferred node tries to move.
    fn numa_migrate_preferred(&mut self, core: usize, thread: usize, now: u64, period: u64) {
        let numa = self.numa.as_mut().expect("numa balancing on");
        let Some(preferred) = numa.tasks[thread].preferred else { return };
        numa.tasks[thread].migrate_retry = now + numa.second.min(period / 16);
        if !numa.placement_on || self.virt.is_some() || preferred == self.m.cores[core].socket as usize {
            return;
        }
        self.task_numa_migrate(core, thread, preferred);
    }

    /// task_numa_migrate on the preferred node only (task_numa_find_cpu,
    /// task_numa_compare): an idle core if the move keeps the nodes' load balance, else the
    /// best swap worth `SMALLIMP`.
    fn task_numa_migrate(&mut self, core: usize, thread: usize, dst: usize) {
        if self.threads[thread].pinned {
            return;
        }
        let src = self.m.cores[core].socket as usize;
        let numa = self.numa.as_ref().expect("numa balancing on");
        let ng = numa.tasks[thread].group;
        let taskimp = numa.task_weight(thread, dst) - numa.task_weight(thread, src);
        let groupimp = numa.group_weight(thread, dst) - numa.group_weight(thread, src);
        let base = if ng.is_some() { groupimp } else { taskimp };
        // load_too_imbalanced with every thread's load 1: running and queued threads
        // against each node's cores.
        let (mut load, mut cap) = ([0i64; 2], [0i64; 2]);
        for c in 0..self.cores.len() {
            let n = self.m.cores[c].socket as usize;
            let i = if n == src {
                0
            } else if n == dst {
                1
            } else {
                continue;
            };
            cap[i] += 1;
            load[i] += self.cores[c].current.is_some() as i64 + self.cores[c].runq.len() as i64;
        }
        let imb = |s: i64, d: i64| (d * cap[0] - s * cap[1]).abs();
        let maymove = imb(load[0] - 1, load[1] + 1) <= imb(load[0], load[1]);
        let chosen: Vec<usize> = numa.tasks.iter().filter_map(|t| t.move_to).collect();
        let (mut best, mut best_imp) = (None, 0i64);
        // task_numa_find_cpu: only the CPUs of the node in the thread's `cpus_ptr`; a swap
        // only with a thread whose `cpus_ptr` has this one's CPU (task_numa_compare).
        for c in (0..self.cores.len()).filter(|&c| self.m.cores[c].socket as usize == dst && !chosen.contains(&c) && self.may_run_on(thread, c)) {
            match self.cores[c].current {
                // The first idle core (a later one would only tie).
                None if self.core_idle(c) && maymove && base >= best_imp && !matches!(best, Some((_, None))) => {
                    best = Some((c, None));
                    best_imp = base;
                }
                None => {}
                Some(cur) => {
                    if cur == thread || !self.may_run_on(cur, core) {
                        continue;
                    }
                    let cur_ng = numa.tasks.get(cur).and_then(|t| t.group);
                    let imp = if cur_ng == ng {
                        let imp = taskimp + numa.task_weight(cur, src) - numa.task_weight(cur, dst);
                        // Hysteresis against swapping within a group over tiny differences.
                        if ng.is_some() {
                            imp - imp / 16
                        } else {
                            imp
                        }
                    } else if cur_ng.is_some() && ng.is_some() {
                        base + numa.group_weight(cur, src) - numa.group_weight(cur, dst)
                    } else {
                        base + numa.task_weight(cur, src) - numa.task_weight(cur, dst)
                    };
                    if imp < SMALLIMP || imp <= best_imp + SMALLIMP / 2 {
                        continue;
                    }
                    best = Some((c, Some(cur)));
                    best_imp = imp;
                }
            }
        }
        let Some((to, swap)) = best else { return };
        let numa = self.numa.as_mut().expect("numa balancing on");
        numa.tasks[thread].move_to = Some(to);
        if let Some(other) = swap {
            numa.task(other, 0).move_to = Some(core);
            self.numa_stats.task_swaps += 1;
        }
    }

    /// A move task placement chose for `thread`, now at an operation boundary on `core`
    /// (migrate_task_to/migrate_swap): it leaves the core for the chosen one. True if it
    /// left.
    pub(super) fn numa_move_due(&mut self, core: usize, thread: usize) -> bool {
        let Some(numa) = self.numa.as_mut() else { return false };
        let Some(to) = numa.tasks.get_mut(thread).and_then(|t| t.move_to.take()) else { return false };
        if to == core || self.threads[thread].pinned {
            return false;
        }
        let now = self.clock(core);
        self.cores[core].current = None;
        self.cores[core].leap = None;
        self.enqueue(thread, to, now);
        self.numa_stats.task_migrations += 1;
        true
    }
}

/// What `task_numa_fault` learns from do_numa_page: the page's last fault (thread,
/// core), its node after any move, whether the fault was local (or moved the page),
/// whether a move failed, and whether the PTE is writable.
struct HintFault {
    last: Option<(usize, usize)>,
    mem_node: usize,
    local: bool,
    failed: bool,
    writable: bool,
}

/// VMAs task_numa_work changes: not a read-only file mapping (shared libraries' text).
fn scannable(v: &super::Vma) -> bool {
    !matches!(v.backing, crate::workload::program::Backing::File { .. }) || v.writable
}
