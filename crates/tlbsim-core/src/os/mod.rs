//! The OS model and the multi-core discrete-event engine (docs/ARCHITECTURE.md "Physical memory and
//! the OS", "The shootdown", "Safety checker", "Time"; DiDi §V-A for the anatomy of a
//! shootdown; docs/LINUX_BASELINE.md for the kernel paths followed). One file per concern:
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | `Os`, the composition of the kernel's state; set-up; effects of policy hooks |
//! | `settings.rs` | the run's settings, read-only after set-up (costs, switches, periods, quantum) |
//! | `process.rs` | processes (address spaces, VMAs) and threads |
//! | `per_core.rs` | per-core kernel state (`CoreOs`) and compute leaps (`Leap`) |
//! | `sched.rs` | the event loop, the scheduler (run queues, time slices, idle, wake-ups), timer ticks |
//! | `replay.rs` | a recorded program's operations: its access streams, thread starts, completion tokens |
//! | `asid.rs` | address-space switches: PCID slots and generations, lazy TLB, CR3 loads, full flushes |
//! | `shootdown.rs` | the flush protocol and its delivery timing (IPI, hardware message, deferred) |
//! | `checker.rs` | the stale-translation checker |
//! | `interp.rs` | the workload's operations (the thread interpreter) |
//! | `access.rs` | the OS side of the one access path (`crate::access`): listeners, faults |
//! | `lru.rs` | per-CPU LRU batches and the lruvec lock their drains and page frees take |
//! | `pte.rs` | the PTE-write layer: every page-table read and write of the kernel |
//! | `mm/` | VMAs, faults, system calls, rmap, reclaim (one file per path) |
//! | `output.rs` | stats.json |
//! | `counters.rs` | the counters and violation records stats.json reports |
//! | `virt.rs` | VCPUs between the guests' threads and the CPUs (the hypervisor axis) |
//!
//! The engine never names a coherence policy or a page-table backend: it calls the
//! `Coherence` trait (monomorphised, `crate::coherence::dispatch`) and the
//! `PageTableBackend` trait (`crate::placement`).
//!
//! Time: every core has a cycle clock. The core furthest behind among those with work runs
//! next, for at most `sim.quantum_cycles` past the next core's clock (or until an
//! interrupt is due), so cores are never more than a quantum apart; a computation alone
//! leaps further (`Leap`). Interrupts carry an
//! arrival time and are taken in arrival order: a running target when its clock reaches
//! it (a target already past it takes it at once: the skew the quantum bounds); an idle
//! core, or one spinning for acks, is scheduled at the arrival; the spinner resumes at
//! the last ack, which its last target's handler sets. Wake-ups are timed events. Ties
//! break by core number and sequence number, so a run is deterministic for its seed.
//!
//! Kernel state per core: the running thread, a run queue, the loaded address space
//! (`loaded_mm`), the lazy-TLB flag, six PCID slots with the `tlb_gen` each caught up with
//! (Linux's dynamic ASIDs; with domain or CR3 tags the same bookkeeping tracks what the
//! hardware tag keeps), and the interrupts pending. Per address space: VMAs, a page table,
//! `mm_cpumask`, `tlb_gen`. A shootdown: the initiator changes PTEs, bumps `tlb_gen`, asks
//! the coherence policy for targets, flushes itself, pays the sends, and spins until the
//! last ack; each target pays interrupt entry/exit, its flush and the ack (with contention
//! growing with the number of targets); frames and page-table pages are freed only when
//! the protocol is over (mmu_gather), and the checker then marks every translation still
//! cached that disagrees with the page table.
//!
//! Simplified (each said where it matters): reclaim runs on the core whose allocation
//! crossed the group's low watermark (as memory-cgroup reclaim does in Linux; no per-node
//! kswapd thread); a page-cache miss is charged as a stall of `costs.read_page` cycles
//! (or, on a storage device whose reads sleep, `machine.storage`, blocks the faulting
//! thread for the device's read). VMs (the tag paper): `virt.rs` and `crate::hypervisor`;
//! natively every process is in VM 0.

mod access;
mod alloc;
mod asid;
mod checker;
mod counters;
mod interp;
pub(crate) mod io;
mod locks;
mod lru;
mod mm;
mod numa;
mod output;
mod per_core;
mod process;
mod pte;
mod replay;
mod sched;
mod settings;
mod shootdown;
mod virt;

