//! The engine's side of the hypervisor axis (`crate::hypervisor`): VCPUs between the
//! guests' threads and the physical CPUs. Each VCPU keeps its guest kernel's run queue,
//! running thread and time slice while it is off every CPU; a CPU running a VCPU holds
//! them in its `CoreOs` (so the scheduler of sched.rs is each guest's own, unchanged), and
//! a VCPU switch swaps them and loads the incoming VCPU's address space with a CR3 write in
//! its VM (os/asid.rs counts an inter-VM switch). A guest with nothing to run blocks its
//! VCPU (Xen PV's SCHEDOP_block from the idle loop). The TLB bookkeeping (loaded address
//! space, PCID/tag slots and their generations, `mm_cpumask`) stays per physical CPU: it
//! is what the CPU's TLB holds, whichever VCPU filled it.
//!
//! Per VM, counters are accumulated at each VCPU switch from the CPU's counters (as the
//! tag paper §5 keeps per-domain statistics through a callback on domain switches).
//!
//! Natively (no VMs in the workload) none of this exists: a thread's `core` is its CPU.

use super::Os;
use crate::coherence::Coherence;
use crate::hypervisor::Hypervisor;
use std::collections::VecDeque;

pub(crate) struct Vcpu {
    pub vm: usize,
    /// The CPU it runs on now.
    pub cpu: Option<usize>,
    /// The CPU it ran on last (or will first).
    pub home: usize,
    pub blocked: bool,
    /// Its guest kernel's per-CPU state while it is off every CPU.
    pub runq: VecDeque<usize>,
    pub current: Option<usize>,
    pub slice_end: u64,
}

/// Counters of one VM, summed over the stretches its VCPUs ran.
#[derive(Clone, Debug, Default)]
pub(crate) struct VmCounters {
    pub instructions: u64,
    pub accesses: u64,
    /// Per TLB structure (`crate::tlb::hierarchy::NAMES` order).
    pub misses: [u64; 8],
    pub full_flushes_by_cause: [u64; super::CAUSES.len()],
    pub vcpu_switches_in: u64,
    /// Cycles its VCPUs were on each CPU.
    pub cycles_on: Vec<u64>,
}

impl VmCounters {
    /// Add what a CPU counted from `before` to `now`.
    fn add(&mut self, before: &Snapshot, now: &Snapshot) {
        self.instructions += now.instructions - before.instructions;
        self.accesses += now.accesses - before.accesses;
        for i in 0..8 {
            self.misses[i] += now.misses[i] - before.misses[i];
        }
        for i in 0..self.full_flushes_by_cause.len() {
            self.full_flushes_by_cause[i] += now.flushes[i] - before.flushes[i];
        }
    }
}

/// A CPU's counters when its VCPU started running.
#[derive(Clone, Debug, Default)]
pub(crate) struct Snapshot {
    clock: u64,
    instructions: u64,
    accesses: u64,
    misses: [u64; 8],
    flushes: [u64; super::CAUSES.len()],
}

pub(crate) struct Virt {
    pub hv: Box<dyn Hypervisor>,
    pub vcpus: Vec<Vcpu>,
    /// Global index of each VM's first VCPU.
    pub vm_base: Vec<usize>,
    /// Per CPU: the VCPU it runs.
    pub running: Vec<Option<usize>>,
    /// Per CPU: a woken VCPU may preempt the running one (decide at the next step).
    pub resched: Vec<bool>,
    pub snapshots: Vec<Snapshot>,
    pub per_vm: Vec<VmCounters>,
    /// Per CPU: VCPU switches (a VCPU put on the CPU).
    pub vcpu_switches: Vec<u64>,
    /// `sim.interval_instructions` (0: no time series).
    pub interval: u64,
    /// Per CPU: the interval being counted (per VM) and the instruction count that ends it.
    pub open_intervals: Vec<(Vec<VmCounters>, u64)>,
    /// Closed intervals: (CPU, cycle it ended at, instructions, per VM).
    pub intervals: Vec<(usize, u64, u64, Vec<VmCounters>)>,
}

