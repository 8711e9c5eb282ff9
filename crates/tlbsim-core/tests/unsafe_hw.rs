//! The unsafe-on-purpose variants of the hardware policies (issue 48 item 9), each caught by
//! `tlbsim fuzz` within a few scenarios, and the safe policies clean on the same scenarios:
//! `linux-invlpgb-no-tlbsync` (frees before TLBSYNC), `linux-invlpgb-final-only` and
//! `arm-tlbi-final-only` (walk caches kept when page tables are freed: the generator's
//! sparse regions, fuzz.rs `sparse_regions`) and `rar-no-wait` (no wait for the status
//! bytes). `linux-invlpgb-early-asid-reuse` (a freed global ASID handed out before the
//! rollover's flush) is not caught: its mechanism is tested here, and why not below.

use tlbsim_core::coherence::linux_invlpgb::{GlobalAsids, LinuxInvlpgb, LinuxInvlpgbParams, EARLY_ASID_REUSE};
use tlbsim_core::coherence::*;
use tlbsim_core::config::Config;
use tlbsim_core::fuzz::{fuzz, FuzzOptions, FuzzReport};
use tlbsim_core::types::CoreId;

fn run(policy: &str, tagging: Option<&str>, scenarios: u64, seed: u64) -> FuzzReport {
    fuzz(&FuzzOptions { policy: policy.into(), tagging: tagging.map(Into::into), overrides: vec![], scenarios, seed }).unwrap()
}

/// (unsafe variant, its safe policy, tagging, scenarios, seed): the variant caught within
/// `scenarios` from `seed`, the safe one clean on the same scenarios.
/// `linux-invlpgb-early-asid-reuse` is not among them: the fuzz does not catch it (see
/// `the_early_reuse_variant_hands_the_exited_process_s_asid_and_entries_on`).
const CASES: [(&str, &str, Option<&str>, u64, u64); 4] = [
    ("linux-invlpgb-no-tlbsync", "linux-invlpgb", None, 40, 1),
    ("linux-invlpgb-final-only", "linux-invlpgb", None, 60, 1),
    ("arm-tlbi-final-only", "arm-tlbi", None, 60, 1),
    ("rar-no-wait", "rar", None, 40, 1),
];

fn check(i: usize) {
    let (bad, good, tagging, n, seed) = CASES[i];
    let r = run(bad, tagging, n, seed);
    assert!(r.scenarios_with_violations > 0, "{bad} not caught in {n} scenarios from seed {seed}: {r:#?}");
    let f = r.first_failure.as_ref().unwrap();
    assert!(f.violations_security > 0, "{bad}: {f:#?}");
    let r = run(good, tagging, n, seed);
    assert_eq!(r.scenarios_with_violations, 0, "{good}: {:#?}", r.first_failure);
}

#[test]
fn fuzz_catches_linux_invlpgb_freeing_before_tlbsync() {
    check(0);
}

#[test]
fn fuzz_catches_linux_invlpgb_final_only_when_tables_are_freed() {
    check(1);
}

#[test]
fn fuzz_catches_arm_tlbi_last_level_when_tables_are_freed() {
    check(2);
}

#[test]
fn fuzz_catches_rar_without_waiting_for_the_status_bytes() {
    check(3);
}

#[test]
fn freed_asids_come_back_at_once_only_in_the_unsafe_allocator() {
    let mut a = GlobalAsids::new(10);
    assert_eq!((a.allocate(), a.allocate()), (Some(6), Some(7)));
    a.free_now(6);
    assert!(!a.taken(6));
    // The next allocation still goes on from the last one; at the end of the space the
    // freed ASID is handed out without a rollover.
    assert_eq!(a.allocate(), Some(8));
    let mut b = GlobalAsids::new(8);
    assert_eq!(b.allocate(), Some(6));
    b.free_now(6);
    assert_eq!(b.allocate(), Some(6));
    assert_eq!(b.rollovers, 0);
}

/// The early-reuse variant gives the next process the exited one's ASID at once, and says
/// so to the engine (whose PCID slot of the exited process it then inherits); Linux's
/// allocator waits for the rollover, and inherits nothing. The fuzz does not catch the
/// variant (0 of 2,000 scenarios in every tagging mode): exit's flush, a broadcast of the
/// whole PCID to every CPU, leaves nothing under the ASID before it is freed, and the
/// model has no fill after it (a CPU that keeps the dead mm loaded lazily and walks it
/// speculatively, or walk-cache entries tagged by PCID), which is what the rollover's
/// flush protects against on real hardware.
#[test]
fn the_early_reuse_variant_hands_the_exited_process_s_asid_and_entries_on() {
    let cfg = Config::resolve(serde_json::json!({"machine": {"sockets": 1, "cores_per_socket": 4}}), &[], std::path::Path::new(".")).unwrap();
    let params = || LinuxInvlpgbParams { asid_space: 8, sample_period: 1, min_cpus: 1, ..Default::default() };
    let cores: Vec<CoreView> = (0..4).map(|c| CoreView { loaded_mm: Some(c + 1), lazy: false, caught_up_gen: 0, socket: 0 }).collect();
    let mut early = <LinuxInvlpgb<EARLY_ASID_REUSE> as Policy>::build(&cfg, params()).unwrap();
    let mut linux = <LinuxInvlpgb as Policy>::build(&cfg, params()).unwrap();
    early.consider_global_asid(&cores, 1, 0);
    linux.consider_global_asid(&cores, 1, 0);
    assert_eq!((early.global_asid(1), linux.global_asid(1)), (Some(6), Some(6)));
    early.on_mm_exit(CoreId(0), 1, &mut Vec::new());
    linux.on_mm_exit(CoreId(0), 1, &mut Vec::new());
    early.consider_global_asid(&cores, 2, 0);
    linux.consider_global_asid(&cores, 2, 0);
    assert_eq!(early.global_asid(2), Some(6));
    assert_eq!(early.tag_inherited_from(2), Some(1));
    assert_ne!(linux.global_asid(2), Some(6));
    assert_eq!(linux.tag_inherited_from(2), None);
}
