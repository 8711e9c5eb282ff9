//! Virtual machines (the hypervisor axis: crate::hypervisor, os/virt.rs): the credit
//! scheduler's shares and pinning, and the flush profile of CR3 writes on hand-built
//! schedules under each tagging mode (tag paper §4–§6).

use serde_json::{json, Value};

/// A process whose one thread touches `pages` pages of its own heap `rounds` times, with
/// `block` cycles asleep (I/O) after each round (0: none). Daemon threads loop forever.
fn proc(name: &str, core: u32, pages: u64, rounds: u64, block: u64, daemon: bool) -> Value {
    let mut body = vec![json!({"op": "access", "region": "heap", "pattern": "sequential", "stride": 4096, "count": pages, "mode": "read"})];
    if block > 0 {
        body.push(json!({"op": "block", "cycles": block}));
    }
    body.push(json!({"op": "count"}));
    let program = if daemon {
        vec![json!({"op": "loop", "count": 0, "body": body})]
    } else {
        vec![json!({"op": "loop", "count": rounds, "body": body}), json!({"op": "exit"})]
    };
    json!({"name": name, "region": [{"name": "heap", "bytes": pages * 4096, "populate": true}],
           "thread": [{"name": name, "class": name, "core": core, "daemon": daemon, "program": program}]})
}

fn vm(name: &str, vcpus: u32, weight: u32, pin: Option<Vec<u32>>, processes: Vec<Value>) -> Value {
    let mut v = json!({"name": name, "vcpus": vcpus, "weight": weight, "process": processes});
    if let Some(p) = pin {
        v["pin"] = json!(p);
    }
    v
}

/// Run VMs on `cpus` CPUs with `tagging` (64-entry fully associative DTLB, no L2, as the
/// tag paper's Simics default) and a short time slice so that a test sees many.
fn run(cpus: u32, tagging: &str, vms: Vec<Value>, extra: &[&str]) -> Value {
    let tree = json!({
        "machine": {"sockets": 1, "cores_per_socket": cpus, "tlb": {"tagging": tagging,
            "l1d": {"entries": 64, "ways": 64, "replacement": "fifo"}, "l2": {"entries": 0}}},
        "os": {"coherence": "linux"}, "hypervisor": {"credit": {"time_slice_ms": 0.003, "tick_ms": 0.001}},
        "workload": {"kind": "scenario", "scenario": {"vm": vms}},
    });
    let overrides: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    tlbsim_core::run(tree, &overrides, std::path::Path::new(".")).unwrap().stats
}

fn cause(v: &Value, core: usize, c: &str) -> u64 {
    v["per_core"][core]["full_flushes_by_cause"][c].as_u64().unwrap()
}

fn total(v: &Value, c: &str) -> u64 {
    v["totals"]["full_flushes_by_cause"][c].as_u64().unwrap()
}

fn vm_stat(v: &Value, vm: usize, key: &str) -> u64 {
    v["per_vm"][vm][key].as_u64().unwrap()
}

fn violations(v: &Value) -> u64 {
    v["totals"]["violations_security"].as_u64().unwrap() + v["totals"]["violations_consistency"].as_u64().unwrap()
}

#[test]
fn credit_shares_follow_weights() {
    // One CPU; dom0's CPU-bound thread finishes, dom1's runs forever beside it. While both
    // run, the CPU is shared 2:1 by weight (512 against 256), and 1:1 with equal weights.
    for (w0, w1, want) in [(512, 256, 2.0), (256, 256, 1.0)] {
        let vms = vec![vm("dom0", 1, w0, None, vec![proc("fg", 0, 16, 20_000, 0, false)]), vm("dom1", 1, w1, None, vec![proc("bg", 0, 16, 0, 0, true)])];
        let v = run(1, "none", vms, &[]);
        let ratio = vm_stat(&v, 0, "cycles") as f64 / vm_stat(&v, 1, "cycles") as f64;
        assert!((ratio / want - 1.0).abs() < 0.1, "weights {w0}:{w1}: CPU time ratio {ratio}, want {want}");
        assert!(vm_stat(&v, 0, "vcpu_switches_in") > 20, "many slices: {}", vm_stat(&v, 0, "vcpu_switches_in"));
    }
}