impl Virt {
    /// The VMs of `vms` on `ncores` CPUs: one VCPU per pin entry, homed on its pinned CPU
    /// (else round-robin), blocked until it has work; the hypervisor's scheduler
    /// (`os.hypervisor.scheduler`) built over them.
    pub(crate) fn new(cfg: &crate::config::Config, vms: &[crate::workload::program::VmSpec], ncores: usize) -> crate::error::Result<Virt> {
        let mut vcpus = Vec::new();
        let mut descs = Vec::new();
        let mut vm_base = Vec::new();
        for (vi, vm) in vms.iter().enumerate() {
            vm_base.push(vcpus.len());
            for pin in &vm.pin {
                let home = pin.map_or(vcpus.len() % ncores, |p| p as usize);
                descs.push(crate::hypervisor::VcpuDesc { vm: vi, pin: pin.map(|p| p as usize) });
                vcpus.push(Vcpu { vm: vi, cpu: None, home, blocked: true, runq: VecDeque::new(), current: None, slice_end: 0 });
            }
        }
        let vm_descs: Vec<crate::hypervisor::VmDesc> = vms.iter().map(|v| crate::hypervisor::VmDesc { weight: v.weight, cap: v.cap }).collect();
        let hv = crate::hypervisor::build(cfg, ncores, descs, vm_descs)?;
        Ok(Virt {
            hv,
            vcpus,
            vm_base,
            running: vec![None; ncores],
            resched: vec![false; ncores],
            snapshots: vec![Default::default(); ncores],
            per_vm: vec![Default::default(); vms.len()],
            vcpu_switches: vec![0; ncores],
            interval: cfg.sim.interval_instructions,
            open_intervals: vec![(vec![Default::default(); vms.len()], cfg.sim.interval_instructions); ncores],
            intervals: Vec::new(),
        })
    }
}

impl<P: Coherence> Os<P> {
    /// The CPU VCPU (or, natively, core) `cpu` runs on now.
    pub(crate) fn cpu_now(&self, cpu: usize) -> Option<usize> {
        match &self.virt {
            None => Some(cpu),
            Some(v) => v.vcpus[cpu].cpu,
        }
    }

    /// A physical CPU for work done on behalf of VCPU (or core) `cpu` while it may be off
    /// every CPU: where it runs, else where it ran last.
    pub(crate) fn home_cpu(&self, cpu: usize) -> usize {
        match &self.virt {
            None => cpu,
            Some(v) => v.vcpus[cpu].cpu.unwrap_or(v.vcpus[cpu].home),
        }
    }

    /// The CPU number `n` as thread `thread`'s program names it (a core natively, a VCPU
    /// of its VM under a hypervisor), as the engine's index. Programs are not tied to a VM
    /// (`Workload::check` bounds their numbers by the machine's cores): in a VM with fewer
    /// VCPUs the number wraps around.
    pub(crate) fn cpu_index(&self, thread: usize, n: usize) -> usize {
        match &self.virt {
            None => n,
            Some(v) => {
                let vm = self.spaces[self.threads[thread].pid as usize].vm as usize;
                let vcpus = v.vm_base.get(vm + 1).copied().unwrap_or(v.vcpus.len()) - v.vm_base[vm];
                v.vm_base[vm] + n % vcpus
            }
        }
    }

    /// Whether `thread` is running on a CPU now.
    pub(crate) fn on_cpu(&self, thread: usize) -> bool {
        let t = &self.threads[thread];
        t.state == super::ThreadState::Runnable && self.cpu_now(t.core).is_some_and(|c| self.cores[c].current == Some(thread))
    }

