//! `workload.kind = "recorded"`: a program recorded by `tlbsim record` (native format v2,
//! `crate::trace::recorded`), compiled into the OS model's workload, so that its own mmaps,
//! munmaps and mprotects make its faults, page cache and shootdowns under whichever policy,
//! placement and tagging the run names.
//!
//! Follows: the recording's threads and processes (clone with CLONE_VM makes a thread, a
//! clone without it, fork and vfork a process), each thread's accesses and instruction
//! counts in its own order (`Op::Replay`), and its system calls at their recorded addresses
//! (x86-64 Linux semantics: mmap, munmap, mprotect, madvise(MADV_DONTNEED/MADV_FREE),
//! msync, brk, mremap, exit, exit_group, sched_setaffinity: to one CPU a migrate-thread, to
//! several a CPU set (the mask's first word, that is CPUs 0..63; a CPU the machine does not
//! have wraps around its cores, as a single one does).
//!
//! Order between threads. The recording's global order is the real one; replay keeps what
//! the address space depends on and lets the rest run at the model's speed:
//! - a system call waits for the calls of other threads recorded before it over any part
//!   of its range (e.g. an mmap that reuses the addresses another thread unmapped), and a
//!   fork for every other thread's last call;
//! - an access waits for the last system call recorded before it that covered its page,
//!   when another thread made that call (e.g. a worker reading a file the main thread
//!   mapped);
//! - a system call waits for the other threads that touched its range since the last call
//!   over it to reach the point where the call was recorded (e.g. a munmap waits for the
//!   readers of the range).
//! - a store that is its thread's first event after another thread's call that left the
//!   page mapped but not writable (an mprotect(PROT_READ): a collector arming its write
//!   barrier) ran before that call took effect — it did not fault, and the plugin records an
//!   access just after it ran, so the call's record can come between the two — and the call
//!   waits for it instead (store evidence, `Builder::store_evidence`). The plugin records the
//!   address-space calls in the order they took effect (record/tlbsim_record.c), so a store
//!   recorded after a call that made its page writable again (a barrier fault's handler, the
//!   collector's un-protect) replays after it (the wait for the last call over its page).
//! These are completion tokens (`Op::Post`, `Op::Wait`) compiled in here; the engine knows
//! nothing of recordings. A waiting thread spins on its core (it was running at that point
//! of the recording), so its CPU stays in its address space and gets its shootdowns.
//!
//! Busy-wait loops. A thread whose progress depends on another thread's store waits for
//! that store in simulated time, not for the iterations it happened to run under QEMU.
//! Detected from the thread's own stream of entries (fetches with their instruction
//! addresses, loads, instruction counts): a load that meets its own earlier copy within
//! `MAX_BODY` entries, with no system call between, starts a run; the run lasts while each
//! entry repeats the one a body's length before it and is not a store. Once a whole
//! iteration has repeated, the lines the body loads are watched, and the last store to one
//! of them by another thread of the process is the loop's release. When the run ends (an
//! entry that differs: the loop's exit, or a system call), a released run's whole
//! iterations become an `Op::Spin` that re-runs the body's accesses on the core until a
//! token is posted, and the releasing thread posts it right after that store; the last
//! partial iteration (the one that saw the flag set) and the exit stay as recorded. A run
//! no other thread's store ended (a loop rereading its own data) stays as recorded. With
//! fetches the body is the same instructions; without (`--no-fetches`) it is the same
//! loads between the same per-block instruction counts.
//!
//! Simplified:
//! - memory mapped before the recording's first event (the executable, the stack, the
//!   dynamic loader's own image) is replayed as anonymous, writable regions at its recorded
//!   addresses, covering the pages the program touched there (`Workload::fixed_regions`);
//! - PROT_NONE is read-only (a program that touches it faulted; the faulting access is not in
//!   the recording, QEMU delivers the signal before the plugin sees the access);
//! - protection changes: only a store is ordered against them by evidence; a store the
//!   recording shows on a page another thread's call had made read-only, recorded after
//!   other events of its thread since that call, replays as recorded (a SIGSEGV the program
//!   did not see: natively the page was writable, by a change the recording does not show).
//!   Measured (issue 47): of six recordings of gc_barrier (2 mutators) made on a loaded
//!   machine, one replayed 2 such SIGSEGVs, the others none; their cause is not found.
//!   Accesses that are not stores, and other threads' calls that do not remove write
//!   permission, keep the order of the file, in which a call is placed at its return;
//! - mremap that moves a mapping is an munmap and a fresh mapping (the pages fault in again
//!   instead of moving with their page tables);
//! - clone3's flags are read from the program's memory by the plugin when it can (else a
//!   thread is assumed, as glibc's pthread_create uses it); QEMU 7.2 refuses clone3, so
//!   glibc falls back to clone, whose flags are recorded;
//! - a forked process's threads (prefork servers with threads, PostgreSQL's backends and
//!   background workers) are created by their clone in the child (`Op::Clone`), placed
//!   on an idle core as fork balancing does; the root process's are declared threads;
//! - spin loops: a loop whose body stores (test-and-set, a counter it bumps while waiting)
//!   or makes an untracked system call (sched_yield) is not a spin, its iterations replay as
//!   recorded; so is a loop still spinning when the recording ended. Stores are released
//!   by the line, not the value: a store to the flag's line that did not end the loop and
//!   was the last before its exit is taken for the release. A spin released in the
//!   recording before one whole iteration repeated (its first store missed) replays as
//!   recorded. Cross-thread store-to-load order outside busy-wait loops (a flag read once,
//!   a lock-free queue's data) is not kept: threads run at the model's speed between their
//!   tokens. A spin's body is re-run as recorded, so the loop's time per iteration is the
//!   model's, and a spinning thread yields its core to a queued thread between iterations
//!   (as `Op::Wait` does), where the real one would run to its time slice.
//!
//! Sleeps: a futex wait that was woken (pthread_join, a mutex or condition variable) sleeps
//! until the last wake recorded on its word before it returned (a futex wake, or the exit of
//! the thread whose clear_child_tid it is): `Op::Sleep`, the core free meanwhile. Futex
//! waits that timed out or were interrupted take no time.
//!
//! Blocking calls (issue 47; what the plugin records is in `crate::trace::native`): the
//! thread leaves its core, which runs another thread or idles (lazy-TLB, so Linux's flushes
//! skip it unless page tables were freed), and it wakes when the call would have returned:
//! - nanosleep and clock_nanosleep sleep for the requested duration (`Op::Block`); an
//!   absolute deadline is made relative by the plugin at the call; one cut short by a
//!   signal (-EINTR) for the time it slept;
//! - a wait (poll, select, pselect6, ppoll, epoll_wait, epoll_pwait(2), accept(4),
//!   recvfrom, recvmsg, recvmmsg, and read/readv of a pipe, socket or terminal) sleeps
//!   until the call that woke it, when that call is another recorded thread's, of any
//!   process: the last write/writev to a non-regular file, send*, connect or shutdown of
//!   another thread recorded before the wait returned and entered after it began (the
//!   plugin's monotonic clock): `Op::Sleep` on the token that call posts. A wait no
//!   recorded call ended (its waker is outside the recording — a network client, a
//!   terminal — or it timed out) sleeps for the time it was blocked in the recording
//!   (`Op::Block`): real time under QEMU, which the program's slowed-down execution does not
//!   stretch, but the peer's speed, the network's and a timeout's are as recorded;
//! - read, write, pread64, pwrite64, readv, writev, preadv and pwritev of a regular file
//!   go through the page cache and the storage model (`Op::FileIo`, os/io.rs): the bytes
//!   the call moved, from the offset it started at (the plugin's lseek at entry).
//!
//! Simplified there: the waker is matched by time and kind, not by file: a write to
//! another pipe or socket than the one waited on, made by another thread while the wait
//! was blocked, is taken for its waker (the replayed wait then ends no earlier than that
//! write, which ran meanwhile in the recording too). A close that ends a wait (EOF on a
//! pipe) and signals are not wakers: such a wait takes its recorded time. The waiting
//! call's own work (copying the received bytes, the socket's protocol processing) costs a
//! system call's entry and exit, no more.

