//! Blocking calls of a recorded program (issue 47 item 4), on synthetic recordings laid out
//! as `tlbsim record`'s plugin writes them (crates/tlbsim-core/src/trace/native.rs): a
//! nanosleep takes its requested time, asleep, its core free; a wait woken from outside
//! the recording takes its recorded time blocked, one woken by another recorded thread's
//! write sleeps until that write; a sleeping thread's CPU idles and, lazy, gets no
//! shootdown IPI; file reads and writes go through the page cache and the storage model.

use crate::common::recording::*;
use serde_json::{json, Value};
use std::path::Path;
use tlbsim_core::trace::TraceEvent;

use tlbsim_core::workload::program::Op;
use tlbsim_core::workload::recorded::build_from;

/// The machine's clock in these runs (GHz) and what build_from is told.
const GHZ: f64 = 3.0;
/// A clone of a thread (CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | ...).
const CLONE_THREAD_FLAGS: u64 = 0x3d0f00;

/// nanosleep(req, rem) as the plugin records it: requested and blocked ns added.
fn nanosleep(requested_ns: u64, blocked_ns: u64) -> TraceEvent {
    syscall(35, &[0x7fff_0000, 0, requested_ns, blocked_ns], 0)
}

/// poll(fds, nfds, timeout) returning `ret`, entered at `entered` ns, blocked `blocked` ns.
fn poll(entered: u64, blocked: u64, ret: i64) -> TraceEvent {
    syscall(7, &[0x7fff_1000, 1, u64::MAX, 0, entered, blocked], ret)
}

/// `n` instructions of straight-line code (fetches one after another).
fn work(ev: &mut Vec<TraceEvent>, n: u64) {
    for i in 0..n {
        ev.push(fetch(CODE + 4 * (i % 1024)));
    }
}

fn run(path: &Path, cores: u32, extra: Value) -> Value {
    let mut cfg = json!({
        "machine": {"sockets": 1, "cores_per_socket": cores, "frequency_ghz": GHZ},
        "workload": {"kind": "recorded", "paths": [path.to_str().unwrap()]},
        "os": {"coherence": "linux", "checker": true},
    });
    if let Value::Object(m) = extra {
        for (k, v) in m {
            cfg["machine"][k] = v;
        }
    }
    tlbsim_core::run(cfg, &[], Path::new(".")).unwrap_or_else(|e| panic!("{e}")).stats
}

fn makespan(stats: &Value) -> u64 {
    stats["run"]["makespan_cycles"].as_u64().unwrap()
}

fn total(stats: &Value, key: &str) -> u64 {
    stats["totals"][key].as_u64().unwrap_or_else(|| panic!("no {key} in {}", stats["totals"]))
}

/// One thread: work, [nanosleep], work, exit.
fn sleeper(path: &Path, sleep: Option<TraceEvent>) {
    let mut ev = vec![on(MAIN)];
    work(&mut ev, 200);
    ev.extend(sleep);
    work(&mut ev, 200);
    ev.push(syscall(231, &[0], 0));
    write(path, &ev);
}

#[test]
fn nanosleep_takes_its_requested_time_with_the_core_idle() {
    let dir = tempfile::tempdir().unwrap();
    let (slept, plain) = (dir.path().join("slept.tlbsim"), dir.path().join("plain.tlbsim"));
    // Asked for 1 ms; QEMU's slowed-down process slept 1.3 ms: the request counts.
    sleeper(&slept, Some(nanosleep(1_000_000, 1_300_000)));
    sleeper(&plain, None);
    let w = build_from(&slept, true, 1, GHZ).unwrap();
    w.check(1).unwrap();
    assert!(w.programs[0].contains(&Op::Block { cycles: 3_000_000 }), "{:?}", w.programs[0]);
    // No idle-state exit (the built-in machine's is a KVM guest's measured 16.6 us).
    let no_exit = json!({"idle": {"exit_ns": 0, "poll_ns": 0, "wake_ipi_ns": 0}});
    let (a, b) = (run(&slept, 1, no_exit.clone()), run(&plain, 1, no_exit));
    let extra = makespan(&a) - makespan(&b);
    // The sleep, plus at most a context switch or two.
    assert!((3_000_000..3_000_000 + 30_000).contains(&extra), "{extra}");
    assert!(total(&a, "idle_cycles") >= total(&b, "idle_cycles") + 2_900_000, "{} vs {}", a["totals"], b["totals"]);
    assert_eq!(total(&a, "instructions"), total(&b, "instructions"));
    // Interrupted by a signal (-EINTR): the time it did sleep.
    let cut = dir.path().join("cut.tlbsim");
    let mut ev = vec![on(MAIN)];
    work(&mut ev, 10);
    ev.push(syscall(35, &[0x7fff_0000, 0, 1_000_000, 200_000], -4));
    ev.push(syscall(231, &[0], 0));
    write(&cut, &ev);
    assert!(build_from(&cut, true, 1, GHZ).unwrap().programs[0].contains(&Op::Block { cycles: 600_000 }));
}