    /// Queue `thread` on VCPU `vcpu`, which is off every CPU, at `at`: a blocked VCPU wakes
    /// and the hypervisor queues it on a CPU.
    pub(super) fn enqueue_off_cpu(&mut self, thread: usize, vcpu: usize, at: u64) {
        let virt = self.virt.as_mut().expect("VMs");
        virt.vcpus[vcpu].runq.push_back(thread);
        if !virt.vcpus[vcpu].blocked {
            return;
        }
        virt.vcpus[vcpu].blocked = false;
        let kick = virt.hv.wake(vcpu, at, &virt.running);
        if let Some(cpu) = kick {
            if self.virt.as_ref().expect("VMs").running[cpu].is_none() && self.cores[cpu].waiting == 0 {
                // An idle CPU wakes up at `at` (as sched.rs `enqueue` wakes an idle core).
                let since = self.cores[cpu].idle_since.take();
                let clock = self.clock(cpu);
                let idle_from = since.map_or(clock, |s| s.max(clock));
                let now = clock.max(at);
                self.stats[cpu].idle_cycles += now.saturating_sub(idle_from);
                self.set_clock(cpu, now);
            } else {
                self.virt.as_mut().expect("VMs").resched[cpu] = true;
            }
        }
        for c in 0..self.cores.len() {
            self.mark_dirty(c);
        }
    }

    /// The hypervisor's decision point on `cpu` (called from the run loop when the CPU has
    /// no interrupt or ack to wait for): block a VCPU whose guest has nothing to run,
    /// preempt one whose slice is over, and put the next one on. Returns whether the CPU
    /// runs a VCPU now.
    pub(super) fn hypervisor_step(&mut self, cpu: usize) -> bool {
        let now = self.clock(cpu);
        let virt = self.virt.as_mut().expect("VMs");
        if let Some(v) = virt.running[cpu] {
            let guest_idle = self.cores[cpu].current.is_none() && self.cores[cpu].runq.is_empty();
            if guest_idle {
                self.vcpu_out(cpu, false);
            } else {
                let due = std::mem::take(&mut virt.resched[cpu]) || now >= virt.hv.next_decision(cpu, v);
                if due && virt.hv.should_preempt(cpu, v, now) {
                    // The guest's running thread stays its current one, off the CPU with it.
                    self.vcpu_out(cpu, true);
                }
            }
        }
        let virt = self.virt.as_mut().expect("VMs");
        if virt.running[cpu].is_some() {
            return true;
        }
        match virt.hv.pick(cpu, now) {
            Some(v) => {
                self.vcpu_in(cpu, v);
                true
            }
            None => false,
        }
    }

    /// When `cpu`'s running VCPU next needs the hypervisor (u64::MAX: natively, or idle).
    pub(super) fn hypervisor_deadline(&self, cpu: usize) -> u64 {
        match &self.virt {
            Some(v) => match v.running[cpu] {
                Some(vc) if v.resched[cpu] => self.clock(cpu).min(v.hv.next_decision(cpu, vc)),
                Some(vc) => v.hv.next_decision(cpu, vc),
                None => u64::MAX,
            },
            None => u64::MAX,
        }
    }

    fn snapshot(&self, cpu: usize) -> Snapshot {
        let st = &self.m.cores[cpu].stats;
        let mut misses = [0u64; 8];
        let names = crate::tlb::hierarchy::NAMES;
        for (name, c) in self.m.cores[cpu].tlbs.named_counters() {
            if let Some(i) = names.iter().position(|&n| n == name) {
                misses[i] = c.misses;
            }
        }
        Snapshot { clock: self.clock(cpu), instructions: st.instructions, accesses: st.accesses, misses, flushes: self.stats[cpu].full_flushes_by_cause }
    }

    /// Add what `cpu` counted since its VCPU went on to that VCPU's VM, and start again.
    fn settle_vm(&mut self, cpu: usize) {
        let now = self.snapshot(cpu);
        let virt = self.virt.as_mut().expect("VMs");
        let Some(v) = virt.running[cpu] else { return };
        let before = std::mem::replace(&mut virt.snapshots[cpu], now.clone());
        let vm = virt.vcpus[v].vm;
        if virt.interval > 0 {
            virt.open_intervals[cpu].0[vm].add(&before, &now);
        }
        let acc = &mut virt.per_vm[vm];
        acc.add(&before, &now);
        if acc.cycles_on.len() <= cpu {
            acc.cycles_on.resize(cpu + 1, 0);
        }
        acc.cycles_on[cpu] += now.clock.saturating_sub(before.clock);
    }

