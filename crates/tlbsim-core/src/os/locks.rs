//! Kernel locks (Linux 6.x; include/linux/mmap_lock.h, kernel/locking/rwsem.c, mm/mmap.c,
//! mm/vma.c, mm/memory.c): each address space's `mmap_lock`, a reader-writer semaphore,
//! and the per-VMA locks page faults take (6.4+).
//!
//! Who takes what (as the kernel does): mmap, mprotect and fork take `mmap_lock` for write
//! and hold it through their TLB flush; munmap takes it for write to detach the VMAs, then
//! downgrades to read (`mmap_write_downgrade` in `vms_complete_munmap_vmas`) for the
//! page-table teardown and the flush, and drops it when the flush is over;
//! madvise(MADV_DONTNEED), msync and move_pages take it for read. A page fault runs under
//! the faulting VMA's own lock, so it proceeds while another VMA is being changed; a VMA
//! write-locked by an mprotect or munmap in progress makes the fault fall back to
//! `mmap_lock` for read, which waits for the writer. So does a fault that makes a private
//! anonymous page (a write: do_anonymous_page, do_cow_fault, wp_page_copy) in a VMA that
//! has no `anon_vma` yet, when `mmap_read_trylock` fails (vmf_anon_prepare, mm/memory.c
//! of the 6.x kernels measured here; the first per-VMA-lock kernels sent every fault on
//! such a VMA to `mmap_lock`, lock_vma_under_rcu): every fresh private
//! mapping's first write takes `mmap_lock` for read, which is what makes the faults of
//! threads that map and unmap wait for each other's mmap and munmap (issue 46 item 1: seen
//! in `perf record` of bench/munmap_lock on Linux 6.18).
//!
//! Waiting (kernel/locking/rwsem.c as of Linux 6.x; issue 46 item 1):
//! - a lock nobody holds may be taken by anyone, past the waiters (lock stealing: a
//!   writer's optimistic spin or slow-path trylock, a reader's slow-path stealing), unless
//!   it is being handed off to the first waiter; a reader queues instead when other readers
//!   own the lock and someone waits;
//! - readers never spin (reader optimistic spinning was removed in 5.11): they sleep;
//! - a writer spins while the writer owning the lock runs (rwsem_spin_on_owner), and for
//!   at most rwsem_rspin_threshold ((20 + readers) / 2 µs) on readers, counted from when the
//!   owner turned reader (a munmap's downgrade); past it, it marks the lock non-spinnable
//!   (later writers sleep at once until a writer owns it) and sleeps; a writer does not spin
//!   when another thread waits for its CPU (need_resched);
//! - a release hands the lock to a spinning writer at once (it polls the lock word);
//!   otherwise rwsem_mark_wake grants it to every waiting reader, or wakes the first
//!   waiting writer without handing it the lock: the woken writer tries again when it runs,
//!   and sleeps again if another thread took the lock meanwhile;
//! - the first waiter that has waited longer than RWSEM_WAIT_TIMEOUT (4 ms) sets the
//!   hand-off: nobody else may take the lock, and the next release gives it to that waiter;
//! - a sleeper leaves its CPU to other threads or idle (lazy, so a shootdown skips it);
//!   waking a halted CPU costs the waker a reschedule IPI and the sleeper the CPU's exit
//!   latency (`machine.idle`, sched.rs `enqueue`).
//!
//! Spinlocks (kernel/locking/qspinlock.c: waiters spin, served in arrival order):
//! - the page-table lock of each page-table page (split PTE locks, `pte_offset_map_lock`):
//!   a page fault holds it while it installs its PTE (`finish_fault`, `do_anonymous_page`:
//!   the zeroing or copying happens before, outside the lock), zap_pte_range, mprotect's
//!   change_pte_range, msync's page_mkclean, migration's remap and fork's copy_pte_range
//!   hold it over the PTEs of one page-table page, and drop it before the TLB flush;
//! - the zone lock of each NUMA node, taken when a CPU's per-CPU frame list is refilled
//!   from the buddy allocator or drained back into it (rmqueue_bulk, free_pcppages_bulk),
//!   for `costs.buddy_per_frame` per frame moved;
//! - the lruvec lock of each NUMA node (`lruvec->lru_lock`; os/lru.rs says who takes it),
//!   for `costs.lru_lock_acquire` plus `costs.lru_per_page` per folio moved.
//!
//! A spinlock remembers its latest hold (`[held_from, free_at)` in simulated cycles). An
//! acquirer whose clock falls inside it spins until `free_at` (its core stays busy; the
//! wait is charged to it). Holds are whole operations run in one step of the engine, so the
//! lock is never seen half-held; an acquirer whose clock is earlier than the recorded hold
//! (possible within one scheduling quantum) is taken to have come first and does not wait.
//!
//! Simplified: a spinner polls the lock continuously (Linux checks its time limit every 16
//! iterations, and takes an interrupt in between: a limit that passed during a handler is
//! acted on when the handler returns, as here); the optimistic spin queue (osq) is not
//! modelled (every spinner polls the lock word); a reader at the head of the queue does not
//! set the hand-off; a fault
//! that fell back to `mmap_lock`, or took it by trylock for its anon_vma, holds it for no
//! time once granted (its handler's work is charged to the thread as before); VMAs never
//! merge, so a new mapping never starts with a neighbour's anon_vma (Linux merges two
//! threads' adjacent anonymous mappings, and its munmap must then split the VMA); a page fault holds its page-table lock for
//! `costs.per_page` cycles (one PTE's update, rmap and counters, taken out of
//! `costs.page_fault`), whatever it mapped; the PMD-level lock of a huge page is the
//! page-table lock of its 2 MiB region.

