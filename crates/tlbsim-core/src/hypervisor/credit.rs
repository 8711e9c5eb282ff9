//! A credit scheduler of VCPUs, after Xen 3.x's `sched_credit.c` (the tag paper §5 runs Xen
//! 3.1.0 with equal weights for dom1 and dom2, and pins VCPUs in its `0012` configurations).
//!
//! Modelled: credits held in cycles of CPU time (Xen's 100 credits per 10 ms tick), debited
//! from the running VCPU for the time it runs; every time slice (30 ms) the credits of all
//! CPUs' time are shared among the VMs with a VCPU not blocked, in proportion to their
//! weights, limited by each VM's cap and by what its active VCPUs can use, and split
//! evenly among those VCPUs (csched_acct); a VCPU with credit left is UNDER, one that
//! overdrew is OVER, and one that wakes from blocking while UNDER is BOOSTed until it has
//! run one tick; run queues per CPU, ordered BOOST, UNDER, OVER and first come first served
//! within a priority; a CPU with nothing better to run steals the best waiting VCPU
//! another CPU's queue holds that it may run (csched_load_balance), and pinned VCPUs run
//! only on their CPU; a VCPU runs until its slice ends with one of no lower priority
//! waiting, or until a VCPU of higher priority waits.
//!
//! Simplified: a credit balance above one slice is clipped to it (Xen parks the VCPU and
//! resets its credit); a cap limits the credits a VM receives, but an OVER VCPU still runs
//! when nothing else waits (Xen parks a capped VCPU that overdrew: a hard cap); accounting
//! happens at the first decision after each slice boundary of whichever CPU gets there
//! (Xen's master CPU runs it from a timer).

use super::{Hypervisor, VcpuDesc, VmDesc};
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Pri {
    Over,
    Under,
    Boost,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Blocked,
    Queued(usize),
    Running(usize),
}

#[derive(Clone, Debug)]
struct Vcpu {
    vm: usize,
    pin: Option<usize>,
    /// Cycles of CPU time it may still use before it is OVER.
    credit: i64,
    pri: Pri,
    state: State,
    last_cpu: usize,
    run_start: u64,
    last_debit: u64,
}

crate::params! {
    /// `[hypervisor.credit]`.
    pub struct CreditParams {
        /// Time slice of a VCPU, in milliseconds (Xen 3.x credit scheduler: CSCHED_MSECS_PER_TSLICE
        /// = 30).
        pub time_slice_ms: f64 = 30.0,
        /// Accounting tick, in milliseconds: a running VCPU pays CREDITS_PER_TICK = 100 credits
        /// per tick (CSCHED_MSECS_PER_TICK = 10), and credits are handed out every time slice.
        pub tick_ms: f64 = 10.0,
        /// A VCPU that wakes with credit left runs before the others (Xen's BOOST priority,
        /// sched_credit.c, in Xen 3.1's credit scheduler [as we read it]).
        pub boost: bool = true,
    }
}

impl crate::registry::Plugin for Credit {
    type Params = CreditParams;
}

impl super::Scheduler for Credit {
    fn build(cfg: &crate::config::Config, p: CreditParams, cpus: usize, vcpus: Vec<VcpuDesc>, vms: Vec<VmDesc>) -> crate::error::Result<Credit> {
        let slice = super::ms_to_cycles("hypervisor.credit.time_slice_ms", p.time_slice_ms, cfg.machine.frequency_ghz)?;
        let tick = super::ms_to_cycles("hypervisor.credit.tick_ms", p.tick_ms, cfg.machine.frequency_ghz)?;
        Ok(Credit::new(cpus, vcpus, vms, slice, tick, p.boost))
    }
}

pub struct Credit {
    vcpus: Vec<Vcpu>,
    vms: Vec<VmDesc>,
    queues: Vec<VecDeque<usize>>,
    slice: u64,
    tick: u64,
    boost: bool,
    next_acct: u64,
}

impl Credit {
    pub fn new(cpus: usize, vcpus: Vec<VcpuDesc>, vms: Vec<VmDesc>, slice: u64, tick: u64, boost: bool) -> Credit {
        let vcpus = vcpus
            .into_iter()
            .enumerate()
            .map(|(i, d)| Vcpu {
                vm: d.vm,
                pin: d.pin,
                credit: 0,
                pri: Pri::Under,
                state: State::Blocked,
                last_cpu: d.pin.unwrap_or(i % cpus.max(1)),
                run_start: 0,
                last_debit: 0,
            })
            .collect();
        Credit { vcpus, vms, queues: vec![VecDeque::new(); cpus], slice, tick, boost, next_acct: slice }
    }

    fn allowed(&self, vcpu: usize, cpu: usize) -> bool {
        self.vcpus[vcpu].pin.is_none_or(|p| p == cpu)
    }

