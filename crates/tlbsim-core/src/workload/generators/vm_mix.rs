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
        /// The OLTP guests' database back-ends; 0 = 4.
        pub threads: u32 = 0,
        /// Transactions each back-end runs.
        pub ops: u64 = 50,
        /// Cycles of device time of one I/O through dom0's back-end.
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
    let backends = if w.threads == 0 { 4 } else { w.threads };
    let (ops, sleep) = (w.ops, w.compute_cycles);
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
        let pool = crate::workload::program::zipf_cdf(2048, 0.99);
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
