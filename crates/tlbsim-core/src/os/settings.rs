//! The run's settings: what the OS model takes from the config (and from the coherence
//! policy, the recycling scheme and the storage device) at set-up and never changes after:
//! costs, switches, periods, the engine's quantum. Private fields behind getters, so that no
//! kernel path can change what the run was configured with; the getters are inlined, so a
//! read costs what a field read of `Os` did.

use crate::coherence::Coherence;
use crate::config::storage::Device;
use crate::config::{Config, CostsConfig, Placement, Tagging};
use crate::error::{Error, Result};

pub(crate) struct Settings {
    /// `[costs]`, with a storage device's page read and write in place of `costs.read_page`
    /// and `costs.write_page`.
    costs: CostsConfig,
    /// `os.flush_ceiling`: pages above which a flush is a full flush.
    ceiling: u32,
    /// `os.migrate_batch`: pages migration unmaps per TLB flush.
    migrate_batch: u64,
    /// `os.kernel_interrupts = "arrival"`: an interrupt that arrives during a kernel path is
    /// acknowledged at its arrival (plus the handler), not when the path returns.
    kernel_interrupts_at_arrival: bool,
    /// `os.balance = "linux"`: a woken thread's core is chosen as CFS chooses it (wake_affine,
    /// select_idle_sibling: sched.rs `wake_core`), and an idle core pulls a waiting thread
    /// (`pull_thread`).
    balance: bool,
    time_slice: u64,
    /// How far past the next core's clock a core may run in one engine step.
    quantum: u64,
    /// The policy's timer tick period (None: no ticks).
    tick_interval: Option<u64>,
    /// Cycles between the MMU's involuntary full flushes on each core (ABIS §7).
    involuntary_period: Option<u64>,
    /// `os.checker`: the stale-translation checker is on.
    checker: bool,
    /// `os.lru_drain_on_unmap`: madvise(DONTNEED) and munmap drain the CPU's LRU batch.
    lru_drain_on_unmap: bool,
    thp: bool,
    tagging: Tagging,
    pt_levels: u32,
    /// Where data frames come from (`os.data_placement`).
    data_placement: Placement,
    /// The run's seed (each thread's generator derives from it).
    seed: u64,
    /// The recycling scheme is not `none` (its hooks have something to do).
    recycling_on: bool,
    /// `machine.idle`, in cycles: a halted CPU's exit latency, and how long an idle CPU
    /// polls before it halts.
    idle_exit: u64,
    idle_poll: u64,
    idle_wake_ipi: u64,
    /// `machine.idle.exit_curve` in cycles: `[idle, p10, median, p90]` points.
    idle_exit_curve: Vec<[u64; 4]>,
    /// `machine.idle.wake_ipi_curve` in cycles: `[idle, waker]` points.
    idle_wake_ipi_curve: Vec<[u64; 2]>,
    /// Cycles per microsecond (`machine.frequency_ghz` × 1,000): the kernel's own time
    /// limits (rwsem's spinning and hand-off) are in nanoseconds and jiffies.
    cycles_per_us: f64,
}

impl Settings {
    /// The settings of a run of `cfg` under `policy`, with the storage device `storage` and a
    /// recycling scheme that is on or not.
    pub(super) fn new<P: Coherence>(cfg: &Config, policy: &P, storage: Option<Device>, recycling_on: bool) -> Result<Settings> {
        let mut costs = cfg.costs.clone();
        if let Some(d) = storage {
            costs.read_page = (d.read_ns * cfg.machine.frequency_ghz).round() as u64;
            let write_ns = if d.sleeps { crate::config::storage::ASYNC_WRITE_SUBMIT_NS } else { d.write_ns };
            costs.write_page = (write_ns * cfg.machine.frequency_ghz).round() as u64;
        }
        let tick_interval = policy.tick_interval().filter(|&t| t > 0);
        let rate = cfg.machine.tlb.involuntary_full_flush_per_mcycles;
        if !(rate >= 0.0 && rate.is_finite()) {
            return Err(Error::config("machine.tlb.involuntary_full_flush_per_mcycles", format!("{rate}: must be a rate >= 0")));
        }
        let involuntary_period = (rate > 0.0).then(|| ((1e6 / rate).round() as u64).max(1));
        // The engine's lookahead is the smallest latency any delivery path can have: the
        // IPI latencies, and whatever the policy's own paths need.
        let ipi = cfg.costs.ipi_delivery_same_socket.min(cfg.costs.ipi_delivery_cross_socket);
        let lookahead = policy.min_latency(&cfg.costs).map_or(ipi, |l| l.min(ipi));
        Ok(Settings {
            costs,
            ceiling: cfg.os.flush_ceiling,
            migrate_batch: cfg.os.migrate_batch as u64,
            kernel_interrupts_at_arrival: cfg.os.kernel_interrupts == "arrival",
            balance: cfg.os.balance == "linux",
            time_slice: cfg.os.time_slice,
            quantum: match cfg.sim.quantum_cycles {
                // A quarter of the engine's lookahead. At the lookahead, halving still moved
                // fpr-munmap's throughput by 1.7%, and at half of it a 4-core mprotect mix by
                // 4.6% (the order in which a core takes requests of consecutive generations
                // decides page or full flushes); from a quarter, halving moves every headline
                // result by under 1% (docs/OS_MODEL.md, tests/os_engine.rs).
                0 => (lookahead / 4).max(1),
                q => q,
            },
            tick_interval,
            involuntary_period,
            checker: cfg.os.checker,
            lru_drain_on_unmap: cfg.os.lru_drain_on_unmap,
            thp: cfg.os.thp,
            tagging: cfg.machine.tlb.tagging,
            pt_levels: cfg.os.pt_levels,
            data_placement: Placement::parse("os.data_placement", &cfg.os.data_placement, cfg.machine.sockets)?,
            seed: cfg.seed,
            recycling_on,
            idle_exit: (cfg.machine.idle.exit_ns * cfg.machine.frequency_ghz).round() as u64,
            idle_poll: (cfg.machine.idle.poll_ns * cfg.machine.frequency_ghz).round() as u64,
            idle_wake_ipi: (cfg.machine.idle.wake_ipi_ns * cfg.machine.frequency_ghz).round() as u64,
            idle_exit_curve: cfg.machine.idle.exit_curve.iter().map(|p| p.map(|ns| (ns * cfg.machine.frequency_ghz).round() as u64)).collect(),
            idle_wake_ipi_curve: cfg.machine.idle.wake_ipi_curve.iter().map(|p| p.map(|ns| (ns * cfg.machine.frequency_ghz).round() as u64)).collect(),
            cycles_per_us: cfg.machine.frequency_ghz * 1_000.0,
        })
    }

