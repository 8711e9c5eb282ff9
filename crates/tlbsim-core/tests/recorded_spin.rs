//! Synchronization-aware replay of recordings (`crate::workload::recorded`): a thread's
//! busy-wait loop on a flag replays as a spin (`Op::Spin`) until the other thread's store
//! that released it has been replayed, not for the iterations it happened to run under
//! QEMU. Synthetic recordings: a spinner that must run until a store (and so receives the
//! other thread's munmap shootdown), and a ping-pong of two flags.

use crate::common::recording::*;
use serde_json::json;
use std::path::Path;
use tlbsim_core::trace::TraceEvent;
use tlbsim_core::types::AccessKind;
use tlbsim_core::workload::program::{Op, Recorded, Workload};
use tlbsim_core::workload::recorded::build_from;

/// Flags in the program's data (mapped before the recording began), on two lines.
const FLAG: u64 = 0x60_0000;
const FLAG2: u64 = 0x60_0040;

fn access(va: u64, kind: AccessKind) -> TraceEvent {
    TraceEvent::Access { va, kind, size: 8 }
}

/// One iteration of `while (!*flag) ;` at code address `pc`.
fn spin_iteration(ev: &mut Vec<TraceEvent>, pc: u64, flag: u64) {
    ev.extend([fetch(pc), access(flag, AccessKind::Load), fetch(pc + 4)]);
}

/// The loop's last pass: it loads the flag, sees it set and leaves.
fn spin_exit(ev: &mut Vec<TraceEvent>, pc: u64, flag: u64) {
    ev.extend([fetch(pc), access(flag, AccessKind::Load), fetch(pc + 8)]);
}

/// Main clones a worker, which spins on FLAG; main maps 8 pages, writes them, unmaps them
/// and then stores to `release` (FLAG: the store the worker waits for). Under QEMU the
/// worker ran only a few iterations between main's calls.
fn spinner(path: &Path, release: u64) {
    let mut ev = vec![on(MAIN), fetch(CODE), syscall(56, &[0x3d0f00, 0, 0, 0, 0], WORKER as i64)];
    let worker = |ev: &mut Vec<TraceEvent>, n: usize| {
        ev.push(on(WORKER));
        for _ in 0..n {
            spin_iteration(ev, CODE + 0x100, FLAG);
        }
    };
    worker(&mut ev, 4);
    ev.push(on(MAIN));
    ev.push(syscall(9, &[0, 8 * 4096, 3, 0x22, u64::MAX, 0], HEAP as i64));
    for page in 0..8 {
        ev.extend([fetch(CODE + 0x10), access(HEAP + page * 4096, AccessKind::Store)]);
        worker(&mut ev, 1);
        ev.push(on(MAIN));
    }
    ev.push(syscall(11, &[HEAP, 8 * 4096], 0));
    worker(&mut ev, 1);
    ev.extend([on(MAIN), fetch(CODE + 0x20), access(release, AccessKind::Store)]);
    worker(&mut ev, 2);
    spin_exit(&mut ev, CODE + 0x100, FLAG);
    ev.extend([fetch(CODE + 0x200), syscall(60, &[0], 0)]);
    ev.extend([on(MAIN), fetch(CODE + 0x30), syscall(231, &[0], 0)]);
    write(path, &ev);
}

fn run(path: &Path, policy: &str) -> serde_json::Value {
    // Waking a halted CPU costs nothing here: the built-in machine's 16.6 µs exit latency
    // (machine.idle) would start the worker after these tiny recordings' main thread has
    // already unmapped, and these tests are about the spin, not the wake-up.
    let cfg = json!({
        "machine": {"sockets": 1, "cores_per_socket": 2, "idle": {"exit_ns": 0.0, "wake_ipi_ns": 0.0}},
        "workload": {"kind": "recorded", "paths": [path.to_str().unwrap()]},
        "os": {"coherence": policy, "checker": true},
    });
    tlbsim_core::run(cfg, &[], Path::new(".")).unwrap_or_else(|e| panic!("{e}")).stats
}

fn spins(prog: &[Op]) -> Vec<u32> {
    prog.iter().filter_map(|op| if let Op::Spin { token, .. } = op { Some(*token) } else { None }).collect()
}

/// Each spin's token is posted by another program right after a replayed store to a line
/// the spin's body loads.
fn releases_follow_stores(w: &Workload) {
    for (pi, prog) in w.programs.iter().enumerate() {
        for op in prog {
            let Op::Spin { token, stream, start, len, .. } = *op else { continue };
            let body = &w.recorded[stream as usize][start as usize..(start + len) as usize];
            let lines: Vec<u64> = body.iter().filter(|&&e| e & Recorded::KIND == Recorded::LOAD).map(|&e| (e & Recorded::VALUE) >> 6).collect();
            let (qi, j) = w
                .programs
                .iter()
                .enumerate()
                .find_map(|(qi, q)| q.iter().position(|o| *o == Op::Post { token }).map(|j| (qi, j)))
                .unwrap_or_else(|| panic!("no post of spin token {token}"));
            assert_ne!(qi, pi, "a spin is released by another thread");
            let Op::Replay { stream, start, len } = w.programs[qi][j - 1] else { panic!("the post of {token} does not follow a replayed chunk") };
            let store = w.recorded[stream as usize][(start + len - 1) as usize];
            assert_eq!(store & Recorded::KIND, Recorded::STORE, "the release is a store");
            assert!(lines.contains(&((store & Recorded::VALUE) >> 6)), "the store is to a line the loop loads");
        }
    }
}

