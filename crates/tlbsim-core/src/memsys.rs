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
//! previous miss was fetched ahead (below, for what that costs).
//!
//! Memory-level parallelism (`machine.memory.mshrs` = N > 0, issue 46): a core keeps up to
//! N data misses in flight (its L1D fill buffers / MSHRs), within its out-of-order window
//! (`rob_entries` instructions of `base_cpi` cycles each). The rule is interval analysis'
//! (Karkhanis and Smith, "A first-order superscalar processor model", ISCA 2004; Eyerman,
//! Eeckhout, Karkhanis and Smith, "A mechanistic performance model for superscalar
//! out-of-order processors", ACM TOCS 27(2), 2009, §4.4): a long-latency miss blocks
//! retirement, the front end keeps dispatching behind it until the reorder buffer is full,
//! and independent misses dispatched meanwhile overlap with it. Here: the core's clock is its
//! retirement; its work other than data-miss stalls (base CPI, TLB and walk cycles, faults,
//! kernel time) is its front end's progress P. A data miss dispatches at d: (1) where the
//! front end reaches it, the previous data miss's dispatch plus the work since, if (2) a
//! miss still in flight then was issued at most W = `rob_entries` × `base_cpi` cycles of
//! work before it (it fits in the window behind that miss); otherwise it begins a new
//! interval and dispatches at its own time, paying its full latency (interval analysis'
//! isolated miss); (3) no earlier than a fill buffer is free: if all N hold misses in flight
//! at d, the earliest to complete frees one. It completes at d + latency + the bandwidth
//! wait at d, and the core pays only what is left of that at its clock (the rest was hidden
//! under earlier misses).
//! N independent misses back to back so cost latency + (N − 1) × service, not N × latency;
//! a core's stream is bounded by N lines per latency (Little's law), and every line still
//! queues for the node's bandwidth, so co-runners keep N requests each in the node's queue
//! and a page walk reading that node waits behind them. A line the prefetcher fetched ahead
//! needs a fill buffer too, but no room in the window: it dispatches as early as a fill
//! buffer frees, at most one latency before the access (a timely prefetch).
//! What is independent: every data miss of a core is taken as independent of the data
//! misses before it (the workloads do not mark pointer chases; a dependent chain longer
//! than the window is still serialised by (2), a short one is not). Dependent reads stay
//! serial: a page walk's steps (`table_read`, each at its full latency in the walker), the
//! kernel's lines (`kernel_access`), and a data access after its own walk (the walk is
//! progress before it). Last-level hits (`llc_latency`) are not overlapped.
//!
//! `mshrs = 0` is the model before issue 46: misses serial, each paying its full latency,
//! and a prefetched line costing only its share of the node's bandwidth (its service time
//! and any wait), not the DRAM latency, with no limit on lines in flight.
//!
//! Simplified: no writebacks (a dirty line's eviction costs no bandwidth); coherence between
//! the private caches is not modelled (a line may sit in several); one retirement-blocking
//! miss at a time (interval analysis' first-order view: work retired behind a miss costs its
//! base CPI afterwards, as before).

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
/// Upper bound of `machine.memory.mshrs` (the per-core arrays are this long).
pub use crate::config::MAX_MSHRS;

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
    /// Per core: the misses in flight (`mshrs` > 0).
    mlp: Vec<Mlp>,
    /// `machine.memory.mshrs` (0: no overlap).
    mshrs: usize,
    /// The out-of-order window in cycles of progress (`rob_entries` × `base_cpi`).
    window: u64,
}

/// One core's fill buffers: the misses in flight and where its front end is.
#[derive(Clone)]
struct Mlp {
    /// Per fill buffer: the cycle its miss completes, and the core's progress when it was
    /// issued (only the first `mshrs` are used).
    done: [u64; MAX_MSHRS],
    progress: [u64; MAX_MSHRS],
    /// The previous demand miss's dispatch cycle and the progress at it.
    last_dispatch: u64,
    last_progress: u64,
    /// Cycles this core stalled on data misses (its clock less its progress).
    stalled: u64,
}

