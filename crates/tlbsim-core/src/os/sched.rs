//! The event loop and the scheduler: per-core run queues, time slices, blocking and
//! wake-ups, idle cores, and the policy's periodic timer ticks (docs/OS_MODEL.md "Time").

use super::{Leap, Os, ThreadState};
use crate::coherence::Coherence;
use crate::error::{Error, Result};
use crate::machine::CLOCK_SHIFT;
use crate::types::CoreId;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Event {
    Wake {
        thread: usize,
        /// The thread that woke it and the core it ran on (a post, a barrier's release);
        /// None for a timer (its own sleep's end) or a device.
        by: Option<(usize, usize)>,
    },
    /// A lock released (in host order) before its waiters reached this time is theirs now.
    LockFree { pid: u32 },
    /// A writer spinning on a reader-owned lock reaches its limit (rwsem_rspin_threshold).
    SpinLimit { pid: u32, thread: usize },
    /// The device finished a split-driver request of `client` that `server` sent it.
    IoDone { server: usize, client: usize },
}

/// The scheduler tick's period under `os.balance = "linux"`, in µs: HZ = 250
/// (CONFIG_HZ_250, Debian's kernels; /proc/config.gz of the KVM guests measured here says
/// the same).
const SCHED_TICK_US: f64 = 4_000.0;

impl<P: Coherence> Os<P> {
    /// Make `thread` runnable on `core` at time `at`.
    /// Under a hypervisor `core` is a VCPU: its run queue is on the CPU it runs on, or
    /// with it while it is off every CPU (os/virt.rs).
    /// Some(idle cycles): the core had halted (idle past `machine.idle.poll_ns`) for that
    /// long, and the waker sends it a reschedule IPI.
    pub(super) fn enqueue(&mut self, thread: usize, core: usize, at: u64) -> Option<u64> {
        self.threads[thread].core = core;
        self.threads[thread].state = ThreadState::Runnable;
        self.threads[thread].queued_at = at;
        let core = match self.cpu_now(core) {
            Some(c) => c,
            None => {
                self.enqueue_off_cpu(thread, core, at);
                return None;
            }
        };
        self.mark_dirty(core);
        self.cut_leap(core, at);
        let c = &mut self.cores[core];
        c.runq.push_back(thread);
        if c.current.is_none() && c.waiting == 0 && c.runq.len() == 1 {
            // An idle core wakes up at `at`, whether or not its run loop has noted it idle
            // yet (a thread that blocked at the end of its core's last step left the core
            // without `idle_since`: without the clock moving here, a woken thread ran before
            // its wake-up time, and a sleep was cut short).
            let since = c.idle_since.take();
            let clock = self.clock(core);
            let idle_from = since.map_or(clock, |since| since.max(clock));
            let mut now = clock.max(at);
            // A CPU idle for longer than it polls has halted: the woken thread waits for
            // the idle state's exit (machine.idle; on a KVM guest the host wakes the vCPU).
            // It stays idle, and lazy, until then.
            let idle = now.saturating_sub(idle_from);
            let halted = idle > self.settings.idle_poll();
            // One draw per wake of a halted CPU, from the run's own stream (runs without a
            // curve draw nothing, so their numbers are unchanged).
            let exit = if halted { self.settings.idle_exit_after(idle, self.sched.idle_rng.next_u64()) } else { 0 };
            if exit > 0 {
                now += exit;
                self.stats[core].idle_exits += 1;
                self.stats[core].idle_exit_cycles += exit;
            }
            self.stats[core].idle_cycles += now.saturating_sub(idle_from);
            self.set_clock(core, now);
            return halted.then_some(idle);
        }
        None
    }

    /// Main loop: run until every non-daemon thread has exited.
    pub(super) fn simulate(&mut self) -> Result<()> {
        let control = crate::control::current();
        if let Some(c) = &control {
            let total = self.threads.iter().filter(|t| !t.daemon).map(|t| crate::workload::program::counted_ops(&self.w.programs[t.program])).sum();
            c.start(crate::control::ProgressUnit::Operations, total);
        }
        while self.sched.live_workers > 0 {
            if self.policy.failed() {
                return Err(Error::Sim("the coherence policy failed; the run stopped".into()));
            }
            if self.sched.steps.is_multiple_of(1024) {
                if let Some(c) = &control {
                    c.set_done(self.threads.iter().filter(|t| !t.daemon).map(|t| t.ops_completed).sum());
                    if c.stop_requested() {
                        // Stopped (Ctrl-C): the stats so far, up to the furthest core's clock.
                        self.sched.partial = true;
                        self.sched.end_cycle = (0..self.cores.len()).map(|c| self.clock(c)).max().unwrap_or(0);
                        return Ok(());
                    }
                }
            }
            // The core furthest behind among those with work (ties: the lowest number).
            self.refresh_keys();
            let (bt, bc) = self.sched.keys.min();
            let best = (bt != u64::MAX).then_some((bt, bc));
            let second = if best.is_some() { self.sched.keys.min_except(bc) } else { u64::MAX };
            let next_event = self.sched.next_event_at();
            match (best, next_event) {
                (None, None) => {
                    return Err(Error::Sim(format!("deadlock: {} threads still to finish but no core has work and no wake-up is due", self.sched.live_workers)))
                }
                (Some((t, _)), Some(e)) if e <= t => self.process_event()?,
                (None, Some(_)) => self.process_event()?,
                (Some((t, core)), e) => {
                    let limit = second.min(e.unwrap_or(u64::MAX)).min(t.saturating_add(self.settings.quantum() * 64)).saturating_add(self.settings.quantum());
                    self.run_core(core, limit)?;
                    self.mark_dirty(core);
                }
            }
            self.sched.steps += 1;
        }
        self.sched.end_cycle = self.threads.iter().filter(|t| !t.daemon).filter_map(|t| t.end_cycle).max().unwrap_or(0);
        Ok(())
    }

