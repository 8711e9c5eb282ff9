//! The OS model and the multi-core discrete-event engine (DESIGN.md "Physical memory and
//! the OS", "The shootdown", "Safety checker", "Time"; DiDi §V-A for the anatomy of a
//! shootdown; docs/LINUX_BASELINE.md for the kernel paths followed).
//!
//! Time: every core has a cycle clock. The core furthest behind among those with work runs
//! next, for at most `sim.quantum_cycles` past the next core's clock (or until an
//! interrupt is due), so cores are never more than a quantum apart. Interrupts carry an
//! arrival time and are taken in arrival order: a running target when its clock reaches
//! it (a target already past it takes it at once: the skew the quantum bounds); an idle
//! core, or one spinning for acks, is scheduled at the arrival; the spinner resumes at
//! the last ack, which its last target's handler sets. Wake-ups are timed events. Ties break by core number
//! and sequence number, so a run is deterministic for its seed.
//!
//! Kernel state per core: the running thread, a run queue, the loaded address space
//! (`loaded_mm`), the lazy-TLB flag, six PCID slots with the `tlb_gen` each caught up with
//! (Linux's dynamic ASIDs), and the interrupts pending. Per address space: VMAs, a page
//! table, `mm_cpumask`, `tlb_gen`. A shootdown: the initiator changes PTEs, bumps
//! `tlb_gen`, asks the coherence policy for targets, flushes itself, pays the IPI sends,
//! and spins until the last ack; each target pays interrupt entry/exit, its flush and the
//! ack (with contention growing with the number of targets); frames and page-table pages
//! are freed only when the protocol is over (mmu_gather), and the checker then marks every
//! translation still cached that disagrees with the page table.
//!
//! Simplified (each said where it matters): reclaim runs on the core whose allocation
//! crossed the group's low watermark (as memory-cgroup reclaim does in Linux; no per-node
//! kswapd thread); a page-cache miss is charged as a stall of
//! `costs.read_page` cycles, not as blocking; no VMs (tag paper) in OS mode: every process
//! is in VM 0.

mod access;
mod mm;
mod output;

use crate::coherence::{Coherence, CoreView, Delivery, FlushPlan, FlushRequest, LocalFlush, OsView, WithPolicy};
use crate::config::{Config, CostsConfig, Placement, Tagging};
use crate::error::{Error, Result};
use crate::rng::SplitMix64;
use crate::sim::{Machine, CLOCK_SHIFT};
use crate::tlb::hierarchy::{FlushCause, NoTlbListener};
use crate::types::{CoreId, NodeId, Pfn, Vpn};
use crate::workload::program::{Op, Workload};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::rc::Rc;

/// Linux x86's dynamic ASIDs per CPU (TLB_NR_DYN_ASIDS).
const PCID_SLOTS: usize = 6;
/// First-level page-cache fault-around: Linux's fault_around_bytes = 64 KiB.
const FAULT_AROUND_PAGES: u64 = 16;
/// Violation records kept in stats.json (the counts cover all).
const VIOLATION_RECORDS: usize = 16;
/// Top of the mmap area; mappings are placed top-down below it (Linux's mmap_base).
const MMAP_TOP: u64 = 0x7f00_0000_0000;
/// What every process has mapped below `MMAP_TOP` before its first mmap: the dynamic
/// loader, libc and the other libraries of a small C program (about 2 MiB of text and
/// data, ending at an address that is not 2 MiB aligned, as in a real process). New
/// mappings land right below it and share its last page-table page, which is why a
/// munmap of a small region frees no page table there (and a lazy CPU is not sent the
/// IPI): the `munmap-4k-sleep` row of the engine issue's table.
const LIBS_BYTES: u64 = (2 << 20) + (300 << 12);

/// Reasons of full flushes (stats `full_flushes_by_cause`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    Shootdown,
    Ceiling,
    ContextSwitch,
    LazySwitch,
    TagCapacity,
    TagForced,
}
pub(crate) const CAUSES: [&str; 6] = ["shootdown", "ceiling", "context_switch", "lazy_switch", "tag_capacity", "tag_forced"];

/// Per-core OS counters (stats.json, per core and summed).
#[derive(Clone, Debug, Default)]
pub(crate) struct OsCoreStats {
    pub shootdowns_sent: u64,
    pub shootdown_ipis_sent: u64,
    pub shootdown_ipis_received: u64,
    pub false_positive_targets: u64,
    pub pages_flushed: u64,
    pub full_flushes_by_cause: [u64; 6],
    pub shootdown_cycles_initiator_send: u64,
    pub shootdown_cycles_initiator_wait: u64,
    pub shootdown_cycles_target: u64,
    pub violations_security: u64,
    pub violations_consistency: u64,
    /// TLB entries the checker marked stale when a flush protocol ended (a later use of
    /// one is a violation; an eviction or flush before then makes it harmless).
    pub stale_entries_marked: u64,
    pub context_switches: u64,
    pub syscalls: u64,
    pub segv_signals: u64,
    pub cow_faults: u64,
    pub file_faults: u64,
    pub page_cache_misses: u64,
    pub pages_reclaimed: u64,
    pub pages_migrated: u64,
    pub idle_cycles: u64,
    /// The machine's `stale_pwc_uses` already reported as violations.
    pub stale_pwc_seen: u64,
    /// targets_per_shootdown histogram: index = targets (last bucket: that many or more).
    pub targets_hist: Vec<u64>,
}

#[derive(Clone, Debug)]
pub(crate) struct ViolationRecord {
    pub cycle: u64,
    pub core: u32,
    pub process: u32,
    pub vpn: u64,
    pub old_pfn: u64,
    pub new_pfn: Option<u64>,
    pub security: bool,
}

/// A virtual memory area.
#[derive(Clone, Debug)]
pub(crate) struct Vma {
    pub end: u64,
    pub writable: bool,
    pub shared: bool,
    pub backing: crate::workload::program::Backing,
    /// Never mapped by the workload (the libraries stand-in): faults here are SIGSEGV.
    pub reserved: bool,
}

