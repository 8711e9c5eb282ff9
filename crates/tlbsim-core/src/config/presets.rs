//! Machine presets. Each number carries its source: a paper's stated hardware, a vendor
//! manual, or a measurement on this workplace's machines. A preset is a partial machine
//! table merged over the built-in defaults; the user's own keys are merged over the preset.

use super::{CacheConfig, LevelConfig, MachineConfig, MemoryConfig, Tagging, TlbConfig};
use crate::error::{Error, Result};
use crate::types::Replacement::Lru;
use serde_json::{json, Value};

pub const NAMES: &[&str] = &["none", "host", "abis-haswell-2s", "mitosis-4s", "didi-cmp", "tagtlb-p4", "fpr-intel-2s", "fpr-amd-2s"];

/// The built-in defaults (`preset = "none"`): a modern x86 core shaped like this
/// workplace's machines.
pub fn builtin_machine() -> MachineConfig {
    MachineConfig {
        preset: "none".into(),
        storage: "none".into(),
        sockets: 1,
        cores_per_socket: 2,
        // Nominal; no paper or measurement fixes it. Only converts cycles to seconds.
        frequency_ghz: 3.0,
        base_cpi: 1.0,
        memory: MemoryConfig {
            // Mitosis §8: local DRAM ~280 cycles, remote socket 580 cycles (E7-4850v3).
            local_latency: 280,
            remote_latency: 580,
            latency_matrix: Vec::new(),
            node_mib: 32 * 1024,
            model: super::MemoryModel::Flat,
            // A 32 MiB, 16-way last-level cache (the order of current server parts; AMD Zen 5
            // CCD L3 is 32 MiB 16-way, AMD optimisation guide), 40 cycles as pt_cache below.
            llc_bytes: 32 << 20,
            llc_ways: 16,
            llc_latency: 40,
            // Private L2 of 1 MiB, 16-way (Zen 4/5 and Intel Golden Cove class; vendor guides).
            private_bytes: 1 << 20,
            private_ways: 16,
            // Mitosis §8 measured 28 GB/s local and 11 GB/s remote on its E7-4850v3.
            bandwidth_gbps_local: 28.0,
            bandwidth_gbps_remote: 11.0,
        },
        // 2 MiB of page-table lines per socket, 16-way; 40 cycles is a last-level-cache hit
        // on current Intel and AMD parts (vendor optimisation manuals: ~40-50 cycles).
        pt_cache: CacheConfig { entries: 32768, ways: 16, replacement: Lru, latency: 40 },
        tlb: TlbConfig {
            tagging: Tagging::Pcid,
            tmt_entries: 4,
            sl_quota_fraction: Vec::new(),
            partition_controller: crate::types::PartitionController::Static,
            partition_goal: crate::types::PartitionGoal::MinMeanMptti,
            partition_goal_domain: 1,
            partition_goal_mptti: 0.0,
            partition_epoch_instructions: 1_000_000,
            partition_at_flush: false,
            // Measured on this workplace's machines (Zen 5 under KVM): L1 DTLB 96 entries,
            // fully associative. Latency 0: an L1 TLB is looked up in parallel with the
            // (virtually indexed) L1 data cache, so a hit adds nothing to the base CPI.
            l1d: LevelConfig::new(96, 96, Lru, 0),
            // Separate L1 structures for large pages, Intel style (Intel optimisation manual,
            // Skylake: 32 entries 4-way for 2 MiB, 4 entries fully associative for 1 GiB).
            l1d_2m: LevelConfig::new(32, 4, Lru, 0),
            l1d_1g: LevelConfig::new(4, 4, Lru, 0),
            // AMD Zen 4/5 L1 ITLB: 64 entries fully associative (AMD optimisation guide).
            l1i: LevelConfig::new(64, 64, Lru, 0),
            // Measured here: L2 DTLB 4096 entries. 16 ways is an assumption (AMD documents
            // 16-way for Zen 5's 4096-entry L2 DTLB); 7 cycles: Intel manual's STLB latency.
            l2: LevelConfig::new(4096, 16, Lru, 7),
            // Paging-structure caches: sizes as reported for Intel cores by Barr, Cox and
            // Rixner, "Translation Caching", ISCA 2010 (2 PML4, 4 PDPT, 32 PD entries).
            pwc_pml4: LevelConfig::new(2, 2, Lru, 1),
            pwc_pdpt: LevelConfig::new(4, 4, Lru, 1),
            pwc_pd: LevelConfig::new(32, 4, Lru, 1),
            quirk_dirty_sets_accessed: true,
            quirk_faulting_walk_sets_accessed: false,
            involuntary_full_flush_per_mcycles: 0.0,
        },
    }
}

