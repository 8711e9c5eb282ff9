//! Preset `abis-haswell-2s`: ABIS §5's two-socket Haswell-EP server (2 × 24 cores, untagged TLBs as Linux 4.5).
//!
//! ABIS §5: two-socket Dell R630, "Intel 24-cores Haswell EP CPUs" (read as 24 cores
//! per socket; PBZIP2 runs up to 48 threads). TLBs: Intel optimisation manual,
//! Haswell: L1 DTLB 64 entries 4-way (4K), 32 4-way (2M), 4 fully assoc. (1G);
//! ITLB 128 8-way; STLB 1024 8-way. No PCID in Linux 4.5 (ABIS §2.3): untagged.
//! DRAM latency: not stated by ABIS; Mitosis §8 measured 280/580 cycles on a
//! Haswell-EP-generation E7-4850v3, used here. 2.2 GHz: same source, assumption.
//! Memory (used when `memory.model = "cache"`; ABIS's results are shootdown-bound, so
//! the preset stays `flat`): ABIS states no cache sizes. L3: Haswell-EP has 2.5 MB
//! per core (Intel E5-2600 v3 datasheet); 30 MB, the 12-core part's, assumed, modelled
//! as 30-way × 16,384 sets (power-of-two sets; the real L3 is 20-way); 40 cycles as
//! mitosis-4s. Private L2 256 KiB 8-way (Intel optimisation manual, Haswell).
//! Bandwidth: not stated; Mitosis §8's 28 / 11 GB/s on the same generation, assumed.
//! Memory-level parallelism: 10 L1D fill buffers (misses in flight) and a 192-entry
//! reorder buffer per Haswell core (Intel 64 and IA-32 Architectures Optimization Reference
//! Manual, its Haswell microarchitecture section (§2.2 in revision 031, September 2015;
//! the numbering moves between revisions): 192 ROB entries, and the L1 DCU's 10 line fill
//! buffers, as in Sandy Bridge; the section numbers were not re-checked against a PDF here).
//! Idle CPUs: bare metal under intel_idle, whose Haswell table (hsw_cstates) gives C1 an
//! exit latency of 2 µs; the deeper states the menu governor picks for longer idle
//! periods (C1E 10 µs, C6 133 µs) are not modelled.
//! The waker sends no reschedule IPI: a CPU idle in MWAIT monitors its thread flags, and
//! setting TIF_NEED_RESCHED wakes it (set_nr_and_not_polling).

use serde_json::{json, Value};

pub struct AbisHaswell2s;

impl crate::registry::Plugin for AbisHaswell2s {
    type Params = crate::registry::NoParams;
}

impl super::Preset for AbisHaswell2s {
    fn machine() -> Value {
        json!({
            "sockets": 2, "cores_per_socket": 24, "frequency_ghz": 2.2,
            "idle": {"exit_ns": 2000.0, "poll_ns": 0.0, "wake_ipi_ns": 0.0},
            "memory": {"local_latency": 280, "remote_latency": 580,
                       "llc_bytes": 30u64 << 20, "llc_ways": 30, "llc_latency": 40,
                       "private_bytes": 256 << 10, "private_ways": 8,
                       "bandwidth_gbps_local": 28.0, "bandwidth_gbps_remote": 11.0,
                       "mshrs": 10, "rob_entries": 192},
            "tlb": {
                "tagging": "none",
                "l1d": {"entries": 64, "ways": 4, "replacement": "lru", "latency": 0},
                "l1d_2m": {"entries": 32, "ways": 4, "replacement": "lru", "latency": 0},
                "l1d_1g": {"entries": 4, "ways": 4, "replacement": "lru", "latency": 0},
                "l1i": {"entries": 128, "ways": 8, "replacement": "lru", "latency": 0},
                "l2": {"entries": 1024, "ways": 8, "replacement": "lru", "latency": 7}
            }
        })
    }
}
