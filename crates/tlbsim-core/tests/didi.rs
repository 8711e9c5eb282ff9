//! DiDi (coherence/didi.rs): the directory against a reference model, inclusion and
//! back-invalidation, exact sharers, PTLBI instead of IPIs, and both halves on their own.

use std::collections::{BTreeMap, BTreeSet};
use tlbsim_core::coherence::didi::{key, Directory};
use tlbsim_core::rng::SplitMix64;
use tlbsim_core::types::{PageSize, Vpn};

#[test]
fn the_directory_tracks_exactly_the_holders_and_back_invalidates_its_victims() {
    for (entries, ways, cores) in [(64u32, 2u32, 4usize), (16, 4, 8), (256, 2, 3)] {
        let mut rng = SplitMix64::new(entries as u64 * 7 + cores as u64);
        let mut dir = Directory::new(entries, ways, cores);
        // Reference: per key, per core, how many structures hold it (what the cores hold).
        let mut held: BTreeMap<u64, BTreeMap<usize, u32>> = BTreeMap::new();
        for _ in 0..20_000 {
            let core = rng.below(cores as u64) as usize;
            let k = key(rng.below(3) as u32, Vpn(rng.below(200)), PageSize::Size4K);
            let holds = held.get(&k).and_then(|m| m.get(&core)).copied().unwrap_or(0);
            if holds > 0 && rng.below(2) == 0 {
                dir.evict(k, core);
                let m = held.get_mut(&k).unwrap();
                *m.get_mut(&core).unwrap() -= 1;
            } else if holds < 2 {
                if let Some((victim, sharers)) = dir.insert(k, core) {
                    // Back-invalidation: every core holding the victim loses it.
                    let expect: BTreeSet<usize> = held.get(&victim).map(|m| m.iter().filter(|(_, &n)| n > 0).map(|(&c, _)| c).collect()).unwrap_or_default();
                    assert_eq!(sharers.iter().copied().collect::<BTreeSet<_>>(), expect, "victim's sharers");
                    held.remove(&victim);
                }
                *held.entry(k).or_default().entry(core).or_default() += 1;
            }
            held.retain(|_, m| m.values().any(|&n| n > 0));
        }
        // Inclusion: every translation a core holds is in the directory, with exactly its
        // holders as sharers.
        for (k, m) in &held {
            let slot = dir.find(*k).unwrap_or_else(|| panic!("held key {k:#x} missing from the directory"));
            let expect: BTreeSet<usize> = m.iter().filter(|(_, &n)| n > 0).map(|(&c, _)| c).collect();
            assert_eq!(dir.sharers(slot).collect::<BTreeSet<_>>(), expect);
        }
    }
}

fn run(policy: &str, workload: serde_json::Value) -> serde_json::Value {
    let tree = serde_json::json!({
        "machine": {"preset": "didi-cmp", "cores_per_socket": 8},
        "os": {"coherence": policy},
        "workload": workload,
    });
    tlbsim_core::run(tree, &[], std::path::Path::new(".")).unwrap().stats
}

#[test]
fn didi_reaches_exactly_the_sharers_without_interrupts() {
    let w = serde_json::json!({"kind": "apache", "threads": 8, "ops": 150});
    let linux = run("linux", w.clone());
    let didi = run("didi", w.clone());
    let dir_only = run("didi-directory-only", w.clone());
    let ptlbi_only = run("didi-ptlbi-only", w);
    let t = |v: &serde_json::Value, k: &str| v["totals"][k].as_u64().unwrap();
    for v in [&didi, &dir_only, &ptlbi_only] {
        assert_eq!(t(v, "violations_security") + t(v, "violations_consistency"), 0);
    }
    // PTLBI: no interrupts.
    assert_eq!(t(&didi, "shootdown_ipis_received"), 0);
    assert!(t(&didi, "shootdown_messages_received") > 0);
    assert_eq!(t(&ptlbi_only, "shootdown_ipis_received"), 0);
    // Exact sharers: fewer targets than Linux's mm_cpumask, and (nearly) no false positives.
    let targets = |v: &serde_json::Value| t(v, "shootdown_ipis_received") + t(v, "shootdown_messages_received");
    assert!(targets(&didi) < targets(&linux), "{} vs {}", targets(&didi), targets(&linux));
    assert!(t(&dir_only, "false_positive_targets") * 10 < t(&linux, "false_positive_targets").max(10), "{} vs {}", t(&dir_only, "false_positive_targets"), t(&linux, "false_positive_targets"));
    assert!(t(&dir_only, "shootdown_ipis_received") > 0, "the directory-only half still interrupts");
    let c = &didi["totals"]["coherence"];
    assert!(c["directory_messages"].as_u64().unwrap() > 0 && c["directory_lookups"].as_u64().unwrap() > 0, "{c}");
    // Cheaper on the targets: less time in handlers than Linux's IPIs.
    assert!(t(&didi, "shootdown_cycles_target") < t(&linux, "shootdown_cycles_target"));
}

#[test]
fn a_small_directory_back_invalidates_and_stays_correct() {
    let tree = serde_json::json!({
        "machine": {"preset": "didi-cmp", "cores_per_socket": 4, "didi": {"entries": 32, "ways": 2}},
        "os": {"coherence": "didi"},
        // Every thread touches a 64-page shared heap: twice what the directory can hold.
        "workload": {"kind": "stm-mprotect", "threads": 4, "ops": 100, "file_pages": 64},
    });
    let s = tlbsim_core::run(tree, &[], std::path::Path::new(".")).unwrap().stats;
    let c = &s["totals"]["coherence"];
    assert!(c["back_invalidations"].as_u64().unwrap() > 100, "{c}");
    assert!(c["back_invalidation_misses"].as_u64().unwrap() > 0, "{c}");
    assert_eq!(s["totals"]["violations_security"], 0);
    assert_eq!(s["totals"]["violations_consistency"], 0);
    let bad = serde_json::json!({"machine": {"didi": {"entries": 48, "ways": 2}}});
    let e = tlbsim_core::run(bad, &[], std::path::Path::new(".")).err().expect("bad directory geometry").to_string();
    assert!(e.contains("machine.didi"), "{e}");
}