use super::{Os, ThreadState};
use crate::coherence::Coherence;
use crate::fasthash::FastMap as HashMap;
use std::collections::VecDeque;

/// RWSEM_WAIT_TIMEOUT (kernel/locking/rwsem.c): DIV_ROUND_UP(HZ, 250) jiffies, 4 ms at
/// any HZ up to 250 (Debian's kernels: HZ = 250) and at HZ = 1000. A waiter first in the
/// queue for longer asks for the lock to be handed to it.
const RWSEM_WAIT_TIMEOUT_US: f64 = 4_000.0;

/// The kernel's locks besides each address space's `mmap_lock` (which its process owns):
/// whether locks are modelled at all (`os.locks`), the spinlocks, and the counters of
/// every class.
pub(crate) struct Locks {
    /// Kernel locks modelled (`os.locks`).
    enabled: bool,
    /// `mmap_lock`s of every process together.
    mmap_stats: LockStats,
    pt_stats: LockStats,
    zone_stats: LockStats,
    lruvec_stats: LockStats,
    /// Page-table locks by (process, 2 MiB region): their latest holds.
    page_table: HashMap<(u32, u64), SpinLock>,
    /// Zone locks by node.
    zone: Vec<SpinLock>,
    /// Lruvec locks by node.
    lruvec: Vec<SpinLock>,
    /// The reschedule IPIs the release in progress owes the halted CPUs it woke, in cycles.
    halted_wake_cost: u64,
}

impl Locks {
    /// The per-node spinlocks of `class` (the zone or the lruvec locks).
    fn per_node(&mut self, class: SpinClass) -> &mut Vec<SpinLock> {
        if class == SpinClass::Zone {
            &mut self.zone
        } else {
            &mut self.lruvec
        }
    }

    pub(crate) fn new(enabled: bool) -> Locks {
        Locks {
            enabled,
            mmap_stats: LockStats::default(),
            pt_stats: LockStats::default(),
            zone_stats: LockStats::default(),
            lruvec_stats: LockStats::default(),
            page_table: HashMap::default(),
            zone: Vec::new(),
            lruvec: Vec::new(),
            halted_wake_cost: 0,
        }
    }