use crate::coherence::{Coherence, Effect, Effects, WithPolicy};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::fasthash::{FastMap as HashMap, FastSet};
use crate::machine::{Machine, CLOCK_SHIFT};
use crate::rng::SplitMix64;
use crate::tlb::TlbEntry;
use crate::types::{CoreId, Pfn, Vpn};
use crate::workload::program::{MapSpec, Workload};
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use shootdown::Shootdown;

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

/// Reasons of full flushes (stats `full_flushes_by_cause`, indexed by the cause).
pub(crate) use crate::coherence::FullFlushCause as Cause;
pub(crate) use counters::{OsCoreStats, ViolationRecord, CAUSES, INTRA_VM, SYSCALLS};
pub(crate) use per_core::{CoreOs, Leap};
pub(crate) use process::{Process, Thread, ThreadState, Vma};

/// Deferred frees of a page-table change, released when its flush completes.
#[derive(Default)]
pub(crate) struct Gather {
    pub pages: Vec<Vpn>,
    /// Per page, the leaf PTE before the change (A/D as read with the change).
    pub old_ptes: Vec<u64>,
    pub frames: Vec<(Pfn, u32)>,
    pub tables: Vec<u32>,
}

impl Gather {
    /// A flush of `pages` whose old PTEs are unknown (0), freeing nothing.
    pub fn of_pages(pages: Vec<Vpn>) -> Gather {
        Gather { old_ptes: vec![0; pages.len()], pages, ..Default::default() }
    }

    /// A page whose translation changed from `old_pte`.
    pub fn page(&mut self, vpn: Vpn, old_pte: u64) {
        self.pages.push(vpn);
        self.old_ptes.push(old_pte);
    }
}

/// `sim.ptdump_at_op` / `sim.ptdump_thread`: which thread's operation takes the dump, and
/// when it was taken.
pub(crate) struct PtDumpAt {
    /// Engine index of the thread.
    pub thread: usize,
    /// The operation whose completion takes the dump (1 = the first).
    pub op: u64,
    /// (process, cycle of the thread's core) once taken.
    pub taken: Option<(u32, u64)>,
}

/// The whole OS-mode simulation, generic over the coherence policy. Its fields are private
/// to `os/`: each part of the state that has rules of its own is a struct of its own
/// (docs/ARCHITECTURE.md "Physical memory and the OS").
pub(crate) struct Os<P: Coherence> {
    /// The hardware: TLBs, walk caches, frames, page tables, the cache model (shared with
    /// trace mode).
    m: Machine,
    /// `sim.ptdump`: page-table placement of each process as it exits (or of one process
    /// at one moment, with `ptdump_at`).
    ptdump: Option<crate::placement::PtDump>,
    /// `sim.ptdump_at_op`: the dump is of the process of one thread, taken when that thread
    /// completes its Nth operation (instead of at each exit).
    ptdump_at: Option<PtDumpAt>,
    /// The coherence policy, monomorphised: its hooks are on the per-access path.
    policy: P,
    /// What the run was configured with (read-only: os/settings.rs).
    settings: settings::Settings,
    /// The recycling axis (`crate::recycling`): called at allocations, frees, mmaps and
    /// munmaps, never per access.
    recycling: Box<dyn crate::recycling::Recycling>,
    /// Recycling context of the mapping the fault being handled allocates for.
    alloc_context: u32,
    /// Stale translations used under the recycling axis' guarantee (`permits_stale_use`).
    stale_uses_permitted_by_recycling: u64,
    /// Split-driver I/O counters and the device reads a demand fault sleeps for (os/io.rs).
    io: io::Io,
    /// What the policy's hooks asked for, applied by `apply_effects`.
    fx: Effects,
    /// Kernel spinlocks and lock counters (os/locks.rs).
    locks: locks::Locks,
    /// Per-CPU LRU batches and their counters (os/lru.rs).
    lru: lru::Lru,
    /// The next node of `os.data_placement = "interleave"`.
    interleave_next: u32,
    w: Workload,
    /// Every process's address space, by pid (os/process.rs).
    spaces: process::AddressSpaces,
    /// Every thread, by engine index (never reused; os/process.rs).
    threads: Vec<Thread>,
    /// Per-core kernel state (os/per_core.rs).
    cores: Vec<CoreOs>,
    /// The engine's timed events, its per-core scheduling keys and how the run ends
    /// (os/sched.rs).
    sched: sched::Sched,
    /// Per-core counters (os/counters.rs).
    stats: Vec<OsCoreStats>,
    /// The first `VIOLATION_RECORDS` violations the checker found.
    violations: Vec<ViolationRecord>,
    /// Flush requests in flight (os/shootdown.rs).
    shootdowns: shootdown::InFlight,
    /// The page cache: (file, page index) → frame.
    page_cache: HashMap<(u32, u64), Pfn>,
    /// Memory groups: charges, limits, LRUs (mm/reclaim.rs).
    groups: mm::MemGroups,
    /// The shared zero page (read faults on anonymous memory map it).
    zero_page: Option<Pfn>,
    /// Heads of mapped 2 MiB data pages.
    huge_frames: FastSet<u64>,
    /// AutoNUMA (`os.numa_balancing`; os/numa.rs), None when off.
    numa: Option<Box<numa::NumaBalancing>>,
    numa_stats: numa::NumaStats,
    /// While a demand fault runs: the addresses it mapped (for direct TLB fills).
    fault_mapped: Option<Vec<u64>>,
    /// The last demand fault filled the faulting core's TLB with the faulting page.
    direct_filled: bool,
    /// A recorded program's tokens and held threads (os/replay.rs).
    replay: replay::Replay,
    /// VMs, VCPUs and the hypervisor's scheduler (os/virt.rs); None natively.
    virt: Option<virt::Virt>,
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
            run_with_policy(self.cfg, self.workload, policy)
        }
    }
    workload.check(cfg.cores()).map_err(|m| Error::config("workload", m))?;
    crate::coherence::dispatch(cfg, Runner { cfg, workload })?
}

