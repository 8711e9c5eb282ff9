//! Property tests of the OS model: random scenarios (threads sharing pages; mmap, munmap,
//! mprotect, madvise, msync, fork, page and thread migration, reclaim under a memory
//! limit) never use a stale translation under `linux` or `oracle`; under `none`, a page
//! unmapped or write-protected while another core caches and keeps using it is caught.

use serde_json::Value;
use tlbsim_core::config::Config;
use tlbsim_core::rng::SplitMix64;
use tlbsim_core::workload::program::*;

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

fn config(g: &mut Gen, policy: &str, sockets: u32, cores_per_socket: u32) -> Config {
    let tagging = g.pick(&["none", "pcid"]);
    let thp = g.chance(20);
    let tree = serde_json::json!({
        "seed": g.below(1000),
        "machine": {"sockets": sockets, "cores_per_socket": cores_per_socket, "memory": {"node_mib": 64},
                    "tlb": {"tagging": tagging}},
        "os": {"coherence": policy, "thp": thp, "time_slice": 200_000},
    });
    Config::resolve(tree, &[], std::path::Path::new(".")).unwrap()
}

/// A random program over the shared region (slot 0), a private slot (1) and a file
/// region (slot 2).
fn program(g: &mut Gen, cores: u32, nodes: u32, fork_program: Option<usize>) -> Vec<Op> {
    let mut body = Vec::new();
    let pattern = g.pick(&[Pattern::Sequential, Pattern::Random, Pattern::Zipf { theta: 0.9 }]);
    for _ in 0..1 + g.below(8) {
        let op = match g.below(13) {
            0..=2 => access(0, g.pick(&[AccessMode::Read, AccessMode::Write, AccessMode::Mixed(0.5)]), 1 + g.below(40), pattern),
            3 => Op::Mprotect { slot: 0, writable: g.chance(50) },
            4 => Op::MadviseDontneed { slot: 0 },
            5 => {
                body.push(Op::Mmap { slot: 1, spec: MapSpec { bytes: 4096 * (1 + g.below(40)), backing: Backing::Anonymous, shared: false, populate: g.chance(30), writable: true } });
                body.push(access(1, AccessMode::Write, 1 + g.below(20), pattern));
                Op::Munmap { slot: 1 }
            }
            6 => Op::MigratePages { slot: g.pick(&[0, 2]), node: g.below(nodes as u64) as u32 },
            7 => Op::MigrateThread { core: g.below(cores as u64) as u32 },
            8 => match fork_program {
                Some(p) if g.chance(40) => Op::Fork { program: p, core: Some(g.below(cores as u64) as u32) },
                _ => Op::Compute { cycles: 1 + g.below(5000) },
            },
            9 => Op::Block { cycles: 1 + g.below(20_000) },
            10 => access(2, g.pick(&[AccessMode::Read, AccessMode::Write]), 1 + g.below(20), pattern),
            11 => Op::Msync { slot: 2 },
            _ => Op::Compute { cycles: 1 + g.below(3000) },
        };
        body.push(op);
    }
    body.push(Op::CountOp);
    let mut v = vec![Op::Loop { count: 1 + g.below(12), body: body.len() }];
    v.extend(body);
    v
}

fn scenario(g: &mut Gen, cores: u32, nodes: u32) -> Workload {
    let shared_pages = 1 + g.below(24);
    let file_pages = 4 + g.below(40);
    let limit = if g.chance(30) { 48 + g.below(64) } else { 0 };
    let nthreads = 2 + g.below(cores as u64 + 1);
    let mut programs = Vec::new();
    // Forked children run a short program over the inherited regions, then exit.
    programs.push(vec![access(0, AccessMode::Mixed(0.5), 1 + g.below(30), Pattern::Random), Op::Exit]);
    let mut threads = Vec::new();
    for t in 0..nthreads {
        let p = program(g, cores, nodes, Some(0));
        programs.push(p);
        threads.push(ThreadSpec {
            name: format!("t{t}"),
            class: "worker".into(),
            core: if g.chance(70) { Some(g.below(cores as u64) as u32) } else { None },
            program: programs.len() - 1,
            daemon: false,
        });
    }
    let mut processes = vec![ProcessSpec {
        name: "p0".into(),
        group: 0,
        regions: vec![
            MapSpec { bytes: shared_pages * 4096, backing: Backing::Anonymous, shared: false, populate: g.chance(50), writable: true },
            MapSpec { bytes: 4096, backing: Backing::Anonymous, shared: false, populate: false, writable: true },
            MapSpec { bytes: file_pages * 4096, backing: Backing::File { file: 0, offset_pages: 0 }, shared: g.chance(70), populate: false, writable: true },
        ],
        threads,
    }];
    if g.chance(40) {
        // A second process mapping the same file.
        let p = program(g, cores, nodes, None);
        programs.push(p);
        let mut second = processes[0].clone();
        second.name = "p1".into();
        second.threads = vec![ThreadSpec { name: "q".into(), class: "other".into(), core: None, program: programs.len() - 1, daemon: false }];
        processes.push(second);
    }
    Workload {
        groups: vec![GroupSpec { name: "g".into(), limit_pages: limit }],
        files: vec![FileSpec { name: "f".into(), pages: file_pages }],
        processes,
        programs,
        slots: 3,
        ..Default::default()
    }
}

