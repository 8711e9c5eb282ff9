//! `workload.kind = "parsec-like"` (workload/parsec.rs) over the glibc malloc model
//! (workload/ptmalloc.rs, run by the engine: os/alloc.rs): dedup's shootdowns are its compressors' heap trims, every unique
//! chunk is compressed once, the trimmed pages fault in again, and no policy uses a stale
//! translation.

fn run(policy: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut tree = serde_json::json!({
        "machine": {"sockets": 1, "cores_per_socket": 8},
        "os": {"coherence": policy},
        "workload": {"kind": "parsec-like", "test": "dedup", "threads": 2, "region_bytes": 8 << 20},
    });
    if let serde_json::Value::Object(m) = extra {
        for (k, v) in m {
            tree["workload"][k] = v;
        }
    }
    tlbsim_core::run(tree, &[], std::path::Path::new(".")).unwrap().stats
}

fn total(s: &serde_json::Value, key: &str) -> u64 {
    s["totals"][key].as_u64().unwrap_or_else(|| panic!("totals.{key}"))
}

#[test]
fn dedup_shootdowns_are_heap_trims_and_the_trimmed_pages_fault_in_again() {
    let linux = run("linux", serde_json::json!({}));
    let by_reason = &linux["totals"]["shootdowns_sent_by_reason"];
    let trims = by_reason["madvise_dontneed"].as_u64().unwrap();
    // 8 MiB of input: about 2,000 fine chunks, 80% of them compressed, each compress()
    // freeing four 64 KiB zlib buffers next to the top chunk.
    assert!(trims > 1_000, "{trims} madvise shootdowns");
    // The two read buffers' munmaps are the only other shootdowns.
    assert!(total(&linux, "shootdowns_sent") - trims <= 4, "{by_reason}");
    // Every trim gave back pages that a later compress() faults in again.
    let faults = total(&linux, "page_faults");
    assert!(faults > 3 * trims, "{faults} faults for {trims} trims");
    // One operation per unique chunk, all compressed by the two compressors.
    let compress = &linux["per_class"]["compress"];
    let ops = compress["ops_completed"].as_u64().unwrap();
    assert!((1_400..=1_900).contains(&ops), "{ops} chunks compressed");
    assert_eq!(total(&linux, "violations_security") + total(&linux, "violations_consistency"), 0);
}

#[test]
fn dedup_does_the_same_work_under_every_policy_and_abis_flushes_private_trims_locally() {
    let linux = run("linux", serde_json::json!({}));
    let abis = run("abis", serde_json::json!({}));
    let oracle = run("oracle", serde_json::json!({}));
    let ops = |s: &serde_json::Value| s["per_class"]["compress"]["ops_completed"].as_u64().unwrap();
    assert_eq!(ops(&linux), ops(&abis));
    assert_eq!(ops(&linux), ops(&oracle));
    // The allocator runs at run time (os/alloc.rs): where the writer's frees fall among a
    // compressor's own calls depends on the run's timing, which the policy moves, so the
    // trims differ a little between policies (they were equal while the allocator ran when
    // the programs were built, in an assumed order); the work they follow is the same.
    let trims = |s: &serde_json::Value| s["totals"]["syscalls_by_call"]["madvise"]["calls"].as_u64().unwrap() as f64;
    assert!((trims(&linux) / trims(&abis) - 1.0).abs() < 0.05, "{} {}", trims(&linux), trims(&abis));
    // A compressor's zlib buffers are touched by its own core only.
    assert!(total(&abis, "shootdowns_sent") * 10 < total(&linux, "shootdowns_sent"));
    for s in [&abis, &oracle] {
        assert_eq!(total(s, "violations_security") + total(s, "violations_consistency"), 0);
    }
}

