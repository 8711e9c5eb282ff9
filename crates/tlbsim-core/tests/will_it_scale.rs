//! `will-it-scale` (workload/generators/will_it_scale.rs): each iteration writes a page,
//! zaps it with madvise(MADV_DONTNEED) and reads it again; as threads every zap shoots down
//! the other tasks' CPUs, as processes none; `linux-invlpgb` changes nothing for a process
//! on fewer than four CPUs (no global ASID) and replaces the IPIs by broadcasts above.

use serde_json::{json, Value};

fn run(test: &str, mode: &str, threads: u32, policy: &str) -> Value {
    tlbsim_core::run(
        json!({"machine": {"sockets": 1, "cores_per_socket": 8}, "os": {"coherence": policy},
               "workload": {"kind": "will-it-scale", "test": test, "mode": mode, "threads": threads, "ops": 600}}),
        &[],
        std::path::Path::new("."),
    )
    .unwrap()
    .stats
}

fn total(v: &Value, k: &str) -> u64 {
    v["totals"][k].as_u64().unwrap_or_else(|| panic!("{k}"))
}

#[test]
fn every_iteration_is_a_write_fault_a_zap_and_a_read_fault() {
    for test in ["tlb_flush1", "tlb_flush2", "tlb_flush3"] {
        let threads = run(test, "threads", 4, "linux");
        assert_eq!(v_ops(&threads), 4 * 600, "{test}");
        assert_eq!(threads["totals"]["syscalls_by_call"]["madvise"]["calls"], 4 * 600, "{test}");
        // Each zap flushes the other three tasks' CPUs; as processes, nobody else's.
        assert!(total(&threads, "shootdown_ipis_received") >= 3 * 4 * 600 * 9 / 10, "{test}: {}", threads["totals"]);
        let processes = run(test, "processes", 4, "linux");
        assert_eq!(total(&processes, "shootdown_ipis_received"), 0, "{test}");
        // Two faults per iteration (the write's and the read's), the file tests' page-cache
        // reads aside.
        assert!(total(&processes, "page_faults") >= 2 * 4 * 600, "{test}: {}", total(&processes, "page_faults"));
        assert!(run_makespan(&processes) < run_makespan(&threads), "{test}");
    }
}

fn v_ops(v: &Value) -> u64 {
    v["per_class"]["task"]["ops_completed"].as_u64().expect("ops_completed")
}

fn run_makespan(v: &Value) -> u64 {
    v["run"]["makespan_cycles"].as_u64().unwrap()
}

#[test]
fn invlpgb_needs_four_cpus_then_replaces_the_ipis() {
    let (linux2, invlpgb2) = (run("tlb_flush2", "threads", 2, "linux"), run("tlb_flush2", "threads", 2, "linux-invlpgb"));
    assert_eq!(run_makespan(&linux2), run_makespan(&invlpgb2), "2 tasks: no global ASID, Linux's IPIs");
    let (linux8, invlpgb8) = (run("tlb_flush2", "threads", 8, "linux"), run("tlb_flush2", "threads", 8, "linux-invlpgb"));
    assert!(total(&invlpgb8, "shootdown_ipis_received") * 20 < total(&linux8, "shootdown_ipis_received"));
    assert!(run_makespan(&invlpgb8) < run_makespan(&linux8));
}

#[test]
fn a_bad_test_or_mode_is_named() {
    let err = |w: Value| tlbsim_core::run(json!({"workload": w}), &[], std::path::Path::new(".")).err().unwrap().to_string();
    assert!(err(json!({"kind": "will-it-scale", "test": "tlb_flush4"})).contains("workload.test"));
    assert!(err(json!({"kind": "will-it-scale", "mode": "fibers"})).contains("workload.mode"));
}
