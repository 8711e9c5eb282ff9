//! Long munmap and mprotect calls go one page-table page (512 PTEs) at a time
//! (os/mm/steps.rs; Linux's zap_pmd_range / change_pmd_range): another core walking the
//! range in the middle of the call sees the first table's PTEs changed and the last
//! table's not yet.
//!
//! The region is four page tables' worth (8 MiB of 4 KiB pages, populated, no THP). Each
//! PTE change costs `costs.per_page` = 100,000 cycles here, so each table's step takes
//! about 51 M cycles and the whole call about 205 M. The reader on core 1 waits 70 M
//! cycles (past the first step, before the last), then touches 20 pages of the last table
//! and 20 of the first, none of which its TLB holds: each is a walk of the page table as
//! it is at that moment. A simple model of the call: after step k (k = 0..3), the PTEs of
//! table k are changed and those of later tables are not.

use serde_json::Value;
use tlbsim_core::config::Config;
use tlbsim_core::workload::builder::anon;
use tlbsim_core::workload::program::*;

const TABLE: u64 = 2 << 20;
const PAGES: u64 = 20;

fn cfg(coherence: &str) -> Config {
    let tree = serde_json::json!({
        "machine": {"sockets": 1, "cores_per_socket": 2},
        "os": {"coherence": coherence, "thp": false},
        "costs": {"per_page": 100_000},
    });
    Config::resolve(tree, &[], std::path::Path::new(".")).unwrap()
}

/// `count` distinct pages of table `table` of slot 0, in order (stride one page).
fn touch(table: u64, write: bool) -> Op {
    Op::Access {
        slot: 0,
        pattern: Pattern::Sequential,
        mode: if write { AccessMode::Write } else { AccessMode::Read },
        count: PAGES,
        offset: table * TABLE + 4096,
        len: 0,
        stride: 4096,
    }
}

/// Core 0 runs `call` on the 4-table region; core 1 waits, then touches the last table's
/// pages, then the first's, then exits.
fn run(coherence: &str, call: Op, write: bool) -> Value {
    let region = anon(4 * TABLE, true).populated();
    let caller = vec![Op::Compute { cycles: 1000 }, call, Op::CountOp];
    let reader = vec![Op::Compute { cycles: 70_000_000 }, touch(3, write), Op::CountOp, touch(0, write), Op::CountOp];
    tlbsim_core::os::run(&cfg(coherence), caller_and(region, caller, ("reader", reader, false))).unwrap()
}

/// One process with one region: "caller" on core 0 runs `caller`; the other thread (name,
/// program, daemon) runs on core 1.
fn caller_and(region: MapSpec, caller: Vec<Op>, other: (&str, Vec<Op>, bool)) -> Workload {
    Workload { slots: 1, ..crate::common::two_pinned_threads(vec![region], ("caller", caller, false), other) }
}

fn total(v: &Value, k: &str) -> u64 {
    v["totals"][k].as_u64().unwrap_or_else(|| panic!("no totals.{k}"))
}

