//! The LRU lock (os/lru.rs): per-CPU batches of new pages drained into the node's LRU under
//! its lruvec lock. will-it-scale `tlb_flush2` (each iteration faults a page in and zaps it
//! with madvise(MADV_DONTNEED)) shows it: with threads the lock contends, with one task it
//! never waits; without the drain in madvise (`os.lru_drain_on_unmap = false`, Rik van
//! Riel's "mm: remove unnecessary calls to lru_add_drain") it is taken once per batch of
//! 31 pages instead of twice per page.

use serde_json::{json, Value};

fn run(threads: u32, policy: &str, drain: bool, ops: u64) -> Value {
    run_with(threads, policy, drain, ops, json!({}))
}

fn run_with(threads: u32, policy: &str, drain: bool, ops: u64, costs: Value) -> Value {
    tlbsim_core::run(
        json!({"machine": {"sockets": 1, "cores_per_socket": 8}, "os": {"coherence": policy, "lru_drain_on_unmap": drain}, "costs": costs,
               "workload": {"kind": "will-it-scale", "test": "tlb_flush2", "mode": "threads", "threads": threads, "ops": ops}}),
        &[],
        std::path::Path::new("."),
    )
    .unwrap()
    .stats
}

fn lruvec(v: &Value, k: &str) -> u64 {
    v["totals"]["locks"]["lruvec_lock"][k].as_u64().unwrap_or_else(|| panic!("lruvec_lock.{k}: {}", v["totals"]["locks"]))
}

#[test]
fn two_threads_contend_on_the_lruvec_lock_and_one_never_waits() {
    let one = run(1, "linux", true, 600);
    assert!(lruvec(&one, "acquisitions") >= 2 * 600, "{}", one["totals"]["locks"]);
    assert_eq!(lruvec(&one, "cycles_waited"), 0);
    assert_eq!(lruvec(&one, "contended"), 0);
    let two = run(2, "linux", true, 600);
    assert!(lruvec(&two, "contended") > 0, "{}", two["totals"]["locks"]);
    assert!(lruvec(&two, "cycles_waited") > 0);
}

#[test]
fn without_the_drain_in_madvise_the_lock_is_taken_once_per_batch() {
    let tip = run(2, "linux", true, 620);
    let removed = run(2, "linux", false, 620);
    let (a, b) = (lruvec(&tip, "acquisitions"), lruvec(&removed, "acquisitions"));
    // Tip: one drain of one page and one free per iteration. Removed: a full batch of 31
    // added, then the 31 pages zapped meanwhile freed: two holds per 31 iterations.
    assert!(a >= 2 * 2 * 620, "{a}");
    assert!(b * 10 < a, "{b} vs {a}");
    let lru = &removed["totals"]["locks"]["lru"];
    assert_eq!(lru["drains_unmap"], 0, "{lru}");
    assert!(lru["drains_full"].as_u64().unwrap() >= 2 * 620 / 31 - 1, "{lru}");
    assert_eq!(tip["totals"]["locks"]["lru"]["drains_full"], 0);
}

#[test]
fn same_seed_same_stats() {
    let a = serde_json::to_string(&run(4, "linux", false, 300)).unwrap();
    let b = serde_json::to_string(&run(4, "linux", false, 300)).unwrap();
    assert_eq!(a, b);
}

/// The four kernels of the INVLPGB cover letter (tip, lru_add_drain removal, INVLPGB,
/// both) at 1, 2, 4 and 8 tasks: `cargo test --release -p tlbsim-core --test suite
/// lru_lock::four_kernels -- --ignored --nocapture`. `TLBSIM_LRU_SCALE=k` multiplies
/// `costs.lru_lock_acquire` and `costs.lru_per_page` by k (a sensitivity sweep over the
/// assumed cache-line transfer, not a fit).
#[test]
#[ignore]
fn four_kernels() {
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|s| s.parse().ok()).unwrap_or(d);
    let ops = env("TLBSIM_WIS_OPS", 2000);
    let k = env("TLBSIM_LRU_SCALE", 1);
    let costs = json!({"lru_lock_acquire": 80 * k, "lru_per_page": 40 * k});
    println!("| kernel | 1 | 2 | 4 | 8 | lruvec waits at 8 (Mcycles) |");
    for (name, policy, drain) in
        [("tip", "linux", true), ("drain removal", "linux", false), ("INVLPGB", "linux-invlpgb", true), ("both", "linux-invlpgb", false)]
    {
        let mut row = format!("| {name} ({policy}, lru_drain_on_unmap = {drain}) |");
        let mut waits = 0;
        for t in [1, 2, 4, 8] {
            let v = run_with(t, policy, drain, ops, costs.clone());
            let secs = v["run"]["makespan_cycles"].as_u64().unwrap() as f64 / 3e9;
            row += &format!(" {:.0}K |", (t as u64 * ops) as f64 / secs / 1e3);
            waits = lruvec(&v, "cycles_waited");
        }
        println!("{row} {:.1} |", waits as f64 / 1e6);
    }
}