/// Run an OS-mode workload with a policy given by value (one that is not registered, e.g.
/// a test's); `cfg.os.coherence` only labels the results.
pub fn run_with_policy<P: Coherence>(cfg: &Config, workload: Workload, policy: P) -> Result<serde_json::Value> {
    workload.check(cfg.cores()).map_err(|m| Error::config("workload", m))?;
    let mut os = Os::new(cfg, workload, policy)?;
    os.simulate()?;
    Ok(os.stats_json(cfg))
}

impl<P: Coherence> Os<P> {
    fn new(cfg: &Config, w: Workload, policy: P) -> Result<Self> {
        let mut m = Machine::new(cfg)?;
        let storage = crate::config::storage::device(&cfg.machine.storage)?;
        let recycling = crate::recycling::build(cfg)?;
        m.mem.merge_tracking = recycling.merge_words();
        let ncores = cfg.cores() as usize;
        let settings = settings::Settings::new(cfg, &policy, storage, recycling.enabled())?;
        let cores = (0..ncores).map(|_| CoreOs::new(settings.tick_interval(), settings.involuntary_period())).collect();
        // Without groups, one group with no limit.
        let groups = mm::MemGroups::new(w.groups.iter().map(|g| g.limit_pages));
        let ptdump = (cfg.sim.ptdump || cfg.sim.ptdump_at_op > 0).then(|| crate::placement::PtDump::new(cfg.machine.sockets, cfg.os.pt_levels));
        for (pi, p) in w.processes.iter().enumerate() {
            p.page_tables.check(&format!("workload.process[{pi}] ({:?}): its page-table options", p.name), cfg.machine.sockets)?;
        }
        let replay = replay::Replay::new(w.tokens as usize, (m.cpi_fixed as f64 * crate::workload::kind::recorded_time_scale(cfg)?).round() as u64);
        let mut os = Os {
            m,
            ptdump,
            ptdump_at: None,
            policy,
            settings,
            recycling,
            alloc_context: 0,
            stale_uses_permitted_by_recycling: 0,
            io: io::Io::new(storage.is_some_and(|d| d.sleeps)),
            fx: Vec::new(),
            locks: locks::Locks::new(cfg.os.locks),
            lru: lru::Lru::new(ncores),
            interleave_next: 0,
            w,
            spaces: process::AddressSpaces::default(),
            threads: Vec::new(),
            cores,
            sched: sched::Sched::new(ncores, cfg.seed),
            stats: vec![OsCoreStats { targets_hist: vec![0; 65], ..Default::default() }; ncores],
            violations: Vec::new(),
            shootdowns: shootdown::InFlight::new(ncores),
            page_cache: HashMap::default(),
            groups,
            zero_page: None,
            huge_frames: Default::default(),
            numa: numa::NumaBalancing::new(cfg),
            numa_stats: Default::default(),
            fault_mapped: None,
            direct_filled: false,
            replay,
            virt: None,
        };
        if !os.w.vms.is_empty() {
            os.virt = Some(virt::Virt::new(cfg, &os.w.vms, ncores)?);
        } else if cfg.sim.interval_instructions > 0 {
            return Err(Error::config(
                "sim.interval_instructions",
                "time series are counted per VM: the workload has none (workload.scenario.vm, or kind = \"vm-mix\")",
            ));
        }
        let mut next_core = 0usize;
        let mut declared = 0usize;
        os.init_balancing();
        for pi in 0..os.w.processes.len() {
            let spec = os.w.processes[pi].clone();
            let vm = os.w.vm_of(pi);
            // Natively a core; under a hypervisor a VCPU of the process's VM (its first
            // thread's, else round-robin over the VM's VCPUs), set up on the CPU it is homed on.
            let cpus = os.w.cpus_of(pi, ncores as u32) as usize;
            let base = os.virt.as_ref().map_or(0, |v| v.vm_base[vm]);
            let first_core = base + spec.threads.first().and_then(|t| t.core).map_or(next_core % cpus, |c| c as usize);
            let setup_core = os.home_cpu(first_core);
            let pid = os.create_process(spec.group, None, setup_core, spec.page_tables.clone())?;
            os.spaces[pid as usize].vm = vm as u32;
            // The workload's slots, then the engine's own (os/alloc.rs `ALLOC_SLOT`).
            let mut slots: Vec<(u64, u64)> = vec![(0, 0); os.w.slots + 1];
            for (ri, r) in spec.regions.iter().enumerate() {
                let va = os.mmap_region(setup_core, pid, r, None)?;
                slots[ri] = (va, r.bytes.div_ceil(4096) * 4096);
            }
            let fixed: Vec<(u64, MapSpec)> = os.w.fixed_regions.iter().filter(|r| r.0 == pi).map(|r| (r.1, r.2)).collect();
            for (va, r) in fixed {
                os.mmap_region(setup_core, pid, &r, Some(va))?;
            }
            // Set-up so far ends when the busiest core's clock does.
            let start = if os.w.start_after_setup.contains(&pi) { (0..ncores).map(|c| os.clock(c)).max().unwrap_or(0) } else { 0 };
            for t in &spec.threads {
                let core = base
                    + match t.core {
                        Some(c) => c as usize,
                        None => {
                            let c = next_core % cpus;
                            next_core += 1;
                            c
                        }
                    };
                let held = os.w.held_threads.contains(&(declared as u32));
                let id = os.spawn_thread(pid, t.name.clone(), t.class.clone(), t.daemon, t.program, core, t.core.is_some(), slots.clone(), start, held);
                if held {
                    os.replay.hold(declared as u32, id);
                }
                declared += 1;
            }
        }
        if cfg.sim.ptdump_at_op > 0 {
            os.ptdump_at = Some(PtDumpAt { thread: os.ptdump_thread(&cfg.sim.ptdump_thread)?, op: cfg.sim.ptdump_at_op, taken: None });
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
        self.sched.mark_dirty(core);
    }

    /// Charge `cycles` of kernel or user work to `core`.
    pub(crate) fn charge(&mut self, core: usize, cycles: u64) {
        self.m.cores[core].clock += cycles << CLOCK_SHIFT;
    }

    /// `sim.ptdump_thread`: the engine index of the first thread the workload declares
    /// under that name ("": the first thread).
    fn ptdump_thread(&self, name: &str) -> Result<usize> {
        if self.threads.is_empty() {
            return Err(Error::config("sim.ptdump_at_op", "the workload declares no thread"));
        }
        if name.is_empty() {
            return Ok(0);
        }
        self.threads.iter().position(|t| t.name == name).ok_or_else(|| {
            let mut names: Vec<&str> = Vec::new();
            for t in &self.threads {
                if !names.contains(&t.name.as_str()) {
                    names.push(&t.name);
                }
            }
            let shown = names.iter().take(12).map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ");
            let more = if names.len() > 12 { format!(" and {} more", names.len() - 12) } else { String::new() };
            Error::config("sim.ptdump_thread", format!("no thread named {name:?}; the workload's threads are {shown}{more}"))
        })
    }

    /// `sim.ptdump_at_op`: `thread` has just completed an operation; the dump is taken if it
    /// is the one asked for.
    #[cold]
    pub(crate) fn ptdump_at_op(&mut self, core: usize, thread: usize) {
        let Some(at) = self.ptdump_at.as_mut() else { return };
        if at.thread != thread || at.taken.is_some() || self.threads[thread].ops_completed != at.op {
            return;
        }
        let pid = self.threads[thread].pid;
        let now = self.m.cores[core].clock >> CLOCK_SHIFT;
        at.taken = Some((pid, now));
        if let Some(dump) = self.ptdump.as_mut() {
            dump.add(&self.m.pt, self.m.backend.as_ref(), pid, self.spaces[pid as usize].root);
        }
    }

    pub(crate) fn create_process(&mut self, group: usize, family: Option<u32>, core: usize, page_tables: crate::placement::PtOptions) -> Result<u32> {
        let pid = self.spaces.next_pid();
        let socket = self.m.cores[core].socket;
        let space = self.m.new_address_space_with(pid, socket, &page_tables)?;
        if self.settings.recycling_on() {
            let key = self.recycling.table_reuse_key(pid, family.unwrap_or(pid));
            self.m.pt.set_reuse_key(pid, key);
        }
        let mut vmas = BTreeMap::new();
        vmas.insert(
            MMAP_TOP - LIBS_BYTES,
            Vma {
                end: MMAP_TOP,
                writable: false,
                shared: false,
                backing: crate::workload::program::Backing::Anonymous,
                reserved: true,
                recycling: 0,
                anon_vma: false,
            },
        );
        self.spaces.add(Process {
            pid,
            root: space.root,
            page_tables,
            former_roots: Vec::new(),
            vmas,
            held: BTreeMap::new(),
            cpumask: vec![false; self.cores.len()],
            vm: family.map_or(0, |f| self.spaces[f as usize].vm),
            tlb_gen: 0,
            threads_alive: 0,
            group,
            family: family.unwrap_or(pid),
            alive: true,
            swapped: Default::default(),
            mmap_lock: Default::default(),
            barrier_waiting: Vec::new(),
            alloc: None,
        });
        let now = self.clock(core);
        if let Some(numa) = self.numa.as_mut() {
            numa.process_created(pid, now);
        }
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
        held: bool,
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
            rng: SplitMix64::derive(self.settings.seed(), 0x7468_7264 ^ id as u64),
            state: ThreadState::Runnable,
            core,
            pinned,
            allowed: None,
            last_wakee: usize::MAX,
            wakee_flips: 0,
            wakee_flip_decay: start,
            queued_at: 0,
            ops_completed: 0,
            start_cycle: start,
            first_run_cycle: None,
            end_cycle: None,
            accesses: 0,
            zipf: None,
            lock_granted: None,
            fault_lock_granted: false,
            retry_access: None,
            unlock_at_resume: None,
            syscall_resume: 0,
            range_call: None,
            lock_wait_cycles: 0,
            fetches: false,
            lock_contended: false,
            io_queue: VecDeque::new(),
            serving: false,
            pending: None,
        });
        self.spaces[pid as usize].threads_alive += 1;
        if !daemon {
            self.sched.worker_started();
        }
        if held {
            // Asleep until an `Op::Spawn` starts it (os/replay.rs).
            self.threads[id].state = ThreadState::Blocked;
        } else {
            self.enqueue(id, core, start);
        }
        id
    }

    /// Carry out what the policy's hooks asked for (each effect may make hooks push more).
    pub(crate) fn apply_effects(&mut self) {
        // Bounded: a hook that keeps asking for more would otherwise loop forever.
        let mut rounds = 0;
        while !self.fx.is_empty() {
            rounds += 1;
            assert!(rounds < 1_000_000, "coherence policy effects do not settle");
            let fx = std::mem::take(&mut self.fx);
            for e in fx {
                match e {
                    Effect::InvalidatePage { core, mm, vpn } => {
                        let core = core.0 as usize;
                        if let Some(tag) = self.tag_on(core, mm) {
                            let mut pl = PolicyTlb { policy: &mut self.policy, fx: &mut self.fx };
                            self.m.cores[core].tlbs.invalidate_page(vpn, Some(tag), &mut pl);
                        }
                    }
                    Effect::FlushMm { core, mm: Some(mm) } => self.full_flush_mm(core.0 as usize, mm, Cause::Policy),
                    Effect::FlushMm { core, mm: None } => self.full_flush_all(core.0 as usize, Cause::Policy),
                    Effect::Charge { core, cycles } => self.charge(core.0 as usize, cycles),
                    Effect::Flush { initiator, mm, pages, full } => {
                        let core = initiator.0 as usize;
                        let gather = Gather::of_pages(pages);
                        match mm {
                            Some(pid) => {
                                self.flush(core, pid, crate::coherence::FlushReason::Policy, full, gather);
                            }
                            None => {
                                self.flush_global(core, gather);
                            }
                        }
                    }
                    Effect::ClearAccessed { core, mm, va } => {
                        if let Some(l) = self.pte_lookup(mm, va) {
                            if l.pte & crate::page_table::PTE_ACCESSED != 0 {
                                self.pte_write(core.0 as usize, mm, va, &l, l.pte & !crate::page_table::PTE_ACCESSED);
                            }
                        }
                    }
                    Effect::ReleaseRange { mm, start, end } => {
                        // A policy written in Python may name an address space that is not one.
                        if mm as usize >= self.spaces.count() {
                            continue;
                        }
                        let held = &mut self.spaces[mm as usize].held;
                        let inside: Vec<u64> = held.range(start..end).filter(|&(_, &e)| e <= end).map(|(&s, _)| s).collect();
                        for s in inside {
                            held.remove(&s);
                        }
                    }
                }
            }
        }
    }
}

