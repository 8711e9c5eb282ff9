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

use super::program::{AccessMode, Backing, FileSpec, GroupSpec, MapSpec, Op, Pattern, ProcessSpec, ThreadSpec, Workload};
use crate::config::Config;
use crate::error::{Error, Result};
use serde::Deserialize;

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

const PAGE: u64 = 4096;
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
        "shootdown-patterns" => shootdown_patterns(cfg)?,
        "fpr-munmap" => fpr_munmap(cfg)?,
        "fpr-evict" => fpr_evict(cfg)?,
        "ycsb" => ycsb(cfg)?,
        "apache" => apache(cfg)?,
        "vmscale" => vmscale(cfg)?,
        "reclaim" => reclaim(cfg)?,
        "stm-mprotect" => stm_mprotect(cfg)?,
        "mitosis-bench" => mitosis_bench(cfg)?,
        "vma-ops" => vma_ops(cfg)?,
        "mactest" => mactest(cfg)?,
        "cowsingle" => cow_micro(cfg, false)?,
        "cowmultiple" => cow_micro(cfg, true)?,
        "wordcount" => wordcount(cfg)?,
        "vm-mix" => vm_mix(cfg)?,
        "parsec-like" => super::parsec::parsec_like(cfg)?,
        k => return Err(Error::config("workload.kind", format!("{k:?} is not a generator: use one of {}", KINDS.join(", ")))),
    };
    w.check(cfg.cores()).map_err(|m| Error::config("workload.kind", format!("{kind:?} built a workload that fails its check: {m}")))?;
    Ok(w)
}

// ---- shootdown-patterns ----

/// What one operation of a shootdown pattern does (patterns.toml `op`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PatternOp {
    Munmap,
    MprotectToggle,
    Dontneed,
    Cow,
    FileRead,
}

/// What the second thread does (patterns.toml `sibling`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Sibling {
    Spin,
    Sleep,
    None,
    Process,
}

/// One `[[pattern]]` of bench/patterns.toml.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ShootdownPattern {
    pub name: String,
    /// Prose, for people.
    pub operation: String,
    pub op: PatternOp,
    /// Pages of the operation's region.
    pub pages: u64,
    pub sibling: Sibling,
    /// TLB-shootdown IPIs per operation Linux shows (bench/shootdown measures it).
    pub expected_ipis_per_op: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatternFile {
    pattern: Vec<ShootdownPattern>,
}

/// bench/patterns.toml, compiled in: the one list of patterns for bench/shootdown.c and
/// this generator.
pub const PATTERNS_TOML: &str = include_str!("../../../../bench/patterns.toml");

/// The patterns of bench/patterns.toml, in file order.
pub fn shootdown_patterns_list() -> Vec<ShootdownPattern> {
    toml::from_str::<PatternFile>(PATTERNS_TOML).expect("bench/patterns.toml parses (tests/workload_build.rs checks every pattern)").pattern
}

/// bench/shootdown.c: the measuring thread (pinned to core 0, class "measure") performs
/// `ops` operations (default 1,000), each followed by `CountOp`, and exits. The sibling
/// (core 1): "spin" = a daemon computing forever, "sleep" = a daemon blocked forever,
/// "none" = absent, "process" = a second single-threaded process (class "sibling", not a
/// daemon) running the same operations. One operation, by `op`:
/// - munmap: mmap `pages` pages anonymous private RW, write one byte of each, munmap;
/// - mprotect-toggle: (set-up: mmap and write the page) mprotect RO, mprotect RW, write;
/// - dontneed: (set-up: mmap and write the page) write, madvise(MADV_DONTNEED);
/// - cow: shootdown.c's rounds of `pages` (COW_PAGES) operations: mmap a `pages`-page
///   private region, write every page, fork a child that sleeps, then operation i writes
///   one byte to page i, breaking copy-on-write on a page the child shares; after the
///   round the region is unmapped. The child is a daemon pinned to core 0 (it inherits
///   the measuring thread's affinity); where shootdown.c ends each round's child, here it
///   sleeps on (the IR cannot wake it), holding its copy of the old region;
/// - file-read: (set-up: a `pages`-page file) mmap it shared read-only, read one byte of
///   each page, munmap.
///
/// Set-ups and tear-downs (munmap of the one page) are outside the counted operations, as
/// in shootdown.c.
fn shootdown_patterns(cfg: &Config) -> Result<Workload> {
    let w = &cfg.workload;
    let patterns = shootdown_patterns_list();
    let Some(p) = patterns.iter().find(|p| p.name == w.pattern) else {
        let names: Vec<&str> = patterns.iter().map(|p| p.name.as_str()).collect();
        return Err(Error::config(
            "workload.pattern",
            format!("{:?} is not a shootdown pattern: use one of {} (bench/patterns.toml)", w.pattern, names.join(", ")),
        ));
    };
    if p.sibling != Sibling::None && cfg.cores() < 2 {
        return Err(Error::config("workload.pattern", format!("{:?} runs its sibling on core 1, but the machine has {} core", p.name, cfg.cores())));
    }
    check_range(&format!("bench/patterns.toml: {}: pages", p.name), p.pages, 1, 1 << 20)?;
    let ops = ops_or(cfg, 1_000);
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let bytes = p.pages * PAGE;
    let region = 0;
    let mut prog = Vec::new();
    match p.op {
        PatternOp::Munmap => {
            let one = vec![
                Op::Mmap { slot: region, spec: anon(bytes, true) },
                touch_pages(region, AccessMode::Write, p.pages),
                Op::Munmap { slot: region },
                Op::CountOp,
            ];
            prog.extend(times(ops, one));
        }
        PatternOp::MprotectToggle | PatternOp::Dontneed => {
            prog.push(Op::Mmap { slot: region, spec: anon(bytes, true) });
            prog.push(touch_pages(region, AccessMode::Write, p.pages));
            let one = if p.op == PatternOp::MprotectToggle {
                vec![
                    Op::Mprotect { slot: region, writable: false },
                    Op::Mprotect { slot: region, writable: true },
                    touch_pages(region, AccessMode::Write, p.pages),
                    Op::CountOp,
                ]
            } else {
                vec![touch_pages(region, AccessMode::Write, p.pages), Op::MadviseDontneed { slot: region }, Op::CountOp]
            };
            prog.extend(times(ops, one));
            prog.push(Op::Munmap { slot: region });
        }
        PatternOp::Cow => {
            let child = b.program(forever(vec![Op::Block { cycles: SLEEP_CYCLES }]));
            b.w.daemon_programs.push(child);
            let round = |n: u64| -> Vec<Op> {
                let mut r = vec![
                    Op::Mmap { slot: region, spec: anon(bytes, true) },
                    touch_pages(region, AccessMode::Write, p.pages),
                    Op::Fork { program: child, core: Some(0) },
                ];
                for i in 0..n {
                    r.push(Op::Access {
                        slot: region,
                        pattern: Pattern::Sequential,
                        mode: AccessMode::Write,
                        count: 1,
                        offset: i * PAGE,
                        len: PAGE,
                        stride: PAGE,
                    });
                    r.push(Op::CountOp);
                }
                r.push(Op::Munmap { slot: region });
                r
            };
            prog.extend(times(ops / p.pages, round(p.pages)));
            if !ops.is_multiple_of(p.pages) {
                prog.extend(round(ops % p.pages));
            }
        }
        PatternOp::FileRead => {
            let file = b.file("shootdown-file", p.pages);
            let one = vec![
                Op::Mmap { slot: region, spec: file_map(file, 0, bytes, true, false) },
                touch_pages(region, AccessMode::Read, p.pages),
                Op::Munmap { slot: region },
                Op::CountOp,
            ];
            prog.extend(times(ops, one));
        }
    }
    prog.push(Op::Exit);
    let measure = b.program(prog);
    let main = b.process("shootdown", root, vec![]);
    b.thread(main, "measure", "measure", Some(0), measure, false);
    match p.sibling {
        Sibling::Spin => {
            let spin = b.program(forever(vec![Op::Compute { cycles: SPIN_CYCLES }]));
            b.thread(main, "sibling", "spin", Some(1), spin, true);
        }
        Sibling::Sleep => {
            let sleep = b.program(forever(vec![Op::Block { cycles: SLEEP_CYCLES }]));
            b.thread(main, "sibling", "sleep", Some(1), sleep, true);
        }
        Sibling::None => {}
        Sibling::Process => {
            let other = b.process("sibling", root, vec![]);
            b.thread(other, "sibling", "sibling", Some(1), measure, false);
        }
    }
    Ok(b.finish())
}

// ---- fpr-munmap ----

/// FPR §V-A1 (Fig. 6), as bench/fpr_munmap.c runs it. Thread types: I/O threads loop
/// mmap → 4 KiB access → munmap on a shared mapping of a one-page file (FPR mapped a
/// null block device; its page-cache page is what every mmap maps); compute threads
/// loop a register-only computation of `compute_cycles` (default 10,000: FPR's
/// "1 CF = 10K ops", one add per cycle **[inferred]**); mixed threads alternate one I/O
/// and one compute step. Cases (N = `threads`, M = `compute_threads`):
/// 1 = N I/O; 2 = 1 I/O + N compute; 3 = N I/O + 1 compute; 4 = N I/O + M compute;
/// 5 = N mixed. Threads are pinned round-robin over the cores in the order I/O, compute,
/// mixed (as fpr_munmap.c), classes "io", "compute", "mixed".
///
/// One operation: an I/O step (I/O threads), a compute step (compute threads), or both
/// (mixed). FPR runs every thread for a fixed time; here I/O and mixed threads do `ops`
/// operations (default 1,000) and exit, and compute threads are daemons that compute until
/// the last of them has, so every class is measured over the same interval **[inferred]**.
/// `file_pages` > 1: the device file has that many pages and each I/O step maps a random
/// one (FPR §V-A2's runs on real devices read at random places; most steps then miss the
/// page cache and read from `machine.storage`).
///
/// `ideal = true` (cases 2-4) runs the compute threads alone, each for `ops` operations
/// (§V-A1's ideal compute baseline).
///
/// The I/O read is one 8-byte read at a random place of the page (fpr_munmap.c reads a
/// random cache line). The I/O mmaps pass MAP_FPR (FPR's benchmark does; it means
/// nothing unless the run enables `[os.fpr]`).
fn fpr_munmap(cfg: &Config) -> Result<Workload> {
    let w = &cfg.workload;
    check_range("workload.case", w.case as u64, 1, 5)?;
    check_range("workload.compute_threads", w.compute_threads as u64, 0, 4096)?;
    let n = threads_or_cores(cfg);
    let m = if w.compute_threads == 0 { n } else { w.compute_threads };
    let (io, compute, mixed) = match w.case {
        1 => (n, 0, 0),
        2 => (1, n, 0),
        3 => (n, 1, 0),
        4 => (n, m, 0),
        _ => (0, 0, n),
    };
    if w.ideal && compute == 0 {
        return Err(Error::config("workload.ideal", format!("case {} has no compute threads: the ideal run is the compute threads alone (cases 2-4)", w.case)));
    }
    // The ideal run: the compute threads alone, each doing `ops` operations.
    let (io, ideal) = if w.ideal { (0, true) } else { (io, false) };
    let ops = ops_or(cfg, 1_000);
    let cycles = compute_cycles_or(cfg, 10_000);
    let file_pages = w.file_pages.max(1);
    check_range("workload.file_pages", file_pages, 1, 1 << 32)?;
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let file = b.file("nullblk", file_pages);
    let slot = 0;
    // One I/O step mapping page `offset` of the device file.
    let io_step = |offset: u64| {
        vec![
            Op::Mmap { slot, spec: MapSpec { fpr: true, ..file_map(file, offset, PAGE, true, false) } },
            Op::Access { slot, pattern: Pattern::Random, mode: AccessMode::Read, count: 1, offset: 0, len: 0, stride: 8 },
            Op::Munmap { slot },
        ]
    };
    // A thread's I/O loop: the same page every time (a one-page file), or, with a larger
    // file, a random page per step (unrolled: each step maps its own offset; drawn per
    // thread from the run's seed), each step followed by `after`.
    let seed = cfg.seed;
    let io_loop = |thread: u64, after: Vec<Op>| -> Vec<Op> {
        if file_pages == 1 {
            return times(ops, [io_step(0), after.clone()].concat());
        }
        let mut rng = crate::rng::SplitMix64::derive(seed, 0xf9a0_0000 + thread);
        (0..ops).flat_map(|_| [io_step(rng.below(file_pages)), after.clone()].concat()).collect()
    };
    let compute_prog = if ideal {
        [times(ops, vec![Op::Compute { cycles }, Op::CountOp]), vec![Op::Exit]].concat()
    } else {
        forever(vec![Op::Compute { cycles }, Op::CountOp])
    };
    let process = b.process("fpr-munmap", root, vec![]);
    let cores = cfg.cores();
    let mut next = 0u32;
    let shared_compute = b.program(compute_prog);
    for (count, class) in [(io, "io"), (compute, "compute"), (mixed, "mixed")] {
        for i in 0..count {
            let program = match class {
                "compute" => shared_compute,
                "io" => b.program([io_loop(next as u64, vec![Op::CountOp]), vec![Op::Exit]].concat()),
                _ => b.program([io_loop(next as u64, vec![Op::Compute { cycles }, Op::CountOp]), vec![Op::Exit]].concat()),
            };
            b.thread(process, &format!("{class}{i}"), class, Some(next % cores), program, class == "compute" && !ideal);
            next += 1;
        }
    }
    Ok(b.finish())
}

