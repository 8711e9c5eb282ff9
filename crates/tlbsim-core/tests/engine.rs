//! Whole runs: determinism, TLB reach against the analytic miss rate, NUMA placement of
//! page tables, stats shape.

use serde_json::{json, Value};
use std::path::Path;

fn run(tree: Value, overrides: &[&str]) -> Value {
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    tlbsim_core::run(tree, &o, Path::new(".")).unwrap().stats
}

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {v}"))
}

#[test]
fn same_seed_same_bytes() {
    let o = ["workload.threads=2", "workload.accesses=50000", "workload.pattern=random"];
    let a = serde_json::to_string(&run(json!({}), &o)).unwrap();
    let b = serde_json::to_string(&run(json!({}), &o)).unwrap();
    assert_eq!(a, b);
    let c = serde_json::to_string(&run(json!({"seed": 2}), &o)).unwrap();
    assert_ne!(a, c, "a different seed should change a random workload");
}

#[test]
fn stats_have_the_stable_names() {
    let s = run(json!({}), &["workload.accesses=1000", "workload.threads=1"]);
    for key in [
        "instructions",
        "accesses",
        "l1_tlb_hits",
        "l1_tlb_misses",
        "l2_tlb_hits",
        "l2_tlb_misses",
        "walks",
        "walk_cycles",
        "pwc_hits",
        "pt_accesses_local",
        "pt_accesses_remote",
        "full_flushes",
        "cycles",
    ] {
        u(&s["totals"], key);
        u(&s["per_core"][0], key);
    }
    for name in ["l1d", "l1d_2m", "l1d_1g", "l1i", "l2", "pwc_pml4", "pwc_pdpt", "pwc_pd"] {
        for f in ["hits", "misses", "evictions", "invalidations"] {
            u(&s["per_structure"][name], f);
        }
    }
    // Counters agree with each other.
    let t = &s["totals"];
    assert_eq!(u(t, "l1_tlb_hits") + u(t, "l1_tlb_misses"), u(t, "accesses"));
    assert_eq!(u(t, "l2_tlb_hits") + u(t, "l2_tlb_misses"), u(t, "l1_tlb_misses"));
    // Instructions: 3 per access by default, each fetched.
    assert_eq!(u(t, "instructions"), 3000);
    assert_eq!(u(t, "accesses"), 4000);
}

/// Random accesses over P pages through a fully associative LRU L1 of E entries (no L2):
/// in steady state each access misses with probability 1 - E/P.
#[test]
fn tlb_reach_matches_the_analytic_miss_rate() {
    for (entries, pages) in [(64u64, 256u64), (96, 1024), (16, 32)] {
        let s = run(
            json!({}),
            &[
                &format!("machine.tlb.l1d.entries={entries}"),
                &format!("machine.tlb.l1d.ways={entries}"),
                "machine.tlb.l2.entries=0",
                "workload.fetches=false",
                "workload.pattern=random",
                &format!("workload.region_bytes={}", pages * 4096),
                "workload.accesses=400000",
                "workload.write_fraction=0",
            ],
        );
        let t = &s["totals"];
        let rate = u(t, "l1_tlb_misses") as f64 / u(t, "accesses") as f64;
        let expected = 1.0 - entries as f64 / pages as f64;
        assert!((rate - expected).abs() < 0.01, "E={entries} P={pages}: miss rate {rate}, expected {expected}");
        // With no L2 every L1 miss walks; a first touch walks twice (fault, then retry).
        assert_eq!(u(t, "walks"), u(t, "l1_tlb_misses") + u(t, "page_faults"));
    }
}