/// Main clones a worker; the worker sleeps (`sleep`) while main works `main_work`
/// instructions; both exit.
fn two_threads(path: &Path, sleep: TraceEvent, main_work: u64) {
    let mut ev = vec![on(MAIN), fetch(CODE), syscall(56, &[CLONE_THREAD_FLAGS, 0, 0, 0, 0], WORKER as i64)];
    ev.push(on(WORKER));
    ev.push(fetch(CODE + 8192));
    ev.push(sleep);
    ev.push(syscall(60, &[0], 0));
    ev.push(on(MAIN));
    work(&mut ev, main_work);
    ev.push(syscall(231, &[0], 0));
    write(path, &ev);
}

#[test]
fn a_sleeping_thread_frees_its_core_for_another() {
    // One core: the worker's 10 us sleep (30,000 cycles) overlaps main's work (20,000
    // instructions) instead of adding to it.
    // Main clones the worker and sleeps; the worker works.
    let dir = tempfile::tempdir().unwrap();
    let both = dir.path().join("both.tlbsim");
    let n = 20_000;
    let mut ev = vec![on(MAIN), fetch(CODE), syscall(56, &[CLONE_THREAD_FLAGS, 0, 0, 0, 0], WORKER as i64)];
    ev.push(nanosleep(10_000, 10_000));
    ev.push(syscall(60, &[0], 0));
    ev.push(on(WORKER));
    work(&mut ev, n);
    ev.push(syscall(60, &[0], 0));
    write(&both, &ev);
    let alone = dir.path().join("alone.tlbsim");
    let mut ev = vec![on(MAIN), fetch(CODE)];
    work(&mut ev, n);
    ev.push(syscall(231, &[0], 0));
    write(&alone, &ev);
    // No idle-state exit: the woken sleeper would wait the built-in machine's 16.6 us.
    let no_exit = json!({"idle": {"exit_ns": 0, "poll_ns": 0, "wake_ipi_ns": 0}});
    let main_only = makespan(&run(&alone, 1, no_exit.clone()));
    let s = run(&both, 1, no_exit);
    let span = makespan(&s);
    // At least the sleep; less than the sleep plus main's work run one after the other.
    assert!(span >= 30_000, "{span}");
    assert!(span < 30_000 + main_only / 2, "span {span}, main alone {main_only}");
    assert!(main_only > 20_000, "main's work should be long enough to tell: {main_only}");
    assert_eq!(total(&s, "instructions"), n + 1);
}

#[test]
fn a_wait_woken_from_outside_takes_its_recorded_time_and_one_woken_by_a_writer_sleeps_until_the_write() {
    let dir = tempfile::tempdir().unwrap();
    // Outside: a poll blocked 5 ms with no recorded writer (a network client).
    let outside = dir.path().join("outside.tlbsim");
    two_threads(&outside, poll(1_000, 5_000_000, 1), 1_000);
    let w = build_from(&outside, true, 2, GHZ).unwrap();
    assert!(w.programs[1].contains(&Op::Block { cycles: 15_000_000 }), "{:?}", w.programs[1]);
    assert!(makespan(&run(&outside, 2, json!({}))) >= 15_000_000);
    // Inside: main writes to the pipe the worker polls (entered at 2000 ns, after the
    // poll began at 1000 ns), recorded before the poll's return.
    let inside = dir.path().join("inside.tlbsim");
    let mut ev = vec![on(MAIN), fetch(CODE), syscall(56, &[CLONE_THREAD_FLAGS, 0, 0, 0, 0], WORKER as i64)];
    ev.push(on(WORKER));
    ev.push(fetch(CODE + 8192));
    ev.push(on(MAIN));
    work(&mut ev, 3_000);
    ev.push(syscall(1, &[5, 0x7fff_2000, 1, 2_000], 0));
    ev.push(on(WORKER));
    ev.push(poll(1_000, 5_000_000, 1));
    ev.push(syscall(60, &[0], 0));
    ev.push(on(MAIN));
    ev.push(syscall(231, &[0], 0));
    write(&inside, &ev);
    let w = build_from(&inside, true, 2, GHZ).unwrap();
    w.check(2).unwrap();
    let Some(&Op::Sleep { token, count: 1 }) = w.programs[1].iter().find(|op| matches!(op, Op::Sleep { .. })) else {
        panic!("the worker should sleep on main's write: {:?}", w.programs[1]);
    };
    assert!(w.programs[0].contains(&Op::Post { token }), "{:?}", w.programs[0]);
    assert!(!w.programs[1].iter().any(|op| matches!(op, Op::Block { .. })));
    let s = run(&inside, 2, json!({}));
    // Woken by the write, after main's 3000 instructions: far less than the 5 ms recorded.
    assert!(makespan(&s) < 1_000_000, "{}", makespan(&s));
    // A write entered before the poll began did not wake it: outside again.
    let before = dir.path().join("before.tlbsim");
    let mut ev = vec![on(MAIN), fetch(CODE), syscall(56, &[CLONE_THREAD_FLAGS, 0, 0, 0, 0], WORKER as i64)];
    ev.push(syscall(1, &[5, 0x7fff_2000, 1, 500], 0));
    ev.push(on(WORKER));
    ev.push(poll(1_000, 5_000_000, 1));
    ev.push(syscall(60, &[0], 0));
    ev.push(on(MAIN));
    ev.push(syscall(231, &[0], 0));
    write(&before, &ev);
    assert!(build_from(&before, true, 2, GHZ).unwrap().programs[1].contains(&Op::Block { cycles: 15_000_000 }));
}

