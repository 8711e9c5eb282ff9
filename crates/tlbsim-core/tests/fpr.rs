//! FPR (recycling/fpr.rs): munmaps of pages in their recycling context skip the remote
//! shootdown; an allocation that takes a page out of its context sends one (if no global
//! shootdown came since the page's free); the VA cursor prevents the ABA case of Fig. 5a,
//! which the checker catches without it; `tlbsim fuzz` finds FPR clean under every
//! context scope and with `abis`, `didi` and `latr`, and catches `va_cursor = false`.

use serde_json::{json, Value};
use tlbsim_core::fuzz::{fuzz, FuzzOptions};
use tlbsim_core::workload::builder::anon;
use tlbsim_core::workload::program::*;

use crate::common;

fn run(tree: Value) -> Value {
    tlbsim_core::run(tree, &[], std::path::Path::new(".")).unwrap().stats
}

fn totals(v: &Value, k: &str) -> u64 {
    v["totals"][k].as_u64().unwrap_or_else(|| panic!("{k}"))
}

fn violations(v: &Value) -> u64 {
    totals(v, "violations_security") + totals(v, "violations_consistency")
}

/// Case 2 of §V-A1: one I/O thread mmaps, reads and munmaps a page of a file while compute
/// threads run; under FPR the munmaps send no shootdown to them (the page stays in its
/// context: the page cache keeps it), and the compute threads get more done.
#[test]
fn fpr_skips_the_munmap_shootdowns_of_case_2() {
    let case2 = |fpr: bool| {
        run(json!({"machine": {"cores_per_socket": 4}, "os": {"recycling": if fpr { "fpr" } else { "none" }}, "recycling": {"fpr": {"all_mmaps": fpr}},
                   "workload": {"kind": "fpr-munmap", "case": 2, "threads": 3, "ops": 400}}))
    };
    let (linux, fpr) = (case2(false), case2(true));
    assert!(linux["totals"].get("fpr").is_none(), "no fpr stats without FPR");
    let f = &fpr["totals"]["fpr"];
    assert_eq!(f["munmap_pages_skipped"].as_u64().unwrap(), 400, "{f}");
    assert!(f["tracking_bytes"].as_u64().unwrap() > 0);
    assert!(totals(&linux, "shootdown_ipis_received") >= 3 * 400 * 9 / 10, "{}", linux["totals"]);
    assert!(totals(&fpr, "shootdown_ipis_received") < totals(&linux, "shootdown_ipis_received"), "{}", fpr["totals"]);
    let compute = |v: &Value| v["per_class"]["compute"]["ops_per_second"].as_f64().unwrap();
    assert!(compute(&fpr) > compute(&linux), "compute {} vs {}", compute(&fpr), compute(&linux));
    assert_eq!(violations(&linux) + violations(&fpr), 0);
}

/// With 1,000 operations the VA cursor leaves the first page-table page: each munmap of a
/// lone mapping frees its table, and FPR as written still flushes every core's page-walk
/// caches for it. With `recycle_tables` the freed tables are kept for the context's next
/// tables instead: no IPI at all, still no violation.
#[test]
fn recycling_page_tables_removes_the_flushes_of_freed_tables() {
    let case2 = |recycle: bool| {
        run(json!({"machine": {"cores_per_socket": 4}, "os": {"recycling": "fpr"}, "recycling": {"fpr": {"recycle_tables": recycle}},
                   "workload": {"kind": "fpr-munmap", "case": 2, "threads": 3, "ops": 1000}}))
    };
    let (plain, recycled) = (case2(false), case2(true));
    assert!(totals(&plain, "shootdown_ipis_received") > 1000, "{}", plain["totals"]);
    assert_eq!(plain["totals"]["fpr"]["tables_kept"].as_u64().unwrap(), 0);
    assert_eq!(totals(&recycled, "shootdown_ipis_received"), 0, "{}", recycled["totals"]);
    let f = &recycled["totals"]["fpr"];
    assert!(f["tables_kept"].as_u64().unwrap() > 500 && f["tables_reused"].as_u64().unwrap() > 500, "{f}");
    assert_eq!(violations(&plain) + violations(&recycled), 0);
}

