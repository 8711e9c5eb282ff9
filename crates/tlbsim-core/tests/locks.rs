//! Kernel locks on hand-built scenarios (os/locks.rs): writers of one address space
//! serialize on `mmap_lock`, readers share it, a munmap or mprotect holds it through its
//! shootdown's wait, and page faults run under per-VMA locks (a fault waits only when its
//! own VMA is being changed); page faults on one page-table page serialize on its lock,
//! and per-CPU frame-list refills on their node's zone lock.

use serde_json::Value;
use tlbsim_core::config::Config;
use tlbsim_core::workload::builder::anon;
use tlbsim_core::workload::program::*;

/// `pages` private writable pages, populated at mmap.
fn populated(pages: u64) -> MapSpec {
    anon(pages * 4096, true).populated()
}

fn looped(count: u64, body: Vec<Op>) -> Vec<Op> {
    let mut v = vec![Op::Loop { count, body: body.len() }];
    v.extend(body);
    v
}

fn touch(slot: usize, pages: u64) -> Op {
    Op::Access { slot, pattern: Pattern::Sequential, mode: AccessMode::Write, count: pages, offset: 0, len: 0, stride: 4096 }
}

fn run(policy: &str, locks: bool, programs: Vec<Vec<Op>>, regions: Vec<MapSpec>, slots: usize) -> Value {
    run_on(1, policy, locks, programs, regions, slots)
}

fn run_on(sockets: u32, policy: &str, locks: bool, programs: Vec<Vec<Op>>, regions: Vec<MapSpec>, slots: usize) -> Value {
    let tree = serde_json::json!({
        "machine": {"sockets": sockets, "cores_per_socket": 4 / sockets},
        "os": {"coherence": policy, "locks": locks},
        // The lruvec lock's holds (os/lru.rs; tests/lru_lock.rs) cost nothing here, so that
        // these hand-built programs time the page-table, zone and mmap locks alone.
        "costs": {"lru_lock_acquire": 0, "lru_per_page": 0},
    });
    run_tree(tree, programs, regions, slots)
}

/// One process of `programs`, thread i pinned to core i, on the config `tree`.
fn run_tree(tree: Value, programs: Vec<Vec<Op>>, regions: Vec<MapSpec>, slots: usize) -> Value {
    let cfg = Config::resolve(tree, &[], std::path::Path::new(".")).unwrap();
    let threads =
        (0..programs.len()).map(|i| ThreadSpec { name: format!("t{i}"), class: "w".into(), core: Some(i as u32), program: i, daemon: false }).collect();
    let w = Workload {
        processes: vec![ProcessSpec { name: "p".into(), group: 0, regions, threads, page_tables: Default::default() }],
        programs,
        slots,
        ..Default::default()
    };
    tlbsim_core::os::run(&cfg, w).unwrap()
}

fn lock(v: &Value, key: &str) -> u64 {
    v["totals"]["locks"]["mmap_lock"][key].as_u64().unwrap()
}

fn spin(v: &Value, class: &str, key: &str) -> u64 {
    v["totals"]["locks"][class][key].as_u64().unwrap()
}

fn lazy(pages: u64) -> MapSpec {
    anon(pages * 4096, true)
}

fn makespan(v: &Value) -> u64 {
    v["run"]["makespan_cycles"].as_u64().unwrap()
}

#[test]
fn two_writers_serialize_and_readers_share() {
    // Two threads mprotect their own regions back and forth: writers of one mm.
    let writer = |slot| looped(300, vec![Op::Mprotect { slot, writable: false }, Op::Mprotect { slot, writable: true }, Op::CountOp]);
    let regions = vec![populated(4), populated(4)];
    let with = run("oracle", true, vec![writer(0), writer(1)], regions.clone(), 2);
    let without = run("oracle", false, vec![writer(0), writer(1)], regions.clone(), 2);
    assert_eq!(lock(&with, "acquisitions"), 1200);
    assert!(lock(&with, "contended") > 300, "{}", with["totals"]["locks"]);
    assert!(lock(&with, "cycles_waited") > 0);
    assert!(makespan(&with) > makespan(&without) * 3 / 2, "{} vs {}", makespan(&with), makespan(&without));
    assert_eq!(lock(&without, "contended"), 0);
    // The same threads with msync (mmap_lock for read) share it.
    let reader = |slot| looped(300, vec![Op::Msync { slot }, Op::CountOp]);
    let readers = run("oracle", true, vec![reader(0), reader(1)], regions, 2);
    assert_eq!(lock(&readers, "acquisitions"), 600);
    assert_eq!(lock(&readers, "contended"), 0);
}

