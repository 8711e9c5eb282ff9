//! `workload.kind = "vmscale"`: the vm-scalability tests ABIS §5.1 runs (`test =
//! "migrate" | "cow-seq" | "cow-rand" | "mmap-read" | "msync" | "anon-read-seq"`), each
//! with the working set split among tasks as vm-scalability sizes them (`mem / nr_task`).
//! Modelled: the tests' mappings and passes over them, NUMA migration while the process
//! busy-waits, copy-on-write of a private file mapping, reclaim under a memory-group
//! limit, msync. Simplified: in `migrate` the migrating thread is a thread of the process.

use super::SPIN_CYCLES;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::workload::builder::{anon, check_range, file_map, forever, memory_limit_mib_or_half, threads_or_cores, times, Builder, PAGE};
use crate::workload::program::{AccessMode, Op, Pattern, Workload};

crate::params! {
    /// `workload.kind = "vmscale"`.
    pub struct VmscaleParams {
        /// The vm-scalability test (ABIS §5.1): `migrate`, `cow-seq`, `cow-rand`,
        /// `mmap-read`, `msync` or `anon-read-seq`.
        pub test: String = String::new(),
        /// Tasks (threads or processes, as the test runs them); 0 = one per core.
        pub threads: u32 = 0,
        /// The whole working set, split among the tasks (as vm-scalability sizes each task
        /// `mem / nr_task`).
        pub region_bytes: u64 = 64 << 20,
        /// Bytes between consecutive accesses of a sequential pass.
        pub stride: u64 = 64,
        /// `mmap-read`: the memory group's limit in MiB, which reclaim enforces; 0 = half
        /// of `region_bytes`, rounded up.
        pub memory_limit_mib: u64 = 0,
        /// Migrations (`migrate`; 0 = 8) or passes over the working set (the others; 0 = 1).
        pub ops: u64 = 0,
    }
}

/// `ops`, or the test's `default` when it is 0.
fn ops_or(w: &VmscaleParams, default: u64) -> u64 {
    if w.ops == 0 {
        default
    } else {
        w.ops
    }
}

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
pub(super) fn vmscale(cfg: &Config, w: &VmscaleParams) -> Result<Workload> {
    const TESTS: [&str; 6] = ["migrate", "cow-seq", "cow-rand", "mmap-read", "msync", "anon-read-seq"];
    let test = w.test.as_str();
    if !TESTS.contains(&test) {
        let tests: Vec<String> = TESTS.iter().map(|t| format!("{t:?}")).collect();
        return Err(Error::config("workload.test", format!("{test:?} is not a vmscale test: use one of {}", tests.join(", "))));
    }
    // The 500k BWT blocks are unrolled (each reads its own offset): 64 GiB is 137,439.
    check_range("workload.region_bytes", w.region_bytes, PAGE, 1 << 36)?;
    check_range("workload.stride", w.stride, 1, 1 << 30)?;
    let tasks = threads_or_cores(cfg, w.threads);
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
            let migrations = ops_or(w, 8);
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
            let passes = ops_or(w, 1);
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
            let passes = ops_or(w, 1);
            let limit_mib = memory_limit_mib_or_half(w.memory_limit_mib, w.region_bytes)?;
            let group = b.group("vmscale", limit_mib * 256);
            let prog = b.program([times(passes, vec![pass(slot, AccessMode::Read, 0, share), Op::CountOp]), vec![Op::Exit]].concat());
            for t in 0..tasks {
                let file = b.file(&format!("sparse{t}"), share_pages);
                let process = b.process(&format!("usemem{t}"), group, vec![file_map(file, 0, share, false, false)]);
                b.thread(process, "read", "read", None, prog, false);
            }
        }
        "msync" => {
            let passes = ops_or(w, 1);
            let file = b.file("sparse", share_pages);
            let region = file_map(file, 0, share, true, true).populated();
            let process = b.process("usemem", root, vec![region]);
            let prog = b.program([times(passes, vec![pass(slot, AccessMode::Write, 0, share), Op::Msync { slot }, Op::CountOp]), vec![Op::Exit]].concat());
            for t in 0..tasks {
                b.thread(process, &format!("msync{t}"), "msync", None, prog, false);
            }
        }
        _ => {
            // anon-read-seq
            let passes = ops_or(w, 1);
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
