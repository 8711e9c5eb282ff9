//! The built-in OS-mode workloads (DESIGN.md "Workloads", source 1: generators for the
//! papers' benchmarks), selected by `workload.kind`; parameters are flat keys of
//! `[workload]` (`threads`, `ops`, `case`, `test`, ...; `config::WorkloadConfig` documents
//! each). Every generator's section says what it follows and what one operation
//! (`Op::CountOp`, the `ops_completed` counter) is.
//!
//! - `shootdown-patterns`: the 13 micro-benchmarks of bench/patterns.toml, one operation
//!   as bench/shootdown.c does it. The toml file is compiled in, so the native benchmark
//!   and the simulator read the same list.
//! - `fpr-munmap`: FPR §V-A1 (Fig. 6) cases 1 to 5, as bench/fpr_munmap.c runs them.
//! - `fpr-evict`: FPR §V-B (Fig. 14), the page-eviction benchmark.
//! - `ycsb`: FPR §V-B (Fig. 21): YCSB on a LevelDB-like or LMDB-like store.
//! - `apache`: ABIS §5.2 (and FPR §V-A3): mmap a file, read it, munmap, per request.
//! - `vmscale`: ABIS §5.1, the vm-scalability tests `migrate`, `cow-seq`, `cow-rand`,
//!   `mmap-read`, `msync`, `anon-read-seq`.
//! - `reclaim`: ABIS §5.3, PBZIP2 under a memory-group limit that forces reclaim.
//! - `stm-mprotect`: DiDi §II and §IV: software transactional memory with strong atomicity
//!   by page protection (the scheme DiDi cites as [1]); `test = "genome" | "vacation" |
//!   "labyrinth"`: those STAMP programs' transactions.
//! - `mitosis-bench`: Mitosis §3 and §8 (Table 1): the paper's workloads as the programs
//!   access memory (`test = "gups" | "btree" | "hashjoin" | "xsbench" | "canneal" |
//!   "memcached" | "redis" | "graph500"`).
//! - `vma-ops`: Mitosis §8.3.2 (Table 5): repeated mmap (MAP_POPULATE), mprotect or munmap
//!   of a region (`test = "mmap" | "mprotect" | "munmap"`).
//! - `mactest`, `cowsingle`, `cowmultiple`: DiDi Table III's microbenchmarks (the basic
//!   cost of a shootdown; copy-on-write after fork, one thread or many).
//! - `wordcount`: DiDi Table III and §V: Phoenix MapReduce's map workers mapping input and
//!   buffers, processing and unmapping them.
//! - `vm-mix`: the tag paper §5: dom0 and two guests under the hypervisor, a TPC-C-like
//!   OLTP guest beside another one or a vortex-like one (`test = "tpcc-tpcc" |
//!   "tpcc-vortex"`, `pinning = "none" | "0012"`), as instruction streams.
//! - `parsec-like`: ABIS §5.4: PARSEC programs as they use memory, through a model of
//!   glibc's malloc (`test = "dedup" | "canneal"`; `crate::workload::parsec`).
//!
//! Sizes default small (`ops`, `region_bytes`, ...), so that a default run takes seconds.
//! Anything a paper does not say and a generator had to choose is marked **[inferred]**.

mod apache;
mod didi;
mod fpr;
mod mitosis;
mod reclaim;
mod shootdown_patterns;
mod stm;
mod vm_mix;
mod vma_ops;
mod vmscale;
mod ycsb;

pub use shootdown_patterns::{shootdown_patterns_list, PatternOp, ShootdownPattern, Sibling, PATTERNS_TOML};

use super::builder::check_range;
use super::program::Workload;
use crate::config::Config;
use crate::error::{Error, Result};

/// The generator kinds, as `workload.kind` names them.
pub const KINDS: &[&str] = &[
    "shootdown-patterns",
    "fpr-munmap",
    "fpr-evict",
    "ycsb",
    "apache",
    "vmscale",
    "reclaim",
    "stm-mprotect",
    "mitosis-bench",
    "vma-ops",
    "mactest",
    "cowsingle",
    "cowmultiple",
    "wordcount",
    "vm-mix",
    "parsec-like",
];

/// A spinning daemon's compute step: short (one engine quantum, `sim.quantum_cycles`'s
/// default) so that it is always running user code when an IPI arrives.
const SPIN_CYCLES: u64 = 1_000;
/// A sleeping daemon's block: 2^40 cycles (six minutes at 3 GHz), asleep for any run.
const SLEEP_CYCLES: u64 = 1 << 40;

/// Build the workload `cfg.workload.kind` names (one of [`KINDS`]).
pub fn build(cfg: &Config) -> Result<Workload> {
    let kind = cfg.workload.kind.as_str();
    check_range("workload.threads", cfg.workload.threads as u64, 0, 4096)?;
    check_range("workload.ops", cfg.workload.ops, 0, 1 << 40)?;
    let w = match kind {
        "shootdown-patterns" => shootdown_patterns::shootdown_patterns(cfg)?,
        "fpr-munmap" => fpr::fpr_munmap(cfg)?,
        "fpr-evict" => fpr::fpr_evict(cfg)?,
        "ycsb" => ycsb::ycsb(cfg)?,
        "apache" => apache::apache(cfg)?,
        "vmscale" => vmscale::vmscale(cfg)?,
        "reclaim" => reclaim::reclaim(cfg)?,
        "stm-mprotect" => stm::stm_mprotect(cfg)?,
        "mitosis-bench" => mitosis::mitosis_bench(cfg)?,
        "vma-ops" => vma_ops::vma_ops(cfg)?,
        "mactest" => didi::mactest(cfg)?,
        "cowsingle" => didi::cow_micro(cfg, false)?,
        "cowmultiple" => didi::cow_micro(cfg, true)?,
        "wordcount" => didi::wordcount(cfg)?,
        "vm-mix" => vm_mix::vm_mix(cfg)?,
        "parsec-like" => super::parsec::parsec_like(cfg)?,
        k => return Err(Error::config("workload.kind", format!("{k:?} is not a generator: use one of {}", KINDS.join(", ")))),
    };
    w.check(cfg.cores()).map_err(|m| Error::config("workload.kind", format!("{kind:?} built a workload that fails its check: {m}")))?;
    Ok(w)
}