/// The tag paper's `0012` placement: dom0's two VCPUs on CPU 0, dom1's and dom2's on CPU 1.
fn pinned_0012(dom2_pin: u32) -> Vec<Value> {
    vec![
        vm("dom0", 2, 256, Some(vec![0, 0]), vec![proc("d0a", 0, 8, 0, 20_000, true), proc("d0b", 1, 8, 0, 20_000, true)]),
        vm("dom1", 1, 256, Some(vec![1]), vec![proc("a", 0, 24, 4000, 0, false)]),
        vm("dom2", 1, 256, Some(vec![dom2_pin]), vec![proc("b", 0, 24, 0, 0, true)]),
    ]
}

#[test]
fn pinned_vcpus_stay_on_their_cpus() {
    let v = run(2, "none", pinned_0012(1), &[]);
    for (vm, cpu) in [(0, 1), (1, 0), (2, 0)] {
        assert_eq!(v["per_vm"][vm]["cycles_per_cpu"][cpu].as_u64().unwrap(), 0, "VM {vm} ran on CPU {cpu}");
    }
    assert!(v["per_vm"][1]["cycles_per_cpu"][1].as_u64().unwrap() > 0);
    // Only dom0 runs on CPU 0: no inter-VM switch there; dom1 and dom2 alternate on CPU 1.
    assert_eq!(cause(&v, 0, "context_switch_inter_vm"), 0);
    assert!(cause(&v, 1, "context_switch_inter_vm") > 10, "{}", cause(&v, 1, "context_switch_inter_vm"));
    assert_eq!(violations(&v), 0);
}

#[test]
fn a_pinned_domain_alone_on_its_cpu_causes_no_inter_vm_switches() {
    // dom2 pinned to CPU 0 with dom0 instead: dom1 is alone on CPU 1.
    let v = run(2, "none", pinned_0012(0), &[]);
    assert_eq!(cause(&v, 1, "context_switch_inter_vm"), 0);
    assert!(cause(&v, 0, "context_switch_inter_vm") > 0);
    assert_eq!(v["per_vm"][1]["vcpu_switches_in"].as_u64().unwrap(), 1, "dom1's VCPU never leaves CPU 1");
}

#[test]
fn intra_vm_switches_flush_untagged_and_domain_tagged_tlbs_only() {
    // One VM, one VCPU, two processes taking turns (each sleeps after a round).
    let vms = vec![vm("dom0", 1, 256, None, vec![proc("a", 0, 16, 200, 30_000, false), proc("b", 0, 16, 200, 30_000, false)])];
    let mut intra = Vec::new();
    for tagging in ["none", "domain", "cr3"] {
        let v = run(1, tagging, vms.clone(), &[]);
        assert_eq!(violations(&v), 0, "{tagging}");
        assert_eq!(total(&v, "context_switch_inter_vm"), 0, "{tagging}: one VM");
        assert_eq!(total(&v, "context_switch"), total(&v, "context_switch_intra_vm") + total(&v, "context_switch_inter_vm"));
        intra.push(total(&v, "context_switch_intra_vm"));
    }
    assert!(intra[0] > 100 && intra[1] > 100, "none and domain tags flush at a process switch: {intra:?}");
    assert_eq!(intra[2], 0, "CR3 tags keep both processes' entries: {intra:?}");
}

#[test]
fn inter_vm_switches_flush_only_untagged_tlbs() {
    // Two single-process VMs sharing one CPU, each CPU-bound: VCPU switches every slice.
    let vms = vec![vm("dom0", 1, 256, None, vec![proc("a", 0, 16, 10_000, 0, false)]), vm("dom1", 1, 256, None, vec![proc("b", 0, 16, 0, 0, true)])];
    let mut inter = Vec::new();
    let mut misses = Vec::new();
    for tagging in ["none", "domain", "cr3"] {
        let v = run(1, tagging, vms.clone(), &[]);
        assert_eq!(violations(&v), 0, "{tagging}");
        assert!(v["totals"]["vcpu_switches"].as_u64().unwrap() > 20);
        inter.push(total(&v, "context_switch_inter_vm"));
        misses.push(v["per_vm"][0]["misses"]["l1d"].as_u64().unwrap());
    }
    assert!(inter[0] > 20, "{inter:?}");
    assert_eq!(&inter[1..], &[0, 0], "domain and CR3 tags keep the other VM's entries: {inter:?}");
    // dom0's 16 pages are refetched after every switch only without tags.
    assert!(misses[0] > 10 * misses[1] && misses[1] == misses[2], "{misses:?}");
}

