//! Run configuration: TOML (or a Python dict) → defaults < preset < file < `--set`
//! overrides → a typed, validated [`Config`].
//!
//! Errors name the dotted key and what is allowed, and are raised before anything runs.
//! Every key has a default; the effective config ([`Config::to_json`]) writes every key
//! out, so a run can be repeated anywhere from its `config.json` alone.

/// Upper bound of `machine.memory.mshrs`: memsys keeps per-core arrays this long.
pub const MAX_MSHRS: usize = 64;

pub mod costs;
pub mod host;
pub mod presets;
mod silent;
pub mod storage;

use crate::error::{Error, Result};
use crate::types::{NodeId, PartitionController, PartitionGoal, Replacement};
pub use costs::CostsConfig;
use serde::{Deserialize, Serialize};

pub use crate::tree::{apply_override, load_toml_file, merge, to_toml};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Seed for every random choice of the run (random replacement, synthetic workloads).
    pub seed: u64,
    pub machine: MachineConfig,
    pub os: OsConfig,
    pub workload: WorkloadConfig,
    /// Cycles the OS model charges per kernel operation (OS-mode workloads).
    pub costs: CostsConfig,
    /// Trace-mode and engine options that are not part of the machine.
    pub sim: SimConfig,
    /// Per-policy parameters: `[coherence.<name>]` for each registered policy
    /// (`crate::coherence::NAMES`), with every key's default written out.
    pub coherence: serde_json::Map<String, serde_json::Value>,
    /// `[recycling.<name>]`: each recycling scheme's parameters (`os.recycling` selects one).
    pub recycling: serde_json::Map<String, serde_json::Value>,
    /// `[placement.<name>]`: each page-table backend's parameters (`os.pt_placement`).
    pub placement: serde_json::Map<String, serde_json::Value>,
    /// `[hypervisor.<name>]`: each VCPU scheduler's parameters (`os.hypervisor`).
    pub hypervisor: serde_json::Map<String, serde_json::Value>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seed: 1,
            machine: MachineConfig::default(),
            os: OsConfig::default(),
            workload: WorkloadConfig::default(),
            costs: CostsConfig::default(),
            sim: SimConfig::default(),
            // The plug-ins' tables: their registries fill in every default (lib.rs), since
            // config knows the document's shape, not the plug-ins.
            coherence: Default::default(),
            recycling: Default::default(),
            placement: Default::default(),
            hypervisor: Default::default(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MachineConfig {
    /// Name of the preset the numbers below started from (`host`, `abis-haswell-2s`,
    /// `mitosis-4s`, `didi-cmp`, `tagtlb-p4`, or `none` for the built-in defaults).
    pub preset: String,
    /// Sockets (one NUMA node each).
    pub sockets: u32,
    /// Cores per socket (one hardware thread each).
    pub cores_per_socket: u32,
    /// Clock frequency, to turn cycles into seconds.
    pub frequency_ghz: f64,
    /// Cycles per instruction of work that is not address translation: the core model is
    /// a fixed-CPI pipeline plus the translation stalls tlbsim simulates.
    pub base_cpi: f64,
    pub memory: MemoryConfig,
    /// Per-socket cache of page-table lines (64-byte lines of page-table pages), standing
    /// for the data caches that keep hot upper levels close (Mitosis §3 on GUPS).
    pub pt_cache: CacheConfig,
    pub tlb: TlbConfig,
    /// The block device behind the page cache (`crate::config::storage`): `none` (the
    /// default: a page-cache miss stalls the core for `costs.read_page`), `nullblk`,
    /// `ramdisk`, `pmem`, `optane-ssd` or `ssd` (FPR §V-A2's devices).
    pub storage: String,
    /// What waking an idle CPU costs (docs/OS_MODEL.md "Idle CPUs").
    pub idle: IdleConfig,
}

/// `machine.idle`: an idle CPU polls for a while, then halts; a wake-up that finds it
/// halted waits for the idle state's exit (bare metal: the C-state's exit latency; a KVM
/// guest: the host waking the halted vCPU's thread and entering the VM again).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct IdleConfig {
    /// Nanoseconds from a wake-up (of a thread, by a lock release, a timer or I/O) of a
    /// halted CPU until it can switch to the woken thread, beyond the context switch
    /// `costs.context_switch` charges.
    pub exit_ns: f64,
    /// Nanoseconds an idle CPU polls before it halts (cpuidle's poll state; on a KVM
    /// guest the haltpoll driver's `guest_halt_poll_ns`): a wake-up within them costs no
    /// exit latency. 0: it halts at once.
    pub poll_ns: f64,
    /// Nanoseconds the waker spends sending the reschedule IPI that wakes a halted CPU
    /// (an x2APIC ICR write; on a KVM guest without posted-interrupt virtualisation it
    /// exits to the host, which wakes the vCPU's thread). A CPU that polls needs none.
    pub wake_ipi_ns: f64,
    /// The exit latency as a distribution that depends on how long the CPU was idle:
    /// points `[idle_ns, p10_ns, median_ns, p90_ns]`, in increasing `idle_ns`. Each wake of
    /// a halted CPU draws its latency from the point's quantiles (interpolated in the idle
    /// time, flat beyond the first and last point). Empty: every wake costs `exit_ns`. On
    /// a KVM guest the host's own idle deepens with the vCPU's halt (KVM's halt-polling,
    /// then the host scheduler), and the spread keeps a woken thread from arriving at the
    /// same point of its waker's loop every time; `tlbsim calibrate` measures it
    /// (bench/wake_latency; docs/OS_MODEL.md "Idle CPUs").
    pub exit_curve: Vec<[f64; 4]>,
    /// The waker's reschedule IPI as a function of how long the woken CPU was idle: points
    /// `[idle_ns, waker_ns]`, in increasing `idle_ns`, interpolated and flat beyond the
    /// first and last point. Empty: every wake costs `wake_ipi_ns`. On a KVM guest the
    /// IPI's VM exit waits for the host to wake the halted vCPU's thread, longer the deeper
    /// the host's own idle (bench/wake_latency's `waker_median_ns` by idle gap: 8.3 µs
    /// after 2 µs and 17.4 µs after 100 µs on a Zen 3 guest, 9.6 and 11.0 µs after 2 and
    /// 500 µs on a Sapphire Rapids one); `tlbsim calibrate` measures it.
    pub wake_ipi_curve: Vec<[f64; 2]>,
}