    /// Bring the scheduling keys of the cores whose state changed up to date.
    fn refresh_keys(&mut self) {
        while let Some(c) = self.sched.pop_dirty() {
            // A core with a thread to run is at its clock; an idle one, or one spinning
            // for acks, has work when its next interrupt arrives (or when the last ack
            // makes it runnable again).
            let co = &self.cores[c];
            let clock = self.m.cores[c].clock >> CLOCK_SHIFT;
            // Under a hypervisor, a VCPU waiting for this CPU is work too.
            let hv_work = self.virt.as_ref().is_some_and(|v| v.hv.has_waiting(c));
            let key = if co.waiting == 0 && (co.current.is_some() || !co.runq.is_empty() || hv_work) {
                // Interrupts taken at arrival: a core whose kernel path ran past an
                // interrupt's arrival is stepped as of the arrival, to take it (run_core
                // takes due interrupts first), so that its ack does not wait until every
                // other core has reached its clock.
                // So is a core whose computation (`Leap`) an interrupt arrived in.
                let in_leap = self.live_leap(c).is_some();
                match co.pending.front() {
                    Some(i) if self.settings.kernel_interrupts_at_arrival() || in_leap => clock.min(i.arrival),
                    _ => clock,
                }
            } else {
                let irq = co.pending.front().map_or(u64::MAX, |i| clock.max(i.arrival));
                // An idle core also wakes for the policy's timer tick.
                if co.waiting == 0 {
                    irq.min(co.next_tick.max(clock))
                } else {
                    irq
                }
            };
            self.sched.keys.set(c, key);
        }
    }

    fn process_event(&mut self) -> Result<()> {
        let (at, ev) = self.sched.pop_event();
        match ev {
            Event::Wake { thread, by } => {
                if self.threads[thread].state == ThreadState::Blocked {
                    let core = self.wake_core(thread, by, at);
                    self.enqueue(thread, core, at);
                }
            }
            Event::LockFree { pid } => self.lock_free_at(pid, at),
            Event::SpinLimit { pid, thread } => self.spin_limit(pid, thread, at),
            Event::IoDone { server, client } => self.io_done(server, client, at),
        }
        Ok(())
    }

    pub(super) fn core_idle(&self, c: usize) -> bool {
        let core = &self.cores[c];
        core.current.is_none() && core.runq.is_empty() && core.waiting == 0
    }

    /// The core a woken thread is queued on (`os.balance`): under `none` its previous one;
    /// under `linux` select_task_rq_fair's wake-up fast path (kernel/sched/fair.c as of
    /// torvalds/linux commit 000619680c37, the v5.7 cycle): a wake-up by a thread
    /// (`by`: the waker and its core, this_cpu) may be affine (`want_affine`: not wake_wide,
    /// and the waker's core is in the wakee's CPU set), and then wake_affine chooses between
    /// the waker's core and the wakee's previous one; select_idle_sibling then looks for an
    /// idle core in the last-level cache (the socket) of that choice. A wake-up by a timer
    /// or a device has this_cpu = prev_cpu (the timer fires on the CPU the sleeper armed it
    /// on, assumed): select_idle_sibling around the previous core only.
    fn wake_core(&mut self, thread: usize, by: Option<(usize, usize)>, at: u64) -> usize {
        let t = &self.threads[thread];
        let prev = t.core;
        if !self.settings.balance() || t.pinned || self.virt.is_some() {
            return prev;
        }
        let mut target = prev;
        if let Some((waker, this)) = by {
            self.record_wakee(waker, thread, at);
            let want_affine = !self.wake_wide(waker, thread, this) && self.may_run_on(thread, this);
            if want_affine && this != prev {
                target = self.wake_affine(waker, this, prev);
            }
        }
        self.select_idle_sibling(thread, prev, target)
    }

    /// record_wakee: the waker's `wakee_flips` count the times the thread it wakes changes,
    /// halved once when a second (HZ jiffies) has passed since they last were.
    fn record_wakee(&mut self, waker: usize, wakee: usize, now: u64) {
        let second = self.settings.us(1e6);
        let w = &mut self.threads[waker];
        if now > w.wakee_flip_decay.saturating_add(second) {
            w.wakee_flips >>= 1;
            w.wakee_flip_decay = now;
        }
        if w.last_wakee != wakee {
            w.last_wakee = wakee;
            w.wakee_flips += 1;
        }
    }

    /// wake_wide: a waker and wakee in an M:N relation wider than the last-level cache
    /// (both flip counts at least `sd_llc_size`, the larger at least `sd_llc_size` times the
    /// smaller) are spread, not pulled together.
    fn wake_wide(&self, waker: usize, wakee: usize, this: usize) -> bool {
        let socket = self.m.cores[this].socket;
        let llc_size = self.m.cores.iter().filter(|c| c.socket == socket).count() as u64;
        let (a, b) = (self.threads[waker].wakee_flips as u64, self.threads[wakee].wakee_flips as u64);
        let (master, slave) = (a.max(b), a.min(b));
        slave >= llc_size && master >= slave * llc_size
    }

