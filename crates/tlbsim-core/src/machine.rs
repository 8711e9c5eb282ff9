//! The simulated machine both engines run on: cores (each with its TLB hierarchy, stats
//! and clock), physical memory, the page tables and their placement backend, the
//! page-table-line caches and the optional cache/DRAM model. Trace mode (`crate::sim`) and
//! the OS model (`crate::os`) both drive it through the one access path of
//! `crate::access`; neither engine's policy lives here, except trace mode's first-touch
//! fault, which only needs the machine's own placement settings.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::memory::{node_of, FrameKind, PhysMem};
use crate::page_table::{PageTables, PTE_USER, PTE_WRITABLE};
use crate::placement::{PageTableBackend, PtCtx};
use crate::stats::{self, CoreStats};
use crate::tlb::hierarchy::TlbHierarchy;
use crate::tlb::TlbGeometry;
use crate::types::{CoreId, NodeId, PageSize, Pfn, Vpn};
use crate::walk::{self, WalkListener, WalkMemory, WalkOutcome};
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
    pub(crate) batch_start_accesses: u64,
    pub(crate) batch_start_misses: u64,
}

/// One address space (trace mode has exactly one).
pub struct AddressSpace {
    pub id: u32,
    pub root: u32,
    pub levels: u32,
}

pub struct Machine {
    pub cores: Vec<Core>,
    pub pt_caches: Vec<Option<crate::tlb::LineCache>>,
    pt_cache_latency: u32,
    /// Data accesses through caches and DRAM (`machine.memory.model = "cache"`).
    pub memsys: Option<crate::memsys::MemSys>,
    /// latency[socket][node]
    latency: Vec<Vec<u32>>,
    pub mem: PhysMem,
    pub pt: PageTables,
    /// Where page-table pages go and how entries are written (`os.pt_placement`).
    pub backend: Box<dyn PageTableBackend>,
    /// Trace mode: the root each socket's cores load (a backend with replicas gives each
    /// socket its own).
    pub(crate) socket_roots: Vec<u32>,
    pt_levels: u32,
    data_placement: crate::config::Placement,
    thp: bool,
    /// `os.thp_failure_rate` as a threshold out of 2^53, and the stream it draws from
    /// (None: every 2 MiB allocation with a free block succeeds).
    thp_failure: Option<(u64, crate::rng::SplitMix64)>,
    interleave_next: u32,
    pub(crate) fault_cycles: u64,
    pub(crate) cpi_fixed: u64,
    pub(crate) fetches: bool,
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
        let memsys = crate::memsys::MemSys::new(cfg)?;
        // Model "cache": the last-level cache holds page-table and data lines alike.
        let (pt_geometry, pt_latency, pt_key) = match memsys {
            Some(_) => (crate::memsys::MemSys::llc_geometry(cfg), m.memory.llc_latency, "machine.memory.llc_ways"),
            None => (TlbGeometry { entries: pc.entries, ways: pc.ways, replacement: pc.replacement }, pc.latency, "machine.pt_cache"),
        };
        let pt_caches = (0..sockets)
            .map(|_| (pt_geometry.entries > 0).then(|| crate::tlb::LineCache::new(&pt_geometry, cfg.seed)).transpose().map_err(|e| Error::config(pt_key, e)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Machine {
            cores,
            pt_caches,
            pt_cache_latency: pt_latency,
            memsys,
            latency: (0..sockets).map(|s| (0..sockets).map(|n| cfg.latency(s, n)).collect()).collect(),
            mem: PhysMem::new(sockets, m.memory.node_mib),
            pt: PageTables::new(),
            backend: crate::placement::build(cfg)?,
            socket_roots: Vec::new(),
            pt_levels: cfg.os.pt_levels,
            data_placement: crate::config::Placement::parse("os.data_placement", &cfg.os.data_placement, sockets)?,
            thp: cfg.os.thp,
            thp_failure: (cfg.os.thp_failure_rate > 0.0)
                .then(|| ((cfg.os.thp_failure_rate * (1u64 << 53) as f64) as u64, crate::rng::SplitMix64::derive(cfg.seed, 0x7468_7066))),
            interleave_next: 0,
            fault_cycles: cfg.sim.fault_cycles,
            cpi_fixed: (m.base_cpi * (1u64 << CLOCK_SHIFT) as f64).round() as u64,
            fetches: cfg.workload.fetches,
        })
    }

    /// A new, empty address space `id` created by a core of `socket`, its root placed by
    /// the page-table backend.
    pub fn new_address_space(&mut self, id: u32, socket: u32) -> Result<AddressSpace> {
        self.new_address_space_with(id, socket, &crate::placement::PtOptions::default())
    }

