//! Replay of a recorded program (`workload.kind = "recorded"`, built by
//! `crate::workload::recorded` from a `tlbsim record` trace): the operations that run its
//! recorded access streams, start its threads where it created them, and keep its threads
//! in the recorded order around its system calls.
//!
//! Modelled: each recorded access goes through the one access path (TLBs, walks, faults
//! into `mm/`) at its recorded virtual address; each recorded instruction costs the
//! machine's CPI times `workload.time_scale` (a data access is an operand of an
//! instruction: it adds only its translation time); a thread a program created with
//! pthread_create starts asleep and runs from its creator's `Op::Spawn`, on the core the
//! scheduler gave it. Completion tokens (`Op::Post`, `Op::Wait`) carry the recording's
//! order between threads: a thread waits for what it depends on and nothing else, spinning
//! on its core as the recorded thread was running then. A recorded busy-wait loop
//! (`Op::Spin`) runs its body's accesses over and over until the store that released it
//! has been replayed.
//!
//! Blocking calls: a woken futex wait or a wait another recorded thread's call ended is an
//! `Op::Sleep` (below); a nanosleep, or a wait woken from outside the recording, is an
//! `Op::Block` of the recorded duration; file reads and writes are `Op::FileIo` (os/io.rs).
//! The thread leaves its core in each, which runs another thread or idles, lazy.
//!
//! Simplified: the recording has no timing of its own but those durations, so the cycles
//! between events are the model's.

use super::{Os, ThreadState};
use crate::coherence::Coherence;
use crate::error::{Error, Result};
use crate::fasthash::FastMap as HashMap;
use crate::types::AccessKind;
use crate::workload::program::Recorded;
use std::collections::VecDeque;

/// A recorded program's replay state: its completion tokens, its held threads and the
/// clock cost of one recorded instruction.
pub(crate) struct Replay {
    /// Completion tokens of `Op::Post`/`Op::Wait`/`Op::Sleep`: times posted.
    posted: Vec<u32>,
    /// `Op::Take` (a counting semaphore over the same tokens): posts taken so far.
    taken: Vec<u32>,
    /// The threads asleep in a `Sleep` on each token.
    sleepers: HashMap<u32, Vec<usize>>,
    /// The threads asleep in a take of each token, in the order they went to sleep (a
    /// post wakes the first).
    takers: HashMap<u32, VecDeque<usize>>,
    /// Threads created asleep (`Workload::held_threads`), by declaration index: the
    /// engine's thread id, until an `Op::Spawn` starts it.
    held: Vec<(u32, usize)>,
    /// Clock units (cycles << CLOCK_SHIFT) per recorded instruction: the machine's CPI
    /// times `workload.time_scale`.
    cpi: u64,
}

impl Replay {
    pub(crate) fn new(tokens: usize, cpi: u64) -> Replay {
        Replay { posted: vec![0; tokens], taken: vec![0; tokens], sleepers: HashMap::default(), takers: HashMap::default(), held: Vec::new(), cpi }
    }

    /// Thread `id` is the held thread declared `declared`-th.
    pub(crate) fn hold(&mut self, declared: u32, id: usize) {
        self.held.push((declared, id));
    }

    /// How many times `token` has been posted.
    fn posted(&self, token: u32) -> u32 {
        self.posted[token as usize]
    }

    /// Post `token` once: the first taker asleep on it (if any) and every sleeper, to wake
    /// in that order.
    fn post(&mut self, token: u32) -> (Option<usize>, Option<Vec<usize>>) {
        self.posted[token as usize] += 1;
        let taker = self.takers.get_mut(&token).and_then(|t| t.pop_front());
        (taker, self.sleepers.remove(&token))
    }

    /// Take one post of `token` not taken yet, if there is one.
    fn try_take(&mut self, token: u32) -> bool {
        let t = token as usize;
        if self.posted[t] > self.taken[t] {
            self.taken[t] += 1;
            return true;
        }
        false
    }
}

/// A wait longer than this (about ten simulated minutes at 3 GHz) means a token that will
/// never be posted.
const MAX_SPIN_CYCLES: u64 = 1 << 41;

impl<P: Coherence> Os<P> {
    /// Run the `Replay` op at the thread's pc until it is done or `until`.
    pub(super) fn exec_replay(&mut self, core: usize, thread: usize, stream: usize, start: u64, len: u64, until: u64) -> Result<()> {
        if self.threads[thread].access_left == 0 {
            if len == 0 {
                self.advance(thread);
                return Ok(());
            }
            self.threads[thread].access_left = len;
        }
        if self.run_entries(core, thread, stream, start, len, until)? {
            self.advance(thread);
        }
        Ok(())
    }