// ---- fpr-evict ----

/// FPR §V-B (Fig. 14): the page-eviction benchmark. A file larger than the memory the
/// process may use (`region_bytes`, default 64 MiB, in a memory group of
/// `memory_limit_mib`, default half of it: reclaim evicts all the time) is mapped shared,
/// read-only and MAP_FPR (madvise random: the model has no readahead); `threads` threads
/// (default one per core, pinned, class "worker") each loop: one 8-byte read at a random
/// place of the file (a page-cache miss most of the time: reclaim, then `costs.read_page`),
/// then a compute step of `compute_cycles` (default 10,000: CF = 1, FPR's "1 CF = 10K
/// ops", one op per cycle **[inferred]**) during which it reads one line of each of its
/// `private_pages` private pages (PG; default 0 = PG-off). One operation = one read and
/// one compute step; each thread does `ops` of them (default 1,000). FPR ran each
/// configuration up to 2 hours; the model runs a fixed number of operations.
fn fpr_evict(cfg: &Config) -> Result<Workload> {
    let w = &cfg.workload;
    // The 500k BWT blocks are unrolled (each reads its own offset): 64 GiB is 137,439.
    check_range("workload.region_bytes", w.region_bytes, PAGE, 1 << 36)?;
    check_range("workload.private_pages", w.private_pages, 0, 1 << 24)?;
    let threads = threads_or_cores(cfg);
    let ops = ops_or(cfg, 1_000);
    let cycles = compute_cycles_or(cfg, 10_000);
    let limit_mib = memory_limit_mib_or_half(cfg)?;
    let mut b = Builder::default();
    b.group("root", 0);
    let group = b.group("fpr-evict", limit_mib * 256);
    let file = b.file("nullblk", w.region_bytes.div_ceil(PAGE));
    let mut regions = vec![MapSpec { fpr: true, ..file_map(file, 0, w.region_bytes, true, false) }];
    if w.private_pages > 0 {
        regions.extend((0..threads).map(|_| anon(w.private_pages * PAGE, true)));
    }
    let process = b.process("fpr-evict", group, regions);
    let cores = cfg.cores();
    for t in 0..threads {
        let mut step =
            vec![Op::Access { slot: 0, pattern: Pattern::Random, mode: AccessMode::Read, count: 1, offset: 0, len: 0, stride: 8 }, Op::Compute { cycles }];
        if w.private_pages > 0 {
            step.push(Op::Access {
                slot: 1 + t as usize,
                pattern: Pattern::Sequential,
                mode: AccessMode::Read,
                count: w.private_pages,
                offset: 0,
                len: 0,
                stride: PAGE,
            });
        }
        step.push(Op::CountOp);
        let program = b.program([times(ops, step), vec![Op::Exit]].concat());
        b.thread(process, &format!("worker{t}"), "worker", Some(t % cores), program, false);
    }
    Ok(b.finish())
}

// ---- ycsb ----

/// LevelDB's table size (`max_file_size`, 2 MiB by default): each table is a file of its own.
const LEVELDB_TABLE_PAGES: u64 = (2 << 20) / PAGE;
/// LevelDB's write buffer (4 MiB by default): the memtable, filled by inserts and updates,
/// then written out as a new table.
const LEVELDB_MEMTABLE_PAGES: u64 = (4 << 20) / PAGE;
/// Records per memtable: the write buffer over YCSB's default record (10 fields of 100
/// bytes, about 1 KiB).
const LEVELDB_RECORDS_PER_MEMTABLE: u64 = 4096;
/// An LMDB branch page holds about 100 keys (4 KiB pages, YCSB's 23-byte keys and their
/// page pointers) **[inferred]**: the levels above the leaves are the file's first 1/100.
const LMDB_FANOUT: u64 = 100;

/// FPR §V-B (Fig. 21): YCSB (`ycsb` = load, a, b, c) on a key-value store that reads its
/// data through mmap'd files, `test` = `leveldb` or `lmdb`. The store's data is
/// `region_bytes` (default 64 MiB) of files on `machine.storage`; the process runs in a
/// memory group of `memory_limit_mib` (default a quarter of the data **[inferred]**), so
/// page-cache pages are evicted by reclaim as in the paper's larger-than-memory runs. `threads` client threads
/// (default one per core, pinned, class "client") each do `ops` operations (default
/// 1,000); one operation = one YCSB request (a read, an update or an insert, drawn per
/// thread from the run's seed), followed by `compute_cycles` of the store's and client's
/// own work (default 20,000 **[inferred]**: key comparison, checksums, YCSB's bookkeeping).
/// Every file mmap passes MAP_FPR (FPR's interception library; it means nothing unless
/// the run enables `[os.fpr]`).
///
/// - `lmdb`: one file, mapped shared read-only once (LMDB's single memory map). A read
///   walks the B+tree: the root page, a branch page (the first 1/`LMDB_FANOUT` of the
///   file), a random leaf page. An update or insert walks the same path and writes the
///   leaf through `pwrite` (LMDB's default without MDB_WRITEMAP), which the model charges as
///   a second compute step: the page-cache page changes, no page-table entry does.
/// - `leveldb`: the data is `region_bytes / 2 MiB` tables, each a 2 MiB file. The table
///   cache (`table_cache` open tables, default half of them **[inferred]**: the paper
///   does not give its database's size) maps a table when it opens it and unmaps it when it
///   evicts it: the munmaps FPR skips. LevelDB's cache is one LRU for the process; here
///   each thread keeps an LRU of that size of its own mappings (the IR's region slots are
///   per thread), which keeps LevelDB's miss rate (1 - cache/tables for uniform requests)
///   but not its sharing of a table's mapping among threads. A read picks a
///   random table, opens it if it is not cached (evicting the least recently used), then
///   reads its index block (the table's last page) and a random data block. An update or
///   insert writes its record (about 1 KiB) into the memtable's arena (anonymous, 4 MiB),
///   filled in order; every
///   `LEVELDB_RECORDS_PER_MEMTABLE / threads` writes of a thread, the memtable is written
///   out and compacted **[inferred]**: the thread's memtable pages are dropped
///   (madvise(MADV_DONTNEED), the freed memtable) and its open tables are unmapped (the
///   compaction replaced them).
///
/// The table-cache LRU and the request mix are decided when the workload is built (the
/// intermediate representation has no branches), per thread, from the run's seed.
fn ycsb(cfg: &Config) -> Result<Workload> {
    let w = &cfg.workload;
    let test = if w.test.is_empty() { "leveldb" } else { w.test.as_str() };
    if test != "leveldb" && test != "lmdb" {
        return Err(Error::config("workload.test", format!("{test:?}: ycsb runs \"leveldb\" or \"lmdb\"")));
    }
    // Percent of requests that read (the rest update or insert).
    let read_percent = match w.ycsb.as_str() {
        "load" => 0,
        "a" => 50,
        "b" => 95,
        "c" => 100,
        m => return Err(Error::config("workload.ycsb", format!("{m:?}: use \"load\", \"a\", \"b\" or \"c\""))),
    };
    check_range("workload.region_bytes", w.region_bytes, 2 << 20, 1 << 40)?;
    let threads = threads_or_cores(cfg);
    let ops = ops_or(cfg, 1_000);
    let cycles = compute_cycles_or(cfg, 20_000);
    let limit_mib = if w.memory_limit_mib == 0 { (w.region_bytes / 4).div_ceil(1 << 20).max(1) } else { w.memory_limit_mib };
    check_range("workload.memory_limit_mib", limit_mib, 1, 1 << 30)?;
    let mut b = Builder::default();
    b.group("root", 0);
    let group = b.group("ycsb", limit_mib * 256);
    let cores = cfg.cores();
    let pages = w.region_bytes.div_ceil(PAGE);
    let line = |slot: usize, offset: u64, len: u64, mode: AccessMode| Op::Access { slot, pattern: Pattern::Random, mode, count: 1, offset, len, stride: 8 };
    if test == "lmdb" {
        let file = b.file("data.mdb", pages);
        let branch_pages = (pages / LMDB_FANOUT).max(1);
        let process = b.process("lmdb", group, vec![MapSpec { fpr: true, ..file_map(file, 0, pages * PAGE, true, false) }]);
        for t in 0..threads {
            let mut rng = crate::rng::SplitMix64::derive(cfg.seed, 0x9c5b_0000 + t as u64);
            let mut prog = Vec::new();
            for _ in 0..ops {
                prog.push(line(0, 0, PAGE, AccessMode::Read));
                prog.push(line(0, PAGE, branch_pages * PAGE, AccessMode::Read));
                prog.push(line(0, 0, pages * PAGE, AccessMode::Read));
                prog.push(Op::Compute { cycles });
                if rng.below(100) >= read_percent {
                    prog.push(Op::Compute { cycles });
                }
                prog.push(Op::CountOp);
            }
            prog.push(Op::Exit);
            let program = b.program(prog);
            b.thread(process, &format!("client{t}"), "client", Some(t % cores), program, false);
        }
        return Ok(b.finish());
    }
    let tables = (pages / LEVELDB_TABLE_PAGES).max(1);
    let cache = if w.table_cache == 0 { (tables / 2).max(1) } else { w.table_cache };
    check_range("workload.table_cache", cache, 1, 1 << 20)?;
    let per_thread = cache.min(tables) as usize;
    let file = b.file("tables.ldb", tables * LEVELDB_TABLE_PAGES);
    // Slot 0: the memtable (each thread's own, as a stand-in for its share of the one
    // memtable); slots 1..=per_thread: the thread's open tables.
    let memtable = anon(LEVELDB_MEMTABLE_PAGES * PAGE, true);
    let process = b.process("leveldb", group, vec![]);
    let flush_every = (LEVELDB_RECORDS_PER_MEMTABLE / threads as u64).max(1);
    for t in 0..threads {
        let mut rng = crate::rng::SplitMix64::derive(cfg.seed, 0x1e7d_0000 + t as u64);
        let mut prog = vec![Op::Mmap { slot: 0, spec: memtable }];
        // The thread's table cache: (table, last use) per slot.
        let mut open: Vec<Option<(u64, u64)>> = vec![None; per_thread];
        let mut writes = 0u64;
        for op in 0..ops {
            if rng.below(100) < read_percent {
                let table = rng.below(tables);
                let slot = match open.iter().position(|s| s.is_some_and(|(tb, _)| tb == table)) {
                    Some(i) => i,
                    None => {
                        // Evict the least recently used (or take a free slot) and open.
                        let i = (0..per_thread).min_by_key(|&i| open[i].map_or(0, |(_, used)| used + 1)).unwrap_or(0);
                        if open[i].is_some() {
                            prog.push(Op::Munmap { slot: 1 + i });
                        }
                        let spec = MapSpec { fpr: true, ..file_map(file, table * LEVELDB_TABLE_PAGES, LEVELDB_TABLE_PAGES * PAGE, true, false) };
                        prog.push(Op::Mmap { slot: 1 + i, spec });
                        i
                    }
                };
                open[slot] = Some((table, op));
                prog.push(line(1 + slot, (LEVELDB_TABLE_PAGES - 1) * PAGE, PAGE, AccessMode::Read));
                prog.push(line(1 + slot, 0, (LEVELDB_TABLE_PAGES - 1) * PAGE, AccessMode::Read));
            } else {
                // The record goes into the memtable's arena, filled in order (a skiplist
                // node of about 1 KiB each).
                let record = writes % flush_every;
                prog.push(line(0, record * 1024, 1024, AccessMode::Write));
                writes += 1;
                if writes.is_multiple_of(flush_every) {
                    prog.push(Op::MadviseDontneed { slot: 0 });
                    for (i, s) in open.iter_mut().enumerate() {
                        if s.take().is_some() {
                            prog.push(Op::Munmap { slot: 1 + i });
                        }
                    }
                }
            }
            prog.push(Op::Compute { cycles });
            prog.push(Op::CountOp);
        }
        prog.push(Op::Exit);
        let program = b.program(prog);
        b.thread(process, &format!("client{t}"), "client", Some(t % cores), program, false);
    }
    Ok(b.finish())
}