fn run(cfg: &Config, w: Workload) -> Value {
    tlbsim_core::os::run(cfg, w).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn random_scenarios_never_use_stale_translations_under_linux_and_oracle() {
    let mut g = Gen(SplitMix64::new(0x5eed));
    let mut shootdowns = 0;
    let mut reclaimed = 0;
    for i in 0..1000 {
        let (sockets, per) = g.pick(&[(1, 2), (1, 4), (2, 2)]);
        let policy = if i % 2 == 0 { "linux" } else { "oracle" };
        let cfg = config(&mut g, policy, sockets, per);
        let w = scenario(&mut g, sockets * per, sockets);
        // TLBSIM_SCENARIO=N replays scenario N alone (the generator still draws them all).
        if std::env::var("TLBSIM_SCENARIO").is_ok_and(|s| s != i.to_string()) {
            continue;
        }
        let v = run(&cfg, w.clone());
        let t = &v["totals"];
        assert_eq!(
            (t["violations_security"].as_u64(), t["violations_consistency"].as_u64()),
            (Some(0), Some(0)),
            "scenario {i} under {policy} (tagging {:?}, thp {}, {sockets}x{per}): {}\n{w:#?}",
            cfg.machine.tlb.tagging,
            cfg.os.thp,
            v["violations"]
        );
        assert_eq!(t["stale_pwc_uses"], 0, "scenario {i}");
        shootdowns += t["shootdowns_sent"].as_u64().unwrap();
        reclaimed += t["pages_reclaimed"].as_u64().unwrap();
    }
    // The scenarios exercise what they claim to.
    assert!(shootdowns > 1000, "{shootdowns}");
    assert!(reclaimed > 0);
}

#[test]
fn none_is_caught_when_a_cached_page_is_unmapped_or_write_protected() {
    let mut g = Gen(SplitMix64::new(0xbad));
    for i in 0..200 {
        let (sockets, per) = g.pick(&[(1, 2), (1, 4), (2, 2)]);
        let cfg = config(&mut g, "none", sockets, per);
        let pages = 1 + g.below(16);
        let change = if g.chance(50) { Op::Munmap { slot: 0 } } else { Op::Mprotect { slot: 0, writable: false } };
        let cores = sockets * per;
        // The worker touches the region, lets the victim cache it, then changes it for good.
        let worker = vec![access(0, AccessMode::Write, pages, Pattern::Sequential), Op::Compute { cycles: 50_000 + g.below(50_000) }, change, Op::Compute { cycles: 200_000 }];
        // The victim, alone on the last core, keeps reading and writing the region.
        let victim = vec![Op::Loop { count: 0, body: 2 }, access(0, AccessMode::Mixed(0.5), pages, Pattern::Sequential), Op::Compute { cycles: 500 }];
        let w = Workload {
            groups: vec![],
            files: vec![],
            processes: vec![ProcessSpec {
                name: "p".into(),
                group: 0,
                regions: vec![MapSpec { bytes: pages * 4096, backing: Backing::Anonymous, shared: false, populate: true, writable: true }],
                threads: vec![
                    ThreadSpec { name: "worker".into(), class: "w".into(), core: Some(g.below(cores as u64 - 1) as u32), program: 0, daemon: false },
                    ThreadSpec { name: "victim".into(), class: "v".into(), core: Some(cores - 1), program: 1, daemon: true },
                ],
            }],
            programs: vec![worker, victim],
            slots: 1,
            ..Default::default()
        };
        let v = run(&cfg, w);
        let victim_core = (cores - 1) as usize;
        let marked = v["per_core"][victim_core]["stale_entries_marked"].as_u64().unwrap();
        let t = &v["totals"];
        let violations = t["violations_security"].as_u64().unwrap() + t["violations_consistency"].as_u64().unwrap();
        assert!(marked > 0, "scenario {i}: the victim cached the page when it changed");
        assert!(violations > 0, "scenario {i}: stale entries marked but no violation caught");
    }
}