#[test]
fn dedup_is_deterministic_and_the_seed_moves_the_chunk_boundaries() {
    let a = run("linux", serde_json::json!({}));
    let b = run("linux", serde_json::json!({}));
    assert_eq!(a["totals"], b["totals"]);
    let mut tree = serde_json::json!({
        "machine": {"sockets": 1, "cores_per_socket": 8},
        "workload": {"kind": "parsec-like", "test": "dedup", "threads": 2, "region_bytes": 8 << 20},
        "seed": 99,
    });
    tree["os"] = serde_json::json!({"coherence": "linux"});
    let c = tlbsim_core::run(tree, &[], std::path::Path::new(".")).unwrap().stats;
    assert_ne!(a["totals"]["page_faults"], c["totals"]["page_faults"]);
}

#[test]
fn a_parsec_like_program_that_is_not_built_is_a_clean_error_naming_the_field() {
    let tree = serde_json::json!({"workload": {"kind": "parsec-like", "test": "ferret"}});
    let err = tlbsim_core::run(tree, &[], std::path::Path::new(".")).err().unwrap().to_string();
    assert!(err.contains("workload.test") && err.contains("ferret"), "{err}");
    let tree = serde_json::json!({"workload": {"kind": "parsec-like", "test": "dedup", "region_bytes": 4096}});
    let err = tlbsim_core::run(tree, &[], std::path::Path::new(".")).err().unwrap().to_string();
    assert!(err.contains("workload.region_bytes"), "{err}");
}

fn canneal(policy: &str, numa: bool) -> serde_json::Value {
    // The scanner's keys only with the scanner (a run refuses settings that cannot matter).
    let os = if numa {
        serde_json::json!({"coherence": policy, "numa_balancing": true, "numa_hint_order": "restore-first",
               "numa_scan_delay_ms": 0.05, "numa_scan_period_ms": 0.2, "numa_scan_period_max_ms": 2.0})
    } else {
        serde_json::json!({"coherence": policy})
    };
    let tree = serde_json::json!({
        "machine": {"sockets": 2, "cores_per_socket": 4},
        "os": os,
        "workload": {"kind": "parsec-like", "test": "canneal", "threads": 6, "region_bytes": 8 << 20, "ops": 60},
    });
    tlbsim_core::run(tree, &[], std::path::Path::new(".")).unwrap().stats
}

#[test]
fn canneal_loads_alone_then_anneals_in_steps_without_allocating() {
    let s = canneal("linux", false);
    // The loader first-touches the whole netlist: 8 MiB, 2,048 pages.
    assert!(total(&s, "page_faults") >= 2_000, "{}", total(&s, "page_faults"));
    assert_eq!(s["per_class"]["anneal"]["ops_completed"].as_u64().unwrap(), 6 * 60);
    // Nothing is unmapped while annealing: no shootdown but the exit's.
    assert!(total(&s, "shootdowns_sent") <= 1, "{}", s["totals"]["shootdowns_sent_by_reason"]);
}

#[test]
fn canneal_under_autonuma_as_linux_4_flushes_each_page_moved_and_abis_skips_most() {
    let (linux, abis) = (canneal("linux", true), canneal("abis", true));
    let moved = |s: &serde_json::Value| s["totals"]["numa_balancing"]["pages_migrated"].as_u64().unwrap();
    let migration = |s: &serde_json::Value| s["totals"]["shootdowns_sent_by_reason"]["migration"].as_u64().unwrap();
    assert!(moved(&linux) > 50, "{}", linux["totals"]["numa_balancing"]);
    // A move is a shootdown whenever another core runs the process (not while the loader
    // is alone).
    assert!(migration(&linux) * 2 >= moved(&linux), "{} of {}", migration(&linux), moved(&linux));
    // Under ABIS the restored PTE is uncached (the scan flushed it, no walk set A since).
    assert!(abis["totals"]["coherence"]["avoided_uncached"].as_u64().unwrap() > 0);
    assert!(total(&abis, "shootdowns_sent") * 2 < total(&linux, "shootdowns_sent"));
    for s in [&linux, &abis] {
        assert_eq!(total(s, "violations_security") + total(s, "violations_consistency"), 0);
    }
}
