//! Preset `fpr-amd-2s`: FPR Table I's dual-socket Zen 3 server (2 × 24 cores, PCIDs on).
//!
//! FPR Table I, "AMD": a dual-socket Zen 3 server (its reference [11]) with 256 GB and
//! a Toshiba PM5 SAS SSD; "the AMD server only has 48 cores" (§V-B), 96 threads with
//! SMT: 2 sockets × 24 cores (SMT not modelled). TLB: Zen 3's 64-entry fully
//! associative L1 DTLB and 2,048-entry L2 DTLB (AMD's Zen 3 optimization guide; the
//! L2's associativity is not published, 16 ways assumed); PCIDs on (Linux 5.15). The
//! CPU model is not stated: 2.65 GHz (a 24-core EPYC 7413's base clock) assumed.
//! Memory-level parallelism (used when `memory.model = "cache"`): Zen 3's 22 outstanding
//! L1D misses and 256-entry retire queue, as the built-in machine (AMD's optimization
//! guides for families 17h and 19h).
//! Idle CPUs: bare metal; Linux takes AMD's idle states from ACPI _CST, which AMD does
//! not publish: C1 (MWAIT) at 1 µs, as Intel's current parts, assumed (deeper states
//! not modelled).
//! The waker sends no reschedule IPI: a CPU idle in MWAIT monitors its thread flags, and
//! setting TIF_NEED_RESCHED wakes it (set_nr_and_not_polling).

use serde_json::{json, Value};

pub struct FprAmd2s;

impl crate::registry::Plugin for FprAmd2s {
    type Params = crate::registry::NoParams;
}

impl super::Preset for FprAmd2s {
    fn machine() -> Value {
        json!({
            "sockets": 2, "cores_per_socket": 24, "frequency_ghz": 2.65,
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