    /// Close `cpu`'s interval if it has retired the instructions that end it (called
    /// between steps: an interval ends at the first step boundary past its length).
    pub(super) fn interval_check(&mut self, cpu: usize) {
        let Some(virt) = self.virt.as_ref() else { return };
        if virt.interval == 0 || self.m.cores[cpu].stats.instructions < virt.open_intervals[cpu].1 {
            return;
        }
        self.settle_vm(cpu);
        self.close_interval(cpu);
    }

    fn close_interval(&mut self, cpu: usize) {
        let instructions = self.m.cores[cpu].stats.instructions;
        let clock = self.clock(cpu);
        let virt = self.virt.as_mut().expect("VMs");
        let vms = virt.per_vm.len();
        let interval = virt.interval;
        let (counts, _) = std::mem::replace(&mut virt.open_intervals[cpu], (vec![VmCounters::default(); vms], instructions + interval));
        if counts.iter().any(|c| c.instructions > 0) {
            let total = counts.iter().map(|c| c.instructions).sum();
            virt.intervals.push((cpu, clock, total, counts));
        }
    }

    /// Every VM's counters up to date (at the end of the run).
    pub(super) fn settle_all_vms(&mut self) {
        if self.virt.is_some() {
            for c in 0..self.cores.len() {
                self.settle_vm(c);
                if self.virt.as_ref().is_some_and(|v| v.interval > 0) {
                    self.close_interval(c);
                }
            }
        }
    }

    /// Take `cpu`'s VCPU off it: its guest state goes with it.
    fn vcpu_out(&mut self, cpu: usize, runnable: bool) {
        self.settle_vm(cpu);
        let now = self.clock(cpu);
        let co = &mut self.cores[cpu];
        let runq = std::mem::take(&mut co.runq);
        let current = co.current.take();
        let slice_end = co.slice_end;
        let virt = self.virt.as_mut().expect("VMs");
        let v = virt.running[cpu].take().expect("a VCPU runs");
        let vc = &mut virt.vcpus[v];
        vc.runq = runq;
        vc.current = current;
        vc.slice_end = slice_end;
        vc.cpu = None;
        vc.home = cpu;
        vc.blocked = !runnable;
        virt.hv.deschedule(cpu, v, now, runnable);
        self.mark_dirty(cpu);
    }

    /// Put VCPU `v` on `cpu`: its guest state comes with it, and its running thread's
    /// address space is loaded (the CR3 write of the switch).
    fn vcpu_in(&mut self, cpu: usize, v: usize) {
        if let Some(since) = self.cores[cpu].idle_since.take() {
            let now = self.clock(cpu);
            self.stats[cpu].idle_cycles += now.saturating_sub(since);
        }
        let now = self.clock(cpu);
        let virt = self.virt.as_mut().expect("VMs");
        virt.hv.started(cpu, v, now);
        virt.running[cpu] = Some(v);
        virt.vcpu_switches[cpu] += 1;
        let vm = virt.vcpus[v].vm;
        virt.per_vm[vm].vcpu_switches_in += 1;
        let vc = &mut virt.vcpus[v];
        vc.cpu = Some(cpu);
        vc.home = cpu;
        vc.blocked = false;
        let runq = std::mem::take(&mut vc.runq);
        let current = vc.current.take();
        let slice_end = vc.slice_end;
        let co = &mut self.cores[cpu];
        co.runq = runq;
        co.current = current;
        co.slice_end = slice_end;
        let snap = self.snapshot(cpu);
        self.virt.as_mut().expect("VMs").snapshots[cpu] = snap;
        self.charge(cpu, self.settings.costs().vcpu_switch);
        if let Some(t) = current {
            let pid = self.threads[t].pid;
            self.load_mm(cpu, pid);
        }
        self.mark_dirty(cpu);
    }
}