    /// Whether kernel locks are modelled (`os.locks`).
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// stats.json `totals.locks`.
    pub(crate) fn json(&self) -> serde_json::Value {
        let l = &self.mmap_stats;
        serde_json::json!({
            "enabled": self.enabled,
            "mmap_lock": {
                "acquisitions": l.acquisitions,
                "contended": l.contended,
                "cycles_waited": l.cycles_waited,
                "fault_fallbacks": l.fault_fallbacks,
                "anon_vma_trylocks": l.anon_vma_trylocks,
                "waits_spinning": l.waits_spinning,
                "waits_asleep": l.waits_asleep,
                "spin_limits": l.spin_limits,
                "wakeups_without_lock": l.wakeups_without_lock,
                "handoffs": l.handoffs,
            },
            "pt_lock": self.pt_stats.json(),
            "zone_lock": self.zone_stats.json(),
            "lruvec_lock": self.lruvec_stats.json(),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LockMode {
    Read,
    Write,
}

#[derive(Clone, Copy, Debug)]
struct Waiter {
    thread: usize,
    mode: LockMode,
    since: u64,
    /// On its CPU, spinning (rwsem_optimistic_spin), rather than asleep.
    spinning: bool,
    /// A writer spinning on a reader-owned lock gives up at this cycle
    /// (rwsem_rspin_threshold); u64::MAX while it spins on a running writer.
    spin_until: u64,
    /// Woken by a release and not yet run again: a sleeping writer is woken, not handed
    /// the lock (rwsem_mark_wake), and tries again when it runs.
    woken: bool,
    /// A page fault's fallback: granted and released at once.
    transient: bool,
}

/// A reader-writer semaphore (`struct rw_semaphore`).
#[derive(Default)]
pub(crate) struct RwSem {
    writer: Option<usize>,
    readers: Vec<usize>,
    /// When the last writer released it, and the last reader: a thread arriving (in
    /// simulated time) before then waits, though the holder's core has already run on.
    write_free_at: u64,
    read_free_at: u64,
    waiters: VecDeque<Waiter>,
    /// RWSEM_FLAG_HANDOFF: the first waiter has waited longer than RWSEM_WAIT_TIMEOUT;
    /// the lock is handed to it at the next release, and no one else may take it.
    handoff: bool,
    /// RWSEM_NONSPINNABLE: a writer gave up spinning on the readers that own the lock;
    /// writers sleep at once until a writer owns it again.
    nonspinnable: bool,
    /// Address ranges whose VMAs the writer has write-locked (vma_start_write): faults
    /// there fall back to this semaphore.
    pub vma_locked: Vec<(u64, u64)>,
    /// The thread that released it last (it pays the wake-ups of that release).
    released_by: Option<usize>,
}

impl RwSem {
    /// Whether `mmap_read_trylock` succeeds at `now`: no writer holds it or waits for it,
    /// and the last writer had released it by then.
    pub(super) fn read_free(&self, now: u64) -> bool {
        self.writer.is_none() && self.waiters.is_empty() && !self.handoff && now >= self.write_free_at
    }
}

/// A spinlock's latest hold, in simulated cycles.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SpinLock {
    held_from: u64,
    free_at: u64,
}

/// The page-table lock a loop over PTEs holds: (process, 2 MiB region) and when it took it.
#[derive(Default)]
pub(crate) struct PtlCursor {
    held: Option<((u32, u64), u64)>,
}

/// Spinlock classes (stats.json `totals.locks.<class>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SpinClass {
    PageTable,
    Zone,
    Lruvec,
}

/// Per lock class (stats.json `totals.locks`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LockStats {
    pub acquisitions: u64,
    pub contended: u64,
    pub cycles_waited: u64,
    /// Page faults that fell back to `mmap_lock` (their VMA write-locked, or a failed
    /// `anon_vma_trylocks`).
    pub fault_fallbacks: u64,
    /// Page faults that needed their VMA's anon_vma and tried `mmap_read_trylock` for it.
    pub anon_vma_trylocks: u64,
    /// `mmap_lock` waits begun spinning and begun asleep (a woken writer that fails to
    /// take the lock begins another).
    pub waits_spinning: u64,
    pub waits_asleep: u64,
    /// Writers that gave up spinning on readers (rwsem_rspin_threshold).
    pub spin_limits: u64,
    /// Sleeping writers woken by a release to try again (rwsem_mark_wake).
    pub wakeups_without_lock: u64,
    /// Locks handed to the first waiter after it waited past RWSEM_WAIT_TIMEOUT.
    pub handoffs: u64,
}

impl LockStats {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "acquisitions": self.acquisitions,
            "contended": self.contended,
            "cycles_waited": self.cycles_waited,
        })
    }
}

