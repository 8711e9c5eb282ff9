//! Progress and stop (`tlbsim_core::control`): a stopped run returns its stats so far,
//! marked partial; a run without a control is unchanged; progress counts what it says.

use serde_json::json;
use std::sync::Arc;
use tlbsim_core::control::{with_control, ProgressUnit, RunControl};

fn run(tree: serde_json::Value) -> serde_json::Value {
    tlbsim_core::run(tree, &[], std::path::Path::new(".")).unwrap().stats
}

#[test]
fn a_run_stopped_before_it_starts_is_partial_and_empty() {
    let control = Arc::new(RunControl::new());
    control.stop();
    let stats = with_control(control.clone(), || run(json!({"workload": {"accesses": 100_000}})));
    assert_eq!(stats["run"]["partial"], true);
    assert_eq!(stats["totals"]["accesses"], 0);
    let (done, total, unit) = control.progress();
    assert_eq!((done, total, unit), (0, 100_000 * 2, ProgressUnit::Accesses));
    let os = with_control(control, || run(json!({"machine": {"cores_per_socket": 4}, "workload": {"kind": "fpr-munmap", "threads": 4, "ops": 500}})));
    assert_eq!(os["run"]["partial"], true);
    assert!(os["per_thread"].as_array().unwrap().iter().all(|t| t["ops_completed"].as_u64().unwrap() < 500));
}

#[test]
fn a_watched_run_that_is_not_stopped_gives_the_same_stats_and_counts_everything() {
    let tree = json!({"machine": {"cores_per_socket": 4}, "workload": {"kind": "stm-mprotect", "threads": 4, "ops": 200}});
    let control = Arc::new(RunControl::new());
    let watched = with_control(control.clone(), || run(tree.clone()));
    assert_eq!(watched, run(tree));
    assert!(watched["run"].get("partial").is_none());
    let (done, total, unit) = control.progress();
    assert_eq!(unit, ProgressUnit::Operations);
    assert_eq!(total, 4 * 200);
    assert!(done <= total && done > 0, "{done}");
}
