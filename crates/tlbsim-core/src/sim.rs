//! The trace-driven engine: threads (one per core) run their event streams against the
//! machine's TLBs, walkers and page tables; the core furthest behind in simulated time
//! runs next, for one batch, so cores interleave deterministically in time order.
//!
//! Without an OS model (a later issue adds it), all threads share one address space, and
//! the first touch of a page maps it: a frame from the toucher's node (or interleaved),
//! page-table pages placed by `os.pt_placement`.

use crate::config::{Config, Placement};
use crate::error::{Error, Result};
use crate::memory::{FrameKind, PhysMem};
use crate::page_table::{PageTables, PTE_USER, PTE_WRITABLE};
use crate::stats::{self, CoreStats};
use crate::tlb::hierarchy::{Found, NoTlbListener, TlbHierarchy, TlbListener};
use crate::tlb::set_assoc::FLAG_DIRTY;
use crate::tlb::{Tlb, TlbGeometry};
use crate::trace::{TraceEvent, TraceSource};
use crate::types::{AccessKind, CoreId, NodeId, PageSize, Vpn};
use crate::walk::{self, NoWalkListener, WalkListener, WalkMemory, WalkOutcome};
use serde_json::json;

/// Fixed-point shift for the per-core clock (1/1024 cycle), so a fractional base CPI
/// accumulates exactly and deterministically.
pub(crate) const CLOCK_SHIFT: u32 = 10;

pub struct Core {
    pub id: CoreId,
    pub socket: u32,
    pub tlbs: TlbHierarchy,
    pub stats: CoreStats,
    /// Simulated time in 1/1024 cycles.
    pub(crate) clock: u64,
    /// Accesses and L1 misses when the last batch started (for the prefetch decision).
    batch_start_accesses: u64,
    batch_start_misses: u64,
}

/// How many events ahead the engine prefetches on miss-heavy streams.
const PREFETCH_DISTANCE: usize = 12;

/// One address space (trace mode has exactly one).
pub struct AddressSpace {
    pub id: u32,
    pub root: u32,
    pub levels: u32,
}

pub struct Machine {
    pub cores: Vec<Core>,
    pub pt_caches: Vec<Option<Tlb>>,
    pt_cache_latency: u32,
    /// latency[socket][node]
    latency: Vec<Vec<u32>>,
    pub mem: PhysMem,
    pub pt: PageTables,
    pt_placement: Placement,
    data_interleave: bool,
    thp: bool,
    interleave_next: u32,
    fault_cycles: u64,
    pub(crate) cpi_fixed: u64,
    fetches: bool,
}

