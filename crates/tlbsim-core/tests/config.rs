//! Config resolution: defaults < preset < file < overrides, and errors that name the key.

use serde_json::json;
use std::path::Path;
use tlbsim_core::config::{load_toml_file, Config, Tagging};
use tlbsim_core::Error;

fn resolve(tree: serde_json::Value, overrides: &[&str]) -> Result<Config, Error> {
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    // As a run, `tlbsim config` and `tlbsim.resolve` check it.
    Config::resolve_checked(tree, &o, Path::new("/base"))
}

fn config_error(r: Result<Config, Error>) -> (String, String) {
    match r {
        Err(Error::Config { key, message }) => (key, message),
        Err(e) => panic!("expected a config error, got {e}"),
        Ok(_) => panic!("expected a config error, got a config"),
    }
}

/// The issue's example config is a user contract: it must parse as written.
const EXAMPLE: &str = r#"
seed = 1
[machine]
preset = "host"
sockets = 1
cores_per_socket = 1
[machine.tlb]
tagging = "pcid"
[machine.tlb.l1d]
entries = 256
ways = 4
replacement = "lru"
[machine.tlb.l2]
entries = 0
[workload]
kind = "trace"
format = "lackey"
paths = ["prog.lackey.gz"]
fetches = false
"#;

#[test]
fn example_config_parses_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("example.toml");
    std::fs::write(&p, EXAMPLE).unwrap();
    let tree = load_toml_file(&p).unwrap();
    let cfg = Config::resolve(tree, &[], dir.path()).unwrap();
    assert_eq!(cfg.machine.preset, "host");
    assert_eq!((cfg.machine.sockets, cfg.machine.cores_per_socket), (1, 1));
    assert_eq!((cfg.machine.tlb.l1d.entries, cfg.machine.tlb.l1d.ways), (256, 4));
    assert_eq!(cfg.machine.tlb.l2.entries, 0);
    assert_eq!(cfg.machine.tlb.tagging, Tagging::Pcid);
    assert_eq!(cfg.workload.params["paths"], json!([dir.path().join("prog.lackey.gz")]));
    assert!(!cfg.workload.fetches);
}

#[test]
fn effective_config_round_trips() {
    let cfg = resolve(json!({"machine": {"preset": "mitosis-4s"}}), &["machine.tlb.l1d.entries=32"]).unwrap();
    let again = resolve(cfg.to_json(), &[]).unwrap();
    assert_eq!(cfg, again);
}

#[test]
fn preset_then_user_then_override() {
    let cfg = resolve(json!({"machine": {"preset": "mitosis-4s", "cores_per_socket": 2}}), &["machine.sockets=2"]).unwrap();
    // From the preset (Mitosis §8).
    assert_eq!(cfg.machine.tlb.l1d.entries, 64);
    assert_eq!(cfg.machine.tlb.l2.entries, 1024);
    assert_eq!(cfg.machine.memory.remote_latency, 580);
    // User and override win.
    assert_eq!(cfg.machine.cores_per_socket, 2);
    assert_eq!(cfg.machine.sockets, 2);
    // A table given in part keeps the other keys.
    let cfg = resolve(json!({"machine": {"preset": "didi-cmp", "tlb": {"l1d": {"entries": 256}}}}), &[]).unwrap();
    assert_eq!((cfg.machine.tlb.l1d.entries, cfg.machine.tlb.l1d.ways, cfg.machine.tlb.l1d.latency), (256, 4, 2));
}