    /// Charge `vcpu` the time it ran since its last debit.
    fn debit(&mut self, vcpu: usize, now: u64) {
        let v = &mut self.vcpus[vcpu];
        v.credit -= now.saturating_sub(v.last_debit) as i64;
        v.last_debit = v.last_debit.max(now);
        if v.credit < 0 && v.pri == Pri::Under {
            v.pri = Pri::Over;
        }
        if v.pri == Pri::Boost && now.saturating_sub(v.run_start) >= self.tick {
            v.pri = if v.credit < 0 { Pri::Over } else { Pri::Under };
        }
    }

    /// csched_acct, for every slice boundary `now` has passed.
    fn account(&mut self, now: u64) {
        while now >= self.next_acct {
            self.next_acct += self.slice;
            let cpus = self.queues.len() as i64;
            let total = cpus * self.slice as i64;
            let mut active = vec![0i64; self.vms.len()];
            for v in &self.vcpus {
                if v.state != State::Blocked {
                    active[v.vm] += 1;
                }
            }
            let weight_total: i64 = self.vms.iter().zip(&active).filter(|(_, &a)| a > 0).map(|(d, _)| d.weight as i64).sum();
            if weight_total == 0 {
                continue;
            }
            let mut share = vec![0i64; self.vms.len()];
            for (i, d) in self.vms.iter().enumerate() {
                if active[i] == 0 {
                    continue;
                }
                let mut fair = (total * d.weight as i64 + weight_total - 1) / weight_total;
                let mut peak = active[i] * self.slice as i64;
                if d.cap > 0 {
                    peak = peak.min(d.cap as i64 * self.slice as i64 / 100);
                }
                fair = fair.min(peak);
                share[i] = (fair + active[i] - 1) / active[i];
            }
            for v in &mut self.vcpus {
                if v.state == State::Blocked {
                    continue;
                }
                v.credit = (v.credit + share[v.vm]).min(self.slice as i64);
                if v.pri != Pri::Boost {
                    v.pri = if v.credit < 0 { Pri::Over } else { Pri::Under };
                }
            }
            // Priorities changed: re-sort every queue (stable: arrival order within one).
            for q in &mut self.queues {
                let mut items: Vec<usize> = q.drain(..).collect();
                items.sort_by_key(|&x| std::cmp::Reverse(self.vcpus[x].pri));
                q.extend(items);
            }
        }
    }

    /// Queue `vcpu` on `cpu` behind every VCPU of its priority or higher.
    fn enqueue(&mut self, cpu: usize, vcpu: usize) {
        let pri = self.vcpus[vcpu].pri;
        let q = &mut self.queues[cpu];
        let at = q.iter().position(|&x| self.vcpus[x].pri < pri).unwrap_or(q.len());
        q.insert(at, vcpu);
        self.vcpus[vcpu].state = State::Queued(cpu);
    }

    /// The best VCPU waiting that `cpu` may run: (queue, index in it).
    fn best_for(&self, cpu: usize) -> Option<(usize, usize)> {
        let own = self.queues[cpu].front().map(|&v| (self.vcpus[v].pri, cpu, 0));
        let mut best = own;
        let n = self.queues.len();
        for k in 1..n {
            let c = (cpu + k) % n;
            if let Some(i) = self.queues[c].iter().position(|&v| self.allowed(v, cpu)) {
                let pri = self.vcpus[self.queues[c][i]].pri;
                if best.is_none_or(|(p, _, _)| pri > p) {
                    best = Some((pri, c, i));
                }
            }
        }
        best.map(|(_, c, i)| (c, i))
    }
}