#[test]
fn a_munmap_and_an_mprotect_hold_the_lock_through_their_shootdown() {
    // Thread 0 maps, touches and unmaps (its munmap's flush waits for thread 2's ack);
    // thread 1 mmaps and unmaps too; thread 2 touches the shared region so the mm stays
    // loaded on its core.
    let mapper = looped(200, vec![Op::Mmap { slot: 1, spec: populated(1) }, touch(1, 1), Op::Munmap { slot: 1 }, Op::CountOp]);
    let other = looped(200, vec![Op::Mmap { slot: 2, spec: populated(1) }, touch(2, 1), Op::Munmap { slot: 2 }, Op::CountOp]);
    let toucher = looped(3000, vec![touch(0, 2), Op::Compute { cycles: 500 }]);
    let regions = vec![populated(2)];
    let linux = run("linux", true, vec![mapper.clone(), other.clone(), toucher.clone()], regions.clone(), 3);
    let oracle = run("oracle", true, vec![mapper, other, toucher], regions, 3);
    // Under linux the lock is held while IPIs are acked: far more waiting than when the flush is free.
    let (l, o) = (lock(&linux, "cycles_waited"), lock(&oracle, "cycles_waited"));
    assert!(l * 10 > o * 13, "{l} vs {o}");
    assert!(linux["totals"]["shootdown_ipis_received"].as_u64().unwrap() > 100);
    let waited: u64 = linux["per_thread"].as_array().unwrap().iter().map(|t| t["lock_wait_cycles"].as_u64().unwrap()).sum();
    let spun = spin(&linux, "pt_lock", "cycles_waited") + spin(&linux, "zone_lock", "cycles_waited");
    assert_eq!(waited, lock(&linux, "cycles_waited") + spun, "per-thread waits add up");
    for v in [&linux, &oracle] {
        assert_eq!(v["totals"]["violations_security"], 0);
        assert_eq!(v["totals"]["violations_consistency"], 0);
    }
}

#[test]
fn faults_proceed_during_another_vmas_mprotect_and_wait_during_their_own() {
    // Thread 0 keeps write-protecting and unprotecting region 0 (with a sibling holding it
    // in its TLB, so each mprotect waits for an ack); thread 1 keeps faulting fresh pages.
    let protector = looped(300, vec![Op::Mprotect { slot: 0, writable: false }, Op::Mprotect { slot: 0, writable: true }, Op::CountOp]);
    let sibling = looped(
        2000,
        vec![
            Op::Access { slot: 0, pattern: Pattern::Sequential, mode: AccessMode::Read, count: 2, offset: 0, len: 0, stride: 4096 },
            Op::Compute { cycles: 300 },
        ],
    );
    let faulter = |slot| looped(300, vec![Op::MadviseDontneed { slot }, touch(slot, 8), Op::Compute { cycles: 200 }]);
    let other_vma = run("linux", true, vec![protector.clone(), sibling.clone(), faulter(1)], vec![populated(8), populated(8)], 2);
    assert_eq!(lock(&other_vma, "fault_fallbacks"), 0, "faults in another VMA never wait for the mprotect");
    let same_vma = run("linux", true, vec![protector, sibling, faulter(0)], vec![populated(8), populated(8)], 2);
    assert!(lock(&same_vma, "fault_fallbacks") > 0, "faults in the VMA being changed fall back and wait");
}

