//! Preset `tagtlb-p4`: the tag paper's §5 Simics machine (two P4 CPUs, 64-entry fully associative FIFO TLBs).
//!
//! Tag paper §5: Simics, two P4 CPUs, four 64-entry fully associative FIFO TLBs
//! (DTLB and ITLB, each split into 4 KB and large pages); no STLB, no walk caches;
//! one instruction per cycle.
//! Memory: §5's machine has 3 GB. Simics as configured there models no cache or DRAM
//! timing (the paper states none), so the model stays `flat` and the cache numbers
//! are the built-in ones (assumed; they matter only if a user turns `cache` on).
//! Idle CPUs: Simics as configured there models no idle states: waking costs nothing
//! beyond the context switch.

use serde_json::{json, Value};

pub struct TagtlbP4;

impl crate::registry::Plugin for TagtlbP4 {
    type Params = crate::registry::NoParams;
}

impl super::Preset for TagtlbP4 {
    fn machine() -> Value {
        json!({
            "sockets": 1, "cores_per_socket": 2, "base_cpi": 1.0,
            "idle": {"exit_ns": 0.0, "poll_ns": 0.0, "wake_ipi_ns": 0.0},
            "memory": {"model": "flat", "node_mib": 3072},
            "pt_cache": {"entries": 0},
            "tlb": {
                "tagging": "none",
                "l1d": {"entries": 64, "ways": 64, "replacement": "fifo", "latency": 0},
                "l1d_2m": {"entries": 64, "ways": 64, "replacement": "fifo", "latency": 0},
                "l1d_1g": {"entries": 0},
                "l1i": {"entries": 64, "ways": 64, "replacement": "fifo", "latency": 0},
                "l2": {"entries": 0},
                "pwc_pml4": {"entries": 0}, "pwc_pdpt": {"entries": 0}, "pwc_pd": {"entries": 0}
            }
        })
    }
}