    /// Runnable threads of `core` (rq->nr_running: the running one and the queued ones).
    fn nr_running(&self, core: usize) -> u64 {
        let c = &self.cores[core];
        c.current.is_some() as u64 + c.runq.len() as u64
    }

    /// wake_affine between the waker's core `this` and the wakee's previous core `prev`.
    /// wake_affine_idle never applies here: the waker is a thread, running on `this` as it
    /// wakes (this_cpu is idle only for a wake-up from an interrupt), and no modelled
    /// wake-up is WF_SYNC (futexes, barriers and the event channel wake without it; pipes
    /// and sockets, which set it, are not modelled). So wake_affine_weight decides: `this`
    /// if its load with the wakee added, ×100, is below `prev`'s load without the wakee,
    /// ×(100 + (imbalance_pct − 100)/2) (WA_BIAS); imbalance_pct is 117 for the domain of a
    /// last-level cache and 125 for a NUMA domain (kernel/sched/topology.c sd_init; SD_WAKE_AFFINE
    /// stays on NUMA domains within RECLAIM_DISTANCE, as on a two-socket machine's SLIT of
    /// 21: assumed for every machine here). Simplified: a CPU's load is its count of
    /// runnable threads, each of weight 1 (PELT's decaying averages are not kept), so the
    /// wakee's blocked load on `prev` and its load added to `this` are both 1; the waker
    /// counts on `this` even when it has gone on to sleep since (the wake-up is decided
    /// here, at the wake-up event). Capacities are equal.
    fn wake_affine(&self, waker: usize, this: usize, prev: usize) -> usize {
        let same_llc = self.m.cores[this].socket == self.m.cores[prev].socket;
        let imbalance_pct: u64 = if same_llc { 117 } else { 125 };
        let waker_gone = self.cores[this].current != Some(waker) && !self.cores[this].runq.contains(&waker);
        let this_load = self.nr_running(this) + waker_gone as u64;
        let this_eff = (this_load + 1) * 100;
        let prev_eff = self.nr_running(prev) * (100 + (imbalance_pct - 100) / 2);
        if this_eff < prev_eff {
            this
        } else {
            prev
        }
    }

    /// select_idle_sibling(p, prev, target): `target` if idle; else `prev` if it is idle and
    /// shares `target`'s last-level cache; else the first idle core of `target`'s socket
    /// after it that the thread's CPU set allows (select_idle_cpu: for_each_cpu_wrap over
    /// the LLC domain and `p->cpus_ptr`); else `target`. Simplified: the scan covers the
    /// whole LLC (SIS_PROP's limit from the average idle time is not modelled), there is no
    /// SMT (select_idle_core, select_idle_smt), and `recent_used_cpu` is not kept.
    fn select_idle_sibling(&self, thread: usize, prev: usize, target: usize) -> usize {
        if self.core_idle(target) {
            return target;
        }
        let socket = self.m.cores[target].socket;
        if prev != target && self.m.cores[prev].socket == socket && self.core_idle(prev) {
            return prev;
        }
        let n = self.cores.len();
        (1..n).map(|i| (target + i) % n).find(|&c| self.m.cores[c].socket == socket && self.core_idle(c) && self.may_run_on(thread, c)).unwrap_or(target)
    }

    /// Whether `thread` may be moved to `core` by the scheduler: not pinned to one CPU, and
    /// `core` in its CPU set if it has one.
    pub(super) fn may_run_on(&self, thread: usize, core: usize) -> bool {
        let t = &self.threads[thread];
        !t.pinned && t.allowed.is_none_or(|s| crate::workload::program::cpu_set_has(&self.w.cpu_sets[s as usize], core))
    }

    /// Take `thread` off `core` (it runs there now) and queue it on `to`; its page tables
    /// follow it across sockets as they do for a migrate-thread.
    pub(super) fn move_thread(&mut self, core: usize, thread: usize, to: usize) -> Result<()> {
        self.cores[core].current = None;
        let now = self.clock(core);
        self.enqueue(thread, to, now);
        let socket = self.m.cores[self.home_cpu(to)].socket;
        // A guest does not see sockets: its page tables stay where they are.
        if socket != self.m.cores[core].socket && self.virt.is_none() {
            let pid = self.threads[thread].pid;
            self.migrate_page_tables(core, thread, pid, socket)?;
        }
        Ok(())
    }

    /// `Op::SetAffinity`: sched_setaffinity to the CPU set `set` (kernel/sched/core.c
    /// `__set_cpus_allowed_ptr_locked`). A set of one CPU pins the thread there, as a
    /// migrate-thread does. Otherwise the thread stays where it is if its CPU is in the set,
    /// else it moves to a CPU of the set: Linux's `cpumask_any_and_distribute` takes the
    /// next one after the last it handed out; here the first idle one after its CPU, or the
    /// first after it (simplified).
    pub(super) fn set_affinity(&mut self, core: usize, thread: usize, set: u32) -> Result<()> {
        let members: Vec<usize> = crate::workload::program::cpu_set_members(&self.w.cpu_sets[set as usize]).map(|c| self.cpu_index(thread, c)).collect();
        if let [only] = members[..] {
            self.threads[thread].allowed = None;
            self.threads[thread].pinned = true;
            if only != self.threads[thread].core {
                self.move_thread(core, thread, only)?;
            }
            return Ok(());
        }
        self.threads[thread].pinned = false;
        self.threads[thread].allowed = Some(set);
        let here = self.threads[thread].core;
        if members.contains(&here) {
            return Ok(());
        }
        // the first after `here`, cyclically; natively an idle one if there is one (under a
        // hypervisor these are VCPUs, whose idleness the guest's scheduler sees otherwise)
        let first_after = |ok: &dyn Fn(usize) -> bool| {
            let mut c: Vec<usize> = members.iter().copied().filter(|&c| ok(c)).collect();
            c.sort_unstable();
            c.iter().copied().find(|&c| c > here).or_else(|| c.first().copied())
        };
        let native = self.virt.is_none();
        let to = first_after(&|c| native && self.core_idle(c)).or_else(|| first_after(&|_| true));
        self.move_thread(core, thread, to.expect("a checked CPU set is not empty"))
    }

