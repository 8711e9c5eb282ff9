//! Preset `fpr-intel-2s`: FPR Table I's dual-socket Intel server (2 × 48 cores, PCIDs on).
//!
//! FPR Table I, "Intel": a dual-socket "96 core server" with 768 GB; its CPU model is
//! lost in the text. Read as 2 sockets × 48 cores (FPR §V-A1: I/O "drops when crossing
//! NUMA domains at 24 cores and socket domains at 48 cores"; the sub-NUMA domains are
//! not modelled). TLB: §II-B "up to 2,048 entries" for the L2; the L1 DTLB 64 entries
//! 4-way (Ice Lake-SP / Sapphire Rapids, the Xeons of that era, Intel optimisation
//! manual); PCIDs on (Linux 5.15). Frequency not stated: 2.4 GHz assumed. Memory
//! latencies and caches: the built-in defaults (not stated).
//! Memory-level parallelism (used when `memory.model = "cache"`): Ice Lake-SP's 12 L1D
//! fill buffers and 352-entry reorder buffer (Intel optimisation manual, its Ice Lake
//! client / Sunny Cove microarchitecture section; the section number is not given, as it
//! moves between revisions and was not checked here), the earlier of the two Xeons named above.
//! Idle CPUs: bare metal under intel_idle, whose Ice Lake-SP and Sapphire Rapids tables
//! (icx_cstates, spr_cstates) give C1 an exit latency of 1 µs (deeper states not
//! modelled).
//! The waker sends no reschedule IPI: a CPU idle in MWAIT monitors its thread flags, and
//! setting TIF_NEED_RESCHED wakes it (set_nr_and_not_polling).

use serde_json::{json, Value};

pub struct FprIntel2s;

impl crate::registry::Plugin for FprIntel2s {
    type Params = crate::registry::NoParams;
}

impl super::Preset for FprIntel2s {
    fn machine() -> Value {
        json!({
            "sockets": 2, "cores_per_socket": 48, "frequency_ghz": 2.4,
            "idle": {"exit_ns": 1000.0, "poll_ns": 0.0, "wake_ipi_ns": 0.0},
            "memory": {"mshrs": 12, "rob_entries": 352},
            "tlb": {
                "tagging": "pcid",
                "l1d": {"entries": 64, "ways": 4, "replacement": "lru", "latency": 0},
                "l2": {"entries": 2048, "ways": 16, "replacement": "lru", "latency": 7}
            }
        })
    }
}
