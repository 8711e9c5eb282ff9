//! `workload.kind = "recorded"`: a native v2 recording (as `tlbsim record` writes) compiled
//! into the OS model's workload and replayed: threads start where their creator cloned
//! them, mmaps land at their recorded addresses, and the recorded order between threads is
//! kept around system calls (a munmap waits for the other thread's reads of the range;
//! a read waits for the other thread's mmap of its page).

use crate::common::recording::*;
use serde_json::json;
use std::path::Path;
use tlbsim_core::trace::{NativeWriter, TraceEvent};

use tlbsim_core::workload::program::Op;
use tlbsim_core::workload::recorded::build_from;

/// Main clones a worker (CLONE_VM) and maps 8 pages, both read the region `rounds` times,
/// interleaved as the recording saw them; then main unmaps it and both exit. The worker's
/// first events come before the clone's record (a new thread may run before its creator's
/// clone returns).
fn recording(path: &Path, rounds: u64) {
    let mut w = NativeWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    let mut ev = vec![TraceEvent::Thread { tid: MAIN }, fetch(CODE)];
    ev.push(TraceEvent::Thread { tid: WORKER });
    ev.push(fetch(CODE + 64));
    ev.push(TraceEvent::Thread { tid: MAIN });
    ev.push(syscall(56, &[0x3d0f00, 0, 0, 0, 0], WORKER as i64));
    ev.push(syscall(9, &[0, 8 * 4096, 3, 0x22, u64::MAX, 0], HEAP as i64));
    for r in 0..rounds {
        for (tid, page) in [(MAIN, r % 8), (WORKER, (r + 4) % 8)] {
            ev.push(TraceEvent::Thread { tid });
            ev.push(fetch(CODE + 4 * r));
            ev.push(load(HEAP + page * 4096 + 8 * r % 4096));
            ev.push(TraceEvent::Instructions { n: 3 });
        }
    }
    ev.push(TraceEvent::Thread { tid: MAIN });
    ev.push(syscall(11, &[HEAP, 8 * 4096], 0));
    ev.push(syscall(231, &[0], 0));
    ev.push(TraceEvent::Thread { tid: WORKER });
    ev.push(syscall(60, &[0], 0));
    w.write_batch(&ev).unwrap();
    w.finish().unwrap();
}

fn run(path: &Path, policy: &str) -> serde_json::Value {
    let cfg = json!({
        "machine": {"sockets": 1, "cores_per_socket": 2},
        "workload": {"kind": "recorded", "paths": [path.to_str().unwrap()]},
        "os": {"coherence": policy, "checker": true},
    });
    tlbsim_core::run(cfg, &[], Path::new(".")).unwrap_or_else(|e| panic!("{e}")).stats
}

#[test]
fn a_recording_compiles_to_threads_spawns_fixed_mappings_and_ordering() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.tlbsim");
    recording(&path, 40);
    let w = build_from(&path, true, 2, 3.0).unwrap();
    w.check(2).unwrap();
    assert_eq!(w.processes.len(), 1);
    assert_eq!(w.processes[0].threads.len(), 2);
    assert_eq!(w.held_threads, vec![1], "the worker starts held, spawned by main");
    let main = &w.programs[0];
    assert!(main.contains(&Op::Spawn { thread: 1 }));
    assert!(main.contains(&Op::SetRange { slot: 0, va: HEAP, len: 8 * 4096 }), "mmap at its recorded address");
    // The code page was mapped before the recording: a fixed region covers it.
    assert!(w.fixed_regions.iter().any(|&(_, va, spec)| va <= CODE && CODE < va + spec.bytes));
    // The worker's reads wait for main's mmap; main's munmap waits for the worker's reads.
    let worker = &w.programs[1];
    assert!(worker.iter().any(|op| matches!(op, Op::Wait { .. })), "{worker:?}");
    assert!(worker.iter().any(|op| matches!(op, Op::Post { .. })), "{worker:?}");
    let munmap = main.iter().position(|op| *op == Op::Munmap { slot: 0 }).unwrap();
    assert!(matches!(main[munmap - 2], Op::Wait { count: 1, .. }), "{:?}", &main[munmap - 3..=munmap]);
    // Every recorded access and instruction is in a stream.
    let entries: usize = w.recorded.iter().map(Vec::len).sum();
    assert!(entries >= 2 * 40 * 2);
}