use super::program::{Backing, MapSpec, Op, ProcessSpec, Recorded, ThreadSpec, Workload};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::fasthash::FastMap;
use crate::trace::native::NativeReader;
use crate::trace::{TraceEvent, TraceSource, DEFAULT_BATCH};
use crate::types::AccessKind;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const PAGE: u64 = 4096;
/// Linux's flags (include/uapi/linux/sched.h, asm-generic/mman*.h, x86-64 values).
const CLONE_VM: u64 = 0x100;
const CLONE_CHILD_CLEARTID: u64 = 0x0020_0000;
/// futex operations (include/uapi/linux/futex.h), without the private and clock flags.
const FUTEX_CMD_MASK: u64 = 0x7f;
const FUTEX_WAIT: u64 = 0;
const FUTEX_WAKE: u64 = 1;
const FUTEX_REQUEUE: u64 = 3;
const FUTEX_CMP_REQUEUE: u64 = 4;
const FUTEX_WAKE_OP: u64 = 5;
const FUTEX_WAIT_BITSET: u64 = 9;
const FUTEX_WAKE_BITSET: u64 = 10;
const MAP_SHARED: u64 = 0x01;
const MAP_ANONYMOUS: u64 = 0x20;
const MAP_POPULATE: u64 = 0x8000;
const PROT_WRITE: u64 = 0x2;
const MADV_DONTNEED: u64 = 4;
const MADV_FREE: u64 = 8;
const NO_PAGE: u64 = u64::MAX;
/// -EINTR: a sleep cut short by a signal (include/uapi/asm-generic/errno-base.h).
const EINTR: i64 = 4;
/// How far (ns) a waker's recorded timestamp may run behind the file's order (the
/// plugin's records of different threads are written in the order of its lock, each
/// timestamped just before): a wait's waker search stops at the first waker call this far
/// before the wait began. Assumed: far above a lock hand-over, far below a blocking wait.
const WAKER_SLACK_NS: u64 = 1_000_000_000;
/// Cache lines: a spin loop's flag and the store that releases it meet on a line.
const LINE_SHIFT: u32 = 6;
/// The longest loop body (stream entries: fetches, loads, instruction counts) spin
/// detection looks for: a busy-wait loop is a handful of instructions, and a longer
/// window only costs detection time on ordinary loops that reread a variable.
const MAX_BODY: u64 = 1024;
/// Slots of a thread's table of its recent loads (direct-mapped by address).
const RECENT: usize = 64;

/// Build the workload of the recording `workload.paths[0]`.
pub fn build(cfg: &Config) -> Result<Workload> {
    let p: super::kind::RecordedParams = super::kind::params(cfg)?;
    let path = p.paths.first().ok_or_else(|| Error::config("workload.paths", "a recorded workload needs the recording's path"))?;
    build_from(path, cfg.workload.fetches, cfg.cores(), cfg.machine.frequency_ghz)
}

/// Compile the recording at `path`: `fetches` false turns instruction fetches into plain
/// instruction counts (the ITLB is not simulated); `cores` bounds the CPUs a thread may pin
/// itself to; `ghz` (the machine's clock) turns recorded durations (a nanosleep's request,
/// a wait's time blocked) into cycles.
pub fn build_from(path: &Path, fetches: bool, cores: u32, ghz: f64) -> Result<Workload> {
    let mut reader = NativeReader::open(path)?;
    let mut b = Builder { fetches, cores: cores.max(1), ghz, ..Default::default() };
    let mut batch = Vec::with_capacity(DEFAULT_BATCH);
    while reader.next_batch(&mut batch, DEFAULT_BATCH)? > 0 {
        for ev in &batch {
            b.event(*ev).map_err(|m| Error::config("workload.paths", format!("{}: event {}: {m}", path.display(), b.events)))?;
            b.events += 1;
        }
    }
    b.finish().map_err(|m| Error::config("workload.paths", format!("{}: {m}", path.display())))
}

#[derive(Clone, Copy, Debug)]
struct MapInfo {
    writable: bool,
    shared: bool,
    backing: Backing,
}

/// One recorded thread as it is compiled.
struct ThreadB {
    tid: u32,
    /// Builder process index; None while the thread's creating call is not read yet (a new
    /// thread may record before its parent's clone returns).
    process: Option<usize>,
    pending: Vec<TraceEvent>,
    ops: Vec<Op>,
    stream: Vec<u64>,
    chunk_start: u64,
    /// Per thread of its process: the last of that thread's system calls (its completion
    /// token) this thread is known to run after (its calls post increasing tokens).
    seen: FastMap<usize, u32>,
    /// Completion token of its own last system call.
    last_done: Option<u32>,
    exit_token: Option<u32>,
    /// clear_child_tid: the futex the kernel wakes when the thread exits (pthread_join's).
    clear_tid: Option<u64>,
    last_page: u64,
    /// Its bit among its process's threads (index mod 64) in the pages' accessor sets.
    bit: u64,
    /// Its index among the root process's declared threads (None: a forked process's).
    declared: Option<u32>,
    /// The thread of the recording's first event, or a forked process's first thread: runs
    /// from the start of its process rather than being spawned.
    first: bool,
    spin: SpinDetect,
    /// Index (in the file, `Builder::events`) of its last event so far.
    last_event: Option<u64>,
}

/// A thread's busy-wait detection over its own stream: a run of entries that repeats the
/// `period` entries before it (the same instructions, the same loads, no store), started
/// where a load met its own earlier copy within `MAX_BODY` entries.
struct SpinDetect {
    /// Recent loads: (stream entry, its index + 1; 0 empty), direct-mapped by address.
    recent: Box<[(u64, u64); RECENT]>,
    /// Length of the repeating body; 0: no run under way.
    period: u64,
    /// First entry of the run: the body is `run_start - period..run_start`.
    run_start: u64,
    /// Entries before this index are known to repeat the body.
    checked: u64,
    /// Lines the body loads, once a whole iteration has repeated (registered in the
    /// process's `watched`).
    lines: Vec<u64>,
    /// The last store by another thread of the process to one of `lines` since they were
    /// registered: (its thread, its index in that thread's stream).
    release: Option<(usize, u64)>,
}

impl Default for SpinDetect {
    fn default() -> Self {
        SpinDetect { recent: Box::new([(0, 0); RECENT]), period: 0, run_start: 0, checked: 0, lines: Vec::new(), release: None }
    }
}

fn recent_slot(entry: u64) -> usize {
    // Loads of neighbouring words should not share a slot: the line's low bits vary fastest.
    ((entry >> 3) as usize ^ (entry >> 12) as usize) % RECENT
}

