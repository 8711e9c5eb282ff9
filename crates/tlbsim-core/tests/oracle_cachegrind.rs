//! Independent oracle: cachegrind with 4096-byte lines is a set-associative LRU model of a
//! TLB. On the same program, its D1 miss count must equal tlbsim's L1 DTLB misses on the
//! program's lackey trace (both count a read-modify-write as one access, and both see the
//! same addresses: valgrind runs the client identically under either tool).
//!
//! Needs gcc and valgrind, which every machine of this project has.

use serde_json::json;
use std::path::Path;
use std::process::Command;

fn sh(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (gcc and valgrind are required)"));
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// "==123== D1  misses:     40,893  (38,827 rd   +  2,066 wr)" → 40893
fn d1_misses(report: &str) -> u64 {
    let line = report.lines().find(|l| l.contains("D1  misses:")).expect("cachegrind summary has D1 misses");
    let n = line.split(':').nth(1).unwrap().split_whitespace().next().unwrap();
    n.replace(',', "").parse().unwrap()
}

#[test]
fn l1_dtlb_misses_equal_cachegrind_d1_misses() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/oracle_prog.c");
    let prog = dir.path().join("prog");
    sh(Command::new("gcc").args(["-O1", "-o"]).arg(&prog).arg(&src));
    let trace = dir.path().join("prog.lackey");
    sh(Command::new("valgrind").args(["--tool=lackey", "--trace-mem=yes"]).arg(format!("--log-file={}", trace.display())).arg(&prog));
    // (entries, ways): fully associative, 4-way, direct mapped.
    for (entries, ways) in [(64u32, 64u32), (64, 4), (16, 1)] {
        let report = sh(Command::new("valgrind")
            .args(["--tool=cachegrind", "--cache-sim=yes", "--cachegrind-out-file=/dev/null"])
            .arg(format!("--D1={},{ways},4096", entries * 4096))
            .args(["--I1=32768,8,64", "--LL=8388608,16,64"])
            .arg(&prog));
        let expected = d1_misses(&report);
        let cfg = json!({
            "machine": {"cores_per_socket": 1, "tlb": {
                "l1d": {"entries": entries, "ways": ways, "replacement": "lru"},
                "l1d_2m": {"entries": 0}, "l1d_1g": {"entries": 0}, "l2": {"entries": 0}}},
            "workload": {"kind": "trace", "format": "lackey", "paths": [trace], "fetches": false},
        });
        let stats = tlbsim_core::run(cfg, &[], dir.path()).unwrap().stats;
        let misses = stats["per_structure"]["l1d"]["misses"].as_u64().unwrap();
        assert!(expected > 1000, "the program should miss often ({expected})");
        assert_eq!(misses, expected, "{entries} entries, {ways} ways: tlbsim {misses}, cachegrind {expected}");
    }
}