impl Default for IdleConfig {
    fn default() -> Self {
        presets::builtin_machine().idle
    }
}

impl Default for MachineConfig {
    fn default() -> Self {
        presets::builtin_machine()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// Cycles for a page-table read from the local node's DRAM.
    pub local_latency: u32,
    /// Cycles for a read from another socket's DRAM.
    pub remote_latency: u32,
    /// Full sockets × nodes latency matrix in cycles; when non-empty it replaces
    /// local/remote (row = requesting socket, column = node holding the line).
    pub latency_matrix: Vec<Vec<u32>>,
    /// Memory per NUMA node, in MiB (frames are allocated from it; running out is an error).
    pub node_mib: u64,
    /// `flat`: a data access costs only its share of `base_cpi` (pure TLB studies; page-table
    /// reads go through `pt_cache`). `cache`: data and page-table lines share a per-socket
    /// last-level cache (`llc_*`, replacing `pt_cache`), behind a per-core private cache
    /// (`private_*`); a miss reads the DRAM of the node the line lives on, at that node's
    /// latency plus the wait for its bandwidth (`bandwidth_gbps_*`). docs/OS_MODEL.md
    /// "Memory".
    pub model: MemoryModel,
    /// Last-level cache per socket (model = "cache"): bytes, ways (bytes/64/ways sets must be
    /// a power of two), hit latency in cycles.
    pub llc_bytes: u64,
    /// Ways of the last-level cache (model = "cache").
    pub llc_ways: u32,
    /// Cycles of a last-level cache hit (model = "cache").
    pub llc_latency: u32,
    /// Per-core private cache standing for L1 + L2 (model = "cache"): its hits cost nothing
    /// beyond `base_cpi`; its misses go to the last-level cache.
    pub private_bytes: u64,
    /// Ways of the per-core private cache (model = "cache").
    pub private_ways: u32,
    /// DRAM bandwidth a socket gets from its own node and from another node, in GB/s: each
    /// 64-byte line read occupies the node's channel for 64 / (GB/s / GHz) cycles, and a
    /// read waits for the reads before it (a FIFO per node).
    pub bandwidth_gbps_local: f64,
    /// DRAM bandwidth in GB/s a socket gets from another socket's node (see `bandwidth_gbps_local`).
    pub bandwidth_gbps_remote: f64,
    /// Memory-level parallelism (model = "cache"): last-level misses a core keeps in flight
    /// (its L1 data cache's fill buffers / miss-status holding registers; from each preset's
    /// vendor manual). Independent data misses within `rob_entries` of each other overlap up
    /// to this deep, each still taking its share of the node's bandwidth; page-walk reads
    /// and the kernel's lines stay serial. 0: no overlap, every miss pays its full latency
    /// and the stream prefetcher's lines only their bandwidth (the model before issue 46).
    /// At most 64. `crate::memsys`.
    pub mshrs: u32,
    /// The out-of-order window (model = "cache", `mshrs` > 0): reorder-buffer entries, read
    /// as `rob_entries` × `base_cpi` cycles of the core's work. A data miss overlaps with
    /// the misses in flight only if one of them is at most this much work before it (it
    /// fits in the window behind that miss); otherwise it pays its full latency.
    pub rob_entries: u32,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MemoryModel {
    Flat,
    Cache,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// 0 turns the structure off.
    pub entries: u32,
    /// 1 = direct mapped; `ways = entries` = fully associative.
    pub ways: u32,
    /// Replacement policy within a set: `lru`, `plru`, `fifo` or `random` (seeded by `seed`).
    pub replacement: Replacement,
    /// Cycles charged on a hit.
    pub latency: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TlbConfig {
    /// `none` (CR3 write flushes non-global entries), `pcid`, `domain`, `cr3` (TMT).
    pub tagging: Tagging,
    /// Tag Manager Table entries (tagging = "cr3"; tag paper §5: 4).
    pub tmt_entries: u32,
    /// Entries each service level (VM) is allotted in every TLB structure, indexed by SL;
    /// empty = no partitioning (tag paper §4).
    pub sl_quota_fraction: Vec<f64>,
    /// Who sets the quotas: `static` (`sl_quota_fraction` for the whole run), `utility`
    /// (re-partitions every epoch from shadow-tag miss curves, `tlb::partition`; starts
    /// from `sl_quota_fraction` if given) or `none` (no quotas at all).
    pub partition_controller: PartitionController,
    /// `utility`'s goal: `min-mean-mptti`, or `mptti-ceiling` (`partition_goal_domain`
    /// first gets the entries that keep its MPTTI at or under `partition_goal_mptti`).
    pub partition_goal: PartitionGoal,
    /// `mptti-ceiling`: the domain whose MPTTI is held under `partition_goal_mptti`.
    pub partition_goal_domain: u32,
    /// `mptti-ceiling`: the MPTTI (TLB misses per 10,000 instructions) that
    /// `partition_goal_domain` is held at or under.
    pub partition_goal_mptti: f64,
    /// Instructions a core retires between re-partitions. Default 1,000,000: the order of
    /// UCP's 5 M-cycle interval (Qureshi and Patt, MICRO 2006, §4) at a CPI near 1 and a
    /// few cycles of stall per instruction; no paper fixes it for TLBs.
    pub partition_epoch_instructions: u64,
    /// Apply an epoch's quotas at the structure's next full flush (tag paper §6.5: "the TLB
    /// flushes form a natural point in time" to change them) instead of at once.
    pub partition_at_flush: bool,
    pub l1d: LevelConfig,
    pub l1d_2m: LevelConfig,
    pub l1d_1g: LevelConfig,
    pub l1i: LevelConfig,
    /// Unified second level (STLB), holding every page size.
    pub l2: LevelConfig,
    /// Page-walk caches: PML5/PML4 entries, PDPT entries, PD entries (x86 paging-structure
    /// caches), keyed by the virtual-address bits above the level they skip to.
    pub pwc_pml4: LevelConfig,
    pub pwc_pdpt: LevelConfig,
    pub pwc_pd: LevelConfig,
    /// ABIS §7: Intel CPUs set a PTE's A bit when they set its D bit on a write through a
    /// cached clean entry, though the PTE is already cached (true, as observed). false: the
    /// dirty-bit walk sets D only.
    pub quirk_dirty_sets_accessed: bool,
    /// ABIS §7: the walk before a page fault on a present PTE that disallows the access (a
    /// write to a read-only page) may set its A bit. Default false.
    pub quirk_faulting_walk_sets_accessed: bool,
    /// ABIS §7: full TLB flushes the MMU performs on its own (Intel, e.g. when a guest
    /// invalidates a huge page backed by small host pages), per million cycles of each
    /// core. 0 = none (default).
    pub involuntary_full_flush_per_mcycles: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LevelConfig {
    /// 0 removes the structure: its accesses go to the next level.
    pub entries: u32,
    /// 1 = direct mapped; `ways = entries` = fully associative.
    pub ways: u32,
    /// Replacement policy within a set: `lru`, `plru`, `fifo` or `random` (seeded by `seed`).
    pub replacement: Replacement,
    /// Cycles charged for every lookup of this structure.
    pub latency: u32,
}

impl LevelConfig {
    pub fn new(entries: u32, ways: u32, replacement: Replacement, latency: u32) -> Self {
        LevelConfig { entries, ways, replacement, latency }
    }
}

impl Default for LevelConfig {
    fn default() -> Self {
        LevelConfig::new(0, 1, Replacement::Lru, 1)
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig { entries: 0, ways: 1, replacement: Replacement::Lru, latency: 40 }
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Tagging {
    None,
    Pcid,
    Domain,
    Cr3,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OsConfig {
    /// Where page-table pages are allocated: `first-touch`, `interleave`, `fixed:N`.
    pub pt_placement: String,
    /// Page-table depth: 4 or 5 levels.
    pub pt_levels: u32,
    /// Map anonymous memory with 2 MiB pages where a whole aligned 2 MiB region is free.
    pub thp: bool,
    /// Fraction of 2 MiB allocations for THP that find no free 2 MiB block, as on a
    /// fragmented machine (Mitosis §8.2 Fig. 11's "heavy fragmentation"; the paper gives no
    /// rate). Each such fault falls back to a 4 KiB page, as THP does (`thp_fallbacks`).
    /// A stated input: how memory becomes fragmented is not modelled. Default 0.
    pub thp_failure_rate: f64,
    /// AutoNUMA, Linux's NUMA balancing (kernel/sched/fair.c task_numa_work, mm/memory.c
    /// do_numa_page): each process's address space is scanned, `numa_scan_size_mb` per
    /// `numa_scan_period_ms`, its PTEs made PROT_NONE (a TLB flush per range); the next
    /// access to such a page takes a NUMA hinting fault, and a page two successive faults
    /// found on another node than theirs moves to it. Page tables never move (Mitosis
    /// §3.1, observation 4).
    pub numa_balancing: bool,
    /// First scan after a process starts (`numa_balancing_scan_delay_ms`, Linux: 1000).
    pub numa_scan_delay_ms: f64,
    /// Shortest time between scans (`numa_balancing_scan_period_min_ms`, Linux: 1000).
    /// Each scan adapts the period as `update_task_scan_period` does, from the hinting
    /// faults since the last: longer while they are mostly local, shorter while remote.
    pub numa_scan_period_ms: f64,
    /// Longest (`numa_balancing_scan_period_max_ms`, Linux: 60000).
    pub numa_scan_period_max_ms: f64,
    /// Address space made PROT_NONE per scan (`numa_balancing_scan_size_mb`, Linux: 256).
    pub numa_scan_size_mb: u64,
    /// A NUMA hinting fault that moves its page: `migrate-first` (the default; Linux 6.x's
    /// do_numa_page migrates while the PTE is still PROT_NONE, so no TLB can hold it and the
    /// move needs no flush) or `restore-first` (Linux 3.19 to 4.x, the ABIS paper's 4.5:
    /// do_numa_page makes the PTE present and young again, then migrate_misplaced_page
    /// unmaps it with ptep_clear_flush, which flushes an accessible PTE: a shootdown per page
    /// moved).
    pub numa_hint_order: String,
    /// NUMA groups (Linux ≥ 3.13's `task_numa_group`, kernel/sched/fair.c): a hinting fault
    /// on a page another running thread of the process faulted on last puts both threads
    /// in one group, whose fault counts per node then decide whether a shared page moves
    /// (`should_numa_migrate_memory`: only toward a node whose share of the group's CPU
    /// use beats its share of the group's memory by 4/3). Off: a shared page moves on any
    /// second fault from the same node (the two-stage filter alone), as no released
    /// kernel since 3.13 does; every paper here ran a kernel with groups (ABIS: 4.5,
    /// Mitosis: 4.17). Default true.
    pub numa_groups: bool,
    /// NUMA task placement (kernel/sched/fair.c `task_numa_placement`,
    /// `numa_migrate_preferred`, `task_numa_migrate`): each thread's preferred node is the
    /// one with most of its (or its group's) decayed hinting faults, and a thread not
    /// running there moves to an idle core of that node, or swaps with a thread running
    /// there when both gain. Pinned threads never move. Default true (Linux's, since 3.13).
    pub numa_task_placement: bool,
    /// Where data frames come from: `first-touch` (the faulting core's node), `interleave`
    /// (round-robin over the nodes) or `fixed:N` (node N; Mitosis' remote-data setups).
    pub data_placement: String,
    /// TLB-coherence policy (OS-mode workloads): `linux`, `oracle`, `none`, ...
    /// (`crate::coherence::NAMES` lists them).
    pub coherence: String,
    /// The stale-translation checker: every use of a TLB entry a page-table change made
    /// stale is counted as a violation (docs/ARCHITECTURE.md "Safety checker").
    pub checker: bool,
    /// Linux's `tlb_single_page_flush_ceiling`: a flush of more pages than this becomes a
    /// full flush (arch/x86/mm/tlb.c: 33).
    pub flush_ceiling: u32,
    /// Pages NUMA migration unmaps before one TLB flush: Linux since 6.4 batches up to
    /// `NR_MAX_BATCHED_MIGRATION` = 512 (mm/migrate.c, TTU_BATCH_FLUSH); Linux before it,
    /// such as ABIS' 4.5, flushed every page as it unmapped it (try_to_unmap_one's
    /// ptep_clear_flush): 1.
    pub migrate_batch: u32,
    /// When a core takes a shootdown interrupt that arrives while it runs kernel code (a
    /// system call or a page fault, which the model runs whole): `return`, on its return to
    /// user space (FPR §II's lazy shootdowns of kernel-mode targets), or `arrival`, at once,
    /// as mainline Linux (ABIS' 4.5 included) takes it with interrupts enabled: the
    /// initiator has its ack at arrival plus the handler, whose cycles lengthen the path.
    pub kernel_interrupts: String,
    /// How threads move between cores: `linux` (the default since issue 46), CFS's wake-up
    /// placement and load balancing, or `none` (every result before it): a thread stays on
    /// the core it was placed on, and a woken one goes back to it. Under `linux` a thread woken by
    /// another goes to the waker's core or stays with its previous one as wake_affine's
    /// load comparison decides (unless wake_wide spreads them), then to an idle core of
    /// that core's socket (the last-level cache) if the chosen one is busy
    /// (select_task_rq_fair → wake_affine → select_idle_sibling); a core about to go idle
    /// pulls a waiting thread from a run queue of its socket (newidle load_balance); and at
    /// the scheduler tick (HZ = 250) of a core with threads waiting, idle cores whose
    /// periodic balancing is due take one, from their socket, or from another socket that
    /// runs more threads than it has cores (nohz idle balancing). All within a thread's CPU
    /// set; pinned threads and VCPUs stay where they are.
    pub balance: String,
    /// Scheduler time slice in cycles (assumed: 3 ms at 3 GHz, CFS's order of magnitude).
    pub time_slice: u64,
    /// Kernel locks: each address space's `mmap_lock` (a reader-writer semaphore held
    /// through the TLB flush, as Linux 6.x does) and per-VMA fault locks (docs/OS_MODEL.md
    /// "Locks"). false: system calls of one process never wait for each other.
    pub locks: bool,
    /// Whether madvise(MADV_DONTNEED) and munmap drain the CPU's LRU batch first
    /// (`lru_add_drain()` in zap_page_range_single, and in the munmap and exit paths of
    /// mm/vma.c and mm/mmap.c): true (the default) is Linux before Rik van Riel's "mm:
    /// remove unnecessary calls to lru_add_drain" (lkml 2024-12-19, queued in the mm tree
    /// in January 2025), false is the kernel with it: new pages then wait in the CPU's
    /// batch until it holds 31 (docs/OS_MODEL.md "The LRU lock").
    pub lru_drain_on_unmap: bool,
    /// Frame recycling scheme (the recycling axis, `crate::recycling`): `none` (Linux) or
    /// `fpr` (fast page recycling); its parameters are `[recycling.<name>]`.
    pub recycling: String,
    /// The hypervisor's VCPU scheduler, for workloads with VMs (`crate::hypervisor`): `credit`;
    /// its parameters are `[hypervisor.<name>]`.
    pub hypervisor: String,
}

impl Default for OsConfig {
    fn default() -> Self {
        OsConfig {
            pt_placement: "first-touch".into(),
            pt_levels: 4,
            thp: false,
            thp_failure_rate: 0.0,
            numa_balancing: false,
            numa_scan_delay_ms: 1000.0,
            numa_hint_order: "migrate-first".into(),
            numa_groups: true,
            numa_task_placement: true,
            numa_scan_period_ms: 1000.0,
            numa_scan_period_max_ms: 60000.0,
            numa_scan_size_mb: 256,
            data_placement: "first-touch".into(),
            coherence: "linux".into(),
            checker: true,
            flush_ceiling: 33,
            migrate_batch: 512,
            kernel_interrupts: "return".into(),
            balance: "linux".into(),
            time_slice: 9_000_000,
            locks: true,
            lru_drain_on_unmap: true,
            recycling: "none".into(),
            hypervisor: "credit".into(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Cycles charged for a first-touch page fault in trace mode (no OS model: the fault
    /// maps the page and returns). Default: 0, so trace runs measure translation only.
    pub fault_cycles: u64,
    /// Events one thread runs before the engine again picks the core furthest behind:
    /// bounds how far cores run ahead of each other (the multi-core engine replaces it
    /// with a quantum in cycles).
    pub batch: u32,
    /// OS mode: how far (cycles) a core may run ahead of the core furthest behind before
    /// the engine switches to another core. 0 (default) = a quarter of the smallest IPI
    /// delivery latency of `[costs]` (within the engine's lookahead, so no interrupt reaches a core
    /// that has already run past its arrival); larger values run faster, let a target take
    /// an interrupt late and reorder more page-table updates of the same moment. Halving the default changes headline results by under
    /// 1% (tests/os_engine.rs `halving_the_quantum_changes_results_by_under_one_percent`).
    pub quantum_cycles: u64,
    /// Add `page_table_dump` to stats.json: where page-table pages and their pointers live
    /// (Mitosis Fig. 3 and 4; `tlbsim ptdump`). Each process is dumped as its last thread
    /// exits, before its memory is torn down (or one process at one operation:
    /// `ptdump_at_op`); trace mode's space at the end of the run.
    pub ptdump: bool,
    /// OS mode: take the page-table dump when thread `ptdump_thread` completes its Nth
    /// operation (`{ op = "count" }`), of that thread's process only, instead of each
    /// process at its exit; the run then goes on to its end. Implies `ptdump`. A thread
    /// that never completes N operations leaves a dump with `taken = false` and a
    /// `message` saying so. 0 (default): off.
    pub ptdump_at_op: u64,
    /// The thread `ptdump_at_op` counts, by the name the workload gives it (the first
    /// thread of that name in declaration order). "" (default): the workload's first thread.
    pub ptdump_thread: String,
    /// OS mode with VMs: add `intervals` to stats.json, each CPU's run cut every this many
    /// instructions it retires, with per VM its instructions, TLB misses and full flushes
    /// by cause (the tag paper's Fig. 11 plots them over time). 0 (default): none.
    pub interval_instructions: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig { fault_cycles: 0, batch: 4096, quantum_cycles: 0, ptdump: false, ptdump_at_op: 0, ptdump_thread: String::new(), interval_instructions: 0 }
    }
}

/// `[workload]`: the kind, the keys every kind shares, and the selected kind's own keys.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct WorkloadConfig {
    /// `trace` (one trace per thread), `synthetic` (a generated stream per thread),
    /// `scenario` (the OS-mode scenario in `[workload.scenario]`), `recorded` (a `tlbsim
    /// record` recording replayed through the OS model), or a built-in OS-mode generator
    /// (`crate::workload::generators`). `crate::workload::kind` lists them all.
    pub kind: String,
    /// Simulate instruction fetches (they still count as instructions when false).
    pub fetches: bool,
    /// OS mode: a co-runner added to the workload (Mitosis §3.2's STREAM interference):
    /// `{ kind = "stream", socket = N }`.
    pub corunner: Option<CorunnerConfig>,
    /// The selected kind's own keys, flat in `[workload]` (`threads`, `ops`, `test`, ...):
    /// each kind declares its table (`crate::workload::kind`); the set-up step parses it,
    /// refuses a key the kind does not take, and writes it back with every default filled
    /// in. Config does not know their meaning.
    #[serde(flatten)]
    pub params: serde_json::Map<String, serde_json::Value>,
}

/// A bandwidth-hungry co-runner (`workload.corunner`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CorunnerConfig {
    /// `stream`: one thread sweeping a large array line by line, reading and writing (a
    /// STREAM-like kernel), forever (it does not keep the run going).
    pub kind: String,
    /// The socket it runs on (its last core) and whose node its array lives on.
    pub socket: u32,
    /// Bytes of its arrays, split among its threads (0: four times the last-level cache,
    /// so that it misses).
    #[serde(default)]
    pub bytes: u64,
    /// Start once the workload's processes are set up (their populated regions faulted
    /// in), so that it meets the main phase rather than the initialization (the Mitosis
    /// experiments pre-initialize the working set); its own arrays are then populated in
    /// the set-up too. Default false: from cycle 0, faulting its array in as it goes.
    #[serde(default)]
    pub after_setup: bool,
    /// Threads sweeping, each its own array of `bytes`, on the socket's last cores
    /// (default 1; STREAM run on a whole socket, as Mitosis' interference does, is
    /// `cores_per_socket` minus the cores the workload uses there).
    #[serde(default = "one")]
    pub threads: u32,
}

fn one() -> u32 {
    1
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig { kind: "synthetic".into(), fetches: true, corunner: None, params: serde_json::Map::new() }
    }
}

/// Where page-table pages (`os.pt_placement`, the native backends) or data frames
/// (`os.data_placement`) go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    FirstTouch,
    Interleave,
    Fixed(u32),
}

impl Placement {
    /// Node of the next page-table page for a core of `socket`; `interleave` is the
    /// round-robin cursor over `nodes`.
    pub fn node(self, socket: u32, nodes: u32, interleave: &mut u32) -> NodeId {
        NodeId(match self {
            Placement::FirstTouch => socket,
            Placement::Fixed(n) => n,
            Placement::Interleave => {
                let n = *interleave;
                *interleave = (n + 1) % nodes;
                n
            }
        })
    }

    pub fn parse(key: &str, s: &str, nodes: u32) -> Result<Placement> {
        match s {
            "first-touch" => Ok(Placement::FirstTouch),
            "interleave" => Ok(Placement::Interleave),
            _ => {
                let n = s.strip_prefix("fixed:").and_then(|n| n.parse::<u32>().ok()).ok_or_else(|| {
                    Error::config(key, format!("{s:?} is not a page-table placement: use \"first-touch\", \"interleave\", \"fixed:N\" or \"mitosis\""))
                })?;
                if n >= nodes {
                    return Err(Error::config(key, format!("fixed:{n}: node {n} does not exist (the machine has {nodes} nodes, 0..{})", nodes - 1)));
                }
                Ok(Placement::Fixed(n))
            }
        }
    }
}

/// Keys that moved, with where they went: a config that still uses one gets an error
/// naming the new place instead of "unknown key".
const MOVED_KEYS: &[(&str, &str)] = &[
    ("os.fpr.enabled", "os.recycling = \"fpr\" (\"none\": off)"),
    ("os.fpr", "[recycling.fpr] (selected by os.recycling = \"fpr\")"),
    ("os.mitosis", "[placement.mitosis] (selected by os.pt_placement = \"mitosis\")"),
    ("os.hypervisor.scheduler", "os.hypervisor = \"credit\""),
    ("os.hypervisor", "os.hypervisor = \"<scheduler>\" and [hypervisor.<scheduler>]"),
    ("machine.didi", "[coherence.<didi variant>] directory_entries, directory_ways, directory_latency"),
];

/// The first key of `tree` that [`MOVED_KEYS`] lists, as an error naming where it went.
/// `os.hypervisor` as a string is the new key, not the old table.
fn refuse_moved_keys(tree: &serde_json::Value) -> Result<()> {
    for (old, new) in MOVED_KEYS {
        let mut node = Some(tree);
        for part in old.split('.') {
            node = node.and_then(|n| n.get(part));
        }
        match node {
            None | Some(serde_json::Value::String(_)) if *old == "os.hypervisor" => {}
            None => {}
            Some(_) => return Err(Error::config(*old, format!("this key moved: use {new}"))),
        }
    }
    Ok(())
}

/// A parsed config with the two trees its silent-settings check compares: what the user
/// gave (document and overrides) and what the defaults under the preset give.
pub struct Parsed {
    pub config: Config,
    user: serde_json::Value,
    base: serde_json::Value,
}

impl Parsed {
    /// Refuse a key the user set to a value that cannot change a run of `self.config`
    /// (`silent.rs`); the config may have been completed since parsing (the workload table).
    pub fn refuse_silent_settings(&self) -> Result<()> {
        silent::refuse_silent_settings(&self.config, &self.user, &self.base)
    }
}

impl Config {
    /// The effective config from the user's tree and `--set` overrides, over the preset
    /// (`machine.preset`) and the defaults (`defaults`: [`Config::default`] with the
    /// plug-in registries' tables filled in, which config does not know; `crate::setup`
    /// passes them). Checks every value config itself knows the meaning of; the plug-in
    /// tables and the workload are checked by the set-up step, which builds them.
    pub fn parse_document(tree: serde_json::Value, overrides: &[String], defaults: serde_json::Value) -> Result<Config> {
        let parsed = Config::parse_parts(tree, overrides, defaults)?;
        parsed.refuse_silent_settings()?;
        Ok(parsed.config)
    }

    /// [`Config::parse_document`] without its last check, the settings that cannot matter:
    /// set-up makes that check after the plug-in names and the workload kind, so that a
    /// misspelt name is reported as such first.
    pub fn parse_parts(tree: serde_json::Value, overrides: &[String], defaults: serde_json::Value) -> Result<Parsed> {
        let mut user = match tree {
            serde_json::Value::Null => serde_json::Value::Object(Default::default()),
            serde_json::Value::Object(_) => tree,
            other => return Err(Error::config("(top level)", format!("a config must be a table, got {other}"))),
        };
        for o in overrides {
            apply_override(&mut user, o)?;
        }
        refuse_moved_keys(&user)?;
        let preset_name = user
            .get("machine")
            .and_then(|m| m.get("preset"))
            .map(|p| p.as_str().map(str::to_owned).ok_or_else(|| Error::config("machine.preset", format!("expected a string, got {p}"))))
            .transpose()?
            .unwrap_or_else(|| "none".to_owned());
        // Merge complete trees, so that a table the user gives in part keeps the preset's
        // (or the defaults') values for the keys it leaves out.
        let mut base = defaults;
        merge(&mut base, serde_json::json!({ "machine": presets::preset_tree(&preset_name)? }));
        let mut merged = base.clone();
        merge(&mut merged, user.clone());
        let mut cfg: Config = crate::tree::from_tree(merged)?;
        cfg.machine.preset = preset_name;
        cfg.validate()?;
        Ok(Parsed { config: cfg, user, base })
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("config serializes")
    }

    pub fn cores(&self) -> u32 {
        self.machine.sockets * self.machine.cores_per_socket
    }

    /// Latency in cycles of a read by a core of `socket` from memory on `node`.
    pub fn latency(&self, socket: u32, node: u32) -> u32 {
        let m = &self.machine.memory;
        if !m.latency_matrix.is_empty() {
            m.latency_matrix[socket as usize][node as usize]
        } else if socket == node {
            m.local_latency
        } else {
            m.remote_latency
        }
    }

    fn validate(&self) -> Result<()> {
        let m = &self.machine;
        range("machine.sockets", m.sockets as u64, 1, 64)?;
        range("machine.cores_per_socket", m.cores_per_socket as u64, 1, 1024)?;
        range("machine.sockets × machine.cores_per_socket", self.cores() as u64, 1, 4096)?;
        positive("machine.frequency_ghz", m.frequency_ghz)?;
        positive("machine.base_cpi", m.base_cpi)?;
        for (key, ns) in [("machine.idle.exit_ns", m.idle.exit_ns), ("machine.idle.poll_ns", m.idle.poll_ns), ("machine.idle.wake_ipi_ns", m.idle.wake_ipi_ns)]
        {
            if !(ns >= 0.0 && ns.is_finite()) {
                return Err(Error::config(key, format!("{ns}: must be a time in nanoseconds >= 0")));
            }
        }
        for (i, p) in m.idle.exit_curve.iter().enumerate() {
            let key = format!("machine.idle.exit_curve[{i}]");
            if p.iter().any(|v| !(*v >= 0.0 && v.is_finite())) {
                return Err(Error::config(&key, format!("{p:?}: every value must be a time in nanoseconds >= 0")));
            }
            if !(p[1] <= p[2] && p[2] <= p[3]) {
                return Err(Error::config(&key, format!("{p:?}: must be [idle_ns, p10_ns, median_ns, p90_ns] with p10 <= median <= p90")));
            }
            if i > 0 && p[0] <= m.idle.exit_curve[i - 1][0] {
                return Err(Error::config(&key, format!("{p:?}: idle_ns must increase from one point to the next")));
            }
        }
        for (i, p) in m.idle.wake_ipi_curve.iter().enumerate() {
            let key = format!("machine.idle.wake_ipi_curve[{i}]");
            if p.iter().any(|v| !(*v >= 0.0 && v.is_finite())) {
                return Err(Error::config(&key, format!("{p:?}: must be [idle_ns, waker_ns], times in nanoseconds >= 0")));
            }
            if i > 0 && p[0] <= m.idle.wake_ipi_curve[i - 1][0] {
                return Err(Error::config(&key, format!("{p:?}: idle_ns must increase from one point to the next")));
            }
        }
        range("machine.memory.node_mib", m.memory.node_mib, 1, 1 << 30)?;
        if !m.memory.latency_matrix.is_empty() {
            let n = m.sockets as usize;
            if m.memory.latency_matrix.len() != n || m.memory.latency_matrix.iter().any(|r| r.len() != n) {
                return Err(Error::config("machine.memory.latency_matrix", format!("must be {n} rows of {n} latencies (machine.sockets = {n})")));
            }
        }
        let t = &m.tlb;
        for (name, l) in t.levels() {
            check_geometry(&format!("machine.tlb.{name}"), l.entries, l.ways)?;
        }
        check_geometry("machine.pt_cache", m.pt_cache.entries, m.pt_cache.ways)?;
        let rate = t.involuntary_full_flush_per_mcycles;
        if !(rate >= 0.0 && rate.is_finite()) {
            return Err(Error::config("machine.tlb.involuntary_full_flush_per_mcycles", format!("{rate}: must be a rate >= 0")));
        }
        if m.memory.model == MemoryModel::Cache {
            let mem = &m.memory;
            for (key, bytes, ways) in [("machine.memory.llc", mem.llc_bytes, mem.llc_ways), ("machine.memory.private", mem.private_bytes, mem.private_ways)] {
                if bytes % 64 != 0 || bytes / 64 > (1 << 24) {
                    return Err(Error::config(format!("{key}_bytes"), format!("{bytes}: a whole number of 64-byte lines, at most 1 GiB")));
                }
                check_geometry(key, (bytes / 64) as u32, ways).map_err(|e| match e {
                    Error::Config { message, .. } => Error::config(format!("{key}_ways"), message),
                    e => e,
                })?;
            }
            positive("machine.memory.bandwidth_gbps_local", mem.bandwidth_gbps_local)?;
            positive("machine.memory.bandwidth_gbps_remote", mem.bandwidth_gbps_remote)?;
            range("machine.memory.mshrs", mem.mshrs as u64, 0, MAX_MSHRS as u64)?;
            if mem.mshrs > 0 {
                range("machine.memory.rob_entries", mem.rob_entries as u64, 1, 1 << 16)?;
            }
        }
        if t.tagging == Tagging::Cr3 {
            range("machine.tlb.tmt_entries", t.tmt_entries as u64, 1, 4096)?;
        }
        for (i, f) in t.sl_quota_fraction.iter().enumerate() {
            if !(0.0..=1.0).contains(f) {
                return Err(Error::config(format!("machine.tlb.sl_quota_fraction[{i}]"), format!("{f} is out of range: a fraction of the TLB, 0.0 to 1.0")));
            }
        }
        if t.sl_quota_fraction.len() > 256 {
            return Err(Error::config("machine.tlb.sl_quota_fraction", "at most 256 service levels"));
        }
        if t.partition_controller == PartitionController::Utility {
            range("machine.tlb.partition_epoch_instructions", t.partition_epoch_instructions, 1000, 1 << 40)?;
            range("machine.tlb.partition_goal_domain", t.partition_goal_domain as u64, 0, 255)?;
            if !(t.partition_goal_mptti >= 0.0 && t.partition_goal_mptti.is_finite()) {
                return Err(Error::config(
                    "machine.tlb.partition_goal_mptti",
                    format!("{}: a number of misses per 10,000 instructions, 0 or more", t.partition_goal_mptti),
                ));
            }
        }
        Placement::parse("os.data_placement", &self.os.data_placement, m.sockets)?;
        if !(self.os.pt_levels == 4 || self.os.pt_levels == 5) {
            return Err(Error::config("os.pt_levels", format!("{}: page tables have 4 or 5 levels", self.os.pt_levels)));
        }
        range("sim.batch", self.sim.batch as u64, 1, 1 << 20)?;
        range("sim.quantum_cycles", self.sim.quantum_cycles, 0, 1 << 40)?;
        if self.sim.ptdump_at_op > 0 && !is_os_mode(&self.workload.kind) {
            return Err(Error::config(
                "sim.ptdump_at_op",
                format!("operations are counted in OS mode only: workload.kind = {:?} has none (use sim.ptdump for a dump at the end)", self.workload.kind),
            ));
        }
        if !self.sim.ptdump_thread.is_empty() && self.sim.ptdump_at_op == 0 {
            return Err(Error::config("sim.ptdump_thread", "names the thread whose operations sim.ptdump_at_op counts: set sim.ptdump_at_op too"));
        }
        range("os.flush_ceiling", self.os.flush_ceiling as u64, 0, 1 << 20)?;
        range("os.migrate_batch", self.os.migrate_batch as u64, 1, 1 << 20)?;
        if !(0.0..=1.0).contains(&self.os.thp_failure_rate) {
            return Err(Error::config("os.thp_failure_rate", format!("{}: must be a fraction from 0 to 1", self.os.thp_failure_rate)));
        }
        positive("os.numa_scan_delay_ms", self.os.numa_scan_delay_ms)?;
        if !matches!(self.os.numa_hint_order.as_str(), "migrate-first" | "restore-first") {
            return Err(Error::config("os.numa_hint_order", format!("{:?}: use \"migrate-first\" or \"restore-first\"", self.os.numa_hint_order)));
        }
        positive("os.numa_scan_period_ms", self.os.numa_scan_period_ms)?;
        positive("os.numa_scan_period_max_ms", self.os.numa_scan_period_max_ms)?;
        if self.os.numa_scan_period_max_ms < self.os.numa_scan_period_ms {
            return Err(Error::config(
                "os.numa_scan_period_max_ms",
                format!("{} is below os.numa_scan_period_ms ({})", self.os.numa_scan_period_max_ms, self.os.numa_scan_period_ms),
            ));
        }
        range("os.numa_scan_size_mb", self.os.numa_scan_size_mb, 1, 1 << 30)?;
        if !matches!(self.os.balance.as_str(), "none" | "linux") {
            return Err(Error::config("os.balance", format!("{:?}: use \"none\" or \"linux\"", self.os.balance)));
        }
        if !matches!(self.os.kernel_interrupts.as_str(), "return" | "arrival") {
            return Err(Error::config("os.kernel_interrupts", format!("{:?}: use \"return\" or \"arrival\"", self.os.kernel_interrupts)));
        }
        range("os.time_slice", self.os.time_slice, 1, 1 << 50)?;
        // The workload's own keys are the selected kind's (`crate::workload::kind`): the
        // set-up step parses and checks them.
        Ok(())
    }
}

/// Whether `workload.kind` names an OS-mode workload (anything but `trace`/`synthetic`).
pub fn is_os_mode(kind: &str) -> bool {
    !matches!(kind, "trace" | "synthetic")
}

impl TlbConfig {
    /// Every TLB structure of a core with its config name.
    pub fn levels(&self) -> [(&'static str, &LevelConfig); 8] {
        [
            ("l1d", &self.l1d),
            ("l1d_2m", &self.l1d_2m),
            ("l1d_1g", &self.l1d_1g),
            ("l1i", &self.l1i),
            ("l2", &self.l2),
            ("pwc_pml4", &self.pwc_pml4),
            ("pwc_pdpt", &self.pwc_pdpt),
            ("pwc_pd", &self.pwc_pd),
        ]
    }
}

fn range(key: &str, v: u64, lo: u64, hi: u64) -> Result<()> {
    if v < lo || v > hi {
        return Err(Error::config(key, format!("{v} is out of range: allowed {lo} to {hi}")));
    }
    Ok(())
}

fn positive(key: &str, v: f64) -> Result<()> {
    if !(v.is_finite() && v > 0.0) {
        return Err(Error::config(key, format!("{v}: must be a positive number")));
    }
    Ok(())
}

fn check_geometry(key: &str, entries: u32, ways: u32) -> Result<()> {
    if entries == 0 {
        return Ok(());
    }
    range(&format!("{key}.entries"), entries as u64, 0, 1 << 20)?;
    if ways == 0 || ways > entries {
        return Err(Error::config(format!("{key}.ways"), format!("{ways}: ways must be 1 (direct mapped) to entries = {entries} (fully associative)")));
    }
    // The structure's own shape rules (sets a power of two, PLRU ways a power of two) are
    // the TLB's: the set-up step checks them by building it (`crate::setup`).
    Ok(())
}

impl Default for MemoryConfig {
    fn default() -> Self {
        presets::builtin_machine().memory
    }
}

impl Default for TlbConfig {
    fn default() -> Self {
        presets::builtin_machine().tlb
    }
}