/// §IV-B on the eviction benchmark: Linux evicts in batches of 32 with a shootdown each;
/// FPR keeps its pages until the min watermark and then evicts one batch back to the
/// high watermark with one shootdown: far fewer shootdowns for the pages evicted.
#[test]
fn fpr_evicts_in_min_watermark_batches_with_one_shootdown_each() {
    let evict = |fpr: bool| {
        run(json!({"machine": {"cores_per_socket": 4}, "os": {"recycling": if fpr { "fpr" } else { "none" }},
                   "workload": {"kind": "fpr-evict", "region_bytes": 64u64 << 20, "ops": 4000}}))
    };
    let (linux, fpr) = (evict(false), evict(true));
    let per_page = |v: &Value| totals(v, "shootdowns_sent") as f64 / totals(v, "pages_reclaimed") as f64;
    assert!(totals(&linux, "pages_reclaimed") > 1000 && totals(&fpr, "pages_reclaimed") > 1000);
    let f = &fpr["totals"]["fpr"];
    assert!(f["batch_evictions"].as_u64().unwrap() > 1000, "{f}");
    assert!(f["batch_eviction_shootdowns"].as_u64().unwrap() > 0);
    // A 32 MiB group: min watermark 128 pages, high 192: FPR's batches are about 64
    // pages, twice Linux's 32.
    assert!(per_page(&fpr) < per_page(&linux) / 1.5, "shootdowns per evicted page: fpr {} linux {}", per_page(&fpr), per_page(&linux));
    assert_eq!(violations(&linux) + violations(&fpr), 0);
}

/// Fig. 5a: T1 (core 0) unmaps the FPR page f1 that T2 (core 1) reads, and maps f2; T2 goes
/// on reading f1's address. Without the cursor f2 lands at f1's address and T2's stale
/// entry reads f1's old frame where the page table maps f2's: a consistency violation.
/// With it f2 lands elsewhere: T2 reads its own recycled data (as the paper allows for a
/// program that would have had a SIGSEGV), counted, and no violation.
#[test]
fn the_va_cursor_prevents_the_aba_case_of_fig_5a() {
    // Two pages: the per-CPU list hands the frames back in the other order, so f2's first
    // page is not f1's (with one page, f2 would get f1's very frame back: recycled, harmless).
    let page = anon(8192, true).populated().recyclable();
    let w = common::remap_under_a_reader(page);
    let cfg = |cursor: bool| {
        tlbsim_core::config::Config::resolve(
            json!({"machine": {"cores_per_socket": 2}, "os": {"recycling": "fpr"}, "recycling": {"fpr": {"va_cursor": cursor}}}),
            &[],
            std::path::Path::new("."),
        )
        .unwrap()
    };
    let safe = tlbsim_core::os::run(&cfg(true), w.clone()).unwrap();
    assert_eq!(violations(&safe), 0, "{}", safe["totals"]);
    assert!(safe["totals"]["fpr"]["stale_uses_permitted"].as_u64().unwrap() > 0, "{}", safe["totals"]["fpr"]);
    assert!(safe["totals"]["fpr"]["munmap_flushes_skipped"].as_u64().unwrap() >= 50);
    let aba = tlbsim_core::os::run(&cfg(false), w).unwrap();
    assert!(totals(&aba, "violations_consistency") > 0, "{}", aba["totals"]);
}