    /// [`Machine::new_address_space`] with the process's per-process page-table options.
    pub fn new_address_space_with(&mut self, id: u32, socket: u32, opts: &crate::placement::PtOptions) -> Result<AddressSpace> {
        let mut ctx = PtCtx { pt: &mut self.pt, mem: &mut self.mem, levels: self.pt_levels };
        let root = self.backend.create(&mut ctx, id, socket, opts)?;
        self.socket_roots = (0..self.mem.nodes()).map(|s| self.backend.root_for(id, root, s)).collect();
        Ok(AddressSpace { id, root, levels: self.pt_levels })
    }

    /// Cycles of the page-table writes a backend made in copies beyond the first since the
    /// last call, by `core` (Mitosis §5.2): `per_entry` each (its instructions), plus two
    /// memory references, the ring pointer in the copy's page descriptor and the entry.
    /// With the cache model they go through the core's private cache, the socket's LLC and
    /// DRAM like any line; with the flat model, through the socket's page-table-line cache
    /// (a hit costs its latency: no private level, so this errs high) and the copy's node.
    pub(crate) fn take_replica_write_cycles(&mut self, core: usize, per_entry: u64) -> u64 {
        let Some(writes) = self.backend.replica_writes() else { return 0 };
        if writes.is_empty() {
            return 0;
        }
        let socket = self.cores[core].socket as usize;
        let now = self.cores[core].clock >> CLOCK_SHIFT;
        let mut cycles = 0;
        for &(table, index) in writes.iter() {
            cycles += per_entry;
            let node = node_of(table).0 as usize;
            // The copy's descriptor (its ring pointer) and the entry's line.
            for line in [crate::memory::descriptor_line(table), (table.0 << 6) | (index as u64 >> 3)] {
                if let Some(ms) = self.memsys.as_mut() {
                    // Model "cache": the core's private cache, the socket's LLC, then DRAM.
                    cycles += ms.kernel_access(core, socket as u32, line, now + cycles, self.pt_caches[socket].as_mut(), &self.latency[socket]);
                    continue;
                }
                let hit = match self.pt_caches[socket].as_mut() {
                    Some(cache) => cache.access(crate::memsys::llc_key(line)),
                    None => false,
                };
                cycles += if hit { self.pt_cache_latency as u64 } else { self.latency[socket][node] as u64 };
            }
        }
        writes.clear();
        cycles
    }

    /// First-touch fault in trace mode: map the page (a 2 MiB page with THP when the whole
    /// aligned region is unmapped), table pages placed by the backend.
    pub(crate) fn first_touch_fault(&mut self, core: usize, space: &AddressSpace, va: u64) -> Result<()> {
        let socket = self.cores[core].socket;
        let nodes = self.mem.nodes();
        let data_node = self.data_placement.node(socket, nodes, &mut self.interleave_next);
        let flags = PTE_WRITABLE | PTE_USER;
        // The PD entry for this 2 MiB region must be empty: no 4 KiB table under it.
        let huge_ok = self.thp && !self.pt.has_page_table(space.root, space.levels, va);
        let huge = if huge_ok { self.huge_block(core, data_node, space.id) } else { None };
        let (pfn, va, size) = match huge {
            Some(pfn) => (pfn, va & !((2 << 20) - 1), PageSize::Size2M),
            None => (self.mem.alloc_on(CoreId(core as u32), data_node, FrameKind::Data, space.id)?, va & !0xfff, PageSize::Size4K),
        };
        let mut ctx = PtCtx { pt: &mut self.pt, mem: &mut self.mem, levels: space.levels };
        self.backend.map(&mut ctx, space.id, space.root, va, pfn, size, flags, socket)?;
        // Trace mode has no cost table: only the copies' memory references.
        let replicas = self.take_replica_write_cycles(core, 0);
        self.cores[core].clock += replicas << CLOCK_SHIFT;
        Ok(())
    }

    /// A 2 MiB block of data frames on `node` for a THP fault by `core`, or None: no free
    /// block, or (`os.thp_failure_rate`) the machine's fragmentation left none. The fault
    /// falls back to a 4 KiB page, counted in `thp_fallbacks`.
    pub(crate) fn huge_block(&mut self, core: usize, node: NodeId, owner: u32) -> Option<Pfn> {
        let fragmented = self.thp_failure.as_mut().is_some_and(|(threshold, rng)| rng.below(1 << 53) < *threshold);
        let block = if fragmented { None } else { self.mem.alloc_contiguous(node, 512, FrameKind::Data, owner).ok() };
        if block.is_none() {
            self.cores[core].stats.thp_fallbacks += 1;
        }
        block
    }

