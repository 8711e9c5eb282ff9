//! The built-in OS-mode workloads (docs/ARCHITECTURE.md "Workloads", source 1: generators for the
//! papers' benchmarks), selected by `workload.kind`. Each kind declares its own parameters
//! (`params!`, next to its generator): keys flat in `[workload]` (`threads`, `ops`, `test`,
//! ...), each with its meaning and default for that kind; a key another kind takes is
//! refused (`crate::workload::kind`). Every generator's section says what it follows and
//! what one operation (`Op::CountOp`, the `ops_completed` counter) is.
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
//! - `will-it-scale`: will-it-scale's tlb_flush1/2/3 tests (write, madvise(DONTNEED) and
//!   read one page per iteration), as threads or processes.
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
mod will_it_scale;
mod ycsb;

pub use shootdown_patterns::{shootdown_patterns_list, PatternOp, ShootdownPattern, Sibling, PATTERNS_TOML};

use super::builder::check_range;
use super::program::Workload;
use crate::config::Config;
use crate::error::{Error, Result};

/// A built-in generator: what it builds from the config and its own parameters (its
/// table of `[workload]` keys, declared next to it with `params!`).
pub trait Generator: crate::registry::Plugin {
    fn build(cfg: &Config, p: &Self::Params) -> Result<Workload>;
}

/// The registry, one line per kind: its name, a unit type with its parameter table, the
/// family's function that builds it, and a one-line summary.
macro_rules! generators {
    ($($name:literal => $ty:ident($params:ty) = $build:path, $summary:literal;)*) => {
        $(
            pub struct $ty;
            impl crate::registry::Plugin for $ty {
                type Params = $params;
            }
            impl Generator for $ty {
                fn build(cfg: &Config, p: &$params) -> Result<Workload> {
                    $build(cfg, p)
                }
            }
        )*
        crate::registry! {
            what: "a workload generator", select: "workload.kind", table: "workload", bound: Generator;
            $($name => $ty, $summary;)*
        }
    };
}

generators! {
    "shootdown-patterns" => ShootdownPatterns(shootdown_patterns::ShootdownPatternsParams) = shootdown_patterns::shootdown_patterns, "the 13 shootdown micro-benchmarks of bench/patterns.toml, one operation as bench/shootdown.c does it";
    "fpr-munmap" => FprMunmap(fpr::FprMunmapParams) = fpr::fpr_munmap, "FPR §V-A1 (Fig. 6): mmap, read and munmap a file page, cases 1 to 5 as bench/fpr_munmap.c runs them";
    "fpr-evict" => FprEvict(fpr::FprEvictParams) = fpr::fpr_evict, "FPR §V-B (Fig. 14): the page-eviction benchmark";
    "ycsb" => Ycsb(ycsb::YcsbParams) = ycsb::ycsb, "FPR §V-B (Fig. 21): YCSB on a LevelDB-like or LMDB-like store";
    "apache" => Apache(apache::ApacheParams) = apache::apache, "ABIS §5.2, FPR §V-A3: a web server that mmaps, reads and munmaps a file per request";
    "vmscale" => Vmscale(vmscale::VmscaleParams) = vmscale::vmscale, "ABIS §5.1: vm-scalability's migrate, cow, mmap-read, msync and anon-read tests";
    "reclaim" => Reclaim(reclaim::ReclaimParams) = reclaim::reclaim, "ABIS §5.3: PBZIP2 under a memory-group limit that forces reclaim";
    "stm-mprotect" => StmMprotect(stm::StmMprotectParams) = stm::stm_mprotect, "DiDi §II, §IV: software transactional memory protected by mprotect (STAMP's genome, vacation, labyrinth)";
    "mitosis-bench" => MitosisBench(mitosis::MitosisBenchParams) = mitosis::mitosis_bench, "Mitosis §3, §8 (Table 1): GUPS, B-tree, hash join, XSBench, canneal, memcached, redis, graph500 as they access memory";
    "vma-ops" => VmaOps(vma_ops::VmaOpsParams) = vma_ops::vma_ops, "Mitosis §8.3.2 (Table 5): repeated mmap, mprotect or munmap of a region";
    "will-it-scale" => WillItScale(will_it_scale::WillItScaleParams) = will_it_scale::will_it_scale, "will-it-scale's tlb_flush1/2/3 (the INVLPGB series' benchmark): write a page, madvise(DONTNEED) it, read it, as threads or processes";
    "mactest" => Mactest(didi::MactestParams) = didi::mactest, "DiDi Table III: the basic cost of a shootdown";
    "cowsingle" => CowSingle(didi::CowSingleParams) = didi::cowsingle, "DiDi Table III: copy-on-write after fork, one thread";
    "cowmultiple" => CowMultiple(didi::CowMultipleParams) = didi::cowmultiple, "DiDi Table III: copy-on-write after fork, many threads";
    "wordcount" => Wordcount(didi::WordcountParams) = didi::wordcount, "DiDi Table III, §V: Phoenix MapReduce's word count mapping and unmapping its buffers";
    "vm-mix" => VmMix(vm_mix::VmMixParams) = vm_mix::vm_mix, "the tag paper §5: dom0 and two guests (TPC-C-like OLTP beside another or a vortex-like guest)";
    "parsec-like" => ParsecLike(super::parsec::ParsecLikeParams) = super::parsec::parsec_like, "ABIS §5.4: PARSEC's dedup and canneal through a model of glibc's malloc";
}

/// The generator kinds, as `workload.kind` names them.
pub const KINDS: &[&str] = NAMES;

/// A spinning daemon's compute step: short (one engine quantum, `sim.quantum_cycles`'s
/// default) so that it is always running user code when an IPI arrives.
const SPIN_CYCLES: u64 = 1_000;
/// A sleeping daemon's block: 2^40 cycles (six minutes at 3 GHz), asleep for any run.
const SLEEP_CYCLES: u64 = 1 << 40;

/// Build the workload `cfg.workload.kind` names (one of [`KINDS`]).
pub fn build(cfg: &Config) -> Result<Workload> {
    let kind = cfg.workload.kind.as_str();
    struct Build<'a>(&'a Config);
    impl Visit for Build<'_> {
        type Output = Result<Workload>;
        fn visit<T: Generator>(self, name: &'static str) -> Result<Workload> {
            let p: T::Params = super::kind::parse_params(name, &self.0.workload.params)?;
            // The limits every kind's `threads` and `ops` share.
            let table = serde_json::to_value(&p).expect("params serialize");
            if let Some(threads) = table.get("threads").and_then(|v| v.as_u64()) {
                check_range("workload.threads", threads, 0, 4096)?;
            }
            if let Some(ops) = table.get("ops").and_then(|v| v.as_u64()) {
                check_range("workload.ops", ops, 0, 1 << 40)?;
            }
            T::build(self.0, &p)
        }
    }
    let w = visit(kind, Build(cfg))??;
    w.check(cfg.cores()).map_err(|m| Error::config("workload.kind", format!("{kind:?} built a workload that fails its check: {m}")))?;
    Ok(w)
}
