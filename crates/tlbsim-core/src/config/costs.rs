//! `[costs]`: cycles the OS model charges for each kernel operation (docs/ARCHITECTURE.md "Physical
//! memory and the OS": "each operation charges cycles from a cost table that can be
//! calibrated on a real machine").
//!
//! Sources of the defaults, per field: the papers where they state a number (ABIS §2.3 and
//! §4, DiDi §V-A/§VI, Mitosis §2), otherwise an order-of-magnitude default marked
//! "assumed" that `tlbsim calibrate` replaces with a fit on the host (issue 4). All are
//! cycles of the simulated core's clock.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CostsConfig {
    /// Entering and leaving the kernel for a system call (assumed: ~70 ns round trip of a
    /// null syscall with today's mitigations at 3 GHz).
    pub syscall: u64,
    /// Kernel work of mmap beyond entry/exit: find a gap, make the VMA (assumed).
    pub mmap: u64,
    /// Kernel work of munmap / madvise / mprotect / msync per call, before page work
    /// (assumed: VMA lookup, split, locking).
    pub vma_op: u64,
    /// Per page touched by munmap/zap/mprotect/msync (PTE update, rmap, mmu_gather; assumed).
    pub per_page: u64,
    /// Per entry written in a page-table copy beyond the first (Mitosis §5.2's PV-Ops
    /// set_pte: follow the ring pointer, locate the entry, store, loop; about a dozen
    /// instructions at CPI 1, assumed). The two memory references it makes are charged
    /// apart, through the cache model.
    pub replica_entry_write: u64,
    /// Exception entry and exit of a page fault plus the handler's bookkeeping (assumed:
    /// ~0.5 µs for a minor fault without zeroing).
    pub page_fault: u64,
    /// Per frame moved between a CPU's per-CPU list and the buddy allocator (a batch refill
    /// in rmqueue_bulk, a drain in free_pcppages_bulk), all under the zone lock (assumed:
    /// ~30 ns of list and free-area bookkeeping per frame).
    pub buddy_per_frame: u64,
    /// Per acquisition of a node's lruvec lock (`lruvec->lru_lock`, a spinlock; the LRU
    /// lock of docs/OS_MODEL.md "The LRU lock"), on top of the pages it moves: the lock
    /// word's cache line and the lruvec's list heads come over from the CPU that held it
    /// last, two cache-line transfers, each taken as the built-in machine's last-level-cache
    /// hit (`machine.memory.llc_latency` = `machine.pt_cache.latency` = 40 cycles, vendor
    /// optimisation manuals; not calibrated): 80. Held, so a waiter waits for it too.
    pub lru_lock_acquire: u64,
    /// Per folio a holder of the lruvec lock adds to or deletes from the LRU lists
    /// (lruvec_add_folio / lruvec_del_folio in folio_batch_move_lru and folios_put_refs):
    /// the list link written into the neighbouring folio, whose `struct page` line another
    /// CPU wrote last, one cache-line transfer at the same 40 cycles (not calibrated, not
    /// fitted to a benchmark). Held under the lock.
    pub lru_per_page: u64,
    /// Zeroing one 4 KiB frame (assumed: 4 KiB at ~10 bytes/cycle). A 2 MiB page costs 512×.
    pub zero_page: u64,
    /// Copying one 4 KiB frame (copy-on-write, migration; assumed: 2× zeroing).
    pub copy_page: u64,
    /// A page-cache miss: reading one page from the backing store (assumed: a fast block
    /// device such as ABIS §5's ZRAM, ~5 µs). The thread blocks for it.
    pub read_page: u64,
    /// Writing one dirty page back (msync, reclaim; assumed, like `read_page`).
    pub write_page: u64,
    /// fork: fixed part (new mm, copying VMAs; assumed ~30 µs) ...
    pub fork: u64,
    /// ... plus, per mapped page, copying and write-protecting its PTE (assumed).
    pub fork_per_page: u64,
    /// Switching threads on a core (save/restore, scheduler; assumed ~1 µs), plus any TLB
    /// flush the switch causes.
    pub context_switch: u64,
    /// The hypervisor switching a CPU from one VCPU to another (Xen's context_switch: saving
    /// and restoring the VCPU's registers, segment and FPU state; assumed ~2 µs), plus any
    /// TLB flush the CR3 write causes. Only with VMs.
    pub vcpu_switch: u64,
    /// Initiator: sending one IPI (ABIS §2.3 citing [5]: "several hundreds of cycles" for
    /// delivery; the send itself is an x2APIC ICR write per target, assumed 200).
    pub ipi_send: u64,
    /// Delivery latency of an IPI to a core on the same socket (ABIS §2.3: "several
    /// hundreds of cycles").
    pub ipi_delivery_same_socket: u64,
    /// ... and to a core on another socket (assumed 2× same-socket, like the DRAM ratio
    /// Mitosis measured, 580/280).
    pub ipi_delivery_cross_socket: u64,
    /// Target: interrupt entry and exit (pipeline flush, context save and restore). DiDi
    /// §VI: interrupt overhead "as much as ten times higher" than PTLBI's "few hundred
    /// cycles" — 2,000.
    pub interrupt: u64,
    /// One INVLPG (assumed ~150 cycles, the order of published measurements).
    pub invlpg: u64,
    /// A full (non-global) TLB flush: the CR3 write itself (assumed); the misses it causes
    /// later are simulated, not charged here.
    pub full_flush: u64,
    /// Target: writing its ack into the shared flush datum (assumed) ...
    pub ack: u64,
    /// ... plus this much per other target of the same shootdown: contention on the shared
    /// cache line (DiDi §V-A step 4; assumed).
    pub ack_contention_per_target: u64,
    /// Delivering a SIGSEGV to a thread that touched memory it may not (assumed).
    pub signal: u64,
}

impl Default for CostsConfig {
    fn default() -> Self {
        CostsConfig {
            syscall: 200,
            mmap: 1_500,
            vma_op: 1_000,
            per_page: 60,
            replica_entry_write: 12,
            page_fault: 1_500,
            buddy_per_frame: 100,
            lru_lock_acquire: 80,
            lru_per_page: 40,
            zero_page: 400,
            copy_page: 800,
            read_page: 15_000,
            write_page: 15_000,
            fork: 90_000,
            fork_per_page: 20,
            context_switch: 3_000,
            vcpu_switch: 6_000,
            ipi_send: 200,
            ipi_delivery_same_socket: 500,
            ipi_delivery_cross_socket: 1_000,
            interrupt: 2_000,
            invlpg: 150,
            full_flush: 200,
            ack: 100,
            ack_contention_per_target: 50,
            signal: 3_000,
        }
    }
}
