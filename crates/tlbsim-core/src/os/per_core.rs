//! Per-core kernel state (`CoreOs`: the running thread, its run queue, the loaded address
//! space, PCID slots, pending interrupts) and the compute leap a core's clock may be at the
//! end of (`Leap`). Their own file so that `mod.rs` holds only the composition of the OS
//! state and its set-up.

use super::shootdown::Irq;
use super::PCID_SLOTS;
use std::collections::VecDeque;

pub(crate) struct CoreOs {
    pub current: Option<usize>,
    pub runq: VecDeque<usize>,
    pub loaded_mm: Option<u32>,
    /// Root table slot loaded in CR3 (the backend's root for this core's socket).
    pub cr3_root: u32,
    pub lazy: bool,
    /// The last stretch of kernel work run whole on this core (a system call, a page
    /// fault): `[start, end)` in cycles. With `os.kernel_interrupts = "arrival"`, the
    /// stretches of one engine step are joined, from the first one's start.
    pub kernel_span: (u64, u64),
    /// Clock at the start of the current engine step of this core.
    pub step_start: u64,
    /// The compute leap this core's last step ended with, while nothing else has happened
    /// on the core since (see `Leap`).
    pub leap: Option<Leap>,
    /// How far a compute piece of the current step may leap (0: not at all).
    pub leap_until: u64,
    /// PCID slots: (address space, tlb_gen caught up with); u32::MAX = empty.
    pub pcid: [(u32, u64); PCID_SLOTS],
    pub pcid_current: usize,
    pub pcid_next: usize,
    pub(super) pending: VecDeque<Irq>,
    /// Requests delivered `Deferred`, applied at this core's next tick or context switch.
    pub(super) deferred: Vec<(usize, usize)>,
    /// Shootdowns this core initiated and still waits for (it spins until all are acked).
    pub waiting: u32,
    /// Where the initiator's spin is counted from (`shootdown_cycles_initiator_wait`): the
    /// end of its latest send, or the end of the spin counted last. Requests sent one after
    /// another by one kernel path (reclaim's try_to_unmap_flush_dirty) are in flight
    /// together: their waits are one spin, from the path's last send, not one per request.
    pub wait_counted_from: u64,
    pub slice_end: u64,
    pub idle_since: Option<u64>,
    /// When the policy's next timer tick is due on this core (u64::MAX: no ticks).
    pub next_tick: u64,
    /// When the MMU's next involuntary full flush is due (u64::MAX: never).
    pub next_involuntary_flush: u64,
    /// `os.balance = "linux"`: when this core's next scheduler tick is due (u64::MAX under
    /// `none`); at it, a core with threads waiting kicks the balancing of idle cores.
    pub next_sched_tick: u64,
    /// This core's periodic load balancing while idle, per scheduling domain (0: its socket,
    /// the last-level cache; 1: the machine, when it has several sockets): the cycle it is
    /// next due at (`sd->last_balance` + interval) and its interval in ms
    /// (`sd->balance_interval`). os/sched.rs `idle_balance`.
    pub balance_due: [u64; 2],
    pub balance_interval_ms: [u64; 2],
    /// Domain tags: per VM, the address space whose entries its tag holds here.
    pub domain_mm: Vec<(u32, u32)>,
}

impl CoreOs {
    /// A core with nothing to run yet, idle since cycle 0, its first timer tick and
    /// involuntary flush one period in (`None`: never).
    pub(super) fn new(tick_interval: Option<u64>, involuntary_period: Option<u64>) -> CoreOs {
        CoreOs {
            current: None,
            runq: VecDeque::new(),
            loaded_mm: None,
            cr3_root: u32::MAX,
            lazy: false,
            kernel_span: (0, 0),
            step_start: 0,
            leap: None,
            leap_until: 0,
            pcid: [(u32::MAX, 0); PCID_SLOTS],
            pcid_current: 0,
            pcid_next: 0,
            pending: VecDeque::new(),
            deferred: Vec::new(),
            waiting: 0,
            wait_counted_from: 0,
            slice_end: 0,
            idle_since: Some(0),
            next_tick: tick_interval.unwrap_or(u64::MAX),
            next_involuntary_flush: involuntary_period.unwrap_or(u64::MAX),
            next_sched_tick: u64::MAX,
            balance_due: [0; 2],
            balance_interval_ms: [0; 2],
            domain_mm: Vec::new(),
        }
    }
}

/// The computation a core's clock is at the end of: the `Compute` pieces it ran since it
/// last did anything else. A thread computing in user mode touches no memory, lock or
/// kernel state, so other cores cannot tell where in it the core's clock is, except by what
/// they send it:
/// - an interrupt that arrived within it is taken as of its arrival (`handle_irq`: exact,
///   where a core past the arrival took it at once: late by up to its step's overshoot);
/// - a thread woken onto its run queue cuts its last piece back to the moment the woken
///   thread would preempt it (`cut_leap`).
/// So a computation's piece may leap past the engine's step limit (`leap_until`): a long
/// computation costs a few engine steps instead of one per quantum. A leap is bounded by
/// everything due on the core itself: its next interrupt, policy tick, involuntary flush,
/// the end of its time slice when a thread waits, and its TLB partitioning epoch. Native
/// runs only: under a hypervisor a VCPU's time is the hypervisor's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Leap {
    pub thread: usize,
    /// The thread's pc after the last piece (past the operation if it finished it).
    pub pc: usize,
    /// The core's raw clock (cycles << CLOCK_SHIFT) at the end of the last piece, moved on
    /// by the interrupts taken within the computation. It holds while the clock is there.
    pub end_raw: u64,
    /// Cycle the computation started at, then the end of the last interrupt taken within
    /// it: the earliest the next interrupt can be taken at.
    pub from: u64,
    /// Cycle the last piece started at, or `from` if later: the earliest a cut can go back to.
    pub floor: u64,
    /// The last piece finished its operation.
    pub finished: bool,
}
