//! The OS model and multi-core engine on hand-built workloads (the compiled IR, so these
//! tests do not depend on the scenario parser): shootdown IPIs per operation, lazy TLB,
//! the checker under each policy, determinism.

use serde_json::Value;
use tlbsim_core::config::Config;
use tlbsim_core::workload::program::*;

fn anon(bytes: u64) -> MapSpec {
    MapSpec { bytes, backing: Backing::Anonymous, shared: false, populate: false, writable: true }
}

fn write(slot: usize, count: u64) -> Op {
    Op::Access { slot, pattern: Pattern::Sequential, mode: AccessMode::Write, count, offset: 0, len: 0, stride: 4096 }
}

fn read(slot: usize, count: u64) -> Op {
    Op::Access { slot, pattern: Pattern::Sequential, mode: AccessMode::Read, count, offset: 0, len: 0, stride: 4096 }
}

/// A 2-core machine and `coherence`.
fn cfg(coherence: &str) -> Config {
    let tree = serde_json::json!({
        "machine": {"sockets": 1, "cores_per_socket": 2},
        "os": {"coherence": coherence},
    });
    Config::resolve(tree, &[], std::path::Path::new(".")).unwrap()
}

/// One process: thread 0 on core 0 runs `ops` (then exits); thread 1 on core 1 is a daemon
/// sibling running `sibling` forever (None: no sibling).
fn two_threads(ops: Vec<Op>, sibling: Option<Vec<Op>>) -> Workload {
    let mut programs = vec![ops];
    let mut threads = vec![ThreadSpec { name: "measure".into(), class: "measure".into(), core: Some(0), program: 0, daemon: false }];
    if let Some(s) = sibling {
        programs.push(s);
        threads.push(ThreadSpec { name: "sibling".into(), class: "sibling".into(), core: Some(1), program: 1, daemon: true });
    }
    Workload {
        groups: vec![],
        files: vec![],
        processes: vec![ProcessSpec { name: "p".into(), group: 0, regions: vec![], threads }],
        programs,
        slots: 2,
    }
}

fn looped(count: u64, body: Vec<Op>) -> Vec<Op> {
    let mut v = vec![Op::Loop { count, body: body.len() }];
    v.extend(body);
    v
}

fn spin() -> Vec<Op> {
    looped(0, vec![Op::Compute { cycles: 1000 }])
}

fn sleep() -> Vec<Op> {
    looped(0, vec![Op::Block { cycles: 10_000_000 }])
}

fn run(coherence: &str, w: Workload) -> Value {
    tlbsim_core::os::run(&cfg(coherence), w).unwrap()
}

fn ipis_per_op(v: &Value, ops: u64) -> f64 {
    v["totals"]["shootdown_ipis_received"].as_u64().unwrap() as f64 / ops as f64
}

fn munmap_4k(ops: u64) -> Vec<Op> {
    looped(ops, vec![Op::Mmap { slot: 0, spec: anon(4096) }, write(0, 1), Op::Munmap { slot: 0 }, Op::CountOp])
}

#[test]
fn munmap_4k_spinning_sibling_gets_one_ipi_per_op() {
    let v = run("linux", two_threads(munmap_4k(1000), Some(spin())));
    assert_eq!(v["per_thread"][0]["ops_completed"], 1000);
    let r = ipis_per_op(&v, 1000);
    assert!((r - 1.0).abs() < 0.05, "{r}");
    assert_eq!(v["totals"]["violations_security"], 0);
    assert_eq!(v["totals"]["violations_consistency"], 0);
}

#[test]
fn munmap_4k_sleeping_sibling_is_lazy_and_skipped() {
    let v = run("linux", two_threads(munmap_4k(1000), Some(sleep())));
    assert_eq!(ipis_per_op(&v, 1000), 0.0);
}

#[test]
fn munmap_4k_alone_sends_nothing() {
    let v = run("linux", two_threads(munmap_4k(1000), None));
    assert_eq!(ipis_per_op(&v, 1000), 0.0);
}