    /// Run entries `start..start + len` of recorded stream `stream` from where the thread's
    /// `access_left` (entries left, nonzero) says, until they are done (true) or `until`,
    /// another thread's turn or a pending interrupt (false: the op runs again).
    fn run_entries(&mut self, core: usize, thread: usize, stream: usize, start: u64, len: u64, until: u64) -> Result<bool> {
        let cpi = self.replay.cpi;
        while self.threads[thread].access_left > 0 {
            if self.clock(core) >= until || self.cores[core].current != Some(thread) || self.cores[core].waiting > 0 {
                return Ok(false);
            }
            let left = self.threads[thread].access_left;
            let entry = self.w.recorded[stream][(start + len - left) as usize];
            self.threads[thread].access_left = left - 1;
            let value = entry & Recorded::VALUE;
            let kind = match entry & Recorded::KIND {
                Recorded::LOAD => AccessKind::Load,
                Recorded::STORE => AccessKind::Store,
                Recorded::FETCH => {
                    let c = &mut self.m.cores[core];
                    c.stats.instructions += 1;
                    c.tlbs.retire(1);
                    c.clock += cpi;
                    AccessKind::Fetch
                }
                _ => {
                    let c = &mut self.m.cores[core];
                    c.stats.instructions += value;
                    c.tlbs.retire(value);
                    c.clock += cpi * value;
                    continue;
                }
            };
            self.threads[thread].accesses += 1;
            crate::access::access(self, core, value, kind)?;
        }
        Ok(true)
    }