#[derive(Default)]
struct ProcB {
    threads: Vec<usize>,
    /// Recorded mappings alive at this point of the recording.
    live: BTreeMap<u64, (u64, MapInfo)>,
    /// Every range a recorded call has mapped so far (alive or not).
    ever_mapped: BTreeMap<u64, (u64, ())>,
    /// The last system call over each range: (end, its completion token, its thread).
    last_call: BTreeMap<u64, (u64, (u32, usize))>,
    /// Pages touched since the last system call over them: the threads (bits) that did.
    accessors: FastMap<u64, u64>,
    /// Program break (page-aligned) once known.
    brk: Option<u64>,
    /// Per futex address: the token of the last wake recorded on it (a futex wake, or the
    /// exit of a thread whose clear_child_tid it is).
    futex_wakes: FastMap<u64, u32>,
    /// Lines loaded by the body of a spin loop under way: its threads. Looked up on every
    /// store while not empty.
    watched: FastMap<u64, Vec<usize>>,
}

#[derive(Default)]
struct Builder {
    fetches: bool,
    cores: u32,
    events: u64,
    threads: Vec<ThreadB>,
    tids: FastMap<u32, usize>,
    cur: Option<usize>,
    procs: Vec<ProcB>,
    /// CPU sets of sched_setaffinity calls to more than one CPU (`Workload::cpu_sets`).
    cpu_sets: Vec<Vec<u64>>,
    tokens: u32,
    files: Vec<((u64, u64), u64)>,
    pending_file: Option<(u64, u64)>,
    /// Pages the root process touched outside every recorded mapping.
    image: BTreeSet<u64>,
    /// Threads declared in the root process so far.
    declared: u32,
    /// Releases of spin loops: (thread, stream index, token) — the thread posts the token
    /// after the entry before that index (the releasing store), placed by `place_releases`.
    releases: Vec<(usize, u64, u32)>,
    /// The machine's clock (GHz): a recorded duration in ns is this many cycles per ns.
    ghz: f64,
    /// Calls that can end another thread's blocking wait (a write or send to a pipe or
    /// socket, a connect), in the file's order, of every process: (the monotonic ns at
    /// which it entered, the token it posts, its thread).
    wakers: Vec<(u64, u32, usize)>,
    /// Per range call (its completion token): where its program's ops for it begin (the
    /// index in its thread's `ops` of its first wait) and its event's index in the file.
    call_sites: FastMap<u32, (usize, u64)>,
    /// Waits to insert before a range call, for a store that ran before it (store
    /// evidence, `Builder::store_evidence`): (the call's thread, the index in its ops where
    /// its ops begin, the token the storing thread posts after the store).
    early_stores: Vec<(usize, usize, u32)>,
}

fn align_up(v: u64) -> u64 {
    v.div_ceil(PAGE) * PAGE
}

/// The end of x86-64 user space with 4-level paging (TASK_SIZE_MAX, 2^47 less a guard page;
/// arch/x86/include/asm/page_64_types.h): no recorded call's range goes past it.
const USER_END: u64 = 1 << 47;

/// `[va, va + len)` with `len` rounded up to whole pages (PAGE_ALIGN, as the kernel's calls
/// do), when `va` is page-aligned and the range lies in user space; `None` otherwise (a
/// length near 2^64 included, which rounding up would overflow).
fn user_range(va: u64, len: u64) -> Option<(u64, u64)> {
    let len = len.checked_next_multiple_of(PAGE)?;
    (va.is_multiple_of(PAGE) && va.checked_add(len)? <= USER_END).then_some((va, len))
}

impl Builder {
    fn new_thread(&mut self, tid: u32) -> usize {
        let i = self.threads.len();
        self.threads.push(ThreadB {
            tid,
            process: None,
            pending: Vec::new(),
            ops: Vec::new(),
            stream: Vec::new(),
            chunk_start: 0,
            seen: FastMap::default(),
            last_done: None,
            exit_token: None,
            clear_tid: None,
            last_page: NO_PAGE,
            bit: 0,
            declared: None,
            first: false,
            spin: SpinDetect::default(),
            last_event: None,
        });
        self.tids.insert(tid, i);
        i
    }

    fn attach(&mut self, t: usize, process: usize) {
        let p = &mut self.procs[process];
        self.threads[t].bit = 1 << (p.threads.len() % 64);
        self.threads[t].process = Some(process);
        p.threads.push(t);
    }

    fn token(&mut self) -> u32 {
        self.tokens += 1;
        self.tokens - 1
    }

    fn flush_chunk(&mut self, t: usize) {
        if self.threads[t].spin.period > 0 {
            // A system call (or a wait) ends a spin loop's run: the loop exits into it.
            let end = self.threads[t].stream.len() as u64;
            self.spin_verify(t, end);
            if self.threads[t].spin.period > 0 {
                self.end_run(t, end);
            }
        }
        let th = &mut self.threads[t];
        let end = th.stream.len() as u64;
        if end > th.chunk_start {
            th.ops.push(Op::Replay { stream: t as u32, start: th.chunk_start, len: end - th.chunk_start });
            th.chunk_start = end;
        }
    }

    fn push_op(&mut self, t: usize, op: Op) {
        self.flush_chunk(t);
        self.threads[t].ops.push(op);
    }

    fn event(&mut self, ev: TraceEvent) -> Result<(), String> {
        if let TraceEvent::Thread { tid } = ev {
            let t = match self.tids.get(&tid) {
                Some(&t) => t,
                None => {
                    let t = self.new_thread(tid);
                    if self.procs.is_empty() {
                        // The recording's first thread: the root process's first thread.
                        self.procs.push(ProcB::default());
                        self.attach(t, 0);
                        self.threads[t].declared = Some(0);
                        self.threads[t].first = true;
                        self.declared = 1;
                    }
                    t
                }
            };
            self.cur = Some(t);
            return Ok(());
        }
        let t = match self.cur {
            Some(t) => t,
            None => {
                // Events before any Thread record belong to thread 0.
                self.event(TraceEvent::Thread { tid: 0 })?;
                self.cur.expect("just set")
            }
        };
        if self.threads[t].process.is_none() {
            self.threads[t].pending.push(ev);
            return Ok(());
        }
        self.thread_event(t, ev)
    }

    fn thread_event(&mut self, t: usize, ev: TraceEvent) -> Result<(), String> {
        let r = self.thread_event_inner(t, ev);
        self.threads[t].last_event = Some(self.events);
        r
    }

    fn thread_event_inner(&mut self, t: usize, ev: TraceEvent) -> Result<(), String> {
        match ev {
            TraceEvent::Access { va, kind, .. } => self.access(t, va, kind),
            TraceEvent::Instructions { n } => {
                self.instructions(t, n);
                Ok(())
            }
            TraceEvent::File { dev, ino } => {
                self.pending_file = Some((dev, ino));
                Ok(())
            }
            TraceEvent::Syscall { nr, nargs, args, ret } => {
                let file = self.pending_file.take();
                let mut a = [0u64; 6];
                a[..nargs as usize].copy_from_slice(&args[..nargs as usize]);
                self.syscall(t, nr, nargs, a, ret, file)
            }
            TraceEvent::Mmap { start, len, prot, flags } => {
                self.syscall(t, 9, 6, [start, len, prot as u64, flags as u64 | MAP_ANONYMOUS, u64::MAX, 0], start as i64, None)
            }
            TraceEvent::Munmap { start, len } => self.syscall(t, 11, 2, [start, len, 0, 0, 0, 0], 0, None),
            TraceEvent::Thread { .. } => unreachable!("handled by event()"),
        }
    }

