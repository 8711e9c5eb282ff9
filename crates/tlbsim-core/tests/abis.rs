//! ABIS (coherence/abis.rs): the Fig. 3 decision on hand-built PTE states, a privately used
//! page flushed locally only, and the unsafe gap-of-one variant caught by `tlbsim fuzz`.

use tlbsim_core::coherence::abis::{Abis, AbisParams};
use tlbsim_core::coherence::*;
use tlbsim_core::config::Config;
use tlbsim_core::page_table::{make_pte, PTE_ACCESSED, PTE_PRESENT, PTE_USER};
use tlbsim_core::types::{CoreId, Pfn, Vpn};

const MM: u32 = 7;
const VA: u64 = 0x7000_0000_0000;

fn cfg() -> Config {
    Config::resolve(serde_json::json!({"machine": {"sockets": 1, "cores_per_socket": 4}}), &[], std::path::Path::new(".")).unwrap()
}

fn policy<const GAP: u64>() -> Abis<GAP, false> {
    let mut p = <Abis<GAP, false> as Policy>::build(&cfg(), AbisParams::default()).unwrap();
    let mut fx = Vec::new();
    // Cores 0-3 run the address space.
    for c in 0..4 {
        p.on_cr3_load(CoreId(c), &Cr3Load { from: None, to: MM, tag: 1, kept_entries: false }, &mut fx);
    }
    p
}

/// Plan a munmap of VA by core 0 whose old PTE had the accessed bit `a`.
fn plan<const GAP: u64>(p: &mut Abis<GAP, false>, a: bool) -> Vec<(u32, usize)> {
    let cores = [CoreView { loaded_mm: Some(MM), lazy: false, caught_up_gen: 0, socket: 0 }; 4];
    let view = OsView { cores: &cores, cpumask: &[true; 4], holders: &[false; 4], flush_ceiling: 33, now: 0 };
    let old = make_pte(Pfn(42), PTE_PRESENT | PTE_USER | if a { PTE_ACCESSED } else { 0 });
    let req = FlushRequest {
        initiator: CoreId(0),
        mm: MM,
        global: false,
        pages: vec![Vpn(VA >> 12)],
        old_ptes: vec![old],
        frames: vec![],
        page_cache_pages: 0,
        reason: FlushReason::Munmap,
        freed_tables: false,
        full: false,
        new_gen: 1,
    };
    let mut out = FlushPlan::default();
    p.plan(&view, &req, &mut out);
    out.targets.iter().zip(out.pages_of.iter()).map(|(t, pages)| (t.0, pages.as_ref().map_or(1, |v| v.len()))).collect()
}

fn fresh_map<const GAP: u64>(p: &mut Abis<GAP, false>) {
    let mut new = make_pte(Pfn(42), PTE_PRESENT | PTE_USER);
    p.on_pte_write(CoreId(0), MM, VA, 0, &mut new, &mut Vec::new());
}