    /// `os.balance = "linux"`: `core` is about to go idle; it takes a thread waiting in the
    /// run queue of another core of its socket (newidle load_balance: the first such core
    /// after it, its last-queued unpinned thread that was queued by this core's clock, so
    /// that no thread runs before it became runnable).
    fn pull_thread(&mut self, core: usize) -> Option<usize> {
        if !self.settings.balance() || self.virt.is_some() {
            return None;
        }
        let now = self.clock(core);
        let socket = self.m.cores[core].socket;
        let n = self.cores.len();
        for victim in (1..n).map(|i| (core + i) % n) {
            if self.m.cores[victim].socket != socket || self.cores[victim].runq.is_empty() {
                continue;
            }
            let q = &self.cores[victim].runq;
            if let Some(i) = (0..q.len()).rev().find(|&i| self.may_run_on(q[i], core) && self.threads[q[i]].queued_at <= now) {
                let t = self.cores[victim].runq.remove(i).unwrap();
                self.threads[t].core = core;
                self.mark_dirty(victim);
                self.stats[core].balance_pulls += 1;
                return Some(t);
            }
        }
        None
    }

    /// `os.balance = "linux"` (natively): every core's scheduler tick one period in, and
    /// each of its domains' balancing due at once, at the interval sd_init starts it at:
    /// `balance_interval = min_interval = sd_weight` ms.
    pub(super) fn init_balancing(&mut self) {
        if !self.settings.balance() || self.virt.is_some() {
            return;
        }
        let tick = self.settings.us(SCHED_TICK_US);
        for c in 0..self.cores.len() {
            let weights = self.domain_weights(c);
            self.cores[c].next_sched_tick = tick;
            self.cores[c].balance_interval_ms = weights;
        }
    }

    /// The CPU counts (sd_weight) of `core`'s scheduling domains: its socket (the
    /// last-level cache's domain, MC), and the machine (a NUMA domain; 0 on a machine of
    /// one socket, which has none). No SMT domain: the model has no SMT.
    fn domain_weights(&self, core: usize) -> [u64; 2] {
        let socket = self.m.cores[core].socket;
        let in_socket = self.m.cores.iter().filter(|c| c.socket == socket).count() as u64;
        let all = self.m.cores.len() as u64;
        [in_socket, if all > in_socket { all } else { 0 }]
    }

    /// `core`'s scheduler tick, when due (`os.balance = "linux"`; HZ = 250). With threads
    /// waiting in its run queue (rq->nr_running ≥ 2) it kicks the balancing of idle cores:
    /// nohz_balancer_kick wakes the idle load balancer, whose _nohz_idle_balance runs the
    /// periodic balancing of every idle core whose balancing is due, in order after this
    /// one (`idle_balance`). An idle core's own tick is stopped (NOHZ): it balances only
    /// when kicked. Not modelled: the busy core's own periodic balancing (a core running one
    /// thread pulling from one running three; its interval is ×busy_factor = 16 longer), and
    /// the idle load balancer's wake-up (an IPI to an idle CPU, whose cost is not charged;
    /// the core that takes a thread pays its idle state's exit, as any wake-up does).
    fn sched_tick(&mut self, core: usize) {
        let now = self.clock(core);
        let next = self.cores[core].next_sched_tick;
        if now < next {
            return;
        }
        let tick = self.settings.us(SCHED_TICK_US);
        // ticks missed while idle are not taken: the next is the first after now
        self.cores[core].next_sched_tick = next + ((now - next) / tick + 1) * tick;
        if self.cores[core].current.is_none() || self.cores[core].runq.is_empty() {
            return;
        }
        self.cores[core].leap = None;
        let n = self.cores.len();
        for i in (1..n).map(|k| (core + k) % n) {
            if self.core_idle(i) {
                self.idle_balance(i, now);
            }
        }
    }

    /// Periodic load balancing of idle core `i` at `now` (sched_balance_domains /
    /// rebalance_domains with CPU_IDLE; kernel/sched/fair.c and topology.c as of v5.7, the
    /// version `wake_core` follows): each of its domains whose balancing is due, smallest
    /// first, runs load_balance (`balance_pull`) until one takes a thread. A domain's
    /// interval (sd->balance_interval, ms) goes back to sd_weight when it took one and
    /// doubles, up to 2 × sd_weight, when it found the domain balanced (load_balance's
    /// out_balanced). Simplified: after a pull the core is busy and its larger domains wait
    /// for their own due time (Linux balances them at once as a busy CPU, which with one
    /// thread just pulled finds nothing to take).
    fn idle_balance(&mut self, i: usize, now: u64) {
        let weights = self.domain_weights(i);
        for level in 0..2 {
            if weights[level] == 0 || now < self.cores[i].balance_due[level] {
                continue;
            }
            let pulled = self.balance_pull(i, level, now);
            let interval = if pulled { weights[level] } else { (self.cores[i].balance_interval_ms[level] * 2).min(2 * weights[level]) };
            self.cores[i].balance_interval_ms[level] = interval;
            self.cores[i].balance_due[level] = now + self.settings.us(interval as f64 * 1_000.0);
            if pulled {
                self.stats[i].balance_pulls += 1;
                return;
            }
        }
    }

