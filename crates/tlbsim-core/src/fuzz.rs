//! `tlbsim fuzz`: random OS scenarios run under a coherence policy (and any other axis the
//! caller sets), with the stale-translation checker on, to prove a policy safe or find the
//! scenario that breaks it. The project's property tests use the same generator.
//!
//! A scenario is a small machine (1-2 sockets, 2-6 cores, a tagging mode, a tiny Tag
//! Manager Table for CR3 tags) and one to three processes whose threads share and unshare
//! memory: accesses to a shared anonymous region, a private region mapped and unmapped
//! again and again, and a file mapped shared or private (in a second process too);
//! mprotect, madvise(DONTNEED), msync, fork with copy-on-write, page migration, thread
//! migration, blocking, reclaim under a memory limit, THP. It is built so that each known
//! way of skipping a flush wrongly gets its chance to show:
//!
//! - a core that switched away and back with tagged entries (processes time-share cores;
//!   PCID, domain and CR3 tags keep entries across the switch; a 2-4 entry TMT evicts);
//! - a core that was lazy (threads block, their cores idle with the mm loaded, then run
//!   again);
//! - a PTE cached by a core other than the one that faulted it (threads on other cores
//!   read and write the same pages; thread migration);
//! - a virtual address reused after munmap (the private region is unmapped and mapped
//!   again, landing at the same address);
//! - a frame reused after free (per-CPU free lists hand the last freed frame out first);
//! - VCPUs of several VMs taking turns on a CPU (a third of the scenarios put the processes
//!   in VMs under the hypervisor's scheduler);
//! - page tables freed by a range flush, under the ceiling (`sparse_regions`): a walk cache
//!   left pointing to a freed table is walked through when the address is mapped again;
//! - under `linux-invlpgb` and its variants, global ASIDs handed out from two or three CPUs
//!   on and a space of one to four of them, so the transition, the broadcasts, the
//!   rollover and the reuse of an exited process's ASID all happen.
//!
//! Scenario `i` of a run with seed `S` is generated from seed `S + i` alone, so
//! `--seed S+i --scenarios 1` replays it.

use crate::coherence::Coherence;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::rng::SplitMix64;
use crate::workload::builder::{anon, file_map};
use crate::workload::program::*;
use serde::Serialize;

/// Tagging modes a scenario may use.
pub const TAGGINGS: [&str; 4] = ["none", "pcid", "domain", "cr3"];

/// What to fuzz.
#[derive(Clone, Debug)]
pub struct FuzzOptions {
    /// `os.coherence`.
    pub policy: String,
    /// One tagging mode for every scenario; `None`: each scenario draws one of [`TAGGINGS`].
    pub tagging: Option<String>,
    /// `dotted.key=value` overrides applied to every scenario's config (the last word).
    pub overrides: Vec<String>,
    pub scenarios: u64,
    pub seed: u64,
}

/// The first scenario with a violation.
#[derive(Clone, Debug, Serialize)]
pub struct FuzzFailure {
    /// Index in this run.
    pub scenario: u64,
    /// The seed that generates it alone.
    pub seed: u64,
    pub tagging: String,
    pub violations_security: u64,
    pub violations_consistency: u64,
    /// The first violation records of its stats.json.
    pub violations: serde_json::Value,
    /// The command that replays it.
    pub command: String,
}

/// The result (`--json` prints it).
#[derive(Clone, Debug, Serialize)]
pub struct FuzzReport {
    pub policy: String,
    pub scenarios: u64,
    pub scenarios_with_violations: u64,
    pub violations_security: u64,
    pub violations_consistency: u64,
    /// Flush requests that reached another core, over all scenarios (how much the
    /// scenarios exercised the protocol).
    pub shootdowns_sent: u64,
    pub first_failure: Option<FuzzFailure>,
    pub seed: u64,
}

struct Gen(SplitMix64);

