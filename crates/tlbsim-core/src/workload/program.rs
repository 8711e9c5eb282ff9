//! The OS-mode workload, compiled: processes, threads and the flat program of operations
//! each thread runs (docs/ARCHITECTURE.md "Workloads": per-thread streams of accesses, compute,
//! system calls, blocking and migration).
//!
//! Everything that produces an OS-mode workload ends here: the TOML scenario language
//! (`workload.kind = "scenario"`, [`super::scenario`]) and the built-in generators
//! (`fpr-munmap`, `apache`, `vmscale`, `reclaim`, `stm-mprotect`, `shootdown-patterns`,
//! [`super::generators`]). The engine (`crate::os`) interprets it.
//!
//! Regions are named by slots: every thread has its own table of region slots, initialised
//! from its process's pre-mapped regions (same addresses for every thread of the process,
//! so threads share them); an `Mmap` writes a slot, later operations read it. A slot keeps
//! its address after `Munmap`, so a program can touch memory it unmapped (a bug the
//! checker and the SIGSEGV count make visible).

/// What backs a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    Anonymous,
    /// A file of the page cache: `file` id, first page of the mapping within it.
    File {
        file: u32,
        offset_pages: u64,
    },
}

/// A mapping request (pre-mapped region or `Mmap` operation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapSpec {
    pub bytes: u64,
    pub backing: Backing,
    /// MAP_SHARED (true) or MAP_PRIVATE.
    pub shared: bool,
    /// MAP_POPULATE: fault every page in at mmap time.
    pub populate: bool,
    /// PROT_WRITE (PROT_READ is always given).
    pub writable: bool,
    /// The mapping's frames may be recycled within their recycling context without a TLB
    /// flush when it is unmapped (what the FPR paper's MAP_FPR asks, §IV). Acted on only by
    /// a recycling axis that recycles (`os.recycling = "fpr"`); otherwise a plain mapping.
    pub recyclable: bool,
    /// MAP_FIXED at the slot's previous address (an `Mmap` operation whose slot held a
    /// mapping before): the new mapping reuses that virtual address.
    pub fixed: bool,
}

/// Order in which an `Access` operation visits the pages (8-byte accesses).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pattern {
    /// From the window's start, `stride` bytes apart, wrapping at its end.
    Sequential,
    /// Uniform over the window.
    Random,
    /// Like sequential; kept separate so results name what the scenario asked for.
    Strided,
    /// Zipf-distributed over the window's pages with exponent `theta` (rank 1 = first page).
    Zipf { theta: f64 },
    /// One access to each page the window's bytes span, from its first byte's page to its
    /// last byte's (`count` and `stride` are not used): a program filling a buffer whose
    /// per-byte cost its `Compute` carries (e.g. a malloc'd buffer at an address known only
    /// at run time).
    Pages,
}

/// Reads, writes, or a mix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AccessMode {
    Read,
    Write,
    /// Each access is a write with this probability.
    Mixed(f64),
    /// Instruction fetches (through the instruction TLB). A thread that has fetched counts
    /// its instructions by its fetches from then on: its data accesses are their operands.
    Fetch,
}

