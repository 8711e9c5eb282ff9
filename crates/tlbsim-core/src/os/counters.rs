//! The OS model's counters: per-core counts and the violation records that stats.json
//! reports (os/output.rs writes them). Apart from the kernel state they count, so that the
//! state's files do not carry the report's shape.

/// Names of the full-flush causes in stats.json (`full_flushes_by_cause`, indexed by
/// `Cause`). The last two split `context_switch` by whether the switch changed VM (natively every
/// switch is intra-VM).
pub(crate) const CAUSES: [&str; 10] = [
    "shootdown",
    "ceiling",
    "context_switch",
    "lazy_switch",
    "tag_capacity",
    "tag_forced",
    "policy",
    "involuntary",
    "context_switch_intra_vm",
    "context_switch_inter_vm",
];
/// Index in `CAUSES` of `context_switch_intra_vm` (+1: inter).
pub(crate) const INTRA_VM: usize = 8;

/// System calls counted in `syscalls_by_call` (OsCoreStats::syscall_calls), in index order.
pub(crate) const SYSCALLS: [&str; 7] = ["mmap", "munmap", "mprotect", "madvise", "msync", "fork", "migrate_pages"];

/// Per-core OS counters (stats.json, per core and summed).
#[derive(Clone, Debug, Default)]
pub(crate) struct OsCoreStats {
    pub shootdowns_sent: u64,
    /// `shootdowns_sent` by the request's reason (`FlushReason as usize`).
    pub shootdowns_sent_by_reason: [u64; crate::coherence::FlushReason::NAMES.len()],
    pub shootdown_ipis_sent: u64,
    pub shootdown_ipis_received: u64,
    /// Requests that reached this core by a hardware message (no interrupt).
    pub shootdown_messages_received: u64,
    /// Requests queued on this core for its next tick or context switch.
    pub shootdowns_deferred_received: u64,
    /// Requests that skipped this core because it was lazy (idle or running a kernel
    /// thread with the address space borrowed); it flushes when it switches back.
    pub shootdowns_deferred_lazy: u64,
    /// Shootdown interrupts that arrived while this core ran kernel code (a system call, a
    /// page fault) and were taken when it returned to user space (FPR §II's lazy
    /// shootdowns of targets in kernel mode; the model runs kernel paths whole).
    pub shootdowns_taken_on_kernel_exit: u64,
    pub false_positive_targets: u64,
    pub pages_flushed: u64,
    pub full_flushes_by_cause: [u64; CAUSES.len()],
    /// Per system call (`SYSCALLS`): calls completed and the cycles they ran in the kernel
    /// (from entry to return, a lock wait before entry and the wait for a flush's acks
    /// after it not included).
    pub syscall_calls: [u64; 7],
    pub syscall_cycles: [u64; 7],
    pub shootdown_cycles_initiator_send: u64,
    pub shootdown_cycles_initiator_wait: u64,
    pub shootdown_cycles_target: u64,
    pub violations_security: u64,
    pub violations_consistency: u64,
    /// TLB entries the checker marked stale when a flush protocol ended (a later use of
    /// one is a violation; an eviction or flush before then makes it harmless).
    pub stale_entries_marked: u64,
    /// Marked entries used inside a deferred request's lazy window, as allowed
    /// (checker.rs `in_lazy_window`): not violations.
    pub stale_uses_in_lazy_window: u64,
    pub context_switches: u64,
    pub syscalls: u64,
    pub segv_signals: u64,
    /// Not-present faults on a page already mapped (a page-walk-cache entry into an
    /// unlinked table): the fault drops the page-walk caches and the walk is retried.
    pub spurious_faults: u64,
    pub cow_faults: u64,
    pub file_faults: u64,
    pub page_cache_misses: u64,
    /// Demand faults whose device read put the thread to sleep (`machine.storage`).
    pub io_sleeps: u64,
    pub pages_reclaimed: u64,
    pub pages_migrated: u64,
    pub idle_cycles: u64,
    /// Wake-ups that found this CPU halted (idle past `machine.idle.poll_ns`) and waited
    /// for its exit latency, and the cycles they waited (part of `idle_cycles`).
    pub idle_exits: u64,
    pub idle_exit_cycles: u64,
    /// Threads this core took from another core's run queue under `os.balance = "linux"`:
    /// as it went idle (newidle balancing) or in its periodic balancing while idle.
    pub balance_pulls: u64,
    /// TLB fills a policy made on a demand fault instead of a walk.
    pub direct_fills: u64,
    /// The machine's `stale_pwc_uses` already reported as violations.
    pub stale_pwc_seen: u64,
    /// targets_per_shootdown histogram: index = targets (last bucket: that many or more).
    pub targets_hist: Vec<u64>,
}

#[derive(Clone, Debug)]
pub(crate) struct ViolationRecord {
    pub cycle: u64,
    pub core: u32,
    pub process: u32,
    pub vpn: u64,
    pub old_pfn: u64,
    pub new_pfn: Option<u64>,
    pub security: bool,
    /// A lazy CPU's walk caches still reach a freed page table (`old_pfn` is its frame; no
    /// page was used): checker.rs rule 3, speculative walks.
    pub freed_table: bool,
}