/// The machine table of preset `name`.
pub fn preset_tree(name: &str) -> Result<Value> {
    Ok(match name {
        "none" => json!({}),
        "host" => super::host::host_tree(),
        // ABIS §5: two-socket Dell R630, "Intel 24-cores Haswell EP CPUs" (read as 24 cores
        // per socket; PBZIP2 runs up to 48 threads). TLBs: Intel optimisation manual,
        // Haswell: L1 DTLB 64 entries 4-way (4K), 32 4-way (2M), 4 fully assoc. (1G);
        // ITLB 128 8-way; STLB 1024 8-way. No PCID in Linux 4.5 (ABIS §2.3): untagged.
        // DRAM latency: not stated by ABIS; Mitosis §8 measured 280/580 cycles on a
        // Haswell-EP-generation E7-4850v3, used here. 2.2 GHz: same source, assumption.
        // Memory (used when `memory.model = "cache"`; ABIS's results are shootdown-bound, so
        // the preset stays `flat`): ABIS states no cache sizes. L3: Haswell-EP has 2.5 MB
        // per core (Intel E5-2600 v3 datasheet); 30 MB, the 12-core part's, assumed, modelled
        // as 30-way × 16,384 sets (power-of-two sets; the real L3 is 20-way); 40 cycles as
        // mitosis-4s. Private L2 256 KiB 8-way (Intel optimisation manual, Haswell).
        // Bandwidth: not stated; Mitosis §8's 28 / 11 GB/s on the same generation, assumed.
        "abis-haswell-2s" => json!({
            "sockets": 2, "cores_per_socket": 24, "frequency_ghz": 2.2,
            "memory": {"local_latency": 280, "remote_latency": 580,
                       "llc_bytes": 30u64 << 20, "llc_ways": 30, "llc_latency": 40,
                       "private_bytes": 256 << 10, "private_ways": 8,
                       "bandwidth_gbps_local": 28.0, "bandwidth_gbps_remote": 11.0},
            "tlb": {
                "tagging": "none",
                "l1d": {"entries": 64, "ways": 4, "replacement": "lru", "latency": 0},
                "l1d_2m": {"entries": 32, "ways": 4, "replacement": "lru", "latency": 0},
                "l1d_1g": {"entries": 4, "ways": 4, "replacement": "lru", "latency": 0},
                "l1i": {"entries": 128, "ways": 8, "replacement": "lru", "latency": 0},
                "l2": {"entries": 1024, "ways": 8, "replacement": "lru", "latency": 7}
            }
        }),
        // Mitosis §8: 4 sockets × 14 cores, 2.20 GHz, per-core two-level TLB with 64 + 1024
        // entries, local/remote DRAM 280/580 cycles. Associativity is not stated: Haswell's
        // 4-way L1 and 8-way STLB (Intel optimisation manual).
        // Memory: Mitosis §8's data accesses matter (§3: page-table and data lines compete
        // in the LLC), so the cache model is on: L3 35 MB per socket (§8), modelled as 35-way
        // × 16,384 sets (the simulator needs power-of-two sets; Haswell-EP's L3 is 20-way
        // per slice: the capacity is the paper's, the associativity an approximation);
        // private L2 256 KiB 8-way (Intel optimisation manual, Haswell); 28 / 11 GB/s (§8).
        "mitosis-4s" => json!({
            "sockets": 4, "cores_per_socket": 14, "frequency_ghz": 2.2,
            "memory": {"local_latency": 280, "remote_latency": 580, "model": "cache",
                       "llc_bytes": 35u64 << 20, "llc_ways": 35, "llc_latency": 40,
                       "private_bytes": 256 << 10, "private_ways": 8,
                       "bandwidth_gbps_local": 28.0, "bandwidth_gbps_remote": 11.0},
            "tlb": {
                "l1d": {"entries": 64, "ways": 4, "replacement": "lru", "latency": 0},
                "l2": {"entries": 1024, "ways": 8, "replacement": "lru", "latency": 7}
            }
        }),
        // DiDi Table I: per-core TLB 128 entries, 4-way, 2 cycles; 32-256 cores (set
        // cores_per_socket; 16 here). One chip. No second-level private TLB: DiDi's shared
        // directory is its L2. Frequency: Table II's Intel platform, 2.67 GHz.
        // Memory (Table I; used when `memory.model = "cache"`): private L1 64 KB split D/I,
        // 4-way, 3 cycles (the data half, 32 KiB, is the private cache); shared L2 8 MB
        // 8-way, 22 cycles (the LLC); 4 controllers × 2 channels of DDR3-800 = 8 × 6.4 GB/s
        // = 51.2 GB/s (one chip: local and remote alike). DRAM latency: not stated; the
        // built-in 280 cycles (Mitosis §8) assumed.
        "didi-cmp" => json!({
            "sockets": 1, "cores_per_socket": 16, "frequency_ghz": 2.67,
            "memory": {"llc_bytes": 8u64 << 20, "llc_ways": 8, "llc_latency": 22,
                       "private_bytes": 32 << 10, "private_ways": 4,
                       "bandwidth_gbps_local": 51.2, "bandwidth_gbps_remote": 51.2},
            "tlb": {
                "l1d": {"entries": 128, "ways": 4, "replacement": "lru", "latency": 2},
                "l2": {"entries": 0}
            }
        }),
        // Tag paper §5: Simics, two P4 CPUs, four 64-entry fully associative FIFO TLBs
        // (DTLB and ITLB, each split into 4 KB and large pages); no STLB, no walk caches;
        // one instruction per cycle.
        // Memory: §5's machine has 3 GB. Simics as configured there models no cache or DRAM
        // timing (the paper states none), so the model stays `flat` and the cache numbers
        // are the built-in ones (assumed; they matter only if a user turns `cache` on).
        "tagtlb-p4" => json!({
            "sockets": 1, "cores_per_socket": 2, "base_cpi": 1.0,
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
        }),
        // FPR Table I, "Intel": a dual-socket "96 core server" with 768 GB; its CPU model is
        // lost in the text. Read as 2 sockets × 48 cores (FPR §V-A1: I/O "drops when crossing
        // NUMA domains at 24 cores and socket domains at 48 cores"; the sub-NUMA domains are
        // not modelled). TLB: §II-B "up to 2,048 entries" for the L2; the L1 DTLB 64 entries
        // 4-way (Ice Lake-SP / Sapphire Rapids, the Xeons of that era, Intel optimisation
        // manual); PCIDs on (Linux 5.15). Frequency not stated: 2.4 GHz assumed. Memory
        // latencies and caches: the built-in defaults (not stated).
        "fpr-intel-2s" => json!({
            "sockets": 2, "cores_per_socket": 48, "frequency_ghz": 2.4,
            "tlb": {
                "tagging": "pcid",
                "l1d": {"entries": 64, "ways": 4, "replacement": "lru", "latency": 0},
                "l2": {"entries": 2048, "ways": 16, "replacement": "lru", "latency": 7}
            }
        }),
        // FPR Table I, "AMD": a dual-socket Zen 3 server (its reference [11]) with 256 GB and
        // a Toshiba PM5 SAS SSD; "the AMD server only has 48 cores" (§V-B), 96 threads with
        // SMT: 2 sockets × 24 cores (SMT not modelled). TLB: Zen 3's 64-entry fully
        // associative L1 DTLB and 2,048-entry L2 DTLB (AMD's Zen 3 optimization guide; the
        // L2's associativity is not published, 16 ways assumed); PCIDs on (Linux 5.15). The
        // CPU model is not stated: 2.65 GHz (a 24-core EPYC 7413's base clock) assumed.
        "fpr-amd-2s" => json!({
            "sockets": 2, "cores_per_socket": 24, "frequency_ghz": 2.65,
            "tlb": {
                "tagging": "pcid",
                "l1d": {"entries": 64, "ways": 64, "replacement": "lru", "latency": 0},
                "l2": {"entries": 2048, "ways": 16, "replacement": "lru", "latency": 7}
            }
        }),
        other => return Err(Error::config("machine.preset", format!("unknown preset {other:?}; known: {}", NAMES.join(", ")))),
    })
}