// ---- apache ----

/// The file every request maps (`file_pages`, default 3: the 11 KB default page) and the
/// rest of a request's work (`compute_cycles`, default 20,000 **[inferred]**): (file,
/// bytes, cycles).
fn apache_file(cfg: &Config, b: &mut Builder) -> Result<(u32, u64, u64)> {
    let file_pages = file_pages_or(cfg, 3);
    check_range("workload.file_pages", file_pages, 1, 1 << 20)?;
    let file = b.file("index.html", file_pages);
    Ok((file, file_pages * PAGE, compute_cycles_or(cfg, 20_000)))
}

/// Sending the mapped file: a read of it, one cache line at a time.
fn send_file(slot: usize, bytes: u64) -> Op {
    Op::Access { slot, pattern: Pattern::Sequential, mode: AccessMode::Read, count: bytes / 64, offset: 0, len: 0, stride: 64 }
}

/// ABIS §5.2 (and FPR §V-A3): Apache's mpm_event runs several processes of several
/// threads, and serves each request by mapping the requested file, sending its content
/// and unmapping it. `threads` workers (default one per core) spread over `processes`
/// processes (default 2) in contiguous blocks, unpinned (the scheduler places them), class
/// "worker". One operation = one request: mmap the `file_pages`-page file (default 3: the
/// default page of 10,918 bytes **[inferred]**) shared read-only, read it sequentially one
/// cache line at a time (sending it), munmap, then `compute_cycles` of the rest of the
/// request's work (default 20,000 **[inferred]**: parsing, logging, the socket). Each
/// worker serves `ops` requests (default 1,000) and exits. The load generator (wrk) is
/// not modelled: ABIS isolates it on other cores. `test = "mpm_event"` is the event MPM
/// with its load generator ([`apache_mpm_event`]).
fn apache(cfg: &Config) -> Result<Workload> {
    let w = &cfg.workload;
    match w.test.as_str() {
        "" => {}
        "mpm_event" => return apache_mpm_event(cfg),
        t => return Err(Error::config("workload.test", format!("{t:?} is not an apache test: use \"mpm_event\", or leave it empty for the default model"))),
    }
    let threads = threads_or_cores(cfg);
    let processes = if w.processes == 0 { 2.min(threads) } else { w.processes };
    if processes > threads {
        return Err(Error::config(
            "workload.processes",
            format!("{processes} processes for {threads} worker threads (workload.threads): each process needs a worker"),
        ));
    }
    let ops = ops_or(cfg, 1_000);
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let (file, bytes, cycles) = apache_file(cfg, &mut b)?;
    let slot = 0;
    let request =
        vec![Op::Mmap { slot, spec: file_map(file, 0, bytes, true, false) }, send_file(slot, bytes), Op::Munmap { slot }, Op::Compute { cycles }, Op::CountOp];
    let worker = b.program([times(ops, request), vec![Op::Exit]].concat());
    for p in 0..processes {
        let process = b.process(&format!("httpd{p}"), root, vec![]);
        let (first, end) = (p * threads / processes, (p + 1) * threads / processes);
        for t in first..end {
            b.thread(process, &format!("worker{t}"), "worker", None, worker, false);
        }
    }
    Ok(b.finish())
}

/// wrk's threads in ABIS §5.2 ("400 connections and 6 threads").
const WRK_THREADS: u32 = 6;
/// wrk's connections in ABIS §5.2.
const WRK_CONNECTIONS: u32 = 400;
/// wrk's work per response, in cycles **[inferred]**: its event loop's read() of the
/// response (the 11 KB copied out of the socket), http_parser over the headers, the latency
/// record, and the write() of the next request, whose loopback delivery runs on the sender's
/// core. Half a worker's `compute_cycles`: wrk is a lean C event loop, Apache runs its
/// request hooks and filters too.
const WRK_CYCLES: u64 = 10_000;
/// The listener's work per connection handed to a worker, in cycles **[inferred]**: its
/// share of an epoll_wait returning, get_worker's idle-worker accounting, and
/// ap_queue_push with its condition-variable signal (a futex wake, one system call).
const LISTENER_CYCLES: u64 = 2_000;

/// ABIS §5.2 as Apache 2.4 runs it with its default MPM, mpm_event (`test = "mpm_event"`),
/// served to wrk. Apache 2.4's server/mpm/event/event.c and fdqueue.c, and its defaults
/// (event/mpm_default.h):
/// - `processes` child processes (0 = 3: DEFAULT_START_DAEMON, StartServers), each with
///   `threads` worker threads (0 = 25: DEFAULT_THREADS_PER_CHILD, ThreadsPerChild), class
///   "worker", and one listener thread, class "listener"; daemons (they serve until the
///   run ends). They run on the server's cores, the first `cores - client_cores`, placed
///   round-robin (unpinned: the engine does not move a thread once placed, so restricting
///   the placement to the server's cores is all an affinity mask would do).
/// - The listener sleeps in epoll_wait until a connection of its process is readable (a
///   request arrived), waits until a worker is idle (get_worker: the listener blocks in
///   ap_queue_info_wait_for_idler for a client connection), computes `LISTENER_CYCLES`
///   and pushes the connection onto the process's worker queue (push2worker, ap_queue_push
///   signalling the queue's condition variable: one sleeping worker wakes).
/// - A worker marks itself idle (ap_queue_info_set_idle), pops a connection from the queue
///   (ap_queue_pop, asleep while it is empty), and serves the request: `compute_cycles`
///   (0 = 20,000 **[inferred]**, as the default model: reading and parsing the request, the
///   hooks, opening the file), then the default handler's file bucket is mmapped
///   (EnableMMAP defaults on, sendfile off; apr-util's file bucket maps a file of at least
///   APR_MMAP_THRESHOLD bytes, 1 on Linux, up to APR_MMAP_LIMIT, 4 MiB): the `file_pages`
///   file (0 = 3, the 11 KB default page) is mapped shared read-only, read a line at a time
///   (writev into the socket), the response reaches the client, and the bucket's
///   destruction unmaps the file (apr_mmap_delete). The connection, kept alive, goes back
///   to the listener's pollset; the worker is idle again. So whichever worker is idle
///   serves a connection's next request: one connection's requests are served by
///   different threads on different cores.
/// - wrk: one process of 6 threads (`WRK_THREADS`, class "client", not daemons), each
///   pinned to one of the `client_cores` cores (0 = 6, the machine's last ones: the paper
///   isolates the generator on its own cores; the number is not given **[inferred]**: one
///   core per wrk thread), with 400 keep-alive connections (`WRK_CONNECTIONS`) split evenly
///   among them. Closed loop: each connection sends its first request, then its next one
///   when its response has arrived (`WRK_CYCLES` of wrk's work per response). Each wrk
///   thread makes `ops` requests (0 = 1,000) and exits when all its responses are in; one
///   operation of a client = one response received, of a worker = one request served.
///
/// Simplified: a connection is accepted by one process for its life, the connections of
/// wrk thread t by process t mod `processes` **[inferred]**: the listeners share the
/// listening socket, so the split among processes is even on average. Only counts are
/// kept: a process's readable connections, idle workers, queued connections and the
/// responses its wrk threads have not read yet are counting semaphores (`Op::Take` /
/// `Op::Post`), so a response goes to whichever of the process's wrk threads is waiting
/// for one (each makes its own number of requests). The children are all started (no
/// spare-server maintenance), and a connection is never in write completion (the 11 KB
/// response fits the socket's send buffer).
fn apache_mpm_event(cfg: &Config) -> Result<Workload> {
    let w = &cfg.workload;
    let cores = cfg.cores();
    let client_cores = if w.client_cores == 0 { WRK_THREADS } else { w.client_cores };
    if client_cores >= cores {
        return Err(Error::config(
            "workload.client_cores",
            format!("{client_cores} cores for the load generator leaves none of the machine's {cores} to the server: the generator runs on cores of its own"),
        ));
    }
    let server_cores = cores - client_cores;
    let processes = if w.processes == 0 { 3 } else { w.processes };
    if processes > WRK_THREADS {
        return Err(Error::config(
            "workload.processes",
            format!("{processes} server processes for wrk's {WRK_THREADS} threads: each process serves the connections of one or more wrk threads"),
        ));
    }
    let per_child = if w.threads == 0 { 25 } else { w.threads };
    check_range("workload.threads", per_child as u64, 1, 1024)?;
    let requests = ops_or(cfg, 1_000);
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let (file, bytes, cycles) = apache_file(cfg, &mut b)?;
    let slot = 0;
    // Per process p, four tokens: readable connections (the listener's epoll), idle
    // workers, the worker queue, responses not yet read by p's wrk threads.
    let (readable, idle, queue, responses) = (|p: u32| 4 * p, |p: u32| 4 * p + 1, |p: u32| 4 * p + 2, |p: u32| 4 * p + 3);
    b.w.tokens = 4 * processes;
    let mut next_core = 0u32;
    for p in 0..processes {
        let process = b.process(&format!("httpd{p}"), root, vec![]);
        let listener = b.program(forever(vec![
            Op::Take { token: readable(p) },
            Op::Take { token: idle(p) },
            Op::Compute { cycles: LISTENER_CYCLES },
            Op::Post { token: queue(p) },
        ]));
        let worker = b.program(forever(vec![
            Op::Post { token: idle(p) },
            Op::Take { token: queue(p) },
            Op::Compute { cycles },
            Op::Mmap { slot, spec: file_map(file, 0, bytes, true, false) },
            send_file(slot, bytes),
            Op::Post { token: responses(p) },
            Op::Munmap { slot },
            Op::CountOp,
        ]));
        b.thread(process, &format!("listener{p}"), "listener", Some(next_core % server_cores), listener, true);
        next_core += 1;
        for t in 0..per_child {
            b.thread(process, &format!("worker{p}.{t}"), "worker", Some(next_core % server_cores), worker, true);
            next_core += 1;
        }
    }
    let wrk = b.process("wrk", root, vec![]);
    for t in 0..WRK_THREADS {
        let p = t % processes;
        // wrk splits its connections evenly among its threads, the first ones one more.
        let connections = WRK_CONNECTIONS / WRK_THREADS + u32::from(t < WRK_CONNECTIONS % WRK_THREADS);
        let first = (connections as u64).min(requests);
        let response = vec![Op::Take { token: responses(p) }, Op::Compute { cycles: WRK_CYCLES }, Op::CountOp];
        let mut prog = times(first, vec![Op::Post { token: readable(p) }]);
        prog.extend(times(requests - first, [response.clone(), vec![Op::Post { token: readable(p) }]].concat()));
        prog.extend(times(first, response));
        prog.push(Op::Exit);
        let program = b.program(prog);
        b.thread(wrk, &format!("wrk{t}"), "client", Some(server_cores + t % client_cores), program, false);
    }
    Ok(b.finish())
}