    /// load_balance of idle core `i` over its domain `level` at `now`: find the busiest
    /// group and in it the busiest core, and move one of that core's waiting threads to `i`.
    /// - Its socket's domain (groups of one core): the core of the socket with the most
    ///   runnable threads, if it has two or more (a group of one CPU running more than one
    ///   task is overloaded; `i`, idle, has spare capacity: migrate_task, one thread).
    /// - The machine's domain (groups are sockets): the socket with the most runnable
    ///   threads beyond its cores, if one has more than it has cores (group_overloaded
    ///   against `i`'s socket with spare capacity: migrate_util, a thread). Not modelled:
    ///   the spreading of running threads between sockets that are not overloaded
    ///   (prefer_sibling's imbalance, which moves a running task only by active balancing
    ///   after repeated failures), and NUMA balancing's veto of a move away from a task's
    ///   preferred node (migrate_degrades_locality).
    ///
    /// The thread taken is the first waiting one that may run on `i` and was queued by
    /// `now` (detach_tasks starts from the end of cfs_tasks the longest since it ran), from
    /// the busiest core that has one (LBF_ALL_PINNED's retry without a core whose threads
    /// cannot move). Not modelled: cache hotness (task_hot: a task that ran within
    /// sysctl_sched_migration_cost, 0.5 ms, is skipped until the domain failed
    /// cache_nice_tries times). Load is a count of runnable threads, as in `wake_affine`.
    fn balance_pull(&mut self, i: usize, level: usize, now: u64) -> bool {
        let socket = self.m.cores[i].socket;
        let n = self.cores.len();
        let group = if level == 0 {
            Some(socket)
        } else {
            let sockets = self.m.cores.iter().map(|c| c.socket).max().map_or(0, |s| s + 1);
            let excess = |s: u32| {
                let (mut running, mut cpus) = (0u64, 0u64);
                for c in (0..n).filter(|&c| self.m.cores[c].socket == s) {
                    running += self.nr_running(c);
                    cpus += 1;
                }
                running.saturating_sub(cpus)
            };
            (0..sockets).filter(|&s| s != socket).map(|s| (excess(s), s)).filter(|&(e, _)| e > 0).max_by_key(|&(e, s)| (e, Reverse(s))).map(|(_, s)| s)
        };
        let Some(group) = group else { return false };
        let movable = |os: &Self, c: usize| os.cores[c].runq.iter().position(|&t| os.may_run_on(t, i) && os.threads[t].queued_at <= now);
        let victim = (0..n)
            .filter(|&c| c != i && self.m.cores[c].socket == group && self.nr_running(c) >= 2)
            .filter_map(|c| movable(self, c).map(|k| (self.nr_running(c), Reverse(c), k)))
            .max();
        let Some((_, Reverse(v), k)) = victim else { return false };
        let t = self.cores[v].runq.remove(k).expect("a queued thread");
        self.mark_dirty(v);
        self.enqueue(t, i, now);
        true
    }

    pub(crate) fn schedule_wake(&mut self, thread: usize, at: u64) {
        self.schedule_event(at, Event::Wake { thread, by: None });
    }

    /// Wake `thread` at `at`, woken by thread `waker` running on `core` (`wake_core`).
    pub(crate) fn schedule_wake_by(&mut self, thread: usize, at: u64, waker: usize, core: usize) {
        self.schedule_event(at, Event::Wake { thread, by: Some((waker, core)) });
    }

    pub(super) fn schedule_event(&mut self, at: u64, ev: Event) {
        self.sched.push_event(at, ev);
    }