/// First-touch places page tables on the toucher's node; fixed:0 puts them on node 0, so a
/// thread on socket 1 walks remotely.
#[test]
fn page_table_placement_decides_local_and_remote_walks() {
    let base = [
        "machine.sockets=2",
        "machine.cores_per_socket=1",
        "machine.pt_cache.entries=0",
        "machine.tlb.pwc_pml4.entries=0",
        "machine.tlb.pwc_pdpt.entries=0",
        "machine.tlb.pwc_pd.entries=0",
        "workload.threads=2",
        "workload.shared_region=false",
        "workload.fetches=false",
        "workload.accesses=20000",
        "workload.region_bytes=67108864",
    ];
    let ft = run(json!({}), &[&base[..], &["os.pt_placement=first-touch"]].concat());
    let core1 = &ft["per_core"][1];
    // The root was allocated on node 0, and the PDPT page the two regions share by the
    // thread that touched first; everything below is core 1's own, on node 1.
    assert!(u(core1, "pt_accesses_local") > 0);
    assert!(u(core1, "pt_accesses_remote") <= 2 * u(core1, "walks"));
    // PD and PT pages are core 1's own: about half of its reads stay local.
    assert!(2 * u(core1, "pt_accesses_local") > u(core1, "pt_accesses_remote"));
    let fixed = run(json!({}), &[&base[..], &["os.pt_placement=fixed:0"]].concat());
    let core1 = &fixed["per_core"][1];
    assert_eq!(u(core1, "pt_accesses_local"), 0);
    // Four remote reads per walk, but for faulting walks that stop at an empty entry.
    assert!(u(core1, "pt_accesses_remote") > 3 * u(core1, "walks"));
    assert!(u(core1, "walk_cycles") > u(&ft["per_core"][1], "walk_cycles"));
    // Core 0 is on node 0 either way.
    assert_eq!(u(&fixed["per_core"][0], "pt_accesses_remote"), 0);
}

#[test]
fn huge_pages_cut_walks() {
    let o = ["workload.fetches=false", "workload.region_bytes=268435456", "workload.accesses=200000"];
    let small = run(json!({}), &o);
    let huge = run(json!({}), &[&o[..], &["os.thp=true"]].concat());
    assert!(u(&huge["totals"], "walks") * 10 < u(&small["totals"], "walks"));
    assert!(u(&huge["per_structure"]["l1d_2m"], "hits") > 0);
    assert_eq!(u(&huge["totals"], "page_faults"), 128);
}

#[test]
fn fragmentation_makes_thp_fall_back_to_small_pages_at_its_rate() {
    let o = ["workload.fetches=false", "workload.region_bytes=268435456", "workload.accesses=200000", "os.thp=true"];
    let whole = run(json!({}), &o);
    assert_eq!(u(&whole["totals"], "thp_fallbacks"), 0);
    // 128 aligned 2 MiB regions: each first fault tries a 2 MiB block once; a region that
    // fell back has a 4 KiB table, so its later faults map 4 KiB pages.
    let half = run(json!({}), &[&o[..], &["os.thp_failure_rate=0.5"]].concat());
    let fell = u(&half["totals"], "thp_fallbacks");
    assert!((40..=88).contains(&fell), "{fell} of 128 fell back at rate 0.5");
    assert!(u(&half["totals"], "page_faults") > 128 + fell, "the regions that fell back fault page by page");
    assert!(u(&half["per_structure"]["l1d_2m"], "hits") > 0);
    let all = run(json!({}), &[&o[..], &["os.thp_failure_rate=1"]].concat());
    assert_eq!(u(&all["totals"], "thp_fallbacks"), 128);
    assert_eq!(u(&all["per_structure"]["l1d_2m"], "hits"), 0);
    // Every 2 MiB allocation failing is a run with 4 KiB pages.
    let small = run(json!({}), &o[..3]);
    for key in ["walks", "page_faults", "walk_cycles", "l2_tlb_misses"] {
        assert_eq!(u(&all["totals"], key), u(&small["totals"], key), "{key}");
    }
}

#[test]
fn five_level_walks_read_one_more_level() {
    let o = [
        "workload.fetches=false",
        "machine.pt_cache.entries=0",
        "machine.tlb.pwc_pml4.entries=0",
        "machine.tlb.pwc_pdpt.entries=0",
        "machine.tlb.pwc_pd.entries=0",
        "workload.accesses=20000",
        "workload.write_fraction=0",
        "workload.region_bytes=65536",
    ];
    let four = run(json!({}), &o);
    let five = run(json!({}), &[&o[..], &["os.pt_levels=5"]].concat());
    let reads = |s: &Value| u(&s["totals"], "pt_accesses_local") + u(&s["totals"], "pt_accesses_remote");
    // Every walk reads every level, but the very first, which finds the root entry empty.
    assert_eq!(reads(&four), 4 * u(&four["totals"], "walks") - 3);
    assert_eq!(reads(&five), 5 * u(&five["totals"], "walks") - 4);
}