#[test]
fn a_guest_full_flush_is_a_forced_flush_in_every_mode() {
    // A guest process maps, touches and unmaps 64 pages (above the 33-page ceiling: a full
    // flush), which the hypervisor carries out by writing CR3 with its value.
    let unmapper = json!({"name": "u", "thread": [{"name": "u", "core": 0, "program": [
        {"op": "loop", "count": 20, "body": [
            {"op": "mmap", "region": "buf", "bytes": 64 * 4096},
            {"op": "access", "region": "buf", "pattern": "sequential", "stride": 4096, "count": 64, "mode": "write"},
            {"op": "munmap", "region": "buf"}, {"op": "count"}]},
        {"op": "exit"}]}]});
    for tagging in ["none", "domain", "cr3"] {
        let v = run(1, tagging, vec![vm("dom0", 1, 256, None, vec![unmapper.clone()])], &[]);
        assert_eq!(violations(&v), 0);
        assert_eq!(total(&v, "tag_forced"), 20, "{tagging}");
        assert_eq!(total(&v, "ceiling") + total(&v, "shootdown"), 0, "{tagging}");
    }
}

#[test]
fn a_fifth_address_space_on_a_four_entry_tmt_is_a_capacity_flush() {
    let procs = |n: usize| (0..n).map(|i| proc(&format!("p{i}"), 0, 4, 50, 10_000, false)).collect::<Vec<_>>();
    let four = run(1, "cr3", vec![vm("dom0", 1, 256, None, procs(4))], &["machine.tlb.tmt_entries=4"]);
    let five = run(1, "cr3", vec![vm("dom0", 1, 256, None, procs(5))], &["machine.tlb.tmt_entries=4"]);
    assert_eq!(total(&four, "tag_capacity"), 0);
    assert!(total(&five, "tag_capacity") > 40, "{}", total(&five, "tag_capacity"));
    assert_eq!(violations(&five), 0);
}

#[test]
fn a_thread_core_names_a_vcpu_of_its_vm() {
    let tree = |core: u32| {
        json!({
            "machine": {"sockets": 1, "cores_per_socket": 4},
            "workload": {"kind": "scenario", "scenario": {"vm": [vm("dom0", 2, 256, None, vec![proc("a", core, 4, 1, 0, false)])]}},
        })
    };
    assert!(tlbsim_core::run(tree(1), &[], std::path::Path::new(".")).is_ok());
    let e = tlbsim_core::run(tree(2), &[], std::path::Path::new(".")).err().expect("VCPU 2 of 2").to_string();
    assert!(e.contains("workload.scenario.vm[0].process[0].thread[0].core"), "{e}");
    let bad_pin = json!({
        "machine": {"sockets": 1, "cores_per_socket": 2},
        "workload": {"kind": "scenario", "scenario": {"vm": [vm("dom0", 2, 256, Some(vec![0]), vec![proc("a", 0, 4, 1, 0, false)])]}},
    });
    let e = tlbsim_core::run(bad_pin, &[], std::path::Path::new(".")).err().expect("one pin for two VCPUs").to_string();
    assert!(e.contains("workload.scenario.vm[0].pin"), "{e}");
}

#[test]
fn cr3_tags_cut_the_misses_of_a_mix_that_switches_often() {
    // dom1's two processes sleep in turn; dom0 and dom2 share the CPUs with it.
    let vms = vec![
        vm("dom0", 2, 256, None, vec![proc("d0", 0, 8, 0, 200_000, true)]),
        vm("dom1", 1, 256, None, vec![proc("a", 0, 24, 300, 50_000, false), proc("b", 0, 24, 300, 50_000, false)]),
        vm("dom2", 1, 256, None, vec![proc("c", 0, 24, 300, 0, false)]),
    ];
    let mut dom1_misses = Vec::new();
    for tagging in ["none", "domain", "cr3"] {
        let v = run(2, tagging, vms.clone(), &[]);
        assert_eq!(violations(&v), 0, "{tagging}");
        dom1_misses.push(v["per_vm"][1]["misses"]["l1d"].as_u64().unwrap());
    }
    // dom1's switches are intra-VM: domain tags do not keep its entries, CR3 tags do.
    assert!(dom1_misses[2] * 5 < dom1_misses[0] && dom1_misses[2] * 5 < dom1_misses[1], "{dom1_misses:?}");
}

