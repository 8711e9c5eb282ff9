//! Processes (an address space with its VMAs) and threads: the per-process and per-thread
//! records of the kernel model, and `AddressSpaces`, every process by pid. Their own file so that `mod.rs` holds only the composition
//! of the OS state and its set-up.

use super::{io, locks};
use crate::fasthash::FastSet;
use crate::rng::SplitMix64;
use std::collections::{BTreeMap, VecDeque};
use std::ops::{Index, IndexMut};

/// A virtual memory area.
#[derive(Clone, Debug)]
pub(crate) struct Vma {
    pub end: u64,
    pub writable: bool,
    pub shared: bool,
    pub backing: crate::workload::program::Backing,
    /// Never mapped by the workload (the libraries stand-in): faults here are SIGSEGV.
    pub reserved: bool,
    /// Recycling context of the mapping (the recycling axis; 0: none).
    pub recycling: u32,
    /// The VMA has its `anon_vma` (mm/rmap.c `__anon_vma_prepare`): set by its first fault
    /// that makes a private anonymous page; kept by splits, inherited by a fork's copy. A
    /// fault that needs it while it is missing takes `mmap_lock` (os/locks.rs).
    pub anon_vma: bool,
}

impl Vma {
    /// Whether an access (`write`) that faults here makes a private anonymous page while
    /// the VMA has no anon_vma yet (vmf_anon_prepare's case: a write to a private, writable
    /// mapping; a read maps the zero page or a page-cache page).
    pub fn needs_anon_vma(&self, write: bool) -> bool {
        write && !self.reserved && self.writable && !self.shared && !self.anon_vma
    }
}

pub(crate) struct Process {
    pub pid: u32,
    /// Arena slot of the primary root table (the tree the kernel walks in software).
    pub root: u32,
    /// The workload's per-process page-table options (the backend's), inherited by a fork.
    pub page_tables: crate::placement::PtOptions,
    /// Roots some socket's cores loaded for this process before the backend gave that
    /// socket another (a replica made by migration): with CR3 tags, entries filled under
    /// them must go when a core loads the new one.
    pub former_roots: Vec<u32>,
    pub vmas: BTreeMap<u64, Vma>,
    /// Unmapped ranges the coherence policy holds back from reuse: [start, end).
    pub held: BTreeMap<u64, u64>,
    pub cpumask: Vec<bool>,
    pub tlb_gen: u64,
    pub threads_alive: u32,
    pub group: usize,
    /// Root of the fork tree this process belongs to (anonymous pages are shared only
    /// within it: the anon_vma of Linux's rmap).
    pub family: u32,
    pub alive: bool,
    /// Anonymous pages swapped out by reclaim (vpn): a fault brings them back.
    pub swapped: FastSet<u64>,
    /// The address space's `mmap_lock` (os/locks.rs).
    pub mmap_lock: locks::RwSem,
    /// Threads asleep in `Op::Barrier`, in arrival order.
    pub barrier_waiting: Vec<usize>,
    /// Its VM (domain id; 0 natively).
    pub vm: u32,
    /// Its malloc (`Op::Malloc`, os/alloc.rs), made at its first call. A forked child
    /// starts without one (its parent's heap is not carried over).
    pub alloc: Option<Box<crate::workload::ptmalloc::Allocator>>,
}

/// Every process the run created, indexed by pid. Pids are never reused: an exited
/// process keeps its slot (`alive` false), so a pid read from a frame's owner or a record
/// still names the process it was. A process is only ever added with the next pid.
#[derive(Default)]
pub(crate) struct AddressSpaces {
    procs: Vec<Process>,
}

impl AddressSpaces {
    /// The pid the next process gets.
    pub(super) fn next_pid(&self) -> u32 {
        self.procs.len() as u32
    }

    /// Add `p`, whose pid must be `next_pid()`.
    pub(super) fn add(&mut self, p: Process) {
        debug_assert_eq!(p.pid, self.next_pid(), "pids are given in order");
        self.procs.push(p);
    }

    /// Processes created so far (alive or not): pids are `0..count()`.
    pub(super) fn count(&self) -> usize {
        self.procs.len()
    }

    /// Every process in pid order, exited ones included.
    pub(super) fn iter(&self) -> std::slice::Iter<'_, Process> {
        self.procs.iter()
    }
}