/// Forwards every TLB insert and eviction to the policy's hooks.
pub(crate) struct PolicyTlb<'a, P> {
    pub policy: &'a mut P,
    pub fx: &'a mut Effects,
}

impl<P: Coherence> crate::tlb::hierarchy::TlbListener for PolicyTlb<'_, P> {
    #[inline(always)]
    fn inserted(&mut self, core: CoreId, structure: usize, e: &TlbEntry) {
        self.policy.on_tlb_insert(core, structure, e, self.fx);
    }
    #[inline(always)]
    fn evicted(&mut self, core: CoreId, structure: usize, e: &TlbEntry) {
        self.policy.on_tlb_evict(core, structure, e, self.fx);
    }
}

/// Forwards the walker's A-bit sets to the policy.
pub(crate) struct PolicyWalk<'a, P> {
    pub policy: &'a mut P,
    pub fx: &'a mut Effects,
    pub mm: u32,
}

impl<P: Coherence> crate::walk::WalkListener for PolicyWalk<'_, P> {
    #[inline(always)]
    fn accessed_set(&mut self, core: CoreId, _root: u32, va: u64) {
        self.policy.on_accessed_set(core, self.mm, va, self.fx);
    }
}

/// Two listeners in turn (the checker's and the policy's).
pub(crate) struct Both<'a, A, B>(pub &'a mut A, pub &'a mut B);

impl<A: crate::tlb::hierarchy::TlbListener, B: crate::tlb::hierarchy::TlbListener> crate::tlb::hierarchy::TlbListener for Both<'_, A, B> {
    #[inline(always)]
    fn inserted(&mut self, core: CoreId, structure: usize, e: &TlbEntry) {
        self.0.inserted(core, structure, e);
        self.1.inserted(core, structure, e);
    }
    #[inline(always)]
    fn evicted(&mut self, core: CoreId, structure: usize, e: &TlbEntry) {
        self.0.evicted(core, structure, e);
        self.1.evicted(core, structure, e);
    }
}

/// A shared `Rc` of the request, for the records that outlive the `flush` call.
pub(crate) type Req = Rc<crate::coherence::FlushRequest>;