#[test]
fn fuzz_scenarios_with_vms_are_clean_under_every_policy_and_tagging() {
    // The fuzz generator puts a third of its scenarios in VMs; run those alone here.
    let seeds: Vec<u64> = (0..400u64).filter(|&s| !tlbsim_core::fuzz::scenario(s, "linux", None, &[]).unwrap().1.vms.is_empty()).take(40).collect();
    assert_eq!(seeds.len(), 40);
    // Every registered policy but the deliberately unsafe ones (none, abis-gap1,
    // abis-naive-insert, latr-early-reuse: each caught by tests/os_property.rs; the
    // hardware policies' variants: tests/unsafe_hw.rs).
    let unsafe_by_design = [
        "none",
        "abis-gap1",
        "abis-naive-insert",
        "latr-early-reuse",
        "linux-invlpgb-no-tlbsync",
        "linux-invlpgb-final-only",
        "linux-invlpgb-early-asid-reuse",
        "arm-tlbi-final-only",
        "rar-no-wait",
    ];
    for policy in tlbsim_core::coherence::NAMES.iter().filter(|p| !unsafe_by_design.contains(p)) {
        for tagging in ["none", "pcid", "domain", "cr3"] {
            let (mut switches, mut io) = (0, 0);
            for &seed in &seeds {
                let (cfg, w) = tlbsim_core::fuzz::scenario(seed, policy, Some(tagging), &[]).unwrap();
                let v = tlbsim_core::os::run(&cfg, w).unwrap();
                assert_eq!(violations(&v), 0, "{policy} {tagging} seed {seed}");
                switches += v["totals"]["vcpu_switches"].as_u64().unwrap();
                io += v["totals"]["io_completions"].as_u64().unwrap_or(0);
            }
            assert!(switches > 40, "{policy} {tagging}: {switches} VCPU switches");
            // Half of them send split-driver I/O through a dom0 back-end.
            assert!(io > 20, "{policy} {tagging}: {io} I/Os completed");
        }
    }
}

#[test]
fn vm_mix_runs_the_paper_setup_with_instruction_fetches() {
    let run = |test: &str, pinning: &str, tagging: &str| {
        let tree = json!({
            "machine": {"preset": "tagtlb-p4", "tlb": {"tagging": tagging}},
            "workload": {"kind": "vm-mix", "test": test, "pinning": pinning, "ops": 3, "threads": 3},
        });
        tlbsim_core::run(tree, &[], std::path::Path::new(".")).unwrap().stats
    };
    let v = run("tpcc-vortex", "0012", "none");
    assert_eq!(violations(&v), 0);
    assert_eq!(v["per_vm"].as_array().unwrap().len(), 3);
    for vm in 0..3 {
        assert!(vm_stat(&v, vm, "instructions") > 0, "VM {vm}");
        assert!(v["per_vm"][vm]["itlb_mptti"].as_f64().unwrap() > 0.0, "VM {vm} fetches through the ITLB");
    }
    // Instructions are counted by fetches: data accesses are their operands.
    assert!(vm_stat(&v, 1, "accesses") > vm_stat(&v, 1, "instructions"));
    assert_eq!(cause(&v, 0, "context_switch_inter_vm"), 0, "0012: dom0 alone on CPU 0");
    assert!(v["per_vm"][2]["dtlb_mptti"].as_f64().unwrap() > v["per_vm"][1]["dtlb_mptti"].as_f64().unwrap(), "vortex is the TLB-hungry one");
    // dom1 runs the same program beside either guest.
    let tt = run("tpcc-tpcc", "0012", "none");
    assert_eq!(vm_stat(&tt, 1, "instructions"), vm_stat(&v, 1, "instructions"));
    let cr3 = run("tpcc-tpcc", "none", "cr3");
    assert_eq!(violations(&cr3), 0);
    // CR3 tags keep address spaces across switches; what is left is a guest reusing one
    // of a CPU's six PCID slots for another process (os/asid.rs: its entries must go).
    let untagged = run("tpcc-tpcc", "none", "none");
    assert!(
        total(&cr3, "context_switch") * 10 < total(&untagged, "context_switch"),
        "{} against {}",
        total(&cr3, "context_switch"),
        total(&untagged, "context_switch")
    );
}