#[test]
fn a_spinner_runs_until_the_releasing_store_and_receives_the_shootdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spin.tlbsim");
    spinner(&path, FLAG);
    let w = build_from(&path, true, 2, 3.0).unwrap();
    w.check(2).unwrap();
    assert_eq!(spins(&w.programs[1]).len(), 1, "{:?}", w.programs[1]);
    assert!(spins(&w.programs[0]).is_empty());
    releases_follow_stores(&w);

    // The same program, but main's last store is to another line: the worker's loop was not
    // released by it, so it replays as recorded.
    let control = dir.path().join("control.tlbsim");
    spinner(&control, FLAG2);
    let c = build_from(&control, true, 2, 3.0).unwrap();
    c.check(2).unwrap();
    assert!(c.programs.iter().all(|p| spins(p).is_empty()), "{:?}", c.programs[1]);

    let s = run(&path, "linux");
    let t = &s["totals"];
    assert_eq!(t["segv_signals"], json!(0), "{t}");
    assert_eq!(t["violations_security"], json!(0));
    assert_eq!(t["violations_consistency"], json!(0));
    let ct = &run(&control, "linux")["totals"];
    // The spinner is still on its CPU, in the address space, when main unmaps the region:
    // it receives IPIs that are not false positives. The unreleased worker has long exited
    // (an IPI it receives is to its lazy, stale core: a false positive).
    let real = |t: &serde_json::Value| t["shootdown_ipis_sent"].as_u64().unwrap() - t["false_positive_targets"].as_u64().unwrap();
    assert!(real(t) >= 1, "{t}");
    assert_eq!(real(ct), 0, "{ct}");
    // The spin's instructions count as it runs: many more than the 10 recorded iterations.
    assert!(t["instructions"].as_u64().unwrap() > ct["instructions"].as_u64().unwrap() + 100, "{} vs {}", t["instructions"], ct["instructions"]);
    // Deterministic.
    assert_eq!(run(&path, "linux")["totals"], *t);
}

#[test]
fn a_ping_pong_of_two_flags_alternates_in_the_recorded_order() {
    // Round r: the worker spins on FLAG until main stores it; main then spins on FLAG2 until
    // the worker stores it.
    const ROUNDS: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pingpong.tlbsim");
    let mut ev = vec![on(MAIN), fetch(CODE), syscall(56, &[0x3d0f00, 0, 0, 0, 0], WORKER as i64)];
    for _ in 0..ROUNDS {
        ev.push(on(WORKER));
        for _ in 0..4 {
            spin_iteration(&mut ev, CODE + 0x100, FLAG);
        }
        ev.extend([on(MAIN), fetch(CODE + 0x10), access(FLAG, AccessKind::Store)]);
        for _ in 0..4 {
            spin_iteration(&mut ev, CODE + 0x200, FLAG2);
        }
        ev.push(on(WORKER));
        spin_exit(&mut ev, CODE + 0x100, FLAG);
        ev.extend([fetch(CODE + 0x110), access(FLAG2, AccessKind::Store)]);
        ev.push(on(MAIN));
        spin_exit(&mut ev, CODE + 0x200, FLAG2);
    }
    ev.extend([on(WORKER), fetch(CODE + 0x300), syscall(60, &[0], 0)]);
    ev.extend([on(MAIN), fetch(CODE + 0x30), syscall(231, &[0], 0)]);
    write(&path, &ev);

    let w = build_from(&path, true, 2, 3.0).unwrap();
    w.check(2).unwrap();
    assert_eq!(spins(&w.programs[0]).len(), ROUNDS, "{:?}", w.programs[0]);
    assert_eq!(spins(&w.programs[1]).len(), ROUNDS, "{:?}", w.programs[1]);
    releases_follow_stores(&w);
    // Each thread's spins and releases alternate: spin, post, spin, post, ...
    for prog in &w.programs[..2] {
        let order: Vec<bool> = prog
            .iter()
            .filter_map(|op| match op {
                Op::Spin { .. } => Some(true),
                Op::Post { token } if w.programs.iter().flatten().any(|o| matches!(o, Op::Spin { token: t, .. } if t == token)) => Some(false),
                _ => None,
            })
            .collect();
        assert!(order.windows(2).all(|p| p[0] != p[1]), "{order:?}");
    }
    let s = run(&path, "linux");
    assert_eq!(s["totals"]["segv_signals"], json!(0));
    assert_eq!(run(&path, "linux")["totals"], s["totals"]);
}