    /// Run `core` until its clock passes `limit`, it blocks on a shootdown, or it runs out
    /// of work.
    fn run_core(&mut self, core: usize, limit: u64) -> Result<()> {
        let spinning_on_entry = self.cores[core].waiting > 0;
        loop {
            self.sched.initiator_resumed = false;
            self.take_due_interrupts(core);
            if self.sched.initiator_resumed && self.cores[core].waiting == 0 {
                // The initiator runs again from its last ack, likely behind this core's
                // clock: the scheduler's limit for this core changes. Running on to the old
                // one let this core get up to 64 quanta ahead of an initiator that was
                // spinning, and take its next interrupt that late.
                return Ok(());
            }
            if self.cores[core].waiting == 0 {
                if self.clock(core) >= limit {
                    // A leap may have ended at the core's tick, past this step's limit,
                    // while other cores are still behind. The tick drops the leap, so it
                    // waits until the scheduler comes back to this core, when every core
                    // that was behind has had its turn: an interrupt a lagging initiator
                    // sends into the leap meanwhile is taken at its arrival, not at the tick.
                    // (At entry the clock is below the limit, so the tick is taken then.)
                    return Ok(());
                }
                self.take_due_ticks(core);
                self.sched_tick(core);
            }
            let now = self.clock(core);
            let next_irq = self.cores[core].pending.front().map_or(u64::MAX, |i| i.arrival);
            if self.cores[core].waiting > 0 {
                // Spinning for acks, interrupts on: nothing happens here until the next
                // interrupt arrives or the last ack (a target's handler sets the clock then).
                // A core that has just started to wait goes back to the scheduler, whose
                // keys now know the targets' new interrupts.
                if !spinning_on_entry || next_irq > limit {
                    return Ok(());
                }
                self.set_clock(core, next_irq);
                continue;
            }
            if now >= limit {
                return Ok(());
            }
            if self.virt.is_some() && !self.hypervisor_step(core) {
                // No VCPU to run: the CPU idles until an interrupt, a tick or a VCPU's wake-up
                // (os/virt.rs moves its clock).
                if !self.idle_to(core, next_irq, limit) {
                    return Ok(());
                }
                continue;
            }
            let thread = match self.cores[core].current {
                Some(t) => {
                    // Time slice over and someone waiting: preempt.
                    if now >= self.cores[core].slice_end && !self.cores[core].runq.is_empty() {
                        self.cores[core].current = None;
                        self.cores[core].runq.push_back(t);
                        self.threads[t].queued_at = now;
                        continue;
                    }
                    t
                }
                None => match self.cores[core].runq.pop_front().or_else(|| self.pull_thread(core)) {
                    Some(t) => {
                        self.switch_to(core, t);
                        t
                    }
                    None => {
                        if !self.idle_to(core, next_irq, limit) {
                            return Ok(());
                        }
                        continue;
                    }
                },
            };
            let c = &self.cores[core];
            let sched_tick = if c.runq.is_empty() { u64::MAX } else { c.next_sched_tick };
            let until =
                limit.min(next_irq.max(now + 1)).min(c.next_tick.max(now + 1)).min(sched_tick.max(now + 1)).min(self.hypervisor_deadline(core).max(now + 1));
            self.cores[core].step_start = now;
            self.cores[core].leap_until = self.leap_bound(core, now, next_irq);
            self.step_thread(core, thread, until)?;
            self.interval_check(core);
            if self.sched.take_yield() {
                return Ok(());
            }
        }
    }

    /// The computation `core`'s clock is still at the end of (`Leap`): nothing else has
    /// happened on the core since, and its thread still runs there.
    pub(super) fn live_leap(&self, core: usize) -> Option<Leap> {
        self.cores[core].leap.filter(|l| l.end_raw == self.m.cores[core].clock && self.cores[core].current == Some(l.thread))
    }

    /// How far a compute piece starting at `now` may leap (`Leap`): up to everything due on
    /// the core itself. 0 under a hypervisor.
    fn leap_bound(&self, core: usize, now: u64, next_irq: u64) -> u64 {
        if self.virt.is_some() {
            return 0;
        }
        let c = &self.cores[core];
        let mut bound = next_irq.min(c.next_tick).min(c.next_involuntary_flush);
        if !c.runq.is_empty() {
            // Someone waits: the thread is preempted at the end of its slice, and the
            // scheduler tick may have an idle core take the waiter (`sched_tick`).
            bound = bound.min(c.slice_end).min(c.next_sched_tick);
        }
        bound.min(now.saturating_add(self.m.cores[core].tlbs.instructions_before_epoch())).max(now)
    }

    /// A thread woken onto `core`'s run queue at `at`, while the core's clock is past `at`
    /// at the end of a computation (`Leap`): its last piece is cut back to where the woken
    /// thread preempts it (at `at`, or at the end of the running thread's slice), which is
    /// where the core would have noticed it had it computed in quantum-long pieces.
    fn cut_leap(&mut self, core: usize, at: u64) {
        let Some(leap) = self.live_leap(core).filter(|l| self.threads[l.thread].pc == l.pc) else { return };
        let to = at.max(leap.floor).max(self.cores[core].slice_end);
        let end = leap.end_raw >> CLOCK_SHIFT;
        if to >= end {
            return;
        }
        let back = end - to;
        let t = &mut self.threads[leap.thread];
        if leap.finished {
            t.pc -= 1;
        }
        let pc = t.pc;
        t.access_left += back;
        let mc = &mut self.m.cores[core];
        mc.stats.instructions -= back;
        mc.tlbs.unretire(back);
        mc.clock -= back << CLOCK_SHIFT;
        self.cores[core].leap = Some(Leap { end_raw: mc.clock, pc, finished: false, ..leap });
        self.mark_dirty(core);
    }

    /// Whether some other core, or a pending wake-up or lock hand-over, is earlier in
    /// simulated time than `core`. Operations on shared kernel state (system calls: the
    /// `mmap_lock`, VMAs, page tables, frames) run only when their core is not ahead of any
    /// other, so they take effect in simulated-time order rather than in the order the
    /// engine happens to step cores within a quantum. Without this, which of two threads
    /// got `mmap_lock` first depended on the quantum, and fpr-munmap's throughput moved by
    /// up to 28% when the quantum was halved.
    pub(super) fn ahead_of_others(&mut self, core: usize) -> bool {
        self.refresh_keys();
        let now = self.clock(core);
        let next_event = self.sched.next_event_at().unwrap_or(u64::MAX);
        now > self.sched.keys.min_except(core).min(next_event)
    }

    /// `core` has nothing to run: it idles until its next interrupt (arriving at
    /// `next_irq`) or tick, and wakes for it at its arrival. False when that is past
    /// `limit`: the run loop returns to the scheduler.
    fn idle_to(&mut self, core: usize, next_irq: u64, limit: u64) -> bool {
        self.go_idle(core);
        let wake = next_irq.min(self.cores[core].next_tick);
        if wake > limit {
            return false;
        }
        self.idle_until(core, wake);
        true
    }

