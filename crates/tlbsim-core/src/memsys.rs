//! Data accesses through the memory system (`machine.memory.model = "cache"`; Mitosis §3 and
//! §8 for why it matters: page-table and data lines compete in the last-level cache, remote
//! DRAM is twice as far, and a bandwidth-hungry co-runner slows a node down).
//!
//! Modelled: a per-core private cache standing for L1 + L2 (its hits cost nothing beyond the
//! base CPI, which already counts them); a per-socket last-level cache shared by data lines
//! and page-table lines (the walker reads through the same structure, `Machine::pt_caches`);
//! on a last-level miss, the DRAM of the node holding the line, at its latency from the
//! reading socket, plus the wait for the node's bandwidth. Bandwidth: every 64-byte read
//! occupies the node's channel for 64 / (GB/s / GHz) cycles (local or remote rate); demand is
//! accounted per window of `WINDOW` cycles, and a read waits for the work queued in its
//! window beyond the window's capacity (a backlog carries over to the next window). Windows
//! rather than a single FIFO, because cores are simulated out of order within the engine's
//! skew (a batch in trace mode, a quantum in OS mode).
//!
//! A next-line stream prefetcher per core: a last-level miss on the line after the core's
//! previous miss was fetched ahead, so it costs only its share of the node's bandwidth (its
//! service time and any wait), not the DRAM latency — which is how a STREAM-like sweep
//! saturates a node's bandwidth while a pointer chase or a page walk pays full latency.
//!
//! Simplified: no writebacks (a dirty line's eviction costs no bandwidth), no prefetchers,
//! no MSHR limits (misses are serial, each paying its full latency); coherence between the
//! private caches is not modelled (a line may sit in several).

use crate::config::{Config, MemoryModel};
use crate::error::{Error, Result};
use crate::tlb::{LineCache, TlbGeometry};
use crate::types::Pfn;
use serde::Serialize;

/// Cycles per bandwidth accounting window.
const WINDOW: u64 = 2048;
/// Windows kept per node (covers the engine's skew between cores: a trace-mode batch).
const RING: usize = 1024;
/// Fixed-point shift of service times (1/1024 cycle), so that a fraction of a cycle per
/// line accumulates exactly.
const FIX: u32 = 10;

/// Per-core memory counters (stats.json `per_core[i].memory`, summed in `totals.memory`).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct MemCounters {
    pub data_accesses: u64,
    pub private_hits: u64,
    pub llc_hits: u64,
    pub dram_local: u64,
    pub dram_remote: u64,
    /// Last-level misses the stream prefetcher saw coming (latency hidden).
    pub prefetched: u64,
    /// Cycles data accesses cost beyond the base CPI.
    pub data_cycles: u64,
    /// Of those, cycles waited for DRAM bandwidth (data and page-table reads).
    pub bandwidth_wait_cycles: u64,
    /// Lines the kernel model touched through this hierarchy (page-table copies' entries
    /// and descriptors that Mitosis' replica updates write), and their cycles (the hit and
    /// miss counters above include them).
    pub kernel_accesses: u64,
    pub kernel_cycles: u64,
}

impl MemCounters {
    pub fn add(&mut self, o: &MemCounters) {
        self.data_accesses += o.data_accesses;
        self.private_hits += o.private_hits;
        self.llc_hits += o.llc_hits;
        self.dram_local += o.dram_local;
        self.dram_remote += o.dram_remote;
        self.prefetched += o.prefetched;
        self.data_cycles += o.data_cycles;
        self.bandwidth_wait_cycles += o.bandwidth_wait_cycles;
        self.kernel_accesses += o.kernel_accesses;
        self.kernel_cycles += o.kernel_cycles;
    }
}

/// The DRAM channels: per node, demand per window.
pub struct Dram {
    /// Per node: (window number, demand in fixed-point cycles) per ring slot.
    windows: Vec<Vec<(u64, u64)>>,
    service_local: u64,
    service_remote: u64,
}

impl Dram {
    /// Cycles (fixed point) one 64-byte line takes at `gbps` on a `ghz` core clock.
    fn service(gbps: f64, ghz: f64) -> u64 {
        ((64.0 / (gbps / ghz)) * (1u64 << FIX) as f64).round().max(1.0) as u64
    }

    /// A line read of `node` at cycle `now` by a socket that is (`local`) or is not the
    /// node's: the cycles it waits for bandwidth.
    pub fn read(&mut self, node: usize, now: u64, local: bool) -> u64 {
        let s = if local { self.service_local } else { self.service_remote };
        let w = now / WINDOW;
        let ring = &mut self.windows[node];
        let slot = (w as usize) % RING;
        if ring[slot].0 != w {
            // A new window: what the previous one could not serve carries over.
            let prev = ring[(slot + RING - 1) % RING];
            // An unused slot's window is u64::MAX (and its demand 0).
            let carry = if prev.0.checked_add(1) == Some(w) { prev.1.saturating_sub(WINDOW << FIX) } else { 0 };
            ring[slot] = (w, carry);
        }
        let before = ring[slot].1;
        ring[slot].1 += s;
        // Work queued in this window beyond what the channel serves by this read's time.
        let served_by_now = (now - w * WINDOW) << FIX;
        before.saturating_sub(served_by_now) >> FIX
    }
}