#[test]
fn replay_gives_the_munmap_its_shootdown_and_no_stale_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.tlbsim");
    recording(&path, 400);
    let linux = run(&path, "linux");
    let t = &linux["totals"];
    // 2 fetches + 400 × (1 fetch + 3) per thread.
    assert_eq!(t["instructions"], json!(2 * (1 + 400 * 4)));
    assert_eq!(t["segv_signals"], json!(0), "{t}");
    assert_eq!(t["violations_security"], json!(0));
    assert_eq!(t["violations_consistency"], json!(0));
    // The worker still runs in the address space when main unmaps the region (it waited for
    // the worker's reads, then the worker goes on to its exit): one remote flush at least.
    assert!(t["shootdown_ipis_sent"].as_u64().unwrap() >= 1, "{t}");
    let oracle = run(&path, "oracle");
    assert_eq!(oracle["totals"]["instructions"], t["instructions"]);
    assert!(oracle["totals"]["shootdown_ipis_sent"].as_u64().unwrap() <= t["shootdown_ipis_sent"].as_u64().unwrap());
    // Deterministic.
    assert_eq!(run(&path, "linux")["totals"], *t);
}

#[test]
fn bad_recordings_are_config_errors_that_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    // A thread nobody created.
    let path = dir.path().join("orphan.tlbsim");
    let mut w = NativeWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    w.write_batch(&[TraceEvent::Thread { tid: 1 }, fetch(CODE), TraceEvent::Thread { tid: 2 }, fetch(CODE)]).unwrap();
    w.finish().unwrap();
    let e = build_from(&path, true, 2, 3.0).unwrap_err().to_string();
    assert!(e.contains("thread 2") && e.contains("no recorded clone"), "{e}");
    // Truncated: the byte offset is named.
    let good = dir.path().join("two.tlbsim");
    recording(&good, 10);
    let bytes = std::fs::read(&good).unwrap();
    let cut = dir.path().join("cut.tlbsim");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let e = build_from(&cut, true, 2, 3.0).unwrap_err().to_string();
    assert!(e.contains("offset"), "{e}");
}

/// Found by the `compile` fuzz target (fuzz/regressions/compile/mremap-to-range-overflows):
/// a successful mremap whose result plus its new length passed 2^64 overflowed in the
/// compiler. Calls whose ranges are not page-aligned user ranges (as mm/mmap.c and
/// mm/mremap.c accept) are refused with the call named; a length near 2^64 that page
/// rounding would overflow is one of them.
#[test]
fn calls_with_ranges_outside_user_space_are_refused_not_overflowed() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Vec<TraceEvent>); 4] = [
        ("mremap", vec![syscall(9, &[0, 4096, 3, 0x22, u64::MAX, 0], HEAP as i64), syscall(25, &[HEAP, 4096, 8192, 1], -4096i64 & !0xfff)]),
        ("mremap", vec![syscall(9, &[0, 4096, 3, 0x22, u64::MAX, 0], HEAP as i64), syscall(25, &[HEAP, 4096, u64::MAX - 10, 1], HEAP as i64)]),
        ("mmap", vec![syscall(9, &[0, u64::MAX - 100, 3, 0x22, u64::MAX, 0], HEAP as i64)]),
        ("brk", vec![syscall(12, &[0], 0x10_0000), syscall(12, &[0], i64::MAX)]),
    ];
    for (i, (call, events)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.tlbsim"));
        let mut w = NativeWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
        w.write_batch(&[TraceEvent::Thread { tid: MAIN }, fetch(CODE)]).unwrap();
        w.write_batch(&events).unwrap();
        w.finish().unwrap();
        let e = build_from(&path, true, 2, 3.0).unwrap_err().to_string();
        assert!(e.contains(&format!("{call} ")) && e.contains("user"), "case {i}: {e}");
    }
    // A munmap of such a range fails in the kernel (EINVAL): recorded with its error, it is
    // skipped, as before.
    let path = dir.path().join("munmap.tlbsim");
    let mut w = NativeWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    w.write_batch(&[TraceEvent::Thread { tid: MAIN }, fetch(CODE), syscall(11, &[HEAP, u64::MAX - 5], -22), syscall(231, &[0], 0)]).unwrap();
    w.finish().unwrap();
    build_from(&path, true, 2, 3.0).unwrap();
}