impl Gen {
    fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn access(slot: usize, mode: AccessMode, count: u64, pattern: Pattern) -> Op {
    Op::Access { slot, pattern, mode, count, offset: 0, len: 0, stride: 4096 }
}

/// Slots: 0 shared anonymous region, 1 private region (mapped and unmapped), 2 file
/// region, 3 a second private region a process keeps.
const SLOTS: usize = 4;

/// A random program over the slots.
fn program(g: &mut Gen, cores: u32, nodes: u32, fork_program: Option<usize>) -> Vec<Op> {
    let mut body = Vec::new();
    let pattern = g.pick(&[Pattern::Sequential, Pattern::Random, Pattern::Zipf { theta: 0.9 }]);
    for _ in 0..1 + g.below(8) {
        let op = match g.below(15) {
            0..=2 => access(0, g.pick(&[AccessMode::Read, AccessMode::Write, AccessMode::Mixed(0.5)]), 1 + g.below(40), pattern),
            3 => Op::Mprotect { slot: g.pick(&[0, 0, 3]), writable: g.chance(50) },
            4 => Op::MadviseDontneed { slot: g.pick(&[0, 3]) },
            5 if g.chance(20) => {
                // Unmap the region the other threads share and map a new one in its place
                // (for this thread): the others still use the old address, which mmap may
                // hand out again (the race a lazy policy must not let through).
                body.push(Op::Munmap { slot: 0 });
                body.push(Op::Mmap { slot: 0, spec: anon(4096 * (1 + g.below(16)), true).with_populate(g.chance(50)) });
                access(0, AccessMode::Write, 1 + g.below(8), pattern)
            }
            5 => {
                // Map, touch, unmap: the next round maps the same address again.
                body.push(Op::Mmap { slot: 1, spec: anon(4096 * (1 + g.below(40)), true).with_populate(g.chance(30)) });
                body.push(access(1, AccessMode::Write, 1 + g.below(20), pattern));
                Op::Munmap { slot: 1 }
            }
            6 => Op::MigratePages { slot: g.pick(&[0, 2]), node: g.below(nodes as u64) as u32 },
            7 => Op::MigrateThread { core: g.below(cores as u64) as u32 },
            8 => match fork_program {
                Some(p) if g.chance(40) => Op::Fork { program: p, core: Some(g.below(cores as u64) as u32) },
                _ => Op::Compute { cycles: 1 + g.below(5000) },
            },
            // Blocked: the core idles (lazy TLB) or runs another thread.
            9 => Op::Block { cycles: 1 + g.below(20_000) },
            10 => access(2, g.pick(&[AccessMode::Read, AccessMode::Write]), 1 + g.below(20), pattern),
            11 => Op::Msync { slot: 2 },
            12 => access(3, AccessMode::Mixed(0.5), 1 + g.below(20), pattern),
            _ => Op::Compute { cycles: 1 + g.below(3000) },
        };
        body.push(op);
    }
    body.push(Op::CountOp);
    let mut v = vec![Op::Loop { count: 1 + g.below(12), body: body.len() }];
    v.extend(body);
    v
}

fn region(g: &mut Gen, pages: u64) -> MapSpec {
    anon(pages * 4096, true).with_populate(g.chance(50))
}

/// The workload of one scenario on `cores` cores and `nodes` nodes.
fn workload(g: &mut Gen, cores: u32, nodes: u32) -> Workload {
    let file_pages = 4 + g.below(40);
    let limit = if g.chance(30) { 48 + g.below(64) } else { 0 };
    let mut programs = Vec::new();
    // Forked children run a short program over the inherited regions, then exit.
    programs.push(vec![access(0, AccessMode::Mixed(0.5), 1 + g.below(30), Pattern::Random), Op::Exit]);
    let file_shared = g.chance(70);
    let nprocs = 1 + g.below(3) as usize;
    let mut processes = Vec::new();
    for pi in 0..nprocs {
        let nthreads = if pi == 0 { 2 + g.below(cores as u64 + 1) } else { 1 + g.below(2) };
        let mut threads = Vec::new();
        for t in 0..nthreads {
            let p = program(g, cores, nodes, if pi == 0 { Some(0) } else { None });
            programs.push(p);
            threads.push(ThreadSpec {
                name: format!("p{pi}t{t}"),
                class: if pi == 0 { "worker".into() } else { "other".into() },
                core: if g.chance(70) { Some(g.below(cores as u64) as u32) } else { None },
                program: programs.len() - 1,
                daemon: false,
            });
        }
        let shared_pages = 1 + g.below(24);
        let kept_pages = 1 + g.below(8);
        processes.push(ProcessSpec {
            name: format!("p{pi}"),
            group: 0,
            regions: vec![region(g, shared_pages), anon(4096, true), file_map(0, 0, file_pages * 4096, file_shared, true), region(g, kept_pages)],
            threads,
            page_tables: Default::default(),
        });
    }
    Workload {
        groups: vec![GroupSpec { name: "g".into(), limit_pages: limit }],
        files: vec![FileSpec { name: "f".into(), pages: file_pages }],
        processes,
        programs,
        slots: SLOTS,
        ..Default::default()
    }
}

/// Spread the processes over one to three VMs (domain 0 first) with 1 to `cores` VCPUs
/// each, some pinned: VCPU switches then interleave address spaces of several VMs on a
/// CPU, and a guest's shootdown must still reach what its VM's tags keep on CPUs that
/// switched to another VM. A thread's core becomes a VCPU of its VM.
fn put_in_vms(g: &mut Gen, w: &mut Workload, cores: u32) {
    let nvms = 1 + g.below(3) as usize;
    let mut vms: Vec<VmSpec> = (0..nvms)
        .map(|i| {
            let vcpus = 1 + g.below(cores as u64) as u32;
            let pin = (0..vcpus).map(|_| g.chance(40).then(|| g.below(cores as u64) as u32)).collect();
            VmSpec { name: format!("vm{i}"), vcpus, weight: g.pick(&[128, 256, 512]), cap: 0, pin, processes: Vec::new() }
        })
        .collect();
    for pi in 0..w.processes.len() {
        let vm = g.below(nvms as u64) as usize;
        vms[vm].processes.push(pi);
        let vcpus = vms[vm].vcpus;
        for t in &mut w.processes[pi].threads {
            t.core = t.core.map(|c| c % vcpus);
        }
    }
    // Split-driver I/O in half of them: dom0 gets a back-end daemon, and some of the
    // programs' sleeps become requests through it (the back-end then runs on whichever
    // CPU its VCPU gets, between the guests' address spaces).
    if g.chance(50) {
        let server = w.processes.iter().map(|p| p.threads.len()).sum::<usize>() as u32;
        let backend = w.programs.len();
        let work = access(3, AccessMode::Mixed(0.5), 1 + g.below(8), Pattern::Random);
        w.programs.push(vec![Op::Loop { count: 0, body: 2 }, Op::Serve, work]);
        for prog in &mut w.programs[..backend] {
            for op in prog.iter_mut() {
                if let Op::Block { cycles } = *op {
                    if g.chance(60) {
                        *op = Op::Io { server, cycles };
                    }
                }
            }
        }
        let regions = w.processes[0].regions.clone();
        let thread = ThreadSpec { name: "backend".into(), class: "backend".into(), core: Some(0), program: backend, daemon: true };
        vms[0].processes.push(w.processes.len());
        w.processes.push(ProcessSpec { name: "backend".into(), group: 0, regions, threads: vec![thread], page_tables: Default::default() });
    }
    w.vms = vms;
}

/// Scenario generated from `seed` alone: its config (policy `policy`, tagging `tagging` or
/// a random one, then `overrides`) and workload.
pub fn scenario(seed: u64, policy: &str, tagging: Option<&str>, overrides: &[String]) -> Result<(Config, Workload)> {
    let mut g = Gen(SplitMix64::new(seed));
    let (sockets, per) = g.pick(&[(1, 2), (1, 4), (2, 2), (2, 3)]);
    let tagging = tagging.map(str::to_owned).unwrap_or_else(|| g.pick(&TAGGINGS).to_owned());
    let tree = serde_json::json!({
        "seed": g.below(1000),
        "machine": {"sockets": sockets, "cores_per_socket": per, "memory": {"node_mib": 64},
                    "tlb": {"tagging": tagging, "tmt_entries": g.pick(&[2, 3, 4, 8])}},
        "os": {"coherence": policy, "thp": g.chance(20), "time_slice": g.pick(&[50_000, 200_000])},
    });
    let mut tree = tree;
    // VMs are drawn from a stream of their own, so that the scenarios of earlier versions
    // (and the regression seeds that name them) stay what they were.
    let mut vg = Gen(SplitMix64::new(seed ^ 0x766d_7300_0000_0000));
    let virtualized = vg.chance(35);
    if virtualized {
        // A short VCPU time slice and tick, so that VCPUs switch within a small scenario.
        tree["hypervisor"] = serde_json::json!({"credit": {"time_slice_ms": vg.pick(&[0.005, 0.02]), "tick_ms": 0.002}});
    }
    // Linux's global ASIDs (`linux-invlpgb` and its variants), from a stream of their own
    // too: a process gets one when it is seen on 4 or more CPUs at once on its sampled
    // jiffy (1 in 32, 1 ms each), and the space rolls over after 4,087 of them. A scenario
    // runs 2-6 cores for well under 32 jiffies with 1-3 processes, so at Linux's values
    // no global ASID is ever handed out (the broadcast path, the transition and the
    // rollover would go unfuzzed) and no ASID is ever reused. In most scenarios, then, the
    // threshold is 2 CPUs, every jiffy is sampled, and the space holds one to four global
    // ASIDs, so processes exit and their ASIDs come back (after the rollover's flush, or
    // before it in `linux-invlpgb-early-asid-reuse`). A user's `--set` still wins.
    let mut ag = Gen(SplitMix64::new(seed ^ 0x6173_6964_0000_0000));
    if policy.starts_with("linux-invlpgb") && ag.chance(75) {
        tree["coherence"] = serde_json::json!({policy: {"min_cpus": ag.pick(&[2, 2, 3]), "sample_period": 1,
                                                         "asid_space": ag.pick(&[8, 9, 10, 4094])}});
    }
    let cfg = Config::resolve(tree, overrides, std::path::Path::new("."))?;
    let mut w = workload(&mut g, cfg.cores(), cfg.machine.sockets);
    if virtualized {
        put_in_vms(&mut vg, &mut w, cfg.cores());
    }
    sparse_regions(&mut Gen(SplitMix64::new(seed ^ 0x7074_6162_0000_0000)), &mut w);
    Ok((cfg, w))
}

/// Make some of the private regions that are mapped, touched and unmapped again (slot 1)
/// 4 MiB and not populated: a few pages touched, so munmap's flush is a range flush (at
/// most 20 pages, under the 33-page ceiling) that also frees whole page-table pages (the
/// 2 MiB in the middle no other mapping shares). Without it every scenario's table frees
/// come with a full flush (exit, fork) or none, and an invalidation that leaves the walk
/// caches alone on a range flush (INVLPGB's FINAL_ONLY, arm64's last-level TLBI) when
/// tables are freed goes unseen. The next mapping of the slot lands at the same address,
/// so a walk cache still pointing to a freed table is walked through. From a stream of
/// its own, so the other draws of a scenario stay what they were.
fn sparse_regions(g: &mut Gen, w: &mut Workload) {
    if !g.chance(40) {
        return;
    }
    for prog in &mut w.programs {
        for op in prog.iter_mut() {
            if let Op::Mmap { slot: 1, spec } = op {
                if g.chance(50) {
                    spec.bytes = 1024 * 4096;
                    spec.populate = false;
                }
            }
        }
    }
}

/// Fuzz the registered policy `opts.policy` names.
pub fn fuzz(opts: &FuzzOptions) -> Result<FuzzReport> {
    crate::coherence::check_name(&opts.policy)?;
    run_scenarios(opts, crate::os::run)
}

/// Fuzz a policy that is not registered (a test's), built for each scenario by `make`.
pub fn fuzz_with<P: Coherence>(opts: &FuzzOptions, mut make: impl FnMut(&Config) -> P) -> Result<FuzzReport> {
    run_scenarios(opts, |cfg, w| crate::os::run_with_policy(cfg, w, make(cfg)))
}

fn run_scenarios(opts: &FuzzOptions, mut run: impl FnMut(&Config, Workload) -> Result<serde_json::Value>) -> Result<FuzzReport> {
    if let Some(t) = &opts.tagging {
        if !TAGGINGS.contains(&t.as_str()) {
            return Err(Error::config("tagging", format!("{t:?}: use one of {}", TAGGINGS.map(|t| format!("{t:?}")).join(", "))));
        }
    }
    let mut report = FuzzReport {
        policy: opts.policy.clone(),
        scenarios: 0,
        scenarios_with_violations: 0,
        violations_security: 0,
        violations_consistency: 0,
        shootdowns_sent: 0,
        first_failure: None,
        seed: opts.seed,
    };
    for i in 0..opts.scenarios {
        let seed = opts.seed.wrapping_add(i);
        let (cfg, w) = scenario(seed, &opts.policy, opts.tagging.as_deref(), &opts.overrides)?;
        let stats = run(&cfg, w).map_err(|e| Error::Sim(format!("scenario {i} (seed {seed}): {e}")))?;
        let t = &stats["totals"];
        let sec = t["violations_security"].as_u64().unwrap_or(0);
        let con = t["violations_consistency"].as_u64().unwrap_or(0);
        report.scenarios += 1;
        report.violations_security += sec;
        report.violations_consistency += con;
        report.shootdowns_sent += t["shootdowns_sent"].as_u64().unwrap_or(0);
        if sec + con > 0 {
            report.scenarios_with_violations += 1;
            if report.first_failure.is_none() {
                let tagging = serde_json::to_value(cfg.machine.tlb.tagging).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
                let mut command = format!("tlbsim fuzz --policy {} --scenarios 1 --seed {seed}", opts.policy);
                if let Some(t) = &opts.tagging {
                    command.push_str(&format!(" --tagging {t}"));
                }
                for o in &opts.overrides {
                    command.push_str(&format!(" --set {}", shell_word(o)));
                }
                report.first_failure = Some(FuzzFailure {
                    scenario: i,
                    seed,
                    tagging,
                    violations_security: sec,
                    violations_consistency: con,
                    violations: stats["violations"].clone(),
                    command,
                });
            }
        }
    }
    Ok(report)
}

/// `s` quoted for a POSIX shell when it needs it.
fn shell_word(s: &str) -> String {
    if s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.=:/,+".contains(c)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