// ---- vmscale ----

/// The vm-scalability tests ABIS §5.1 runs. `region_bytes` is the whole working set,
/// split among `threads` tasks (default one per core) as vm-scalability sizes each task
/// (`mem / nr_task`); passes touch memory every `stride` bytes (default 64). One
/// operation = one pass over the task's memory (`migrate`: one migration of the whole
/// region); `ops` = passes (default 1; `migrate`: migrations, default 8). Tasks are
/// unpinned unless said otherwise (usemem does not pin).
/// - `migrate` (case-migrate): a process maps a file private read-only and reads it; it
///   is then migrated between NUMA nodes (node 1, 2, ..., 0, 1, ...) while it busy-waits
///   (ABIS: "we set the benchmark to perform a busy-wait loop"). Here the migrating
///   thread (core 0, class "migrate") is a thread of the process, and `threads - 1`
///   daemon threads (class "spin", pinned round-robin from core 1) read their share of
///   the region and then spin. Needs 2 or more sockets.
/// - `cow-seq`, `cow-rand` (cow-nt: "multiple threads read and write a private memory
///   mapped file"): one process; each thread maps its part of a file private writable,
///   reads it (mapping the page-cache pages read-only), then writes it (sequentially, or
///   at as many random places), so every first write breaks copy-on-write; then munmap.
///   Class "cow".
/// - `mmap-read` (case-lru-file-mmap-read: "multiple processes read a big sparse memory
///   mapped file"): `threads` single-threaded processes, each reading its own file
///   sequentially through a private read-only mapping, in a memory group limited to
///   `memory_limit_mib` (default half the working set), so reclaim runs. Class "read".
/// - `msync` (case-msync-mt: "multiple threads access a memory mapped file and call
///   msync"): one process, one shared writable populated file mapping of a task's size
///   (usemem --prealloc: every thread uses the same one), each thread writes all of it,
///   then msync(MS_SYNC). Class "msync".
/// - `anon-read-seq` (case-anon-r-seq): `threads` single-threaded processes each map
///   anonymous memory read-only and read it sequentially (no shootdowns: ABIS's overhead
///   test). Class "read".
fn vmscale(cfg: &Config) -> Result<Workload> {
    const TESTS: [&str; 6] = ["migrate", "cow-seq", "cow-rand", "mmap-read", "msync", "anon-read-seq"];
    let w = &cfg.workload;
    let test = w.test.as_str();
    if !TESTS.contains(&test) {
        let tests: Vec<String> = TESTS.iter().map(|t| format!("{t:?}")).collect();
        return Err(Error::config("workload.test", format!("{test:?} is not a vmscale test: use one of {}", tests.join(", "))));
    }
    // The 500k BWT blocks are unrolled (each reads its own offset): 64 GiB is 137,439.
    check_range("workload.region_bytes", w.region_bytes, PAGE, 1 << 36)?;
    check_range("workload.stride", w.stride, 1, 1 << 30)?;
    let tasks = threads_or_cores(cfg);
    // Each task's share, whole pages.
    let share_pages = (w.region_bytes / PAGE / tasks as u64).max(1);
    let share = share_pages * PAGE;
    let stride = w.stride;
    let accesses = |bytes: u64| bytes.div_ceil(stride);
    let pass = |slot: usize, mode: AccessMode, offset: u64, bytes: u64| Op::Access {
        slot,
        pattern: Pattern::Sequential,
        mode,
        count: accesses(bytes),
        offset,
        len: bytes,
        stride,
    };
    let cores = cfg.cores();
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let slot = 0;
    match test {
        "migrate" => {
            let nodes = cfg.machine.sockets;
            if nodes < 2 {
                return Err(Error::config(
                    "machine.sockets",
                    format!("vmscale test \"migrate\" moves pages between NUMA nodes: it needs 2 or more sockets, the machine has {nodes}"),
                ));
            }
            let migrations = ops_or(cfg, 8);
            let pages = share_pages * tasks as u64;
            let file = b.file("sparse", pages);
            let process = b.process("usemem", root, vec![file_map(file, 0, pages * PAGE, false, false)]);
            let round = |n: u64| -> Vec<Op> { (0..n).flat_map(|k| [Op::MigratePages { slot, node: ((k + 1) % nodes as u64) as u32 }, Op::CountOp]).collect() };
            let mut prog = vec![pass(slot, AccessMode::Read, 0, pages * PAGE)];
            prog.extend(times(migrations / nodes as u64, round(nodes as u64)));
            prog.extend(round(migrations % nodes as u64));
            prog.push(Op::Exit);
            let migrator = b.program(prog);
            b.thread(process, "migrate", "migrate", Some(0), migrator, false);
            for t in 1..tasks {
                let spin =
                    b.program([vec![pass(slot, AccessMode::Read, t as u64 * share, share)], forever(vec![Op::Compute { cycles: SPIN_CYCLES }])].concat());
                b.thread(process, &format!("spin{t}"), "spin", Some(t % cores), spin, true);
            }
        }
        "cow-seq" | "cow-rand" => {
            let passes = ops_or(cfg, 1);
            let file = b.file("sparse", share_pages * tasks as u64);
            let process = b.process("usemem", root, vec![]);
            for t in 0..tasks {
                let write = if test == "cow-seq" {
                    pass(slot, AccessMode::Write, 0, share)
                } else {
                    Op::Access { slot, pattern: Pattern::Random, mode: AccessMode::Write, count: accesses(share), offset: 0, len: 0, stride: 8 }
                };
                let one = vec![
                    Op::Mmap { slot, spec: file_map(file, t as u64 * share_pages, share, false, true) },
                    pass(slot, AccessMode::Read, 0, share),
                    write,
                    Op::Munmap { slot },
                    Op::CountOp,
                ];
                let prog = b.program([times(passes, one), vec![Op::Exit]].concat());
                b.thread(process, &format!("cow{t}"), "cow", None, prog, false);
            }
        }
        "mmap-read" => {
            let passes = ops_or(cfg, 1);
            let limit_mib = memory_limit_mib_or_half(cfg)?;
            let group = b.group("vmscale", limit_mib * 256);
            let prog = b.program([times(passes, vec![pass(slot, AccessMode::Read, 0, share), Op::CountOp]), vec![Op::Exit]].concat());
            for t in 0..tasks {
                let file = b.file(&format!("sparse{t}"), share_pages);
                let process = b.process(&format!("usemem{t}"), group, vec![file_map(file, 0, share, false, false)]);
                b.thread(process, "read", "read", None, prog, false);
            }
        }
        "msync" => {
            let passes = ops_or(cfg, 1);
            let file = b.file("sparse", share_pages);
            let mut region = file_map(file, 0, share, true, true);
            region.populate = true;
            let process = b.process("usemem", root, vec![region]);
            let prog = b.program([times(passes, vec![pass(slot, AccessMode::Write, 0, share), Op::Msync { slot }, Op::CountOp]), vec![Op::Exit]].concat());
            for t in 0..tasks {
                b.thread(process, &format!("msync{t}"), "msync", None, prog, false);
            }
        }
        _ => {
            // anon-read-seq
            let passes = ops_or(cfg, 1);
            let prog = b.program(
                [
                    vec![Op::Mmap { slot, spec: anon(share, false) }],
                    times(passes, vec![pass(slot, AccessMode::Read, 0, share), Op::CountOp]),
                    vec![Op::Munmap { slot }, Op::Exit],
                ]
                .concat(),
            );
            for t in 0..tasks {
                let process = b.process(&format!("usemem{t}"), root, vec![]);
                b.thread(process, "read", "read", None, prog, false);
            }
        }
    }
    Ok(b.finish())
}

// ---- reclaim ----

/// PBZIP2's BWT block size: "500k block size" (ABIS §5.3, `-5`), bzip2's k = 1,000 bytes.
const PBZIP2_BLOCK: u64 = 500_000;

/// ABIS §5.3: PBZIP2 compresses a file (the Linux 4.4 tar), "configured ... to read the
/// input file into RAM and split it between processors using 500k block size" (pbzip2 `-r
/// -5`), in a container whose memory limit (300 MB) "causes the invalidation of long-lived
/// idle mappings as inactive memory is reclaimed". Here: one process in a memory group of
/// `memory_limit_mib` (default half the input; ABIS: 300 MB for the ~630 MB tar
/// **[inferred]** size of linux-4.4.tar). What pbzip2 1.1 does with `-r` (its main()):
/// the file block is the input divided by the number of compressor threads
/// (`blockSize = InFileSize / numCPU`), and bzip2 compresses each file block in BWT blocks
/// of 500k.
/// - The producer (class "read", pbzip2's main thread) reads the `region_bytes` bytes of the
///   file through a private read-only mapping, one file block at a time, into a buffer of
///   its own (a `new char[blockSize]`, far above glibc's mmap threshold: an anonymous
///   mapping), and queues it. Then it unmaps the file (the page-cache pages stay, unmapped,
///   for reclaim to drop without a flush) and exits (pbzip2's main thread waits in join).
/// - `threads` compressor threads (default one per core, unpinned, class "compress") each
///   sleep until their file block is queued (pbzip2's consumers wait on the FIFO), so most
///   of them are off their cores while the producer reads. Compressor t takes blocks t,
///   t + threads, ... (one, unless the division left a remainder). Per 500k BWT block it
///   reads the input (a swapped-out page comes back by a fault), works in its bzip2 work
///   area (400k + 8 × 500k, bzip2's documented compression memory; written whole before
///   the first, as bzip2 fills its arrays before it reads them) with `500k / 64` random
///   reads and writes **[inferred]**, computes `compute_cycles` (default 150,000,000
///   **[inferred]**: bzip2's ~300 cycles per byte; the engine runs it as a few leaps, so
///   it is no longer scaled down, as it was, 30×, until session 17), and writes the compressed data (1/7 of the input
///   **[inferred]**, a kernel tar's bzip2 ratio) into the block's output buffer. Then it
///   hands the output to the writer and frees the input block (munmap).
/// - The writer (class "write", pbzip2's fileWriter) takes the outputs in order, sleeping
///   until the next one is ready, reads each out (its write() to the output file) and frees
///   it (munmap). Only the compressed bytes are mapped: the rest of bzip2's bound
///   (block × 1.01 + 600) is never touched.
/// One operation = one file block read or written, or one 500k BWT block compressed; `ops`
/// is not used. Not modelled: the output file's page cache.
fn reclaim(cfg: &Config) -> Result<Workload> {
    let w = &cfg.workload;
    // The 500k BWT blocks are unrolled (each reads its own offset): 64 GiB is 137,439.
    check_range("workload.region_bytes", w.region_bytes, PAGE, 1 << 36)?;
    check_range("workload.stride", w.stride, 1, 1 << 30)?;
    let threads = threads_or_cores(cfg) as u64;
    let cycles = compute_cycles_or(cfg, 150_000_000);
    let limit_mib = memory_limit_mib_or_half(cfg)?;
    let input = w.region_bytes;
    let block_size = (input / threads).max(1);
    let blocks = input.div_ceil(block_size);
    let work = 400_000 + 8 * PBZIP2_BLOCK;
    let block_len = |block: u64| block_size.min(input - block * block_size);
    let out_len = |block: u64| block_len(block).div_ceil(7);
    let mut b = Builder::default();
    b.group("root", 0);
    let group = b.group("pbzip2", limit_mib * 256);
    let file = b.file("linux-4.4.tar", input.div_ceil(PAGE));
    let (file_slot, work_base) = (0, 1);
    let block_base = work_base + threads as usize;
    let output_base = block_base + blocks as usize;
    let mut regions = vec![file_map(file, 0, input, false, false)];
    regions.extend((0..threads).map(|_| anon(work, true)));
    regions.extend((0..blocks).map(|block| anon(block_len(block), true)));
    regions.extend((0..blocks).map(|block| anon(out_len(block), true)));
    let process = b.process("pbzip2", group, regions);
    let seq = |slot: usize, mode: AccessMode, offset: u64, len: u64| Op::Access {
        slot,
        pattern: Pattern::Sequential,
        mode,
        count: len.div_ceil(w.stride),
        offset,
        len,
        stride: w.stride,
    };
    // Tokens: `block` = its input is queued; `blocks + block` = its output is ready.
    let (queued, compressed) = (|block: u64| block as u32, |block: u64| (blocks + block) as u32);
    let mut read = Vec::new();
    for block in 0..blocks {
        let len = block_len(block);
        read.push(seq(file_slot, AccessMode::Read, block * block_size, len));
        read.push(seq(block_base + block as usize, AccessMode::Write, 0, len));
        read.push(Op::Post { token: queued(block) });
        read.push(Op::CountOp);
    }
    read.push(Op::Munmap { slot: file_slot });
    read.push(Op::Exit);
    let reader = b.program(read);
    b.thread(process, "read", "read", None, reader, false);
    let mut write = Vec::new();
    for block in 0..blocks {
        let slot = output_base + block as usize;
        write.extend([Op::Sleep { token: compressed(block), count: 1 }, seq(slot, AccessMode::Read, 0, out_len(block)), Op::Munmap { slot }, Op::CountOp]);
    }
    write.push(Op::Exit);
    let writer = b.program(write);
    b.thread(process, "write", "write", None, writer, false);
    for t in 0..threads {
        let work_slot = work_base + t as usize;
        let mut prog = Vec::new();
        for block in (t..blocks).step_by(threads as usize) {
            prog.push(Op::Sleep { token: queued(block), count: 1 });
            if block == t {
                prog.push(seq(work_slot, AccessMode::Write, 0, work));
            }
            let (len, block_slot, out_slot) = (block_len(block), block_base + block as usize, output_base + block as usize);
            let mut at = 0;
            while at < len {
                let piece = PBZIP2_BLOCK.min(len - at);
                let (out_at, out_piece) = (at / 7, piece.div_ceil(7).min(out_len(block) - at / 7));
                prog.push(seq(block_slot, AccessMode::Read, at, piece));
                prog.push(Op::Access {
                    slot: work_slot,
                    pattern: Pattern::Random,
                    mode: AccessMode::Mixed(0.5),
                    count: piece / 64,
                    offset: 0,
                    len: 0,
                    stride: 8,
                });
                prog.push(Op::Compute { cycles });
                if out_piece > 0 {
                    prog.push(seq(out_slot, AccessMode::Write, out_at, out_piece));
                }
                prog.push(Op::CountOp);
                at += piece;
            }
            prog.push(Op::Post { token: compressed(block) });
            prog.push(Op::Munmap { slot: block_slot });
        }
        prog.push(Op::Exit);
        let prog = b.program(prog);
        b.thread(process, &format!("compress{t}"), "compress", None, prog, false);
    }
    b.w.tokens = 2 * blocks as u32;
    Ok(b.finish())
}