#[test]
fn the_flush_decision_on_hand_built_states() {
    let mut fx = Vec::new();
    // Uncached (mapped, never cached) with A clear: no flush at all.
    let mut p = policy::<2>();
    fresh_map(&mut p);
    assert!(plan(&mut p, false).is_empty());
    // A set: every core that may hold it (the initiator included).
    let mut p = policy::<2>();
    fresh_map(&mut p);
    let t = plan(&mut p, true);
    assert_eq!(t.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    // After that flush the PTE is uncached: msync then munmap of an untouched page flushes once.
    assert!(plan(&mut p, false).is_empty());
    // Private: inserted directly by core 2, A still clear: only core 2.
    let mut p = policy::<2>();
    fresh_map(&mut p);
    assert_eq!(p.on_demand_fault(CoreId(2), MM, VA, 0, 1, &mut fx), Some(550));
    assert_eq!(plan(&mut p, false), vec![(2, 1)]);
    // Private to the initiator: a local flush only.
    let mut p = policy::<2>();
    fresh_map(&mut p);
    p.on_demand_fault(CoreId(0), MM, VA, 0, 1, &mut fx);
    assert_eq!(plan(&mut p, false), vec![(0, 1)]);
    // Two full-flush generations of every core since: no flush even though private.
    for (gap, skips_after) in [(2u64, 2usize), (1, 1)] {
        let mut p2 = policy::<2>();
        let mut p1 = policy::<1>();
        fresh_map(&mut p2);
        fresh_map(&mut p1);
        p2.on_demand_fault(CoreId(2), MM, VA, 0, 1, &mut fx);
        p1.on_demand_fault(CoreId(2), MM, VA, 0, 1, &mut fx);
        for round in 1..=skips_after {
            for c in 0..4 {
                p2.on_full_flush(CoreId(c), Some(MM), FullFlushCause::ContextSwitch, &mut fx);
                p1.on_full_flush(CoreId(c), Some(MM), FullFlushCause::ContextSwitch, &mut fx);
            }
            let _ = round;
        }
        if gap == 2 {
            // The version advanced twice: skipped.
            assert!(plan(&mut p2, false).is_empty(), "gap 2 after two rounds");
        } else {
            // One round: ABIS still flushes core 2, the gap-of-one variant skips it.
            let mut q = policy::<2>();
            fresh_map(&mut q);
            q.on_demand_fault(CoreId(2), MM, VA, 0, 1, &mut fx);
            for c in 0..4 {
                q.on_full_flush(CoreId(c), Some(MM), FullFlushCause::ContextSwitch, &mut fx);
            }
            assert_eq!(plan(&mut q, false), vec![(2, 1)]);
            assert!(plan(&mut p1, false).is_empty());
        }
    }
    // Linux's view of the A bit: swA OR hwA.
    let mut p = policy::<2>();
    fresh_map(&mut p);
    p.on_demand_fault(CoreId(1), MM, VA, 0, 1, &mut fx);
    assert!(p.pte_accessed(MM, VA, make_pte(Pfn(42), PTE_PRESENT)));
    p.on_accessed_cleared(CoreId(1), MM, VA, make_pte(Pfn(42), PTE_PRESENT), &mut fx);
    assert!(!p.pte_accessed(MM, VA, make_pte(Pfn(42), PTE_PRESENT)));
}

#[test]
fn a_page_faulted_and_used_by_one_core_is_flushed_locally_only() {
    // Thread 0 maps, touches and unmaps a private buffer; thread 1 (same process, another
    // core) keeps working on its own region, so Linux sends it an IPI per munmap.
    let run = |policy: &str| {
        let tree = serde_json::json!({
            "machine": {"sockets": 1, "cores_per_socket": 2},
            "os": {"coherence": policy},
            "workload": {"kind": "scenario", "scenario": {"process": [{"name": "p", "region": [{"name": "own", "bytes": 65536}],
                "thread": [
                    {"name": "mapper", "class": "m", "core": 0, "program": [
                        {"op": "loop", "count": 200, "body": [
                            {"op": "mmap", "region": "buf", "bytes": 16384},
                            {"op": "access", "region": "buf", "pattern": "sequential", "stride": 4096, "count": 4, "mode": "write"},
                            {"op": "munmap", "region": "buf"}, {"op": "count"}]},
                        {"op": "exit"}]},
                    {"name": "worker", "class": "w", "core": 1, "daemon": true, "program": [
                        {"op": "loop", "count": 0, "body": [
                            {"op": "access", "region": "own", "pattern": "random", "count": 20, "mode": "read"},
                            {"op": "compute", "cycles": 1000}]}]}]}]}},
        });
        tlbsim_core::run(tree, &[], std::path::Path::new(".")).unwrap().stats
    };
    let (linux, abis) = (run("linux"), run("abis"));
    let t = |v: &serde_json::Value, k: &str| v["totals"][k].as_u64().unwrap();
    assert!(t(&linux, "shootdown_ipis_received") >= 190, "{}", t(&linux, "shootdown_ipis_received"));
    assert_eq!(t(&abis, "shootdown_ipis_received"), 0);
    let c = &abis["totals"]["coherence"];
    assert!(c["private_local"].as_u64().unwrap() >= 800 && c["direct_insertions"].as_u64().unwrap() >= 800, "{c}");
    assert!(c["spt_bytes"].as_u64().unwrap() > 0);
    assert_eq!(t(&abis, "violations_security") + t(&abis, "violations_consistency"), 0);
}

#[test]
fn a_lazy_core_services_a_few_page_flushes_then_leaves() {
    let mut p = policy::<2>();
    let lazy = CoreView { loaded_mm: Some(MM), lazy: true, caught_up_gen: 0, socket: 0 };
    let req = FlushRequest {
        initiator: CoreId(0),
        mm: MM,
        global: false,
        pages: vec![Vpn(VA >> 12)],
        old_ptes: vec![0],
        frames: vec![],
        page_cache_pages: 0,
        reason: FlushReason::Munmap,
        freed_tables: false,
        full: false,
        new_gen: 1,
    };
    let n = AbisParams::default().idle_page_flushes;
    for _ in 0..n {
        assert_eq!(p.on_deliver(CoreId(3), &lazy, &req, 33), LocalFlush::Pages);
    }
    // Then Linux's full flush, leaving the borrowed address space (§4.1).
    assert_eq!(p.on_deliver(CoreId(3), &lazy, &req, 33), LocalFlush::DropLazyMm);
    // A core running the address space always takes the pages; loading an address space
    // starts the count again.
    let running = CoreView { lazy: false, ..lazy };
    assert_eq!(p.on_deliver(CoreId(3), &running, &req, 33), LocalFlush::Pages);
    p.on_cr3_load(CoreId(3), &Cr3Load { from: None, to: MM, tag: 1, kept_entries: true }, &mut Vec::new());
    assert_eq!(p.on_deliver(CoreId(3), &lazy, &req, 33), LocalFlush::Pages);
}

/// §7: involuntary full flushes at a given rate per million cycles of each core.
#[test]
fn involuntary_flushes_come_at_their_rate() {
    let tree = serde_json::json!({
        "machine": {"sockets": 1, "cores_per_socket": 2, "tlb": {"involuntary_full_flush_per_mcycles": 10.0}},
        "os": {"coherence": "abis"},
        "workload": {"kind": "fpr-munmap", "case": 2, "threads": 1, "ops": 300},
    });
    let v = tlbsim_core::run(tree, &[], std::path::Path::new(".")).unwrap().stats;
    // The core of the compute thread, busy throughout: 10 per million of its cycles.
    let core = &v["per_core"][1];
    let n = core["full_flushes_by_cause"]["involuntary"].as_u64().unwrap() as f64;
    let cycles = core["cycles"].as_u64().unwrap() as f64;
    let expected = cycles * 10.0 / 1e6;
    assert!(n >= expected * 0.8 - 2.0 && n <= expected * 1.2 + 2.0, "{n} involuntary flushes, {expected} expected");
    let bad =
        serde_json::json!({"machine": {"tlb": {"involuntary_full_flush_per_mcycles": -1.0}}, "os": {"coherence": "abis"}, "workload": {"kind": "fpr-munmap"}});
    let err = tlbsim_core::run(bad, &[], std::path::Path::new(".")).err().expect("a negative rate is refused").to_string();
    assert!(err.contains("involuntary_full_flush_per_mcycles"), "{err}");
}

#[test]
fn a_migrated_pte_keeps_linux_young_bit_in_software_and_is_not_flushed_twice() {
    let mut fx = Vec::new();
    let mut p = policy::<2>();
    fresh_map(&mut p);
    // Core 2 faults the page in (direct insertion: hwA clear, private to core 2).
    p.on_demand_fault(CoreId(2), MM, VA, make_pte(Pfn(42), PTE_PRESENT | PTE_USER), 1, &mut fx);
    // Migration to frame 43, young bit kept (Linux 5.19+): hwA cleared, swA set.
    let old = make_pte(Pfn(42), PTE_PRESENT | PTE_USER);
    let mut new = make_pte(Pfn(43), PTE_PRESENT | PTE_USER | PTE_ACCESSED);
    p.on_pte_write(CoreId(0), MM, VA, old, &mut new, &mut fx);
    assert_eq!(new & PTE_ACCESSED, 0);
    assert!(p.pte_accessed(MM, VA, new));
    // The flush of the old translation still reaches core 2 alone ...
    assert_eq!(plan(&mut p, false), vec![(2, 1)]);
    // ... and the next migration of the untouched page needs none.
    assert!(plan(&mut p, false).is_empty());
}

/// ABIS §5.2 as run with `test = "mpm_event"`: 14 cores, the server on 0-7 and wrk on 8-13,
/// 6 wrk threads of `ops` requests each.
fn mpm_event(coherence: &str, ops: u64) -> serde_json::Value {
    let cfg = serde_json::json!({
        "machine": {"preset": "abis-haswell-2s", "sockets": 2, "cores_per_socket": 7},
        "os": {"coherence": coherence, "kernel_interrupts": "arrival"},
        "workload": {"kind": "apache", "test": "mpm_event", "ops": ops},
    });
    tlbsim_core::run(cfg, &[], std::path::Path::new(".")).unwrap().stats
}

#[test]
fn apache_mpm_event_hands_requests_to_idle_workers_and_linux_shoots_down_about_once_per_request() {
    let linux = mpm_event("linux", 200);
    let requests = 6 * 200;
    let u = |v: &serde_json::Value| v.as_u64().unwrap();
    assert_eq!(u(&linux["per_class"]["client"]["ops_completed"]), requests);
    // A worker counts a request after its munmap, past the response: the run ends when wrk
    // has its last responses, perhaps before the last workers count theirs.
    let served = u(&linux["per_class"]["worker"]["ops_completed"]);
    assert!(served <= requests && served + 10 > requests, "served {served} of {requests}");
    // Every request maps the file and unmaps it.
    for call in ["mmap", "munmap"] {
        let calls = u(&linux["totals"]["syscalls_by_call"][call]["calls"]);
        assert!(calls >= served && calls <= requests, "{calls} {call} calls");
    }
    // The listener hands each request to whichever worker is idle: a process's requests
    // are served by many of its workers, on several cores.
    let threads = linux["per_thread"].as_array().unwrap();
    let served: Vec<&serde_json::Value> = threads.iter().filter(|t| t["process"] == 0 && t["class"] == "worker" && u(&t["ops_completed"]) > 0).collect();
    assert!(served.len() > 5, "{} workers of process 0 served requests", served.len());
    let mut cores: Vec<u64> = served.iter().map(|t| u(&t["core"])).collect();
    cores.sort();
    cores.dedup();
    assert!(cores.len() > 3, "process 0's requests were served on cores {cores:?}");
    // wrk runs on its own cores, where the server's shootdowns never go.
    for t in threads.iter().filter(|t| t["class"] == "client") {
        assert!(u(&t["core"]) >= 8, "{t}");
    }
    for c in 8..14 {
        let core = &linux["per_core"][c];
        assert_eq!(u(&core["shootdown_ipis_received"]), 0, "core {c}");
        assert_eq!(u(&core["page_faults"]), 0, "core {c}");
    }
    // ABIS §5.2: "the amount of sent TLB shootdowns becomes almost identical to the number
    // of requests that Apache serves": other cores run the process's other threads.
    let sent = u(&linux["totals"]["shootdowns_sent"]);
    assert!(sent as f64 > 0.6 * requests as f64 && sent <= requests, "linux sent {sent} shootdowns for {requests} requests");
    // The file's PTEs are private to the worker that served the request: ABIS flushes them
    // locally.
    let abis = mpm_event("abis", 200);
    let abis_sent = u(&abis["totals"]["shootdowns_sent"]);
    assert!(abis_sent * 10 < sent, "abis sent {abis_sent}, linux {sent}");
}
