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
//! `mmap_lock` for read, which waits for the writer.
//!
//! Waiting (rwsem's slow path): a waiter spins (optimistic spinning) while the lock's
//! owners are on a CPU — a writer running or spinning for its shootdown's acks, or readers
//! such as a munmap waiting for its acks (a writer spins on readers too, for a while) —
//! and otherwise sleeps, so its core runs something else or idles. Waiters are served in
//! order: one writer, or every reader at the head of the queue; a reader arriving while a
//! writer waits queues behind it. A lock is handed over at the holder's release time.
//!
//! Spinlocks (kernel/locking/qspinlock.c: waiters spin, served in arrival order):
//! - the page-table lock of each page-table page (split PTE locks, `pte_offset_map_lock`):
//!   a page fault holds it while it installs its PTE (`finish_fault`, `do_anonymous_page`:
//!   the zeroing or copying happens before, outside the lock), zap_pte_range, mprotect's
//!   change_pte_range, msync's page_mkclean, migration's remap and fork's copy_pte_range
//!   hold it over the PTEs of one page-table page, and drop it before the TLB flush;
//! - the zone lock of each NUMA node, taken when a CPU's per-CPU frame list is refilled
//!   from the buddy allocator or drained back into it (rmqueue_bulk, free_pcppages_bulk),
//!   for `costs.buddy_per_frame` per frame moved.
//!
//! A spinlock remembers its latest hold (`[held_from, free_at)` in simulated cycles). An
//! acquirer whose clock falls inside it spins until `free_at` (its core stays busy; the
//! wait is charged to it). Holds are whole operations run in one step of the engine, so the
//! lock is never seen half-held; an acquirer whose clock is earlier than the recorded hold
//! (possible within one scheduling quantum) is taken to have come first and does not wait.
//!
//! Simplified: a writer spinning on readers does so until they release (Linux gives up
//! after `rwsem_rspin_threshold`, at most 25 µs, longer than a shootdown's wait); a fault
//! that fell back to `mmap_lock` holds it for no time once granted (its handler's work is
//! charged to the thread as before); a page fault holds its page-table lock for
//! `costs.per_page` cycles (one PTE's update, rmap and counters, taken out of
//! `costs.page_fault`), whatever it mapped; the PMD-level lock of a huge page is the
//! page-table lock of its 2 MiB region.

use super::{Os, ThreadState};
use crate::coherence::Coherence;
use crate::fasthash::FastMap as HashMap;
use std::collections::VecDeque;

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
    /// Page-table locks by (process, 2 MiB region): their latest holds.
    page_table: HashMap<(u32, u64), SpinLock>,
    /// Zone locks by node.
    zone: Vec<SpinLock>,
}

impl Locks {
    pub(crate) fn new(enabled: bool) -> Locks {
        Locks {
            enabled,
            mmap_stats: LockStats::default(),
            pt_stats: LockStats::default(),
            zone_stats: LockStats::default(),
            page_table: HashMap::default(),
            zone: Vec::new(),
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
            },
            "pt_lock": self.pt_stats.json(),
            "zone_lock": self.zone_stats.json(),
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
    spinning: bool,
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
    /// Address ranges whose VMAs the writer has write-locked (vma_start_write): faults
    /// there fall back to this semaphore.
    pub vma_locked: Vec<(u64, u64)>,
}

impl RwSem {
    /// Whether `mmap_read_trylock` succeeds at `now`: no writer holds it or waits for it,
    /// and the last writer had released it by then.
    pub(super) fn read_free(&self, now: u64) -> bool {
        self.writer.is_none() && self.waiters.is_empty() && now >= self.write_free_at
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
}

/// Per lock class (stats.json `totals.locks`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LockStats {
    pub acquisitions: u64,
    pub contended: u64,
    pub cycles_waited: u64,
    /// Page faults that found their VMA write-locked and fell back to `mmap_lock`.
    pub fault_fallbacks: u64,
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
    /// lock is granted.
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
        let sem = &mut self.spaces[pid as usize].mmap_lock;
        let held = sem.writer.is_some() || !sem.waiters.is_empty() || (mode == LockMode::Write && !sem.readers.is_empty());
        let busy_until = match mode {
            LockMode::Write => sem.write_free_at.max(sem.read_free_at),
            LockMode::Read => sem.write_free_at,
        };
        if !held && now >= busy_until {
            self.locks.mmap_stats.acquisitions += 1;
            self.threads[thread].lock_contended = false;
            match mode {
                LockMode::Write => sem.writer = Some(thread),
                LockMode::Read => sem.readers.push(thread),
            }
            return true;
        }
        // One contended acquisition, however many times it has to wait.
        if !std::mem::replace(&mut self.threads[thread].lock_contended, true) {
            self.locks.mmap_stats.contended += 1;
        }
        if held {
            self.wait_for_lock(core, thread, pid, mode, false);
        } else {
            // Released at a time this core has not reached yet: the holder ran on a CPU
            // until then, so the waiter spins, first in the queue (no one barges past it),
            // and is handed the lock then.
            self.spaces[pid as usize].mmap_lock.waiters.push_back(Waiter { thread, mode, since: now, spinning: true, transient: false });
            self.cores[core].waiting += 1;
            self.schedule_event(busy_until, super::sched::Event::LockFree { pid });
            self.mark_dirty(core);
        }
        false
    }