#[test]
fn every_preset_resolves() {
    for p in tlbsim_core::config::presets::NAMES {
        let cfg = resolve(json!({"machine": {"preset": p}}), &[]).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert_eq!(&cfg.machine.preset, p);
        // Every preset's memory numbers make a valid cache model when a user turns it on.
        resolve(json!({"machine": {"preset": p, "memory": {"model": "cache"}}}), &[]).unwrap_or_else(|e| panic!("{p} with memory.model = cache: {e}"));
    }
    let cfg = resolve(json!({"machine": {"preset": "didi-cmp"}}), &[]).unwrap();
    assert_eq!((cfg.machine.memory.llc_bytes, cfg.machine.memory.llc_ways, cfg.machine.memory.llc_latency), (8 << 20, 8, 22));
    let cfg = resolve(json!({"machine": {"preset": "abis-haswell-2s"}}), &[]).unwrap();
    assert_eq!((cfg.machine.sockets, cfg.machine.cores_per_socket), (2, 24));
    let cfg = resolve(json!({"machine": {"preset": "tagtlb-p4"}}), &[]).unwrap();
    assert_eq!(cfg.machine.tlb.l1d.replacement, tlbsim_core::tlb::Replacement::Fifo);
    assert_eq!(cfg.machine.tlb.l1d.ways, 64);
}

#[test]
fn unknown_key_is_named() {
    let (key, msg) = config_error(resolve(json!({"machine": {"tlb": {"l1d": {"entires": 4}}}}), &[]));
    assert_eq!(key, "machine.tlb.l1d.entires");
    assert!(msg.contains("unknown"), "{msg}");
    assert!(msg.contains("entries"), "should list what is allowed: {msg}");
    let (key, _) = config_error(resolve(json!({"bogus": 1}), &[]));
    assert_eq!(key, "bogus");
}

#[test]
fn wrong_type_is_named() {
    let (key, msg) = config_error(resolve(json!({}), &["machine.tlb.l1d.ways=\"four\""]));
    assert_eq!(key, "machine.tlb.l1d.ways");
    assert!(msg.contains("invalid type"), "{msg}");
    let (key, msg) = config_error(resolve(json!({}), &["machine.tlb.l1d.replacement=mru"]));
    assert_eq!(key, "machine.tlb.l1d.replacement");
    assert!(msg.contains("lru") && msg.contains("plru"), "{msg}");
}

#[test]
fn out_of_range_is_named() {
    let (key, msg) = config_error(resolve(json!({}), &["machine.sockets=0"]));
    assert_eq!(key, "machine.sockets");
    assert!(msg.contains("1 to 64"), "{msg}");
    let (key, _) = config_error(resolve(json!({}), &["machine.tlb.l1d.entries=64", "machine.tlb.l1d.ways=3"]));
    assert_eq!(key, "machine.tlb.l1d.ways");
    let (key, _) = config_error(resolve(json!({}), &["machine.tlb.l1d.entries=64", "machine.tlb.l1d.ways=128"]));
    assert_eq!(key, "machine.tlb.l1d.ways");
    let (key, _) = config_error(resolve(json!({}), &["os.pt_placement=fixed:3"]));
    assert_eq!(key, "os.pt_placement");
    let (key, _) = config_error(resolve(json!({}), &["os.pt_levels=3"]));
    assert_eq!(key, "os.pt_levels");
    let (key, _) = config_error(resolve(json!({}), &["machine.preset=nehalem"]));
    assert_eq!(key, "machine.preset");
    let (key, _) = config_error(resolve(json!({}), &["workload.kind=trace"]));
    assert_eq!(key, "workload.paths");
    let (key, _) = config_error(resolve(json!({}), &["workload.threads=3"]));
    assert_eq!(key, "workload.threads");
}

#[test]
fn override_values_are_toml_literals_or_strings() {
    let cfg = resolve(json!({}), &["os.thp=true", "os.pt_placement=interleave", "workload.write_fraction=0.5"]).unwrap();
    assert!(cfg.os.thp);
    assert_eq!(cfg.os.pt_placement, "interleave");
    assert_eq!(cfg.workload.params["write_fraction"], json!(0.5));
    let (key, _) = config_error(resolve(json!({}), &["noequals"]));
    assert_eq!(key, "noequals");
}

#[test]
fn malformed_toml_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(&p, "seed = 1\n[machine\nsockets = 2\n").unwrap();
    let err = load_toml_file(&p).unwrap_err().to_string();
    assert!(err.contains("line 2"), "{err}");
}