// ---- stm-mprotect ----

/// Accesses of one transaction to its page, and of the non-transactional code after it
/// **[inferred]**: small transactions, as STAMP's are.
const STM_TX_ACCESSES: u64 = 16;
const STM_PLAIN_ACCESSES: u64 = 4;

/// DiDi §II: "software TM (STM) systems can only provide strong atomicity by modifying
/// page access permissions inside a transaction"; DiDi §IV implements "a simplified
/// version of the strong atomicity for STM systems as described in [1]" (TL2 and STAMP)
/// to stress shootdowns. [1]'s scheme, as modelled here **[inferred where DiDi is
/// silent]**: the heap (a `file_pages`-page shared file, default 64) is mapped twice, a
/// transactional view and a plain view, one region per page in each. A transaction on
/// page p protects p's plain page (mprotect read-only: the IR has no PROT_NONE) so that
/// non-transactional code cannot write it, reads and writes p through the transactional
/// view (`STM_TX_ACCESSES` accesses, half writes), computes `compute_cycles` (default
/// 2,000), and commits by making the plain page writable again; then non-transactional
/// code reads another page through the plain view. Thread t's j-th transaction uses page
/// (t + j) mod pages, so every thread touches every page and every mprotect has sharers.
/// `threads` threads (default one per core) pinned round-robin, class "stm"; one operation
/// = one transaction; `ops` transactions per thread (default 1,000). With `test`, the
/// transactions of one STAMP program instead ([`stamp`]).
fn stm_mprotect(cfg: &Config) -> Result<Workload> {
    let w = &cfg.workload;
    if !w.test.is_empty() {
        return stamp(cfg);
    }
    let pages = file_pages_or(cfg, 64);
    check_range("workload.file_pages", pages, 2, 4096)?;
    let threads = threads_or_cores(cfg);
    let ops = ops_or(cfg, 1_000);
    let cycles = compute_cycles_or(cfg, 2_000);
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let heap = b.file("stm-heap", pages);
    // Slots 0..pages: the transactional view; pages..2 × pages: the plain view.
    let regions: Vec<MapSpec> = (0..2).flat_map(|_| (0..pages).map(|p| file_map(heap, p, PAGE, true, true))).collect();
    let tx_slot = |p: u64| p as usize;
    let plain_slot = |p: u64| (pages + p) as usize;
    let process = b.process("stm", root, regions);
    let transaction = |p: u64| -> Vec<Op> {
        vec![
            Op::Mprotect { slot: plain_slot(p), writable: false },
            Op::Access { slot: tx_slot(p), pattern: Pattern::Random, mode: AccessMode::Mixed(0.5), count: STM_TX_ACCESSES, offset: 0, len: 0, stride: 8 },
            Op::Compute { cycles },
            Op::Mprotect { slot: plain_slot(p), writable: true },
            Op::CountOp,
            Op::Access {
                slot: plain_slot((p + pages / 2) % pages),
                pattern: Pattern::Random,
                mode: AccessMode::Read,
                count: STM_PLAIN_ACCESSES,
                offset: 0,
                len: 0,
                stride: 8,
            },
        ]
    };
    let cores = cfg.cores();
    for t in 0..threads as u64 {
        let round = |n: u64| -> Vec<Op> { (0..n).flat_map(|j| transaction((t + j) % pages)).collect() };
        let prog = b.program([times(ops / pages, round(pages)), round(ops % pages), vec![Op::Exit]].concat());
        b.thread(process, &format!("stm{t}"), "stm", Some(t as u32 % cores), prog, false);
    }
    Ok(b.finish())
}

/// One STAMP program's transactions as the page-protection scheme sees them, from STAMP
/// 0.9.10's source run with its simulator inputs (genome `-g256 -s16 -n16384`,
/// vacation-low `-n2 -q90 -u98 -r16384 -t4096`, labyrinth `random-x32-y32-z3-n96`), counted
/// by replaying each program's logic with its own random generator and seeds: see each
/// field. "Derived" = counted that way; **[inferred]** = estimated, not counted.
struct StampProfile {
    /// Pages of the shared transactional heap.
    heap_pages: u64,
    /// Transactions draw their pages from the heap's first `hot_pages` pages.
    hot_pages: u64,
    /// Distinct pages one transaction touches (each protected, then released at commit).
    tx_pages: u64,
    /// Instrumented 8-byte reads and writes of one transaction (its read and write sets,
    /// with repeats), spread over its pages.
    tx_reads: u64,
    tx_writes: u64,
    /// Non-transactional reads of the heap (the plain view) per transaction, in cache
    /// lines: labyrinth's uninstrumented grid copy, genome's segment compares.
    plain_lines: u64,
    /// Per-thread private memory worked on inside the transaction: pages, and accesses.
    private_pages: u64,
    private_accesses: u64,
    /// Cycles of computation inside a transaction and between two.
    tx_cycles: u64,
    between_cycles: u64,
    /// Transactions of the whole run (split among the threads).
    total_transactions: u64,
}