    fn instructions(&mut self, t: usize, n: u64) {
        let th = &mut self.threads[t];
        // Merge with the previous count of the same chunk.
        if th.stream.len() as u64 > th.chunk_start {
            if let Some(last) = th.stream.last_mut() {
                if *last & Recorded::KIND == Recorded::INSTRUCTIONS && (*last & Recorded::VALUE).checked_add(n).is_some_and(|sum| sum < Recorded::VALUE) {
                    *last += n;
                    return;
                }
            }
        }
        th.stream.push(Recorded::INSTRUCTIONS | n.min(Recorded::VALUE));
    }

    fn access(&mut self, t: usize, va: u64, kind: AccessKind) -> Result<(), String> {
        if kind == AccessKind::Fetch && !self.fetches {
            self.instructions(t, 1);
            return Ok(());
        }
        if va >= 1 << 47 {
            return Err(format!("thread {}: access to {va:#x}, outside the 47-bit user address space", self.threads[t].tid));
        }
        let page = va >> 12;
        let early = if kind.is_write() { self.store_evidence(t, va) } else { None };
        if page != self.threads[t].last_page || early.is_some() {
            self.threads[t].last_page = page;
            self.new_page(t, page, early.map(|(tok, _)| tok));
        }
        let code = match kind {
            AccessKind::Load => Recorded::LOAD,
            // A read-modify-write needs the store's permission.
            AccessKind::Store | AccessKind::Modify => Recorded::STORE,
            AccessKind::Fetch => Recorded::FETCH,
        };
        self.threads[t].stream.push(code | va);
        self.spin_step(t, code | va);
        if let Some((_, (by, at))) = early {
            // The call waits, before everything it does, for this store.
            let token = self.token();
            self.push_op(t, Op::Post { token });
            self.early_stores.push((by, at, token));
        }
        Ok(())
    }

    /// Store evidence: thread `t` stores to `va`, which another thread's call (the last
    /// over the page) left mapped but not writable, and `t` has recorded nothing since that
    /// call. The store did not fault (a faulting access is not recorded), so it ran before
    /// the call took effect: it is the access `t` had made but not yet recorded when the
    /// call was recorded (the plugin records an access just after it runs; see
    /// record/tlbsim_record.c). Returns the call (its token) and where its ops begin in its
    /// thread's program (that thread, the index), for the call to wait for the store there.
    /// A store the call's protection forbids that `t` recorded after other events of its
    /// own is not such evidence (it replays as recorded: a SIGSEGV).
    fn store_evidence(&self, t: usize, va: u64) -> Option<(u32, (usize, usize))> {
        let pi = self.threads[t].process?;
        let p = &self.procs[pi];
        let writable = p.live.range(..=va).next_back().filter(|(_, &(end, _))| end > va).map(|(_, &(_, info))| info.writable)?;
        if writable {
            return None;
        }
        let (tok, by) = p.last_call.range(..=va).next_back().filter(|(_, &(end, _))| end > va).map(|(_, &(_, call))| call)?;
        let &(at, event) = self.call_sites.get(&tok)?;
        let after = self.threads[t].last_event.is_some_and(|e| e > event);
        (by != t && !after).then_some((tok, (by, at)))
    }

    /// Spin-loop detection after thread `t` appended `entry` to its stream: extend or end
    /// its run, let a store release the spinners of its line, start a run at a load.
    fn spin_step(&mut self, t: usize, entry: u64) {
        let pi = self.threads[t].process.expect("attached");
        if self.threads[t].spin.period > 0 {
            let end = self.threads[t].stream.len() as u64;
            self.spin_verify(t, end);
        }
        // The run may have ended and been compiled (the stream shortened): the entry is last.
        let i = self.threads[t].stream.len() as u64 - 1;
        let th = &mut self.threads[t];
        let sp = &mut th.spin;
        if sp.period > 0 && sp.lines.is_empty() && sp.checked >= sp.run_start + sp.period {
            // A whole iteration repeated: watch the lines the body loads for the store that
            // will let the loop exit.
            let body = &th.stream[(sp.run_start - sp.period) as usize..sp.run_start as usize];
            let mut lines: Vec<u64> = body.iter().filter(|&&e| e & Recorded::KIND == Recorded::LOAD).map(|&e| (e & Recorded::VALUE) >> LINE_SHIFT).collect();
            lines.sort_unstable();
            lines.dedup();
            for &line in &lines {
                self.procs[pi].watched.entry(line).or_default().push(t);
            }
            self.threads[t].spin.lines = lines;
            self.threads[t].spin.release = None;
        }
        match entry & Recorded::KIND {
            Recorded::STORE if !self.procs[pi].watched.is_empty() => {
                if let Some(spinners) = self.procs[pi].watched.get(&((entry & Recorded::VALUE) >> LINE_SHIFT)) {
                    for &s in spinners {
                        if s != t {
                            self.threads[s].spin.release = Some((t, i));
                        }
                    }
                }
            }
            Recorded::LOAD => {
                let chunk_start = self.threads[t].chunk_start;
                let sp = &mut self.threads[t].spin;
                let slot = &mut sp.recent[recent_slot(entry)];
                if sp.period == 0 && slot.0 == entry && slot.1 > chunk_start && i + 1 - slot.1 <= MAX_BODY {
                    // The same load again, with no system call between: perhaps a loop.
                    sp.period = i + 1 - slot.1;
                    sp.run_start = i;
                    sp.checked = i + 1;
                }
                *slot = (entry, i + 1);
            }
            _ => {}
        }
    }

    /// Check thread `t`'s entries up to `end` against the run's body; the first that differs
    /// (or stores) ends the run there.
    fn spin_verify(&mut self, t: usize, end: u64) {
        let th = &mut self.threads[t];
        let p = th.spin.period;
        let mut x = th.spin.checked;
        while x < end {
            let e = th.stream[x as usize];
            if e & Recorded::KIND == Recorded::STORE || e != th.stream[(x - p) as usize] {
                self.end_run(t, x);
                return;
            }
            x += 1;
        }
        th.spin.checked = end;
    }

    /// Thread `t`'s run ends before entry `x` (the loop's exit). If another thread's store
    /// to a line the body loads released it, its whole iterations become an `Op::Spin` on
    /// a token that thread posts after that store; else they stay as recorded (a loop that
    /// ran its own course).
    fn end_run(&mut self, t: usize, x: u64) {
        let pi = self.threads[t].process.expect("attached");
        let sp = &mut self.threads[t].spin;
        let (p, run_start) = (sp.period, sp.run_start);
        sp.period = 0;
        let release = sp.release.take();
        for line in std::mem::take(&mut sp.lines) {
            if let Some(v) = self.procs[pi].watched.get_mut(&line) {
                v.retain(|&s| s != t);
                if v.is_empty() {
                    self.procs[pi].watched.remove(&line);
                }
            }
        }
        let full = run_start + (x - run_start) / p * p;
        let Some((u, at)) = release else { return };
        if full == run_start {
            return;
        }
        let token = self.token();
        // The last partial iteration (it saw the flag set) and what follows stay.
        let tail = self.threads[t].stream.split_off(full as usize);
        self.threads[t].stream.truncate(run_start as usize);
        self.flush_chunk(t);
        let th = &mut self.threads[t];
        th.ops.push(Op::Spin { token, count: 1, stream: t as u32, start: run_start - p, len: p });
        th.stream.extend(tail);
        // Indices past the run moved: forget recent loads.
        th.spin.recent.fill((0, 0));
        self.releases.push((u, at + 1, token));
    }