/// One operation of a thread's program.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `count` accesses to region `slot`, within `[offset, offset + len)` bytes of it
    /// (`len = 0`: to its end).
    Access {
        slot: usize,
        pattern: Pattern,
        mode: AccessMode,
        count: u64,
        offset: u64,
        len: u64,
        stride: u64,
    },
    /// Non-memory work: this many cycles.
    Compute {
        cycles: u64,
    },
    Mmap {
        slot: usize,
        spec: MapSpec,
    },
    Munmap {
        slot: usize,
    },
    /// Change the protection of the whole region.
    Mprotect {
        slot: usize,
        writable: bool,
    },
    /// madvise(MADV_DONTNEED) on the whole region.
    MadviseDontneed {
        slot: usize,
    },
    /// msync(MS_SYNC) of the whole region: write back dirty file pages (cleaning their PTEs).
    Msync {
        slot: usize,
    },
    /// fork(): a child process with a copy-on-write copy of the address space, whose one
    /// thread runs `programs[program]`, on `core` (None: the parent's core's run queue).
    Fork {
        program: usize,
        core: Option<u32>,
    },
    /// clone(CLONE_VM | CLONE_THREAD) in a process that has no declared threads to spawn (a
    /// forked child's pthread_create, `crate::workload::recorded`): a new thread of the
    /// caller's process runs `programs[program]`, queued on an idle core of the caller's
    /// socket if there is one (fork balancing), else on the caller's.
    Clone {
        program: usize,
    },
    /// The thread ends; the process ends with its last thread.
    Exit,
    /// Blocked in the kernel (I/O, sleep) for this many cycles; the core runs something
    /// else or idles meanwhile.
    Block {
        cycles: u64,
    },
    /// Move this thread to `core` (sched_setaffinity to one CPU).
    MigrateThread {
        core: u32,
    },
    /// sched_setaffinity to a set of CPUs (`Workload::cpu_sets[set]`): the thread may run,
    /// be woken and be pulled only there; it moves at once if its core is not in the set.
    SetAffinity {
        set: u32,
    },
    /// Move the region's pages to NUMA node `node` (move_pages / NUMA balancing).
    MigratePages {
        slot: usize,
        node: u32,
    },
    /// Repeat the next `body` operations `count` times (`count = 0`: forever, for
    /// daemon threads).
    Loop {
        count: u64,
        body: usize,
    },
    /// One operation of the thread's work finished: counts in `ops_completed`.
    CountOp,
    /// pthread_barrier_wait over the process's non-daemon threads still alive: the thread
    /// sleeps until every one of them has reached a barrier (or exited).
    Barrier,
    /// A split-driver I/O request (Xen's blkfront/netfront): queue a request for thread
    /// `server` (its index among the workload's threads in declaration order, processes in
    /// order) and sleep until the server has answered it. The server takes it with a
    /// `Serve`, the device takes `cycles`, the server takes the completion with another
    /// `Serve` and wakes the requester (os/io.rs).
    Io {
        server: u32,
        cycles: u64,
    },
    /// A back-end driver's wait for work (Xen's blkback/netback): take the next request or
    /// completion of this thread's queue, sleeping until there is one.
    Serve,
    /// Replay `len` entries of the recorded stream `Workload::recorded[stream]` from entry
    /// `start` (`tlbsim record`'s accesses and instruction counts, see [`Recorded`]).
    Replay {
        stream: u32,
        start: u64,
        len: u64,
    },
    /// Region slot `slot` now names `[va, va + len)`: a recorded system call's own range (the
    /// `Munmap`, `Mprotect`, ... that follows acts on it; an `Mmap` with `fixed` maps there,
    /// replacing what it overlaps, as MAP_FIXED does).
    SetRange {
        slot: usize,
        va: u64,
        len: u64,
    },
    /// Region slot `slot` now names `[offset, offset + len)` bytes of region slot `of`'s
    /// current range: a pointer into memory the thread already holds, e.g. the tail of a
    /// malloc heap the allocator gives back (`crate::workload::ptmalloc`). Page-aligned.
    SubRange {
        slot: usize,
        of: usize,
        offset: u64,
        len: u64,
    },
    /// Start the declared thread `thread` (its index among the workload's threads in
    /// declaration order; it must be declared `held`): pthread_create's clone.
    Spawn {
        thread: u32,
    },
    /// Post the completion `token` once (a recorded event other threads wait for).
    Post {
        token: u32,
    },
    /// Spin until `token` has been posted `count` times (replay's ordering of a recorded
    /// program's threads around its system calls, `crate::workload::recorded`): the thread
    /// keeps its core.
    Wait {
        token: u32,
        count: u32,
    },
    /// Spin until `token` has been posted `count` times, running entries `start..start +
    /// len` of the recorded stream `stream` as each iteration (a recorded busy-wait loop's
    /// body, `crate::workload::recorded`): the thread keeps its core and its address space,
    /// and the loop's instructions and loads count as they run. The token is checked
    /// between iterations (a loop reads its flag once per pass).
    Spin {
        token: u32,
        count: u32,
        stream: u32,
        start: u64,
        len: u64,
    },
    /// Sleep until `token` has been posted `count` times: the thread leaves its core, which
    /// may idle (a recorded futex wait, woken by another thread's futex wake or exit).
    Sleep {
        token: u32,
        count: u32,
    },
    /// read/pread/write/pwrite of `len` bytes of file `file` from byte `offset` through the
    /// page cache (a recorded program's file I/O, `crate::workload::recorded`): each page
    /// of the range is looked up in the page cache and, on a miss, read from the storage
    /// device (the thread sleeps for it where the device's reads sleep, its core free),
    /// and the bytes are copied to or from the user's buffer.
    FileIo {
        file: u32,
        offset: u64,
        len: u64,
        write: bool,
    },
    /// Take one post of `token` that no `Take` has taken yet, sleeping until there is one:
    /// a counting semaphore's wait (a worker waiting on its queue's condition variable, a
    /// thread in epoll_wait for one ready event). A `Post` wakes the longest sleeper of the
    /// token's takes; the thread leaves its core meanwhile.
    Take {
        token: u32,
    },
    /// malloc(bytes) by this thread (glibc's ptmalloc, `crate::workload::ptmalloc`, run
    /// against its process's arenas): the chunk goes to pointer `ptr` of the process (a
    /// name any of its threads may free), and region slot `slot` of this thread names its
    /// bytes. Its system calls (a new arena's heap, a mapping of its own) are the kernel's.
    Malloc {
        ptr: u32,
        bytes: u64,
        slot: usize,
    },
    /// free() of pointer `ptr` by this thread, into the chunk's arena whoever allocated it;
    /// a heap trim (madvise MADV_DONTNEED) or munmap it asks for follows as a system call.
    Free {
        ptr: u32,
    },
    /// realloc(ptr, bytes) to at most its size, in place: the tail is freed (and may trim).
    Realloc {
        ptr: u32,
        bytes: u64,
    },
    /// Region slot `slot` of this thread names the bytes of pointer `ptr` (a pointer another
    /// thread handed over: read after the handover's `Post`/`Sleep`).
    UsePtr {
        slot: usize,
        ptr: u32,
    },
}