#[test]
fn a_tpcc_guests_monitor_and_backend_hand_the_vcpu_to_each_other() {
    // TPCC-UVa: per statement the monitor wakes the backend and waits for its reply, on
    // the guest's one VCPU. The wake-up is local, so the VCPU goes from one to the other
    // (an intra-VM switch); with dom1 and dom2 pinned to CPU 1, the hypervisor switches
    // VCPUs there only when a guest has nothing to run (its COMMIT's log write).
    let tree = json!({
        "machine": {"preset": "tagtlb-p4", "tlb": {"tagging": "none"}},
        "workload": {"kind": "vm-mix", "test": "tpcc-tpcc", "pinning": "0012", "ops": 2, "threads": 2},
    });
    let v = tlbsim_core::run(tree, &[], std::path::Path::new(".")).unwrap().stats;
    assert_eq!(violations(&v), 0);
    let (intra, inter) = (cause(&v, 1, "context_switch_intra_vm"), cause(&v, 1, "context_switch_inter_vm"));
    assert!(intra > 10 * inter, "CPU 1: {intra} intra-VM against {inter} inter-VM switch flushes");
    // Each guest's terminals, monitor and backend each finish the guest's 4 transactions.
    for class in ["dom1-tpcc", "dom1-tm", "dom1-postgres", "dom2-tpcc", "dom2-tm", "dom2-postgres"] {
        assert_eq!(v["per_class"][class]["ops_completed"].as_u64().unwrap(), 4, "{class}");
    }
}

#[test]
fn intervals_add_up_to_the_run_per_vm() {
    let tree = json!({
        "machine": {"preset": "tagtlb-p4", "tlb": {"tagging": "cr3"}},
        "sim": {"interval_instructions": 50_000},
        "workload": {"kind": "vm-mix", "test": "tpcc-vortex", "ops": 2, "threads": 2},
    });
    let v = tlbsim_core::run(tree, &[], std::path::Path::new(".")).unwrap().stats;
    let intervals = v["intervals"].as_array().unwrap();
    assert!(intervals.len() > 10, "{}", intervals.len());
    for vm in 0..3 {
        let sum: u64 =
            intervals.iter().flat_map(|i| i["per_vm"].as_array().unwrap()).filter(|x| x["vm"] == vm).map(|x| x["instructions"].as_u64().unwrap()).sum();
        assert_eq!(sum, vm_stat(&v, vm, "instructions"), "VM {vm}");
        let misses: u64 =
            intervals.iter().flat_map(|i| i["per_vm"].as_array().unwrap()).filter(|x| x["vm"] == vm).map(|x| x["dtlb_misses"].as_u64().unwrap()).sum();
        assert_eq!(misses, v["per_vm"][vm]["misses"]["l1d"].as_u64().unwrap(), "VM {vm}");
    }
    // Each interval but a CPU's last is at least as long as asked.
    for cpu in 0..2 {
        let mine: Vec<&Value> = intervals.iter().filter(|i| i["cpu"] == cpu).collect();
        for i in &mine[..mine.len() - 1] {
            assert!(i["instructions"].as_u64().unwrap() >= 50_000);
        }
    }
    let native = json!({"sim": {"interval_instructions": 1000}, "workload": {"kind": "apache", "ops": 2}});
    let e = tlbsim_core::run(native, &[], std::path::Path::new(".")).err().expect("no VMs").to_string();
    assert!(e.contains("sim.interval_instructions"), "{e}");
}

