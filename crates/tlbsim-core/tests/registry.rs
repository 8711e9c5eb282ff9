//! The plug-in registries (src/registry.rs): every axis lists its entries with a summary
//! and documented parameters, fills config.json with every entry's defaults, refuses a
//! table of an unknown entry or an unknown key by name, and a moved key names where it went.

use serde_json::json;
use std::path::Path;
use tlbsim_core::registry::Entry;
use tlbsim_core::Error;

fn axes() -> Vec<(&'static str, Vec<Entry>)> {
    vec![
        ("coherence", tlbsim_core::coherence::entries()),
        ("recycling", tlbsim_core::recycling::entries()),
        ("placement", tlbsim_core::placement::entries()),
        ("hypervisor", tlbsim_core::hypervisor::entries()),
        ("machine.preset", tlbsim_core::config::presets::entries()),
        ("workload.kind", tlbsim_core::workload::generators::entries()),
    ]
}

fn config_error(tree: serde_json::Value, overrides: &[&str]) -> (String, String) {
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    match tlbsim_core::config::Config::resolve(tree, &o, Path::new(".")) {
        Err(Error::Config { key, message }) => (key, message),
        Err(e) => panic!("expected a config error, got {e}"),
        Ok(_) => panic!("expected a config error, got a config"),
    }
}

#[test]
fn every_entry_has_a_summary_and_every_parameter_a_doc_and_a_default() {
    for (axis, entries) in axes() {
        assert!(!entries.is_empty(), "{axis}");
        for e in entries {
            assert!(e.summary.len() > 10, "{axis}.{}: summary {:?}", e.name, e.summary);
            let defaults = (e.defaults)();
            let docs = (e.params)();
            let keys: Vec<&str> = defaults.as_object().map(|m| m.keys().map(String::as_str).collect()).unwrap_or_default();
            assert_eq!(keys, docs.iter().map(|d| d.key).collect::<Vec<_>>(), "{axis}.{}: documented keys are the table's keys", e.name);
            for d in docs {
                assert!(!d.doc.trim().is_empty(), "{axis}.{}.{} has no doc comment", e.name, d.key);
                assert!(!d.kind.is_empty() && !d.kind.contains("::"), "{axis}.{}.{}: kind {:?}", e.name, d.key, d.kind);
            }
        }
    }
}

#[test]
fn the_effective_config_holds_every_entrys_table() {
    let cfg = tlbsim_core::config::Config::resolve(json!({}), &[], Path::new(".")).unwrap().to_json();
    for (axis, entries) in axes().into_iter().filter(|(axis, _)| !axis.contains('.')) {
        for e in entries {
            assert_eq!(cfg[axis][e.name], (e.defaults)(), "{axis}.{}", e.name);
        }
    }
    assert_eq!(cfg["recycling"]["fpr"]["va_cursor"], true);
    assert_eq!(cfg["placement"]["mitosis"]["reserve_pages"], 1024);
    assert_eq!(cfg["hypervisor"]["credit"]["time_slice_ms"], 30.0);
}

#[test]
fn unknown_entries_and_keys_are_named() {
    let (key, message) = config_error(json!({"recycling": {"lru-magic": {}}}), &[]);
    assert_eq!(key, "recycling.lru-magic");
    assert!(message.contains("\"fpr\""), "{message}");
    let (key, _) = config_error(json!({}), &["placement.mitosis.replica=[0]"]);
    assert_eq!(key, "placement.mitosis.replica");
    let (key, message) = config_error(json!({}), &["os.recycling=lru-magic"]);
    assert_eq!(key, "os.recycling");
    assert!(message.contains("\"none\", \"fpr\""), "{message}");
    let (key, _) = config_error(json!({}), &["os.hypervisor=rr"]);
    assert_eq!(key, "os.hypervisor");
    let (key, _) = config_error(json!({}), &["hypervisor.credit.tick_ms=0"]);
    assert_eq!(key, "hypervisor.credit.tick_ms");
    // The cache model's shapes are checked at set-up (sets a power of two).
    let (key, _) = config_error(json!({"machine": {"memory": {"model": "cache", "llc_bytes": 3u64 << 20, "llc_ways": 16}}}), &[]);
    assert_eq!(key, "machine.memory.llc_ways");
    // A policy's own checks run at set-up, not when the run starts.
    let (key, _) = config_error(json!({"os": {"coherence": "didi"}, "coherence": {"didi": {"directory_entries": 48}}}), &[]);
    assert_eq!(key, "coherence.didi.directory_ways");
}

#[test]
fn moved_keys_name_where_they_went() {
    for (set, old, new) in [
        ("os.fpr.enabled=true", "os.fpr.enabled", "os.recycling"),
        ("os.fpr.all_mmaps=true", "os.fpr", "[recycling.fpr]"),
        ("os.mitosis.replicas=\"none\"", "os.mitosis", "[placement.mitosis]"),
        ("os.hypervisor.time_slice_ms=3", "os.hypervisor", "[hypervisor.<scheduler>]"),
        ("machine.didi.entries=64", "machine.didi", "directory_entries"),
    ] {
        let (key, message) = config_error(json!({}), &[set]);
        assert_eq!(key, old, "{set}");
        assert!(message.contains(new), "{set}: {message}");
    }
    // The new selector is a string where the old table was.
    tlbsim_core::config::Config::resolve(json!({"os": {"hypervisor": "credit"}}), &[], Path::new(".")).unwrap();
}