    /// Insert each early store's `Wait` before the ops of the call it ran before.
    fn place_early_stores(&mut self) {
        let mut list = std::mem::take(&mut self.early_stores);
        list.sort_unstable();
        for mine in list.chunk_by(|a, b| a.0 == b.0) {
            let by = mine[0].0;
            let ops = std::mem::take(&mut self.threads[by].ops);
            let mut out = Vec::with_capacity(ops.len() + mine.len());
            let mut waits = mine.iter().peekable();
            for (i, op) in ops.into_iter().enumerate() {
                while let Some(&(_, _, token)) = waits.next_if(|e| e.1 == i) {
                    out.push(Op::Wait { token, count: 1 });
                }
                out.push(op);
            }
            self.threads[by].ops = out;
        }
    }

    /// Insert each spin release's `Post` into its thread's program right after the store:
    /// split the `Replay` chunk that holds it.
    fn place_releases(&mut self) -> Result<(), String> {
        let mut releases = std::mem::take(&mut self.releases);
        releases.sort_unstable();
        let mut k = 0;
        while k < releases.len() {
            let u = releases[k].0;
            let mine = releases[k..].iter().take_while(|r| r.0 == u).count();
            let list = &releases[k..k + mine];
            k += mine;
            let ops = std::mem::take(&mut self.threads[u].ops);
            let mut out = Vec::with_capacity(ops.len() + 2 * list.len());
            let mut j = 0;
            for op in ops {
                let Op::Replay { stream, start, len } = op else {
                    out.push(op);
                    continue;
                };
                let mut from = start;
                while j < list.len() && list[j].1 <= start + len {
                    let at = list[j].1;
                    if at > from {
                        out.push(Op::Replay { stream, start: from, len: at - from });
                        from = at;
                    }
                    out.push(Op::Post { token: list[j].2 });
                    j += 1;
                }
                if from < start + len {
                    out.push(Op::Replay { stream, start: from, len: start + len - from });
                }
            }
            if j < list.len() {
                // A store is never taken out of a stream, so this is a compiler bug, but a
                // spin waiting for a post that never comes would only fail much later.
                return Err(format!("thread {}: a spin loop's releasing store (entry {}) is in no replayed chunk", self.threads[u].tid, list[j].1 - 1));
            }
            self.threads[u].ops = out;
        }
        Ok(())
    }

    /// Thread `t` touches `page` (first time since its last access elsewhere, or since a
    /// system call of its process): wait for the call that made the page what it is, note
    /// the thread among the page's accessors, and note memory mapped before the recording.
    /// `except`: a call not to wait for (one the access ran before: store evidence).
    fn new_page(&mut self, t: usize, page: u64, except: Option<u32>) {
        let pi = self.threads[t].process.expect("attached");
        let va = page << 12;
        let p = &mut self.procs[pi];
        let call = p.last_call.range(..=va).next_back().filter(|(_, &(end, _))| end > va).map(|(_, &(_, call))| call);
        let bit = self.threads[t].bit;
        *p.accessors.entry(page).or_insert(0) |= bit;
        if !covers(&p.ever_mapped, va) {
            // Never mapped by a recorded call: the program had it before the recording
            // began. (A forked process's was its root's.)
            self.image.insert(page);
        }
        if let Some(call) = call.filter(|c| Some(c.0) != except) {
            self.wait_for(t, call);
        }
    }

    /// Make `t` wait for the system call `(token, by)` unless it is its own or one it
    /// already runs after.
    fn wait_for(&mut self, t: usize, (token, by): (u32, usize)) {
        if by == t || self.threads[t].seen.get(&by).is_some_and(|&k| k >= token) {
            return;
        }
        self.push_op(t, Op::Wait { token, count: 1 });
        self.threads[t].seen.insert(by, token);
    }

    /// Emit thread `t`'s system call `op` over `[va, va+len)` (after `SetRange`), with the
    /// waits that keep the recorded order, and note it as the last call over the range.
    fn range_call(&mut self, t: usize, va: u64, len: u64, ops: Vec<Op>) {
        let pi = self.threads[t].process.expect("attached");
        let end = va + len;
        self.flush_chunk(t);
        let at = self.threads[t].ops.len();
        // The calls of other threads over any part of the range, in their recorded order.
        let calls: Vec<(u32, usize)> = self.procs[pi].last_call.range(..end).filter(|(_, &(e, _))| e > va).map(|(_, &(_, c))| c).collect();
        for call in calls {
            self.wait_for(t, call);
        }
        // The other threads that touched the range since the last call over it.
        let mask = take_accessors(&mut self.procs[pi].accessors, va, end);
        let p = &self.procs[pi];
        let others: Vec<usize> = p.threads.iter().copied().filter(|&u| u != t && self.threads[u].bit & mask != 0).collect();
        let ready = (!others.is_empty()).then(|| self.token());
        let mut count = 0;
        for u in others {
            match self.threads[u].exit_token {
                // Gone in the recording: its exit is the point to wait for.
                Some(tok) => self.push_op(t, Op::Wait { token: tok, count: 1 }),
                None => {
                    self.push_op(u, Op::Post { token: ready.expect("others") });
                    count += 1;
                }
            }
        }
        if count > 0 {
            self.push_op(t, Op::Wait { token: ready.expect("others"), count });
        }
        self.push_op(t, Op::SetRange { slot: 0, va, len });
        for op in ops {
            self.push_op(t, op);
        }
        let done = self.finish_call(t);
        self.call_sites.insert(done, (at, self.events));
        let p = &mut self.procs[pi];
        assign_range(&mut p.last_call, va, end, (done, t));
        for &u in &p.threads {
            self.threads[u].last_page = NO_PAGE;
        }
    }

    /// Fork copies the whole address space: it waits for every other thread's last call.
    fn order_whole(&mut self, t: usize) {
        let pi = self.threads[t].process.expect("attached");
        let calls: Vec<(u32, usize)> = self.procs[pi].threads.iter().filter_map(|&u| self.threads[u].last_done.map(|k| (k, u))).collect();
        for call in calls {
            self.wait_for(t, call);
        }
    }

    /// Post the completion of `t`'s call just emitted.
    fn finish_call(&mut self, t: usize) -> u32 {
        let done = self.token();
        self.push_op(t, Op::Post { token: done });
        self.threads[t].last_done = Some(done);
        done
    }

    fn file_id(&mut self, key: (u64, u64), pages: u64) -> u32 {
        match self.files.iter().position(|f| f.0 == key) {
            Some(i) => {
                self.files[i].1 = self.files[i].1.max(pages);
                i as u32
            }
            None => {
                self.files.push((key, pages));
                (self.files.len() - 1) as u32
            }
        }
    }

