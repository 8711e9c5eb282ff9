//! The run-time allocator (os/alloc.rs, issue 46 item 6): `Op::Malloc`/`Op::Free` run glibc's
//! malloc against the process's arenas as the threads execute them. A free by a thread
//! other than the allocating one goes to the chunk's own arena and trims it; the trims
//! follow the order in which the frees really run, as a hand model of heap_trim predicts;
//! mapped chunks are mmap'd and munmap'd; bad pointers are clean errors.

use serde_json::{json, Value};
use tlbsim_core::workload::program::*;
use tlbsim_core::workload::ptmalloc::Glibc;

const BUF: u64 = 64 << 10;

fn fill(slot: usize) -> Op {
    Op::Access { slot, pattern: Pattern::Pages, mode: AccessMode::Write, count: 1, offset: 0, len: 0, stride: 4096 }
}

/// Thread "producer" (core 0) mallocs `n` buffers of `bytes` and writes them, then posts
/// token 0 and sleeps on token 1; thread "consumer" (core 1) sleeps on token 0, frees them
/// in `order`, and posts token 1.
fn handoff(n: u32, bytes: u64, order: &[u32], glibc: Glibc) -> Workload {
    let mut producer = Vec::new();
    for p in 0..n {
        producer.push(Op::Malloc { ptr: p, bytes, slot: 0 });
        producer.push(fill(0));
    }
    producer.extend([Op::Post { token: 0 }, Op::Sleep { token: 1, count: 1 }, Op::Exit]);
    let mut consumer = vec![Op::Sleep { token: 0, count: 1 }];
    for &p in order {
        consumer.push(Op::Free { ptr: p });
    }
    consumer.extend([Op::Post { token: 1 }, Op::Exit]);
    Workload {
        slots: 1,
        pointers: n,
        tokens: 2,
        glibc,
        ..crate::common::two_pinned_threads(vec![], ("producer", producer, false), ("consumer", consumer, false))
    }
}

fn run(w: Workload) -> tlbsim_core::Result<Value> {
    let cfg = tlbsim_core::config::Config::resolve(json!({"machine": {"cores_per_socket": 2}}), &[], std::path::Path::new(".")).unwrap();
    tlbsim_core::os::run(&cfg, w)
}

fn calls(stats: &Value, call: &str) -> u64 {
    stats["syscalls_by_call"][call]["calls"].as_u64().unwrap_or(0)
}

/// heap_trim by hand (glibc 2.23 arena.c): a fresh thread arena's heap is its header
/// (0x8b0 bytes) and M_TOP_PAD (128 KiB) in whole pages and grows page by page; `n`
/// chunks of `bytes` (+ 8, rounded to 16) are cut from the top in order; each free merges
/// with its free neighbours and with the top, and when the merged chunk is 64 KiB or more
/// the top's size beyond pad + MINSIZE + 1, in whole pages, goes back (one madvise) if
/// that is a page or more. Returns the madvise calls the frees in `order` make. `head`:
/// bytes allocated before the buffers (glibc 2.26+'s tcache, a 656-byte chunk).
fn hand_model(n: u64, bytes: u64, order: &[u64], head: u64) -> u64 {
    let page = 4096;
    let pad: u64 = 128 << 10;
    let chunk = (bytes + 8).div_ceil(16) * 16;
    let header = 0x8b0 + head;
    let mut size = (header + pad).div_ceil(page) * page;
    for i in 0..n {
        let end = header + (i + 1) * chunk + 32;
        if end > size {
            size = end.div_ceil(page) * page;
        }
    }
    // Chunks still in use, and where the top starts.
    let mut live: Vec<bool> = vec![true; n as usize];
    let mut top = header + n * chunk;
    let mut trims = 0;
    for &i in order {
        live[i as usize] = false;
        // The free run around chunk i (its free neighbours).
        let (mut lo, mut hi) = (i, i + 1);
        while lo > 0 && !live[lo as usize - 1] && header + lo * chunk < top {
            lo -= 1;
        }
        while hi < n && !live[hi as usize] {
            hi += 1;
        }
        let start = header + lo * chunk;
        let merged = if header + hi * chunk >= top {
            top = start;
            size - start
        } else {
            (hi - lo) * chunk
        };
        if merged >= 64 << 10 {
            let extra = (size - top).saturating_sub(pad + 32 + 1) / page * page;
            if extra >= page {
                size -= extra;
                trims += 1;
            }
        }
    }
    trims
}