impl<P: Coherence> Os<P> {
    /// Take `pid`'s `mmap_lock` for `thread` (on `core`) in `mode`. True: held now, go on.
    /// False: the thread waits (spinning or asleep) and its operation runs again when the
    /// lock is granted, or, for a woken writer, when it runs again and retries.
    pub(super) fn mmap_lock(&mut self, core: usize, thread: usize, pid: u32, mode: LockMode) -> bool {
        if !self.locks.enabled {
            return true;
        }
        if let Some(m) = self.threads[thread].lock_granted.take() {
            debug_assert_eq!(m, mode);
            self.locks.mmap_stats.acquisitions += 1;
            self.threads[thread].lock_contended = false;
            return true;
        }
        let now = self.clock(core);
        let handoff_after = self.settings.us(RWSEM_WAIT_TIMEOUT_US);
        let sem = &mut self.spaces[pid as usize].mmap_lock;
        let queued = sem.waiters.iter().position(|w| w.thread == thread);
        let head = queued == Some(0);
        // Who may take a lock nobody holds: anyone but when it is handed off to the first
        // waiter. A writer takes it past sleeping waiters (lock stealing: an optimistic
        // spinner's rwsem_try_write_lock_unqueued, or a woken waiter's retry); a reader
        // too (the slow path's reader lock stealing), unless other readers own it while
        // others wait (then it queues: the lock is "very likely owned by readers").
        let others_wait = sem.waiters.iter().any(|w| w.thread != thread);
        let may_take = (!sem.handoff || head)
            && sem.writer.is_none()
            && match mode {
                LockMode::Write => sem.readers.is_empty(),
                LockMode::Read => sem.readers.is_empty() || !others_wait,
            };
        let busy_until = match mode {
            LockMode::Write => sem.write_free_at.max(sem.read_free_at),
            LockMode::Read => sem.write_free_at,
        };
        if may_take && now >= busy_until {
            if let Some(i) = queued {
                sem.waiters.remove(i);
                if head {
                    sem.handoff = false;
                }
            }
            match mode {
                LockMode::Write => {
                    sem.writer = Some(thread);
                    sem.nonspinnable = false;
                }
                LockMode::Read => sem.readers.push(thread),
            }
            self.locks.mmap_stats.acquisitions += 1;
            self.threads[thread].lock_contended = false;
            return true;
        }
        // A woken writer that failed to take it, the first in the queue and waiting for
        // longer than RWSEM_WAIT_TIMEOUT, asks for the hand-off (rwsem_try_write_lock).
        if head && now.saturating_sub(sem.waiters[0].since) >= handoff_after {
            sem.handoff = true;
        }
        // One contended acquisition, however many times it has to wait.
        if !std::mem::replace(&mut self.threads[thread].lock_contended, true) {
            self.locks.mmap_stats.contended += 1;
        }
        if may_take {
            // Released at a time this core has not reached yet: the holder ran on a CPU
            // until then, and the lock is free for this waiter at that time.
            self.schedule_event(busy_until, super::sched::Event::LockFree { pid });
        }
        let spin_until = self.spin_decision(core, pid, mode, queued.is_some(), now);
        self.queue_waiter(core, thread, pid, mode, false, spin_until, now);
        false
    }

    /// Whether a thread on `core` that has to wait for `pid`'s lock in `mode` spins, and
    /// until when (`Some(u64::MAX)`: while its owner runs), as rwsem's slow paths decide:
    /// - readers never spin (Linux 5.11 removed reader optimistic spinning): they sleep;
    /// - a writer spins while a writer owns the lock and runs on a CPU
    ///   (rwsem_spin_on_owner), while readers own it for at most rwsem_rspin_threshold
    ///   ((20 + readers) / 2 µs, readers counted up to 30), and on a lock its holder
    ///   releases at a time this core has not reached; not when the lock is marked
    ///   non-spinnable, or is being handed to another waiter;
    /// - nobody spins when another thread waits to run on its CPU (need_resched);
    /// - a woken writer that failed to take the lock sleeps again, unless it holds the
    ///   hand-off and the owner is a running writer (it spins on that owner).
    fn spin_decision(&self, core: usize, pid: u32, mode: LockMode, retry: bool, now: u64) -> Option<u64> {
        if mode == LockMode::Read || !self.cores[core].runq.is_empty() {
            return None;
        }
        let sem = &self.spaces[pid as usize].mmap_lock;
        let owner_running = sem.writer.is_some_and(|w| self.on_cpu(w));
        if retry {
            return (sem.handoff && owner_running).then_some(u64::MAX);
        }
        if sem.writer.is_some() {
            return owner_running.then_some(u64::MAX);
        }
        if sem.handoff {
            return None;
        }
        if !sem.readers.is_empty() {
            if sem.nonspinnable {
                return None;
            }
            return Some(now + self.rspin_threshold(sem.readers.len()));
        }
        Some(u64::MAX)
    }

    /// rwsem_rspin_threshold: how long a writer spins on `readers` readers, (20 + readers) / 2
    /// µs with readers counted up to 30, in cycles.
    fn rspin_threshold(&self, readers: usize) -> u64 {
        self.settings.us((20.0 + readers.min(30) as f64) / 2.0)
    }

    /// Put `thread` (on `core`) in `pid`'s wait queue, or, if it is there already (a woken
    /// writer that failed to take the lock), keep its place and its waiting time; then it
    /// spins until `spin_until` or sleeps.
    #[allow(clippy::too_many_arguments)]
    fn queue_waiter(&mut self, core: usize, thread: usize, pid: u32, mode: LockMode, transient: bool, spin_until: Option<u64>, now: u64) {
        let sem = &mut self.spaces[pid as usize].mmap_lock;
        let spinning = spin_until.is_some();
        let limit = spin_until.unwrap_or(u64::MAX);
        match sem.waiters.iter_mut().find(|w| w.thread == thread) {
            Some(w) => {
                w.woken = false;
                w.spinning = spinning;
                w.spin_until = limit;
            }
            None => sem.waiters.push_back(Waiter { thread, mode, since: now, spinning, spin_until: limit, woken: false, transient }),
        }
        if spinning {
            self.locks.mmap_stats.waits_spinning += 1;
            self.cores[core].waiting += 1;
            if limit != u64::MAX {
                self.schedule_event(limit, super::sched::Event::SpinLimit { pid, thread });
            }
        } else {
            self.locks.mmap_stats.waits_asleep += 1;
            self.park(core, thread);
        }
        self.mark_dirty(core);
    }