/// Entries of a recorded stream (`Op::Replay`): the kind in the top two bits, the virtual
/// address (or, for instruction counts, the count) in the rest.
pub struct Recorded;

impl Recorded {
    pub const LOAD: u64 = 0;
    pub const STORE: u64 = 1 << 62;
    pub const FETCH: u64 = 2 << 62;
    /// Instructions retired that are not fetch entries (`tlbsim record --no-fetches`, or
    /// fetches not simulated): the count in the low bits.
    pub const INSTRUCTIONS: u64 = 3 << 62;
    pub const KIND: u64 = 3 << 62;
    pub const VALUE: u64 = !Self::KIND;
}

/// How many `CountOp`s running `prog` from its start executes (loops multiplied out; a
/// loop forever counts its body once). For progress reports.
pub fn counted_ops(prog: &[Op]) -> u64 {
    fn span(ops: &[Op]) -> u64 {
        let (mut i, mut n) = (0, 0u64);
        while i < ops.len() {
            match ops[i] {
                Op::Loop { count, body } => {
                    let end = (i + 1 + body).min(ops.len());
                    n = n.saturating_add(span(&ops[i + 1..end]).saturating_mul(count.max(1)));
                    i = end;
                }
                Op::CountOp => {
                    n += 1;
                    i += 1;
                }
                _ => i += 1,
            }
        }
        n
    }
    span(prog)
}