#[test]
fn a_free_by_another_thread_trims_the_allocating_threads_arena() {
    let lifo: Vec<u32> = (0..6).rev().collect();
    let s = run(handoff(6, BUF, &lifo, Glibc::V2_23)).unwrap();
    let expected = hand_model(6, BUF, &[5, 4, 3, 2, 1, 0], 0);
    assert!(expected >= 3, "the hand model trims {expected} times");
    assert_eq!(calls(&s["totals"], "madvise"), expected, "{}", s["totals"]["syscalls_by_call"]);
    // Every trim is the consumer's system call (core 1), in the producer's arena: its
    // pages are in core 0's TLB. The producer sleeps meanwhile (core 0 idle in lazy TLB
    // mode), so each trim's flush of core 0 is an IPI or deferred to its lazy switch.
    assert_eq!(calls(&s["per_core"][1], "madvise"), expected);
    assert_eq!(calls(&s["per_core"][0], "madvise"), 0);
    let t = &s["totals"];
    let flushed = t["shootdowns_sent_by_reason"]["madvise_dontneed"].as_u64().unwrap() + t["shootdowns_deferred_lazy"].as_u64().unwrap();
    assert!(flushed >= expected, "{t}");
    // Two arenas? No: only the producer mallocs, so the one heap is its arena's (an mmap).
    assert_eq!(calls(&s["totals"], "mmap"), 1);
}

#[test]
fn trims_follow_the_order_the_frees_run_in_as_heap_trim_by_hand_predicts() {
    let n = 6;
    let fifo: Vec<u32> = (0..n).collect();
    let lifo: Vec<u32> = (0..n).rev().collect();
    let middle_out: Vec<u32> = vec![2, 3, 1, 4, 0, 5];
    let mut counts = Vec::new();
    for order in [&fifo, &lifo, &middle_out] {
        let s = run(handoff(n, BUF, order, Glibc::V2_23)).unwrap();
        let order64: Vec<u64> = order.iter().map(|&p| p as u64).collect();
        let expected = hand_model(n as u64, BUF, &order64, 0);
        assert_eq!(calls(&s["totals"], "madvise"), expected, "order {order:?}");
        counts.push(expected);
    }
    // In allocation order the freed chunks reach the top only with the last free: one
    // trim. From the top down, every free after the pad is full trims.
    assert_eq!(counts[0], 1);
    assert!(counts[1] > counts[0] + 2, "{counts:?}");
}

#[test]
fn glibc_2_26_and_2_23_trim_alike_until_the_trim_threshold_rises() {
    let lifo: Vec<u32> = (0..6).rev().collect();
    let old = run(handoff(6, BUF, &lifo, Glibc::V2_23)).unwrap();
    let new = run(handoff(6, BUF, &lifo, Glibc::V2_26)).unwrap();
    let order: Vec<u64> = (0..6).rev().collect();
    assert_eq!(calls(&old["totals"], "madvise"), hand_model(6, BUF, &order, 0));
    // 2.26+: the producer's tcache (656 bytes) comes first in its arena; the consumer's
    // first free sets up its own tcache, in an arena of its own (a second heap mapped).
    assert_eq!(calls(&new["totals"], "madvise"), hand_model(6, BUF, &order, 656));
    assert_eq!(calls(&old["totals"], "mmap"), 1);
    assert_eq!(calls(&new["totals"], "mmap"), 2);
    // A mapped chunk of 1 MiB freed first raises the mmap threshold to its size and the
    // trim threshold to twice that (2 MiB): 2.26's heap_trim then keeps a top under it.
    let raise = |glibc| {
        let mut w = handoff(6, BUF, &lifo, glibc);
        w.pointers = 7;
        let p = &mut w.programs[0];
        p.insert(0, Op::Free { ptr: 6 });
        p.insert(0, Op::Malloc { ptr: 6, bytes: 1 << 20, slot: 0 });
        run(w).unwrap()
    };
    let (old, new) = (raise(Glibc::V2_23), raise(Glibc::V2_26));
    for s in [&old, &new] {
        assert_eq!(calls(&s["totals"], "munmap"), 1);
    }
    // The producer's heap and the mapped chunk (2.26+: and the consumer's heap).
    assert_eq!(calls(&old["totals"], "mmap"), 2);
    assert_eq!(calls(&new["totals"], "mmap"), 3);
    assert!(calls(&old["totals"], "madvise") >= 3);
    // 6 × 64 KiB is under 2 MiB: no trim at all.
    assert_eq!(calls(&new["totals"], "madvise"), 0);
}