    /// Release `thread`'s hold on `pid`'s `mmap_lock` at cycle `at` and hand it over.
    pub(super) fn mmap_unlock(&mut self, thread: usize, pid: u32, at: u64) {
        self.release_or_downgrade(thread, pid, at, false);
    }

    /// mmap_write_downgrade: the writer becomes a reader; waiting readers join.
    pub(super) fn mmap_downgrade(&mut self, thread: usize, pid: u32, at: u64) {
        self.release_or_downgrade(thread, pid, at, true);
    }

    fn release_or_downgrade(&mut self, thread: usize, pid: u32, at: u64, downgrade: bool) {
        if !self.locks.enabled {
            return;
        }
        let sem = &mut self.spaces[pid as usize].mmap_lock;
        if sem.writer == Some(thread) {
            sem.writer = None;
            sem.vma_locked.clear();
            sem.write_free_at = sem.write_free_at.max(at);
            if downgrade {
                sem.readers.push(thread);
            }
        } else if downgrade {
            return;
        } else if let Some(i) = sem.readers.iter().position(|&t| t == thread) {
            sem.readers.swap_remove(i);
            sem.read_free_at = sem.read_free_at.max(at);
        }
        sem.released_by = Some(thread);
        self.grant_waiters_charging(pid, at);
    }

    /// `grant_waiters`, the releaser paying the reschedule IPIs of the halted CPUs it
    /// woke (rwsem_wake's wake_up_q sends them before the release returns; on a KVM guest
    /// each is an exit to the host). A release the other cores meet later in simulated
    /// time (`lock_free_at`) wakes its waiters then, and its releaser pays then, if it
    /// is still on its CPU.
    fn grant_waiters_charging(&mut self, pid: u32, at: u64) {
        self.locks.halted_wake_cost = 0;
        self.grant_waiters(pid, at);
        let cost = std::mem::take(&mut self.locks.halted_wake_cost);
        let Some(releaser) = self.spaces[pid as usize].mmap_lock.released_by else { return };
        if cost > 0 {
            if let Some(core) = self.cpu_now(self.threads[releaser].core).filter(|&c| self.cores[c].current == Some(releaser)) {
                self.charge(core, cost);
            }
        }
    }

    /// Make lock waiter `thread` runnable on `core` at `at`; if that CPU had halted, the
    /// release owes it a reschedule IPI (`machine.idle`, by how long it was idle).
    fn wake_halted(&mut self, thread: usize, core: usize, at: u64) {
        if let Some(idle) = self.enqueue(thread, core, at) {
            self.locks.halted_wake_cost += self.settings.idle_wake_ipi_after(idle);
        }
    }

    /// Release after a system call: now, or, if its flush left the core waiting for acks,
    /// when the initiator resumes (the lock is held through the flush).
    pub(super) fn mmap_unlock_after_syscall(&mut self, core: usize, thread: usize, pid: u32) {
        if !self.locks.enabled {
            return;
        }
        if self.cores[core].waiting > 0 {
            self.threads[thread].unlock_at_resume = Some(pid);
        } else {
            let now = self.clock(core);
            self.mmap_unlock(thread, pid, now);
        }
    }

    /// The initiator `core` resumed at `at` after its acks: release what its thread held
    /// through the flush.
    pub(super) fn on_initiator_resumed(&mut self, core: usize, at: u64) {
        if let Some(t) = self.cores[core].current {
            if let Some(pid) = self.threads[t].unlock_at_resume.take() {
                self.mmap_unlock(t, pid, at);
            }
        }
    }

