//! Preset `milan-72`: the AMD Milan machine of the INVLPGB series' measurements (36 cores,
//! 72 CPUs; ../shared/research/modern_invalidation.md §3).
//!
//! The series' cover letters measure `tlb_flush2_threads` "on an AMD Milan system with 36
//! cores", and the merged commit (4afeb0ed1753) sweeps 1–72 threads "on a 72-CPU AMD
//! Milan": read as one machine of 36 cores with two SMT threads each. No Milan part has 36
//! cores (EPYC 7003 SKUs have 8–64), and the series states neither the part, the sockets
//! nor the NUMA mode: one socket, one NUMA node (NPS1) assumed. SMT is not modelled: each
//! of the 72 hardware threads is a core of its own, with its own TLBs (on Zen 3 the two
//! threads of a core share them competitively; will-it-scale's tasks touch one page each,
//! so capacity does not matter there). TLB: Zen 3's 64-entry fully associative L1 DTLB and
//! 2,048-entry L2 DTLB (AMD's Zen 3 optimization guide; the L2's associativity is not
//! published, 16 ways assumed), PCIDs on (Linux 6.13–6.15, the kernels measured).
//! Frequency not stated: 2.45 GHz assumed (an EPYC 7763's base clock).
//! Idle CPUs: bare metal; C1 (MWAIT) at 1 µs exit, as the `fpr-amd-2s` preset (AMD does
//! not publish its _CST latencies; assumed), no reschedule IPI to a CPU idle in MWAIT.
//! Memory-level parallelism (used when `memory.model = "cache"`): Zen 3's 22 outstanding
//! L1D misses and 256-entry retire queue, as the built-in machine.
//! INVLPGB's costs are the `linux-invlpgb` policy's parameters (assumed: no public
//! measurement), not the preset's.

use serde_json::{json, Value};

pub struct Milan72;

impl crate::registry::Plugin for Milan72 {
    type Params = crate::registry::NoParams;
}

impl super::Preset for Milan72 {
    fn machine() -> Value {
        json!({
            "sockets": 1, "cores_per_socket": 72, "frequency_ghz": 2.45,
            "idle": {"exit_ns": 1000.0, "poll_ns": 0.0, "wake_ipi_ns": 0.0},
            "memory": {"mshrs": 22, "rob_entries": 256},
            "tlb": {
                "tagging": "pcid",
                "l1d": {"entries": 64, "ways": 64, "replacement": "lru", "latency": 0},
                "l2": {"entries": 2048, "ways": 16, "replacement": "lru", "latency": 7}
            }
        })
    }
}