pub(crate) struct Process {
    pub pid: u32,
    pub root: u32,
    pub vmas: BTreeMap<u64, Vma>,
    pub cpumask: Vec<bool>,
    pub tlb_gen: u64,
    pub threads_alive: u32,
    pub group: usize,
    /// Root of the fork tree this process belongs to (anonymous pages are shared only
    /// within it: the anon_vma of Linux's rmap).
    pub family: u32,
    pub alive: bool,
    /// Anonymous pages swapped out by reclaim (vpn): a fault brings them back.
    pub swapped: std::collections::HashSet<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ThreadState {
    Runnable,
    Blocked,
    Exited,
}

pub(crate) struct Thread {
    pub pid: u32,
    pub name: String,
    pub class: String,
    pub daemon: bool,
    pub program: usize,
    pub pc: usize,
    /// (first op of the loop body, body length, iterations left; u64::MAX = forever).
    pub loops: Vec<(usize, usize, u64)>,
    pub slots: Vec<(u64, u64)>,
    /// Work left of the op at `pc`: accesses of an `Access`, cycles of a `Compute` (0: not
    /// started).
    pub access_left: u64,
    pub access_cursor: u64,
    pub rng: SplitMix64,
    pub state: ThreadState,
    pub core: usize,
    pub pinned: bool,
    pub ops_completed: u64,
    pub start_cycle: u64,
    pub end_cycle: Option<u64>,
    pub accesses: u64,
    /// Zipf sampler of the current access op (pages, theta) → cumulative weights.
    pub zipf: Option<(u64, u64, Vec<f64>)>,
}

#[derive(Clone, Copy, Debug)]
struct Irq {
    arrival: u64,
    shootdown: usize,
}

pub(crate) struct CoreOs {
    pub current: Option<usize>,
    pub runq: VecDeque<usize>,
    pub loaded_mm: Option<u32>,
    pub lazy: bool,
    /// PCID slots: (address space, tlb_gen caught up with); u32::MAX = empty.
    pub pcid: [(u32, u64); PCID_SLOTS],
    pub pcid_current: usize,
    pub pcid_next: usize,
    pending: VecDeque<Irq>,
    /// Shootdowns this core initiated and still waits for (it spins until all are acked).
    pub waiting: u32,
    pub slice_end: u64,
    pub idle_since: Option<u64>,
}

struct Shootdown {
    req: Rc<FlushRequest>,
    /// The page table's leaf entries of `req.pages` when the request was made (to tell a
    /// target that held a stale entry from a false positive).
    leaves: Rc<Vec<Option<u64>>>,
    /// Cores that flushed the request's pages (the checker need not look at them).
    flushed: Vec<usize>,
    initiator: usize,
    acks_left: u32,
    targets: u32,
    last_ack: u64,
    send_end: u64,
    frames: Vec<(Pfn, u32)>,
    tables: Vec<u32>,
    done: bool,
}

/// Deferred frees of a page-table change, released when its flush completes.
#[derive(Default)]
pub(crate) struct Gather {
    pub pages: Vec<Vpn>,
    pub frames: Vec<(Pfn, u32)>,
    pub tables: Vec<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Wake { thread: usize },
}

pub(crate) struct Group {
    pub limit_pages: u64,
    pub used_pages: u64,
    /// Reclaim LRU: (frame, stamp), oldest first.
    pub lru: VecDeque<(Pfn, u64)>,
}

/// The whole OS-mode simulation, generic over the coherence policy.
pub(crate) struct Os<P: Coherence> {
    pub m: Machine,
    pub policy: P,
    pub costs: CostsConfig,
    pub ceiling: u32,
    pub time_slice: u64,
    pub quantum: u64,
    pub checker: bool,
    pub thp: bool,
    pub tagging: Tagging,
    pub pt_levels: u32,
    pub pt_placement: Placement,
    pub interleave_data: bool,
    pub interleave_next: u32,
    pub w: Workload,
    pub procs: Vec<Process>,
    pub threads: Vec<Thread>,
    pub cores: Vec<CoreOs>,
    pub stats: Vec<OsCoreStats>,
    pub violations: Vec<ViolationRecord>,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    event_seq: u64,
    shootdowns: Vec<Shootdown>,
    pub page_cache: HashMap<(u32, u64), Pfn>,
    pub groups: Vec<Group>,
    pub lru_stamp: u64,
    /// The shared zero page (read faults on anonymous memory map it).
    pub zero_page: Option<Pfn>,
    /// Group each charged data frame (or huge-page head) is accounted to.
    pub frame_group: HashMap<u64, u32>,
    /// Heads of mapped 2 MiB data pages.
    pub huge_frames: std::collections::HashSet<u64>,
    live_workers: usize,
    pub seed: u64,
    /// Cycle at which the last non-daemon thread exited.
    end_cycle: u64,
    /// Per core: when it next has something to do (its clock if it runs a thread; for an
    /// idle core or one spinning for acks, its next interrupt's arrival; else u64::MAX); kept up to date
    /// through `dirty`, the cores whose state may have changed since the last decision.
    keys: MinTree,
    dirty: Vec<usize>,
    /// Whether each core is in `dirty` already.
    is_dirty: Vec<bool>,
    steps: u64,
}

/// Run an OS-mode workload with the configured policy; returns stats.json.
pub fn run(cfg: &Config, workload: Workload) -> Result<serde_json::Value> {
    struct Runner<'a> {
        cfg: &'a Config,
        workload: Workload,
    }
    impl WithPolicy for Runner<'_> {
        type Output = Result<serde_json::Value>;
        fn run<P: Coherence>(self, policy: P) -> Result<serde_json::Value> {
            let mut os = Os::new(self.cfg, self.workload, policy)?;
            os.simulate()?;
            Ok(os.stats_json(self.cfg))
        }
    }
    workload.check(cfg.cores()).map_err(|m| Error::config("workload", m))?;
    crate::coherence::dispatch(cfg, Runner { cfg, workload })?
}