    /// The lock changed hands or was released at `at`: as rwsem's release does, a spinning
    /// writer takes a free lock first (it is on its CPU, polling the lock word); else the
    /// wake-up (rwsem_mark_wake): readers waiting are granted the lock together, a
    /// sleeping writer at the head is woken to try again; after the first waiter asked
    /// for the hand-off, the lock goes to it.
    fn grant_waiters(&mut self, pid: u32, at: u64) {
        // Spinners whose limit passed before this release gave up then, though the engine
        // meets the release first (a core that took an interrupt while spinning ran its
        // handler whole, and the release its ack allowed came before the limit's event):
        // they went to sleep at their limit, and the release wakes them like any sleeper.
        let expired: Vec<(usize, u64)> =
            self.spaces[pid as usize].mmap_lock.waiters.iter().filter(|w| w.spinning && w.spin_until <= at).map(|w| (w.thread, w.spin_until)).collect();
        for (t, limit) in expired {
            self.spin_limit(pid, t, limit);
        }
        loop {
            let sem = &mut self.spaces[pid as usize].mmap_lock;
            if sem.writer.is_some() || sem.waiters.is_empty() {
                break;
            }
            let readers_hold = !sem.readers.is_empty();
            let pick = if sem.handoff {
                match sem.waiters[0].mode {
                    LockMode::Write if readers_hold => None,
                    _ => Some(0),
                }
            } else if let Some(i) = sem.waiters.iter().position(|w| w.spinning).filter(|_| !readers_hold) {
                Some(i)
            } else {
                match sem.waiters[0] {
                    w if w.mode == LockMode::Read => Some(0),
                    w if !readers_hold && !w.woken => {
                        // rwsem_mark_wake wakes the writer without handing it the lock.
                        sem.waiters[0].woken = true;
                        self.locks.mmap_stats.wakeups_without_lock += 1;
                        if self.threads[w.thread].state == ThreadState::Blocked {
                            let core = self.threads[w.thread].core;
                            self.wake_halted(w.thread, core, at);
                        }
                        None
                    }
                    _ => None,
                }
            };
            let Some(i) = pick else { break };
            let sem = &mut self.spaces[pid as usize].mmap_lock;
            let w = sem.waiters[i];
            if w.mode == LockMode::Read {
                // Every reader in the queue is granted at once (rwsem_mark_wake).
                let readers: Vec<Waiter> = sem.waiters.iter().filter(|w| w.mode == LockMode::Read).copied().collect();
                sem.waiters.retain(|w| w.mode != LockMode::Read);
                sem.handoff = false;
                for r in readers {
                    self.hand_lock(pid, r, at);
                }
                continue;
            }
            sem.waiters.remove(i);
            if sem.handoff && i == 0 {
                sem.handoff = false;
                self.locks.mmap_stats.handoffs += 1;
            }
            self.hand_lock(pid, w, at);
            break;
        }
        self.retarget_spinners(pid, at);
    }

    /// The owner of `pid`'s lock changed at `at`: the writers spinning on it go on as
    /// rwsem_optimistic_spin does. On a writer that runs, without limit; on a writer
    /// that does not run, not at all: they sleep, so that their cores can run the new
    /// owner (rwsem_spin_on_owner gives up); on readers (a munmap's downgrade), for
    /// rwsem_rspin_threshold from now, the limit set when the owner turned reader, or
    /// not at all if a writer gave up on these readers before (RWSEM_NONSPINNABLE).
    fn retarget_spinners(&mut self, pid: u32, at: u64) {
        let sem = &self.spaces[pid as usize].mmap_lock;
        if !sem.waiters.iter().any(|w| w.spinning) {
            return;
        }
        let writer_running = sem.writer.map(|w| self.on_cpu(w));
        let readers = sem.readers.len();
        let nonspinnable = sem.nonspinnable;
        let limit = at + self.rspin_threshold(readers);
        let mut stop = Vec::new();
        let mut timed = Vec::new();
        for w in self.spaces[pid as usize].mmap_lock.waiters.iter_mut().filter(|w| w.spinning) {
            match writer_running {
                Some(true) => w.spin_until = u64::MAX,
                Some(false) => stop.push(w.thread),
                None if readers > 0 && nonspinnable => stop.push(w.thread),
                None if readers > 0 && w.spin_until == u64::MAX => {
                    w.spin_until = limit;
                    timed.push(w.thread);
                }
                None => {}
            }
        }
        for t in timed {
            self.schedule_event(limit, super::sched::Event::SpinLimit { pid, thread: t });
        }
        for t in stop {
            self.stop_spinning(pid, t, Some(at));
        }
    }

    /// `w` leaves the queue holding the lock (a reader, a writer, or a page fault's
    /// fallback that lets go at once) at `at`, and goes on: on its CPU if it was spinning,
    /// else woken.
    fn hand_lock(&mut self, pid: u32, w: Waiter, at: u64) {
        let sem = &mut self.spaces[pid as usize].mmap_lock;
        if w.transient {
            sem.read_free_at = sem.read_free_at.max(at);
            self.threads[w.thread].fault_lock_granted = true;
            self.threads[w.thread].lock_contended = false;
        } else {
            match w.mode {
                LockMode::Write => {
                    sem.writer = Some(w.thread);
                    sem.nonspinnable = false;
                }
                LockMode::Read => sem.readers.push(w.thread),
            }
            self.threads[w.thread].lock_granted = Some(w.mode);
        }
        let waited = at.saturating_sub(w.since);
        self.locks.mmap_stats.cycles_waited += waited;
        self.threads[w.thread].lock_wait_cycles += waited;
        let core = self.threads[w.thread].core;
        if w.spinning {
            // A spinning thread's CPU waits for it (a VCPU is not switched out meanwhile).
            let core = self.cpu_now(core).expect("a spinning thread is on a CPU");
            self.set_clock(core, at);
            self.cores[core].waiting -= 1;
            self.mark_dirty(core);
        } else if self.threads[w.thread].state == ThreadState::Blocked {
            self.wake_halted(w.thread, core, at);
        }
    }

