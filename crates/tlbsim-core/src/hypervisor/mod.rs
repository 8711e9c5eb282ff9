//! The hypervisor axis (docs/ARCHITECTURE.md "VMs"; the tag paper §5: Xen 3.1's credit scheduler
//! multiplexing the VCPUs of dom0 and the guests on two CPUs). A VM (domain) has VCPUs; each
//! guest kernel schedules its threads on its own VCPUs (the OS model's run queues, one per
//! VCPU), and the hypervisor's scheduler decides which VCPU each physical CPU runs. The
//! engine calls the [`Hypervisor`] trait at VCPU wake-ups, deschedules and scheduling
//! decisions, never per access, and never names a scheduler: `os.hypervisor` picks one
//! from the registry below, `[hypervisor.<name>]` holds its parameters.
//!
//! What a VCPU switch does to the TLB is the engine's (os/asid.rs): the incoming VCPU's
//! running thread's address space is loaded with a CR3 write in its VM (an inter-VM switch
//! when the VM differs from the address space loaded before on that CPU). A guest's full TLB
//! flush is a hypercall the hypervisor carries out by writing CR3 with the value it holds (a
//! forced flush, §4).

pub mod credit;

use crate::config::Config;
use crate::error::{Error, Result};

crate::registry! {
    what: "a hypervisor scheduler", select: "os.hypervisor", table: "hypervisor", bound: Scheduler;
    "credit" => credit::Credit, "Xen 3.x's credit scheduler (sched_credit.c): weights, caps, 30 ms slices, BOOST on wake-up";
}

/// A registered scheduler: its `[hypervisor.<name>]` parameters and its constructor for
/// `cpus` CPUs running these VCPUs and VMs.
pub trait Scheduler: Hypervisor + crate::registry::Plugin + Sized + 'static {
    fn build(cfg: &Config, params: Self::Params, cpus: usize, vcpus: Vec<VcpuDesc>, vms: Vec<VmDesc>) -> Result<Self>;
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

/// The scheduler `os.hypervisor` names, with its `[hypervisor.<name>]` parameters, for
/// these VCPUs and VMs on `cpus` CPUs (only workloads with VMs have one).
pub fn build(cfg: &Config, cpus: usize, vcpus: Vec<VcpuDesc>, vms: Vec<VmDesc>) -> Result<Box<dyn Hypervisor>> {
    struct Build<'a>(&'a Config, usize, Vec<VcpuDesc>, Vec<VmDesc>);
    impl Visit for Build<'_> {
        type Output = Result<Box<dyn Hypervisor>>;
        fn visit<T: Scheduler>(self, name: &'static str) -> Self::Output {
            let params = crate::registry::parse::<T::Params>("hypervisor", name, self.0.hypervisor.get(name))?;
            Ok(Box::new(T::build(self.0, params, self.1, self.2, self.3)?))
        }
    }
    visit(&cfg.os.hypervisor, Build(cfg, cpus, vcpus, vms))?
}

/// Check `os.hypervisor` and every `[hypervisor.<name>]` table (a scheduler with no VCPUs
/// is built, so its own checks run before any run starts).
pub fn check(cfg: &Config) -> Result<()> {
    check_params(&cfg.hypervisor)?;
    build(cfg, cfg.cores() as usize, Vec::new(), Vec::new()).map(|_| ())
}

/// `v` milliseconds in cycles at `frequency_ghz`; errors name `key`.
pub fn ms_to_cycles(key: &str, v: f64, frequency_ghz: f64) -> Result<u64> {
    if !(v > 0.0 && v.is_finite()) {
        return Err(Error::config(key, format!("{v}: must be a positive number of milliseconds")));
    }
    Ok(((v * 1e6 * frequency_ghz).round() as u64).max(1))
}