    /// `thread` on `core` queues for `pid`'s lock: it spins if a writer owns the lock and is
    /// on a CPU, else it sleeps.
    fn wait_for_lock(&mut self, core: usize, thread: usize, pid: u32, mode: LockMode, transient: bool) {
        let sem = &self.spaces[pid as usize].mmap_lock;
        // The owners are on a CPU (a writer, or readers such as a munmap waiting for its
        // shootdown's acks): spin (rwsem spins on a writer owner, and a writer spins on
        // readers for a while too).
        let on_cpu = |t: usize| self.on_cpu(t);
        let spinning = match sem.writer {
            Some(w) => on_cpu(w),
            None => !sem.readers.is_empty() && sem.readers.iter().all(|&r| on_cpu(r)),
        };
        let since = self.clock(core);
        self.spaces[pid as usize].mmap_lock.waiters.push_back(Waiter { thread, mode, since, spinning, transient });
        if spinning {
            self.cores[core].waiting += 1;
        } else {
            self.park(core, thread);
        }
        self.mark_dirty(core);
    }

    /// Release `thread`'s hold on `pid`'s `mmap_lock` at cycle `at` and hand it over.
    pub(super) fn mmap_unlock(&mut self, thread: usize, pid: u32, at: u64) {
        self.release_or_downgrade(thread, pid, at, false);
    }

    /// mmap_write_downgrade: the writer becomes a reader; waiting readers at the head join.
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
        self.grant_waiters(pid, at);
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

    fn grant_waiters(&mut self, pid: u32, at: u64) {
        loop {
            let sem = &mut self.spaces[pid as usize].mmap_lock;
            // A spinning waiter takes the lock before a sleeping one that must first be
            // woken and scheduled (rwsem's lock stealing by optimistic spinners).
            let Some(i) = sem.waiters.iter().position(|w| w.spinning).or(if sem.waiters.is_empty() { None } else { Some(0) }) else { break };
            let w = sem.waiters[i];
            let ok = match w.mode {
                LockMode::Write => sem.writer.is_none() && sem.readers.is_empty(),
                LockMode::Read => sem.writer.is_none(),
            };
            if !ok {
                break;
            }
            sem.waiters.remove(i);
            if w.transient {
                sem.read_free_at = sem.read_free_at.max(at);
            } else {
                match w.mode {
                    LockMode::Write => sem.writer = Some(w.thread),
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
            } else {
                self.enqueue(w.thread, core, at);
            }
            if w.mode == LockMode::Write {
                break;
            }
        }
        // Waiters spin only while the owner is on a CPU: handed to a thread that sleeps (or
        // to readers), the others stop spinning and sleep, so that their cores can run the
        // new owner (rwsem_spin_on_owner gives up when the owner is not running).
        let sem = &self.spaces[pid as usize].mmap_lock;
        let on_cpu = |t: usize| self.on_cpu(t);
        let owner_on_cpu = match sem.writer {
            Some(w) => on_cpu(w),
            None => !sem.readers.is_empty() && sem.readers.iter().all(|&r| on_cpu(r)),
        };
        if !owner_on_cpu && sem.waiters.iter().any(|w| w.spinning) {
            let spinners: Vec<usize> = sem.waiters.iter().filter(|w| w.spinning).map(|w| w.thread).collect();
            for w in self.spaces[pid as usize].mmap_lock.waiters.iter_mut() {
                w.spinning = false;
            }
            for t in spinners {
                let core = self.cpu_now(self.threads[t].core).expect("a spinning thread is on a CPU");
                self.cores[core].waiting -= 1;
                if self.cores[core].current == Some(t) {
                    self.cores[core].current = None;
                }
                self.threads[t].state = ThreadState::Blocked;
                self.mark_dirty(core);
            }
        }
    }

    /// `pid`'s lock, released earlier in host order, is free at `at` in simulated time.
    pub(super) fn lock_free_at(&mut self, pid: u32, at: u64) {
        self.grant_waiters(pid, at);
    }

    /// A page fault of `thread` at `va` in `pid`: if its VMA is write-locked by a writer in
    /// progress, fall back to `mmap_lock` for read and wait. True: the fault waits (the
    /// access is retried when the thread runs again).
    pub(super) fn fault_must_wait(&mut self, core: usize, thread: usize, pid: u32, va: u64) -> bool {
        if !self.locks.enabled {
            return false;
        }
        let sem = &self.spaces[pid as usize].mmap_lock;
        if sem.writer.is_none_or(|w| w == thread) || !sem.vma_locked.iter().any(|&(s, e)| va >= s && va < e) {
            return false;
        }
        self.locks.mmap_stats.fault_fallbacks += 1;
        self.locks.mmap_stats.contended += 1;
        self.wait_for_lock(core, thread, pid, LockMode::Read, true);
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
        if !self.locks.enabled {
            self.charge(core, cycles);
            return;
        }
        if self.locks.zone.len() <= node {
            self.locks.zone.resize(node + 1, SpinLock::default());
        }
        let (mut lock, start) = self.spin_acquire(core, SpinClass::Zone, self.locks.zone[node]);
        self.charge(core, cycles);
        if lock.held_from == start {
            lock.free_at = lock.free_at.max(self.clock(core));
        }
        self.locks.zone[node] = lock;
    }
}
