//! `workload.kind = "vm-mix"`: the tag paper's §5 set-up (Xen 3.1 on two CPUs): dom0 and
//! two guests under the hypervisor, a TPC-C-like OLTP guest beside another one or a
//! vortex-like one (`test = "tpcc-tpcc" | "tpcc-vortex"`, `pinning = "none" | "0012"`).
//! Modelled: every program as an instruction stream (function calls over a binary, through
//! the instruction TLB) with its data accesses, and the guests' I/O through dom0's split
//! drivers. Simplified: the paper gives only the programs' names; every size and mix is
//! **[inferred]** ([`vm_mix`]).

use crate::config::Config;
use crate::error::{Error, Result};
use crate::workload::builder::{anon, file_map, forever, times, Builder, PAGE};
use crate::workload::program::{AccessMode, Op, Pattern, Workload};

crate::params! {
    /// `workload.kind = "vm-mix"`.
    pub struct VmMixParams {
        /// `tpcc-tpcc` (the default when empty) or `tpcc-vortex`.
        pub test: String = String::new(),
        /// Where the VCPUs run: `none` (the default when empty: anywhere) or `0012` (dom0's
        /// two VCPUs pinned to CPU 0, dom1's and dom2's to CPU 1; the tag paper's
        /// TPCC-*-0012).
        pub pinning: String = String::new(),
        /// The OLTP guests' terminal processes (TPCC-UVa's); 0 = 4.
        pub threads: u32 = 0,
        /// Transactions each terminal runs.
        pub ops: u64 = 7,
        /// Cycles of device time of one I/O through dom0's back-end (a COMMIT's log write).
        pub compute_cycles: u64 = 300_000,
    }
}

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
    let cdf = crate::workload::program::zipf_cdf(code_pages, 1.0);
    let mut ops = Vec::new();
    for _ in 0..calls {
        let page = zipf_page(rng, &cdf);
        let offset = page * PAGE + rng.below(4) * 1024;
        ops.push(Op::Access { slot: code_slot, pattern: Pattern::Sequential, mode: AccessMode::Fetch, count: CALL_INSTRUCTIONS, offset, len: 1024, stride: 4 });
        ops.extend(data(rng));
    }
    ops
}

/// TPC-C's five transaction types as TPCC-UVa's transaction monitor runs them (tm.c, each
/// `EXEC SQL` a round trip to the PostgreSQL backend), as (name, statements, whether its
/// COMMIT waits for a log write):
/// - New-Order: BEGIN, the warehouse and customer, the district read and updated, the
///   order and new-order rows inserted (5), and per item (TPC-C: 5 to 15, 10 on average)
///   the item and the stock read, the stock updated twice and the order line inserted (5),
///   COMMIT: 57;
/// - Payment: BEGIN, the warehouse and the district each read and updated (4), the
///   customer by last name in 60% (a count, the cursor opened, about 1.5 fetches, closed)
///   or by id, the customer updated, the history row inserted, COMMIT: about 11;
/// - Order-Status: BEGIN, the customer (as Payment), the last order's cursor (3) and its
///   lines' (opened, about 11 fetches, closed), COMMIT: about 21, read-only;
/// - Delivery: per district of 10, the oldest new order read and deleted, the order read
///   and updated, its lines updated and summed, the customer updated (7), BEGIN and
///   COMMIT: 72;
/// - Stock-Level: BEGIN, the district, the stock count, COMMIT: 4, read-only.
const TPCC_TYPES: [(&str, u64, bool); 5] =
    [("new-order", 57, true), ("payment", 11, true), ("order-status", 21, false), ("delivery", 72, true), ("stock-level", 4, false)];