#[test]
fn zaps_and_faults_on_one_page_table_page_serialize_on_its_lock() {
    // Two threads each zap their own 256 pages (madvise(MADV_DONTNEED): mmap_lock for read,
    // shared) and fault them back. Two 1 MiB regions mapped side by side have PTEs in a
    // common page-table page: a zap holds its lock over up to 256 PTEs, and the other
    // thread's faults and zaps wait for it. The first 256 pages of two adjacent 4 MiB
    // regions lie in page-table pages of their own.
    let cycle = |slot| looped(20, vec![Op::MadviseDontneed { slot }, touch(slot, 256)]);
    let shared = run("oracle", true, vec![cycle(0), cycle(1)], vec![lazy(256), lazy(256)], 2);
    let apart = run("oracle", true, vec![cycle(0), cycle(1)], vec![lazy(1024), lazy(1024)], 2);
    for v in [&shared, &apart] {
        assert_eq!(v["totals"]["page_faults"], 2 * 20 * 256, "{}", v["totals"]);
        assert!(spin(v, "pt_lock", "acquisitions") >= 2 * 20 * 256);
        assert_eq!(lock(v, "contended"), 0, "readers share mmap_lock");
    }
    assert!(spin(&shared, "pt_lock", "contended") > 20, "{}", shared["totals"]["locks"]);
    assert!(spin(&shared, "pt_lock", "cycles_waited") > 20 * 1000);
    assert_eq!(spin(&apart, "pt_lock", "contended"), 0, "{}", apart["totals"]["locks"]);
    assert!(makespan(&shared) > makespan(&apart));
    let off = run("oracle", false, vec![cycle(0), cycle(1)], vec![lazy(256), lazy(256)], 2);
    assert_eq!(spin(&off, "pt_lock", "acquisitions"), 0, "os.locks = false models no lock");
}

#[test]
fn per_cpu_list_refills_serialize_on_their_nodes_zone_lock() {
    // Four threads fault 1,000 fresh pages each, in step, in regions of their own: every 63
    // faults each refills its per-CPU list under the zone lock of the node it allocates
    // from. One node: four refills at once; two nodes (first-touch): two per node.
    let toucher = |slot| vec![Op::Access { slot, pattern: Pattern::Sequential, mode: AccessMode::Write, count: 1000, offset: 0, len: 0, stride: 4096 }];
    let programs = || (0..4).map(toucher).collect::<Vec<_>>();
    let regions = || (0..4).map(|_| lazy(1024)).collect::<Vec<_>>();
    let one = run_on(1, "oracle", true, programs(), regions(), 4);
    let two = run_on(2, "oracle", true, programs(), regions(), 4);
    let refills = spin(&one, "zone_lock", "acquisitions");
    assert!(refills >= 4 * (1000 / 63), "{}", one["totals"]["locks"]);
    assert!(spin(&one, "zone_lock", "contended") > 0);
    assert!(
        spin(&two, "zone_lock", "cycles_waited") * 3 / 2 < spin(&one, "zone_lock", "cycles_waited"),
        "{} vs {}",
        two["totals"]["locks"],
        one["totals"]["locks"]
    );
}

/// As `run`, on one socket of 4 cores under `linux`, with `machine.idle` set.
fn run_idle(exit_ns: f64, wake_ipi_ns: f64, interrupt: u64, programs: Vec<Vec<Op>>, regions: Vec<MapSpec>, slots: usize) -> Value {
    let tree = serde_json::json!({
        "machine": {"sockets": 1, "cores_per_socket": 4, "idle": {"exit_ns": exit_ns, "poll_ns": 0.0, "wake_ipi_ns": wake_ipi_ns}},
        "os": {"coherence": "linux", "locks": true},
        "costs": {"interrupt": interrupt},
    });
    run_tree(tree, programs, regions, slots)
}

#[test]
fn a_writer_gives_up_spinning_on_long_readers_and_sleeps() {
    // bench/munmap_lock's loop with a shootdown whose handler takes 20 µs (60,000 cycles):
    // a munmap holds mmap_lock for read (after its downgrade) through its flush, longer
    // than rwsem_rspin_threshold's 10.5 µs; the other thread, a writer, spins on those
    // readers for the threshold, then marks the lock non-spinnable and sleeps.
    let worker = |slot| looped(300, vec![Op::Mmap { slot, spec: populated(1) }, touch(slot, 1), Op::Munmap { slot }, Op::CountOp]);
    let v = run_idle(0.0, 0.0, 60_000, vec![worker(0), worker(1)], vec![], 2);
    let l = &v["totals"]["locks"]["mmap_lock"];
    assert!(lock(&v, "spin_limits") > 0, "{l}");
    assert!(lock(&v, "waits_asleep") >= lock(&v, "spin_limits"), "{l}");
    // With the default handler (2,000 cycles) the flush ends well within the threshold:
    // writers spin and get the lock.
    let quick = run_idle(0.0, 0.0, 2_000, vec![worker(0), worker(1)], vec![], 2);
    assert_eq!(lock(&quick, "spin_limits"), 0, "{}", quick["totals"]["locks"]);
    assert!(lock(&quick, "waits_spinning") > 0);
}