/// Main maps 8 pages and clones a worker that reads them, then blocks (`block`, or
/// nothing) and reads them again; meanwhile main write-protects and unprotects the region
/// `rounds` times.
fn protect_while_blocked(path: &Path, block: Option<TraceEvent>, rounds: u64) {
    let mut ev = vec![on(MAIN), fetch(CODE), syscall(56, &[CLONE_THREAD_FLAGS, 0, 0, 0, 0], WORKER as i64)];
    ev.push(syscall(9, &[0, 8 * 4096, 3, 0x22, u64::MAX, 0], HEAP as i64));
    ev.push(on(WORKER));
    for p in 0..8 {
        ev.push(fetch(CODE + 8192));
        ev.push(load(HEAP + p * 4096));
    }
    ev.push(on(MAIN));
    for r in 0..rounds {
        ev.push(fetch(CODE + 4 * r));
        ev.push(syscall(10, &[HEAP, 8 * 4096, 1], 0));
        ev.push(syscall(10, &[HEAP, 8 * 4096, 3], 0));
    }
    ev.push(on(WORKER));
    ev.extend(block);
    for p in 0..8 {
        ev.push(fetch(CODE + 8192));
        ev.push(load(HEAP + p * 4096));
    }
    ev.push(syscall(60, &[0], 0));
    ev.push(on(MAIN));
    ev.push(syscall(231, &[0], 0));
    write(path, &ev);
}

#[test]
fn a_blocked_threads_cpu_idles_lazy_and_gets_no_shootdown_ipi() {
    let dir = tempfile::tempdir().unwrap();
    let rounds = 20;
    let (blocked, running) = (dir.path().join("blocked.tlbsim"), dir.path().join("running.tlbsim"));
    // The worker waits in epoll_wait 10 ms for a client outside the recording.
    protect_while_blocked(&blocked, Some(syscall(232, &[3, 0x7fff_3000, 8, u64::MAX, 1_000, 10_000_000], 1)), rounds);
    protect_while_blocked(&running, None, rounds);
    let b = run(&blocked, 2, json!({}));
    let r = run(&running, 2, json!({}));
    for s in [&b, &r] {
        assert_eq!(total(s, "violations_security"), 0);
        assert_eq!(total(s, "violations_consistency"), 0);
    }
    // Running (the recording without the wait): the worker waits on its CPU for main's
    // last mprotect, in the address space, and receives the write-protections' flushes.
    assert!(total(&r, "shootdown_ipis_received") >= rounds, "{}", r["totals"]);
    // Blocked: its CPU is idle and lazy while main changes the protections (no page table
    // is freed): Linux sends it nothing.
    assert_eq!(total(&b, "shootdown_ipis_received"), 0, "{}", b["totals"]);
    assert!(total(&b, "idle_cycles") >= 25_000_000, "{}", b["totals"]);
}

