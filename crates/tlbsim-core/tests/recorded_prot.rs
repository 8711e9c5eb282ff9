//! Replayed stores against another thread's protection changes (issue 47): a store that
//! ran before a collector's mprotect(PROT_READ) took effect replays before it, even when the
//! recording wrote it just after the call (the plugin records an access after it runs), and
//! a store recorded after the un-protect replays after it. Neither raises a SIGSEGV the
//! program did not see; a store the protection forbade that the thread recorded later than
//! its first event after the call replays as recorded (a SIGSEGV).

use crate::common::recording::*;
use serde_json::json;
use std::path::Path;
use tlbsim_core::trace::TraceEvent;
use tlbsim_core::workload::program::{Op, Recorded};
use tlbsim_core::workload::recorded::build_from;

const PAGES: u64 = 4;

/// Main maps a heap of `PAGES` pages and clones a worker, which stores to page 0; main
/// write-protects the heap (the barrier armed), and the worker's first event after that
/// call is `in_flight` (a store to page 1, or nothing); then main scans the heap `scan`
/// times and un-protects it, and the worker stores to page 2 `after` times once that call
/// is recorded.
fn barrier(path: &Path, in_flight: &[TraceEvent], scan: u64, after: u64) {
    let mut ev = vec![on(MAIN), fetch(CODE)];
    ev.push(syscall(56, &[0x3d0f00, 0, 0, 0, 0], WORKER as i64));
    ev.push(syscall(9, &[0, PAGES * 4096, 3, 0x22, u64::MAX, 0], HEAP as i64));
    ev.extend([on(WORKER), fetch(CODE + 64), store(HEAP)]);
    ev.extend([on(MAIN), fetch(CODE + 4), syscall(10, &[HEAP, PAGES * 4096, 1], 0)]);
    ev.push(on(WORKER));
    ev.extend_from_slice(in_flight);
    ev.push(on(MAIN));
    for i in 0..scan {
        ev.push(fetch(CODE + 8));
        ev.push(load(HEAP + (i % PAGES) * 4096 + 8 * (i % 512)));
    }
    ev.push(syscall(10, &[HEAP, PAGES * 4096, 3], 0));
    ev.push(on(WORKER));
    for i in 0..after {
        ev.push(fetch(CODE + 68));
        ev.push(store(HEAP + 2 * 4096 + 8 * (i % 512)));
    }
    ev.push(syscall(60, &[0], 0));
    ev.extend([on(MAIN), syscall(231, &[0], 0)]);
    write(path, &ev);
}

fn totals(path: &Path) -> serde_json::Value {
    let cfg = json!({
        "machine": {"sockets": 1, "cores_per_socket": 2},
        "workload": {"kind": "recorded", "paths": [path.to_str().unwrap()]},
        "os": {"coherence": "linux", "checker": true},
    });
    tlbsim_core::run(cfg, &[], Path::new(".")).unwrap_or_else(|e| panic!("{e}")).stats["totals"].clone()
}

/// The index of the first op of `prog` that is `op`.
fn find(prog: &[Op], op: Op) -> usize {
    prog.iter().position(|o| *o == op).unwrap_or_else(|| panic!("no {op:?} in {prog:?}"))
}

#[test]
fn a_store_recorded_just_after_another_threads_mprotect_replays_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("early.tlbsim");
    // The worker's first event after the arming call is a store to a page it protected:
    // the store had run before the call took effect.
    barrier(&path, &[store(HEAP + 4096 + 8)], 2000, 50);
    let w = build_from(&path, true, 2, 3.0).unwrap();
    w.check(2).unwrap();
    let (main, worker) = (&w.programs[0], &w.programs[1]);
    // Main's arming mprotect waits, before its range, for a token the worker posts right
    // after that store.
    let arm = find(main, Op::Mprotect { slot: 0, writable: false });
    let waited: Vec<u32> = main[..arm].iter().filter_map(|o| if let Op::Wait { token, .. } = *o { Some(token) } else { None }).collect();
    let store_at = |stream_index: u64| {
        worker.iter().position(|o| matches!(*o, Op::Replay { start, len, .. } if start <= stream_index && stream_index < start + len)).unwrap()
    };
    let rec = &w.recorded[1];
    let early = rec.iter().position(|&e| e & Recorded::KIND == Recorded::STORE && e & Recorded::VALUE == HEAP + 4096 + 8).unwrap() as u64;
    let posted_after = match worker[store_at(early) + 1] {
        Op::Post { token } => token,
        ref o => panic!("the early store is not followed by a post: {o:?} in {worker:?}"),
    };
    assert!(waited.contains(&posted_after), "main {main:?}\nworker {worker:?}");
    // The worker does not wait for the arming call before that store.
    let arm_done = match main[arm + 1] {
        Op::Post { token } => token,
        ref o => panic!("{o:?}"),
    };
    assert!(!worker[..store_at(early)].contains(&Op::Wait { token: arm_done, count: 1 }), "{worker:?}");
    let t = totals(&path);
    assert_eq!(t["segv_signals"], json!(0), "{t}");
    assert_eq!(t["violations_security"], json!(0), "{t}");
    assert_eq!(t["violations_consistency"], json!(0), "{t}");
}

#[test]
fn a_store_recorded_after_the_unprotect_replays_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("late.tlbsim");
    // Main scans long while the heap is read-only; the worker's stores come after the
    // un-protect: replayed at the model's speed they would reach the heap while it is still
    // protected if they did not wait for it.
    barrier(&path, &[], 4000, 200);
    let w = build_from(&path, true, 2, 3.0).unwrap();
    w.check(2).unwrap();
    let (main, worker) = (&w.programs[0], &w.programs[1]);
    let unprotect = find(main, Op::Mprotect { slot: 0, writable: true });
    let done = match main[unprotect + 1] {
        Op::Post { token } => token,
        ref o => panic!("{o:?}"),
    };
    let wait = find(worker, Op::Wait { token: done, count: 1 });
    let last_store = worker.iter().rposition(|o| matches!(o, Op::Replay { .. })).unwrap();
    assert!(wait < last_store, "{worker:?}");
    let t = totals(&path);
    assert_eq!(t["segv_signals"], json!(0), "{t}");
    assert_eq!(t["violations_security"], json!(0), "{t}");
}

#[test]
fn a_forbidden_store_after_other_events_of_its_thread_is_not_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("late_store.tlbsim");
    // The worker fetched after the arming call was recorded, then stored to the protected
    // page: that store ran after the call and would have faulted; it replays as recorded.
    barrier(&path, &[fetch(CODE + 72), store(HEAP + 4096 + 8)], 2000, 0);
    let w = build_from(&path, true, 2, 3.0).unwrap();
    w.check(2).unwrap();
    let main = &w.programs[0];
    let arm = find(main, Op::Mprotect { slot: 0, writable: false });
    let waits_before_arm = main[..arm].iter().filter(|o| matches!(o, Op::Wait { .. })).count();
    let t = totals(&path);
    assert!(t["segv_signals"].as_u64().unwrap() >= 1, "{t}");
    // Only the worker's accesses before the call are waited for (its store to page 0).
    assert_eq!(waits_before_arm, 1, "{main:?}");
}