#[test]
fn waking_a_halted_cpu_costs_its_exit_latency_and_the_wakers_ipi() {
    // Two threads of one process loop mmap -> touch -> munmap (bench/munmap_lock): the lock
    // is contended and waiters sleep on the downgraded munmap's readers.
    let worker = |slot| looped(300, vec![Op::Mmap { slot, spec: populated(1) }, touch(slot, 1), Op::Munmap { slot }, Op::CountOp]);
    let free = run_idle(0.0, 0.0, 60_000, vec![worker(0), worker(1)], vec![], 2);
    let costly = run_idle(20_000.0, 5_000.0, 60_000, vec![worker(0), worker(1)], vec![], 2);
    let exits = |v: &Value| v["totals"]["idle_exits"].as_u64().unwrap();
    assert_eq!(exits(&free), 0);
    assert!(exits(&costly) > 0, "{}", costly["totals"]["locks"]);
    // Each exit waited 20 µs at 3 GHz.
    assert_eq!(costly["totals"]["idle_exit_cycles"].as_u64().unwrap(), exits(&costly) * 60_000);
    for v in [&free, &costly] {
        assert_eq!(v["totals"]["violations_security"], 0);
        assert_eq!(v["totals"]["violations_consistency"], 0);
        assert!(lock(v, "waits_asleep") > 0, "{}", v["totals"]["locks"]);
    }
}

#[test]
fn a_starved_writer_gets_the_lock_handed_off_after_4_ms() {
    // With a slow wake-up (50 µs), the woken writer finds the lock taken again by the
    // running thread (lock stealing) and sleeps again; after RWSEM_WAIT_TIMEOUT (4 ms) the
    // lock is handed to it, so both threads finish their loops.
    let worker = |slot| looped(2000, vec![Op::Mmap { slot, spec: populated(1) }, touch(slot, 1), Op::Munmap { slot }, Op::CountOp]);
    let v = run_idle(50_000.0, 0.0, 60_000, vec![worker(0), worker(1)], vec![], 2);
    assert!(lock(&v, "handoffs") > 0, "{}", v["totals"]["locks"]);
    assert!(lock(&v, "wakeups_without_lock") > lock(&v, "handoffs"), "{}", v["totals"]["locks"]);
    for t in v["per_thread"].as_array().unwrap() {
        assert_eq!(t["ops_completed"].as_u64().unwrap(), 2000, "{t}");
    }
}

/// `run_tree` on 4 cores with `machine.idle` = `idle` (poll 0, no wake IPI) and a slow
/// shootdown handler.
fn run_idle_with(idle: Value, seed: u64, programs: Vec<Vec<Op>>, slots: usize) -> Value {
    let mut idle = idle;
    idle["poll_ns"] = serde_json::json!(0.0);
    idle["wake_ipi_ns"] = serde_json::json!(0.0);
    let tree = serde_json::json!({
        "machine": {"sockets": 1, "cores_per_socket": 4, "idle": idle},
        "os": {"coherence": "linux", "locks": true},
        "costs": {"interrupt": 60_000},
        "seed": seed,
    });
    run_tree(tree, programs, vec![], slots)
}

fn exits(v: &Value) -> (u64, u64) {
    (v["totals"]["idle_exits"].as_u64().unwrap(), v["totals"]["idle_exit_cycles"].as_u64().unwrap())
}

#[test]
fn a_one_point_exit_curve_without_spread_is_exit_ns() {
    let worker = |slot| looped(300, vec![Op::Mmap { slot, spec: populated(1) }, touch(slot, 1), Op::Munmap { slot }, Op::CountOp]);
    let flat = run_idle_with(serde_json::json!({"exit_ns": 20_000.0}), 1, vec![worker(0), worker(1)], 2);
    let curve = run_idle_with(serde_json::json!({"exit_curve": [[0.0, 20_000.0, 20_000.0, 20_000.0]]}), 1, vec![worker(0), worker(1)], 2);
    assert!(exits(&flat).0 > 0);
    assert_eq!(flat["totals"], curve["totals"]);
    assert_eq!(flat["per_thread"], curve["per_thread"]);
}

