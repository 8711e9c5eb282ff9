//! Small golden runs: fixed configs on committed traces must give exactly the committed
//! stats.json. A change that moves these numbers must be deliberate: rerun with
//! `TLBSIM_UPDATE_GOLDEN=1 cargo test --release -p tlbsim-core --test suite golden::` and say why
//! in the commit.

use serde_json::{json, Value};
use std::path::Path;

fn check(name: &str, cfg: Value) {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let stats = tlbsim_core::run(cfg, &[], &data).unwrap().stats;
    let text = serde_json::to_string_pretty(&stats).unwrap() + "\n";
    let golden = data.join(format!("golden/{name}.stats.json"));
    if std::env::var_os("TLBSIM_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &text).unwrap();
    }
    let expected = std::fs::read_to_string(&golden).unwrap_or_else(|e| panic!("{}: {e}", golden.display()));
    assert!(text == expected, "{name}: stats differ from {}", golden.display());
}

#[test]
fn golden_lackey_tiny_default_machine() {
    check(
        "lackey_tiny_default",
        json!({"machine": {"cores_per_socket": 1},
               "workload": {"kind": "trace", "format": "lackey", "paths": ["lackey_tiny.txt.gz"]}}),
    );
}

#[test]
fn golden_champsim_tagtlb_p4() {
    check(
        "champsim_tagtlb_p4",
        json!({"machine": {"preset": "tagtlb-p4"},
               "workload": {"kind": "trace", "format": "champsim", "paths": ["champsim_small.trace.xz"]}}),
    );
}

#[test]
fn golden_two_socket_synthetic() {
    check(
        "synthetic_mitosis_2s",
        json!({"machine": {"preset": "mitosis-4s", "sockets": 2, "cores_per_socket": 2},
               "os": {"pt_placement": "interleave"},
               "workload": {"kind": "synthetic", "accesses": 20000, "region_bytes": 268435456}}),
    );
}