impl Machine {
    pub fn new(cfg: &Config) -> Result<Machine> {
        let m = &cfg.machine;
        let sockets = m.sockets;
        let mut cores = Vec::with_capacity(cfg.cores() as usize);
        for i in 0..cfg.cores() {
            cores.push(Core {
                id: CoreId(i),
                socket: i / m.cores_per_socket,
                tlbs: TlbHierarchy::new(CoreId(i), &m.tlb, cfg.seed)?,
                stats: CoreStats::default(),
                clock: 0,
                batch_start_accesses: 0,
                batch_start_misses: 0,
            });
        }
        let pc = &m.pt_cache;
        let pt_caches = (0..sockets)
            .map(|_| {
                (pc.entries > 0)
                    .then(|| Tlb::new(&TlbGeometry { entries: pc.entries, ways: pc.ways, replacement: pc.replacement }, cfg.seed))
                    .transpose()
                    .map_err(|e| Error::config("machine.pt_cache", e))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Machine {
            cores,
            pt_caches,
            pt_cache_latency: pc.latency,
            latency: (0..sockets).map(|s| (0..sockets).map(|n| cfg.latency(s, n)).collect()).collect(),
            mem: PhysMem::new(sockets, m.memory.node_mib),
            pt: PageTables::new(),
            pt_placement: Placement::parse("os.pt_placement", &cfg.os.pt_placement, sockets)?,
            data_interleave: cfg.os.data_placement == "interleave",
            thp: cfg.os.thp,
            interleave_next: 0,
            fault_cycles: cfg.sim.fault_cycles,
            cpi_fixed: (m.base_cpi * (1u64 << CLOCK_SHIFT) as f64).round() as u64,
            fetches: cfg.workload.fetches,
        })
    }

    /// A new, empty address space with its root table on `node`.
    pub fn new_address_space(&mut self, id: u32, levels: u32, node: NodeId) -> Result<AddressSpace> {
        let root = self.pt.alloc_table(&mut self.mem, node, id)?;
        Ok(AddressSpace { id, root, levels })
    }

    fn next_interleaved(&mut self) -> NodeId {
        let n = NodeId(self.interleave_next);
        self.interleave_next = (self.interleave_next + 1) % self.mem.nodes();
        n
    }

    /// First-touch fault in trace mode: map the page (a 2 MiB page with THP when the whole
    /// aligned region is unmapped), table pages placed by policy.
    fn fault(&mut self, core: usize, space: &AddressSpace, va: u64) -> Result<()> {
        let socket = self.cores[core].socket;
        let data_node = if self.data_interleave { self.next_interleaved() } else { NodeId(socket) };
        let placement = self.pt_placement;
        let nodes = self.mem.nodes();
        let mut interleave = self.interleave_next;
        let mut place = || placement.node(socket, nodes, &mut interleave);
        let flags = PTE_WRITABLE | PTE_USER;
        let huge_ok = self.thp && {
            // The PD entry for this 2 MiB region must be empty: no 4 KiB table under it.
            !self.pt.has_page_table(space.root, space.levels, va)
        };
        if huge_ok {
            let pfn = self.mem.alloc_contiguous(data_node, 512, FrameKind::Data, space.id)?;
            let va2m = va & !((2 << 20) - 1);
            self.pt.map(&mut self.mem, space.root, space.levels, va2m, pfn, PageSize::Size2M, flags, space.id, &mut place)?;
        } else {
            let pfn = self.mem.alloc_on(CoreId(core as u32), data_node, FrameKind::Data, space.id)?;
            self.pt.map(&mut self.mem, space.root, space.levels, va & !0xfff, pfn, PageSize::Size4K, flags, space.id, &mut place)?;
        }
        self.interleave_next = interleave;
        Ok(())
    }

    /// Simulate one memory access by `core` in `space`. The hot path.
    #[inline]
    pub fn access<T: TlbListener, W: WalkListener>(
        &mut self,
        core: usize,
        space: &AddressSpace,
        va: u64,
        kind: AccessKind,
        tl: &mut T,
        wl: &mut W,
    ) -> Result<()> {
        let c = &mut self.cores[core];
        c.stats.accesses += 1;
        let vpn = Vpn::of_va(va);
        let (found, cycles) = c.tlbs.lookup(vpn, kind, tl);
        let mut spent = cycles as u64;
        match found {
            Found::L1(e) => {
                c.stats.l1_tlb_hits += 1;
                if kind.is_write() && e.flags & FLAG_DIRTY == 0 {
                    spent += self.set_dirty(core, space, va, e, wl)?;
                }
            }
            Found::L2(e) => {
                c.stats.l1_tlb_misses += 1;
                c.stats.l2_tlb_hits += 1;
                if kind.is_write() && e.flags & FLAG_DIRTY == 0 {
                    spent += self.set_dirty(core, space, va, e, wl)?;
                }
            }
            Found::Miss => {
                c.stats.l1_tlb_misses += 1;
                if c.tlbs.present(crate::tlb::hierarchy::L2) {
                    c.stats.l2_tlb_misses += 1;
                }
                spent += self.walk_and_fill(core, space, va, kind, tl, wl)?;
            }
        }
        let c = &mut self.cores[core];
        c.stats.translation_cycles += spent;
        c.clock += spent << CLOCK_SHIFT;
        Ok(())
    }

    /// One hardware walk by `core` through its socket's memory system.
    #[inline]
    pub(crate) fn walk<W: WalkListener>(&mut self, core: usize, space: &AddressSpace, va: u64, write: bool, wl: &mut W) -> (WalkOutcome, u64) {
        let c = &mut self.cores[core];
        let socket = c.socket as usize;
        let mut memsys = WalkMemory {
            pt_cache: self.pt_caches[socket].as_mut(),
            pt_cache_latency: self.pt_cache_latency,
            node_latency: &self.latency[socket],
            socket: socket as u32,
        };
        walk::walk(&mut self.pt, &mut c.tlbs, &mut memsys, space.root, space.levels, va, write, &mut c.stats, wl)
    }

    /// A write hit a clean entry: the processor walks again to set the PTE's dirty bit
    /// (Intel SDM 4.8: D is set by a locked update of the paging entry).
    #[cold]
    fn set_dirty<W: WalkListener>(
        &mut self,
        core: usize,
        space: &AddressSpace,
        va: u64,
        e: crate::tlb::TlbEntry,
        wl: &mut W,
    ) -> Result<u64> {
        let (outcome, cycles) = self.walk(core, space, va, true, wl);
        let c = &mut self.cores[core];
        match outcome {
            WalkOutcome::Mapped { .. } => {
                c.stats.dirty_walks += 1;
                c.tlbs.mark_dirty(&e);
                Ok(cycles)
            }
            WalkOutcome::Fault { .. } => Err(Error::Sim(format!("write to {va:#x}: mapping vanished under a TLB entry"))),
        }
    }

    fn walk_and_fill<T: TlbListener, W: WalkListener>(
        &mut self,
        core: usize,
        space: &AddressSpace,
        va: u64,
        kind: AccessKind,
        tl: &mut T,
        wl: &mut W,
    ) -> Result<u64> {
        let mut spent = 0;
        // At most two walks: one that faults, one after the fault handler mapped the page.
        for _ in 0..2 {
            let (outcome, cycles) = self.walk(core, space, va, kind.is_write(), wl);
            let c = &mut self.cores[core];
            spent += cycles;
            match outcome {
                WalkOutcome::Mapped { pte, size } => {
                    let flags = crate::tlb::set_assoc::flags_of_pte(pte);
                    let e = c.tlbs.entry(Vpn::of_va(va), crate::page_table::pte_pfn(pte), size, flags);
                    c.tlbs.fill(e, kind, tl);
                    return Ok(spent);
                }
                WalkOutcome::Fault { present: false } => {
                    c.stats.page_faults += 1;
                    spent += self.fault_cycles;
                    self.fault(core, space, va)?;
                }
                WalkOutcome::Fault { present: true } => {
                    return Err(Error::Sim(format!("write to read-only page {va:#x} in trace mode")));
                }
            }
        }
        Err(Error::Sim(format!("page {va:#x} still unmapped after its fault")))
    }

    /// Host-cache hints for a coming access: its L2 TLB set, the page-table entries its walk
    /// would read, and the page-table-line cache set of the leaf entry.
    #[inline]
    fn prefetch(&self, core: usize, space: &AddressSpace, va: u64) {
        let c = &self.cores[core];
        c.tlbs.structs[crate::tlb::hierarchy::L2].prefetch(Vpn::of_va(va), PageSize::Size4K, c.tlbs.tag());
        let line = self.pt.prefetch_walk(space.root, space.levels, va);
        if let Some(cache) = &self.pt_caches[c.socket as usize] {
            cache.prefetch(Vpn(line), PageSize::Size4K, 0);
        }
    }

    /// Run one batch of events on `core`.
    pub fn run_batch<T: TlbListener, W: WalkListener>(
        &mut self,
        core: usize,
        space: &AddressSpace,
        events: &[TraceEvent],
        tl: &mut T,
        wl: &mut W,
    ) -> Result<()> {
        let cpi = self.cpi_fixed;
        let fetches = self.fetches;
        // On a miss-heavy stream, hint the host cache a few accesses ahead (no simulated
        // effect). Decided per batch from the previous batch's L1 miss rate, so a hit-heavy
        // stream pays nothing.
        let s = &self.cores[core].stats;
        let (accesses, misses) = (s.accesses, s.l1_tlb_misses);
        let lookahead = if misses - self.cores[core].batch_start_misses > (accesses - self.cores[core].batch_start_accesses) / 8 {
            PREFETCH_DISTANCE
        } else {
            0
        };
        self.cores[core].batch_start_accesses = accesses;
        self.cores[core].batch_start_misses = misses;
        for (i, ev) in events.iter().enumerate() {
            if lookahead != 0 {
                if let Some(TraceEvent::Access { va, kind, .. }) = events.get(i + lookahead) {
                    if fetches || !kind.is_fetch() {
                        self.prefetch(core, space, *va);
                    }
                }
            }
            match *ev {
                TraceEvent::Access { va, kind, .. } => {
                    if kind.is_fetch() {
                        let c = &mut self.cores[core];
                        c.stats.instructions += 1;
                        c.clock += cpi;
                        if !fetches {
                            continue;
                        }
                    }
                    self.access(core, space, va, kind, tl, wl)?;
                }
                TraceEvent::Instructions { n } => {
                    let c = &mut self.cores[core];
                    c.stats.instructions += n;
                    c.clock += cpi * n;
                }
                // OS events in a trace are for the OS model; trace mode ignores them.
                TraceEvent::Mmap { .. } | TraceEvent::Munmap { .. } | TraceEvent::Thread { .. } => {}
                TraceEvent::Syscall { .. } | TraceEvent::File { .. } => {}
            }
        }
        Ok(())
    }
}

/// Run a whole simulation and return stats.json.
pub fn run(cfg: &Config) -> Result<serde_json::Value> {
    if crate::workload::is_os_mode(&cfg.workload.kind) {
        let workload = crate::workload::build(cfg)?;
        return crate::os::run(cfg, workload);
    }
    let mut machine = Machine::new(cfg)?;
    let space = machine.new_address_space(1, cfg.os.pt_levels, NodeId(0))?;
    let mut sources: Vec<Box<dyn TraceSource>> = match cfg.workload.kind.as_str() {
        "trace" => cfg
            .workload
            .paths
            .iter()
            .map(|p| crate::trace::open(p, cfg.workload.format).map_err(Error::from))
            .collect::<Result<_>>()?,
        _ => (0..cfg.synthetic_threads())
            .map(|t| Box::new(crate::workload::synthetic::Synthetic::new(&cfg.workload, cfg.seed, t)) as Box<dyn TraceSource>)
            .collect(),
    };
    let batch = cfg.sim.batch as usize;
    let mut buf = Vec::with_capacity(batch);
    let mut live: Vec<bool> = vec![true; sources.len()];
    let mut tl = NoTlbListener;
    let mut wl = NoWalkListener;
    // The thread whose core is furthest behind runs next (ties: lowest core).
    while let Some(t) = (0..sources.len()).filter(|&t| live[t]).min_by_key(|&t| (machine.cores[t].clock, t)) {
        let n = sources[t].next_batch(&mut buf, batch)?;
        if n == 0 {
            live[t] = false;
            continue;
        }
        machine.run_batch(t, &space, &buf, &mut tl, &mut wl)?;
    }
    Ok(machine.stats_json(cfg, sources.len()))
}

impl Machine {
    pub fn stats_json(&mut self, cfg: &Config, threads: usize) -> serde_json::Value {
        for c in self.cores.iter_mut() {
            c.stats.cycles = c.clock >> CLOCK_SHIFT;
        }
        let cores: Vec<CoreStats> = self.cores.iter().map(|c| c.stats).collect();
        let structures: Vec<_> = self.cores.iter().map(|c| c.tlbs.named_counters()).collect();
        let per_socket: Vec<_> = (0..cfg.machine.sockets)
            .map(|s| {
                json!({
                    "socket": s,
                    "pt_cache": self.pt_caches[s as usize].as_ref().map(|c| json!({"entries": c.occupancy()})),
                    "frames_used": self.mem.used(NodeId(s)),
                })
            })
            .collect();
        let totals = stats::totals(&cores);
        let makespan = cores.iter().map(|c| c.cycles).max().unwrap_or(0);
        let per_10k = |x: u64| if totals.instructions == 0 { 0.0 } else { x as f64 * 1e4 / totals.instructions as f64 };
        let run = json!({
            "version": crate::VERSION,
            "threads": threads,
            "makespan_cycles": makespan,
            "seconds": makespan as f64 / (cfg.machine.frequency_ghz * 1e9),
            "page_table_pages": self.pt.table_pages(),
            "l1_tlb_misses_per_10k_instructions": per_10k(totals.l1_tlb_misses),
            "l2_tlb_misses_per_10k_instructions": per_10k(totals.l2_tlb_misses),
            "walks_per_10k_instructions": per_10k(totals.walks),
        });
        stats::to_json(&cores, &structures, json!(per_socket), run)
    }
}