#[test]
fn a_wake_exit_grows_with_the_idle_time_along_the_curve() {
    // A thread that sleeps `cycles` at a time on an otherwise idle machine: its CPU halts
    // for that long each time. The curve: 5 µs after 1 µs idle, 50 µs after 100 µs (at
    // 3 GHz: 15,000 cycles after 3,000; 150,000 after 300,000), no spread.
    let curve = serde_json::json!({"exit_curve": [[1_000.0, 5_000.0, 5_000.0, 5_000.0], [100_000.0, 50_000.0, 50_000.0, 50_000.0]]});
    let sleeper = |cycles| looped(50, vec![Op::Block { cycles }, Op::CountOp]);
    let per_exit = |cycles: u64| {
        let v = run_idle_with(curve.clone(), 1, vec![sleeper(cycles)], 0);
        let (n, c) = exits(&v);
        assert!(n >= 50, "{n} exits");
        c as f64 / n as f64
    };
    // Below the first point and past the last: flat.
    assert!((per_exit(1_500) - 15_000.0).abs() < 1.0, "{}", per_exit(1_500));
    assert!((per_exit(900_000) - 150_000.0).abs() < 1.0, "{}", per_exit(900_000));
    // Halfway (in idle time) between the points: about halfway in latency (the idle time
    // is the sleep, give or take the context switch).
    let mid = per_exit(151_500);
    assert!((mid - 82_500.0).abs() < 2_000.0, "{mid}");
}

#[test]
fn each_wake_draws_its_exit_from_the_curves_quantiles() {
    // One point, p10 3 µs, median 6 µs, p90 30 µs: the quantile function is flat below
    // p10 and above p90 and linear between the three, so the mean exit is
    // 0.3 p10 + 0.4 median + 0.3 p90 = 12.3 µs (36,900 cycles at 3 GHz).
    let curve = serde_json::json!({"exit_curve": [[0.0, 3_000.0, 6_000.0, 30_000.0]]});
    let sleeper = looped(400, vec![Op::Block { cycles: 30_000 }, Op::CountOp]);
    let a = run_idle_with(curve.clone(), 1, vec![sleeper.clone()], 0);
    let (n, c) = exits(&a);
    let mean = c as f64 / n as f64;
    assert!((mean - 36_900.0).abs() < 0.1 * 36_900.0, "mean exit {mean} cycles over {n}");
    // The draws come from the run's seed: the same seed repeats them, another does not.
    assert_eq!(a["totals"], run_idle_with(curve.clone(), 1, vec![sleeper.clone()], 0)["totals"]);
    assert_ne!(exits(&a).1, exits(&run_idle_with(curve, 2, vec![sleeper], 0)).1);
}

/// bench/munmap_lock's two workers on 4 cores under `linux`, with `machine.idle` = `idle`
/// (poll 0, exit 20 µs) and a slow shootdown handler.
fn run_wake_ipi(idle: Value) -> Value {
    let mut idle = idle;
    idle["poll_ns"] = serde_json::json!(0.0);
    idle["exit_ns"] = serde_json::json!(20_000.0);
    let worker = |slot| looped(300, vec![Op::Mmap { slot, spec: populated(1) }, touch(slot, 1), Op::Munmap { slot }, Op::CountOp]);
    let tree = serde_json::json!({
        "machine": {"sockets": 1, "cores_per_socket": 4, "idle": idle},
        "os": {"coherence": "linux", "locks": true},
        "costs": {"interrupt": 60_000},
    });
    run_tree(tree, vec![worker(0), worker(1)], vec![], 2)
}

