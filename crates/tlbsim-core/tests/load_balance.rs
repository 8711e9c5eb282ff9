//! Linux's periodic load balancing under `os.balance = "linux"` (issue 46 item 5): at the
//! scheduler tick of a core with threads waiting, idle cores whose balancing is due take a
//! waiting thread — from a core of their own socket first, and from another socket only
//! when that socket runs more threads than it has cores (os/sched.rs `sched_tick`,
//! `idle_balance`, `balance_pull`). Under `none` nothing moves.
//!
//! Every run: compute-only threads, each starting pinned to a chosen core and at once
//! widening its CPU set to every core (`SetAffinity`: it stays where it is, unpinned), so
//! that several wait in one core's run queue while other cores are idle. A core that goes
//! idle at the start finds nothing to pull then (every thread is still pinned), so only
//! periodic balancing can move them.

use serde_json::{json, Value};
use tlbsim_core::config::Config;
use tlbsim_core::workload::program::*;

/// Each thread's work: 60 M cycles (20 ms at the default 3 GHz), five scheduler ticks.
const WORK: u64 = 60_000_000;

/// `starts[i]`: the core thread i starts on.
fn run(balance: &str, sockets: u32, cores_per_socket: u32, starts: &[u32]) -> Value {
    let cfg = Config::resolve(
        json!({"machine": {"sockets": sockets, "cores_per_socket": cores_per_socket}, "os": {"balance": balance}}),
        &[],
        std::path::Path::new("."),
    )
    .unwrap();
    let cores = sockets * cores_per_socket;
    let program = vec![Op::SetAffinity { set: 0 }, Op::Compute { cycles: WORK }, Op::CountOp, Op::Exit];
    let threads =
        starts.iter().enumerate().map(|(i, &c)| ThreadSpec { name: format!("t{i}"), class: "t".into(), core: Some(c), program: 0, daemon: false }).collect();
    let w = Workload {
        processes: vec![ProcessSpec { name: "p".into(), group: 0, regions: vec![], threads, page_tables: Default::default() }],
        programs: vec![program],
        cpu_sets: vec![vec![(1u64 << cores) - 1]],
        ..Default::default()
    };
    tlbsim_core::os::run(&cfg, w).unwrap()
}

fn pulls(stats: &Value) -> Vec<u64> {
    stats["per_core"].as_array().unwrap().iter().map(|c| c["balance_pulls"].as_u64().unwrap()).collect()
}

fn end_cycle(stats: &Value) -> u64 {
    stats["per_thread"].as_array().unwrap().iter().map(|t| t["end_cycle"].as_u64().unwrap()).max().unwrap()
}

/// One socket of 2 cores, both threads on core 0: under `none` they share it (40 ms);
/// under `linux` core 0's tick, with a thread waiting, has idle core 1 take it, and the two
/// finish in about the time of one (20 ms, plus the wait for the first tick).
#[test]
fn an_idle_core_takes_a_waiting_thread_of_its_socket() {
    let none = run("none", 1, 2, &[0, 0]);
    let linux = run("linux", 1, 2, &[0, 0]);
    assert_eq!(pulls(&none), vec![0, 0]);
    assert_eq!(pulls(&linux), vec![0, 1], "core 1 takes one thread, once");
    assert!(end_cycle(&none) >= 2 * WORK, "{}", end_cycle(&none));
    // The first tick with a thread waiting is at 4 ms (12 M cycles): the pulled thread
    // has waited that long at most.
    let bound = WORK + 12_000_000 + 1_000_000;
    assert!(end_cycle(&linux) < bound, "linux {} ≥ {bound}", end_cycle(&linux));
}

/// Two sockets of 2 cores, both threads on core 0: socket 0 runs 2 threads on 2 cores,
/// so it is not overloaded: its own idle core 1 takes the waiting one (the kick goes to
/// the idle cores in order after core 0), and no thread leaves the socket.
#[test]
fn a_socket_with_an_idle_core_balances_within_itself() {
    let linux = run("linux", 2, 2, &[0, 0]);
    assert_eq!(pulls(&linux), vec![0, 1, 0, 0]);
}

/// Two sockets of 2 cores, three threads on socket 0 (two on core 0, one on core 1):
/// socket 0 runs 3 threads on 2 cores, overloaded, while socket 1 is idle; core 1 is busy,
/// so no core of socket 0 can take the waiting thread, and an idle core of socket 1 takes
/// it at its machine-wide balancing. Under `none` core 0 runs two threads to the end.
#[test]
fn an_overloaded_socket_gives_a_thread_to_an_idle_socket() {
    let none = run("none", 2, 2, &[0, 0, 1]);
    let linux = run("linux", 2, 2, &[0, 0, 1]);
    let p = pulls(&linux);
    assert_eq!(p[0] + p[1], 0, "{p:?}");
    assert_eq!(p[2] + p[3], 1, "{p:?}");
    assert!(end_cycle(&linux) < WORK + 13_000_000, "{}", end_cycle(&linux));
    assert!(end_cycle(&none) >= 2 * WORK);
}

/// The same threads, but socket 0 has a third core (idle): socket 0 is not overloaded (3
/// threads on 3 cores), so its idle core takes the waiting thread and socket 1 takes none.
#[test]
fn a_socket_that_is_not_overloaded_keeps_its_threads() {
    let linux = run("linux", 2, 3, &[0, 0, 1]);
    let p = pulls(&linux);
    assert_eq!(p, vec![0, 0, 1, 0, 0, 0]);
}

/// A thread whose CPU set does not include the idle core is not taken: one socket of 3
/// cores, two threads on core 0 whose set is {0, 2}, core 2 kept busy by a pinned third
/// thread; idle core 1 is outside their set, so they share core 0 to the end.
#[test]
fn a_thread_is_taken_only_within_its_cpu_set() {
    let cfg = Config::resolve(json!({"machine": {"sockets": 1, "cores_per_socket": 3}, "os": {"balance": "linux"}}), &[], std::path::Path::new(".")).unwrap();
    let widen = vec![Op::SetAffinity { set: 0 }, Op::Compute { cycles: WORK }, Op::CountOp, Op::Exit];
    let pinned = vec![Op::Compute { cycles: 3 * WORK }, Op::CountOp, Op::Exit];
    let mut threads: Vec<ThreadSpec> =
        (0..2).map(|i| ThreadSpec { name: format!("t{i}"), class: "t".into(), core: Some(0), program: 0, daemon: false }).collect();
    threads.push(ThreadSpec { name: "busy".into(), class: "busy".into(), core: Some(2), program: 1, daemon: false });
    let w = Workload {
        processes: vec![ProcessSpec { name: "p".into(), group: 0, regions: vec![], threads, page_tables: Default::default() }],
        programs: vec![widen, pinned],
        cpu_sets: vec![vec![0b101]],
        ..Default::default()
    };
    let stats = tlbsim_core::os::run(&cfg, w).unwrap();
    assert_eq!(pulls(&stats), vec![0, 0, 0]);
    let t0 = stats["per_thread"][0]["end_cycle"].as_u64().unwrap().max(stats["per_thread"][1]["end_cycle"].as_u64().unwrap());
    assert!(t0 >= 2 * WORK, "{t0}");
}
