//! sched_setaffinity to a set of CPUs (`set-affinity` in the scenario language,
//! `Op::SetAffinity`; issue 46 item 5): a thread runs, is woken and is pulled only on the
//! CPUs of its set, and moves into the set when it is not there.

use serde_json::{json, Value};
use tlbsim_core::config::Config;

fn run(v: Value) -> Value {
    let cfg = Config::resolve(v, &[], std::path::Path::new(".")).unwrap();
    tlbsim_core::run_resolved(&cfg).unwrap()
}

/// 4 cores, one socket, Linux's wake-up placement. Two daemon threads keep cores 2 and 3
/// busy; the worker (placed on core 0) runs `prefix`, then sleeps and reads its heap,
/// over and over. Each wake-up finds its previous core busy or idle as the others leave it.
fn worker_with(prefix: Value) -> Value {
    let mut program = vec![];
    if !prefix.is_null() {
        program.push(prefix);
    }
    program.push(json!({"op": "loop", "count": 200, "body": [
        {"op": "block", "cycles": 20_000},
        {"op": "access", "region": "heap", "count": 64, "pattern": "random"},
        {"op": "count"}]}));
    program.push(json!({"op": "exit"}));
    let busy = |core: u32| {
        json!({"name": format!("busy{core}"), "core": core, "daemon": true,
        "program": [{"op": "loop", "count": 0, "body": [{"op": "compute", "cycles": 5000}]}]})
    };
    run(json!({
        "machine": {"sockets": 1, "cores_per_socket": 4},
        "os": {"balance": "linux"},
        "workload": {"kind": "scenario", "scenario": {"process": [{"name": "p",
            "region": [{"name": "heap", "bytes": 1 << 20, "populate": true}],
            "thread": [{"name": "worker", "core": 0, "program": program}, busy(2), busy(3)]}]}},
    }))
}

fn accesses_on(stats: &Value, core: usize) -> u64 {
    stats["per_core"][core]["accesses"].as_u64().unwrap()
}

#[test]
fn a_thread_runs_only_on_the_cpus_of_its_set() {
    // Without a set the woken worker stays on an idle core (0 or 1): none of its reads on 2 or 3.
    let free = worker_with(Value::Null);
    let free_on_0_1 = accesses_on(&free, 0) + accesses_on(&free, 1);
    assert!(free_on_0_1 >= 200 * 64, "the free worker reads on the idle cores: {free_on_0_1}");
    // With the set {1, 2} it moves from core 0 to 1 at once, and every wake-up stays in the
    // set: nothing on core 0 or 3 after the call.
    let set = worker_with(json!({"op": "set-affinity", "cores": [1, 2]}));
    assert_eq!(set["per_thread"][0]["ops_completed"], 200);
    assert_eq!(accesses_on(&set, 0), 0, "core 0 is outside the set");
    assert_eq!(accesses_on(&set, 3), 0, "core 3 is outside the set");
    assert!(accesses_on(&set, 1) + accesses_on(&set, 2) >= 200 * 64);
}

#[test]
fn a_set_of_one_cpu_pins_like_migrate_thread() {
    let set = worker_with(json!({"op": "set-affinity", "cores": [3]}));
    let migrate = worker_with(json!({"op": "migrate-thread", "core": 3}));
    for core in 0..4 {
        assert_eq!(accesses_on(&set, core), accesses_on(&migrate, core), "core {core}");
    }
    assert_eq!(set["run"]["makespan_cycles"], migrate["run"]["makespan_cycles"]);
    // Pinned to a core a daemon keeps busy: the worker shares it instead of using an idle one.
    assert!(accesses_on(&set, 3) >= 200 * 64);
}

#[test]
fn a_bad_set_is_refused_naming_the_key() {
    for (cores, expect) in [(json!([]), "empty CPU set"), (json!([1, 9]), "core 9 does not exist")] {
        let tree = json!({
            "machine": {"sockets": 1, "cores_per_socket": 4},
            "workload": {"kind": "scenario", "scenario": {"process": [{"name": "p",
                "thread": [{"name": "t", "program": [{"op": "set-affinity", "cores": cores}]}]}]}},
        });
        let err = Config::resolve(tree, &[], std::path::Path::new(".")).and_then(|c| tlbsim_core::run_resolved(&c)).unwrap_err().to_string();
        assert!(err.contains("set-affinity") || err.contains("program[0]"), "{err}");
        assert!(err.contains(expect), "{err}");
    }
}

/// A recorded sched_setaffinity: to one CPU a migrate-thread, as before; to several a CPU
/// set (CPUs past the machine's wrap around its cores, as a single one does).
#[test]
fn a_recorded_setaffinity_to_several_cpus_compiles_to_a_cpu_set() {
    use crate::common::recording::*;
    use tlbsim_core::trace::TraceEvent;
    use tlbsim_core::workload::program::{cpu_set_members, Op};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("aff.tlbsim");
    write(
        &path,
        &[
            on(MAIN),
            fetch(CODE),
            syscall(203, &[0, 8, 0, 0b1], 0),
            syscall(203, &[0, 8, 0, 0b0110], 0),
            // CPUs 1 and 5 on a 4-core machine: 1 and 1, one CPU after wrapping.
            syscall(203, &[0, 8, 0, 0b10_0010], 0),
            // CPUs 0, 2 and 6: 0 and 2.
            syscall(203, &[0, 8, 0, 0b100_0101], 0),
            TraceEvent::Instructions { n: 3 },
            syscall(231, &[0], 0),
        ],
    );
    let w = tlbsim_core::workload::recorded::build_from(&path, true, 4, 3.0).unwrap();
    w.check(4).unwrap();
    let ops: Vec<&Op> = w.programs[0].iter().filter(|o| matches!(o, Op::MigrateThread { .. } | Op::SetAffinity { .. })).collect();
    assert_eq!(ops.len(), 4, "{ops:?}");
    assert_eq!(*ops[0], Op::MigrateThread { core: 0 });
    let set = |o: &Op| match o {
        Op::SetAffinity { set } => cpu_set_members(&w.cpu_sets[*set as usize]).collect::<Vec<_>>(),
        other => panic!("not a CPU set: {other:?}"),
    };
    assert_eq!(set(ops[1]), vec![1, 2]);
    assert_eq!(*ops[2], Op::MigrateThread { core: 1 });
    assert_eq!(set(ops[3]), vec![0, 2]);
}