    /// An idle core's clock moves to `t` (counted as idle time).
    fn idle_until(&mut self, core: usize, t: u64) {
        let now = self.clock(core);
        if let Some(since) = self.cores[core].idle_since.as_mut() {
            let from = (*since).max(now);
            self.stats[core].idle_cycles += t.saturating_sub(from);
            *since = from.max(t);
        }
        self.set_clock(core, t);
    }

    fn go_idle(&mut self, core: usize) {
        let c = &mut self.cores[core];
        if c.idle_since.is_none() {
            // Linux enter_lazy_tlb(): the idle task keeps the last mm loaded.
            c.lazy = c.loaded_mm.is_some();
            c.idle_since = Some(self.m.cores[core].clock >> CLOCK_SHIFT);
        }
    }

    /// Put `thread` on `core`: context switch, loading its address space.
    fn switch_to(&mut self, core: usize, thread: usize) {
        let pid = self.threads[thread].pid;
        if let Some(since) = self.cores[core].idle_since.take() {
            let now = self.clock(core);
            self.stats[core].idle_cycles += now.saturating_sub(since);
        }
        self.cores[core].current = Some(thread);
        if self.threads[thread].first_run_cycle.is_none() {
            self.threads[thread].first_run_cycle = Some(self.clock(core));
        }
        self.stats[core].context_switches += 1;
        self.charge(core, self.settings.costs().context_switch);
        // Requests deferred to this core are applied at its context switch.
        self.apply_deferred(core);
        self.load_mm(core, pid);
        let now = self.clock(core);
        self.cores[core].slice_end = now + self.settings.time_slice();
    }

    /// `thread` leaves `core` asleep, with no wake-up time: whoever it waits for wakes it.
    pub(crate) fn park(&mut self, core: usize, thread: usize) {
        self.threads[thread].state = ThreadState::Blocked;
        self.cores[core].current = None;
    }

    pub(crate) fn block(&mut self, core: usize, thread: usize, until: u64) {
        self.park(core, thread);
        self.schedule_wake(thread, until);
    }

    /// If every non-daemon thread of `pid` still alive waits in a barrier, wake them all at
    /// `now` (the clock of the core the last one arrived or exited on) and return true.
    /// `waker` (a thread, and the core it runs on) is the one that arrived or exited last.
    pub(super) fn release_barrier(&mut self, pid: usize, now: u64, waker: (usize, usize)) -> bool {
        if self.spaces[pid].barrier_waiting.is_empty() {
            return false;
        }
        let parties = self.threads.iter().filter(|t| t.pid as usize == pid && !t.daemon && t.state != ThreadState::Exited).count();
        if self.spaces[pid].barrier_waiting.len() < parties {
            return false;
        }
        let waiting = std::mem::take(&mut self.spaces[pid].barrier_waiting);
        for w in waiting {
            if self.threads[w].state == ThreadState::Blocked {
                self.schedule_wake_by(w, now, waker.0, waker.1);
            }
        }
        true
    }

    pub(super) fn exit_thread(&mut self, core: usize, thread: usize) {
        let now = self.clock(core);
        let t = &mut self.threads[thread];
        t.state = ThreadState::Exited;
        t.end_cycle = Some(now);
        if !t.daemon {
            self.sched.live_workers -= 1;
        }
        let pid = t.pid;
        self.cores[core].current = None;
        if let Some(numa) = self.numa.as_mut() {
            numa.thread_exited(thread);
        }
        self.alloc_thread_exited(thread);
        // One party fewer: the others may all be waiting now.
        self.release_barrier(pid as usize, now, (thread, core));
        let p = &mut self.spaces[pid as usize];
        p.threads_alive -= 1;
        if p.threads_alive == 0 {
            self.exit_process(core, pid);
        }
    }

    /// The policy's timer ticks due on `core` by now: its hook, then the requests deferred
    /// to this core.
    pub(super) fn take_due_ticks(&mut self, core: usize) {
        if let Some(period) = self.settings.involuntary_period() {
            let now = self.clock(core);
            if now >= self.cores[core].next_involuntary_flush {
                while self.cores[core].next_involuntary_flush <= now {
                    self.cores[core].next_involuntary_flush += period;
                }
                // ABIS §7: the MMU drops every entry on its own; re-caching sets A bits again.
                self.full_flush_all(core, crate::coherence::FullFlushCause::Involuntary);
                self.cores[core].leap = None;
            }
        }
        let Some(interval) = self.settings.tick_interval() else { return };
        let now = self.clock(core);
        if now < self.cores[core].next_tick {
            return;
        }
        while self.cores[core].next_tick <= now {
            self.cores[core].next_tick += interval;
        }
        self.cores[core].leap = None;
        self.policy.on_tick(CoreId(core as u32), now, &mut self.fx);
        self.apply_effects();
        self.apply_deferred(core);
        self.mark_dirty(core);
    }
}