/// `stm-mprotect` with `test = "genome" | "vacation" | "labyrinth"`: the transactions of
/// that STAMP program (DiDi Table III, Fig. 10, §VII-B) under the page-protection scheme
/// of the generic generator above. A transaction on pages P1..Pk protects each page's
/// plain view (mprotect read-only) when it first touches it, reads and writes them
/// through the transactional view, computes, and releases them (mprotect writable) at
/// commit; between transactions the thread computes. Thread 0 first writes the whole heap
/// through the plain view (the program's sequential set-up) while the others wait at a
/// barrier. The heap is one file mapped twice,
/// a region per page in each view, as above; `threads` threads pinned one per core (class
/// "stm"); one operation = one transaction; `ops` = transactions per thread (default: the
/// program's total split among the threads). Page choice per transaction is uniform over
/// the program's hot pages, seeded per thread. Simplified: no aborts or retries (the
/// programs run with contention low at these inputs **[inferred]**), one transaction type
/// per program (its most frequent), no dynamic allocation in transactions.
fn stamp(cfg: &Config) -> Result<Workload> {
    let w = &cfg.workload;
    let p = match w.test.as_str() {
        // Derived: 5,912 transactions (1,366 hash-set inserts of 12 segments, 241 slot
        // claims, 3,856 table inserts, 449 matches); the hash set (7 pages) and the 16
        // tables (56 pages) are where they go, 98 heap pages in all; ~3 distinct pages, 32
        // reads and 2 writes per transaction on average over the types; the inserts'
        // string compares read ~12 segments outside the instrumentation. Between two:
        // ~100 instructions (a 15-character hash).
        "genome" => StampProfile {
            heap_pages: 98,
            hot_pages: 63,
            tx_pages: 3,
            tx_reads: 32,
            tx_writes: 2,
            plain_lines: 12,
            private_pages: 0,
            private_accesses: 0,
            tx_cycles: 300,
            between_cycles: 100,
            total_transactions: 5_912,
        },
        // Derived: 4,096 transactions, 98% reservations: 202 reads (78 distinct words) and
        // 5.3 writes over 27 distinct pages of the 7.86 MB heap (3 red-black trees of
        // 16,384 items and their reservations, 16,384 customers). Between two: ~250
        // instructions of request generation; inside: ~2,000 uninstrumented instructions
        // **[inferred]** (1-3 k).
        "vacation" => StampProfile {
            heap_pages: 1_920,
            hot_pages: 1_920,
            tx_pages: 27,
            tx_reads: 202,
            tx_writes: 5,
            plain_lines: 0,
            private_pages: 0,
            private_accesses: 0,
            tx_cycles: 2_000,
            between_cycles: 250,
            total_transactions: 4_096,
        },
        // Derived: 96 routing transactions (60 succeed) on a 32 x 32 x 3 grid (24 KiB, 7
        // pages, in an 11-page heap); each copies the whole grid without instrumentation
        // (384 lines), expands over its private copy (~17,500 accesses: 828 queue pops,
        // 4,300 neighbour checks, 850 pushes), and adds its path: 28.5 reads and 28.5 writes
        // over ~3 pages. ~10^5 instructions per route **[inferred]**.
        "labyrinth" => StampProfile {
            heap_pages: 11,
            hot_pages: 7,
            tx_pages: 3,
            tx_reads: 29,
            tx_writes: 29,
            plain_lines: 384,
            private_pages: 7,
            private_accesses: 17_500,
            tx_cycles: 100_000,
            between_cycles: 0,
            total_transactions: 96,
        },
        t => {
            return Err(Error::config(
                "workload.test",
                format!("{t:?} is not a STAMP program of stm-mprotect: use \"genome\", \"vacation\" or \"labyrinth\" (or leave test empty for the generic transactions)"),
            ))
        }
    };
    let threads = threads_or_cores(cfg);
    let ops = ops_or(cfg, p.total_transactions.div_ceil(threads as u64).max(1));
    let cores = cfg.cores();
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let heap = b.file("stm-heap", p.heap_pages);
    let pages = p.heap_pages;
    let mut regions: Vec<MapSpec> = (0..2).flat_map(|_| (0..pages).map(|q| file_map(heap, q, PAGE, true, true))).collect();
    let private_slot = regions.len();
    if p.private_pages > 0 {
        // One slice per thread (threads share the process's regions).
        regions.push(anon(p.private_pages * PAGE * threads as u64, true));
    }
    let tx_slot = |q: u64| q as usize;
    let plain_slot = |q: u64| (pages + q) as usize;
    let process = b.process("stm", root, regions);
    for t in 0..threads as u64 {
        let mut rng = crate::rng::SplitMix64::derive(cfg.seed, 0x57a3_0000 + t);
        let mut prog = Vec::new();
        if t == 0 {
            // The main thread builds the data structures (STAMP's sequential set-up, before
            // thread_start), writing the heap through the plain view.
            for q in 0..pages {
                prog.push(Op::Access {
                    slot: plain_slot(q),
                    pattern: Pattern::Sequential,
                    mode: AccessMode::Write,
                    count: PAGE / 64,
                    offset: 0,
                    len: 0,
                    stride: 64,
                });
            }
        }
        // The parallel phase starts when the set-up is done.
        prog.push(Op::Barrier);
        for _ in 0..ops {
            // k distinct hot pages.
            let mut chosen: Vec<u64> = Vec::with_capacity(p.tx_pages as usize);
            while (chosen.len() as u64) < p.tx_pages.min(p.hot_pages) {
                let q = rng.below(p.hot_pages);
                if !chosen.contains(&q) {
                    chosen.push(q);
                }
            }
            let k = chosen.len() as u64;
            for (i, &q) in chosen.iter().enumerate() {
                let i = i as u64;
                prog.push(Op::Mprotect { slot: plain_slot(q), writable: false });
                let (reads, writes) = (p.tx_reads * (i + 1) / k - p.tx_reads * i / k, p.tx_writes * (i + 1) / k - p.tx_writes * i / k);
                let count = reads + writes;
                if count > 0 {
                    let mode = AccessMode::Mixed(writes as f64 / count as f64);
                    prog.push(Op::Access { slot: tx_slot(q), pattern: Pattern::Random, mode, count, offset: 0, len: 0, stride: 8 });
                }
            }
            if p.plain_lines > 0 {
                // Uninstrumented reads of the hot pages through the plain view, page by page.
                let per_page = (PAGE / 64).min(p.plain_lines);
                let mut left = p.plain_lines;
                let mut q = if p.plain_lines >= p.hot_pages * (PAGE / 64) { 0 } else { rng.below(p.hot_pages) };
                while left > 0 {
                    let n = per_page.min(left);
                    prog.push(Op::Access {
                        slot: plain_slot(q),
                        pattern: Pattern::Sequential,
                        mode: AccessMode::Read,
                        count: n,
                        offset: 0,
                        len: 0,
                        stride: 64,
                    });
                    left -= n;
                    q = (q + 1) % p.hot_pages;
                }
            }
            if p.private_accesses > 0 {
                prog.push(Op::Access {
                    slot: private_slot,
                    pattern: Pattern::Random,
                    mode: AccessMode::Mixed(0.25),
                    count: p.private_accesses,
                    offset: t * p.private_pages * PAGE,
                    len: p.private_pages * PAGE,
                    stride: 8,
                });
            }
            if p.tx_cycles > 0 {
                prog.push(Op::Compute { cycles: p.tx_cycles });
            }
            for &q in &chosen {
                prog.push(Op::Mprotect { slot: plain_slot(q), writable: true });
            }
            prog.push(Op::CountOp);
            if p.between_cycles > 0 {
                prog.push(Op::Compute { cycles: p.between_cycles });
            }
        }
        prog.push(Op::Exit);
        let prog = b.program(prog);
        b.thread(process, &format!("stm{t}"), "stm", Some(t as u32 % cores), prog, false);
    }
    Ok(b.finish())
}

// ---- DiDi's microbenchmarks and wordcount ----

/// DiDi Table III, "mactest: basic cost of a TLB shootdown" (one of the microbenchmarks of
/// Romanescu et al., the paper's [23]; its source is not public, so the program is
/// **[inferred]** from that description): one process of `threads` threads (default one per
/// core), pinned one per core, sharing one anonymous region of `file_pages` pages (default
/// 1). Threads 1.. (class "reader", daemons) read every page of it and compute
/// `compute_cycles` (default 2,000), forever, so that every core holds the translations
/// when a change comes. Thread 0 (class "initiator") writes the region, then does `ops`
/// changes (default 1,000): mprotect read-only (a shootdown of the region on every core of
/// the process), mprotect writable, write every page. One operation = one such change.
fn mactest(cfg: &Config) -> Result<Workload> {
    let pages = file_pages_or(cfg, 1);
    check_range("workload.file_pages", pages, 1, 1 << 20)?;
    let threads = threads_or_cores(cfg);
    let ops = ops_or(cfg, 1_000);
    let cycles = compute_cycles_or(cfg, 2_000);
    let cores = cfg.cores();
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let slot = 0;
    let process = b.process("mactest", root, vec![anon(pages * PAGE, true)]);
    let change = vec![Op::Mprotect { slot, writable: false }, Op::Mprotect { slot, writable: true }, touch_pages(slot, AccessMode::Write, pages), Op::CountOp];
    let initiator = b.program([vec![touch_pages(slot, AccessMode::Write, pages)], times(ops, change), vec![Op::Exit]].concat());
    b.thread(process, "initiator", "initiator", Some(0), initiator, false);
    let reader = b.program(forever(vec![touch_pages(slot, AccessMode::Read, pages), Op::Compute { cycles }]));
    for t in 1..threads {
        b.thread(process, &format!("reader{t}"), "reader", Some(t % cores), reader, true);
    }
    Ok(b.finish())
}

/// DiDi Table III, "cowsingle: copy-on-write (single thread)" and "cowmultiple:
/// copy-on-write (multi-threaded)" (Romanescu et al.'s microbenchmarks, [23]; programs
/// **[inferred]** from those descriptions). A process writes its anonymous region
/// (`file_pages` pages per thread, default 16), forks a child that sleeps (so the pages stay
/// shared and the parent's next write to each copies it: do_wp_page's ptep_clear_flush is
/// a one-page shootdown to every CPU of the parent's mm), and writes the pages again.
/// - `cowsingle`: one thread (class "cow", unpinned) does `ops` rounds (default 100) of:
///   fork, write every page.
/// - `cowmultiple`: `threads` threads (default one per core; class "cow"), pinned one per
///   core, each owning a slice of `file_pages` pages of the shared region: every round
///   (`ops`, default 100) a thread writes its slice and computes `compute_cycles`
///   (default 20,000); thread 0 forks first. After a fork, each thread's next pass breaks
///   copy-on-write on its own slice: only the writer's core holds those translations, the
///   mm runs on every core.
///
/// Children sleep forever (daemons; they keep the pages they share until the run ends).
/// One operation = one round.
fn cow_micro(cfg: &Config, multiple: bool) -> Result<Workload> {
    let slice = file_pages_or(cfg, 16);
    check_range("workload.file_pages", slice, 1, 1 << 20)?;
    let threads = if multiple { threads_or_cores(cfg) } else { 1 };
    let ops = ops_or(cfg, 100);
    let cycles = compute_cycles_or(cfg, 20_000);
    let cores = cfg.cores();
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let slot = 0;
    let bytes = slice * PAGE * threads as u64;
    let name = if multiple { "cowmultiple" } else { "cowsingle" };
    let process = b.process(name, root, vec![anon(bytes, true)]);
    let child = b.program(forever(vec![Op::Block { cycles: SLEEP_CYCLES }]));
    b.w.daemon_programs.push(child);
    for t in 0..threads {
        let write = Op::Access {
            slot,
            pattern: Pattern::Sequential,
            mode: AccessMode::Write,
            count: slice,
            offset: t as u64 * slice * PAGE,
            len: slice * PAGE,
            stride: PAGE,
        };
        let mut round = Vec::new();
        if t == 0 {
            round.push(Op::Fork { program: child, core: None });
        }
        round.push(write.clone());
        if multiple {
            round.push(Op::Compute { cycles });
        }
        round.push(Op::CountOp);
        let prog = b.program([vec![write], times(ops, round), vec![Op::Exit]].concat());
        let core = if multiple { Some(t % cores) } else { None };
        b.thread(process, &format!("cow{t}"), "cow", core, prog, false);
    }
    Ok(b.finish())
}

/// Phoenix's map unit **[inferred]**: the splitter sizes a map task to the L1 data cache
/// (Phoenix's `L1_cache_size`, 32 KiB on DiDi's machines, Table II).
const WORDCOUNT_TASK_BYTES: u64 = 32 * 1024;

/// DiDi Table III and §V (Figs. 2-4): Phoenix MapReduce's wordcount [20], as the issue
/// describes its memory behaviour: workers map input and buffers, process, unmap.
/// `threads` map workers (default one per core) of one process, pinned one per core
/// (Phoenix binds its workers to CPUs), class "map". The input is a file of `file_pages`
/// pages (default 4,096: 16 MiB **[inferred]**), cut into 32 KiB tasks handed out round
/// robin (worker t takes tasks t, t + threads, ...). One task, the operation: mmap the
/// task's part of the input (private, read-only), mmap an anonymous buffer for its
/// intermediate (word, count) pairs (as large as the task **[inferred]**: glibc serves an
/// allocation of 128 KiB or more with mmap, and frees it with munmap), read the input
/// sequentially a line at a time, update the buffer at random places (one access per
/// line, three in four writes **[inferred]**), compute `compute_cycles` (default 100,000
/// **[inferred]**: about 3 cycles per input byte of tokenizing and hashing), then munmap
/// the input and the buffer. Each unmap is a shootdown that only the worker's own core
/// needs, on an mm that runs on every core. Each worker does `ops` tasks (default 100).
/// Simplified: the reduce and merge phases (reading the other workers' buffers) are not
/// modelled.
fn wordcount(cfg: &Config) -> Result<Workload> {
    let pages = file_pages_or(cfg, 4096);
    let task_pages = WORDCOUNT_TASK_BYTES / PAGE;
    check_range("workload.file_pages", pages, task_pages, 1 << 30)?;
    let threads = threads_or_cores(cfg);
    let ops = ops_or(cfg, 100);
    let cycles = compute_cycles_or(cfg, 100_000);
    let cores = cfg.cores();
    let tasks = pages / task_pages;
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let input = b.file("input.txt", pages);
    let process = b.process("wordcount", root, vec![]);
    let (text, buffer) = (0, 1);
    let lines = WORDCOUNT_TASK_BYTES / 64;
    // Worker t's own tasks, in order; its program loops over them.
    let per_worker = (tasks / threads as u64).max(1);
    for t in 0..threads as u64 {
        let round = |n: u64| -> Vec<Op> {
            (0..n)
                .flat_map(|k| {
                    let task = (t + k * threads as u64) % tasks;
                    [
                        Op::Mmap { slot: text, spec: file_map(input, task * task_pages, WORDCOUNT_TASK_BYTES, false, false) },
                        Op::Mmap { slot: buffer, spec: anon(WORDCOUNT_TASK_BYTES, true) },
                        Op::Access { slot: text, pattern: Pattern::Sequential, mode: AccessMode::Read, count: lines, offset: 0, len: 0, stride: 64 },
                        Op::Access { slot: buffer, pattern: Pattern::Random, mode: AccessMode::Mixed(0.75), count: lines, offset: 0, len: 0, stride: 8 },
                        Op::Compute { cycles },
                        Op::Munmap { slot: text },
                        Op::Munmap { slot: buffer },
                        Op::CountOp,
                    ]
                })
                .collect()
        };
        let prog = b.program([times(ops / per_worker, round(per_worker)), round(ops % per_worker), vec![Op::Exit]].concat());
        b.thread(process, &format!("map{t}"), "map", Some(t as u32 % cores), prog, false);
    }
    Ok(b.finish())
}