#[test]
fn a_mapped_chunk_raises_the_threshold_so_the_next_one_comes_from_the_heap() {
    // malloc(1 MiB) maps (threshold 128 KiB); its free unmaps and raises the threshold to
    // the mapping's size; malloc(1 MiB) again is then under it and comes from the arena.
    let mut w = handoff(0, BUF, &[], Glibc::V2_26);
    w.pointers = 2;
    w.programs[0] = vec![
        Op::Malloc { ptr: 0, bytes: 1 << 20, slot: 0 },
        fill(0),
        Op::Free { ptr: 0 },
        Op::Malloc { ptr: 1, bytes: 1 << 20, slot: 0 },
        fill(0),
        Op::Post { token: 0 },
        Op::Sleep { token: 1, count: 1 },
        Op::Exit,
    ];
    let s = run(w).unwrap();
    assert_eq!(calls(&s["totals"], "mmap"), 2, "{}", s["totals"]["syscalls_by_call"]);
    assert_eq!(calls(&s["totals"], "munmap"), 1);
}

#[test]
fn the_run_time_allocator_is_deterministic() {
    let order: Vec<u32> = vec![2, 3, 1, 4, 0, 5];
    let a = run(handoff(6, BUF, &order, Glibc::V2_23)).unwrap();
    let b = run(handoff(6, BUF, &order, Glibc::V2_23)).unwrap();
    assert_eq!(a, b);
}

#[test]
fn a_bad_pointer_is_a_clean_error_naming_the_thread_and_pointer() {
    // A double free.
    let err = run(handoff(2, BUF, &[0, 1, 0], Glibc::V2_26)).unwrap_err().to_string();
    assert!(err.contains("consumer") && err.contains("pointer 0") && err.contains("no live allocation"), "{err}");
    // A pointer the workload does not have.
    let mut w = handoff(2, BUF, &[0, 1], Glibc::V2_26);
    w.programs[1].insert(1, Op::Free { ptr: 9 });
    let err = run(w).unwrap_err().to_string();
    assert!(err.contains("no pointer 9"), "{err}");
    // malloc over a live pointer.
    let mut w = handoff(2, BUF, &[0, 1], Glibc::V2_26);
    w.programs[0].insert(1, Op::Malloc { ptr: 0, bytes: 64, slot: 0 });
    let err = run(w).unwrap_err().to_string();
    assert!(err.contains("producer") && err.contains("live allocation"), "{err}");
}

/// bench/malloc_handoff.c's `step` order: one buffer at a time, malloc by the producer,
/// handed over, freed by the consumer, and only then the next malloc.
fn handoff_step(n: u32, bytes: u64, glibc: Glibc) -> Workload {
    let mut w = handoff(n, bytes, &[], glibc);
    let mut producer = Vec::new();
    let mut consumer = Vec::new();
    for p in 0..n {
        producer.extend([Op::Malloc { ptr: p, bytes, slot: 0 }, fill(0), Op::Post { token: 0 }, Op::Sleep { token: 1, count: p + 1 }]);
        consumer.extend([Op::Sleep { token: 0, count: p + 1 }, Op::Free { ptr: p }, Op::Post { token: 1 }]);
    }
    producer.push(Op::Exit);
    consumer.push(Op::Exit);
    w.programs = vec![producer, consumer];
    w
}

/// bench/malloc_handoff.c's shapes (64 buffers of 64 KiB, glibc 2.36) simulated: the counts
/// the report compares with `strace -f -c` of the native program. The hand model decides
/// the trims; mmap: the producer's heap and the consumer's (its tcache's arena).
#[test]
fn the_malloc_handoff_bench_shapes_trim_as_the_hand_model_says() {
    let n = 64u32;
    let fifo: Vec<u32> = (0..n).collect();
    let lifo: Vec<u32> = (0..n).rev().collect();
    let cases = [("fifo", handoff(n, BUF, &fifo, Glibc::V2_26)), ("lifo", handoff(n, BUF, &lifo, Glibc::V2_26)), ("step", handoff_step(n, BUF, Glibc::V2_26))];
    for (name, w) in cases {
        let s = run(w).unwrap();
        let t = &s["totals"];
        println!("malloc_handoff {name} {n} {BUF}: madvise {} mmap {} munmap {}", calls(t, "madvise"), calls(t, "mmap"), calls(t, "munmap"));
        let expected = match name {
            "fifo" => hand_model(n as u64, BUF, &fifo.iter().map(|&p| p as u64).collect::<Vec<_>>(), 656),
            "lifo" => hand_model(n as u64, BUF, &lifo.iter().map(|&p| p as u64).collect::<Vec<_>>(), 656),
            // One chunk at a time: the top never holds more than the pad and one chunk.
            _ => 0,
        };
        assert_eq!(calls(t, "madvise"), expected, "{name}");
        assert_eq!(calls(t, "mmap"), 2, "{name}");
        assert_eq!(calls(t, "munmap"), 0, "{name}");
    }
}