impl<P: Coherence> Os<P> {
    fn new(cfg: &Config, w: Workload, policy: P) -> Result<Self> {
        let m = Machine::new(cfg)?;
        let ncores = cfg.cores() as usize;
        let cores = (0..ncores)
            .map(|_| CoreOs {
                current: None,
                runq: VecDeque::new(),
                loaded_mm: None,
                lazy: false,
                pcid: [(u32::MAX, 0); PCID_SLOTS],
                pcid_current: 0,
                pcid_next: 0,
                pending: VecDeque::new(),
                waiting: 0,
                slice_end: 0,
                idle_since: Some(0),
            })
            .collect();
        let groups = if w.groups.is_empty() {
            vec![Group { limit_pages: 0, used_pages: 0, lru: VecDeque::new() }]
        } else {
            w.groups.iter().map(|g| Group { limit_pages: g.limit_pages, used_pages: 0, lru: VecDeque::new() }).collect()
        };
        let mut os = Os {
            m,
            policy,
            costs: cfg.costs.clone(),
            ceiling: cfg.os.flush_ceiling,
            time_slice: cfg.os.time_slice,
            quantum: match cfg.sim.quantum_cycles {
                // A quarter of the engine's lookahead (the smallest IPI delivery latency).
                // At the lookahead, halving still moved fpr-munmap's throughput by 1.7%, and
                // at half of it a 4-core mprotect mix by 4.6% (the order in which a core
                // takes requests of consecutive generations decides page or full flushes);
                // from a quarter, halving moves every headline result by under 1%
                // (docs/OS_MODEL.md, tests/os_engine.rs).
                0 => (cfg.costs.ipi_delivery_same_socket.min(cfg.costs.ipi_delivery_cross_socket) / 4).max(1),
                q => q,
            },
            checker: cfg.os.checker,
            thp: cfg.os.thp,
            tagging: cfg.machine.tlb.tagging,
            pt_levels: cfg.os.pt_levels,
            pt_placement: Placement::parse("os.pt_placement", &cfg.os.pt_placement, cfg.machine.sockets)?,
            interleave_data: cfg.os.data_placement == "interleave",
            interleave_next: 0,
            w,
            procs: Vec::new(),
            threads: Vec::new(),
            cores,
            stats: vec![OsCoreStats { targets_hist: vec![0; 65], ..Default::default() }; ncores],
            violations: Vec::new(),
            events: BinaryHeap::new(),
            event_seq: 0,
            shootdowns: Vec::new(),
            page_cache: HashMap::new(),
            groups,
            lru_stamp: 0,
            zero_page: None,
            frame_group: HashMap::new(),
            huge_frames: Default::default(),
            live_workers: 0,
            seed: cfg.seed,
            end_cycle: 0,
            keys: MinTree::new(ncores),
            dirty: (0..ncores).collect(),
            is_dirty: vec![true; ncores],
            steps: 0,
        };
        let mut next_core = 0usize;
        for pi in 0..os.w.processes.len() {
            let spec = os.w.processes[pi].clone();
            let first_core = spec.threads.first().and_then(|t| t.core).unwrap_or(next_core as u32 % ncores as u32) as usize;
            let pid = os.create_process(spec.group, None, first_core)?;
            let mut slots: Vec<(u64, u64)> = vec![(0, 0); os.w.slots];
            for (ri, r) in spec.regions.iter().enumerate() {
                let va = os.mmap_region(first_core, pid, r)?;
                slots[ri] = (va, r.bytes.div_ceil(4096) * 4096);
            }
            for t in &spec.threads {
                let core = match t.core {
                    Some(c) => c as usize,
                    None => {
                        let c = next_core % ncores;
                        next_core += 1;
                        c
                    }
                };
                os.spawn_thread(pid, t.name.clone(), t.class.clone(), t.daemon, t.program, core, t.core.is_some(), slots.clone(), 0);
            }
        }
        Ok(os)
    }

    pub(crate) fn clock(&self, core: usize) -> u64 {
        self.m.cores[core].clock >> CLOCK_SHIFT
    }

    pub(crate) fn set_clock(&mut self, core: usize, cycles: u64) {
        let c = &mut self.m.cores[core];
        c.clock = c.clock.max(cycles << CLOCK_SHIFT);
        self.mark_dirty(core);
    }

    /// `core`'s scheduling key may have changed.
    #[inline]
    fn mark_dirty(&mut self, core: usize) {
        if !self.is_dirty[core] {
            self.is_dirty[core] = true;
            self.dirty.push(core);
        }
    }

    /// Charge `cycles` of kernel or user work to `core`.
    pub(crate) fn charge(&mut self, core: usize, cycles: u64) {
        self.m.cores[core].clock += cycles << CLOCK_SHIFT;
    }