impl Op {
    /// The region slot the operation names, if any.
    pub fn slot(&self) -> Option<usize> {
        match self {
            Op::Access { slot, .. }
            | Op::Mmap { slot, .. }
            | Op::Munmap { slot }
            | Op::Mprotect { slot, .. }
            | Op::MadviseDontneed { slot }
            | Op::Msync { slot }
            | Op::MigratePages { slot, .. }
            | Op::SetRange { slot, .. }
            | Op::Malloc { slot, .. }
            | Op::UsePtr { slot, .. } => Some(*slot),
            // Both slots must exist: the higher one counts.
            Op::SubRange { slot, of, .. } => Some((*slot).max(*of)),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ThreadSpec {
    pub name: String,
    /// Thread class (e.g. "io", "compute"): per-class throughput in the results.
    pub class: String,
    /// Pinned core; None = placed round-robin on the machine's cores, free to be moved.
    pub core: Option<u32>,
    /// Index into `Workload::programs`.
    pub program: usize,
    /// A background thread (a spinning or sleeping sibling): the run ends when every
    /// non-daemon thread has exited, whatever the daemons are doing.
    pub daemon: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ProcessSpec {
    pub name: String,
    /// Memory cgroup this process is charged to (index into `Workload::groups`).
    pub group: usize,
    /// Regions mapped before the threads start (slot i = regions[i]).
    pub regions: Vec<MapSpec>,
    pub threads: Vec<ThreadSpec>,
    /// Per-process page-table options for the backend (a replication mask); default: the
    /// backend's system-wide setting. Inherited by forked children.
    pub page_tables: PtOptions,
}

/// A memory cgroup: a limit in 4 KiB pages (0 = unlimited) that reclaim enforces.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupSpec {
    pub name: String,
    pub limit_pages: u64,
}

/// A file of the page cache.
#[derive(Clone, Debug, PartialEq)]
pub struct FileSpec {
    pub name: String,
    pub pages: u64,
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct Workload {
    pub groups: Vec<GroupSpec>,
    pub files: Vec<FileSpec>,
    pub processes: Vec<ProcessSpec>,
    /// Thread programs (flat; `Loop` bodies follow their header).
    pub programs: Vec<Vec<Op>>,
    /// Region slots a thread has (pre-mapped regions first, then the slots `Mmap` writes).
    pub slots: usize,
    /// Programs (indices into `programs`) that a `Fork` starts as a daemon thread (see
    /// [`ThreadSpec::daemon`]), e.g. a forked child that sleeps while its parent works. A
    /// forked child whose program is not listed is waited for like any other thread.
    /// Added after the first version of this IR; empty (the default) keeps the old meaning.
    pub daemon_programs: Vec<usize>,
    /// Processes (indices into `processes`) whose threads first run only once every process
    /// before them is set up (its populated regions faulted in, on its first thread's core):
    /// e.g. a co-runner meant to meet a workload's main phase, not its initialization.
    /// Empty (the default): every thread may run from cycle 0.
    pub start_after_setup: Vec<usize>,
    /// Virtual machines (the hypervisor axis, `crate::hypervisor`). Empty (the default): the
    /// processes run natively, a thread's `core` is a core of the machine. Else VM i is
    /// domain i (VM 0 is dom0), every process belongs to one (`VmSpec::processes`; a process
    /// no VM lists is dom0's), and a thread's `core` (and a `Fork`'s or `MigrateThread`'s) is
    /// a VCPU of its VM.
    pub vms: Vec<VmSpec>,
    /// Recorded streams `Op::Replay` reads (entries packed as [`Recorded`] says).
    pub recorded: Vec<Vec<u64>>,
    /// Threads (indices among the declared threads, processes in order) created asleep:
    /// each first runs when another thread's `Op::Spawn` starts it (a recorded program's
    /// pthread_create). Empty (the default): every thread runs from the start.
    pub held_threads: Vec<u32>,
    /// Regions mapped at fixed addresses before the threads start, in no slot, as (process,
    /// address, spec): a recorded program's memory that existed before its first recorded
    /// event (its executable, its stack, what the loader mapped).
    pub fixed_regions: Vec<(usize, u64, MapSpec)>,
    /// Completion tokens `Op::Post`/`Op::Wait` name (0..tokens).
    pub tokens: u32,
    /// Pointer names `Op::Malloc`, `Op::Free`, `Op::Realloc` and `Op::UsePtr` use (0..pointers),
    /// per process.
    pub pointers: u32,
    /// The C library whose malloc the `Op::Malloc` family runs (default: 2.26 and later).
    pub glibc: super::ptmalloc::Glibc,
    /// CPU sets `Op::SetAffinity` names: bit `c % 64` of word `c / 64` is CPU `c` (a core
    /// natively, a VCPU of the thread's VM under a hypervisor). Empty (the default): none.
    pub cpu_sets: Vec<Vec<u64>>,
}

/// Whether CPU `cpu` is in the set `set` (bit `cpu % 64` of word `cpu / 64`).
#[inline]
pub fn cpu_set_has(set: &[u64], cpu: usize) -> bool {
    set.get(cpu / 64).is_some_and(|w| w >> (cpu % 64) & 1 == 1)
}

/// The CPUs of `set`, in increasing order.
pub fn cpu_set_members(set: &[u64]) -> impl Iterator<Item = usize> + '_ {
    set.iter().enumerate().flat_map(|(i, &w)| (0..64).filter(move |b| w >> b & 1 == 1).map(move |b| i * 64 + b))
}

/// A virtual machine (domain): its VCPUs, scheduler weight and cap, the physical CPU each
/// VCPU is pinned to, and its processes.
#[derive(Clone, Debug, PartialEq)]
pub struct VmSpec {
    pub name: String,
    pub vcpus: u32,
    /// Credit-scheduler weight (Xen's default: 256).
    pub weight: u32,
    /// Most of one CPU the VM may use, in percent (0: no cap).
    pub cap: u32,
    /// Per VCPU: the physical CPU it may only run on (None: any).
    pub pin: Vec<Option<u32>>,
    /// Indices into `Workload::processes`.
    pub processes: Vec<usize>,
}

impl Workload {
    /// VM of process `pi` (0 natively, or when no VM lists it).
    pub fn vm_of(&self, pi: usize) -> usize {
        self.vms.iter().position(|v| v.processes.contains(&pi)).unwrap_or(0)
    }

    /// How many CPUs a thread of process `pi` can name: the machine's cores natively, its
    /// VM's VCPUs under a hypervisor.
    pub fn cpus_of(&self, pi: usize, cores: u32) -> u32 {
        if self.vms.is_empty() {
            cores
        } else {
            self.vms[self.vm_of(pi)].vcpus
        }
    }
}

impl Workload {
    /// Checks the invariants the engine relies on; errors name the process, thread and
    /// operation index.
    pub fn check(&self, cores: u32) -> Result<(), String> {
        if self.processes.is_empty() {
            return Err("the workload has no processes".into());
        }
        for (pi, p) in self.processes.iter().enumerate() {
            if p.group >= self.groups.len().max(1) {
                return Err(format!("process[{pi}].group: no group {}", p.group));
            }
            if p.regions.len() > self.slots {
                return Err(format!("process[{pi}]: more regions than slots"));
            }
            for (ri, r) in p.regions.iter().enumerate() {
                check_map(&format!("process[{pi}].region[{ri}]"), r, &self.files)?;
            }
            let cpus = self.cpus_of(pi, cores);
            for (ti, t) in p.threads.iter().enumerate() {
                if let Some(c) = t.core {
                    if c >= cpus {
                        let what = if self.vms.is_empty() { "the machine" } else { "its VM" };
                        return Err(format!("process[{pi}].thread[{ti}].core: core {c} does not exist ({what} has {cpus})"));
                    }
                }
                if t.program >= self.programs.len() {
                    return Err(format!("process[{pi}].thread[{ti}]: no program {}", t.program));
                }
            }
        }
        if let Some(&p) = self.daemon_programs.iter().find(|&&p| p >= self.programs.len()) {
            return Err(format!("daemon_programs: no program {p}"));
        }
        let declared_count = self.processes.iter().map(|p| p.threads.len()).sum::<usize>();
        if let Some(&t) = self.held_threads.iter().find(|&&t| t as usize >= declared_count) {
            return Err(format!("held_threads: no thread {t} ({declared_count} declared)"));
        }
        for &t in &self.held_threads {
            let spawns = self.programs.iter().flatten().filter(|op| **op == Op::Spawn { thread: t }).count();
            if spawns != 1 {
                return Err(format!("held_threads: thread {t} is started by {spawns} spawn operations (it needs exactly one)"));
            }
        }
        if self.tokens > 0 {
            let mut posts = vec![0u64; self.tokens as usize];
            let mut needed = vec![0u64; self.tokens as usize];
            for op in self.programs.iter().flatten() {
                match *op {
                    Op::Post { token } if token < self.tokens => posts[token as usize] += 1,
                    Op::Wait { token, count } | Op::Sleep { token, count } | Op::Spin { token, count, .. } if token < self.tokens => {
                        needed[token as usize] = needed[token as usize].max(count as u64)
                    }
                    // A take needs some post of its token (how many depends on the run).
                    Op::Take { token } if token < self.tokens => needed[token as usize] = needed[token as usize].max(1),
                    _ => {}
                }
            }
            if let Some(t) = (0..posts.len()).find(|&t| posts[t] < needed[t]) {
                return Err(format!("token {t}: waited for {} posts but only {} post operations exist", needed[t], posts[t]));
            }
            self.check_token_order()?;
        }
        for (i, (pi, va, spec)) in self.fixed_regions.iter().enumerate() {
            if *pi >= self.processes.len() {
                return Err(format!("fixed_regions[{i}]: no process {pi}"));
            }
            if va % 4096 != 0 || va.checked_add(spec.bytes).is_none_or(|e| e > 1 << 47) {
                return Err(format!("fixed_regions[{i}]: {va:#x}+{:#x} is not a page-aligned user range", spec.bytes));
            }
            check_map(&format!("fixed_regions[{i}]"), spec, &self.files)?;
        }
        for (vi, v) in self.vms.iter().enumerate() {
            if v.vcpus == 0 || v.pin.len() != v.vcpus as usize {
                return Err(format!("vm[{vi}]: {} VCPUs with {} pin entries", v.vcpus, v.pin.len()));
            }
            if let Some(c) = v.pin.iter().flatten().find(|&&c| c >= cores) {
                return Err(format!("vm[{vi}].pin: core {c} does not exist (the machine has {cores})"));
            }
            if let Some(&p) = v.processes.iter().find(|&&p| p >= self.processes.len() || self.vm_of(p) != vi) {
                return Err(format!("vm[{vi}].processes: process {p} does not exist or belongs to another VM"));
            }
        }
        for (i, set) in self.cpu_sets.iter().enumerate() {
            match cpu_set_members(set).last() {
                None => return Err(format!("cpu_sets[{i}]: an empty CPU set (sched_setaffinity refuses one: EINVAL)")),
                Some(c) if c >= cores as usize => return Err(format!("cpu_sets[{i}]: core {c} does not exist (the machine has {cores})")),
                Some(_) => {}
            }
        }
        // Programs are not tied to a VM: their CPU numbers (fork, migrate-thread) are
        // checked against the machine's cores, and wrap around the VCPUs of the VM that runs
        // them (os/virt.rs `cpu_index`).
        let must_end = self.programs_that_must_end();
        let declared: Vec<&ThreadSpec> = self.processes.iter().flat_map(|p| &p.threads).collect();
        for (gi, prog) in self.programs.iter().enumerate() {
            for (i, op) in prog.iter().enumerate() {
                let at = || format!("program[{gi}].op[{i}]");
                if let Some(slot) = op.slot().filter(|&s| s >= self.slots) {
                    return Err(format!("{}: region slot {slot} does not exist", at()));
                }
                match op {
                    Op::Mmap { spec, .. } => check_map(&at(), spec, &self.files)?,
                    Op::Loop { body, .. } if i + body >= prog.len() => return Err(format!("{}: loop body runs past the end of the program", at())),
                    Op::Loop { count: 0, .. } if must_end[gi] => {
                        return Err(format!("{}: a loop forever (count 0) in a program a non-daemon thread runs: the run would never end", at()))
                    }
                    Op::Fork { program, core } => {
                        if *program >= self.programs.len() {
                            return Err(format!("{}: no program {program}", at()));
                        }
                        if core.is_some_and(|c| c >= cores) {
                            return Err(format!("{}: core {} does not exist", at(), core.unwrap()));
                        }
                    }
                    Op::Clone { program } if *program >= self.programs.len() => return Err(format!("{}: no program {program}", at())),
                    Op::MigrateThread { core } if *core >= cores => return Err(format!("{}: core {core} does not exist (the machine has {cores})", at())),
                    Op::SetAffinity { set } if *set as usize >= self.cpu_sets.len() => {
                        return Err(format!("{}: no CPU set {set} (the workload has {})", at(), self.cpu_sets.len()))
                    }
                    Op::Replay { stream, start, len } => {
                        let n = self.recorded.get(*stream as usize).map(|s| s.len() as u64);
                        if n.is_none_or(|n| start.saturating_add(*len) > n) {
                            return Err(format!("{}: entries {start}..{} of recorded stream {stream} do not exist", at(), start.saturating_add(*len)));
                        }
                    }
                    Op::Spin { token, stream, start, len, .. } => {
                        if *token >= self.tokens {
                            return Err(format!("{}: no token {token} (the workload has {})", at(), self.tokens));
                        }
                        let n = self.recorded.get(*stream as usize).map(|s| s.len() as u64);
                        // An empty body would spin without time passing.
                        if *len == 0 || n.is_none_or(|n| start.saturating_add(*len) > n) {
                            return Err(format!(
                                "{}: spin body {start}..{} of recorded stream {stream} is empty or does not exist",
                                at(),
                                start.saturating_add(*len)
                            ));
                        }
                    }
                    Op::SetRange { va, len, .. } if va % 4096 != 0 || *len == 0 || va.checked_add(*len).is_none_or(|e| e > 1 << 47) => {
                        return Err(format!("{}: range {va:#x}+{len:#x} is not a page-aligned user range", at()))
                    }
                    Op::SubRange { offset, len, .. } if offset % 4096 != 0 || len % 4096 != 0 || *len == 0 || offset.checked_add(*len).is_none() => {
                        return Err(format!("{}: sub-range {offset:#x}+{len:#x} is not a page-aligned, non-empty range", at()))
                    }
                    Op::Spawn { thread } if !self.held_threads.contains(thread) => {
                        return Err(format!("{}: thread {thread} is not held (only a held thread is spawned)", at()))
                    }
                    Op::Malloc { ptr, .. } | Op::Free { ptr } | Op::Realloc { ptr, .. } | Op::UsePtr { ptr, .. } if *ptr >= self.pointers => {
                        return Err(format!("{}: no pointer {ptr} (the workload has {})", at(), self.pointers))
                    }
                    Op::Malloc { bytes: 0, .. } => return Err(format!("{}: malloc of 0 bytes", at())),
                    Op::Post { token } | Op::Wait { token, .. } | Op::Sleep { token, .. } | Op::Take { token } if *token >= self.tokens => {
                        return Err(format!("{}: no token {token} (the workload has {})", at(), self.tokens))
                    }
                    Op::FileIo { file, offset, len, .. } => match self.files.get(*file as usize) {
                        None => return Err(format!("{}: no file {file} (the workload has {})", at(), self.files.len())),
                        Some(f) if offset.saturating_add(*len).div_ceil(4096) > f.pages => {
                            return Err(format!("{}: bytes {offset:#x}+{len:#x} run past the end of file {file} ({} pages)", at(), f.pages))
                        }
                        Some(_) => {}
                    },
                    Op::Io { server, .. } => match declared.get(*server as usize) {
                        None => return Err(format!("{}: no thread {server} to serve the request ({} declared)", at(), declared.len())),
                        Some(t) if !self.programs[t.program].contains(&Op::Serve) => {
                            return Err(format!("{}: thread {server} ({:?}) never serves (its program has no serve operation)", at(), t.name))
                        }
                        Some(_) => {}
                    },
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

impl Workload {
    /// Whether every program can run to its end with the tokens alone deciding: run each
    /// started program until a `Wait`/`Sleep` whose token is not posted enough, over and
    /// over; a program still stuck at the end waits in a cycle (whatever the timing).
    /// Loops run once (their bodies' posts counted once); `Spawn` and `Fork` start programs.
    /// A `Take` needs its token posted once: how many posts each take finds depends on the
    /// run (a work queue's), so this only proves that some thread can post it.
    fn check_token_order(&self) -> Result<(), String> {
        let mut posted = vec![0u64; self.tokens as usize];
        let mut pc = vec![0usize; self.programs.len()];
        let mut started = vec![false; self.programs.len()];
        let declared: Vec<usize> = self.processes.iter().flat_map(|p| p.threads.iter().map(|t| t.program)).collect();
        for (i, &prog) in declared.iter().enumerate() {
            if !self.held_threads.contains(&(i as u32)) {
                started[prog] = true;
            }
        }
        loop {
            let mut progress = false;
            for p in 0..self.programs.len() {
                if !started[p] {
                    continue;
                }
                while let Some(op) = self.programs[p].get(pc[p]) {
                    // A token that does not exist is the range check's to report (below).
                    let in_range = |token: u32| (token as usize) < posted.len();
                    match *op {
                        Op::Post { token } | Op::Wait { token, .. } | Op::Sleep { token, .. } | Op::Take { token } if !in_range(token) => {}
                        Op::Post { token } => posted[token as usize] += 1,
                        Op::Spin { token, .. } if !in_range(token) => {}
                        Op::Wait { token, count } | Op::Sleep { token, count } | Op::Spin { token, count, .. } if posted[token as usize] < count as u64 => {
                            break
                        }
                        Op::Take { token } if posted[token as usize] == 0 => break,
                        Op::Spawn { thread } => {
                            if let Some(&prog) = declared.get(thread as usize) {
                                started[prog] = true;
                            }
                        }
                        Op::Fork { program, .. } | Op::Clone { program } => started[program] = true,
                        _ => {}
                    }
                    pc[p] += 1;
                    progress = true;
                }
            }
            if !progress {
                break;
            }
        }
        match (0..self.programs.len()).find(|&p| started[p] && pc[p] < self.programs[p].len()) {
            Some(p) => {
                Err(format!("program[{p}].op[{}]: {:?} can never be satisfied (the programs wait for each other in a cycle)", pc[p], self.programs[p][pc[p]]))
            }
            None => Ok(()),
        }
    }

    /// Per program: whether a thread that is not a daemon runs it (a `ThreadSpec` with
    /// `daemon = false`, or a `Fork` of a program not in `daemon_programs`), so it must end.
    fn programs_that_must_end(&self) -> Vec<bool> {
        let mut must_end = vec![false; self.programs.len()];
        for t in self.processes.iter().flat_map(|p| &p.threads) {
            if !t.daemon && t.program < must_end.len() {
                must_end[t.program] = true;
            }
        }
        for op in self.programs.iter().flatten() {
            if let Op::Fork { program, .. } = op {
                if *program < must_end.len() && !self.daemon_programs.contains(program) {
                    must_end[*program] = true;
                }
            }
            if let Op::Clone { program } = op {
                if *program < must_end.len() {
                    must_end[*program] = true;
                }
            }
        }
        must_end
    }
}

fn check_map(at: &str, m: &MapSpec, files: &[FileSpec]) -> Result<(), String> {
    if m.bytes == 0 {
        return Err(format!("{at}: a mapping needs at least one byte"));
    }
    if let Backing::File { file, offset_pages } = m.backing {
        let f = files.get(file as usize).ok_or_else(|| format!("{at}: no file {file}"))?;
        if offset_pages + m.bytes.div_ceil(4096) > f.pages {
            return Err(format!("{at}: maps past the end of file {:?} ({} pages)", f.name, f.pages));
        }
    }
    Ok(())
}

/// Cumulative Zipf(theta) weights over `n` ranks (rank 1 most popular).
pub fn zipf_cdf(n: u64, theta: f64) -> Vec<f64> {
    let n = n.min(1 << 22) as usize;
    let mut cdf = Vec::with_capacity(n);
    let mut sum = 0.0;
    for k in 1..=n {
        sum += 1.0 / (k as f64).powf(theta);
        cdf.push(sum);
    }
    for c in cdf.iter_mut() {
        *c /= sum;
    }
    cdf
}

/// Per-process page-table options of a workload (`ProcessSpec::page_tables`), handed to the
/// backend as the process's address space is created (`crate::placement::PageTableBackend::create`); a
/// forked child inherits its parent's. Generic: the engine only carries them, each backend
/// takes what applies to it and ignores the rest. Default: every option unset (the
/// backend's own, system-wide setting).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PtOptions {
    /// Sockets that hold a copy of this process's page tables, for a backend that keeps
    /// copies (Mitosis' per-process replication mask, set through numactl in its §6):
    /// empty = a single tree. `None`: the backend's system-wide setting. Backends with one
    /// tree per process ignore it.
    pub replica_sockets: Option<Vec<u32>>,
}

impl PtOptions {
    /// Check the options against a machine of `sockets` sockets; errors name `key` (the
    /// workload key that set them) and the option.
    pub fn check(&self, key: &str, sockets: u32) -> crate::error::Result<()> {
        if let Some(list) = &self.replica_sockets {
            if let Some(&bad) = list.iter().find(|&&s| s >= sockets) {
                return Err(crate::error::Error::config(key, format!("socket {bad} does not exist (the machine has {sockets} sockets, 0..{})", sockets - 1)));
            }
        }
        Ok(())
    }
}

/// A process's page-table options as a workload writes them (the scenario language's
/// `[workload.scenario.process.page_tables]` table), resolved against the machine into
/// [`PtOptions`] by [`PtOptionKeys::resolve`]. Every key is optional; unset keys leave the
/// backend's system-wide setting.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PtOptionKeys {
    /// The sockets holding a copy of the process's page tables ([`PtOptions::replica_sockets`]):
    /// `"all"`, `"none"` (a single tree) or a list of sockets. Only a backend that keeps
    /// copies (`os.pt_placement = "mitosis"`, where it overrides `[placement.mitosis] replicas`,
    /// Mitosis §6.2's per-process replication set) acts on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_sockets: Option<crate::types::ReplicaSet>,
}

impl PtOptionKeys {
    /// No key given.
    pub fn is_unset(&self) -> bool {
        *self == PtOptionKeys::default()
    }

    /// The options for a machine of `sockets` sockets; errors name `key` (the table) and
    /// the option.
    pub fn resolve(&self, key: &str, sockets: u32) -> crate::error::Result<PtOptions> {
        let replica_sockets = match &self.replica_sockets {
            None => None,
            Some(r) => Some(r.sockets(&format!("{key}.replica_sockets"), sockets)?),
        };
        Ok(PtOptions { replica_sockets })
    }
}