// ---- vm-mix ----

/// Instructions a called function runs before the next call (a run of sequential fetches:
/// 1 KiB of 4-byte instructions) **[inferred]**.
const CALL_INSTRUCTIONS: u64 = 256;

/// A page drawn from `cdf` (`program::zipf_cdf`: rank 1 = page 0).
fn zipf_page(rng: &mut crate::rng::SplitMix64, cdf: &[f64]) -> u64 {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    cdf.partition_point(|&c| c <= u).min(cdf.len() - 1) as u64
}

/// One pass of a program's code path: `calls` function calls, each a run of
/// `CALL_INSTRUCTIONS` sequential fetches at a 1 KiB-aligned place of a code page drawn
/// Zipf(1.0) over `code_pages` pages (drawn once, here, from `rng`: a program takes the
/// same path each time), followed by that run's data accesses `data(rng)`.
fn code_path(
    rng: &mut crate::rng::SplitMix64,
    code_slot: usize,
    code_pages: u64,
    calls: u64,
    data: &dyn Fn(&mut crate::rng::SplitMix64) -> Vec<Op>,
) -> Vec<Op> {
    let cdf = super::program::zipf_cdf(code_pages, 1.0);
    let mut ops = Vec::new();
    for _ in 0..calls {
        let page = zipf_page(rng, &cdf);
        let offset = page * PAGE + rng.below(4) * 1024;
        ops.push(Op::Access { slot: code_slot, pattern: Pattern::Sequential, mode: AccessMode::Fetch, count: CALL_INSTRUCTIONS, offset, len: 1024, stride: 4 });
        ops.extend(data(rng));
    }
    ops
}

/// TPC-C's five transaction types (TPC-C §5.2.3's minimum mix: New-Order and Payment 43%
/// or more each, the other three 4% each), as (name, calls per pass of its code path,
/// passes) **[inferred]**: New-Order about 250,000 instructions, Payment 100,000,
/// Order-Status 40,000, Delivery (ten districts) 460,000, Stock-Level 300,000.
const TPCC_TYPES: [(&str, u64, u64); 5] = [("new-order", 80, 12), ("payment", 40, 10), ("order-status", 30, 5), ("delivery", 120, 15), ("stock-level", 60, 20)];
/// The order a backend runs them in, over and over: 11 New-Orders and 11 Payments
/// alternating, then one of each other type (25 transactions).
const TPCC_CYCLE: [usize; 25] = [0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 4];

/// The tag paper's §5 set-up (Xen 3.1 on two CPUs): dom0 with two VCPUs; dom1 runs a
/// TPC-C-like OLTP load (TPCC-UVa on PostgreSQL) and dom2 the same (`test = "tpcc-tpcc"`,
/// the default) or a vortex-like single process (`"tpcc-vortex"`); one VCPU each, equal
/// weights. `pinning = "0012"` pins dom0's VCPUs to CPU 0 and dom1's and dom2's to CPU 1
/// (the paper's TPCC-*-0012; it needs two CPUs or more), `"none"` (the default) pins none.
///
/// Every program is an instruction stream: function calls, each a run of 256 sequential
/// instruction fetches in a code page drawn Zipf(1.0) over the program's binary (a private
/// file mapping, through the instruction TLB), with the data accesses of those
/// instructions after it (os/interp.rs counts a program's instructions by its fetches once
/// it fetches). The paper gives only the programs' names; every size and mix below is
/// **[inferred]**:
/// - TPC-C guest: `threads` backend processes (default 4: PostgreSQL backends serving
///   TPCC-UVa's terminals, each its own address space; §6.1: "TPCC-UVa forks off many
///   processes"), all mapping the guest's 2 MiB PostgreSQL binary (privately) and its
///   8 MiB shared buffer pool (shared). A transaction (one operation) of each TPC-C type
///   (`TPCC_TYPES`, in the order `TPCC_CYCLE`, from a place in the cycle that differs per
///   backend) runs its own code path over and over: per call, 24 accesses to its frame
///   (two pages at a depth of the backend's 16-page stack), 8 random ones to its 48-page
///   heap (25% writes), and 8 accesses to each of four
///   buffer-pool pages (10% writes), the pages drawn per call Zipf(0.99) over the pool (the
///   B-tree upper levels and the warehouse and district rows are hot). A transaction's
///   working set is thus about 200 pages, which a TLB of 256 entries holds (the issue's
///   description of TPC-C as TLB-friendly, after the paper's §6.2). Then the backend sleeps for its
///   log write and the client's next request (`compute_cycles`, default 300,000 cycles:
///   100 µs at 3 GHz). `ops` transactions per backend (default 50).
/// - vortex guest: one process that never sleeps (SPEC's vortex, an object database):
///   calls over a 512 KiB binary, each with 16 random accesses to a 32 MiB object heap and
///   16 to a 16-page stack (30% writes): TLB-hungry. It runs as long as the TPC-C guest.
/// - dom0: two daemons, each 10 calls over a 256 KiB binary with 32 accesses to its
///   16-page heap: xenstored, then 1 ms asleep; and the back-ends (blkback and netback as
///   one thread, on dom0's second VCPU), after each request or completion it serves.
/// - A TPC-C backend's sleep is split-driver I/O (os/io.rs): its log write and the
///   client's next request go through dom0's back-end (a request, `compute_cycles` of
///   device time, a completion), as a Xen guest's disk and network I/O does; so each
///   transaction wakes dom0 twice.
fn vm_mix(cfg: &Config) -> Result<Workload> {
    use super::program::VmSpec;
    let test = if cfg.workload.test.is_empty() { "tpcc-tpcc" } else { cfg.workload.test.as_str() };
    if !matches!(test, "tpcc-tpcc" | "tpcc-vortex") {
        return Err(Error::config("workload.test", format!("{test:?} is not a vm-mix test: use \"tpcc-tpcc\" or \"tpcc-vortex\"")));
    }
    let pinned = match cfg.workload.pinning.as_str() {
        "" | "none" => false,
        "0012" => true,
        other => return Err(Error::config("workload.pinning", format!("{other:?}: use \"none\" or \"0012\""))),
    };
    if pinned && cfg.cores() < 2 {
        return Err(Error::config("workload.pinning", "\"0012\" pins to CPUs 0 and 1: the machine needs two cores"));
    }
    let backends = if cfg.workload.threads == 0 { 4 } else { cfg.workload.threads };
    let ops = ops_or(cfg, 50);
    let sleep = compute_cycles_or(cfg, 300_000);
    let mut rng = crate::rng::SplitMix64::derive(cfg.seed, 0x766d_6d69_78);
    let mut b = Builder::default();
    let root = b.group("root", 0);
    // Each guest its own disk: its own binary and database files.
    let postgres = [b.file("dom1-postgres", 512), b.file("dom2-postgres", 512)];
    let shm = [b.file("dom1-shared_buffers", 2048), b.file("dom2-shared_buffers", 2048)];
    let vortex_bin = b.file("vortex", 128);
    let xen_bin = b.file("xend", 64);
    // Slots: code, stack and heap, then the buffer pool or the object heap.
    let (code, stack, big) = (0, 1, 2);
    let data = |slot: usize, count: u64, pattern: Pattern, writes: f64| Op::Access {
        slot,
        pattern,
        mode: AccessMode::Mixed(writes),
        count,
        offset: 0,
        len: 0,
        stride: 8,
    };
    let mut vm_processes: Vec<Vec<usize>> = vec![Vec::new(); 3];
    let dom0_path = code_path(&mut rng, code, 64, 10, &|_| vec![data(stack, 32, Pattern::Random, 0.25)]);
    let dom0_prog = b.program(forever([dom0_path.clone(), vec![Op::Block { cycles: 3_000_000 }]].concat()));
    let backend_prog = b.program(forever([vec![Op::Serve], dom0_path].concat()));
    for (i, (name, prog)) in [("xenstored", dom0_prog), ("backend", backend_prog)].into_iter().enumerate() {
        let p = b.process(name, root, vec![file_map(xen_bin, 0, 64 * PAGE, false, false), anon(16 * PAGE, true)]);
        b.thread(p, name, "dom0", Some(i as u32), prog, true);
        vm_processes[0].push(p);
    }
    // The back-end thread's index among the declared threads (xenstored is thread 0).
    let backend_thread = 1u32;
    for vm in 1..=2 {
        if vm == 2 && test == "tpcc-vortex" {
            let path = code_path(&mut rng, code, 128, 40, &|_| vec![data(big, 16, Pattern::Random, 0.3), data(stack, 16, Pattern::Random, 0.3)]);
            let prog = b.program(forever(path));
            let p = b.process("vortex", root, vec![file_map(vortex_bin, 0, 128 * PAGE, false, false), anon(16 * PAGE, true), anon(32 << 20, true)]);
            b.thread(p, "vortex", "dom2-vortex", Some(0), prog, true);
            vm_processes[2].push(p);
            continue;
        }
        // Each transaction type's code path (the same in every backend of the guest).
        let pool = super::program::zipf_cdf(2048, 0.99);
        let paths: Vec<Vec<Op>> = TPCC_TYPES
            .iter()
            .map(|&(_, calls, passes)| {
                let path = code_path(&mut rng, code, 512, calls, &|rng| {
                    // The call's frame: two pages at a depth of the 16-page stack; then the heap.
                    let depth = rng.below(8);
                    let mut ops = vec![
                        Op::Access {
                            slot: stack,
                            pattern: Pattern::Random,
                            mode: AccessMode::Mixed(0.25),
                            count: 24,
                            offset: depth * PAGE,
                            len: 2 * PAGE,
                            stride: 8,
                        },
                        Op::Access {
                            slot: stack,
                            pattern: Pattern::Random,
                            mode: AccessMode::Mixed(0.25),
                            count: 8,
                            offset: 16 * PAGE,
                            len: 48 * PAGE,
                            stride: 8,
                        },
                    ];
                    for _ in 0..4 {
                        let page = zipf_page(rng, &pool);
                        ops.push(Op::Access {
                            slot: big,
                            pattern: Pattern::Random,
                            mode: AccessMode::Mixed(0.10),
                            count: 8,
                            offset: page * PAGE,
                            len: PAGE,
                            stride: 8,
                        });
                    }
                    ops
                });
                times(passes, path)
            })
            .collect();
        for t in 0..backends {
            let mut prog = Vec::new();
            for k in 0..ops {
                let kind = TPCC_CYCLE[((k + t as u64 * 7) % TPCC_CYCLE.len() as u64) as usize];
                prog.extend(paths[kind].iter().cloned());
                prog.push(Op::Io { server: backend_thread, cycles: sleep });
                prog.push(Op::CountOp);
            }
            prog.push(Op::Exit);
            let prog = b.program(prog);
            let p = b.process(
                &format!("dom{vm}-postgres{t}"),
                root,
                vec![file_map(postgres[vm - 1], 0, 512 * PAGE, false, false), anon(64 * PAGE, true), file_map(shm[vm - 1], 0, 2048 * PAGE, true, true)],
            );
            b.thread(p, &format!("dom{vm}-backend{t}"), &format!("dom{vm}-tpcc"), Some(0), prog, false);
            vm_processes[vm].push(p);
        }
    }
    let pin = |cpu: u32, n: usize| vec![pinned.then_some(cpu); n];
    let mut w = b.finish();
    w.vms = vec![
        VmSpec { name: "dom0".into(), vcpus: 2, weight: 256, cap: 0, pin: pin(0, 2), processes: vm_processes[0].clone() },
        VmSpec { name: "dom1".into(), vcpus: 1, weight: 256, cap: 0, pin: pin(1, 1), processes: vm_processes[1].clone() },
        VmSpec { name: "dom2".into(), vcpus: 1, weight: 256, cap: 0, pin: pin(1, 1), processes: vm_processes[2].clone() },
    ];
    Ok(w)
}