    pub(crate) fn create_process(&mut self, group: usize, family: Option<u32>, core: usize) -> Result<u32> {
        let pid = self.procs.len() as u32;
        let node = NodeId(self.m.cores[core].socket);
        let space = self.m.new_address_space(pid, self.pt_levels, node)?;
        let mut vmas = BTreeMap::new();
        vmas.insert(
            MMAP_TOP - LIBS_BYTES,
            Vma { end: MMAP_TOP, writable: false, shared: false, backing: crate::workload::program::Backing::Anonymous, reserved: true },
        );
        self.procs.push(Process {
            pid,
            root: space.root,
            vmas,
            cpumask: vec![false; self.cores.len()],
            tlb_gen: 0,
            threads_alive: 0,
            group,
            family: family.unwrap_or(pid),
            alive: true,
            swapped: Default::default(),
        });
        Ok(pid)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn spawn_thread(
        &mut self,
        pid: u32,
        name: String,
        class: String,
        daemon: bool,
        program: usize,
        core: usize,
        pinned: bool,
        slots: Vec<(u64, u64)>,
        start: u64,
    ) -> usize {
        let id = self.threads.len();
        self.threads.push(Thread {
            pid,
            name,
            class,
            daemon,
            program,
            pc: 0,
            loops: Vec::new(),
            slots,
            access_left: 0,
            access_cursor: 0,
            rng: SplitMix64::derive(self.seed, 0x7468_7264 ^ id as u64),
            state: ThreadState::Runnable,
            core,
            pinned,
            ops_completed: 0,
            start_cycle: start,
            end_cycle: None,
            accesses: 0,
            zipf: None,
        });
        self.procs[pid as usize].threads_alive += 1;
        if !daemon {
            self.live_workers += 1;
        }
        self.enqueue(id, core, start);
        id
    }

    /// Make `thread` runnable on `core` at time `at`.
    fn enqueue(&mut self, thread: usize, core: usize, at: u64) {
        self.mark_dirty(core);
        self.threads[thread].core = core;
        self.threads[thread].state = ThreadState::Runnable;
        let c = &mut self.cores[core];
        c.runq.push_back(thread);
        if c.current.is_none() && c.waiting == 0 {
            // An idle core wakes up at `at`.
            if let Some(since) = c.idle_since.take() {
                let now = self.clock(core).max(at);
                self.stats[core].idle_cycles += now.saturating_sub(since.max(self.clock(core)));
                self.set_clock(core, now);
            }
        }
    }

    /// Main loop: run until every non-daemon thread has exited.
    fn simulate(&mut self) -> Result<()> {
        while self.live_workers > 0 {
            // The core furthest behind among those with work (ties: the lowest number).
            while let Some(c) = self.dirty.pop() {
                self.is_dirty[c] = false;
                // A core with a thread to run is at its clock; an idle one, or one spinning
                // for acks, has work when its next interrupt arrives (or when the last ack
                // makes it runnable again).
                let co = &self.cores[c];
                let clock = self.m.cores[c].clock >> CLOCK_SHIFT;
                let key = if co.waiting == 0 && (co.current.is_some() || !co.runq.is_empty()) {
                    clock
                } else {
                    co.pending.front().map_or(u64::MAX, |i| clock.max(i.arrival))
                };
                self.keys.set(c, key);
            }
            let (bt, bc) = self.keys.min();
            let best = (bt != u64::MAX).then_some((bt, bc));
            let second = if best.is_some() { self.keys.min_except(bc) } else { u64::MAX };
            let next_event = self.events.peek().map(|Reverse((t, _, _))| *t);
            match (best, next_event) {
                (None, None) => {
                    return Err(Error::Sim(format!(
                        "deadlock: {} threads still to finish but no core has work and no wake-up is due",
                        self.live_workers
                    )))
                }
                (Some((t, _)), Some(e)) if e <= t => self.process_event()?,
                (None, Some(_)) => self.process_event()?,
                (Some((t, core)), e) => {
                    let limit = second.min(e.unwrap_or(u64::MAX)).min(t.saturating_add(self.quantum * 64)).saturating_add(self.quantum);
                    self.run_core(core, limit)?;
                    self.mark_dirty(core);
                }
            }
            self.steps += 1;
        }
        self.end_cycle = self.threads.iter().filter(|t| !t.daemon).filter_map(|t| t.end_cycle).max().unwrap_or(0);
        Ok(())
    }

    fn process_event(&mut self) -> Result<()> {
        let Reverse((at, _, ev)) = self.events.pop().expect("peeked");
        match ev {
            Event::Wake { thread } => {
                if self.threads[thread].state == ThreadState::Blocked {
                    let core = self.threads[thread].core;
                    self.enqueue(thread, core, at);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn schedule_wake(&mut self, thread: usize, at: u64) {
        self.event_seq += 1;
        self.events.push(Reverse((at, self.event_seq, Event::Wake { thread })));
    }

    /// Run `core` until its clock passes `limit`, it blocks on a shootdown, or it runs out
    /// of work.
    fn run_core(&mut self, core: usize, limit: u64) -> Result<()> {
        let spinning_on_entry = self.cores[core].waiting > 0;
        loop {
            self.take_due_interrupts(core);
            let now = self.clock(core);
            let next_irq = self.cores[core].pending.front().map_or(u64::MAX, |i| i.arrival);
            if self.cores[core].waiting > 0 {
                // Spinning for acks, interrupts on: nothing happens here until the next
                // interrupt arrives or the last ack (a target's handler sets the clock then).
                // A core that has just started to wait goes back to the scheduler, whose
                // keys now know the targets' new interrupts.
                if !spinning_on_entry || next_irq > limit {
                    return Ok(());
                }
                self.set_clock(core, next_irq);
                continue;
            }
            if now >= limit {
                return Ok(());
            }
            let thread = match self.cores[core].current {
                Some(t) => {
                    // Time slice over and someone waiting: preempt.
                    if now >= self.cores[core].slice_end && !self.cores[core].runq.is_empty() {
                        self.cores[core].current = None;
                        self.cores[core].runq.push_back(t);
                        continue;
                    }
                    t
                }
                None => match self.cores[core].runq.pop_front() {
                    Some(t) => {
                        self.switch_to(core, t);
                        t
                    }
                    None => {
                        self.go_idle(core);
                        if next_irq > limit {
                            return Ok(());
                        }
                        // An idle core wakes for the interrupt at its arrival.
                        self.idle_until(core, next_irq);
                        continue;
                    }
                },
            };
            let until = limit.min(next_irq.max(now + 1));
            self.step_thread(core, thread, until)?;
        }
    }

    /// An idle core's clock moves to `t` (counted as idle time).
    fn idle_until(&mut self, core: usize, t: u64) {
        let now = self.clock(core);
        if let Some(since) = self.cores[core].idle_since.as_mut() {
            let from = (*since).max(now);
            self.stats[core].idle_cycles += t.saturating_sub(from);
            *since = from.max(t);
        }
        self.set_clock(core, t);
    }

    fn go_idle(&mut self, core: usize) {
        let c = &mut self.cores[core];
        if c.idle_since.is_none() {
            // Linux enter_lazy_tlb(): the idle task keeps the last mm loaded.
            c.lazy = c.loaded_mm.is_some();
            c.idle_since = Some(self.m.cores[core].clock >> CLOCK_SHIFT);
        }
    }

    /// Put `thread` on `core`: context switch, loading its address space.
    fn switch_to(&mut self, core: usize, thread: usize) {
        let pid = self.threads[thread].pid;
        if let Some(since) = self.cores[core].idle_since.take() {
            let now = self.clock(core);
            self.stats[core].idle_cycles += now.saturating_sub(since);
        }
        self.cores[core].current = Some(thread);
        self.stats[core].context_switches += 1;
        self.charge(core, self.costs.context_switch);
        self.load_mm(core, pid);
        let now = self.clock(core);
        self.cores[core].slice_end = now + self.time_slice;
    }

    /// switch_mm_irqs_off(): load address space `pid` on `core`.
    fn load_mm(&mut self, core: usize, pid: u32) {
        let mm_gen = self.procs[pid as usize].tlb_gen;
        let c = &mut self.cores[core];
        if c.loaded_mm == Some(pid) {
            // Same mm: leaving lazy mode, catch up if flushes were skipped meanwhile.
            let was_lazy = std::mem::replace(&mut c.lazy, false);
            let slot = c.pcid_current;
            let slot_gen = c.pcid[slot].1;
            self.procs[pid as usize].cpumask[core] = true;
            // A switch between two threads of the loaded mm is no switch at all: the TLB's
            // generation is whatever the flushes it took made it.
            if was_lazy && self.policy.on_switch(CoreId(core as u32), Some(slot_gen), mm_gen) {
                self.full_flush_mm(core, pid, Cause::LazySwitch);
            }
            return;
        }
        c.lazy = false;
        // Choose a PCID slot: the one already holding this mm, else the next round-robin.
        let (slot, slot_gen) = match c.pcid.iter().position(|&(p, _)| p == pid) {
            Some(s) => (s, Some(c.pcid[s].1)),
            None => {
                let s = c.pcid_next;
                c.pcid_next = (s + 1) % PCID_SLOTS;
                (s, None)
            }
        };
        c.pcid_current = slot;
        c.loaded_mm = Some(pid);
        // The slot is this mm's from now on (a reused slot still holds the previous mm's
        // entries until the flush below).
        c.pcid[slot] = (pid, slot_gen.unwrap_or(0));
        let root = self.procs[pid as usize].root;
        self.procs[pid as usize].cpumask[core] = true;
        let cr3 = self.m.pt.pfn_of(root).0;
        let hw = self.m.cores[core].tlbs.write_cr3(cr3, slot as u16 + 1, 0, &mut NoTlbListener);
        if let Some(cause) = hw {
            let cause = match cause {
                FlushCause::TagCapacity => Cause::TagCapacity,
                FlushCause::TagForced => Cause::TagForced,
                _ => Cause::ContextSwitch,
            };
            self.stats[core].full_flushes_by_cause[cause as usize] += 1;
            self.m.cores[core].stats.full_flushes += 1;
            self.charge(core, self.costs.full_flush);
        } else if self.tagging == Tagging::Pcid {
            // A reused slot must lose the previous mm's entries; a slot holding this mm at
            // an older generation is the policy's call.
            let flush = match slot_gen {
                None => true,
                Some(g) => self.policy.on_switch(CoreId(core as u32), Some(g), mm_gen),
            };
            if flush {
                self.full_flush_mm(core, pid, Cause::ContextSwitch);
            }
        }
        self.cores[core].pcid[slot] = (pid, mm_gen);
    }

    /// Tag under which `core`'s TLB holds `pid`'s translations, if it can hold any.
    pub(crate) fn tag_on(&self, core: usize, pid: u32) -> Option<u16> {
        let c = &self.cores[core];
        let root = self.procs[pid as usize].root;
        let cr3 = self.m.pt.pfn_of(root).0;
        match self.tagging {
            Tagging::Pcid => c.pcid.iter().position(|&(p, _)| p == pid).map(|s| s as u16 + 1),
            _ => self.m.cores[core].tlbs.tag_of(cr3, 0, 0),
        }
    }

    /// Flush every translation of `pid` on `core` (its PCID, or everything untagged).
    fn full_flush_mm(&mut self, core: usize, pid: u32, cause: Cause) {
        self.stats[core].full_flushes_by_cause[cause as usize] += 1;
        self.m.cores[core].stats.full_flushes += 1;
        self.charge(core, self.costs.full_flush);
        let tag = self.tag_on(core, pid);
        let tlbs = &mut self.m.cores[core].tlbs;
        match (self.tagging, tag) {
            (Tagging::Pcid, Some(tag)) => {
                tlbs.invalidate_tag(tag, &mut NoTlbListener);
                // Page-walk caches hold no PCID here: drop them too (x86 INVPCID does).
                for i in [crate::tlb::hierarchy::PWC_PML4, crate::tlb::hierarchy::PWC_PDPT, crate::tlb::hierarchy::PWC_PD] {
                    if tlbs.present(i) {
                        tlbs.structs[i].flush(false, &mut |_| {});
                    }
                }
            }
            _ => {
                tlbs.flush_all(true, &mut NoTlbListener);
            }
        }
        if let Some(s) = self.cores[core].pcid.iter().position(|&(p, _)| p == pid) {
            self.cores[core].pcid[s].1 = self.procs[pid as usize].tlb_gen;
        }
    }

    fn core_view(&self, core: usize) -> CoreView {
        let c = &self.cores[core];
        CoreView {
            loaded_mm: c.loaded_mm,
            lazy: c.lazy,
            caught_up_gen: if c.loaded_mm.is_some() { c.pcid[c.pcid_current].1 } else { 0 },
        }
    }

    /// The page table's leaf entry now for each of `pages`.
    fn current_leaves(&self, pid: u32, pages: &[Vpn]) -> Vec<Option<u64>> {
        let root = self.procs[pid as usize].root;
        pages.iter().map(|v| self.m.pt.lookup(root, self.pt_levels, v.0 << 12).map(|l| l.pte)).collect()
    }

    /// Whether `core`'s TLB holds a translation of one of `pages` of `pid` that disagrees
    /// with `current`, the page table's leaf entries of those pages.
    fn holds_stale_with(&mut self, core: usize, pid: u32, pages: &[Vpn], current: &[Option<u64>]) -> bool {
        let Some(tag) = self.tag_on(core, pid) else { return false };
        pages.iter().zip(current).any(|(&vpn, &cur)| {
            let stale = |e: &crate::tlb::TlbEntry| entry_is_stale(e, vpn, cur);
            self.m.cores[core].tlbs.holds_if(vpn, tag, &stale)
        })
    }

    /// A page-table change of `pid` by `core` needs TLB coherence: run the protocol.
    /// Frames and tables in `gather` are freed when it completes. Returns true if the core
    /// must now wait for acks.
    pub(crate) fn flush(&mut self, core: usize, pid: u32, reason: crate::coherence::FlushReason, full: bool, gather: Gather) -> bool {
        let Gather { pages, frames, tables } = gather;
        if pages.is_empty() && tables.is_empty() && !full {
            self.release(core, frames, tables);
            return false;
        }
        let p = &mut self.procs[pid as usize];
        p.tlb_gen += 1;
        let req = FlushRequest {
            initiator: CoreId(core as u32),
            mm: pid,
            pages,
            reason,
            freed_tables: !tables.is_empty(),
            full,
            new_gen: p.tlb_gen,
        };
        let ncores = self.cores.len();
        // Which TLBs hold a translation the change made stale: only the simulator knows;
        // computed only for a policy that asks (the oracle).
        let holders: Vec<bool> = if self.policy.wants_holders() {
            let current = self.current_leaves(pid, &req.pages);
            (0..ncores).map(|c| self.holds_stale_with(c, pid, &req.pages, &current)).collect()
        } else {
            vec![false; ncores]
        };
        let views: Vec<CoreView> = (0..ncores).map(|c| self.core_view(c)).collect();
        let mut plan = FlushPlan::default();
        let cpumask = self.procs[pid as usize].cpumask.clone();
        self.policy.plan(&OsView { cores: &views, cpumask: &cpumask, holders: &holders, flush_ceiling: self.ceiling }, &req, &mut plan);
        // The initiator flushes itself (flush_tlb_func run locally) when it runs the mm, or
        // when the policy names it (it may hold the mm's entries under another PCID).
        let me = views[core];
        let named = plan.targets.iter().position(|t| t.0 as usize == core).map(|i| plan.targets.remove(i)).is_some();
        let mut flushed = Vec::new();
        if named || me.loaded_mm == Some(pid) {
            let action = self.policy.on_deliver(CoreId(core as u32), &me, &req, self.ceiling);
            if self.apply_local(core, pid, &req, action, &mut NoTlbListener) {
                flushed.push(core);
            }
        }
        let leaves = Rc::new(self.current_leaves(pid, &req.pages));
        let n = plan.targets.len() as u32;
        if n > 0 {
            self.stats[core].shootdowns_sent += 1;
            let h = &mut self.stats[core].targets_hist;
            let b = (n as usize).min(h.len() - 1);
            h[b] += 1;
        }
        let sd = self.shootdowns.len();
        self.shootdowns.push(Shootdown {
            req: Rc::new(req),
            leaves,
            flushed,
            initiator: core,
            acks_left: n,
            targets: n,
            last_ack: 0,
            send_end: 0,
            frames,
            tables,
            done: false,
        });
        match plan.delivery {
            Some(Delivery::Ipi) if n > 0 => {
                let start = self.clock(core);
                let send = self.costs.ipi_send * n as u64;
                self.charge(core, send);
                self.stats[core].shootdown_ipis_sent += n as u64;
                self.stats[core].shootdown_cycles_initiator_send += send;
                let send_end = self.clock(core);
                self.shootdowns[sd].send_end = send_end;
                self.shootdowns[sd].last_ack = send_end;
                self.cores[core].waiting += 1;
                let my_socket = self.m.cores[core].socket;
                for (k, t) in plan.targets.iter().enumerate() {
                    let t = t.0 as usize;
                    let delivery = if self.m.cores[t].socket == my_socket {
                        self.costs.ipi_delivery_same_socket
                    } else {
                        self.costs.ipi_delivery_cross_socket
                    };
                    let arrival = start + self.costs.ipi_send * (k as u64 + 1) + delivery;
                    // Pending interrupts are kept in arrival order.
                    let q = &mut self.cores[t].pending;
                    let at = q.partition_point(|i| i.arrival <= arrival);
                    q.insert(at, Irq { arrival, shootdown: sd });
                    self.mark_dirty(t);
                }
                true
            }
            _ => {
                // Free delivery (or nobody to reach): every target flushes now, at no cost.
                for t in plan.targets.clone() {
                    self.deliver(t.0 as usize, sd);
                }
                self.complete(sd);
                false
            }
        }
    }

    /// Request `sd` reaches `core`: the policy decides, the core flushes; counts a false
    /// positive if the core held no stale translation of the request's pages.
    fn deliver(&mut self, core: usize, sd: usize) {
        let (req, leaves) = (self.shootdowns[sd].req.clone(), self.shootdowns[sd].leaves.clone());
        let view = self.core_view(core);
        let action = self.policy.on_deliver(CoreId(core as u32), &view, &req, self.ceiling);
        let mut seen = StaleSeen { pages: &req.pages, leaves: &leaves, held: false };
        if action != LocalFlush::Pages {
            seen.held = self.holds_stale_with(core, req.mm, &req.pages, &leaves);
        }
        if self.apply_local(core, req.mm, &req, action, &mut seen) {
            self.shootdowns[sd].flushed.push(core);
        }
        if !seen.held {
            self.stats[core].false_positive_targets += 1;
        }
    }

    /// Carry out a core's decision about request `req`.
    /// Returns whether the core flushed the request's pages. `removed` sees the entries
    /// a per-page flush removes.
    fn apply_local<L: crate::tlb::hierarchy::TlbListener>(&mut self, core: usize, pid: u32, req: &FlushRequest, action: LocalFlush, removed: &mut L) -> bool {
        match action {
            LocalFlush::Nothing => false,
            LocalFlush::Pages => {
                if let Some(tag) = self.tag_on(core, pid) {
                    self.m.cores[core].tlbs.invalidate_pages(&req.pages, Some(tag), removed);
                }
                let n = req.pages.len() as u64;
                self.stats[core].pages_flushed += n;
                self.charge(core, self.costs.invlpg * n);
                self.catch_up(core, pid, req.new_gen);
                true
            }
            LocalFlush::Full => {
                let cause = if req.full || req.pages.len() as u64 <= self.ceiling as u64 { Cause::Shootdown } else { Cause::Ceiling };
                self.full_flush_mm(core, pid, cause);
                self.catch_up(core, pid, req.new_gen);
                true
            }
            LocalFlush::LeaveMask => {
                self.procs[pid as usize].cpumask[core] = false;
                false
            }
            LocalFlush::DropLazyMm => {
                // switch_mm to init_mm: the borrowed mm's entries go.
                self.full_flush_mm(core, pid, Cause::Shootdown);
                let c = &mut self.cores[core];
                c.loaded_mm = None;
                c.lazy = false;
                self.procs[pid as usize].cpumask[core] = false;
                if let Some(s) = self.cores[core].pcid.iter().position(|&(p, _)| p == pid) {
                    self.cores[core].pcid[s] = (u32::MAX, 0);
                }
                true
            }
        }
    }

    fn catch_up(&mut self, core: usize, pid: u32, gen: u64) {
        let c = &mut self.cores[core];
        if let Some(s) = c.pcid.iter().position(|&(p, _)| p == pid) {
            c.pcid[s].1 = c.pcid[s].1.max(gen);
        }
    }

    /// Take every interrupt already due on a running core.
    fn take_due_interrupts(&mut self, core: usize) {
        while let Some(irq) = self.cores[core].pending.front().copied() {
            if irq.arrival > self.clock(core) {
                break;
            }
            self.cores[core].pending.pop_front();
            self.handle_irq(core, irq);
        }
    }

    fn handle_irq(&mut self, core: usize, irq: Irq) {
        let sd = irq.shootdown;
        let start = self.clock(core);
        self.stats[core].shootdown_ipis_received += 1;
        let targets = self.shootdowns[sd].targets as u64;
        self.charge(core, self.costs.interrupt + self.costs.ack + self.costs.ack_contention_per_target * targets.saturating_sub(1));
        self.deliver(core, sd);
        let spent = self.clock(core) - start;
        self.stats[core].shootdown_cycles_target += spent;
        let done_at = self.clock(core);
        let s = &mut self.shootdowns[sd];
        s.acks_left -= 1;
        s.last_ack = s.last_ack.max(done_at);
        if s.acks_left == 0 {
            let initiator = s.initiator;
            let (last, send_end) = (s.last_ack, s.send_end);
            // The initiator spun from the end of its sends to the last ack (interrupts it
            // took meanwhile included).
            let resume = self.clock(initiator).max(last);
            self.stats[initiator].shootdown_cycles_initiator_wait += resume.saturating_sub(send_end);
            self.set_clock(initiator, resume);
            self.cores[initiator].waiting -= 1;
            self.complete(sd);
        }
    }

    /// The protocol is over: free what the change released and let the checker mark every
    /// translation still cached that disagrees with the page table.
    fn complete(&mut self, sd: usize) {
        let s = &mut self.shootdowns[sd];
        s.done = true;
        let frames = std::mem::take(&mut s.frames);
        let tables = std::mem::take(&mut s.tables);
        let pid = s.req.mm;
        let req = s.req.clone();
        let flushed = std::mem::take(&mut s.flushed);
        let initiator = s.initiator;
        if self.checker {
            self.mark_stale(pid, &req.pages, &tables, &flushed);
        }
        self.release(initiator, frames, tables);
        // Completed records are dropped from the tail so the vector stays short.
        while self.shootdowns.last().is_some_and(|s| s.done) {
            self.shootdowns.pop();
        }
    }

    fn mark_stale(&mut self, pid: u32, pages: &[Vpn], tables: &[u32], flushed: &[usize]) {
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
                for &t in tables {
                    self.m.cores[core].tlbs.mark_pwc_stale(t);
                }
            }
        }
    }

    /// Free frames and page-table pages on `core`'s lists.
    pub(crate) fn release(&mut self, core: usize, frames: Vec<(Pfn, u32)>, tables: Vec<u32>) {
        for (pfn, order) in frames {
            self.free_frame(core, pfn, order);
        }
        self.m.pt.release_tables(&mut self.m.mem, &tables);
    }

    /// Step one thread on `core` until `until` (or it blocks, exits, or waits).
    fn step_thread(&mut self, core: usize, thread: usize, until: u64) -> Result<()> {
        while self.clock(core) < until && self.cores[core].current == Some(thread) && self.cores[core].waiting == 0 {
            let prog = self.threads[thread].program;
            let pc = self.threads[thread].pc;
            // End of a loop body: go round again or leave the loop.
            if let Some(&(start, body, left)) = self.threads[thread].loops.last() {
                if pc == start + body {
                    let t = &mut self.threads[thread];
                    if left == u64::MAX || left > 1 {
                        if left != u64::MAX {
                            t.loops.last_mut().expect("open loop").2 -= 1;
                        }
                        t.pc = start;
                    } else {
                        t.loops.pop();
                    }
                    continue;
                }
            }
            if pc >= self.w.programs[prog].len() {
                self.exit_thread(core, thread);
                return Ok(());
            }
            let op = self.w.programs[prog][pc].clone();
            self.exec_op(core, thread, op, until)?;
        }
        Ok(())
    }

    fn advance(&mut self, thread: usize) {
        self.threads[thread].pc += 1;
    }

    fn exec_op(&mut self, core: usize, thread: usize, op: Op, until: u64) -> Result<()> {
        match op {
            Op::Loop { count, body } => {
                let t = &mut self.threads[thread];
                let start = t.pc + 1;
                if count == 0 && !t.daemon {
                    return Err(Error::Sim(format!("thread {:?}: a loop without end in a non-daemon thread", t.name)));
                }
                if body == 0 {
                    t.pc = start;
                } else {
                    t.loops.push((start, body, if count == 0 { u64::MAX } else { count }));
                    t.pc = start;
                }
            }
            Op::CountOp => {
                self.threads[thread].ops_completed += 1;
                self.advance(thread);
            }
            Op::Compute { cycles } => {
                // Runs in pieces that end at the step's limit, so a long computation does
                // not carry the core past interrupts due meanwhile.
                let now = self.clock(core);
                let t = &mut self.threads[thread];
                if t.access_left == 0 {
                    t.access_left = cycles;
                }
                let piece = t.access_left.min(until.saturating_sub(now).max(1));
                t.access_left -= piece;
                if t.access_left == 0 {
                    t.pc += 1;
                }
                self.m.cores[core].stats.instructions += piece;
                self.charge(core, piece);
            }
            Op::Block { cycles } => {
                self.advance(thread);
                let now = self.clock(core);
                self.block(core, thread, now + cycles);
            }
            Op::Access { .. } => self.exec_access(core, thread, &op, until)?,
            Op::Exit => {
                self.advance(thread);
                self.exit_thread(core, thread);
            }
            Op::MigrateThread { core: to } => {
                self.advance(thread);
                let to = to as usize;
                if to != core {
                    self.threads[thread].pinned = true;
                    self.cores[core].current = None;
                    let now = self.clock(core);
                    self.enqueue(thread, to, now);
                }
            }
            Op::Fork { program, core: child_core } => {
                self.advance(thread);
                self.syscall_fork(core, thread, program, child_core.map(|c| c as usize))?;
            }
            Op::Mmap { slot, spec } => {
                self.advance(thread);
                self.stats[core].syscalls += 1;
                self.charge(core, self.costs.syscall + self.costs.mmap);
                let pid = self.threads[thread].pid;
                let va = self.mmap_region(core, pid, &spec)?;
                self.threads[thread].slots[slot] = (va, spec.bytes.div_ceil(4096) * 4096);
            }
            Op::Munmap { slot } => {
                self.advance(thread);
                self.syscall_prologue(core);
                let (va, len) = self.threads[thread].slots[slot];
                self.sys_munmap(core, thread, va, len)?;
            }
            Op::Mprotect { slot, writable } => {
                self.advance(thread);
                self.syscall_prologue(core);
                let (va, len) = self.threads[thread].slots[slot];
                self.sys_mprotect(core, thread, va, len, writable)?;
            }
            Op::MadviseDontneed { slot } => {
                self.advance(thread);
                self.syscall_prologue(core);
                let (va, len) = self.threads[thread].slots[slot];
                self.sys_dontneed(core, thread, va, len)?;
            }
            Op::Msync { slot } => {
                self.advance(thread);
                self.syscall_prologue(core);
                let (va, len) = self.threads[thread].slots[slot];
                self.sys_msync(core, thread, va, len)?;
            }
            Op::MigratePages { slot, node } => {
                self.advance(thread);
                self.syscall_prologue(core);
                let (va, len) = self.threads[thread].slots[slot];
                self.sys_migrate_pages(core, thread, va, len, NodeId(node))?;
            }
        }
        Ok(())
    }

    fn syscall_prologue(&mut self, core: usize) {
        self.stats[core].syscalls += 1;
        self.charge(core, self.costs.syscall + self.costs.vma_op);
    }

    pub(crate) fn block(&mut self, core: usize, thread: usize, until: u64) {
        self.threads[thread].state = ThreadState::Blocked;
        self.cores[core].current = None;
        self.schedule_wake(thread, until);
    }

    fn exit_thread(&mut self, core: usize, thread: usize) {
        let now = self.clock(core);
        let t = &mut self.threads[thread];
        t.state = ThreadState::Exited;
        t.end_cycle = Some(now);
        if !t.daemon {
            self.live_workers -= 1;
        }
        let pid = t.pid;
        self.cores[core].current = None;
        let p = &mut self.procs[pid as usize];
        p.threads_alive -= 1;
        if p.threads_alive == 0 {
            self.exit_process(core, pid);
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
struct StaleSeen<'a> {
    pages: &'a [Vpn],
    leaves: &'a [Option<u64>],
    held: bool,
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

/// Minimum of per-core keys (ties: the lowest core), with O(log n) updates: a tournament
/// tree, so choosing the next core costs the same with 4 cores as with 256.
struct MinTree {
    leaves: usize,
    /// Heap order: node i has children 2i and 2i+1; leaves at `leaves..2*leaves`.
    nodes: Vec<(u64, u32)>,
}

impl MinTree {
    fn new(n: usize) -> MinTree {
        let leaves = n.next_power_of_two().max(1);
        let mut nodes = vec![(u64::MAX, u32::MAX); 2 * leaves];
        for i in 0..leaves {
            nodes[leaves + i] = (u64::MAX, i as u32);
        }
        let mut t = MinTree { leaves, nodes };
        for i in (1..leaves).rev() {
            t.nodes[i] = t.nodes[2 * i].min(t.nodes[2 * i + 1]);
        }
        t
    }

    fn set(&mut self, core: usize, key: u64) {
        let mut i = self.leaves + core;
        if self.nodes[i].0 == key {
            return;
        }
        self.nodes[i] = (key, core as u32);
        while i > 1 {
            i /= 2;
            let m = self.nodes[2 * i].min(self.nodes[2 * i + 1]);
            if self.nodes[i] == m {
                // Nothing above changes either.
                break;
            }
            self.nodes[i] = m;
        }
    }

    /// (key, core) of the minimum.
    fn min(&self) -> (u64, usize) {
        let (k, c) = self.nodes[1];
        (k, c as usize)
    }

    /// The smallest key of every core but `core`.
    fn min_except(&self, core: usize) -> u64 {
        let mut i = self.leaves + core;
        let mut best = u64::MAX;
        while i > 1 {
            best = best.min(self.nodes[i ^ 1].0);
            i /= 2;
        }
        best
    }
}
