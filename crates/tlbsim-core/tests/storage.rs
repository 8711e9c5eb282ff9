//! Storage devices behind the page cache (`machine.storage`, config/storage.rs): a device
//! read costs its latency; on an SSD the faulting thread sleeps for it (its core idles and,
//! being lazy, is skipped by shootdowns), on nullblk the core stalls in the kernel.

use serde_json::{json, Value};

fn run(tree: Value) -> Value {
    tlbsim_core::run(tree, &[], std::path::Path::new(".")).unwrap().stats
}

fn io_run(storage: &str, case: u32, threads: u32) -> Value {
    run(json!({"machine": {"cores_per_socket": 4, "storage": storage, "frequency_ghz": 2.0},
               "workload": {"kind": "fpr-munmap", "case": case, "threads": threads, "ops": 200, "file_pages": 1 << 20}}))
}

#[test]
fn an_ssd_read_puts_the_thread_to_sleep_for_its_latency() {
    let (ssd, nullblk) = (io_run("ssd", 1, 1), io_run("nullblk", 1, 1));
    // 200 steps, nearly all page-cache misses of a 4 GiB file.
    let misses = ssd["totals"]["page_cache_misses"].as_u64().unwrap();
    assert!(misses >= 195, "{misses}");
    assert_eq!(ssd["totals"]["io_sleeps"].as_u64().unwrap(), misses);
    assert_eq!(nullblk["totals"]["io_sleeps"].as_u64().unwrap(), 0);
    // 90 µs per read at 2 GHz: the run lasts at least the reads, asleep (the core idles).
    let makespan = ssd["run"]["makespan_cycles"].as_u64().unwrap();
    assert!(makespan >= misses * 180_000, "{makespan}");
    let idle = ssd["per_core"][0]["idle_cycles"].as_u64().unwrap();
    assert!(idle >= misses * 170_000, "idle {idle}");
    assert!(nullblk["run"]["makespan_cycles"].as_u64().unwrap() < makespan / 20);
}

#[test]
fn a_sleeping_io_thread_costs_the_compute_threads_their_shootdowns_all_the_same() {
    // Case 2: the I/O thread's munmaps still reach the compute threads (they run the mm);
    // only its own core, asleep, is lazy.
    let ssd = io_run("ssd", 2, 3);
    let t = &ssd["totals"];
    assert!(t["shootdown_ipis_received"].as_u64().unwrap() >= 3 * 190, "{t}");
    // Case 1 with two I/O threads: each spends nearly all its time asleep in a read, so the
    // other's munmaps find its core lazy and skip it (FPR §II's lazy shootdowns); few IPIs.
    let two = io_run("ssd", 1, 2);
    let t = &two["totals"];
    assert!(t["shootdowns_deferred_lazy"].as_u64().unwrap() > 200, "{t}");
    assert!(t["shootdown_ipis_received"].as_u64().unwrap() < 100, "{t}");
    assert_eq!(t["violations_security"].as_u64().unwrap() + t["violations_consistency"].as_u64().unwrap(), 0);
}

#[test]
fn a_bad_device_is_named() {
    let Err(err) = tlbsim_core::run(json!({"machine": {"storage": "tape"}, "workload": {"kind": "fpr-munmap"}}), &[], std::path::Path::new(".")) else {
        panic!("a bad device accepted")
    };
    assert!(err.to_string().contains("machine.storage"), "{err}");
}

/// A thread that blocks on a read at the end of its core's step must not run again before
/// the read completes. It once did: with compute threads on the other cores and nothing
/// (no shootdown under FPR) tying the I/O thread to them, the wake-up reached its core
/// before the core had noted itself idle, the clock stayed put, and half of each sleep
/// was lost.
#[test]
fn an_io_thread_sleeps_its_whole_read_beside_busy_cores() {
    let v = run(json!({"machine": {"cores_per_socket": 4, "storage": "ssd", "frequency_ghz": 2.0},
                       "os": {"recycling": "fpr"}, "recycling": {"fpr": {"recycle_tables": true}},
                       "workload": {"kind": "fpr-munmap", "case": 2, "threads": 3, "ops": 200, "file_pages": 1 << 20}}));
    let misses = v["totals"]["page_cache_misses"].as_u64().unwrap();
    let io = v["per_thread"].as_array().unwrap().iter().find(|t| t["class"] == "io").unwrap();
    let end = io["end_cycle"].as_u64().unwrap();
    assert!(end >= misses * 180_000, "the I/O thread ended at {end}, before its {misses} reads of 180,000 cycles");
}
