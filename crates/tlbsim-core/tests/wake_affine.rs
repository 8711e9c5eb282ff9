//! Linux's wake-up placement under `os.balance = "linux"` (issue 46 item 5): a thread woken
//! by another may go to the waker's CPU (wake_affine_weight) and then to an idle CPU of
//! that CPU's last-level cache (select_idle_sibling), or stay on its previous CPU; under
//! `none` it always goes back to its previous CPU.
//!
//! Every run: one process whose non-daemon waker, pinned to core 0, posts a token `WAKES`
//! times, each after some computation; a wakee, unpinned, takes the token and then reads
//! its heap (64 accesses) each time; pinned daemons that only compute keep chosen cores
//! busy. Only the wakee accesses memory, so a core's `accesses` are the wakee's reads there.

use serde_json::{json, Value};
use tlbsim_core::config::Config;
use tlbsim_core::workload::builder::anon;
use tlbsim_core::workload::program::*;

const WAKES: u64 = 100;
const READS: u64 = 64;
/// A short time slice, so that a wakee queued behind a busy thread runs within a slice,
/// long before the next post (with the default 3 ms it waited until the waker had posted
/// every time and exited, and the waker's core, going idle, pulled it).
const SLICE: u64 = 10_000;

/// The waker: `WAKES` times, compute 50,000 cycles, then post the wakee's token.
fn waker() -> Vec<Op> {
    vec![Op::Loop { count: WAKES, body: 2 }, Op::Compute { cycles: 50_000 }, Op::Post { token: 0 }, Op::Exit]
}

/// The wakee: `first`, then `WAKES` times, take the token and read `READS` random words.
fn wakee(first: Vec<Op>) -> Vec<Op> {
    let mut p = first;
    p.extend([
        Op::Loop { count: WAKES, body: 3 },
        Op::Take { token: 0 },
        Op::Access { slot: 0, pattern: Pattern::Random, mode: AccessMode::Read, count: READS, offset: 0, len: 0, stride: 64 },
        Op::CountOp,
        Op::Exit,
    ]);
    p
}

/// A daemon that keeps its core busy.
fn spin() -> Vec<Op> {
    vec![Op::Loop { count: 0, body: 1 }, Op::Compute { cycles: 5_000 }]
}

/// `busy`: the cores a computing daemon is pinned to (a core listed twice runs two).
/// `wakee_at`: the core round-robin placement gives the wakee (threads that exit at once
/// are placed first to get it there).
fn run(balance: &str, sockets: u32, cores_per_socket: u32, busy: &[u32], wakee_at: u32) -> Value {
    let cfg = Config::resolve(
        json!({"machine": {"sockets": sockets, "cores_per_socket": cores_per_socket}, "os": {"balance": balance, "time_slice": SLICE}}),
        &[],
        std::path::Path::new("."),
    )
    .unwrap();
    let programs = vec![waker(), wakee(vec![]), spin(), vec![Op::Exit]];
    let mut threads = vec![ThreadSpec { name: "waker".into(), class: "waker".into(), core: Some(0), program: 0, daemon: false }];
    for i in 0..wakee_at {
        threads.push(ThreadSpec { name: format!("filler{i}"), class: "filler".into(), core: None, program: 3, daemon: false });
    }
    threads.push(ThreadSpec { name: "wakee".into(), class: "wakee".into(), core: None, program: 1, daemon: false });
    for (i, &c) in busy.iter().enumerate() {
        threads.push(ThreadSpec { name: format!("busy{i}"), class: "busy".into(), core: Some(c), program: 2, daemon: true });
    }
    let mut heap = anon(1 << 20, false);
    heap.populate = true;
    let w = Workload {
        processes: vec![ProcessSpec { name: "p".into(), group: 0, regions: vec![heap], threads, page_tables: Default::default() }],
        programs,
        slots: 1,
        tokens: 1,
        ..Default::default()
    };
    let stats = tlbsim_core::os::run(&cfg, w).unwrap();
    let wakee = stats["per_thread"].as_array().unwrap().iter().find(|t| t["name"] == "wakee").unwrap();
    assert_eq!(wakee["ops_completed"], WAKES, "the wakee takes every post");
    stats
}

fn reads_on(stats: &Value, core: usize) -> u64 {
    stats["per_core"][core]["accesses"].as_u64().unwrap()
}

