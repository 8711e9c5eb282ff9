//! The hypervisor axis (DESIGN.md "VMs"; the tag paper §5: Xen 3.1's credit scheduler
//! multiplexing the VCPUs of dom0 and the guests on two CPUs). A VM (domain) has VCPUs; each
//! guest kernel schedules its threads on its own VCPUs (the OS model's run queues, one per
//! VCPU), and the hypervisor's scheduler decides which VCPU each physical CPU runs. The
//! engine calls the [`Hypervisor`] trait at VCPU wake-ups, deschedules and scheduling
//! decisions, never per access, and never names a scheduler: `os.hypervisor.scheduler`
//! picks one from [`NAMES`].
//!
//! What a VCPU switch does to the TLB is the engine's (os/asid.rs): the incoming VCPU's
//! running thread's address space is loaded with a CR3 write in its VM (an inter-VM switch
//! when the VM differs from the address space loaded before on that CPU). A guest's full TLB
//! flush is a hypercall the hypervisor carries out by writing CR3 with the value it holds (a
//! forced flush, §4).

pub mod credit;

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// Registered hypervisor schedulers (`os.hypervisor.scheduler`).
pub const NAMES: &[&str] = &["credit"];

/// `[os.hypervisor]`: used only when the workload has VMs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HypervisorParams {
    /// The VCPU scheduler (`NAMES`).
    pub scheduler: String,
    /// Time slice of a VCPU, in milliseconds (Xen 3.x credit scheduler: CSCHED_MSECS_PER_TSLICE
    /// = 30).
    pub time_slice_ms: f64,
    /// Accounting tick, in milliseconds: a running VCPU pays CREDITS_PER_TICK = 100 credits
    /// per tick (CSCHED_MSECS_PER_TICK = 10), and credits are handed out every time slice.
    pub tick_ms: f64,
    /// A VCPU that wakes with credit left runs before the others (Xen's BOOST priority,
    /// sched_credit.c, in Xen 3.1's credit scheduler [as we read it]).
    pub boost: bool,
}

impl Default for HypervisorParams {
    fn default() -> Self {
        HypervisorParams { scheduler: "credit".into(), time_slice_ms: 30.0, tick_ms: 10.0, boost: true }
    }
}

/// One VCPU as the scheduler sees it.
#[derive(Clone, Debug)]
pub struct VcpuDesc {
    /// Its VM (domain id).
    pub vm: usize,
    /// The physical CPU it may only run on.
    pub pin: Option<usize>,
}

/// One VM as the scheduler sees it.
#[derive(Clone, Debug)]
pub struct VmDesc {
    pub weight: u32,
    /// Percent of one CPU (0: none).
    pub cap: u32,
}

/// A VCPU scheduler. Times are cycles of the CPU the call is about (each CPU's clock is
/// within the engine's quantum of the others).
pub trait Hypervisor {
    fn name(&self) -> &'static str;
    /// `vcpu` has become runnable at `now` (a guest thread was queued on it while it was off
    /// every CPU). `running[c]` is the VCPU CPU c runs (None: idle). Returns the CPU that
    /// must reschedule: an idle CPU it was queued on, or one whose running VCPU it should
    /// preempt.
    fn wake(&mut self, vcpu: usize, now: u64, running: &[Option<usize>]) -> Option<usize>;
    /// `vcpu` stops running on `cpu` at `now`: preempted (`runnable`, it is queued again)
    /// or blocked (its guest has nothing to run).
    fn deschedule(&mut self, cpu: usize, vcpu: usize, now: u64, runnable: bool);
    /// `vcpu` starts running on `cpu` at `now` (after `pick` returned it).
    fn started(&mut self, cpu: usize, vcpu: usize, now: u64);
    /// The VCPU `cpu` runs next (taken off a queue), if any waits for it.
    fn pick(&mut self, cpu: usize, now: u64) -> Option<usize>;
    /// Whether `cpu` should stop running `vcpu` at `now` for a VCPU that waits.
    fn should_preempt(&mut self, cpu: usize, vcpu: usize, now: u64) -> bool;
    /// When `cpu`, running `vcpu`, next needs a decision (u64::MAX: when something changes).
    fn next_decision(&self, cpu: usize, vcpu: usize) -> u64;
    /// Whether a VCPU waits in `cpu`'s own queue.
    fn has_waiting(&self, cpu: usize) -> bool;
}

/// Build the scheduler `params.scheduler` for these VCPUs and VMs on `cpus` CPUs.
pub fn build(params: &HypervisorParams, frequency_ghz: f64, cpus: usize, vcpus: Vec<VcpuDesc>, vms: Vec<VmDesc>) -> Result<Box<dyn Hypervisor>> {
    let ms = |key: &str, v: f64| -> Result<u64> {
        if !(v > 0.0 && v.is_finite()) {
            return Err(Error::config(key, format!("{v}: must be a positive number of milliseconds")));
        }
        Ok(((v * 1e6 * frequency_ghz).round() as u64).max(1))
    };
    let slice = ms("os.hypervisor.time_slice_ms", params.time_slice_ms)?;
    let tick = ms("os.hypervisor.tick_ms", params.tick_ms)?;
    match params.scheduler.as_str() {
        "credit" => Ok(Box::new(credit::Credit::new(cpus, vcpus, vms, slice, tick, params.boost))),
        other => Err(Error::config("os.hypervisor.scheduler", format!("{other:?} is not a hypervisor scheduler: use one of {NAMES:?}"))),
    }
}
