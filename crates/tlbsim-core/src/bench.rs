//! `tlbsim bench`: simulated accesses per second on this machine, for three streams read
//! from memory (so trace parsing is not measured):
//! (i) an L1-hit-heavy stream: random loads over 32 pages, which the default 96-entry L1
//!     DTLB holds; (ii) a walk stream: random loads over a 16 GiB region mapped with 4 KiB
//!     pages (4 M pages, far beyond the 4096-entry L2), so nearly every access walks;
//!     (iii) a null loop that only reads the same in-memory events.
//! The region is mapped by an untimed sequential pass first, so (ii) measures walks, not
//! first-touch faults.

use crate::config::Config;
use crate::rng::SplitMix64;
use crate::sim::Machine;
use crate::tlb::hierarchy::NoTlbListener;
use crate::trace::TraceEvent;
use crate::types::AccessKind;
use crate::walk::NoWalkListener;
use serde::Serialize;
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Accesses per stream.
    pub accesses: u64,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions { accesses: 20_000_000 }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    pub l1_hit_stream_per_s: f64,
    pub walk_stream_per_s: f64,
    pub null_loop_per_s: f64,
    /// l1_hit_stream_per_s / null_loop_per_s
    pub l1_hit_over_null: f64,
    pub accesses: u64,
    /// Fraction of (i)'s accesses that hit in an L1 TLB, and of (ii)'s that walked:
    /// evidence that each stream measures what it says.
    pub l1_hit_stream_hit_rate: f64,
    pub walk_stream_walk_rate: f64,
    /// (iii) A 64-core `apache` run on the `didi-cmp` preset under the `linux` policy:
    /// simulated events (memory accesses plus OS operations: system calls, page faults,
    /// context switches, interrupts taken) per second of host time.
    pub multicore_events_per_s: f64,
    pub multicore_events: u64,
    pub multicore_ops_per_thread: u64,
}

const BASE: u64 = 0x7f00_0000_0000;
const REGION: u64 = 16 << 30;
const BATCH: usize = 4096;

fn random_loads(n: u64, pages: u64, seed: u64) -> Vec<TraceEvent> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|_| TraceEvent::Access { va: BASE + rng.below(pages * 512) * 8, kind: AccessKind::Load, size: 8 })
        .collect()
}

fn machine() -> crate::Result<(Machine, crate::sim::AddressSpace)> {
    let mut tree = serde_json::json!({"machine": {"cores_per_socket": 1, "memory": {"node_mib": 20 * 1024}}});
    crate::config::apply_override(&mut tree, "workload.fetches=false")?;
    let cfg = Config::resolve(tree, &[], std::path::Path::new("."))?;
    let mut m = Machine::new(&cfg)?;
    let space = m.new_address_space(1, 0)?;
    Ok((m, space))
}

fn timed(m: &mut Machine, space: &crate::sim::AddressSpace, events: &[TraceEvent]) -> crate::Result<f64> {
    let start = Instant::now();
    for chunk in events.chunks(BATCH) {
        m.run_batch(0, space, chunk, &mut NoTlbListener, &mut NoWalkListener)?;
    }
    Ok(events.len() as f64 / start.elapsed().as_secs_f64())
}

/// Stream (i) alone (for profiling): accesses per second and L1 hit rate.
pub fn l1_hit_stream(n: u64) -> crate::Result<(f64, f64)> {
    let events = random_loads(n, 32, 1);
    let (mut m, space) = machine()?;
    m.run_batch(0, &space, &events[..events.len().min(10_000)], &mut NoTlbListener, &mut NoWalkListener)?;
    let before = m.cores[0].stats;
    let per_s = timed(&mut m, &space, &events)?;
    let s = m.cores[0].stats;
    Ok((per_s, (s.l1_tlb_hits - before.l1_tlb_hits) as f64 / (s.accesses - before.accesses) as f64))
}

pub fn run_bench(opts: &BenchOptions) -> crate::Result<BenchReport> {
    let n = opts.accesses.max(1000);
    // (iii) null loop.
    let events = random_loads(n, 32, 1);
    let start = Instant::now();
    let mut sum = 0u64;
    for chunk in events.chunks(BATCH) {
        for ev in std::hint::black_box(chunk) {
            if let TraceEvent::Access { va, .. } = ev {
                sum = sum.wrapping_add(*va);
            }
        }
    }
    std::hint::black_box(sum);
    let null_loop_per_s = n as f64 / start.elapsed().as_secs_f64();

    drop(events);
    // (i) L1-hit-heavy.
    let (l1_hit_stream_per_s, l1_hit_stream_hit_rate) = l1_hit_stream(n)?;

    let (walk_stream_per_s, walk_stream_walk_rate) = walk_stream(n)?;

    let multicore_ops_per_thread = (n / 100_000).max(20);
    let (multicore_events_per_s, multicore_events) = multicore(64, multicore_ops_per_thread)?;

    Ok(BenchReport {
        l1_hit_stream_per_s,
        walk_stream_per_s,
        null_loop_per_s,
        l1_hit_over_null: l1_hit_stream_per_s / null_loop_per_s,
        accesses: n,
        l1_hit_stream_hit_rate,
        walk_stream_walk_rate,
        multicore_events_per_s,
        multicore_events,
        multicore_ops_per_thread,
    })
}

/// Stream (iii): `apache` with one worker per core on `cores` cores of the `didi-cmp`
/// preset, `ops` requests per worker. Returns (events per second, events).
pub fn multicore(cores: u32, ops: u64) -> crate::Result<(f64, u64)> {
    let tree = serde_json::json!({
        "machine": {"preset": "didi-cmp", "cores_per_socket": cores},
        "os": {"coherence": "linux"},
        "workload": {"kind": "apache", "threads": cores, "ops": ops},
    });
    let start = Instant::now();
    let out = crate::run(tree, &[], std::path::Path::new("."))?;
    let secs = start.elapsed().as_secs_f64();
    let events = out.stats["run"]["events"].as_u64().unwrap_or(0);
    Ok((events as f64 / secs, events))
}

/// Stream (ii) alone: accesses per second and the fraction of accesses that walked.
pub fn walk_stream(n: u64) -> crate::Result<(f64, f64)> {
    let (mut m, space) = machine()?;
    let pages = REGION >> 12;
    let warm: Vec<TraceEvent> =
        (0..pages).map(|p| TraceEvent::Access { va: BASE + (p << 12), kind: AccessKind::Load, size: 8 }).collect();
    for chunk in warm.chunks(BATCH) {
        m.run_batch(0, &space, chunk, &mut NoTlbListener, &mut NoWalkListener)?;
    }
    drop(warm);
    let events = random_loads(n, pages, 2);
    let before = m.cores[0].stats;
    let walk_stream_per_s = timed(&mut m, &space, &events)?;
    let s = m.cores[0].stats;
    let walk_stream_walk_rate = (s.walks - before.walks) as f64 / (s.accesses - before.accesses) as f64;
    Ok((walk_stream_per_s, walk_stream_walk_rate))
}