/// Issue 49 item 3: a key whose value cannot affect the run is refused, naming what would
/// make it matter; the same key at its default (or the preset's value) is accepted.
#[test]
fn settings_that_cannot_matter_are_refused() {
    let os = json!({"kind": "fpr-munmap", "threads": 2, "ops": 10});
    let cases: &[(serde_json::Value, &[&str], &str, &str)] = &[
        // Trace mode (the default kind is "synthetic"): no OS model runs.
        (json!({}), &["os.coherence=none"], "os.coherence", "runs in trace mode, without the OS model"),
        (json!({}), &["os.locks=false"], "os.locks", "OS-mode workload kind"),
        (json!({}), &["recycling.fpr.all_mmaps=true"], "recycling.fpr.all_mmaps", "runs in trace mode"),
        (json!({"workload": {"kind": "synthetic", "corunner": {"kind": "stream", "socket": 0}}}), &[], "workload.corunner.kind", "trace mode"),
        // OS mode: the trace engine's own keys.
        (json!({"workload": os}), &["sim.fault_cycles=100"], "sim.fault_cycles", "only trace mode"),
        // A plug-in's table while its switch selects another entry.
        (
            json!({"workload": os}),
            &["recycling.fpr.all_mmaps=true"],
            "recycling.fpr.all_mmaps",
            "os.recycling = \"none\" selects another entry, and [recycling.fpr] is read only when os.recycling = \"fpr\"",
        ),
        (json!({"workload": os}), &["coherence.latr.tick_interval=1000"], "coherence.latr.tick_interval", "os.coherence = \"linux\""),
        (json!({}), &["placement.mitosis.replicas=none"], "placement.mitosis.replicas", "os.pt_placement = \"first-touch\""),
        // The flat memory model: no caches, and data costs the same on every node.
        (json!({"machine": {"sockets": 2}}), &["os.data_placement=fixed:1"], "os.data_placement", "machine.memory.model = \"cache\""),
        (json!({}), &["machine.memory.llc_bytes=1048576"], "machine.memory.llc_bytes", "machine.memory.model = \"cache\""),
        (
            json!({"machine": {"sockets": 2, "memory": {"latency_matrix": [[100, 200], [200, 100]]}}}),
            &["machine.memory.remote_latency=300"],
            "machine.memory.remote_latency",
            "latency_matrix",
        ),
        // A wake's exit latency from the curve, when there is one.
        (json!({"machine": {"idle": {"exit_curve": [[0.0, 1.0, 2.0, 3.0]]}}}), &["machine.idle.exit_ns=1000"], "machine.idle.exit_ns", "exit_curve is set"),
        (
            json!({"machine": {"idle": {"wake_ipi_curve": [[0.0, 2.0]]}}}),
            &["machine.idle.wake_ipi_ns=1000"],
            "machine.idle.wake_ipi_ns",
            "wake_ipi_curve is set",
        ),
        // TLB switches and their sub-keys.
        (json!({}), &["machine.tlb.tmt_entries=8"], "machine.tlb.tmt_entries", "tagging = \"cr3\""),
        (json!({}), &["machine.tlb.partition_epoch_instructions=5000"], "machine.tlb.partition_epoch_instructions", "partition_controller = \"utility\""),
        (
            json!({"machine": {"tlb": {"partition_controller": "utility"}}}),
            &["machine.tlb.partition_goal_mptti=3.0"],
            "machine.tlb.partition_goal_mptti",
            "mptti-ceiling",
        ),
        (json!({}), &["os.thp_failure_rate=0.5"], "os.thp_failure_rate", "os.thp = true"),
        (json!({}), &["machine.tlb.partition_at_flush=true"], "machine.tlb.partition_at_flush", "partition_controller = \"utility\""),
    ];
    for (tree, overrides, key, says) in cases {
        let (k, m) = config_error(resolve(tree.clone(), overrides));
        assert_eq!(&k, key, "{overrides:?}: {m}");
        assert!(m.contains("cannot matter") && m.contains(says), "{overrides:?}: {m}");
    }
    // What makes each matter is accepted, and so is every key at its default.
    let accepted: &[(serde_json::Value, &[&str])] = &[
        (json!({"workload": os}), &["os.coherence=none", "os.locks=false", "costs.syscall=5"]),
        (json!({"workload": os}), &["os.recycling=fpr", "recycling.fpr.all_mmaps=true"]),
        (json!({"workload": os}), &["os.coherence=latr", "coherence.latr.tick_interval=1000"]),
        (json!({"machine": {"sockets": 2, "memory": {"model": "cache"}}}), &["os.data_placement=fixed:1", "machine.memory.llc_bytes=1048576"]),
        (json!({"machine": {"sockets": 2}}), &["os.data_placement=interleave"]),
        (json!({"machine": {"sockets": 2}, "workload": os}), &["os.data_placement=fixed:1", "os.numa_balancing=true"]),
        (json!({}), &["machine.tlb.partition_controller=utility", "machine.tlb.partition_at_flush=true"]),
        // `[costs]` describes the machine (a calibrated preset sets it): accepted in trace mode.
        (json!({}), &["costs.syscall=5"]),
        (json!({}), &["os.coherence=linux", "os.recycling=none", "recycling.fpr.all_mmaps=false", "sim.quantum_cycles=0", "machine.tlb.tmt_entries=4"]),
        (json!({"workload": os}), &["sim.fault_cycles=0", "sim.batch=4096"]),
        (json!({}), &["os.thp=true", "os.thp_failure_rate=0.5"]),
        // The preset's own values are not the user's settings: mitosis-4s runs the cache model.
        (json!({"machine": {"preset": "mitosis-4s", "memory": {"model": "flat"}}}), &[]),
    ];
    for (tree, overrides) in accepted {
        if let Err(e) = resolve(tree.clone(), overrides) {
            panic!("{tree} {overrides:?}: {e}");
        }
    }
    // A run's effective config (every key written out) resolves again, in either mode.
    for tree in [json!({}), json!({"workload": os})] {
        let cfg = resolve(tree, &[]).unwrap();
        resolve(cfg.to_json(), &[]).unwrap();
    }
}