    /// One hardware walk by `core` through its socket's memory system.
    #[inline]
    pub(crate) fn walk<W: WalkListener>(&mut self, core: usize, space: &AddressSpace, va: u64, write: bool, wl: &mut W) -> (WalkOutcome, u64) {
        let c = &mut self.cores[core];
        let socket = c.socket as usize;
        let now = c.clock >> CLOCK_SHIFT;
        let mut memsys = WalkMemory {
            pt_cache: self.pt_caches[socket].as_mut(),
            pt_cache_latency: self.pt_cache_latency,
            node_latency: &self.latency[socket],
            socket: socket as u32,
            mem: self.memsys.as_mut(),
            core,
            now,
        };
        walk::walk(&mut self.pt, &mut c.tlbs, &mut memsys, space.root, space.levels, va, write, &mut c.stats, wl)
    }

    /// The data access of `core` at `va`, translated to `frame`: its cycles beyond the base
    /// CPI, charged to the core (model "cache" only).
    #[inline]
    pub fn data_access(&mut self, core: usize, frame: crate::types::Pfn, va: u64) {
        let Some(ms) = self.memsys.as_mut() else { return };
        let c = &mut self.cores[core];
        let socket = c.socket;
        let line = (frame.0 << 6) | ((va >> 6) & 63);
        let cycles = ms.data_access(core, socket, line, c.clock >> CLOCK_SHIFT, self.pt_caches[socket as usize].as_mut(), &self.latency[socket as usize]);
        self.cores[core].clock += cycles << CLOCK_SHIFT;
    }

    /// Host-cache hints for a coming access: its L2 TLB set, the page-table entries its walk
    /// would read, and the page-table-line cache set of the leaf entry.
    #[inline]
    pub(crate) fn prefetch(&self, core: usize, space: &AddressSpace, va: u64) {
        let c = &self.cores[core];
        c.tlbs.structs[crate::tlb::hierarchy::L2].prefetch(Vpn::of_va(va), PageSize::Size4K, c.tlbs.tag());
        let line = self.pt.prefetch_walk(space.root, space.levels, va);
        if let Some(cache) = &self.pt_caches[c.socket as usize] {
            cache.prefetch(crate::memsys::llc_key(line));
        }
    }
}

impl Machine {
    /// Live page-table and data pages, in total and per node (`totals` fields).
    pub(crate) fn memory_json(&self) -> serde_json::Value {
        let nodes = self.mem.nodes();
        let tables = self.pt.live_tables_per_node(nodes);
        let data: Vec<u64> = (0..nodes).map(|n| self.mem.data_used(NodeId(n))).collect();
        json!({
            "page_table_pages": tables.iter().sum::<u64>(),
            "page_table_bytes": tables.iter().sum::<u64>() * 4096,
            "page_table_pages_peak": self.pt.peak_live,
            "data_pages": data.iter().sum::<u64>(),
            "data_pages_peak": self.mem.data_peak,
            "per_node": (0..nodes as usize).map(|n| json!({"node": n, "page_table_pages": tables[n], "data_pages": data[n]})).collect::<Vec<_>>(),
        })
    }

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
            // High-water mark of table slots (`totals.page_table_pages` is the live count).
            "page_table_pages": self.pt.table_pages(),
            "l1_tlb_misses_per_10k_instructions": per_10k(totals.l1_tlb_misses),
            "l2_tlb_misses_per_10k_instructions": per_10k(totals.l2_tlb_misses),
            "walks_per_10k_instructions": per_10k(totals.walks),
        });
        let mut v = stats::to_json(&cores, &structures, json!(per_socket), run);
        let live = self.memory_json();
        for k in ["page_table_pages", "page_table_bytes", "page_table_pages_peak", "data_pages", "data_pages_peak"] {
            v["totals"][k] = live[k].clone();
        }
        v["totals"]["memory_per_node"] = live["per_node"].clone();
        v["totals"]["page_tables"] = self.backend.stats_json();
        if let Some(ms) = &self.memsys {
            let mut total = crate::memsys::MemCounters::default();
            for (i, c) in ms.counters.iter().enumerate() {
                total.add(c);
                v["per_core"][i]["memory"] = json!(c);
            }
            v["totals"]["memory"] = json!(total);
        }
        for (i, c) in self.cores.iter().enumerate() {
            if let Some(p) = c.tlbs.partition_json() {
                v["per_core"][i]["partition"] = p;
            }
        }
        v
    }
}