/// A frame freed by an FPR munmap, then allocated by another process (leaving its context),
/// brings a global shootdown; a second frame freed before that shootdown leaves without one
/// (the version rule).
#[test]
fn leaving_the_context_shoots_down_once_per_global_counter() {
    // Process 0 maps and unmaps 8 FPR pages on core 0; process 1, on the same core
    // afterwards, allocates 8 pages from the same per-CPU list.
    let plain = anon(8 * 4096, true).populated();
    let fpr_pages = plain.recyclable();
    let w = Workload {
        processes: vec![
            ProcessSpec {
                name: "a".into(),
                group: 0,
                regions: vec![],
                threads: vec![ThreadSpec { name: "a".into(), class: "a".into(), core: Some(0), program: 0, daemon: false }],
                page_tables: Default::default(),
            },
            ProcessSpec {
                name: "b".into(),
                group: 0,
                regions: vec![],
                threads: vec![ThreadSpec { name: "b".into(), class: "b".into(), core: Some(0), program: 1, daemon: false }],
                page_tables: Default::default(),
            },
        ],
        programs: vec![
            vec![Op::Mmap { slot: 0, spec: fpr_pages }, Op::Munmap { slot: 0 }, Op::Exit],
            vec![Op::Compute { cycles: 50_000_000 }, Op::Mmap { slot: 0, spec: plain }, Op::Exit],
        ],
        slots: 1,
        ..Default::default()
    };
    let cfg =
        tlbsim_core::config::Config::resolve(json!({"machine": {"cores_per_socket": 2}, "os": {"recycling": "fpr"}}), &[], std::path::Path::new(".")).unwrap();
    let v = tlbsim_core::os::run(&cfg, w).unwrap();
    let f = &v["totals"]["fpr"];
    assert_eq!(f["munmap_pages_skipped"].as_u64().unwrap(), 8, "{f}");
    assert_eq!(f["context_exit_flushes"].as_u64().unwrap(), 1, "{f}");
    assert_eq!(f["context_exit_flushes_skipped"].as_u64().unwrap(), 7, "{f}");
    assert_eq!(violations(&v), 0);
}

/// §IV-C4: a migrated page's target frame takes the source's context, so the munmap that
/// follows still skips its flush.
#[test]
fn a_migrated_page_stays_in_its_context() {
    let pages = anon(8 * 4096, true).populated().recyclable();
    let w = Workload {
        processes: vec![ProcessSpec {
            name: "p".into(),
            group: 0,
            regions: vec![],
            threads: vec![ThreadSpec { name: "t".into(), class: "t".into(), core: Some(0), program: 0, daemon: false }],
            page_tables: Default::default(),
        }],
        programs: vec![vec![Op::Mmap { slot: 0, spec: pages }, Op::MigratePages { slot: 0, node: 1 }, Op::Munmap { slot: 0 }, Op::Exit]],
        slots: 1,
        ..Default::default()
    };
    let cfg = tlbsim_core::config::Config::resolve(
        json!({"machine": {"sockets": 2, "cores_per_socket": 1}, "os": {"recycling": "fpr"}}),
        &[],
        std::path::Path::new("."),
    )
    .unwrap();
    let v = tlbsim_core::os::run(&cfg, w).unwrap();
    assert_eq!(totals(&v, "pages_migrated"), 8);
    assert_eq!(v["totals"]["fpr"]["munmap_pages_skipped"].as_u64().unwrap(), 8, "{}", v["totals"]["fpr"]);
    assert_eq!(violations(&v), 0);
}

fn opts(policy: &str, sets: &[&str], scenarios: u64) -> FuzzOptions {
    let mut overrides: Vec<String> = vec!["os.recycling=fpr".into(), "recycling.fpr.all_mmaps=true".into()];
    overrides.extend(sets.iter().map(|s| s.to_string()));
    FuzzOptions { policy: policy.into(), tagging: None, overrides, scenarios, seed: 0xf9a }
}

#[test]
fn fuzz_finds_fpr_clean_under_every_scope_and_policy() {
    for scope in ["mmap", "process", "tree", "user"] {
        let set = format!("recycling.fpr.context={scope}");
        let r = fuzz(&opts("linux", &[&set], 150)).unwrap();
        assert_eq!((r.violations_security, r.violations_consistency), (0, 0), "linux + fpr ({scope}): {:#?}", r.first_failure);
    }
    for policy in ["abis", "didi", "latr", "oracle"] {
        let r = fuzz(&opts(policy, &[], 150)).unwrap();
        assert_eq!((r.violations_security, r.violations_consistency), (0, 0), "{policy} + fpr: {:#?}", r.first_failure);
    }
    for policy in ["linux", "abis"] {
        let r = fuzz(&opts(policy, &["recycling.fpr.recycle_tables=true"], 150)).unwrap();
        assert_eq!((r.violations_security, r.violations_consistency), (0, 0), "{policy} + fpr + recycle_tables: {:#?}", r.first_failure);
    }
}