impl Hypervisor for Credit {
    fn name(&self) -> &'static str {
        "credit"
    }

    fn wake(&mut self, vcpu: usize, now: u64, running: &[Option<usize>]) -> Option<usize> {
        self.account(now);
        let v = &mut self.vcpus[vcpu];
        if v.state != State::Blocked {
            return None;
        }
        if self.boost && v.pri == Pri::Under {
            v.pri = Pri::Boost;
        }
        let (pin, last, pri) = (v.pin, v.last_cpu, v.pri);
        let cpu = match pin {
            Some(p) => p,
            None if running[last].is_none() => last,
            None => (0..running.len()).find(|&c| running[c].is_none()).unwrap_or(last),
        };
        self.enqueue(cpu, vcpu);
        match running[cpu] {
            None => Some(cpu),
            Some(r) if self.vcpus[r].pri < pri => Some(cpu),
            Some(_) => None,
        }
    }

    fn deschedule(&mut self, cpu: usize, vcpu: usize, now: u64, runnable: bool) {
        self.debit(vcpu, now);
        if runnable {
            self.enqueue(cpu, vcpu);
        } else {
            self.vcpus[vcpu].state = State::Blocked;
        }
    }

    fn started(&mut self, cpu: usize, vcpu: usize, now: u64) {
        let v = &mut self.vcpus[vcpu];
        v.state = State::Running(cpu);
        v.last_cpu = cpu;
        v.run_start = now;
        v.last_debit = now;
    }

    fn pick(&mut self, cpu: usize, now: u64) -> Option<usize> {
        self.account(now);
        let (c, i) = self.best_for(cpu)?;
        self.queues[c].remove(i)
    }

    fn should_preempt(&mut self, cpu: usize, vcpu: usize, now: u64) -> bool {
        self.debit(vcpu, now);
        self.account(now);
        let Some((c, i)) = self.best_for(cpu) else {
            if now.saturating_sub(self.vcpus[vcpu].run_start) >= self.slice {
                // Nothing waits: a new slice of the same VCPU.
                self.vcpus[vcpu].run_start = now;
            }
            return false;
        };
        let waiting = self.vcpus[self.queues[c][i]].pri;
        let mine = self.vcpus[vcpu].pri;
        if waiting > mine {
            return true;
        }
        if now.saturating_sub(self.vcpus[vcpu].run_start) >= self.slice {
            if waiting >= mine {
                return true;
            }
            self.vcpus[vcpu].run_start = now;
        }
        false
    }

    fn next_decision(&self, _cpu: usize, vcpu: usize) -> u64 {
        let v = &self.vcpus[vcpu];
        let end = v.run_start + self.slice;
        let end = if v.pri == Pri::Boost { end.min(v.run_start + self.tick) } else { end };
        end.min(self.next_acct)
    }

    fn has_waiting(&self, cpu: usize) -> bool {
        // Its own queue only: a CPU steals when it decides anyway (its VCPU blocked or was
        // preempted); an idle one is woken by `wake` queuing a VCPU on it.
        !self.queues[cpu].is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_vms(weights: [u32; 2], pins: [Option<usize>; 2]) -> Credit {
        let vcpus = vec![VcpuDesc { vm: 0, pin: pins[0] }, VcpuDesc { vm: 1, pin: pins[1] }];
        let vms = weights.iter().map(|&w| VmDesc { weight: w, cap: 0 }).collect();
        Credit::new(1, vcpus, vms, 3000, 1000, true)
    }

    /// Drive one CPU with two always-runnable VCPUs for `cycles`, deciding every `step`
    /// cycles: returns the cycles each ran.
    fn share(c: &mut Credit, cycles: u64, step: u64) -> [u64; 2] {
        let running = [None];
        c.wake(0, 0, &running);
        c.wake(1, 0, &running);
        let mut cur = c.pick(0, 0).unwrap();
        c.started(0, cur, 0);
        let mut ran = [0u64; 2];
        let mut now = 0;
        while now < cycles {
            now += step;
            ran[cur] += step;
            if c.should_preempt(0, cur, now) {
                c.deschedule(0, cur, now, true);
                cur = c.pick(0, now).unwrap();
                c.started(0, cur, now);
            }
        }
        ran
    }

    #[test]
    fn equal_weights_share_a_cpu_evenly() {
        let mut c = two_vms([256, 256], [None, None]);
        let ran = share(&mut c, 3_000_000, 100);
        let f = ran[0] as f64 / (ran[0] + ran[1]) as f64;
        assert!((f - 0.5).abs() < 0.02, "{ran:?}");
    }

    #[test]
    fn shares_follow_weights() {
        let mut c = two_vms([512, 256], [None, None]);
        let ran = share(&mut c, 3_000_000, 100);
        let f = ran[0] as f64 / (ran[0] + ran[1]) as f64;
        assert!((f - 2.0 / 3.0).abs() < 0.03, "{ran:?} {f}");
    }

    #[test]
    fn a_pinned_vcpu_is_never_picked_by_another_cpu() {
        let vcpus = vec![VcpuDesc { vm: 0, pin: Some(1) }, VcpuDesc { vm: 1, pin: None }];
        let vms = vec![VmDesc { weight: 256, cap: 0 }, VmDesc { weight: 256, cap: 0 }];
        let mut c = Credit::new(2, vcpus, vms, 3000, 1000, true);
        let running = [None, Some(1)];
        assert_eq!(c.wake(0, 0, &running), Some(1), "queued on its CPU, which must reschedule (boosted)");
        assert_eq!(c.pick(0, 0), None, "CPU 0 may not steal a VCPU pinned to CPU 1");
        assert_eq!(c.pick(1, 0), Some(0));
    }

    #[test]
    fn a_waking_vcpu_is_boosted_past_a_running_one() {
        let mut c = two_vms([256, 256], [None, None]);
        c.wake(0, 0, &[None]);
        let v = c.pick(0, 0).unwrap();
        c.started(0, v, 0);
        // VCPU 0 has run a tick: its boost is over.
        assert!(!c.should_preempt(0, 0, 1500));
        // VCPU 1 wakes while 0 runs: boosted, it asks CPU 0 to reschedule at once.
        assert_eq!(c.wake(1, 1500, &[Some(0)]), Some(0));
        assert!(c.should_preempt(0, 0, 1500));
    }
}