impl Index<usize> for AddressSpaces {
    type Output = Process;
    #[inline]
    fn index(&self, pid: usize) -> &Process {
        &self.procs[pid]
    }
}

impl IndexMut<usize> for AddressSpaces {
    #[inline]
    fn index_mut(&mut self, pid: usize) -> &mut Process {
        &mut self.procs[pid]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ThreadState {
    Runnable,
    Blocked,
    Exited,
}

pub(crate) struct Thread {
    pub pid: u32,
    pub name: String,
    pub class: String,
    pub daemon: bool,
    pub program: usize,
    pub pc: usize,
    /// (first op of the loop body, body length, iterations left; u64::MAX = forever).
    pub loops: Vec<(usize, usize, u64)>,
    pub slots: Vec<(u64, u64)>,
    /// Work left of the op at `pc`: accesses of an `Access`, cycles of a `Compute` (0: not
    /// started).
    pub access_left: u64,
    pub access_cursor: u64,
    pub rng: SplitMix64,
    pub state: ThreadState,
    pub core: usize,
    pub pinned: bool,
    /// The CPU set of its last sched_setaffinity to more than one CPU (an index into
    /// `Workload::cpu_sets`; None: every CPU, or the one it is pinned to). Threads and
    /// forked children inherit it (fork copies `cpus_mask`).
    pub allowed: Option<u32>,
    /// `os.balance = "linux"`: record_wakee's state (kernel/sched/fair.c): the thread this
    /// one last woke (usize::MAX: none yet), how often the thread it wakes changed
    /// (`wakee_flips`), and when those were last halved (`wakee_flip_decay_ts`, cycles).
    pub last_wakee: usize,
    pub wakee_flips: u32,
    pub wakee_flip_decay: u64,
    /// When the thread last joined a run queue (`os.balance`: a core may pull it only from
    /// then on).
    pub queued_at: u64,
    pub ops_completed: u64,
    pub start_cycle: u64,
    /// When the thread first ran on a core (after whatever its core did before: a process's
    /// populated regions are faulted in by its first thread's core before any thread runs).
    pub first_run_cycle: Option<u64>,
    pub end_cycle: Option<u64>,
    pub accesses: u64,
    /// Zipf sampler of the current access op (pages, theta) → cumulative weights.
    pub zipf: Option<(u64, u64, Vec<f64>)>,
    /// A lock this thread waited for was handed to it: its operation goes on.
    pub lock_granted: Option<locks::LockMode>,
    /// Its page fault fell back to `mmap_lock` and was granted it: the retried fault runs
    /// under it, without trying the VMA lock again.
    pub fault_lock_granted: bool,
    /// An access whose page fault waits for `mmap_lock`: it runs again first when the
    /// thread runs again.
    pub retry_access: Option<(u64, crate::types::AccessKind)>,
    /// Release this process's `mmap_lock` when the core resumes after its flush.
    pub unlock_at_resume: Option<u32>,
    /// A system call that flushes page by page (msync, migration) and waits for each
    /// flush's acks goes on from this address when its core resumes (0: from its start).
    pub syscall_resume: u64,
    /// A munmap, mprotect or madvise going one page-table page at a time (mm/steps.rs):
    /// its state between steps (`syscall_resume` says where the next starts).
    pub range_call: Option<Box<super::mm::RangeCall>>,
    /// The thread fetches its instructions (`AccessMode::Fetch`): from its first fetch on,
    /// its instructions are counted by its fetches, and its data accesses are their
    /// operands.
    pub fetches: bool,
    /// Cycles spent waiting for locks (spinning or asleep).
    pub lock_wait_cycles: u64,
    /// The lock acquisition in progress has already waited (counted as contended once).
    pub lock_contended: bool,
    /// A back-end's queue of split-driver work (os/io.rs), and whether it sleeps in `Serve`
    /// waiting for some.
    pub io_queue: VecDeque<io::IoItem>,
    pub serving: bool,
    /// A system call an allocator operation asked for (a free's heap trim or munmap,
    /// os/alloc.rs): it runs before the program's next operation, on the engine's own
    /// region slot.
    pub pending: Option<crate::workload::program::Op>,
}