/// Two scenarios that once failed under `abis` + FPR: a global request forgot ABIS' software
/// PTEs before it had reached a core that had just inserted one (seed 27), and a page left
/// its context while the global request that advanced the counter was still in flight, so
/// a core still caching it read it after it changed hands (seed 5268). Seed 7065: a munmap
/// whose recycled pages skipped their flush marked stale a core's translation of the zero
/// page that a copy-on-write break's flush, still on its way to that core, was to remove
/// (the core read it before that flush arrived, as Linux lets it).
#[test]
fn abis_with_fpr_regressions() {
    for seed in [27, 5268, 7065] {
        let r = fuzz(&FuzzOptions { seed, ..opts("abis", &[], 1) }).unwrap();
        assert_eq!((r.violations_security, r.violations_consistency), (0, 0), "seed {seed}: {:#?}", r.first_failure);
    }
}

/// `latr` + FPR, seed 5323: FPR took the recycled pages out of a munmap's request but left
/// their frames in it, so LATR's "every present page's frame is freed by the request" test
/// passed by count with the zero page among the pages, and the zero page's translation
/// survived the munmap lazily (a read of zeros where the program should have faulted).
#[test]
fn latr_with_fpr_keeps_the_zero_page_out_of_lazy_munmaps() {
    let r = fuzz(&FuzzOptions { seed: 5323, ..opts("latr", &[], 1) }).unwrap();
    assert_eq!((r.violations_security, r.violations_consistency), (0, 0), "{:#?}", r.first_failure);
}

/// Two scenarios of the fuzz test above, under a memory limit: a copy-on-write break's
/// allocation ran the group's reclaim, which evicted the very page being copied (every PTE
/// of it cleared, its map count 0), and the fault went on with the PTE it had read before:
/// the map count went below 0 ("attempt to subtract with overflow" in a debug build,
/// u32::MAX in a release one). Seed 4087 with `recycling.fpr.context=mmap`, seed 3996 with `abis`
/// and `recycle_tables`; not FPR's doing (`linux` without FPR did it at seed 4144). The
/// fault now checks the PTE again after the allocation (wp_page_copy's pte_same), and a
/// map count of 0 there is an error in release builds too.
#[test]
fn a_copy_on_write_whose_allocation_reclaims_the_page_it_copies() {
    for (policy, set, seed) in [("linux", "recycling.fpr.context=mmap", 4087), ("abis", "recycling.fpr.recycle_tables=true", 3996)] {
        let r = fuzz(&FuzzOptions { seed, ..opts(policy, &[set], 1) }).unwrap_or_else(|e| panic!("{policy} seed {seed}: {e}"));
        assert_eq!((r.violations_security, r.violations_consistency), (0, 0), "{policy} seed {seed}: {:#?}", r.first_failure);
    }
}

/// Reclaim never frees a frame that a PTE maps or is about to map. Each of these scenarios
/// once had it do so, and the frame, handed out again while still mapped, got its map
/// count reset under the old mapping (what could then go below 0 as above); mapping a free
/// frame is now an error, in release builds too. Seed 4167 (`recycling.fpr.context=tree`): the
/// frame a fault was allocating was on the LRU already while the allocation's reclaim
/// ran, unmapped, so freed at once (Linux puts a page on the LRU once it is mapped).
/// Seed 4184 (`didi`): an evicted page-cache page stayed in the page cache until its
/// flush ended, and a fault mapped it again meanwhile (Linux's __remove_mapping takes it
/// out before the flush). Seed 4403 (`latr`): a page a munmap had queued to free after its
/// lazy flush stayed on the LRU, and reclaim freed it first (Linux's mmu_gather holds a
/// reference). None is FPR's doing: `linux` without FPR hit the first, e.g. at seed 4028.
#[test]
fn reclaim_never_frees_a_mapped_frame() {
    for (policy, sets, seed) in [("linux", &["recycling.fpr.context=tree"][..], 4167), ("didi", &[], 4184), ("latr", &[], 4403)] {
        let r = fuzz(&FuzzOptions { seed, ..opts(policy, sets, 1) }).unwrap_or_else(|e| panic!("{policy} seed {seed}: {e}"));
        assert_eq!((r.violations_security, r.violations_consistency), (0, 0), "{policy} seed {seed}: {:#?}", r.first_failure);
    }
}