/// The scenario of `a_free_by_another_thread_trims_the_allocating_threads_arena` in the
/// scenario language: the producer mallocs six buffers and writes them; after a barrier
/// the consumer reads the first through `use-pointer` and frees them from the top down;
/// the producer lives until a second barrier after the frees (a thread that has exited
/// leaves its arena free for the next thread that needs one, arena.c get_free_list).
fn scenario(glibc: &str, extra: Option<Value>) -> tlbsim_core::Result<Value> {
    let mut producer = Vec::new();
    for p in 0..6 {
        producer.push(json!({"op": "malloc", "pointer": format!("b{p}"), "bytes": BUF}));
        producer.push(json!({"op": "access", "region": format!("b{p}"), "mode": "write", "count": BUF / 4096, "stride": 4096}));
    }
    producer.extend([json!({"op": "barrier"}), json!({"op": "barrier"})]);
    let mut consumer = vec![json!({"op": "barrier"}), json!({"op": "use-pointer", "pointer": "b0"}), json!({"op": "access", "region": "b0", "count": 4})];
    consumer.extend((0..6).rev().map(|p| json!({"op": "free", "pointer": format!("b{p}")})));
    if let Some(op) = extra {
        consumer.push(op);
    }
    consumer.push(json!({"op": "barrier"}));
    let threads = json!([{"name": "producer", "core": 0, "program": producer}, {"name": "consumer", "core": 1, "program": consumer}]);
    let tree = json!({"machine": {"cores_per_socket": 2}, "workload": {"kind": "scenario", "scenario": {"glibc": glibc, "process": [{"name": "p", "thread": threads}]}}});
    tlbsim_core::run(tree, &[], std::path::Path::new(".")).map(|r| r.stats)
}

#[test]
fn the_scenario_language_runs_the_allocator() {
    let s = scenario("2.23", None).unwrap();
    assert_eq!(calls(&s["totals"], "madvise"), hand_model(6, BUF, &[5, 4, 3, 2, 1, 0], 0), "{}", s["totals"]["syscalls_by_call"]);
    assert_eq!(calls(&s["per_core"][0], "madvise"), 0, "the consumer's frees trim the producer's arena");
    assert_eq!(calls(&s["totals"], "mmap"), 1, "one arena heap");
    // 2.36 (any 2.26+): the consumer's first free makes its tcache in an arena of its own.
    let new = scenario("2.36", None).unwrap();
    assert_eq!(calls(&new["totals"], "mmap"), 2);
    assert_eq!(calls(&new["totals"], "madvise"), hand_model(6, BUF, &[5, 4, 3, 2, 1, 0], 656));
    // A realloc of a freed pointer is the allocator's clean error; bad keys name themselves.
    let e = scenario("2.36", Some(json!({"op": "realloc", "pointer": "b1", "bytes": 4096}))).unwrap_err().to_string();
    assert!(e.contains("consumer") && e.contains("pointer"), "{e}");
    let key = |op: Value| scenario("2.36", Some(op)).unwrap_err().to_string();
    let at = "workload.scenario.process[0].thread[1].program[9]";
    assert!(key(json!({"op": "free"})).contains(&format!("{at}.pointer")));
    assert!(key(json!({"op": "malloc", "pointer": "c"})).contains(&format!("{at}.bytes")));
    assert!(key(json!({"op": "malloc", "pointer": "c", "bytes": 0})).contains(&format!("{at}.bytes")));
    assert!(key(json!({"op": "free", "pointer": "c", "bytes": 1})).contains(&format!("{at}.bytes")));
    assert!(scenario("2.30", None).unwrap_err().to_string().contains("workload.scenario.glibc"));
}