    fn map(&mut self, t: usize, va: u64, len: u64, info: MapInfo, populate: bool) {
        let spec = MapSpec { bytes: len, backing: info.backing, shared: info.shared, populate, writable: info.writable, recyclable: false, fixed: true };
        self.range_call(t, va, len, vec![Op::Mmap { slot: 0, spec }]);
        let pi = self.threads[t].process.expect("attached");
        let p = &mut self.procs[pi];
        assign_range(&mut p.live, va, va + len, info);
        assign_range(&mut p.ever_mapped, va, va + len, ());
    }

    fn unmap(&mut self, t: usize, va: u64, len: u64) {
        self.range_call(t, va, len, vec![Op::Munmap { slot: 0 }]);
        let pi = self.threads[t].process.expect("attached");
        remove_range(&mut self.procs[pi].live, va, va + len);
    }

    fn syscall(&mut self, t: usize, nr: u16, nargs: u8, a: [u64; 6], ret: i64, file: Option<(u64, u64)>) -> Result<(), String> {
        let failed = ret < 0 && ret > -4096;
        match nr {
            // mmap(addr, len, prot, flags, fd, offset)
            9 if !failed => {
                let Some((va, len)) = user_range(ret as u64, a[1]).filter(|&(_, len)| len > 0) else {
                    return Err(format!("thread {}: mmap result {:#x}+{:#x} is not a page-aligned user range", self.threads[t].tid, ret as u64, a[1]));
                };
                let backing = match file {
                    Some(key) if a[3] & MAP_ANONYMOUS == 0 => {
                        let offset_pages = a[5] / PAGE;
                        let file = self.file_id(key, offset_pages + len / PAGE);
                        Backing::File { file, offset_pages }
                    }
                    _ => Backing::Anonymous,
                };
                let info = MapInfo { writable: a[2] & PROT_WRITE != 0, shared: a[3] & MAP_SHARED != 0, backing };
                self.map(t, va, len, info, a[3] & MAP_POPULATE != 0);
            }
            // munmap, mprotect, madvise and msync of an unaligned address fail (EINVAL).
            10 | 11 | 26 | 28 if a[1] == 0 || user_range(a[0], a[1]).is_none() => {}
            // munmap(addr, len)
            11 if !failed => self.unmap(t, a[0], align_up(a[1])),
            // mprotect(addr, len, prot)
            10 if !failed => {
                let (va, len) = (a[0], align_up(a[1]));
                let writable = a[2] & PROT_WRITE != 0;
                self.range_call(t, va, len, vec![Op::Mprotect { slot: 0, writable }]);
                let pi = self.threads[t].process.expect("attached");
                set_writable(&mut self.procs[pi].live, va, va + len, writable);
            }
            // madvise(addr, len, advice): the advice that zaps pages
            28 if !failed && (a[2] == MADV_DONTNEED || a[2] == MADV_FREE) => {
                self.range_call(t, a[0], align_up(a[1]), vec![Op::MadviseDontneed { slot: 0 }]);
            }
            // msync(addr, len, flags)
            26 if !failed => self.range_call(t, a[0], align_up(a[1]), vec![Op::Msync { slot: 0 }]),
            // brk(addr): the result is the break, moved or not
            12 if ret > 0 => {
                let pi = self.threads[t].process.expect("attached");
                let new = align_up(ret as u64);
                if new > USER_END {
                    return Err(format!("thread {}: brk result {ret:#x} is past user space", self.threads[t].tid));
                }
                match self.procs[pi].brk {
                    None => self.procs[pi].brk = Some(new),
                    Some(old) if new > old => {
                        let info = MapInfo { writable: true, shared: false, backing: Backing::Anonymous };
                        self.map(t, old, new - old, info, false);
                        self.procs[pi].brk = Some(new);
                    }
                    Some(old) if new < old => {
                        self.unmap(t, new, old - new);
                        self.procs[pi].brk = Some(new);
                    }
                    Some(_) => {}
                }
            }
            // mremap(old, old_size, new_size, flags, new_addr)
            25 if !failed => {
                // Both ranges in user space, the new one not empty (mm/mremap.c refuses
                // anything else with EINVAL; an old length of 0 duplicates a shared mapping).
                let (Some((old, old_len)), Some((to, new_len))) = (user_range(a[0], a[1]), user_range(ret as u64, a[2]).filter(|&(_, len)| len > 0)) else {
                    return Err(format!(
                        "thread {}: mremap of {:#x}+{:#x} to {:#x}+{:#x} is not of page-aligned user ranges",
                        self.threads[t].tid, a[0], a[1], ret as u64, a[2]
                    ));
                };
                let pi = self.threads[t].process.expect("attached");
                let info = self.procs[pi].live.range(..=old).next_back().filter(|(_, &(end, _))| end > old).map(|(&s, &(_, i))| (s, i));
                let Some((start, info)) = info else {
                    return Err(format!("thread {}: mremap of {old:#x}, which no recorded mapping covers", self.threads[t].tid));
                };
                let shifted = |at: u64| match info.backing {
                    Backing::File { file, offset_pages } => Backing::File { file, offset_pages: offset_pages + (at - start) / PAGE },
                    b => b,
                };
                if to == old {
                    if new_len > old_len {
                        let backing = shifted(old + old_len);
                        if let Backing::File { file, offset_pages } = backing {
                            let f = &mut self.files[file as usize];
                            f.1 = f.1.max(offset_pages + (new_len - old_len) / PAGE);
                        }
                        self.map(t, old + old_len, new_len - old_len, MapInfo { backing, ..info }, false);
                    } else if new_len < old_len {
                        self.unmap(t, old + new_len, old_len - new_len);
                    }
                } else {
                    let backing = shifted(old);
                    self.unmap(t, old, old_len);
                    if let Backing::File { file, offset_pages } = backing {
                        let f = &mut self.files[file as usize];
                        f.1 = f.1.max(offset_pages + new_len / PAGE);
                    }
                    self.map(t, to, new_len, MapInfo { backing, ..info }, false);
                }
            }
            // clone(flags, ...), clone3(args, size[, flags]), fork(), vfork()
            56 | 435 | 57 | 58 if ret > 0 => {
                let thread = match nr {
                    56 => a[0] & CLONE_VM != 0,
                    // The plugin adds clone_args.flags as a third argument when it can read it.
                    435 => nargs < 3 || a[2] & CLONE_VM != 0,
                    _ => false,
                };
                // clone(flags, stack, parent_tid, child_tid, tls)
                let (flags, ctid) = if nr == 56 { (a[0], a[3]) } else { (0, 0) };
                self.create(t, ret as u32, thread, flags, ctid)?;
            }
            // exit(status), exit_group(status)
            60 | 231 => {
                let tok = self.token();
                self.push_op(t, Op::Post { token: tok });
                self.push_op(t, Op::Exit);
                self.threads[t].exit_token = Some(tok);
                if let Some(addr) = self.threads[t].clear_tid {
                    // The kernel clears the tid and wakes its futex: pthread_join returns.
                    let pi = self.threads[t].process.expect("attached");
                    self.procs[pi].futex_wakes.insert(addr, tok);
                }
            }
            // set_tid_address(tidptr)
            218 => self.threads[t].clear_tid = Some(a[0]),
            // futex(uaddr, op, val, timeout/val2, uaddr2): the plugin records wakes when
            // they enter (before the threads they wake return) and waits when they return.
            202 if nargs >= 2 => {
                let pi = self.threads[t].process.expect("attached");
                match a[1] & FUTEX_CMD_MASK {
                    FUTEX_WAKE | FUTEX_WAKE_BITSET | FUTEX_REQUEUE | FUTEX_CMP_REQUEUE | FUTEX_WAKE_OP => {
                        let tok = self.token();
                        self.push_op(t, Op::Post { token: tok });
                        let p = &mut self.procs[pi];
                        p.futex_wakes.insert(a[0], tok);
                        if a[1] & FUTEX_CMD_MASK != FUTEX_WAKE && a[1] & FUTEX_CMD_MASK != FUTEX_WAKE_BITSET && nargs >= 5 {
                            // Requeued or second-word waiters are woken through uaddr2.
                            p.futex_wakes.insert(a[4], tok);
                        }
                    }
                    // Woken (0), not timed out or interrupted: it slept until the last wake
                    // recorded on the word before its return.
                    FUTEX_WAIT | FUTEX_WAIT_BITSET if ret == 0 => {
                        if let Some(&tok) = self.procs[pi].futex_wakes.get(&a[0]) {
                            self.push_op(t, Op::Sleep { token: tok, count: 1 });
                        }
                    }
                    _ => {}
                }
            }
            // sched_setaffinity(pid, len, mask): the plugin adds the mask's first word.
            203 if !failed && nargs >= 4 && a[3] != 0 => {
                let target = if a[0] == 0 { Some(t) } else { self.tids.get(&(a[0] as u32)).copied() };
                let cores = self.cores as usize;
                let mut set = vec![0u64; cores.div_ceil(64)];
                for bit in (0..64).filter(|b| a[3] >> b & 1 == 1) {
                    let core = bit % cores;
                    set[core / 64] |= 1 << (core % 64);
                }
                let op = if set.iter().map(|w| w.count_ones()).sum::<u32>() == 1 {
                    Op::MigrateThread { core: a[3].trailing_zeros() % self.cores }
                } else {
                    let index = self.cpu_sets.iter().position(|s| *s == set).unwrap_or_else(|| {
                        self.cpu_sets.push(set);
                        self.cpu_sets.len() - 1
                    });
                    Op::SetAffinity { set: index as u32 }
                };
                if let Some(u) = target.filter(|&u| self.threads[u].process.is_some() && self.threads[u].exit_token.is_none()) {
                    self.push_op(u, op);
                }
            }
            // read, write, readv, writev, pread64, pwrite64, preadv, pwritev of a regular file
            // (a File record names it; the plugin adds the file offset as the fourth
            // argument): through the page cache, the result being the bytes moved.
            // Not collapsed into the guard: a failed file write must not fall through to the
            // waker arm below.
            #[allow(clippy::collapsible_match)]
            0 | 1 | 17 | 18 | 19 | 20 | 295 | 296 if file.is_some() && nargs == 4 => {
                if ret > 0 {
                    let (offset, len) = (a[3], ret as u64);
                    let end = offset
                        .checked_add(len)
                        .filter(|&e| e <= 1 << 52)
                        .ok_or_else(|| format!("thread {}: file I/O at offset {offset:#x} of {len:#x} bytes is past any file's size", self.threads[t].tid))?;
                    let id = self.file_id(file.expect("matched"), end.div_ceil(PAGE));
                    let write = matches!(nr, 1 | 18 | 20 | 296);
                    self.push_op(t, Op::FileIo { file: id, offset, len, write });
                }
            }
            // A call that can end another thread's wait (write, writev to a pipe or socket;
            // sendto, sendmsg, sendmmsg, connect, shutdown): recorded as it enters, its
            // monotonic time as the fourth argument.
            1 | 20 | 42 | 44 | 46 | 48 | 307 if nargs == 4 => {
                let tok = self.token();
                self.push_op(t, Op::Post { token: tok });
                self.wakers.push((a[3], tok, t));
            }
            // nanosleep(req, rem) [+ requested ns, blocked ns]; clock_nanosleep(clock, flags,
            // req, rem) [+ requested ns (relative, an absolute deadline made relative by the
            // plugin), blocked ns]: the thread sleeps for what it asked, or for the time it
            // slept if a signal cut it short.
            35 | 230 if nargs >= 2 && (nargs == 4 || nargs == 6) => {
                let (requested, blocked) = (a[nargs as usize - 2], a[nargs as usize - 1]);
                let ns = if ret == -EINTR { blocked } else { requested };
                self.block_for(t, ns);
            }
            // A blocking wait (poll, select, pselect6, ppoll, epoll_wait, epoll_pwait,
            // epoll_pwait2, accept, accept4, recvfrom, recvmsg, recvmmsg; read and readv of
            // a pipe, socket or terminal): recorded as it returns with its first four
            // arguments, the monotonic ns it entered at and the ns it was blocked.
            0 | 7 | 19 | 23 | 43 | 45 | 47 | 232 | 270 | 271 | 281 | 288 | 299 | 441 if nargs == 6 => {
                let (entered, blocked) = (a[4], a[5]);
                match self.waker_of(t, entered) {
                    // Another recorded thread's call ended it: sleep until that call.
                    Some(tok) => self.push_op(t, Op::Sleep { token: tok, count: 1 }),
                    // Woken from outside the recording (a network client, a timeout): the
                    // time it was blocked.
                    None => self.block_for(t, blocked),
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Thread `t` sleeps `ns` nanoseconds (its core free): `Op::Block`.
    fn block_for(&mut self, t: usize, ns: u64) {
        let cycles = (ns as f64 * self.ghz).round() as u64;
        if cycles > 0 {
            self.push_op(t, Op::Block { cycles });
        }
    }

    /// The token of the call that ended thread `t`'s wait that began at `entered` (ns): the
    /// last call of another thread that can wake a waiter, recorded before the wait's
    /// return and entered after the wait began.
    fn waker_of(&self, t: usize, entered: u64) -> Option<u32> {
        for &(at, tok, u) in self.wakers.iter().rev() {
            if at.saturating_add(WAKER_SLACK_NS) < entered {
                break;
            }
            if u != t && at >= entered {
                return Some(tok);
            }
        }
        None
    }

    /// Thread `t` created `tid`: a thread of its process (`thread`) or a forked process.
    fn create(&mut self, t: usize, tid: u32, thread: bool, nr_flags: u64, ctid: u64) -> Result<(), String> {
        let child = match self.tids.get(&tid) {
            Some(&c) if self.threads[c].process.is_some() => return Err(format!("thread {tid} is created twice")),
            Some(&c) => c,
            None => self.new_thread(tid),
        };
        let pi = self.threads[t].process.expect("attached");
        if thread {
            self.attach(child, pi);
            if nr_flags & CLONE_CHILD_CLEARTID != 0 {
                self.threads[child].clear_tid = Some(ctid);
            }
            if pi == 0 {
                // The root process's threads are declared, held until their creator's clone.
                self.threads[child].declared = Some(self.declared);
                self.push_op(t, Op::Spawn { thread: self.declared });
                self.declared += 1;
            } else {
                // A forked process exists only once its fork has run: its threads are
                // created by the clone itself (its program is the builder thread's index).
                self.push_op(t, Op::Clone { program: child });
            }
            // It runs after everything its creator did before the clone.
            let mut seen = self.threads[t].seen.clone();
            if let Some(k) = self.threads[t].last_done {
                seen.insert(t, k);
            }
            self.threads[child].seen = seen;
        } else {
            let np = self.procs.len();
            let parent = &self.procs[pi];
            let (live, ever_mapped, brk) = (parent.live.clone(), parent.ever_mapped.clone(), parent.brk);
            self.procs.push(ProcB { live, ever_mapped, brk, ..Default::default() });
            self.attach(child, np);
            self.threads[child].first = true;
            self.order_whole(t);
            self.push_op(t, Op::Fork { program: child, core: None });
            self.finish_call(t);
        }
        // Its events recorded before the clone's return, in their order.
        for ev in std::mem::take(&mut self.threads[child].pending) {
            self.thread_event(child, ev)?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Workload, String> {
        if self.threads.is_empty() {
            return Err("the recording has no events".into());
        }
        if let Some(th) = self.threads.iter().find(|th| th.process.is_none()) {
            return Err(format!("thread {} has events but no recorded clone or fork created it", th.tid));
        }
        for t in 0..self.threads.len() {
            // A loop still spinning when the recording ended has not exited: it stays as
            // recorded.
            self.threads[t].spin.period = 0;
            self.threads[t].spin.lines.clear();
            self.flush_chunk(t);
        }
        self.place_early_stores();
        self.place_releases()?;
        // Memory the program had before the recording: runs of touched pages.
        let mut fixed_regions = Vec::new();
        let mut run: Option<(u64, u64)> = None;
        for &page in self.image.iter().chain(std::iter::once(&NO_PAGE)) {
            match run {
                Some((start, end)) if page == end => run = Some((start, end + 1)),
                _ => {
                    if let Some((start, end)) = run {
                        let spec = super::builder::anon((end - start) * PAGE, true);
                        fixed_regions.push((0, start * PAGE, spec));
                    }
                    run = (page != NO_PAGE).then(|| (page, page + 1));
                }
            }
        }
        let root: Vec<usize> = self.procs[0].threads.clone();
        let threads = root
            .iter()
            .map(|&t| ThreadSpec { name: format!("tid{}", self.threads[t].tid), class: "recorded".into(), core: None, program: t, daemon: false })
            .collect();
        let held_threads = root.iter().filter(|&&t| !self.threads[t].first).map(|&t| self.threads[t].declared.expect("root thread")).collect();
        let mut w = Workload {
            processes: vec![ProcessSpec {
                name: format!("pid{}", self.threads[root[0]].tid),
                group: 0,
                regions: Vec::new(),
                threads,
                page_tables: Default::default(),
            }],
            files: self.files.iter().map(|&((dev, ino), pages)| super::program::FileSpec { name: format!("dev{dev}:ino{ino}"), pages: pages.max(1) }).collect(),
            slots: 1,
            held_threads,
            fixed_regions,
            tokens: self.tokens,
            cpu_sets: self.cpu_sets,
            ..Default::default()
        };
        for th in self.threads {
            w.programs.push(th.ops);
            w.recorded.push(th.stream);
        }
        Ok(w)
    }
}

/// The threads (bits) that touched `[lo, hi)` since the last call over it; those entries
/// are removed (the call being compiled is now the last over the range).
fn take_accessors(accessors: &mut FastMap<u64, u64>, lo: u64, hi: u64) -> u64 {
    let mut mask = 0u64;
    let (first, end) = (lo >> 12, hi.div_ceil(PAGE));
    if end - first <= accessors.len() as u64 {
        for page in first..end {
            mask |= accessors.remove(&page).unwrap_or(0);
        }
    } else {
        accessors.retain(|&page, m| {
            let inside = page >= first && page < end;
            if inside {
                mask |= *m;
            }
            !inside
        });
    }
    mask
}

/// A value of a range map that knows how to describe a part of its range.
trait RangeValue: Copy {
    /// The value for the part of the range starting `pages` pages into it.
    fn at_page(self, _pages: u64) -> Self {
        self
    }
}

impl RangeValue for (u32, usize) {}
impl RangeValue for () {}
impl RangeValue for MapInfo {
    fn at_page(self, pages: u64) -> Self {
        match self.backing {
            Backing::File { file, offset_pages } => MapInfo { backing: Backing::File { file, offset_pages: offset_pages + pages }, ..self },
            _ => self,
        }
    }
}

/// Remove `[lo, hi)` from a map of ranges (start → (end, value)), splitting those that
/// straddle it.
fn remove_range<V: RangeValue>(map: &mut BTreeMap<u64, (u64, V)>, lo: u64, hi: u64) {
    let hit: Vec<u64> = map.range(..hi).filter(|(_, &(end, _))| end > lo).map(|(&s, _)| s).collect();
    for s in hit {
        let (end, v) = map.remove(&s).expect("listed");
        if s < lo {
            map.insert(s, (lo, v));
        }
        if end > hi {
            map.insert(hi, (end, v.at_page((hi - s) / PAGE)));
        }
    }
}

/// Set `[lo, hi)` of a map of ranges to `value`.
fn assign_range<V: RangeValue>(map: &mut BTreeMap<u64, (u64, V)>, lo: u64, hi: u64, value: V) {
    remove_range(map, lo, hi);
    map.insert(lo, (hi, value));
}

/// Whether a map of ranges covers `va`.
fn covers<V>(map: &BTreeMap<u64, (u64, V)>, va: u64) -> bool {
    map.range(..=va).next_back().is_some_and(|(_, &(end, _))| end > va)
}

/// mprotect's effect on the live mappings of `[lo, hi)`.
fn set_writable(map: &mut BTreeMap<u64, (u64, MapInfo)>, lo: u64, hi: u64, writable: bool) {
    let hit: Vec<(u64, u64, MapInfo)> = map.range(..hi).filter(|(_, &(end, _))| end > lo).map(|(&s, &(e, i))| (s, e, i)).collect();
    for (s, e, info) in hit {
        let at = s.max(lo);
        remove_range(map, at, e.min(hi));
        map.insert(at, (e.min(hi), MapInfo { writable, ..info.at_page((at - s) / PAGE) }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_split_and_assign() {
        let mut m: BTreeMap<u64, (u64, (u32, usize))> = BTreeMap::new();
        assign_range(&mut m, 0, 100, (1, 0));
        assign_range(&mut m, 40, 60, (2, 1));
        let flat = |m: &BTreeMap<u64, (u64, (u32, usize))>| m.iter().map(|(&s, &(e, v))| (s, e, v.0)).collect::<Vec<_>>();
        assert_eq!(flat(&m), vec![(0, 40, 1), (40, 60, 2), (60, 100, 1)]);
        remove_range(&mut m, 30, 70);
        assert_eq!(flat(&m), vec![(0, 30, 1), (70, 100, 1)]);
    }

    #[test]
    fn file_offsets_follow_a_split() {
        let info = MapInfo { writable: true, shared: true, backing: Backing::File { file: 0, offset_pages: 10 } };
        let mut m = BTreeMap::new();
        m.insert(0, (8 * PAGE, info));
        set_writable(&mut m, 2 * PAGE, 4 * PAGE, false);
        let parts: Vec<(u64, u64, bool, Backing)> = m.iter().map(|(&s, &(e, i))| (s / PAGE, e / PAGE, i.writable, i.backing)).collect();
        assert_eq!(
            parts,
            vec![
                (0, 2, true, Backing::File { file: 0, offset_pages: 10 }),
                (2, 4, false, Backing::File { file: 0, offset_pages: 12 }),
                (4, 8, true, Backing::File { file: 0, offset_pages: 14 }),
            ]
        );
    }
}