#[test]
fn a_woken_futex_wait_sleeps_until_the_wake_that_ended_it() {
    // Main clones a worker (CLONE_CHILD_CLEARTID at CTID), then joins it: its futex wait on
    // CTID returns after the worker's exit. A second worker is woken by main's FUTEX_WAKE.
    const CTID: u64 = 0x7000_0000_1000;
    const WORD: u64 = 0x7000_0000_2000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("join.tlbsim");
    let mut w = NativeWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    let mut ev = vec![TraceEvent::Thread { tid: MAIN }, fetch(CODE)];
    ev.push(syscall(56, &[0x3d0f00, 0, 0, CTID, 0], WORKER as i64));
    ev.push(syscall(56, &[0x3d0f00, 0, 0, CTID + 8, 0], 102));
    ev.push(TraceEvent::Thread { tid: 102 });
    ev.push(fetch(CODE + 8));
    ev.push(TraceEvent::Thread { tid: MAIN });
    ev.push(syscall(202, &[WORD, 0x81, 1, 0, 0], 0)); // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
    ev.push(TraceEvent::Thread { tid: 102 });
    ev.push(syscall(202, &[WORD, 0x80, 0, 0, 0], 0)); // FUTEX_WAIT, woken
    ev.push(syscall(60, &[0], 0));
    ev.push(TraceEvent::Thread { tid: WORKER });
    for i in 0..2000 {
        ev.push(fetch(CODE + 4 * (i % 64)));
    }
    ev.push(syscall(60, &[0], 0));
    ev.push(TraceEvent::Thread { tid: MAIN });
    ev.push(syscall(202, &[CTID, 0x80, WORKER as u64, 0, 0], 0)); // pthread_join
    ev.push(fetch(CODE));
    ev.push(syscall(231, &[0], 0));
    w.write_batch(&ev).unwrap();
    w.finish().unwrap();
    let wl = build_from(&path, true, 2, 3.0).unwrap();
    wl.check(2).unwrap();
    let worker_exit = wl.programs[1].iter().rev().find_map(|op| if let Op::Post { token } = op { Some(*token) } else { None }).unwrap();
    assert!(wl.programs[0].contains(&Op::Sleep { token: worker_exit, count: 1 }), "{:?}", wl.programs[0]);
    let wake = wl.programs[0].iter().find_map(|op| if let Op::Post { token } = op { Some(*token) } else { None }).unwrap();
    assert!(wl.programs[2].contains(&Op::Sleep { token: wake, count: 1 }), "{:?}", wl.programs[2]);
    // Main sleeps through the worker's 2,000 instructions: the run lasts at least as long.
    let stats = run(&path, "linux");
    let main_end = stats["per_thread"].as_array().unwrap().iter().find(|t| t["name"] == json!(format!("tid{MAIN}"))).map(|t| t["end_cycle"].as_u64().unwrap());
    let worker_end =
        stats["per_thread"].as_array().unwrap().iter().find(|t| t["name"] == json!(format!("tid{WORKER}"))).map(|t| t["end_cycle"].as_u64().unwrap());
    assert!(main_end.unwrap() >= worker_end.unwrap(), "{main_end:?} {worker_end:?}");
}

#[test]
fn a_cycle_of_waits_is_refused_by_check() {
    use tlbsim_core::workload::program::{ProcessSpec, ThreadSpec, Workload};
    let thread = |p: usize| ThreadSpec { name: format!("t{p}"), class: "c".into(), core: None, program: p, daemon: false };
    let mut w = Workload {
        processes: vec![ProcessSpec { name: "p".into(), group: 0, regions: vec![], threads: vec![thread(0), thread(1)], page_tables: Default::default() }],
        programs: vec![vec![Op::Wait { token: 0, count: 1 }, Op::Post { token: 1 }], vec![Op::Wait { token: 1, count: 1 }, Op::Post { token: 0 }]],
        slots: 1,
        tokens: 2,
        ..Default::default()
    };
    let e = w.check(2).unwrap_err();
    assert!(e.contains("cycle"), "{e}");
    // Posting first breaks the cycle.
    w.programs[1] = vec![Op::Post { token: 0 }, Op::Wait { token: 1, count: 1 }];
    w.check(2).unwrap();
    // A wait for more posts than exist.
    w.programs[0][0] = Op::Wait { token: 0, count: 2 };
    assert!(w.check(2).unwrap_err().contains("only 1 post"));
}

#[test]
fn a_summary_of_instruction_counts_past_2_to_the_64_is_an_error_naming_the_event() {
    // Found by fuzzing the recorded-trace reader (session 38): `tlbsim record --info`
    // summed the counts unchecked (a panic under overflow checks, a wrapped total without).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counts.tlbsim");
    let mut w = NativeWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    for ev in [TraceEvent::Thread { tid: MAIN }, TraceEvent::Instructions { n: u64::MAX / 2 + 1 }, TraceEvent::Instructions { n: u64::MAX / 2 + 1 }] {
        w.write(&ev).unwrap();
    }
    w.finish().unwrap();
    match tlbsim_core::trace::recorded::summarise(&path, false) {
        Err(tlbsim_core::trace::TraceError::Event { event, message, .. }) => {
            assert_eq!(event, 3, "{message}");
            assert!(message.contains(&format!("thread {MAIN}")) && message.contains("2^64"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}