/// Function calls of a backend's statement: PostgreSQL 15's backends ran 641,562
/// user-space instructions per pgbench (TPC-B-like) transaction of 7 statements, by
/// difference of two recordings (docs/GUIDE.md, "Generators beside the programs they stand
/// for"): 91,652 per statement, 358 calls of `CALL_INSTRUCTIONS`.
const STATEMENT_CALLS: u64 = 358;
/// Calls of the transaction monitor per statement (ecpg's and libpq's work: the query
/// sent, the result parsed into host variables) **[inferred]**: 2,048 instructions.
const TM_CALLS: u64 = 8;
/// Calls of a terminal per transaction (its input drawn, its screen written)
/// **[inferred]**: 4,096 instructions.
const TERMINAL_CALLS: u64 = 16;
/// The order a guest's transaction monitor runs them in, over and over: 11 New-Orders and
/// 11 Payments alternating, then one of each other type (25 transactions).
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
/// - TPC-C guest, as TPCC-UVa is built (tm.c: "executes the transactions the terminals
///   send in their order of arrival"): `threads` terminal processes (default 4), one
///   transaction monitor process and the one PostgreSQL backend it is connected to, each
///   its own address space (§6.1: "TPCC-UVa forks off many processes"). A terminal draws
///   its input (`TERMINAL_CALLS` calls over its 128 KiB binary), sends the transaction to
///   the monitor and sleeps until the reply: one operation (the monitor and the backend
///   count each transaction they finish too, under their own classes); it never thinks (keying and
///   think times are left out, so the guest is busy throughout). The monitor runs each
///   transaction as its statements (`TPCC_TYPES`, the types in the order `TPCC_CYCLE`): per
///   statement its own work (`TM_CALLS` calls over its 256 KiB binary) and a round trip to
///   the backend, asleep meanwhile. The backend, mapping the guest's 2 MiB PostgreSQL
///   binary (privately) and its 8 MiB shared buffer pool (shared), runs each statement as
///   `STATEMENT_CALLS` calls (about 92,000 instructions, recorded) of its type's code path:
///   per call, 24 accesses to its frame (two pages at a depth of the backend's 16-page
///   stack), 8 random ones to its 48-page heap (25% writes), and 8 accesses to each of four
///   buffer-pool pages (10% writes), the pages drawn per call Zipf(0.99) over the pool (the
///   B-tree upper levels and the warehouse and district rows are hot). The COMMIT of a
///   transaction that wrote waits for its log write. `ops` transactions per terminal
///   (default 7: 28 per guest, a whole `TPCC_CYCLE`). Until session 38 there were four
///   backends each running whole transactions of 40,000 to 460,000 instructions between
///   sleeps through dom0; the recording of PostgreSQL under pgbench showed a round trip
///   to the client every 92,000 instructions, which this structure now makes.
/// - vortex guest: one process that never sleeps (SPEC's vortex, an object database):
///   calls over a 512 KiB binary, each with 16 random accesses to a 32 MiB object heap and
///   16 to a 16-page stack (30% writes): TLB-hungry. It runs as long as the TPC-C guest.
/// - dom0: two daemons, each 10 calls over a 256 KiB binary with 32 accesses to its
///   16-page heap: xenstored, then 1 ms asleep; and the back-ends (blkback and netback as
///   one thread, on dom0's second VCPU), after each request or completion it serves.
/// - A TPC-C backend's log write is split-driver I/O (os/io.rs): it goes through dom0's
///   back-end (a request, `compute_cycles` of device time, a completion), as a Xen guest's
///   disk I/O does; so each transaction that writes wakes dom0 twice. The round trips
///   between the monitor and the backend stay in the guest (a Unix socket).
pub(super) fn vm_mix(cfg: &Config, w: &VmMixParams) -> Result<Workload> {
    use crate::workload::program::VmSpec;
    let test = if w.test.is_empty() { "tpcc-tpcc" } else { w.test.as_str() };
    if !matches!(test, "tpcc-tpcc" | "tpcc-vortex") {
        return Err(Error::config("workload.test", format!("{test:?} is not a vm-mix test: use \"tpcc-tpcc\" or \"tpcc-vortex\"")));
    }
    let pinned = match w.pinning.as_str() {
        "" | "none" => false,
        "0012" => true,
        other => return Err(Error::config("workload.pinning", format!("{other:?}: use \"none\" or \"0012\""))),
    };
    if pinned && cfg.cores() < 2 {
        return Err(Error::config("workload.pinning", "\"0012\" pins to CPUs 0 and 1: the machine needs two cores"));
    }
    let terminals = if w.threads == 0 { 4 } else { w.threads };
    let (ops, sleep) = (w.ops, w.compute_cycles);
    let mut rng = crate::rng::SplitMix64::derive(cfg.seed, 0x766d_6d69_78);
    let mut b = Builder::default();
    let root = b.group("root", 0);
    // Each guest its own disk: its own binary and database files.
    let postgres = [b.file("dom1-postgres", 512), b.file("dom2-postgres", 512)];
    let shm = [b.file("dom1-shared_buffers", 2048), b.file("dom2-shared_buffers", 2048)];
    let tm_bin = [b.file("dom1-tm", 64), b.file("dom2-tm", 64)];
    let terminal_bin = [b.file("dom1-terminal", 32), b.file("dom2-terminal", 32)];
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
        // The backend's code path of one statement of each transaction type (the same for
        // every statement of that type, and in both guests' backends).
        let pool = crate::workload::program::zipf_cdf(2048, 0.99);
        let statement_paths: Vec<Vec<Op>> = TPCC_TYPES
            .iter()
            .map(|_| {
                code_path(&mut rng, code, 512, STATEMENT_CALLS, &|rng| {
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
                })
            })
            .collect();
        let client_data = |_: &mut crate::rng::SplitMix64| vec![data(stack, 32, Pattern::Random, 0.25)];
        let tm_path = code_path(&mut rng, code, 64, TM_CALLS, &client_data);
        let terminal_path = code_path(&mut rng, code, 32, TERMINAL_CALLS, &client_data);
        // Tokens of this guest: a request and a reply per terminal, then the backend's
        // statement queue and the transaction monitor's replies.
        let first = b.w.tokens;
        let (request, reply) = (|t: u32| first + 2 * t, |t: u32| first + 2 * t + 1);
        let (to_backend, to_tm) = (first + 2 * terminals, first + 2 * terminals + 1);
        b.w.tokens = first + 2 * terminals + 2;
        // The transaction monitor serves the terminals in the order they queue, which with
        // terminals that never think is round robin; the k-th transaction of the guest is of
        // type TPCC_CYCLE[k % 25] (dom2 from another place in the cycle).
        let transactions = u64::from(terminals) * ops;
        let kind = |k: u64| TPCC_CYCLE[((k + (vm as u64 - 1) * 12) % TPCC_CYCLE.len() as u64) as usize];
        let mut tm_prog = Vec::new();
        let mut postgres_prog = Vec::new();
        for k in 0..transactions {
            let (_, statements, commit_writes) = TPCC_TYPES[kind(k)];
            let t = (k % u64::from(terminals)) as u32;
            tm_prog.push(Op::Take { token: request(t) });
            tm_prog.extend(times(statements, [tm_path.clone(), vec![Op::Post { token: to_backend }, Op::Take { token: to_tm }]].concat()));
            tm_prog.extend([Op::Post { token: reply(t) }, Op::CountOp]);
            let statement = &statement_paths[kind(k)];
            postgres_prog.extend(times(statements - 1, [vec![Op::Take { token: to_backend }], statement.clone(), vec![Op::Post { token: to_tm }]].concat()));
            // The COMMIT: a transaction that wrote waits for its log write (through dom0's
            // back-end, as the guest's disk I/O goes) before the reply.
            postgres_prog.push(Op::Take { token: to_backend });
            postgres_prog.extend(statement.iter().cloned());
            if commit_writes {
                postgres_prog.push(Op::Io { server: backend_thread, cycles: sleep });
            }
            postgres_prog.extend([Op::Post { token: to_tm }, Op::CountOp]);
        }
        tm_prog.push(Op::Exit);
        postgres_prog.push(Op::Exit);
        let postgres_prog = b.program(postgres_prog);
        let backend = b.process(
            &format!("dom{vm}-postgres"),
            root,
            vec![file_map(postgres[vm - 1], 0, 512 * PAGE, false, false), anon(64 * PAGE, true), file_map(shm[vm - 1], 0, 2048 * PAGE, true, true)],
        );
        b.thread(backend, &format!("dom{vm}-postgres"), &format!("dom{vm}-postgres"), Some(0), postgres_prog, false);
        vm_processes[vm].push(backend);
        let tm_prog = b.program(tm_prog);
        let tm = b.process(&format!("dom{vm}-tm"), root, vec![file_map(tm_bin[vm - 1], 0, 64 * PAGE, false, false), anon(16 * PAGE, true)]);
        b.thread(tm, &format!("dom{vm}-tm"), &format!("dom{vm}-tm"), Some(0), tm_prog, false);
        vm_processes[vm].push(tm);
        for t in 0..terminals {
            let mut prog = times(ops, [terminal_path.clone(), vec![Op::Post { token: request(t) }, Op::Take { token: reply(t) }, Op::CountOp]].concat());
            prog.push(Op::Exit);
            let prog = b.program(prog);
            let p = b.process(&format!("dom{vm}-terminal{t}"), root, vec![file_map(terminal_bin[vm - 1], 0, 32 * PAGE, false, false), anon(16 * PAGE, true)]);
            b.thread(p, &format!("dom{vm}-terminal{t}"), &format!("dom{vm}-tpcc"), Some(0), prog, false);
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
