//! The FPR paper's munmap and page-eviction benchmarks: `workload.kind = "fpr-munmap"`
//! (FPR §V-A1, Fig. 6, cases 1 to 5, as bench/fpr_munmap.c runs them: I/O threads that
//! mmap, read and munmap a page of a file beside compute threads) and `"fpr-evict"` (FPR
//! §V-B, Fig. 14: threads reading a file larger than their memory group, so reclaim
//! evicts all the time). Their file mappings are recyclable (MAP_FPR), which means nothing
//! unless the run sets `os.recycling = "fpr"`. Simplified: FPR runs every thread for a fixed time
//! (up to 2 hours for eviction); here threads run a fixed number of operations, and the
//! model has no readahead.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::workload::builder::{anon, check_range, file_map, forever, memory_limit_mib_or_half, threads_or_cores, times, Builder, PAGE};
use crate::workload::program::{AccessMode, Op, Pattern, Workload};

crate::params! {
    /// `workload.kind = "fpr-munmap"`.
    pub struct FprMunmapParams {
        /// The case of FPR §V-A1 (Fig. 6), 1 to 5: 1 = N I/O threads, 2 = 1 I/O + N compute,
        /// 3 = N I/O + 1 compute, 4 = N I/O + M compute, 5 = N mixed threads.
        pub case: u32 = 1,
        /// N of the case; 0 = one per core.
        pub threads: u32 = 0,
        /// Case 4: M, the compute threads; 0 = as many as `threads` (as bench/fpr_munmap.c
        /// does without --compute).
        pub compute_threads: u32 = 0,
        /// The "ideal" run of FPR §V-A1 (cases 2-4): the compute threads alone, no I/O
        /// thread, each doing `ops` operations.
        pub ideal: bool = false,
        /// Operations each I/O or mixed thread does (ideal: each compute thread).
        pub ops: u64 = 1_000,
        /// Cycles of a compute step (FPR's "1 CF = 10K ops", one add per cycle
        /// **[inferred]**).
        pub compute_cycles: u64 = 10_000,
        /// Pages of the device file; each I/O step maps one random page of it (1: always
        /// the same page).
        pub file_pages: u64 = 1,
    }
}

crate::params! {
    /// `workload.kind = "fpr-evict"`.
    pub struct FprEvictParams {
        /// Threads, pinned one per core; 0 = one per core.
        pub threads: u32 = 0,
        /// Bytes of the file the threads read at random places.
        pub region_bytes: u64 = 64 << 20,
        /// The memory group's limit in MiB, which reclaim enforces; 0 = half of
        /// `region_bytes`, rounded up.
        pub memory_limit_mib: u64 = 0,
        /// PG, the 4 KiB pages of each thread's private buffer read during each compute step
        /// (FPR §V-B; 0 = PG-off).
        pub private_pages: u64 = 0,
        /// Operations (a read and a compute step) each thread does.
        pub ops: u64 = 1_000,
        /// Cycles of a compute step (CF = 1: FPR's "1 CF = 10K ops", one op per cycle
        /// **[inferred]**).
        pub compute_cycles: u64 = 10_000,
    }
}

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
/// nothing unless the run sets `os.recycling = "fpr"`).
pub(super) fn fpr_munmap(cfg: &Config, w: &FprMunmapParams) -> Result<Workload> {
    check_range("workload.case", w.case as u64, 1, 5)?;
    check_range("workload.compute_threads", w.compute_threads as u64, 0, 4096)?;
    let n = threads_or_cores(cfg, w.threads);
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
    let (ops, cycles) = (w.ops, w.compute_cycles);
    let file_pages = w.file_pages;
    check_range("workload.file_pages", file_pages, 1, 1 << 32)?;
    let mut b = Builder::default();
    let root = b.group("root", 0);
    let file = b.file("nullblk", file_pages);
    let slot = 0;
    // One I/O step mapping page `offset` of the device file.
    let io_step = |offset: u64| {
        vec![
            Op::Mmap { slot, spec: file_map(file, offset, PAGE, true, false).recyclable() },
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
pub(super) fn fpr_evict(cfg: &Config, w: &FprEvictParams) -> Result<Workload> {
    // The 500k BWT blocks are unrolled (each reads its own offset): 64 GiB is 137,439.
    check_range("workload.region_bytes", w.region_bytes, PAGE, 1 << 36)?;
    check_range("workload.private_pages", w.private_pages, 0, 1 << 24)?;
    let threads = threads_or_cores(cfg, w.threads);
    let (ops, cycles) = (w.ops, w.compute_cycles);
    let limit_mib = memory_limit_mib_or_half(w.memory_limit_mib, w.region_bytes)?;
    let mut b = Builder::default();
    b.group("root", 0);
    let group = b.group("fpr-evict", limit_mib * 256);
    let file = b.file("nullblk", w.region_bytes.div_ceil(PAGE));
    let mut regions = vec![file_map(file, 0, w.region_bytes, true, false).recyclable()];
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