/// The engine's scheduling state, apart from the cores' and threads' own: the timed events
/// (wake-ups, lock hand-overs, I/O completions) in time order, each core's scheduling key and
/// which keys are stale, the threads the run still waits for, and how the run ended. Its
/// fields are private to this file: the rest of the OS model marks a core's key stale,
/// schedules an event, and asks a running thread's core to yield.
pub(super) struct Sched {
    /// (time, sequence number, event): ties break by the order they were scheduled in.
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    event_seq: u64,
    /// Per core: when it next has something to do (its clock if it runs a thread; for an
    /// idle core or one spinning for acks, its next interrupt's arrival; else u64::MAX); kept
    /// up to date through `dirty`, the cores whose state may have changed since the last
    /// decision.
    keys: MinTree,
    dirty: Vec<usize>,
    /// Whether each core is in `dirty` already.
    is_dirty: Vec<bool>,
    steps: u64,
    /// Non-daemon threads not exited yet: the run ends when none is left.
    live_workers: usize,
    /// Cycle at which the last non-daemon thread exited.
    end_cycle: u64,
    /// The run was stopped through its control before every thread finished.
    partial: bool,
    /// A thread stopped before a system call because another core is behind it in
    /// simulated time (`Os::ahead_of_others`): its core goes back to the scheduler.
    yield_core: bool,
    /// An interrupt handler just gave a spinning initiator its last ack.
    initiator_resumed: bool,
    /// Draws for `machine.idle.exit_curve` (wakes of halted CPUs).
    pub(super) idle_rng: crate::rng::SplitMix64,
}

impl Sched {
    /// Nothing scheduled; every core's key stale.
    pub(super) fn new(ncores: usize, seed: u64) -> Sched {
        Sched {
            events: BinaryHeap::new(),
            event_seq: 0,
            keys: MinTree::new(ncores),
            dirty: (0..ncores).collect(),
            is_dirty: vec![true; ncores],
            steps: 0,
            live_workers: 0,
            end_cycle: 0,
            partial: false,
            yield_core: false,
            initiator_resumed: false,
            idle_rng: crate::rng::SplitMix64::derive(seed, 0x6964_6c65_5f65_7869),
        }
    }

    /// `core`'s scheduling key may have changed.
    #[inline]
    pub(super) fn mark_dirty(&mut self, core: usize) {
        if !self.is_dirty[core] {
            self.is_dirty[core] = true;
            self.dirty.push(core);
        }
    }

    /// A core whose key is stale, no longer marked.
    fn pop_dirty(&mut self) -> Option<usize> {
        let c = self.dirty.pop()?;
        self.is_dirty[c] = false;
        Some(c)
    }

    fn push_event(&mut self, at: u64, ev: Event) {
        self.event_seq += 1;
        self.events.push(Reverse((at, self.event_seq, ev)));
    }

    fn next_event_at(&self) -> Option<u64> {
        self.events.peek().map(|Reverse((t, _, _))| *t)
    }

    /// The earliest event (there must be one) and its time.
    fn pop_event(&mut self) -> (u64, Event) {
        let Reverse((at, _, ev)) = self.events.pop().expect("peeked");
        (at, ev)
    }

    /// A non-daemon thread was created: the run waits for it.
    pub(super) fn worker_started(&mut self) {
        self.live_workers += 1;
    }

    /// Engine steps taken.
    pub(super) fn steps(&self) -> u64 {
        self.steps
    }

    /// Cycle at which the run ended (the last worker's exit, or where it was stopped).
    pub(super) fn end_cycle(&self) -> u64 {
        self.end_cycle
    }

    /// The run was stopped before every thread finished.
    pub(super) fn partial(&self) -> bool {
        self.partial
    }

    /// The running thread's core goes back to the scheduler after this step.
    pub(super) fn request_yield(&mut self) {
        self.yield_core = true;
    }

    pub(super) fn yield_requested(&self) -> bool {
        self.yield_core
    }

    fn take_yield(&mut self) -> bool {
        std::mem::take(&mut self.yield_core)
    }

    /// An interrupt handler gave a spinning initiator its last ack: the scheduler's limit
    /// for the core being stepped changes.
    pub(super) fn note_initiator_resumed(&mut self) {
        self.initiator_resumed = true;
    }
}

/// Minimum of per-core keys (ties: the lowest core), with O(log n) updates: a tournament
/// tree, so choosing the next core costs the same with 4 cores as with 256.
struct MinTree {
    leaves: usize,
    /// Heap order: node i has children 2i and 2i+1; leaves at `leaves..2*leaves`.
    nodes: Vec<(u64, u32)>,
}

impl MinTree {
    fn new(n: usize) -> MinTree {
        let leaves = n.next_power_of_two().max(1);
        let mut nodes = vec![(u64::MAX, u32::MAX); 2 * leaves];
        for i in 0..leaves {
            nodes[leaves + i] = (u64::MAX, i as u32);
        }
        let mut t = MinTree { leaves, nodes };
        for i in (1..leaves).rev() {
            t.nodes[i] = t.nodes[2 * i].min(t.nodes[2 * i + 1]);
        }
        t
    }

    fn set(&mut self, core: usize, key: u64) {
        let mut i = self.leaves + core;
        if self.nodes[i].0 == key {
            return;
        }
        self.nodes[i] = (key, core as u32);
        while i > 1 {
            i /= 2;
            let m = self.nodes[2 * i].min(self.nodes[2 * i + 1]);
            if self.nodes[i] == m {
                // Nothing above changes either.
                break;
            }
            self.nodes[i] = m;
        }
    }

    /// (key, core) of the minimum.
    fn min(&self) -> (u64, usize) {
        let (k, c) = self.nodes[1];
        (k, c as usize)
    }

    /// The smallest key of every core but `core`.
    fn min_except(&self, core: usize) -> u64 {
        let mut i = self.leaves + core;
        let mut best = u64::MAX;
        while i > 1 {
            best = best.min(self.nodes[i ^ 1].0);
            i /= 2;
        }
        best
    }
}