    /// Spinning waiter `thread` of `pid`'s lock gives up and sleeps (at `at`, or where its
    /// CPU is): its CPU is free for other threads, or idles.
    fn stop_spinning(&mut self, pid: u32, thread: usize, at: Option<u64>) {
        let sem = &mut self.spaces[pid as usize].mmap_lock;
        let Some(w) = sem.waiters.iter_mut().find(|w| w.thread == thread && w.spinning) else { return };
        w.spinning = false;
        w.spin_until = u64::MAX;
        let core = self.cpu_now(self.threads[thread].core).expect("a spinning thread is on a CPU");
        self.cores[core].waiting -= 1;
        if let Some(at) = at {
            let now = self.clock(core).max(at);
            self.set_clock(core, now);
        }
        if self.cores[core].current == Some(thread) {
            self.cores[core].current = None;
        }
        self.threads[thread].state = ThreadState::Blocked;
        self.mark_dirty(core);
    }

    /// A writer spinning on readers reached its limit at `at` (rwsem_optimistic_spin's
    /// rspin_threshold): it marks the lock non-spinnable and sleeps.
    pub(super) fn spin_limit(&mut self, pid: u32, thread: usize, at: u64) {
        let sem = &mut self.spaces[pid as usize].mmap_lock;
        if !sem.waiters.iter().any(|w| w.thread == thread && w.spinning && w.spin_until == at) {
            return;
        }
        sem.nonspinnable = true;
        self.locks.mmap_stats.spin_limits += 1;
        self.stop_spinning(pid, thread, Some(at));
    }

    /// `pid`'s lock, released earlier in host order, is free at `at` in simulated time.
    pub(super) fn lock_free_at(&mut self, pid: u32, at: u64) {
        self.grant_waiters_charging(pid, at);
    }

    /// A page fault of `thread` at `va` in `pid` (`write`: a write access): whether it must
    /// fall back to `mmap_lock` for read and wait. It must if its VMA is write-locked by a
    /// writer in progress, or if the fault makes a private anonymous page in a VMA without
    /// its `anon_vma` and `mmap_read_trylock` fails (vmf_anon_prepare, mm/memory.c: under
    /// the VMA lock it may allocate the anon_vma only with mmap_lock held, and on a failed
    /// trylock it returns VM_FAULT_RETRY, and the fault is retried under mmap_lock). True:
    /// the fault waits (the access is retried when the thread runs again, under the lock).
    pub(super) fn fault_must_wait(&mut self, core: usize, thread: usize, pid: u32, va: u64, write: bool) -> bool {
        if !self.locks.enabled {
            return false;
        }
        if std::mem::take(&mut self.threads[thread].fault_lock_granted) {
            return false;
        }
        let sem = &self.spaces[pid as usize].mmap_lock;
        let vma_locked = sem.writer.is_some_and(|w| w != thread) && sem.vma_locked.iter().any(|&(s, e)| va >= s && va < e);
        if !vma_locked {
            let needs_anon_vma = self.spaces[pid as usize].vmas.range(..=va).next_back().is_some_and(|(_, v)| va < v.end && v.needs_anon_vma(write));
            if !needs_anon_vma {
                return false;
            }
            self.locks.mmap_stats.anon_vma_trylocks += 1;
            // The trylock's read hold (the anon_vma's allocation) is taken to last no time,
            // as a fallback's is.
            if sem.writer == Some(thread) || sem.read_free(self.clock(core)) {
                return false;
            }
            // VM_FAULT_RETRY: the fault takes mmap_lock for read (lock_mm_and_find_vma), at
            // once if a reader may (it then lets go at once), else it waits, and the retried
            // access runs under it.
            self.locks.mmap_stats.fault_fallbacks += 1;
            if self.mmap_lock(core, thread, pid, LockMode::Read) {
                let now = self.clock(core);
                self.mmap_unlock(thread, pid, now);
                return false;
            }
            if let Some(w) = self.spaces[pid as usize].mmap_lock.waiters.iter_mut().find(|w| w.thread == thread) {
                w.transient = true;
            }
            return true;
        }
        self.locks.mmap_stats.fault_fallbacks += 1;
        self.locks.mmap_stats.contended += 1;
        // A reader: it sleeps (readers do not spin).
        let now = self.clock(core);
        self.queue_waiter(core, thread, pid, LockMode::Read, true, None, now);
        true
    }

