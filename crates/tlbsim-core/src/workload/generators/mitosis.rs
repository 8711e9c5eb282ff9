//! `workload.kind = "mitosis-bench"`: Mitosis §3 and §8 (Table 1), the paper's workloads
//! as the programs access memory (`test = "gups" | "btree" | "hashjoin" | "xsbench" |
//! "canneal" | "memcached" | "redis" | "graph500"`): a loop of operations over one
//! anonymous working set, populated by one thread before the workers start. Simplified:
//! the paper gives only names and sizes; each operation is **[inferred]** from the
//! benchmark's public description, and the working set is small by default (64 MiB; the
//! paper's are 17-85 GB).

use crate::config::Config;
use crate::error::{Error, Result};
use crate::workload::builder::{anon, check_range, times, Builder, PAGE};
use crate::workload::program::{AccessMode, Op, Pattern, Workload};

crate::params! {
    /// `workload.kind = "mitosis-bench"`.
    pub struct MitosisBenchParams {
        /// The workload: `gups`, `btree`, `hashjoin`, `xsbench`, `canneal`, `memcached`,
        /// `redis` or `graph500`.
        pub test: String = String::new(),
        /// Workers, one per core; 0 = 1.
        pub threads: u32 = 0,
        /// Bytes of the working set.
        pub region_bytes: u64 = 64 << 20,
        /// Operations each worker does (what one is depends on `test`).
        pub ops: u64 = 200_000,
    }
}

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
pub(super) fn mitosis_bench(cfg: &Config, w: &MitosisBenchParams) -> Result<Workload> {
    const TESTS: [&str; 8] = ["gups", "btree", "hashjoin", "xsbench", "canneal", "memcached", "redis", "graph500"];
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
    let ops = w.ops;
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
    let region = anon(bytes, true).populated();
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