#[test]
fn the_wakers_ipi_follows_the_curve_by_the_woken_cpus_idle_time() {
    // A curve that is one value from 1 ns of idle on (a halted CPU has idled at least
    // that, poll_ns being 0) is that value for every wake: byte for byte `wake_ipi_ns`.
    let flat = run_wake_ipi(serde_json::json!({"wake_ipi_ns": 30_000.0}));
    let curve = run_wake_ipi(serde_json::json!({"wake_ipi_curve": [[0.0, 0.0], [1.0, 30_000.0]]}));
    assert!(flat["totals"]["idle_exits"].as_u64().unwrap() > 0);
    assert_eq!(flat["totals"], curve["totals"]);
    assert_eq!(flat["per_thread"], curve["per_thread"]);
    // A curve that reaches 30 µs only after a second of idle charges these wakes (tens of
    // µs idle) almost nothing: the run is the one without wake IPIs, give or take.
    let free = run_wake_ipi(serde_json::json!({"wake_ipi_ns": 0.0}));
    let late = run_wake_ipi(serde_json::json!({"wake_ipi_curve": [[0.0, 0.0], [1e9, 30_000.0]]}));
    let makespan = |v: &Value| v["run"]["makespan_cycles"].as_u64().unwrap() as f64;
    assert!((makespan(&late) / makespan(&free) - 1.0).abs() < 0.02, "{} vs {}", makespan(&late), makespan(&free));
    assert!(makespan(&flat) > makespan(&free) * 1.05, "{} vs {}", makespan(&flat), makespan(&free));
    // Points out of order are refused, naming the point (wake_ipi_ns beside a curve cannot
    // matter: tests/config.rs, the silent settings).
    let bad = serde_json::json!({"machine": {"idle": {"wake_ipi_curve": [[10.0, 1.0], [10.0, 2.0]]}}});
    let err = Config::resolve(bad, &[], std::path::Path::new(".")).expect_err("refused").to_string();
    assert!(err.contains("machine.idle.wake_ipi_curve[1]") && err.contains("must increase"), "{err}");
}

#[test]
fn a_bad_exit_curve_is_refused_naming_the_point() {
    for (curve, what) in [
        (serde_json::json!([[0.0, 5.0, 4.0, 6.0]]), "p10 <= median <= p90"),
        (serde_json::json!([[10.0, 1.0, 2.0, 3.0], [10.0, 1.0, 2.0, 3.0]]), "must increase"),
        (serde_json::json!([[0.0, -1.0, 2.0, 3.0]]), ">= 0"),
    ] {
        let bad = serde_json::json!({"machine": {"idle": {"exit_curve": curve}}});
        let err = Config::resolve(bad, &[], std::path::Path::new(".")).expect_err("refused").to_string();
        assert!(err.contains("machine.idle.exit_curve[") && err.contains(what), "{err}");
    }
    // (exit_ns beside a curve cannot matter: tests/config.rs, the silent settings.)
}

#[test]
fn a_fresh_private_mappings_first_write_takes_mmap_lock_for_its_anon_vma() {
    // bench/munmap_lock's loop: mmap 2 pages, write both, munmap. Only the first write of
    // each mapping needs its anon_vma (vmf_anon_prepare's mmap_read_trylock).
    let worker = |slot| looped(200, vec![Op::Mmap { slot, spec: lazy(2) }, touch(slot, 2), Op::Munmap { slot }, Op::CountOp]);
    let alone = run("linux", true, vec![worker(0)], vec![], 1);
    assert_eq!(lock(&alone, "anon_vma_trylocks"), 200);
    assert_eq!(lock(&alone, "fault_fallbacks"), 0, "alone, the trylock always succeeds");
    let two = run("linux", true, vec![worker(0), worker(1)], vec![], 2);
    assert_eq!(lock(&two, "anon_vma_trylocks"), 400);
    // The other thread's mmap or munmap holds the lock, or waits for it, at some first writes.
    assert!(lock(&two, "fault_fallbacks") > 0, "{}", two["totals"]["locks"]);
    // A fault that waited runs when the lock is granted: every page is faulted in.
    assert_eq!(two["totals"]["page_faults"], 2 * 2 * 200, "{}", two["totals"]);
    // Reads map the zero page, and shared mappings make no private page: no anon_vma.
    let reader = looped(
        200,
        vec![
            Op::Mmap { slot: 0, spec: lazy(2) },
            Op::Access { slot: 0, pattern: Pattern::Sequential, mode: AccessMode::Read, count: 2, offset: 0, len: 0, stride: 4096 },
            Op::Munmap { slot: 0 },
            Op::CountOp,
        ],
    );
    let shared =
        looped(200, vec![Op::Mmap { slot: 1, spec: MapSpec { shared: true, ..anon(2 * 4096, true) } }, touch(1, 2), Op::Munmap { slot: 1 }, Op::CountOp]);
    let none = run("linux", true, vec![reader, shared], vec![], 2);
    assert_eq!(lock(&none, "anon_vma_trylocks"), 0);
    assert_eq!(lock(&none, "fault_fallbacks"), 0);
    // Without kernel locks there is nothing to take.
    assert_eq!(lock(&run("linux", false, vec![worker(0), worker(1)], vec![], 2), "anon_vma_trylocks"), 0);
}