    #[inline]
    pub(crate) fn costs(&self) -> &CostsConfig {
        &self.costs
    }
    /// The exit latency of a CPU halted for `idle` cycles, `draw` a uniform random number:
    /// `exit_ns`, or with `machine.idle.exit_curve` the draw's quantile of the curve's
    /// distribution at that idle time (p10, median and p90 interpolated linearly between
    /// the points; the quantile function linear between them and flat below p10 and above
    /// p90, as nothing outside them is measured).
    pub(crate) fn idle_exit_after(&self, idle: u64, draw: u64) -> u64 {
        // [_, p10, median, p90] at this idle time.
        let Some([_, p10, median, p90]) = curve_at(&self.idle_exit_curve, idle) else { return self.idle_exit };
        let at = [p10, median, p90];
        let q = (draw >> 11) as f64 / (1u64 << 53) as f64;
        if q <= 0.1 {
            at[0]
        } else if q <= 0.5 {
            lerp(at[0], at[1], (q - 0.1) / 0.4)
        } else if q <= 0.9 {
            lerp(at[1], at[2], (q - 0.5) / 0.4)
        } else {
            at[2]
        }
    }
    /// How long an idle CPU polls before it halts (`machine.idle.poll_ns`), in cycles.
    #[inline]
    pub(crate) fn idle_poll(&self) -> u64 {
        self.idle_poll
    }
    /// The waker's reschedule IPI to a CPU halted for `idle` cycles: `wake_ipi_ns`, or with
    /// `machine.idle.wake_ipi_curve` the curve at that idle time (linear between points,
    /// flat beyond them), in cycles.
    pub(crate) fn idle_wake_ipi_after(&self, idle: u64) -> u64 {
        curve_at(&self.idle_wake_ipi_curve, idle).map_or(self.idle_wake_ipi, |p| p[1])
    }
    /// `us` microseconds in cycles.
    #[inline]
    pub(crate) fn us(&self, us: f64) -> u64 {
        (us * self.cycles_per_us).round() as u64
    }
    #[inline]
    pub(crate) fn ceiling(&self) -> u32 {
        self.ceiling
    }
    #[inline]
    pub(crate) fn migrate_batch(&self) -> u64 {
        self.migrate_batch
    }
    #[inline]
    pub(crate) fn kernel_interrupts_at_arrival(&self) -> bool {
        self.kernel_interrupts_at_arrival
    }
    #[inline]
    pub(crate) fn balance(&self) -> bool {
        self.balance
    }
    #[inline]
    pub(crate) fn time_slice(&self) -> u64 {
        self.time_slice
    }
    #[inline]
    pub(crate) fn quantum(&self) -> u64 {
        self.quantum
    }
    #[inline]
    pub(crate) fn tick_interval(&self) -> Option<u64> {
        self.tick_interval
    }
    #[inline]
    pub(crate) fn involuntary_period(&self) -> Option<u64> {
        self.involuntary_period
    }
    #[inline]
    pub(crate) fn checker(&self) -> bool {
        self.checker
    }
    #[inline]
    pub(crate) fn lru_drain_on_unmap(&self) -> bool {
        self.lru_drain_on_unmap
    }
    #[inline]
    pub(crate) fn thp(&self) -> bool {
        self.thp
    }
    #[inline]
    pub(crate) fn tagging(&self) -> Tagging {
        self.tagging
    }
    #[inline]
    pub(crate) fn pt_levels(&self) -> u32 {
        self.pt_levels
    }
    #[inline]
    pub(crate) fn data_placement(&self) -> Placement {
        self.data_placement
    }
    #[inline]
    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }
    #[inline]
    pub(crate) fn recycling_on(&self) -> bool {
        self.recycling_on
    }
}

fn lerp(x: u64, y: u64, f: f64) -> u64 {
    (x as f64 + f * (y as f64 - x as f64)).round() as u64
}

/// A `machine.idle` curve (points `[idle, values...]` in increasing idle time) at `idle`:
/// its values interpolated linearly between the points and flat beyond the first and the
/// last; None for an empty curve.
fn curve_at<const N: usize>(c: &[[u64; N]], idle: u64) -> Option<[u64; N]> {
    let last = *c.last()?;
    Some(match c.iter().position(|p| p[0] >= idle) {
        None => last,
        Some(0) => c[0],
        Some(i) => {
            let (a, b) = (c[i - 1], c[i]);
            let f = (idle - a[0]) as f64 / (b[0] - a[0]) as f64;
            std::array::from_fn(|k| lerp(a[k], b[k], f))
        }
    })
}
