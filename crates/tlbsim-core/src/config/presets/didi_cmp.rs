//! Preset `didi-cmp`: DiDi Table I's 16-core chip (128-entry 4-way L1 TLBs, no private L2 TLB).
//!
//! DiDi Table I: per-core TLB 128 entries, 4-way, 2 cycles; 32-256 cores (set
//! cores_per_socket; 16 here). One chip. No second-level private TLB: DiDi's shared
//! directory is its L2. Frequency: Table II's Intel platform, 2.67 GHz.
//! Memory (Table I; used when `memory.model = "cache"`): private L1 64 KB split D/I,
//! 4-way, 3 cycles (the data half, 32 KiB, is the private cache); shared L2 8 MB
//! 8-way, 22 cycles (the LLC); 4 controllers × 2 channels of DDR3-800 = 8 × 6.4 GB/s
//! = 51.2 GB/s (one chip: local and remote alike). DRAM latency: not stated; the
//! built-in 280 cycles (Mitosis §8) assumed.
//! Memory-level parallelism: Table I states no miss-handling resources; `mshrs = 0`
//! (misses serial, the model before issue 46) is kept, assumed.
//! Idle CPUs: DiDi's simulator models no idle states (none stated): waking costs nothing
//! beyond the context switch.

use serde_json::{json, Value};

pub struct DidiCmp;

impl crate::registry::Plugin for DidiCmp {
    type Params = crate::registry::NoParams;
}

impl super::Preset for DidiCmp {
    fn machine() -> Value {
        json!({
            "sockets": 1, "cores_per_socket": 16, "frequency_ghz": 2.67,
            "idle": {"exit_ns": 0.0, "poll_ns": 0.0, "wake_ipi_ns": 0.0},
            "memory": {"llc_bytes": 8u64 << 20, "llc_ways": 8, "llc_latency": 22,
                       "private_bytes": 32 << 10, "private_ways": 4,
                       "bandwidth_gbps_local": 51.2, "bandwidth_gbps_remote": 51.2,
                       "mshrs": 0},
            "tlb": {
                "l1d": {"entries": 128, "ways": 4, "replacement": "lru", "latency": 2},
                "l2": {"entries": 0}
            }
        })
    }
}