fn end_cycle(v: &Value, name: &str) -> u64 {
    let t = v["per_thread"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap();
    t["end_cycle"].as_u64().unwrap()
}

#[test]
fn a_reader_sees_munmap_reach_the_first_table_before_the_last() {
    let v = run("linux", Op::Munmap { slot: 0 }, false);
    // The last table's pages still walk to their frames (no fault); the first table's are
    // gone with its VMA: each is a SIGSEGV. Applied at its start, the call would have made
    // all 40 fault.
    assert_eq!(total(&v, "segv_signals"), PAGES, "{:#}", v["totals"]);
    // And the reader was done before the call was: the walks were in the middle of it.
    let (reader, caller) = (end_cycle(&v, "reader"), end_cycle(&v, "caller"));
    assert!(reader < caller, "reader ended at {reader}, the munmap at {caller}");
    assert!(caller > 4 * 512 * 100_000, "the munmap's four tables cost their PTEs: {caller}");
    // Its pages were used before the protocol ended: no violation.
    assert_eq!((total(&v, "violations_security"), total(&v, "violations_consistency")), (0, 0), "{}", v["violations"]);
}

#[test]
fn a_writer_sees_mprotect_reach_the_first_table_before_the_last() {
    let v = run("linux", Op::Mprotect { slot: 0, writable: false }, true);
    // Writes to the last table go through its still-writable PTEs; the first table's find
    // read-only PTEs: the first waits for the call (its VMA write-locked) and, retried
    // under mmap_lock once the call is over, ends in SIGSEGV as the other 19 do. Applied
    // at its start, the call would have made all 40 fault.
    assert_eq!(total(&v, "segv_signals"), PAGES, "{:#}", v["totals"]);
    assert_eq!((total(&v, "violations_security"), total(&v, "violations_consistency")), (0, 0), "{}", v["violations"]);
}

/// Core 0 munmaps `pages` populated pages while core 1 spins in the same address space:
/// the flush requests core 0 sent.
fn munmap_flushes(pages: u64) -> u64 {
    let region = anon(pages * 4096, true).populated();
    let spin = vec![Op::Loop { count: 0, body: 1 }, Op::Compute { cycles: 1000 }];
    let w = caller_and(region, vec![Op::Compute { cycles: 1000 }, Op::Munmap { slot: 0 }, Op::CountOp], ("spin", spin, true));
    let tree = serde_json::json!({"machine": {"sockets": 1, "cores_per_socket": 2}, "os": {"coherence": "linux", "thp": false}});
    let v = tlbsim_core::os::run(&Config::resolve(tree, &[], std::path::Path::new(".")).unwrap(), w).unwrap();
    assert_eq!((total(&v, "violations_security"), total(&v, "violations_consistency")), (0, 0), "{}", v["violations"]);
    eprintln!("{pages} pages: {:#}", v["totals"]);
    total(&v, "shootdowns_sent")
}

#[test]
fn a_munmap_flushes_in_mid_call_when_its_gather_is_full() {
    // mm/mmu_gather.c: 8 pages on the stack + 19 batch pages of 510 = 9,698 pages; the
    // 9,699th page zapped finds the gather full and forces a flush before the zap goes on.
    let capacity = 8 + 19 * 510;
    assert_eq!(munmap_flushes(capacity), 1, "a full gather, flushed once at the end");
    assert_eq!(munmap_flushes(capacity + 1), 2, "one page more: a flush in mid-call and one at the end");
    assert_eq!(munmap_flushes(2 * capacity + 1), 3);
}

/// Core 0 touches every page of a 3-table shared file mapping (writing them: dirty, or
/// reading them: clean), then munmaps it, while core 1 spins in the same address space:
/// the flush requests core 0 sent.
fn file_munmap_flushes(write: bool) -> u64 {
    let pages = 3 * 512;
    let region = tlbsim_core::workload::builder::file_map(0, 0, pages * 4096, true, true);
    let mode = if write { AccessMode::Write } else { AccessMode::Read };
    let touch = Op::Access { slot: 0, pattern: Pattern::Sequential, mode, count: pages, offset: 0, len: 0, stride: 4096 };
    let spin = vec![Op::Loop { count: 0, body: 1 }, Op::Compute { cycles: 1000 }];
    let mut w = caller_and(region, vec![touch, Op::Munmap { slot: 0 }, Op::CountOp], ("spin", spin, true));
    w.files = vec![FileSpec { name: "data".into(), pages }];
    let tree = serde_json::json!({"machine": {"sockets": 1, "cores_per_socket": 2}, "os": {"coherence": "linux", "thp": false}});
    let v = tlbsim_core::os::run(&Config::resolve(tree, &[], std::path::Path::new(".")).unwrap(), w).unwrap();
    assert_eq!((total(&v, "violations_security"), total(&v, "violations_consistency")), (0, 0), "{}", v["violations"]);
    total(&v, "shootdowns_sent")
}

#[test]
fn a_munmap_flushes_at_the_end_of_each_table_that_held_a_dirty_page_cache_page() {
    // zap_present_folio_ptes: a dirty file page's rmap removal waits for the flush
    // (tlb_delay_rmap), which zap_pte_range forces before it leaves the table: one flush
    // per table, then the call's own at its end (tlb_finish_mmu), for the page-table
    // pages free_pgtables freed after the zap. Clean pages: that one flush alone.
    assert_eq!(file_munmap_flushes(false), 1);
    assert_eq!(file_munmap_flushes(true), 3 + 1);
}