/// A guest whose one thread alternates two phases of random accesses over `small` and
/// `large` pages of its heap (`bursts` bursts of 2,000 accesses each, asleep 20,000 cycles
/// after each, so that the two guests of CPU 1 share its TLB in time), `pairs` times.
fn phased_guest(name: &str, first: u64, second: u64, bursts: u64, pairs: u64) -> Value {
    let phase = |pages: u64| {
        json!({"op": "loop", "count": bursts, "body": [
            {"op": "access", "region": "heap", "pattern": "random", "len": pages * 4096, "count": 2000},
            {"op": "block", "cycles": 20000}]})
    };
    let heap = first.max(second) * 4096;
    json!({"name": name, "region": [{"name": "heap", "bytes": heap, "populate": true}],
           "thread": [{"name": name, "core": 0, "program": [
               {"op": "loop", "count": pairs, "body": [phase(first), phase(second)]}, {"op": "exit"}]}]})
}

fn phased_run(extra: &[&str]) -> Value {
    let vms = vec![
        vm("dom0", 1, 256, Some(vec![0]), vec![proc("xenstored", 0, 1, 0, 3_000_000, true)]),
        vm("dom1", 1, 256, Some(vec![1]), vec![phased_guest("a", 16, 48, 150, 2)]),
        vm("dom2", 1, 256, Some(vec![1]), vec![phased_guest("b", 96, 16, 150, 2)]),
    ];
    let mut all = vec!["hypervisor.credit.time_slice_ms=30", "hypervisor.credit.tick_ms=10"];
    all.extend_from_slice(extra);
    run(2, "cr3", vms, &all)
}

fn guests_mean_dtlb_mptti(v: &Value) -> f64 {
    (v["per_vm"][1]["dtlb_mptti"].as_f64().unwrap() + v["per_vm"][2]["dtlb_mptti"].as_f64().unwrap()) / 2.0
}

#[test]
fn the_utility_controller_follows_phases_with_its_quotas() {
    let u = phased_run(&["machine.tlb.partition_controller=\"utility\"", "machine.tlb.partition_epoch_instructions=50000"]);
    let p = &u["per_core"][1]["partition"];
    let history = p["history"].as_array().unwrap();
    assert!(p["epochs"].as_u64().unwrap() >= 8, "{p}");
    // CPU 1 retires 600,000 instructions per phase (two guests × 150 × 2,000); dom1 needs
    // 16 pages, then 48, then 16, then 48; dom2 96, 16, 96, 16.
    let dom1_at = |instr: u64| {
        let e = history.iter().rev().find(|e| e["instructions"].as_u64().unwrap() <= instr).unwrap();
        e["l1d"][1].as_u64().unwrap()
    };
    for (at, small) in [(500_000, true), (1_100_000, false), (1_700_000, true), (2_300_000, false)] {
        let q = dom1_at(at);
        if small {
            assert!((14..=24).contains(&q), "dom1 in its 16-page phase at {at}: quota {q} ({p})");
        } else {
            assert!(q >= 40, "dom1 in its 48-page phase at {at}: quota {q} ({p})");
        }
    }
    // CPU 0 runs only dom0: one active level, all its entries.
    let q0 = &u["per_core"][0]["partition"]["quotas"]["l1d"];
    assert!(q0.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).sum::<u64>() <= 64);
    // Tracking beats a fixed equal split of the same TLB.
    let half = phased_run(&["machine.tlb.sl_quota_fraction=[1.0, 0.5, 0.5]"]);
    assert!(half["per_core"][1].get("partition").is_none());
    let (mu, mh) = (guests_mean_dtlb_mptti(&u), guests_mean_dtlb_mptti(&half));
    assert!(mu < 0.9 * mh, "utility {mu} against 50/50 {mh}");
    assert_eq!(violations(&u), 0);
}

#[test]
fn bad_partition_settings_name_their_key() {
    for (set, key) in [
        ("machine.tlb.partition_epoch_instructions=10", "machine.tlb.partition_epoch_instructions"),
        ("machine.tlb.partition_goal_mptti=-1.0", "machine.tlb.partition_goal_mptti"),
        ("machine.tlb.partition_goal_domain=300", "machine.tlb.partition_goal_domain"),
    ] {
        let tree = json!({"machine": {"tlb": {"partition_controller": "utility"}}});
        let err = tlbsim_core::run(tree, &[set.to_string()], std::path::Path::new(".")).err().expect(set).to_string();
        assert!(err.contains(key), "{set}: {err}");
    }
    let tree = json!({"machine": {"tlb": {"partition_goal": "fastest"}}});
    let err = tlbsim_core::run(tree, &[], std::path::Path::new(".")).err().unwrap().to_string();
    assert!(err.contains("partition_goal"), "{err}");
}