impl Mlp {
    fn new() -> Mlp {
        Mlp { done: [0; MAX_MSHRS], progress: [0; MAX_MSHRS], last_dispatch: 0, last_progress: 0, stalled: 0 }
    }
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
            mlp: vec![Mlp::new(); if m.mshrs > 0 { cfg.cores() as usize } else { 0 }],
            mshrs: m.mshrs as usize,
            window: (m.rob_entries as f64 * cfg.machine.base_cpi).round() as u64,
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
        let cycles = self.line_access(core, socket, line, now, llc, latency, self.mshrs > 0);
        self.counters[core].data_cycles += cycles;
        cycles
    }

    /// A line the kernel model reads or writes on behalf of `core` (e.g. a page-table
    /// copy's entry): through the same private cache, last-level cache and DRAM as data.
    pub fn kernel_access(&mut self, core: usize, socket: u32, line: u64, now: u64, llc: Option<&mut LineCache>, latency: &[u32]) -> u64 {
        self.counters[core].kernel_accesses += 1;
        let cycles = self.line_access(core, socket, line, now, llc, latency, false);
        self.counters[core].kernel_cycles += cycles;
        cycles
    }

    /// A line access; `overlap`: a data miss that may overlap with the core's misses in flight.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn line_access(&mut self, core: usize, socket: u32, line: u64, now: u64, llc: Option<&mut LineCache>, latency: &[u32], overlap: bool) -> u64 {
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
        if prefetched {
            self.counters[core].prefetched += 1;
        }
        let lat = latency[node as usize] as u64;
        if overlap {
            return self.overlapped_miss(core, node as usize, local, now, lat, prefetched);
        }
        let wait = self.dram.read(node as usize, now, local);
        self.counters[core].bandwidth_wait_cycles += wait;
        if prefetched {
            let service = if local { self.dram.service_local } else { self.dram.service_remote };
            wait + (service >> FIX).max(1)
        } else {
            lat + wait
        }
    }

    /// A data miss of `core` at its clock `now` with up to `mshrs` in flight (the header's
    /// rule): the cycles the core stalls for it.
    #[inline]
    fn overlapped_miss(&mut self, core: usize, node: usize, local: bool, now: u64, lat: u64, prefetched: bool) -> u64 {
        let n = self.mshrs;
        let m = &mut self.mlp[core];
        let progress = now.saturating_sub(m.stalled);
        // (3) the fill buffer that frees first.
        let mut slot = 0;
        for i in 1..n {
            if m.done[i] < m.done[slot] {
                slot = i;
            }
        }
        let d = if prefetched {
            // Fetched ahead by the prefetcher: as early as one latency before the access.
            now.saturating_sub(lat)
        } else {
            // (1) the front end: behind the previous demand miss, at the pace of the work since.
            let d = m.last_dispatch + progress.saturating_sub(m.last_progress);
            // (2) the window: it overlaps only if a miss still in flight when it dispatches
            // is at most W cycles of work before it; else it begins a new interval and
            // pays its full latency from its own time.
            let overlaps = (0..n).any(|i| m.done[i] > d && progress.saturating_sub(m.progress[i]) <= self.window);
            if overlaps {
                d
            } else {
                now
            }
        };
        // Never later than the access itself, nor further back than the bandwidth windows
        // reach (half the ring).
        let d = d.max(m.done[slot]).min(now).max(now.saturating_sub(WINDOW * (RING as u64 / 2)));
        let wait = self.dram.read(node, d, local);
        let done = d + lat + wait;
        let cost = done.saturating_sub(now);
        m.done[slot] = done;
        m.progress[slot] = progress;
        if !prefetched {
            m.last_dispatch = d;
            m.last_progress = progress;
        }
        m.stalled += cost;
        self.counters[core].bandwidth_wait_cycles += wait;
        cost
    }

    /// A page-table line read by the walker missed the last-level cache: the bandwidth wait.
    #[inline]
    pub fn table_read(&mut self, core: usize, socket: u32, node: u32, now: u64) -> u64 {
        let wait = self.dram.read(node as usize, now, node == socket);
        self.counters[core].bandwidth_wait_cycles += wait;
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MemoryModel;

    const LAT: u64 = 280;
    /// 19.2 GB/s at 3 GHz: a 64-byte line occupies the channel 10 cycles.
    const SERVICE: u64 = 10;

    fn memsys(mshrs: u32, rob_entries: u32) -> MemSys {
        let mut cfg = Config::default();
        cfg.machine.frequency_ghz = 3.0;
        cfg.machine.base_cpi = 1.0;
        let m = &mut cfg.machine.memory;
        m.model = MemoryModel::Cache;
        m.bandwidth_gbps_local = 19.2;
        m.bandwidth_gbps_remote = 19.2;
        m.mshrs = mshrs;
        m.rob_entries = rob_entries;
        let ms = MemSys::new(&cfg).unwrap().unwrap();
        assert_eq!(ms.dram.service_local >> FIX, SERVICE);
        ms
    }

    /// Line `i` of a stream no prefetcher follows: a line in frame 2i + 1 (node 0).
    fn scattered(i: u64) -> u64 {
        (2 * i + 1) << 6
    }

    /// `n` data misses, each issued `gap` cycles of work after the previous one completed on
    /// the core's clock: the clock at the end (the core's time for them).
    fn run(ms: &mut MemSys, lines: impl Iterator<Item = u64>, gap: u64) -> u64 {
        let mut clock = 0;
        for line in lines {
            clock += ms.data_access(0, 0, line, clock, None, &[LAT as u32]);
            clock += gap;
        }
        clock
    }

    #[test]
    fn independent_misses_overlap_up_to_the_fill_buffers() {
        for n in [2u64, 5, 10] {
            let mut ms = memsys(n as u32, 192);
            let t = run(&mut ms, (0..n).map(scattered), 0);
            // Back to back on an idle channel: the first pays the latency, each of the
            // others only its turn on the channel.
            assert_eq!(t, LAT + (n - 1) * SERVICE, "{n} fill buffers");
            assert!(t < n * LAT);
        }
    }

    #[test]
    fn zero_fill_buffers_is_the_serial_model() {
        let n = 10;
        let mut ms = memsys(0, 192);
        assert_eq!(run(&mut ms, (0..n).map(scattered), 0), n * LAT);
        // One fill buffer: one miss at a time, each at its full latency.
        let mut ms = memsys(1, 192);
        assert_eq!(run(&mut ms, (0..n).map(scattered), 0), n * LAT);
        // mshrs = 0 keeps the prefetcher's old cost: a line after the previous miss costs
        // its service time only.
        let mut ms = memsys(0, 192);
        assert_eq!(run(&mut ms, (0..n).map(|i| 64 + i), 0), LAT + (n - 1) * SERVICE);
    }

    #[test]
    fn a_full_set_of_fill_buffers_waits_for_the_first_to_free() {
        // Little's law: a long stream of independent misses with N in flight completes N
        // lines per latency (the channel is fast enough: N × service < latency).
        let n = 4;
        let k = 400;
        let mut ms = memsys(n as u32, 100_000);
        let t = run(&mut ms, (0..k).map(scattered), 0);
        let expect = k * LAT / n;
        assert!(t.abs_diff(expect) <= LAT + n * SERVICE, "{t} cycles, Little's law {expect}");
    }

    #[test]
    fn bandwidth_still_bounds_the_throughput() {
        // 64 in flight against a 10-cycle channel: the channel, not the fill buffers, is the
        // limit, k lines take k × service (plus one latency).
        let k = 2000;
        let mut ms = memsys(64, 100_000);
        let t = run(&mut ms, (0..k).map(scattered), 0);
        assert!(t >= k * SERVICE, "{t} cycles for {k} lines at {SERVICE} cycles each");
        assert!(t <= k * SERVICE + 2 * LAT, "{t}");
        // Two cores sharing the node's channel each get about half of it.
        let mut ms = memsys(64, 100_000);
        let mut clock = [0u64; 2];
        for i in 0..k {
            for (c, clk) in clock.iter_mut().enumerate() {
                *clk += ms.data_access(c, 0, scattered(2 * i + c as u64), *clk, None, &[LAT as u32]);
            }
        }
        assert!(clock.iter().all(|&t| t >= 2 * k * SERVICE * 9 / 10), "{clock:?}");
    }

    #[test]
    fn the_window_bounds_the_overlap() {
        // 100 cycles of work between misses: a 64-entry window cannot reach the next miss
        // while the previous one is in flight (each pays its latency, as with no fill
        // buffers); a 192-entry one can, and the work hides the latency.
        let n = 8;
        let gap = 100;
        let serial = run(&mut memsys(0, 64), (0..n).map(scattered), gap);
        assert_eq!(serial, n * (LAT + gap));
        assert_eq!(run(&mut memsys(10, 64), (0..n).map(scattered), gap), serial);
        let wide = run(&mut memsys(10, 192), (0..n).map(scattered), gap);
        assert_eq!(wide, LAT + n * gap, "all but the first latency hidden under the work");
        // Work longer than the latency: the miss before has completed, nothing overlaps.
        let gap = 2 * LAT;
        assert_eq!(run(&mut memsys(10, 100_000), (0..n).map(scattered), gap), n * (LAT + gap));
    }
}