    /// `Op::Spin`: a recorded busy-wait loop. Between iterations: go on if `token` has been
    /// posted `count` times, else run the loop's body (entries `start..start + len` of
    /// `stream`) once more. The thread was spinning in user space here: it keeps its core
    /// and its address space (it gets shootdowns) and its instructions and loads count; it
    /// yields the core between iterations to a thread queued there, as `Wait` does, so
    /// that a releaser sharing its core runs. `access_left` holds the body's entries left
    /// (0: between iterations), `access_cursor` the clock the spin began at plus one.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn exec_spin(&mut self, core: usize, thread: usize, token: u32, count: u32, stream: usize, start: u64, len: u64, until: u64) -> Result<()> {
        loop {
            if self.threads[thread].access_left == 0 {
                if self.replay.posted(token) >= count {
                    self.threads[thread].access_cursor = 0;
                    self.advance(thread);
                    return Ok(());
                }
                let now = self.clock(core);
                let t = &mut self.threads[thread];
                if t.access_cursor == 0 {
                    t.access_cursor = now + 1;
                } else if now + 1 - t.access_cursor > MAX_SPIN_CYCLES {
                    return Err(Error::Sim(format!(
                        "replay: thread {:?} has spun {} cycles for token {token} (posted {} of {count} times): the recording's order cannot be kept",
                        t.name,
                        now + 1 - t.access_cursor,
                        self.replay.posted(token)
                    )));
                }
                if now >= until || self.cores[core].current != Some(thread) || self.cores[core].waiting > 0 {
                    return Ok(());
                }
                if !self.cores[core].runq.is_empty() {
                    self.cores[core].current = None;
                    self.cores[core].runq.push_back(thread);
                    self.threads[thread].queued_at = now;
                    return Ok(());
                }
                self.threads[thread].access_left = len;
            }
            if !self.run_entries(core, thread, stream, start, len, until)? {
                return Ok(());
            }
        }
    }

    /// `Op::Spawn`: pthread_create's clone starts the held thread `declared`.
    pub(super) fn spawn_held(&mut self, core: usize, thread: usize, declared: u32) {
        self.advance(thread);
        self.stats[core].syscalls += 1;
        self.charge(core, self.settings.costs().syscall);
        let Some(&(_, id)) = self.replay.held.iter().find(|h| h.0 == declared) else {
            // Workload::check makes every spawned thread a held one.
            unreachable!("spawn of thread {declared}, which is not held");
        };
        let now = self.clock(core);
        self.threads[id].start_cycle = now;
        let target = self.threads[id].core;
        self.enqueue(id, target, now);
    }

    /// `Op::Clone`: pthread_create's clone in a process with no declared threads (a forked
    /// child's): a new thread of the caller's process runs `program`, with the caller's
    /// region slots, queued where wake_up_new_task puts it (select_task_rq_fair with
    /// SD_BALANCE_FORK, kernel/sched/fair.c: find_idlest_cpu): an idle core of the
    /// caller's socket, the first after the caller's, else the caller's core. Under a
    /// hypervisor: the caller's VCPU.
    pub(super) fn clone_thread(&mut self, core: usize, thread: usize, program: usize) {
        self.advance(thread);
        self.stats[core].syscalls += 1;
        self.charge(core, self.settings.costs().syscall);
        let mut target = self.threads[thread].core;
        if self.virt.is_none() {
            let (n, socket) = (self.cores.len(), self.m.cores[core].socket);
            if let Some(c) = (1..n).map(|i| (core + i) % n).find(|&c| self.m.cores[c].socket == socket && self.core_idle(c) && self.may_run_on(thread, c)) {
                target = c;
            }
        }
        let t = &self.threads[thread];
        let (pid, slots, class) = (t.pid, t.slots.clone(), t.class.clone());
        let name = format!("{}-thread{program}", t.name);
        let now = self.clock(core);
        let allowed = self.threads[thread].allowed;
        let id = self.spawn_thread(pid, name, class, false, program, target, false, slots, now, false);
        self.threads[id].allowed = allowed;
    }

    /// `Op::Post`: one more posting of `token`; the threads asleep on it in a `Sleep` check
    /// again, and the first thread asleep in a `Take` of it is woken (a semaphore's post, a
    /// condition variable's signal: one waiter).
    pub(super) fn post(&mut self, core: usize, thread: usize, token: u32) {
        self.advance(thread);
        let (taker, sleepers) = self.replay.post(token);
        let now = self.clock(core);
        // A taker asleep is Blocked; one woken by an earlier post and not yet run has left
        // the queue already.
        if let Some(w) = taker {
            if self.threads[w].state == ThreadState::Blocked {
                if self.virt.is_some() && self.threads[w].core == self.threads[thread].core {
                    // A guest's wake-up on the waker's own VCPU: try_to_wake_up enqueues the
                    // wakee on the local run queue at once, so a waker that blocks next (a
                    // client's request sent, its reply awaited) hands its VCPU to the wakee
                    // instead of blocking the VCPU and letting the hypervisor run another
                    // guest's (an intra-VM switch, not two inter-VM ones).
                    self.enqueue(w, self.threads[w].core, now);
                } else {
                    self.schedule_wake_by(w, now, thread, core);
                }
            }
        }
        if let Some(sleepers) = sleepers {
            for w in sleepers {
                if self.threads[w].state == ThreadState::Blocked {
                    self.schedule_wake_by(w, now, thread, core);
                }
            }
        }
    }

    /// `Op::Sleep`: go on if `token` has been posted `count` times, else sleep until a post
    /// (the op then runs again): a futex wait, the core free for others or idle.
    pub(super) fn sleep_token(&mut self, core: usize, thread: usize, token: u32, count: u32) {
        if self.replay.posted(token) >= count {
            self.advance(thread);
            return;
        }
        self.replay.sleepers.entry(token).or_default().push(thread);
        self.park(core, thread);
    }

    /// `Op::Take`: take one post of `token` not taken yet and go on, else sleep until a post
    /// wakes this thread (the op then runs again; if another thread took that post first,
    /// it sleeps again, at the back): a counting semaphore's wait, or a worker waiting on
    /// its queue's condition variable. The core is free meanwhile.
    pub(super) fn take_token(&mut self, core: usize, thread: usize, token: u32) {
        if self.replay.try_take(token) {
            self.advance(thread);
            return;
        }
        self.replay.takers.entry(token).or_default().push_back(thread);
        self.park(core, thread);
    }

    /// `Op::Wait`: go on if `token` has been posted `count` times, else spin until `until`
    /// (the op runs again). The thread was running at this point of the recording: it keeps
    /// its core and its address space loaded (it gets shootdowns); it yields the core to a
    /// thread queued there (a spin loop with sched_yield).
    pub(super) fn wait_token(&mut self, core: usize, thread: usize, token: u32, count: u32, until: u64) -> Result<()> {
        if self.replay.posted(token) >= count {
            self.threads[thread].access_left = 0;
            self.advance(thread);
            return Ok(());
        }
        let now = self.clock(core);
        let spin = until.saturating_sub(now).max(1);
        // access_left holds the cycles spun so far on this op.
        let t = &mut self.threads[thread];
        t.access_left += spin;
        if t.access_left > MAX_SPIN_CYCLES {
            return Err(Error::Sim(format!(
                "replay: thread {:?} has waited {} cycles for token {token} (posted {} of {count} times): the recording's order cannot be kept",
                t.name,
                t.access_left,
                self.replay.posted(token)
            )));
        }
        if !self.cores[core].runq.is_empty() {
            // Another thread waits for this core (perhaps the one to post): a spin loop's
            // sched_yield.
            self.cores[core].current = None;
            self.cores[core].runq.push_back(thread);
            self.threads[thread].queued_at = self.clock(core);
            return Ok(());
        }
        self.charge(core, spin);
        Ok(())
    }
}