/// The memory system of model "cache" (None in model "flat").
pub struct MemSys {
    /// Per core: the private cache (lines).
    pub private: Vec<LineCache>,
    pub llc_latency: u32,
    pub dram: Dram,
    pub counters: Vec<MemCounters>,
    /// Per core: the last line that missed the last-level cache (the prefetcher's stream).
    last_miss: Vec<u64>,
}

/// The key a socket's shared cache (the LLC, or the flat model's page-table-line cache)
/// files physical line `line` under: its set comes from the key's low bits, and the key
/// folds the line's higher bits into them (two xorshifts: a bijection, so no two lines
/// share a key). Real last-level caches hash the physical address into slice and set
/// (Intel's "complex addressing"); with plain low bits, page-table pages that the
/// allocator hands out at 2 MiB strides among data frames would all fall into the same
/// few sets.
#[inline]
pub fn llc_key(line: u64) -> u64 {
    let x = line ^ (line >> 14);
    x ^ (x >> 27)
}

impl MemSys {
    /// The memory system `cfg` describes (None for model "flat").
    pub fn new(cfg: &Config) -> Result<Option<MemSys>> {
        let m = &cfg.machine.memory;
        if m.model == MemoryModel::Flat {
            return Ok(None);
        }
        let geometry = |bytes: u64, ways: u32| TlbGeometry { entries: (bytes / 64) as u32, ways, replacement: crate::tlb::Replacement::Lru };
        let private = (0..cfg.cores())
            .map(|c| {
                LineCache::new(&geometry(m.private_bytes, m.private_ways), cfg.seed ^ c as u64).map_err(|e| Error::config("machine.memory.private_ways", e))
            })
            .collect::<Result<Vec<_>>>()?;
        let ghz = cfg.machine.frequency_ghz;
        Ok(Some(MemSys {
            private,
            llc_latency: m.llc_latency,
            dram: Dram {
                windows: vec![vec![(u64::MAX, 0); RING]; cfg.machine.sockets as usize],
                service_local: Dram::service(m.bandwidth_gbps_local, ghz),
                service_remote: Dram::service(m.bandwidth_gbps_remote, ghz),
            },
            counters: vec![MemCounters::default(); cfg.cores() as usize],
            last_miss: vec![u64::MAX - 1; cfg.cores() as usize],
        }))
    }

    /// The last-level cache geometry of model "cache" (replaces `machine.pt_cache`).
    pub fn llc_geometry(cfg: &Config) -> TlbGeometry {
        let m = &cfg.machine.memory;
        TlbGeometry { entries: (m.llc_bytes / 64) as u32, ways: m.llc_ways, replacement: crate::tlb::Replacement::Lru }
    }

    /// A data access of `core` (on `socket`) to physical line `line` (frame << 6 | line in
    /// frame) at cycle `now`; `llc` is the socket's last-level cache, `latency` the DRAM
    /// latency from the socket to each node. Returns the cycles beyond the base CPI.
    #[inline]
    pub fn data_access(&mut self, core: usize, socket: u32, line: u64, now: u64, llc: Option<&mut LineCache>, latency: &[u32]) -> u64 {
        self.counters[core].data_accesses += 1;
        let cycles = self.line_access(core, socket, line, now, llc, latency);
        self.counters[core].data_cycles += cycles;
        cycles
    }

    /// A line the kernel model reads or writes on behalf of `core` (e.g. a page-table
    /// copy's entry): through the same private cache, last-level cache and DRAM as data.
    pub fn kernel_access(&mut self, core: usize, socket: u32, line: u64, now: u64, llc: Option<&mut LineCache>, latency: &[u32]) -> u64 {
        self.counters[core].kernel_accesses += 1;
        let cycles = self.line_access(core, socket, line, now, llc, latency);
        self.counters[core].kernel_cycles += cycles;
        cycles
    }

    #[inline]
    fn line_access(&mut self, core: usize, socket: u32, line: u64, now: u64, llc: Option<&mut LineCache>, latency: &[u32]) -> u64 {
        let c = &mut self.counters[core];
        if self.private[core].access(line) {
            c.private_hits += 1;
            return 0;
        }
        if let Some(llc) = llc {
            if llc.access(llc_key(line)) {
                c.llc_hits += 1;
                return self.llc_latency as u64;
            }
        }
        let node = crate::memory::node_of(Pfn(line >> 6)).0;
        let local = node == socket;
        if local {
            c.dram_local += 1;
        } else {
            c.dram_remote += 1;
        }
        let prefetched = line == self.last_miss[core].wrapping_add(1);
        self.last_miss[core] = line;
        let wait = self.dram.read(node as usize, now, local);
        let c = &mut self.counters[core];
        c.bandwidth_wait_cycles += wait;

        if prefetched {
            c.prefetched += 1;
            let service = if local { self.dram.service_local } else { self.dram.service_remote };
            wait + (service >> FIX).max(1)
        } else {
            latency[node as usize] as u64 + wait
        }
    }

    /// A page-table line read by the walker missed the last-level cache: the bandwidth wait.
    #[inline]
    pub fn table_read(&mut self, core: usize, socket: u32, node: u32, now: u64) -> u64 {
        let wait = self.dram.read(node as usize, now, node == socket);
        self.counters[core].bandwidth_wait_cycles += wait;
        wait
    }
}
