//! DiDi Table III's microbenchmarks and wordcount: `workload.kind = "mactest"` (the basic
//! cost of a shootdown), `"cowsingle"` and `"cowmultiple"` (copy-on-write after fork, one
//! thread or many; Romanescu et al.'s microbenchmarks, DiDi's [23], whose programs are
//! **[inferred]** from their descriptions), and `"wordcount"` (DiDi Table III and §V,
//! Figs. 2-4: Phoenix MapReduce's map workers mapping input and buffers, processing and
//! unmapping them). Simplified: wordcount's reduce and merge phases are not modelled.

use super::SLEEP_CYCLES;
use crate::config::Config;
use crate::error::Result;
use crate::workload::builder::{anon, check_range, file_map, forever, threads_or_cores, times, touch_pages, Builder, PAGE};
use crate::workload::program::{AccessMode, Op, Pattern, Workload};

crate::params! {
    /// `workload.kind = "mactest"`.
    pub struct MactestParams {
        /// Threads, pinned one per core (thread 0 changes the region, the others read it);
        /// 0 = one per core.
        pub threads: u32 = 0,
        /// Changes (mprotect read-only, mprotect writable, write every page) thread 0 makes.
        pub ops: u64 = 1_000,
        /// Pages of the shared region changed.
        pub file_pages: u64 = 1,
        /// Cycles of a reader's work between two reads of the region.
        pub compute_cycles: u64 = 2_000,
    }
}

crate::params! {
    /// `workload.kind = "cowsingle"` (one thread).
    pub struct CowSingleParams {
        /// Rounds (fork, write every page).
        pub ops: u64 = 100,
        /// Pages the thread writes.
        pub file_pages: u64 = 16,
    }
}

crate::params! {
    /// `workload.kind = "cowmultiple"`.
    pub struct CowMultipleParams {
        /// Threads, pinned one per core; 0 = one per core.
        pub threads: u32 = 0,
        /// Rounds (write the thread's slice, compute; thread 0 forks first).
        pub ops: u64 = 100,
        /// Pages each thread writes (its slice).
        pub file_pages: u64 = 16,
        /// Cycles of a round's work.
        pub compute_cycles: u64 = 20_000,
    }
}

crate::params! {
    /// `workload.kind = "wordcount"`.
    pub struct WordcountParams {
        /// Map workers, pinned one per core; 0 = one per core.
        pub threads: u32 = 0,
        /// Map tasks each worker does.
        pub ops: u64 = 100,
        /// Pages of the input file.
        pub file_pages: u64 = 4_096,
        /// Cycles of processing one 32 KiB task **[inferred]**: about 3 cycles per input
        /// byte of tokenizing and hashing.
        pub compute_cycles: u64 = 100_000,
    }
}

/// DiDi Table III, "mactest: basic cost of a TLB shootdown" (one of the microbenchmarks of
/// Romanescu et al., the paper's [23]; its source is not public, so the program is
/// **[inferred]** from that description): one process of `threads` threads (default one per
/// core), pinned one per core, sharing one anonymous region of `file_pages` pages (default
/// 1). Threads 1.. (class "reader", daemons) read every page of it and compute
/// `compute_cycles` (default 2,000), forever, so that every core holds the translations
/// when a change comes. Thread 0 (class "initiator") writes the region, then does `ops`
/// changes (default 1,000): mprotect read-only (a shootdown of the region on every core of
/// the process), mprotect writable, write every page. One operation = one such change.
pub(super) fn mactest(cfg: &Config, p: &MactestParams) -> Result<Workload> {
    let pages = p.file_pages;
    check_range("workload.file_pages", pages, 1, 1 << 20)?;
    let threads = threads_or_cores(cfg, p.threads);
    let (ops, cycles) = (p.ops, p.compute_cycles);
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
pub(super) fn cowsingle(cfg: &Config, p: &CowSingleParams) -> Result<Workload> {
    cow_micro(cfg, None, p.ops, p.file_pages, 0)
}

pub(super) fn cowmultiple(cfg: &Config, p: &CowMultipleParams) -> Result<Workload> {
    cow_micro(cfg, Some(threads_or_cores(cfg, p.threads)), p.ops, p.file_pages, p.compute_cycles)
}

/// `threads`: `None` for cowsingle's one thread, unpinned.
fn cow_micro(cfg: &Config, threads: Option<u32>, ops: u64, slice: u64, cycles: u64) -> Result<Workload> {
    check_range("workload.file_pages", slice, 1, 1 << 20)?;
    let multiple = threads.is_some();
    let threads = threads.unwrap_or(1);
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
pub(super) fn wordcount(cfg: &Config, p: &WordcountParams) -> Result<Workload> {
    let pages = p.file_pages;
    let task_pages = WORDCOUNT_TASK_BYTES / PAGE;
    check_range("workload.file_pages", pages, task_pages, 1 << 30)?;
    let threads = threads_or_cores(cfg, p.threads);
    let (ops, cycles) = (p.ops, p.compute_cycles);
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