/// One socket of 3 cores, every one busy: the waker's core 0 runs the waker alone, the
/// wakee's core 1 two daemons, core 2 one. wake_affine_weight: core 0's load with the wakee
/// (2) ×100 = 200 is below core 1's load without it (2) ×108 = 216, so the wakee is queued
/// on the waker's core; select_idle_sibling finds no idle core in the socket and keeps it
/// there; from then on its previous core is the waker's, and it stays. Under `none` it
/// goes back to core 1 every time.
#[test]
fn a_wakee_whose_previous_core_is_loaded_joins_the_wakers_core_in_its_llc() {
    let linux = run("linux", 1, 3, &[1, 1, 2], 1);
    let none = run("none", 1, 3, &[1, 1, 2], 1);
    let total = WAKES * READS;
    assert_eq!(reads_on(&none, 1), total, "under none the wakee stays on core 1");
    // At most the first round (the waker may post before the wakee first takes) is read
    // on core 1.
    assert!(reads_on(&linux, 0) >= total - READS, "under linux the wakee moves to the waker's core: {} of {total}", reads_on(&linux, 0));
    assert_eq!(reads_on(&linux, 0) + reads_on(&linux, 1), total);
    assert_eq!(reads_on(&linux, 2), 0, "core 2 is never chosen");
}

/// The same loads, but the wakee's core has one daemon only: core 1's load 1 ×108 = 108 is
/// below 200, so wake_affine keeps the previous core, and with no idle core the wakee stays
/// there (as under `none`). At most one round is read elsewhere: the last, when the waker
/// has exited and its core, going idle, pulls the wakee waiting behind the daemon.
#[test]
fn a_wakee_whose_previous_core_is_lightly_loaded_stays() {
    let linux = run("linux", 1, 3, &[1, 2], 1);
    let total = WAKES * READS;
    assert!(reads_on(&linux, 1) >= total - READS, "{} of {total} on core 1", reads_on(&linux, 1));
}

/// Two sockets of 2 cores. The wakee sleeps on core 2 (socket 1), which is otherwise idle;
/// the waker's socket has an idle core (1). wake_affine_weight: core 2's load without the
/// wakee is 0, so the previous core is kept, and it is idle: the wakee stays on its socket,
/// although an idle core next to the waker exists.
#[test]
fn across_sockets_a_wakee_with_an_idle_previous_core_stays() {
    let linux = run("linux", 2, 2, &[], 2);
    assert_eq!(reads_on(&linux, 2), WAKES * READS);
}

/// Two sockets of 2 cores; the wakee's socket is busy (core 2: two daemons, core 3: one),
/// the waker's has an idle core (1). wake_affine_weight over the NUMA domain
/// (imbalance_pct 125): 200 < 2 ×112 = 224, so the waker's core is the target, and
/// select_idle_sibling, scanning the target's socket, takes its idle core 1; from then on
/// core 1 is the wakee's previous core, idle when it is woken, and it stays there. Under
/// `none` it stays on core 2, sharing it with the daemons.
#[test]
fn across_sockets_a_wakee_on_a_loaded_socket_moves_to_an_idle_core_next_to_the_waker() {
    let linux = run("linux", 2, 2, &[2, 2, 3], 2);
    let none = run("none", 2, 2, &[2, 2, 3], 2);
    let total = WAKES * READS;
    assert_eq!(reads_on(&none, 2), total);
    assert!(reads_on(&linux, 1) >= total - READS, "{} of {total} on core 1", reads_on(&linux, 1));
    assert_eq!(reads_on(&linux, 0) + reads_on(&linux, 3), 0);
}

/// A CPU set without the waker's core: no affine wake-up (`want_affine` needs the waker's
/// CPU in `p->cpus_ptr`), so the loaded previous core is kept although the waker's core
/// would win on load. The set {1, 2} is given to the wakee before its loop.
#[test]
fn no_affine_wake_up_onto_a_core_outside_the_wakees_set() {
    // The same as the first test with a set-affinity first: the wakee placed on core 1.
    let cfg = Config::resolve(
        json!({"machine": {"sockets": 1, "cores_per_socket": 3}, "os": {"balance": "linux", "time_slice": SLICE}}),
        &[],
        std::path::Path::new("."),
    )
    .unwrap();
    let mut threads = vec![
        ThreadSpec { name: "waker".into(), class: "waker".into(), core: Some(0), program: 0, daemon: false },
        ThreadSpec { name: "filler".into(), class: "filler".into(), core: None, program: 3, daemon: false },
        ThreadSpec { name: "wakee".into(), class: "wakee".into(), core: None, program: 1, daemon: false },
    ];
    for (i, c) in [1, 1, 2].into_iter().enumerate() {
        threads.push(ThreadSpec { name: format!("busy{i}"), class: "busy".into(), core: Some(c), program: 2, daemon: true });
    }
    let mut heap = anon(1 << 20, false);
    heap.populate = true;
    let w = Workload {
        processes: vec![ProcessSpec { name: "p".into(), group: 0, regions: vec![heap], threads, page_tables: Default::default() }],
        programs: vec![waker(), wakee(vec![Op::SetAffinity { set: 0 }]), spin(), vec![Op::Exit]],
        slots: 1,
        tokens: 1,
        cpu_sets: vec![vec![0b110]],
        ..Default::default()
    };
    let stats = tlbsim_core::os::run(&cfg, w).unwrap();
    assert_eq!(reads_on(&stats, 0), 0, "core 0 is outside the set");
    assert_eq!(reads_on(&stats, 1), WAKES * READS);
}