/// Issue 49 item 7: errors speak of integers, numbers, strings, lists and tables, never of
/// Rust's types.
#[test]
fn type_errors_name_config_types_not_rust_types() {
    let cases: &[(serde_json::Value, &str, &str)] = &[
        (json!({"machine": {"sockets": "two"}}), "machine.sockets", "expected an integer from 0 to 4294967295"),
        (json!({"machine": {"sockets": -1}}), "machine.sockets", "expected an integer from 0 to 4294967295"),
        (json!({"seed": 1.5}), "seed", "expected an integer"),
        (json!({"machine": {"frequency_ghz": "fast"}}), "machine.frequency_ghz", "expected a number"),
        (json!({"machine": {"tlb": {"l1d": 64}}}), "machine.tlb.l1d", "expected a table"),
        (json!({"machine": {"tlb": {"tagging": 3}}}), "machine.tlb.tagging", "expected a string"),
        (json!({"machine": {"memory": {"latency_matrix": {"a": 1}}}}), "machine.memory.latency_matrix", "invalid type: a table, expected a list"),
        (json!({"workload": {"kind": "fpr-munmap", "ops": "many"}}), "workload.ops", "expected an integer"),
        (json!({"workload": {"kind": "fpr-munmap"}, "os": {"recycling": "fpr"}, "recycling": {"fpr": 3}}), "recycling.fpr", "expected a table"),
    ];
    for (tree, key, says) in cases {
        let (k, m) = config_error(resolve(tree.clone(), &[]));
        assert_eq!(&k, key, "{tree}: {m}");
        assert!(m.contains(says), "{tree}: {m}");
        for rust in ["u32", "u64", "f64", "struct", "enum", "map", "sequence"] {
            assert!(!m.split(|c: char| !c.is_alphanumeric()).any(|w| w == rust), "{tree}: {m} names a Rust type");
        }
    }
}