    /// Take a spinlock of `class` whose latest hold is `lock`, on `core` now: spin until it
    /// is free. Returns when the hold begins.
    fn spin_acquire(&mut self, core: usize, class: SpinClass, lock: SpinLock) -> (SpinLock, u64) {
        let now = self.clock(core);
        let wait = if now >= lock.held_from && now < lock.free_at { lock.free_at - now } else { 0 };
        let stats = match class {
            SpinClass::PageTable => &mut self.locks.pt_stats,
            SpinClass::Zone => &mut self.locks.zone_stats,
            SpinClass::Lruvec => &mut self.locks.lruvec_stats,
        };
        stats.acquisitions += 1;
        if wait > 0 {
            stats.contended += 1;
            stats.cycles_waited += wait;
            self.charge(core, wait);
            if let Some(t) = self.cores[core].current {
                self.threads[t].lock_wait_cycles += wait;
            }
        }
        let start = now + wait;
        // An acquirer earlier than the recorded hold went first: keep the later record.
        let lock = if start >= lock.held_from { SpinLock { held_from: start, free_at: start } } else { lock };
        (lock, start)
    }

    /// Hold the page-table lock covering `va` in `pid` (taking it, and dropping the one the
    /// cursor held, when the loop crosses into another page-table page).
    pub(super) fn ptl_at(&mut self, core: usize, cursor: &mut PtlCursor, pid: u32, va: u64) {
        if !self.locks.enabled {
            return;
        }
        let key = (pid, va >> 21);
        if cursor.held.is_some_and(|(k, _)| k == key) {
            return;
        }
        self.ptl_release(core, cursor);
        let lock = self.locks.page_table.get(&key).copied().unwrap_or_default();
        let (lock, start) = self.spin_acquire(core, SpinClass::PageTable, lock);
        self.locks.page_table.insert(key, lock);
        cursor.held = Some((key, start));
    }

    /// Drop the page-table lock the cursor holds, now.
    pub(super) fn ptl_release(&mut self, core: usize, cursor: &mut PtlCursor) {
        if let Some((key, start)) = cursor.held.take() {
            let now = self.clock(core);
            if let Some(l) = self.locks.page_table.get_mut(&key) {
                if l.held_from == start {
                    l.free_at = l.free_at.max(now);
                }
            }
        }
    }

    /// A section of `cycles` of work under the page-table lock covering `va` in `pid`.
    pub(super) fn ptl_section(&mut self, core: usize, pid: u32, va: u64, cycles: u64) {
        let mut cursor = PtlCursor::default();
        self.ptl_at(core, &mut cursor, pid, va);
        self.charge(core, cycles);
        self.ptl_release(core, &mut cursor);
    }

    /// The per-CPU frame list of `core` just moved `frames` frames from or to the buddy
    /// allocator of `node`: that work runs under the node's zone lock.
    pub(super) fn zone_section(&mut self, core: usize, node: usize, frames: u64) {
        let cycles = frames * self.settings.costs().buddy_per_frame;
        self.node_spin_section(core, node, SpinClass::Zone, cycles);
    }

    /// `core` holds the lruvec lock of `node` to move `folios` folios onto or off its LRU
    /// lists: `costs.lru_lock_acquire` plus `costs.lru_per_page` per folio, spinning first
    /// while another CPU holds it. The cost is charged even with `os.locks = false` (as the
    /// zone lock's is); only the waiting is then left out.
    pub(super) fn lruvec_section(&mut self, core: usize, node: usize, folios: u64) {
        let c = self.settings.costs();
        let cycles = c.lru_lock_acquire + folios * c.lru_per_page;
        self.node_spin_section(core, node, SpinClass::Lruvec, cycles);
    }

    /// `core` runs `cycles` of work under the per-node spinlock `class` (the zone or the
    /// lruvec lock) of `node`, spinning first while another CPU holds it; with
    /// `os.locks = false` only the work is charged.
    fn node_spin_section(&mut self, core: usize, node: usize, class: SpinClass, cycles: u64) {
        if !self.locks.enabled {
            self.charge(core, cycles);
            return;
        }
        let held = self.locks.per_node(class);
        if held.len() <= node {
            held.resize(node + 1, SpinLock::default());
        }
        let current = held[node];
        let (mut lock, start) = self.spin_acquire(core, class, current);
        self.charge(core, cycles);
        if lock.held_from == start {
            lock.free_at = lock.free_at.max(self.clock(core));
        }
        self.locks.per_node(class)[node] = lock;
    }
}
