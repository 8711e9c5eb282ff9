//! Machine presets (`machine.preset`). Each number carries its source: a paper's stated
//! hardware, a vendor manual, or a measurement on this workplace's machines. A preset is a
//! partial machine table merged over the built-in defaults; the user's own keys are merged
//! over the preset. One file per preset, one registry line each (below); `none` is the
//! built-in defaults and `host` this machine (`config/host.rs`).

use super::{CacheConfig, LevelConfig, MachineConfig, MemoryConfig, Tagging, TlbConfig};
use crate::error::Result;
use crate::types::Replacement::Lru;
use serde_json::{json, Value};

pub mod abis_haswell_2s;
pub mod didi_cmp;
pub mod fpr_amd_2s;
pub mod fpr_intel_2s;
pub mod milan_72;
pub mod mitosis_4s;
pub mod tagtlb_p4;

crate::registry! {
    what: "a machine preset", select: "machine.preset", table: "machine.preset", bound: Preset;
    "none" => BuiltIn, "the built-in defaults: a modern x86 core shaped like this workplace's machines";
    "host" => Host, "this machine, read from CPUID and sysfs (config/host.rs)";
    "abis-haswell-2s" => abis_haswell_2s::AbisHaswell2s, "ABIS §5's two-socket Haswell-EP server (2 × 24 cores, untagged TLBs as Linux 4.5)";
    "mitosis-4s" => mitosis_4s::Mitosis4s, "Mitosis §8's four-socket Haswell-EP machine (4 × 14 cores, 280/580-cycle DRAM, the cache model on)";
    "didi-cmp" => didi_cmp::DidiCmp, "DiDi Table I's 16-core chip (128-entry 4-way L1 TLBs, no private L2 TLB)";
    "tagtlb-p4" => tagtlb_p4::TagtlbP4, "the tag paper's §5 Simics machine (two P4 CPUs, 64-entry fully associative FIFO TLBs)";
    "fpr-intel-2s" => fpr_intel_2s::FprIntel2s, "FPR Table I's dual-socket Intel server (2 × 48 cores, PCIDs on)";
    "fpr-amd-2s" => fpr_amd_2s::FprAmd2s, "FPR Table I's dual-socket Zen 3 server (2 × 24 cores, PCIDs on)";
    "milan-72" => milan_72::Milan72, "the INVLPGB series' AMD Milan (36 cores × 2 threads = 72 CPUs, one socket assumed, PCIDs on)";
}

/// A preset: the machine table it sets (its file says where each number comes from).
pub trait Preset: crate::registry::Plugin {
    fn machine() -> Value;
}

/// `none`: nothing over the built-in defaults ([`builtin_machine`]).
pub struct BuiltIn;

impl crate::registry::Plugin for BuiltIn {
    type Params = crate::registry::NoParams;
}

impl Preset for BuiltIn {
    fn machine() -> Value {
        json!({})
    }
}

/// `host`: this machine.
pub struct Host;

impl crate::registry::Plugin for Host {
    type Params = crate::registry::NoParams;
}

impl Preset for Host {
    fn machine() -> Value {
        super::host::host_tree()
    }
}

/// The built-in defaults (`preset = "none"`): a modern x86 core shaped like this
/// workplace's machines.
pub fn builtin_machine() -> MachineConfig {
    MachineConfig {
        preset: "none".into(),
        storage: "none".into(),
        // This workplace's machines are KVM guests whose cpuidle driver is haltpoll with
        // guest_halt_poll_ns = 0 (read from /sys/module/haltpoll/parameters): an idle vCPU
        // halts at once, and a wake-up waits for the host to wake it. Measured with
        // bench/wake_latency.c on a Zen 3 guest (Linux 6.18), the sleeper's CPU idle for
        // 5 µs: a futex wake-to-run latency of 17.6 µs (median), less the modelled context
        // switch (1 µs); the waker's FUTEX_WAKE took 6.8 µs, less a null system call
        // (~0.4 µs). `tlbsim calibrate` measures both per host.
        // No exit_curve: one latency for every wake (a calibrated preset has the curve).
        idle: super::IdleConfig { exit_ns: 16_600.0, poll_ns: 0.0, wake_ipi_ns: 6_400.0, exit_curve: Vec::new(), wake_ipi_curve: Vec::new() },
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
            // Memory-level parallelism of this workplace's hosts (AMD EPYC, family 19h, Zen 3
            // by CPUID here): 22 outstanding L1 data-cache misses (AMD's Software
            // Optimization Guide for family 17h, its L1 data cache section: 22 miss address
            // buffers; whether the family 19h guide changes the figure was not checked here)
            // and a 256-entry retire queue (AMD's Software Optimization Guide for family 19h,
            // its retire control unit section). Section numbers are left out: they were
            // written from memory and could not be checked against the PDFs here.
            mshrs: 22,
            rob_entries: 256,
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
    struct Tree;
    impl Visit for Tree {
        type Output = Value;
        fn visit<T: Preset>(self, _name: &'static str) -> Value {
            T::machine()
        }
    }
    visit(name, Tree)
}
