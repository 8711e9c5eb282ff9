//! The trace-driven engine: threads (one per core) run their event streams against the
//! machine's TLBs, walkers and page tables; the core furthest behind in simulated time
//! runs next, for one batch, so cores interleave deterministically in time order.
//!
//! Without the OS model (`crate::os`, for OS-mode workloads), all threads share one
//! address space, and the first touch of a page maps it: a frame from the toucher's node
//! (or interleaved), page-table pages placed by the page-table backend `os.pt_placement`
//! names. Each access goes through the one access path of `crate::access`.

use crate::access::{AccessEnv, FaultOutcome};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::machine::{AddressSpace, Core, Machine};
use crate::tlb::hierarchy::{NoTlbListener, TlbListener};
use crate::tlb::TlbEntry;
use crate::trace::{TraceEvent, TraceSource};
use crate::types::{AccessKind, Vpn};
use crate::walk::{NoWalkListener, WalkListener, WalkOutcome};

/// How many events ahead the engine prefetches on miss-heavy streams.
const PREFETCH_DISTANCE: usize = 12;

/// How many events ahead the engine asks the host to bring the batch's events into its
/// L1 cache, on every stream: an event is a cache line (64 bytes), and where the events
/// come from DRAM (`tlbsim bench`'s 20 M pre-generated events; a long batch) the engine's
/// loop is too long for the host's out-of-order window to overlap their misses by itself,
/// so that how far it did depended on the loop's code layout: a line-cache change that no
/// L1 hit ever reaches cost the L1-hit stream 40%. A host-speed setting, not a model
/// parameter (no simulated state changes), chosen on this Intel Xeon guest in session 40
/// (`examples/bench 20000000 ratio`, L1-hit stream, two runs each): 8 events ahead 68-69
/// M/s, 16 103-105, 32 109-113, 64 116-117; 32 is about 300 ns ahead, beyond a DRAM
/// latency, and 2 KiB, within a host page for most events.
const EVENT_PREFETCH_DISTANCE: usize = 32;