#[test]
fn file_reads_and_writes_go_through_the_page_cache_and_the_storage_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("file.tlbsim");
    let file = TraceEvent::File { dev: 2049, ino: 77 };
    let mut ev = vec![on(MAIN)];
    work(&mut ev, 50);
    // pread64(fd 3, buf, 12288, offset 4096): pages 1..4, read from the device.
    ev.push(file);
    ev.push(syscall(17, &[3, 0x7fff_4000, 12288, 4096], 12288));
    work(&mut ev, 50);
    // read(fd 3, buf, 8192) at offset 8192: pages 2 and 3, in the page cache now.
    ev.push(file);
    ev.push(syscall(0, &[3, 0x7fff_4000, 8192, 8192], 8192));
    // write(fd 3, buf, 4096) at offset 5 * 4096: a whole new page, not read.
    ev.push(file);
    ev.push(syscall(1, &[3, 0x7fff_4000, 4096, 5 * 4096], 4096));
    // read of a failed call (-EBADF): nothing.
    ev.push(file);
    ev.push(syscall(0, &[9, 0x7fff_4000, 4096, 0], -9));
    ev.push(syscall(231, &[0], 0));
    write(&path, &ev);
    let w = build_from(&path, true, 1, GHZ).unwrap();
    w.check(1).unwrap();
    let io: Vec<&Op> = w.programs[0].iter().filter(|op| matches!(op, Op::FileIo { .. })).collect();
    assert_eq!(
        io,
        vec![
            &Op::FileIo { file: 0, offset: 4096, len: 12288, write: false },
            &Op::FileIo { file: 0, offset: 8192, len: 8192, write: false },
            &Op::FileIo { file: 0, offset: 5 * 4096, len: 4096, write: true },
        ]
    );
    assert_eq!(w.files.len(), 1);
    assert!(w.files[0].pages >= 6);
    // Stalling device (the default): 4 page-cache misses (3 read, 1 written whole), no sleep.
    let s = run(&path, 1, json!({}));
    assert_eq!(total(&s, "page_cache_misses"), 4, "{}", s["totals"]);
    assert_eq!(total(&s, "io_sleeps"), 0);
    // An SSD whose reads sleep (90 µs each, machine.storage = "ssd"): the pread sleeps
    // for its three reads, the core idle meanwhile.
    let ssd = run(&path, 1, json!({"storage": "ssd"}));
    assert_eq!(total(&ssd, "page_cache_misses"), 4);
    assert_eq!(total(&ssd, "io_sleeps"), 1, "{}", ssd["totals"]);
    let three_reads = (3.0 * 90_000.0 * GHZ) as u64;
    assert!(total(&ssd, "idle_cycles") >= three_reads, "{}", ssd["totals"]);
    assert!(makespan(&ssd) >= three_reads);
}

/// Issue 47 item 3: a forked child that creates a thread (a prefork server's worker with
/// threads) replays with its own threads: the child's clone is an `Op::Clone` of the
/// thread's program in the child's process, and its munmap reaches the thread's CPU.
#[test]
fn a_forked_childs_threads_replay_in_the_child() {
    const CHILD: u32 = 200;
    const CHILD_THREAD: u32 = 201;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("prefork.tlbsim");
    let mut ev = vec![on(MAIN), fetch(CODE), syscall(57, &[], CHILD as i64)];
    ev.push(on(CHILD));
    ev.push(fetch(CODE + 64));
    ev.push(syscall(56, &[CLONE_THREAD_FLAGS, 0, 0, 0, 0], CHILD_THREAD as i64));
    ev.push(syscall(9, &[0, 8 * 4096, 3, 0x22, u64::MAX, 0], HEAP as i64));
    ev.push(on(CHILD_THREAD));
    for p in 0..8 {
        ev.push(fetch(CODE + 8192));
        ev.push(load(HEAP + p * 4096));
    }
    ev.push(on(CHILD));
    ev.push(syscall(11, &[HEAP, 8 * 4096], 0));
    ev.push(on(CHILD_THREAD));
    // The thread goes on running (its own code) while the child unmaps.
    work(&mut ev, 5_000);
    ev.push(syscall(60, &[0], 0));
    ev.push(on(CHILD));
    ev.push(syscall(231, &[0], 0));
    ev.push(on(MAIN));
    ev.push(syscall(231, &[0], 0));
    write(&path, &ev);
    let w = build_from(&path, true, 2, GHZ).unwrap();
    w.check(2).unwrap();
    assert_eq!(w.processes.len(), 1, "the root process is declared; the child is forked");
    assert_eq!(w.processes[0].threads.len(), 1);
    // Builder threads in order of appearance: main 0, child 1, its thread 2.
    assert!(w.programs[0].iter().any(|op| matches!(op, Op::Fork { program: 1, .. })), "{:?}", w.programs[0]);
    assert!(w.programs[1].contains(&Op::Clone { program: 2 }), "{:?}", w.programs[1]);
    assert!(w.held_threads.is_empty());
    let s = run(&path, 2, json!({}));
    assert_eq!(total(&s, "instructions"), 1 + 1 + 8 + 5_000);
    assert_eq!(total(&s, "segv_signals"), 0);
    assert_eq!(total(&s, "violations_security"), 0);
    assert_eq!(total(&s, "violations_consistency"), 0);
    // The child's munmap waited for its thread's reads; the thread, still running in the
    // child's address space on the other core, receives the flush.
    assert!(total(&s, "shootdown_ipis_received") >= 1, "{}", s["totals"]);
}
