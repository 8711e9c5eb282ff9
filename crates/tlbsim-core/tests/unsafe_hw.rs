//! The unsafe-on-purpose variants of the hardware policies (issue 48 item 9), each caught by
//! `tlbsim fuzz` within a few scenarios, and the safe policies clean on the same scenarios:
//! `linux-invlpgb-no-tlbsync` (frees before TLBSYNC), `linux-invlpgb-final-only` and
//! `arm-tlbi-final-only` (walk caches kept when page tables are freed: the generator's
//! sparse regions, fuzz.rs `sparse_regions`) and `rar-no-wait` (no wait for the status
//! bytes). `linux-invlpgb-early-asid-reuse` (a freed global ASID handed out before the
//! rollover's flush) is not caught, and is not exposed on Linux's own exit path either
//! (coherence/linux_invlpgb.rs's module doc gives the source): its mechanism is tested
//! here, and that the fuzz does reuse ASIDs early without any violation.

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
/// whole PCID to every CPU, comes after the process's page tables are emptied, so nothing
/// is left under the ASID and nothing can be filled under it later, not even by a
/// speculative walk of a CPU that keeps the dead mm loaded lazily (a walk caches only
/// through present entries); on Linux the ASID is moreover freed only once no CPU has the
/// mm loaded (`__mmdrop()`). See coherence/linux_invlpgb.rs.
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

/// The fuzz's scenarios do hand exited processes' global ASIDs out again before any
/// rollover under the early-reuse variant, never under Linux's allocator, and neither has a
/// violation: what the reuse could expose was flushed at exit, after the page tables were
/// emptied (see the module doc of coherence/linux_invlpgb.rs). The new holder takes the
/// dead process's PCID slot over only on a core where it has none of its own, which these
/// processes, alive from the start, almost never are, so this is a check of the reuse, not
/// a proof of safety: that rests on the source.
#[test]
fn the_early_reuse_variant_reuses_asids_in_the_fuzz_without_exposure() {
    // (scenarios that reused an ASID early, reuses, scenarios run) over seeds 1.., until
    // three scenarios reused one or 2,000 were run.
    let reused = |policy: &str| {
        let (mut scenarios_reusing, mut reuses, mut run) = (0, 0, 0);
        for seed in 1..=2000 {
            let (cfg, w) = tlbsim_core::fuzz::scenario(seed, policy, Some("pcid"), &[]).unwrap();
            let stats = tlbsim_core::os::run(&cfg, w).unwrap();
            let t = &stats["totals"];
            let v = t["violations_security"].as_u64().unwrap() + t["violations_consistency"].as_u64().unwrap();
            assert_eq!(v, 0, "{policy}, seed {seed}: {}", stats["violations"]);
            let n = t["coherence"]["global_asids_reused_before_rollover"].as_u64().unwrap();
            scenarios_reusing += (n > 0) as u64;
            reuses += n;
            run = seed;
            if scenarios_reusing == 3 {
                break;
            }
        }
        eprintln!("{policy}: {scenarios_reusing} scenarios reused a global ASID early ({reuses} reuses) in {run}");
        (scenarios_reusing, reuses, run)
    };
    let (scenarios, reuses, run) = reused("linux-invlpgb-early-asid-reuse");
    assert!(scenarios > 0, "no early reuse in {run} scenarios ({reuses} reuses)");
    let (scenarios, reuses, _) = reused("linux-invlpgb");
    assert_eq!((scenarios, reuses), (0, 0));
}
