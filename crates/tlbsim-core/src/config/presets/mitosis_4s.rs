//! Preset `mitosis-4s`: Mitosis §8's four-socket Haswell-EP machine (4 × 14 cores, 280/580-cycle DRAM, the cache model on).
//!
//! Mitosis §8: 4 sockets × 14 cores, 2.20 GHz, per-core two-level TLB with 64 + 1024
//! entries, local/remote DRAM 280/580 cycles. Associativity is not stated: Haswell's
//! 4-way L1 and 8-way STLB (Intel optimisation manual).
//! Memory: Mitosis §8's data accesses matter (§3: page-table and data lines compete
//! in the LLC), so the cache model is on: L3 35 MB per socket (§8), modelled as 35-way
//! × 16,384 sets (the simulator needs power-of-two sets; Haswell-EP's L3 is 20-way
//! per slice: the capacity is the paper's, the associativity an approximation);
//! private L2 256 KiB 8-way (Intel optimisation manual, Haswell); 28 / 11 GB/s (§8).
//! Memory-level parallelism: 10 L1D fill buffers (misses in flight) and a 192-entry
//! reorder buffer per Haswell core (Intel 64 and IA-32 Architectures Optimization Reference
//! Manual, its Haswell microarchitecture section (§2.2 in revision 031, September 2015;
//! the numbering moves between revisions): 192 ROB entries, and the L1 DCU's 10 line fill
//! buffers, as in Sandy Bridge; the section numbers were not re-checked against a PDF here).
//! Memory per socket: 128 GB (§8: 512 GB over the four sockets), so that GUPS' 64 GB
//! working set (Table 1) fits on one node as the paper's numactl runs place it.
//! Idle CPUs: bare metal under intel_idle, whose Haswell table (hsw_cstates) gives C1 an
//! exit latency of 2 µs (deeper states not modelled).
//! The waker sends no reschedule IPI: a CPU idle in MWAIT monitors its thread flags, and
//! setting TIF_NEED_RESCHED wakes it (set_nr_and_not_polling).

use serde_json::{json, Value};

pub struct Mitosis4s;

impl crate::registry::Plugin for Mitosis4s {
    type Params = crate::registry::NoParams;
}

impl super::Preset for Mitosis4s {
    fn machine() -> Value {
        json!({
            "sockets": 4, "cores_per_socket": 14, "frequency_ghz": 2.2,
            "idle": {"exit_ns": 2000.0, "poll_ns": 0.0, "wake_ipi_ns": 0.0},
            "memory": {"node_mib": 128 << 10, "local_latency": 280, "remote_latency": 580, "model": "cache",
                       "llc_bytes": 35u64 << 20, "llc_ways": 35, "llc_latency": 40,
                       "private_bytes": 256 << 10, "private_ways": 8,
                       "bandwidth_gbps_local": 28.0, "bandwidth_gbps_remote": 11.0,
                       "mshrs": 10, "rob_entries": 192},
            "tlb": {
                "l1d": {"entries": 64, "ways": 4, "replacement": "lru", "latency": 0},
                "l2": {"entries": 1024, "ways": 8, "replacement": "lru", "latency": 7}
            }
        })
    }
}
