//! AutoNUMA (`os.numa_balancing`, os/numa.rs): data pages move to the node of the thread
//! that uses them, page tables stay; shared pages pass the two-stage filter; the scan
//! period backs off while faults are local. (Its safety under every policy:
//! tests/os_property.rs `numa_balancing_is_clean_under_every_policy`.)

use serde_json::{json, Value};
use tlbsim_core::config::Config;

fn run(v: Value) -> Value {
    let cfg = Config::resolve(v, &[], std::path::Path::new(".")).unwrap();
    tlbsim_core::run_resolved(&cfg).unwrap()
}

fn worker(name: &str, core: u32, loops: u64) -> Value {
    json!({"name": name, "core": core, "program": [
        {"op": "loop", "count": loops, "body": [
            {"op": "access", "region": "heap", "pattern": "random", "mode": "mixed", "write_fraction": 0.3, "count": 1000},
            {"op": "count"}]},
        {"op": "exit"}]})
}

/// A 4 MiB heap populated by a thread on socket 0 (data and page tables on node 0), then
/// used by `workers`, on a 2-socket machine with scans every `period_ms` or more.
fn heap(numa: bool, period_ms: f64, workers: Vec<Value>) -> Value {
    let mut threads = vec![json!({"name": "init", "core": 0, "program": [{"op": "exit"}]})];
    threads.extend(workers);
    // The scanner's keys only with the scanner (a run refuses settings that cannot matter).
    let os = if numa { json!({"numa_balancing": true, "numa_scan_delay_ms": 0.05, "numa_scan_period_ms": period_ms}) } else { json!({}) };
    run(json!({
        "machine": {"sockets": 2, "cores_per_socket": 2},
        "os": os,
        "workload": {"kind": "scenario", "scenario": {"process": [
            {"name": "app", "region": [{"name": "heap", "bytes": 4 << 20, "populate": true}], "thread": threads}]}},
    }))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn clean(s: &Value) {
    assert_eq!(u(&s["totals"]["violations_security"]) + u(&s["totals"]["violations_consistency"]), 0, "stale translations used");
}

#[test]
fn data_moves_to_its_only_user_and_page_tables_stay() {
    let off = heap(false, 0.5, vec![worker("remote", 2, 200)]);
    assert_eq!(u(&off["totals"]["memory_per_node"][0]["data_pages"]), 1024);
    assert!(off["totals"].get("numa_balancing").is_none());
    let on = heap(true, 0.5, vec![worker("remote", 2, 200)]);
    clean(&on);
    let n = &on["totals"]["numa_balancing"];
    assert!(u(&n["scans"]) >= 1);
    // Every page is PROT_NONE after the first scan; its first hinting fault moves it (a
    // first fault is private).
    assert_eq!(u(&n["pages_migrated"]), 1024, "{n}");
    assert!(u(&n["hint_faults"]) >= 1024);
    let nodes = &on["totals"]["memory_per_node"];
    assert_eq!((u(&nodes[0]["data_pages"]), u(&nodes[1]["data_pages"])), (0, 1024));
    // Mitosis §3.1 observation 4: page tables are never migrated.
    assert_eq!(nodes[0]["page_table_pages"], off["totals"]["memory_per_node"][0]["page_table_pages"]);
    assert_eq!(u(&nodes[1]["page_table_pages"]), 0);
    assert_eq!(u(&on["totals"]["pt_accesses_local"]), 0, "the walks still read node 0's tables");
}

#[test]
fn a_page_used_from_both_nodes_moves_only_after_two_faults_from_one() {
    let s = heap(true, 0.1, vec![worker("near", 1, 200), worker("remote", 2, 200)]);
    clean(&s);
    let n = &s["totals"]["numa_balancing"];
    let remote_faults = u(&n["hint_faults"]) - u(&n["hint_faults_local"]);
    let moved = u(&n["pages_migrated"]);
    assert!(remote_faults > 10_000, "{n}");
    // A fault from the other node than the page's last one does not move it.
    assert!(moved * 2 < remote_faults, "{n}");
    assert!(moved > 1024, "pages still move back and forth: {n}");
    // The scans' flushes reach the other core running the process.
    assert!(u(&s["totals"]["shootdowns_sent_by_reason"]["numa_hint"]) > 0);
    assert!(u(&s["totals"]["shootdown_ipis_sent"]) > 0);
}

#[test]
fn the_scan_period_backs_off_while_faults_are_local() {
    // A thread on node 0 alone: its faults are local, so each scan lengthens the period.
    let s = heap(true, 0.1, vec![worker("near", 1, 2000)]);
    clean(&s);
    let n = &s["totals"]["numa_balancing"];
    assert_eq!(u(&n["pages_migrated"]), 0);
    assert_eq!(u(&n["hint_faults"]), u(&n["hint_faults_local"]));
    let cycles = u(&s["per_thread"][1]["end_cycle"]);
    // At the fixed minimum period (0.1 ms, 300,000 cycles at 3 GHz) there would be one scan
    // per period.
    let at_min = cycles / 300_000;
    assert!(u(&n["scans"]) * 2 < at_min, "{} scans in {cycles} cycles: {n}", u(&n["scans"]));
}

/// `os.numa_hint_order`: Linux 6.x moves a page while its PTE is still PROT_NONE, with no
/// flush; Linux 4.x restored the PTE first, so every page moved cost a shootdown to the
/// other cores running the process.
#[test]
fn restoring_the_pte_before_the_move_costs_a_flush_per_page_moved() {
    let run_order = |order: &str| {
        let threads = vec![
            json!({"name": "init", "core": 0, "program": [{"op": "exit"}]}),
            worker("remote", 2, 200),
            // A sibling on the other socket's second core keeps the process loaded there.
            json!({"name": "sibling", "core": 3, "daemon": true, "program": [
                {"op": "loop", "count": 0, "body": [{"op": "compute", "cycles": 1000}]}]}),
        ];
        run(json!({
            "machine": {"sockets": 2, "cores_per_socket": 2},
            "os": {"numa_balancing": true, "numa_scan_delay_ms": 0.05, "numa_scan_period_ms": 0.5, "numa_hint_order": order},
            "workload": {"kind": "scenario", "scenario": {"process": [
                {"name": "app", "region": [{"name": "heap", "bytes": 4 << 20, "populate": true}], "thread": threads}]}},
        }))
    };
    let (modern, old) = (run_order("migrate-first"), run_order("restore-first"));
    for s in [&modern, &old] {
        clean(s);
        assert_eq!(u(&s["totals"]["numa_balancing"]["pages_migrated"]), 1024);
    }
    let migration = |s: &Value| u(&s["totals"]["shootdowns_sent_by_reason"]["migration"]);
    // (A page whose scan flush is still in flight is the modern kernel's one exception.)
    assert!(migration(&modern) <= 8, "{}", migration(&modern));
    assert_eq!(u(&old["totals"]["numa_balancing"]["migrations_flushed"]), 1024);
    assert_eq!(migration(&old), 1024, "{}", old["totals"]["shootdowns_sent_by_reason"]);
    let bad = json!({"os": {"numa_hint_order": "later"}});
    let err = Config::resolve(bad, &[], std::path::Path::new(".")).err().unwrap().to_string();
    assert!(err.contains("os.numa_hint_order"), "{err}");
}