/// Trace mode's methods on the machine: one access, one batch of events.
impl Machine {
    /// Simulate one memory access by `core` in `space` (trace mode). The hot path.
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
        crate::access::access(&mut TraceEnv::<T, W, true> { m: self, space, tl, wl }, core, va, kind)
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
        // A loop compiled per memory model (`AccessEnv::MAY_HAVE_CACHES`); which one runs is
        // decided per batch, not per access.
        if self.memsys.is_some() {
            self.run_batch_in::<T, W, true>(core, space, events, tl, wl)
        } else {
            self.run_batch_in::<T, W, false>(core, space, events, tl, wl)
        }
    }

    fn run_batch_in<T: TlbListener, W: WalkListener, const CACHES: bool>(
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
        let lookahead =
            if misses - self.cores[core].batch_start_misses > (accesses - self.cores[core].batch_start_accesses) / 8 { PREFETCH_DISTANCE } else { 0 };
        self.cores[core].batch_start_accesses = accesses;
        self.cores[core].batch_start_misses = misses;
        let mut env = TraceEnv::<T, W, CACHES> { m: self, space, tl, wl };
        for (i, ev) in events.iter().enumerate() {
            if let Some(next) = events.get(i + EVENT_PREFETCH_DISTANCE) {
                crate::prefetch::read(next);
            }
            if lookahead != 0 {
                if let Some(TraceEvent::Access { va, kind, .. }) = events.get(i + lookahead) {
                    if fetches || !kind.is_fetch() {
                        env.m.prefetch(core, space, *va);
                    }
                }
            }
            match *ev {
                TraceEvent::Access { va, kind, .. } => {
                    if kind.is_fetch() {
                        let c = &mut env.m.cores[core];
                        c.stats.instructions += 1;
                        c.tlbs.retire(1);
                        c.clock += cpi;
                        if !fetches {
                            continue;
                        }
                    }
                    crate::access::access(&mut env, core, va, kind)?;
                }
                TraceEvent::Instructions { n } => {
                    let c = &mut env.m.cores[core];
                    c.stats.instructions += n;
                    c.tlbs.retire(n);
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

/// Run a whole trace-mode simulation (`trace`, `synthetic`) and return stats.json
/// (`crate::run` chooses between this engine and the OS model's).
pub fn run(cfg: &Config) -> Result<serde_json::Value> {
    let mut machine = Machine::new(cfg)?;
    // Created by core 0, the first thread's.
    let space = machine.new_address_space(1, 0)?;
    let mut accesses_per_thread = 0;
    let mut sources: Vec<Box<dyn TraceSource>> = match cfg.workload.kind.as_str() {
        "trace" => {
            let p: crate::workload::kind::TraceParams = crate::workload::kind::params(cfg)?;
            p.paths.iter().map(|path| crate::trace::open(path, p.format).map_err(Error::from)).collect::<Result<_>>()?
        }
        _ => {
            let p: crate::workload::synthetic::SyntheticParams = crate::workload::kind::params(cfg)?;
            accesses_per_thread = p.accesses;
            (0..p.thread_count(cfg))
                .map(|t| Box::new(crate::workload::synthetic::Synthetic::new(&p, cfg.workload.fetches, cfg.seed, t)) as Box<dyn TraceSource>)
                .collect()
        }
    };
    let batch = cfg.sim.batch as usize;
    let mut buf = Vec::with_capacity(batch);
    let mut live: Vec<bool> = vec![true; sources.len()];
    let mut tl = NoTlbListener;
    let mut wl = NoWalkListener;
    let control = crate::control::current();
    if let Some(c) = &control {
        let total = accesses_per_thread.saturating_mul(sources.len() as u64);
        c.start(crate::control::ProgressUnit::Accesses, total);
    }
    let (mut done, mut partial) = (0u64, false);
    // The thread whose core is furthest behind runs next (ties: lowest core).
    while let Some(t) = (0..sources.len()).filter(|&t| live[t]).min_by_key(|&t| (machine.cores[t].clock, t)) {
        if let Some(c) = &control {
            if c.stop_requested() {
                partial = true;
                break;
            }
            c.set_done(done);
        }
        let n = sources[t].next_batch(&mut buf, batch)?;
        if n == 0 {
            live[t] = false;
            continue;
        }
        done += n as u64;
        machine.run_batch(t, &space, &buf, &mut tl, &mut wl)?;
    }
    let mut stats = machine.stats_json(cfg, sources.len());
    if cfg.sim.ptdump {
        let mut dump = crate::placement::PtDump::new(machine.mem.nodes(), space.levels);
        dump.add(&machine.pt, machine.backend.as_ref(), space.id, space.root);
        stats["page_table_dump"] = dump.json();
    }
    if partial {
        // Stopped through its control (Ctrl-C): the stats so far.
        stats["run"]["partial"] = serde_json::json!(true);
    }
    Ok(stats)
}

/// Trace mode's side of the access path: the caller's listeners, first-touch faults.
struct TraceEnv<'a, T, W, const CACHES: bool> {
    m: &'a mut Machine,
    space: &'a AddressSpace,
    tl: &'a mut T,
    wl: &'a mut W,
}

impl<T: TlbListener, W: WalkListener, const CACHES: bool> AccessEnv for TraceEnv<'_, T, W, CACHES> {
    const MAY_HAVE_CACHES: bool = CACHES;
    type Listener<'a>
        = &'a mut T
    where
        Self: 'a;
    #[inline(always)]
    fn machine(&mut self) -> &mut Machine {
        self.m
    }
    #[inline(always)]
    fn core_and_listener(&mut self, core: usize) -> (&mut Core, &mut T) {
        (&mut self.m.cores[core], self.tl)
    }
    #[inline(always)]
    fn walk(&mut self, core: usize, va: u64, write: bool) -> (WalkOutcome, u64) {
        let socket = self.m.cores[core].socket as usize;
        let space = AddressSpace { id: self.space.id, root: self.m.socket_roots[socket], levels: self.space.levels };
        self.m.walk(core, &space, va, write, self.wl)
    }
    #[inline(always)]
    fn fill(&mut self, core: usize, e: TlbEntry, kind: AccessKind) {
        self.m.cores[core].tlbs.fill(e, kind, self.tl)
    }
    fn drop_entry(&mut self, core: usize, vpn: Vpn) {
        let tlbs = &mut self.m.cores[core].tlbs;
        let tag = tlbs.tag();
        tlbs.invalidate_page(vpn, Some(tag), self.tl);
    }
    #[inline(always)]
    fn stale_hit(&mut self, _core: usize, _vpn: Vpn, _e: &TlbEntry) {}
    #[inline(always)]
    fn after_walk(&mut self, _core: usize, _va: u64) {}
    #[cold]
    fn fault(&mut self, core: usize, va: u64, _kind: AccessKind, present: bool, spent: &mut u64) -> Result<FaultOutcome> {
        if present {
            return Err(Error::Sim(format!("write to read-only page {va:#x} in trace mode")));
        }
        self.m.cores[core].stats.page_faults += 1;
        *spent += self.m.fault_cycles;
        self.m.first_touch_fault(core, self.space, va)?;
        Ok(FaultOutcome::Retry)
    }
}