#[test]
fn fuzz_catches_fpr_without_the_va_cursor() {
    let r = fuzz(&opts("linux", &["recycling.fpr.va_cursor=false"], 300)).unwrap();
    assert!(r.scenarios_with_violations > 0, "{r:#?}");
    assert!(r.violations_consistency > 0);
}

#[test]
fn a_bad_fpr_key_is_named() {
    let Err(err) = tlbsim_core::run(json!({"recycling": {"fpr": {"context": "galaxy"}}, "workload": {"kind": "fpr-munmap"}}), &[], std::path::Path::new("."))
    else {
        panic!("a bad scope accepted")
    };
    assert!(err.to_string().contains("recycling.fpr.context"), "{err}");
}

/// Reclaim frees what it evicts as it goes: Linux's shrink_folio_list waits for each
/// batch's flush and frees it before the next. A page-cache miss beyond the limit costs one
/// eviction (a few pages more for the LRU's second chances), not a run of evictions until
/// the scan budget is spent.
#[test]
fn reclaim_evicts_about_what_the_limit_requires() {
    for fpr in [false, true] {
        let v = run(json!({"machine": {"cores_per_socket": 4}, "os": {"recycling": if fpr { "fpr" } else { "none" }},
                           "workload": {"kind": "ycsb", "test": "lmdb", "threads": 4, "ops": 2000, "region_bytes": 64 << 20, "memory_limit_mib": 4}}));
        let (misses, reclaimed) = (totals(&v, "page_cache_misses"), totals(&v, "pages_reclaimed"));
        let limit = 4 * 256;
        assert!(misses > 2 * limit, "{misses}");
        assert!(reclaimed >= misses - limit && reclaimed <= misses - limit / 2, "fpr {fpr}: {misses} misses, {reclaimed} reclaimed");
        assert_eq!(violations(&v), 0);
    }
}

/// YCSB-C on the LevelDB-like store: the table cache's munmaps are FPR's (§V-B); under FPR
/// they skip their shootdowns, and what is left is reclaim's (one per batch).
#[test]
fn ycsb_leveldb_table_cache_munmaps_skip_their_shootdowns() {
    let tree = |fpr: bool| {
        json!({"machine": {"cores_per_socket": 4}, "os": {"recycling": if fpr { "fpr" } else { "none" }}, "recycling": {"fpr": {"recycle_tables": fpr}},
                                  "workload": {"kind": "ycsb", "test": "leveldb", "ycsb": "c", "threads": 4, "ops": 500}})
    };
    let (linux, fpr) = (run(tree(false)), run(tree(true)));
    let munmaps = fpr["totals"]["fpr"]["munmap_flushes_skipped"].as_u64().unwrap();
    assert!(munmaps > 500, "{munmaps}");
    assert!(
        totals(&fpr, "shootdowns_sent") * 5 < totals(&linux, "shootdowns_sent"),
        "{} vs {}",
        totals(&fpr, "shootdowns_sent"),
        totals(&linux, "shootdowns_sent")
    );
    assert_eq!(violations(&linux) + violations(&fpr), 0);
}

/// FPR §II: a target busy in the kernel (here a page fault reading from nullblk, which
/// completes inline) takes a shootdown's interrupt when it returns to user space; with
/// device reads in the mixed threads' I/O steps, a good share of the IPIs are taken so.
#[test]
fn targets_in_kernel_mode_take_shootdowns_on_return_to_user() {
    let tree = |file_pages: u64| {
        json!({"machine": {"cores_per_socket": 4, "storage": "nullblk"},
                                        "workload": {"kind": "fpr-munmap", "case": 5, "threads": 4, "ops": 300, "file_pages": file_pages}})
    };
    let (reads, cached) = (run(tree(100_000)), run(tree(1)));
    let share = |v: &Value| totals(v, "shootdowns_taken_on_kernel_exit") as f64 / totals(v, "shootdown_ipis_received") as f64;
    assert!(share(&reads) > 0.1, "{}", share(&reads));
    assert!(share(&reads) > 3.0 * share(&cached), "{} vs {}", share(&reads), share(&cached));
    assert_eq!(violations(&reads), 0);
}
