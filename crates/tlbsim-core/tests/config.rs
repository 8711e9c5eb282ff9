//! Config resolution: defaults < preset < file < overrides, and errors that name the key.

use serde_json::json;
use std::path::Path;
use tlbsim_core::config::{load_toml_file, Config, Tagging};
use tlbsim_core::Error;

fn resolve(tree: serde_json::Value, overrides: &[&str]) -> Result<Config, Error> {
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    Config::resolve(tree, &o, Path::new("/base"))
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