/// dom0 with a back-end daemon (serve, then some work) and a guest whose thread does
/// `n` requests of `device` cycles, both pinned to CPU `cpu` (dom0) and `guest_cpu`.
fn split_driver(n: u64, device: u64, cpu: u32, guest_cpu: u32, extra: &[&str]) -> Value {
    let backend = json!({"name": "blkback-proc", "region": [{"name": "heap", "bytes": 4 * 4096, "populate": true}],
        "thread": [{"name": "blkback", "daemon": true, "program": [{"op": "loop", "count": 0, "body": [
            {"op": "serve"}, {"op": "access", "region": "heap", "count": 64, "pattern": "random"}]}]}]});
    let guest = json!({"name": "db", "region": [{"name": "heap", "bytes": 16 * 4096, "populate": true}],
        "thread": [{"name": "db", "program": [{"op": "loop", "count": n, "body": [
            {"op": "access", "region": "heap", "count": 500, "pattern": "random"},
            {"op": "io", "server": "blkback", "cycles": device}, {"op": "count"}]}, {"op": "exit"}]}]});
    let vms = vec![vm("dom0", 1, 256, Some(vec![cpu]), vec![backend]), vm("dom1", 1, 256, Some(vec![guest_cpu]), vec![guest])];
    run(2, "none", vms, extra)
}

#[test]
fn split_driver_io_goes_through_the_back_end_and_wakes_the_guest() {
    let v = split_driver(40, 200_000, 0, 0, &[]);
    assert_eq!(v["totals"]["io_requests"], 40);
    assert_eq!(v["totals"]["io_completions"], 40);
    assert_eq!(v["per_thread"][1]["ops_completed"], 40);
    // Each request and each completion runs dom0 on the guest's CPU: the guest → dom0
    // (takes the request; the CPU idles during the device's time) → dom0 (takes the
    // completion) → the guest, three VCPU switches, two of them inter-VM (dom0's address
    // space stays loaded while the CPU idles).
    let switches = v["per_core"][0]["vcpu_switches"].as_u64().unwrap();
    assert!(switches >= 3 * 40, "{switches} VCPU switches for 40 I/Os");
    assert!(cause(&v, 0, "context_switch_inter_vm") >= 2 * 40);
    // The guest waited for the device every time.
    let makespan = v["run"]["makespan_cycles"].as_u64().unwrap();
    assert!(makespan >= 40 * 200_000, "{makespan}");
    // dom0 on a CPU of its own: the guest's CPU switches only between the guest and idle.
    let apart = split_driver(40, 200_000, 0, 1, &[]);
    assert_eq!(apart["totals"]["io_completions"], 40);
    assert_eq!(cause(&apart, 1, "context_switch_inter_vm"), 0);
    assert_eq!(violations(&v) + violations(&apart), 0);
}

#[test]
fn io_names_a_thread_that_serves() {
    let err = |program: Value, extra_thread: Option<Value>| {
        let mut threads = vec![json!({"name": "t", "program": program})];
        threads.extend(extra_thread);
        let p = json!({"name": "p", "thread": threads});
        let tree = json!({"workload": {"kind": "scenario", "scenario": {"process": [p]}}});
        tlbsim_core::run(tree, &[], std::path::Path::new(".")).err().expect("an error").to_string()
    };
    let io = |server: &str| json!([{"op": "io", "server": server, "cycles": 100}, {"op": "exit"}]);
    let e = err(io("nobody"), None);
    assert!(e.contains("process[0].thread[0].program[0].server") && e.contains("no thread named \"nobody\""), "{e}");
    let e = err(io("t"), Some(json!({"name": "t", "daemon": true, "program": [{"op": "loop", "count": 0, "body": [{"op": "serve"}]}]})));
    assert!(e.contains("2 threads are named \"t\""), "{e}");
    let e = err(io("idle"), Some(json!({"name": "idle", "daemon": true, "program": [{"op": "loop", "count": 0, "body": [{"op": "block", "cycles": 10}]}]})));
    assert!(e.contains("never serves"), "{e}");
    let e = err(json!([{"op": "io", "server": "t"}, {"op": "exit"}]), None);
    assert!(e.contains("program[0].cycles"), "{e}");
}