// ---- mitosis-bench ----

/// The Mitosis workloads (Table 1; sources: each benchmark's public description, since
/// the paper gives only names and sizes), each a loop of operations over one anonymous
/// region of `region_bytes` (the working set; `workload.region_bytes`' default, 64 MiB; the
/// paper's are 17-85 GB).
/// The region is populated before the threads start (they all start when it is done), by
/// the first thread's core:
/// single-threaded initialization, as the paper's migration runs "pre-allocated and
/// initialized the working set" and its multi-socket runs let one thread initialize
/// (§3.1's first-touch skew). `threads` workers (default 1) run `ops` operations each
/// (default 200,000); thread t is pinned to socket t % sockets (its (t / sockets)-th core).
/// One operation, **[inferred]** per benchmark:
/// - `gups`: one random 8-byte update (a read-modify-write of one line).
/// - `btree`: one lookup: three reads in the hot upper levels (the first 1/256 of the
///   region) and one in a random leaf.
/// - `hashjoin`: one probe: the next tuple of the probe relation (a sequential read of the
///   region's last quarter) and a random read of the hash table (the first three quarters).
/// - `xsbench`: one macroscopic cross-section lookup: a random read of the unionized energy
///   grid (the first eighth), then five random reads of nuclide grids, and 400 cycles of
///   arithmetic.
/// - `canneal`: one swap: two random reads and two random writes of netlist elements, and
///   200 cycles of cost evaluation.
/// - `memcached`, `redis`: one GET: a random read of the hash bucket array (the first
///   sixteenth) and two Zipf(0.99) reads of items; 3,000 cycles of request handling (the
///   network stack of a real server is far more; a client load generator is not modelled).
/// - `graph500`: one BFS step: a random read of a vertex, then eight sequential reads of its
///   edge list.
fn mitosis_bench(cfg: &Config) -> Result<Workload> {
    const TESTS: [&str; 8] = ["gups", "btree", "hashjoin", "xsbench", "canneal", "memcached", "redis", "graph500"];
    let w = &cfg.workload;
    let test = w.test.as_str();
    if !TESTS.contains(&test) {
        let tests: Vec<String> = TESTS.iter().map(|t| format!("{t:?}")).collect();
        return Err(Error::config("workload.test", format!("{test:?} is not a mitosis-bench workload: use one of {}", tests.join(", "))));
    }
    let bytes = w.region_bytes;
    check_range("workload.region_bytes", bytes, 1 << 21, 1 << 42)?;
    let bytes = bytes / PAGE * PAGE;
    let threads = if w.threads == 0 { 1 } else { w.threads };
    let cores = cfg.cores();
    if threads > cores {
        return Err(Error::config("workload.threads", format!("{threads} workers, one per core: the machine has {cores} cores")));
    }
    let ops = ops_or(cfg, 200_000);
    let slot = 0;
    let random = |mode: AccessMode, count: u64, offset: u64, len: u64| Op::Access { slot, pattern: Pattern::Random, mode, count, offset, len, stride: 8 };
    let zipf = |count: u64| Op::Access { slot, pattern: Pattern::Zipf { theta: 0.99 }, mode: AccessMode::Read, count, offset: 0, len: 0, stride: 64 };
    let seq = |count: u64, offset: u64, len: u64| Op::Access { slot, pattern: Pattern::Sequential, mode: AccessMode::Read, count, offset, len, stride: 64 };
    let page_floor = |b: u64| (b / PAGE).max(1) * PAGE;
    let body: Vec<Op> = match test {
        "gups" => vec![random(AccessMode::Write, 1, 0, 0)],
        "btree" => vec![random(AccessMode::Read, 3, 0, page_floor(bytes / 256)), random(AccessMode::Read, 1, 0, 0)],
        "hashjoin" => {
            let table = page_floor(bytes / 4 * 3);
            vec![seq(1, table, bytes - table), random(AccessMode::Read, 1, 0, table)]
        }
        "xsbench" => vec![random(AccessMode::Read, 1, 0, page_floor(bytes / 8)), random(AccessMode::Read, 5, 0, 0), Op::Compute { cycles: 400 }],
        "canneal" => vec![random(AccessMode::Read, 2, 0, 0), random(AccessMode::Write, 2, 0, 0), Op::Compute { cycles: 200 }],
        "memcached" | "redis" => vec![random(AccessMode::Read, 1, 0, page_floor(bytes / 16)), zipf(2), Op::Compute { cycles: 3_000 }],
        _ => vec![random(AccessMode::Read, 1, 0, 0), seq(8, 0, 0)],
    };
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let mut region = anon(bytes, true);
    region.populate = true;
    let process = b.process(test, root, vec![region]);
    let mut one = body;
    one.push(Op::CountOp);
    // Every worker starts once the working set is populated (by the first worker's core).
    b.w.start_after_setup.push(process);
    let (sockets, per_socket) = (cfg.machine.sockets, cfg.machine.cores_per_socket);
    for t in 0..threads {
        let prog = b.program([times(ops, one.clone()), vec![Op::Exit]].concat());
        // Round-robin over the sockets: thread t on socket t % sockets.
        let core = (t % sockets) * per_socket + t / sockets;
        b.thread(process, &format!("{test}{t}"), test, Some(core), prog, false);
    }
    Ok(b.finish())
}

// ---- vma-ops ----

/// Mitosis §8.3.2 (Table 5): one thread (core 0) repeats a VMA operation on a region of
/// `region_bytes` with MAP_POPULATE, `ops` times (default 20). `mmap`:
/// mmap(populate) then munmap; `munmap`: the same pair (the munmap is the measured call);
/// `mprotect`: the region is mapped and populated once, then made read-only and writable
/// again. Each call's kernel cycles are in `totals.syscalls_by_call`.
fn vma_ops(cfg: &Config) -> Result<Workload> {
    const TESTS: [&str; 3] = ["mmap", "mprotect", "munmap"];
    let w = &cfg.workload;
    let test = w.test.as_str();
    if !TESTS.contains(&test) {
        let tests: Vec<String> = TESTS.iter().map(|t| format!("{t:?}")).collect();
        return Err(Error::config("workload.test", format!("{test:?} is not a vma-ops test: use one of {}", tests.join(", "))));
    }
    let bytes = w.region_bytes;
    check_range("workload.region_bytes", bytes, PAGE, 1 << 40)?;
    let ops = ops_or(cfg, 20);
    let slot = 0;
    let mut populated = anon(bytes, true);
    populated.populate = true;
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let process = b.process("vma-ops", root, vec![]);
    let prog = match test {
        "mprotect" => [
            vec![Op::Mmap { slot, spec: populated }],
            times(ops, vec![Op::Mprotect { slot, writable: false }, Op::Mprotect { slot, writable: true }, Op::CountOp]),
            vec![Op::Exit],
        ]
        .concat(),
        _ => [times(ops, vec![Op::Mmap { slot, spec: populated }, Op::Munmap { slot }, Op::CountOp]), vec![Op::Exit]].concat(),
    };
    let prog = b.program(prog);
    b.thread(process, test, test, Some(0), prog, false);
    Ok(b.finish())
}

// ---- building blocks ----

/// Collects groups, files, processes and programs; `finish` counts the slots.
#[derive(Default)]
pub(super) struct Builder {
    pub(super) w: Workload,
}

impl Builder {
    pub(super) fn group(&mut self, name: &str, limit_pages: u64) -> usize {
        self.w.groups.push(GroupSpec { name: name.into(), limit_pages });
        self.w.groups.len() - 1
    }

    pub(super) fn file(&mut self, name: &str, pages: u64) -> u32 {
        self.w.files.push(FileSpec { name: name.into(), pages });
        (self.w.files.len() - 1) as u32
    }

    pub(super) fn program(&mut self, ops: Vec<Op>) -> usize {
        self.w.programs.push(ops);
        self.w.programs.len() - 1
    }

    pub(super) fn process(&mut self, name: &str, group: usize, regions: Vec<MapSpec>) -> usize {
        self.w.processes.push(ProcessSpec { name: name.into(), group, regions, threads: Vec::new(), page_tables: Default::default() });
        self.w.processes.len() - 1
    }

    pub(super) fn thread(&mut self, process: usize, name: &str, class: &str, core: Option<u32>, program: usize, daemon: bool) {
        self.w.processes[process].threads.push(ThreadSpec { name: name.into(), class: class.into(), core, program, daemon });
    }

    pub(super) fn finish(mut self) -> Workload {
        let regions = self.w.processes.iter().map(|p| p.regions.len()).max().unwrap_or(0);
        let used = self.w.programs.iter().flatten().filter_map(Op::slot).map(|s| s + 1).max().unwrap_or(0);
        self.w.slots = regions.max(used);
        self.w
    }
}

pub(super) fn anon(bytes: u64, writable: bool) -> MapSpec {
    MapSpec { fpr: false, fixed: false, bytes, backing: Backing::Anonymous, shared: false, populate: false, writable }
}

fn file_map(file: u32, offset_pages: u64, bytes: u64, shared: bool, writable: bool) -> MapSpec {
    MapSpec { fpr: false, fixed: false, bytes, backing: Backing::File { file, offset_pages }, shared, populate: false, writable }
}

/// One access to the first byte of each of the region's first `pages` pages.
fn touch_pages(slot: usize, mode: AccessMode, pages: u64) -> Op {
    Op::Access { slot, pattern: Pattern::Sequential, mode, count: pages, offset: 0, len: pages * PAGE, stride: PAGE }
}

/// `body` repeated `count` times, in the flat loop form (`Loop { count: 0 }` would be
/// forever, so zero repetitions are no operations at all).
pub(super) fn times(count: u64, body: Vec<Op>) -> Vec<Op> {
    match count {
        0 => Vec::new(),
        1 => body,
        _ if body.is_empty() => Vec::new(),
        _ => {
            let mut v = Vec::with_capacity(body.len() + 1);
            v.push(Op::Loop { count, body: body.len() });
            v.extend(body);
            v
        }
    }
}

/// `body` repeated forever (daemon threads only).
fn forever(body: Vec<Op>) -> Vec<Op> {
    let mut v = vec![Op::Loop { count: 0, body: body.len() }];
    v.extend(body);
    v
}

fn threads_or_cores(cfg: &Config) -> u32 {
    if cfg.workload.threads == 0 {
        cfg.cores()
    } else {
        cfg.workload.threads
    }
}

fn ops_or(cfg: &Config, default: u64) -> u64 {
    if cfg.workload.ops == 0 {
        default
    } else {
        cfg.workload.ops
    }
}

fn file_pages_or(cfg: &Config, default: u64) -> u64 {
    if cfg.workload.file_pages == 0 {
        default
    } else {
        cfg.workload.file_pages
    }
}

fn compute_cycles_or(cfg: &Config, default: u64) -> u64 {
    if cfg.workload.compute_cycles == 0 {
        default
    } else {
        cfg.workload.compute_cycles
    }
}

/// `memory_limit_mib`, or half the working set (`region_bytes`), rounded up.
fn memory_limit_mib_or_half(cfg: &Config) -> Result<u64> {
    let w = &cfg.workload;
    let mib = if w.memory_limit_mib == 0 { (w.region_bytes / 2).div_ceil(1 << 20).max(1) } else { w.memory_limit_mib };
    check_range("workload.memory_limit_mib", mib, 1, 1 << 30)?;
    Ok(mib)
}

pub(super) fn check_range(key: &str, v: u64, lo: u64, hi: u64) -> Result<()> {
    if v < lo || v > hi {
        return Err(Error::config(key, format!("{v} is out of range: allowed {lo} to {hi}")));
    }
    Ok(())
}
