//! No silent settings: a key the user set to a value that cannot change the run is refused,
//! with what would make it matter (the mode, the switch, the memory model). A run that
//! quietly ignores a setting reports results its author did not ask for.
//!
//! "Set" means the user's document or `--set` gives the key a value other than the one the
//! defaults and the preset give it: a key written at its default (every key of a
//! `config.json`, which writes them all out) is never refused, so a run repeats from its
//! effective config and a sweep may name a key at its default on every point.

use super::{is_os_mode, Config, MemoryModel, Placement, Tagging};
use crate::error::{Error, Result};
use crate::types::{PartitionController, PartitionGoal};
use serde_json::Value;

/// Keys of the OS model: a trace-mode workload (`trace`, `synthetic`) runs none of it.
/// `os.pt_placement`, `os.pt_levels`, `os.thp`, `os.thp_failure_rate`, `os.data_placement`
/// and `[placement.*]` are the trace engine's first-touch faults' too, so they are not here.
const OS_ONLY: &[&str] = &[
    "os.coherence",
    "os.checker",
    "os.flush_ceiling",
    "os.migrate_batch",
    "os.kernel_interrupts",
    "os.balance",
    "os.time_slice",
    "os.locks",
    "os.lru_drain_on_unmap",
    "os.recycling",
    "os.hypervisor",
    "os.numa_balancing",
    "os.numa_scan_delay_ms",
    "os.numa_scan_period_ms",
    "os.numa_scan_period_max_ms",
    "os.numa_scan_size_mb",
    "os.numa_hint_order",
    "os.numa_groups",
    "os.numa_task_placement",
    // `[costs]` is not here: it describes the machine, like a preset, and a calibrated
    // preset (`tlbsim calibrate`) sets it whatever workload the run names.
    "coherence",
    "recycling",
    "hypervisor",
    "sim.quantum_cycles",
    "sim.interval_instructions",
    "workload.corunner",
];

/// Keys only the trace engine reads: the OS model has its own fault path and engine.
const TRACE_ONLY: &[(&str, &str)] =
    &[("sim.fault_cycles", "OS-mode faults cost what [costs] charges for them"), ("sim.batch", "the OS-mode engine interleaves cores by sim.quantum_cycles")];

/// Keys of the cache memory model (`machine.memory.model = "cache"`).
const CACHE_ONLY: &[&str] = &[
    "machine.memory.llc_bytes",
    "machine.memory.llc_ways",
    "machine.memory.llc_latency",
    "machine.memory.private_bytes",
    "machine.memory.private_ways",
    "machine.memory.bandwidth_gbps_local",
    "machine.memory.bandwidth_gbps_remote",
    "machine.memory.mshrs",
    "machine.memory.rob_entries",
];

/// The plug-in tables and the switch that selects one of their entries.
const PLUGIN_TABLES: &[(&str, &str)] =
    &[("coherence", "os.coherence"), ("recycling", "os.recycling"), ("placement", "os.pt_placement"), ("hypervisor", "os.hypervisor")];

/// Refuse the first key of `user` (the document with its overrides) that differs from
/// `base` (the defaults under the preset) and cannot affect a run of `cfg`.
pub(super) fn refuse_silent_settings(cfg: &Config, user: &Value, base: &Value) -> Result<()> {
    let set = |key: &str| changed(user, base, key);
    let kind = &cfg.workload.kind;
    if is_os_mode(kind) {
        for (key, why) in TRACE_ONLY {
            if let Some((key, v)) = set(key) {
                return Err(Error::config(
                    key,
                    format!("{v} cannot matter: workload.kind = {kind:?} runs through the OS model and only trace mode (\"trace\", \"synthetic\") reads this key ({why})"),
                ));
            }
        }
    } else {
        for key in OS_ONLY {
            if let Some((key, v)) = set(key) {
                return Err(Error::config(
                    key,
                    format!(
                        "{v} cannot matter: workload.kind = {kind:?} runs in trace mode, without the OS model this key configures; it takes effect with an OS-mode workload kind (`tlbsim list workloads`)"
                    ),
                ));
            }
        }
    }
    for (table, switch) in PLUGIN_TABLES {
        let selected = match *switch {
            "os.coherence" => cfg.os.coherence.as_str(),
            "os.recycling" => cfg.os.recycling.as_str(),
            "os.hypervisor" => cfg.os.hypervisor.as_str(),
            // `fixed:1` is the entry `fixed:N`.
            _ if cfg.os.pt_placement.starts_with("fixed:") => "fixed:N",
            _ => cfg.os.pt_placement.as_str(),
        };
        let Some(Value::Object(entries)) = user.get(table) else { continue };
        for name in entries.keys() {
            if name == selected {
                continue;
            }
            if let Some((key, v)) = set(&format!("{table}.{name}")) {
                return Err(Error::config(
                    key,
                    format!(
                        "{v} cannot matter: {switch} = {selected:?} selects another entry, and [{table}.{name}] is read only when {switch} = {name:?} (a sweep that varies {switch} zips this key with it)"
                    ),
                ));
            }
        }
    }
    let m = &cfg.machine;
    if m.memory.model == MemoryModel::Flat {
        for key in CACHE_ONLY {
            if let Some((key, v)) = set(key) {
                return Err(Error::config(
                    key,
                    format!("{v} cannot matter: machine.memory.model = \"flat\" has no data caches or DRAM bandwidth; it takes effect under machine.memory.model = \"cache\""),
                ));
            }
        }
        // Under "flat" a data access costs the same wherever its frame lives, so a fixed
        // node changes nothing unless AutoNUMA moves pages. "interleave" stays allowed: it
        // spreads frames over the nodes' capacity (configs/scale-1tib.toml needs two
        // nodes' worth).
        let fixed = matches!(Placement::parse("os.data_placement", &cfg.os.data_placement, m.sockets)?, Placement::Fixed(_));
        if fixed && !cfg.os.numa_balancing {
            if let Some((key, v)) = set("os.data_placement") {
                return Err(Error::config(
                    key,
                    format!(
                        "{v} cannot matter: under machine.memory.model = \"flat\" a data access costs the same on every node; where data lives takes effect under machine.memory.model = \"cache\" (remote DRAM costs machine.memory.remote_latency) or with os.numa_balancing = true"
                    ),
                ));
            }
        }
    }
    if !m.memory.latency_matrix.is_empty() {
        for key in ["machine.memory.local_latency", "machine.memory.remote_latency"] {
            if let Some((key, v)) = set(key) {
                return Err(Error::config(
                    key,
                    format!("{v} cannot matter: machine.memory.latency_matrix is set and replaces local_latency and remote_latency"),
                ));
            }
        }
    }
    if !m.idle.exit_curve.is_empty() {
        if let Some((key, v)) = set("machine.idle.exit_ns") {
            return Err(Error::config(key, format!("{v} cannot matter: machine.idle.exit_curve is set and gives every wake's exit latency")));
        }
    }
    if !m.idle.wake_ipi_curve.is_empty() {
        if let Some((key, v)) = set("machine.idle.wake_ipi_ns") {
            return Err(Error::config(key, format!("{v} cannot matter: machine.idle.wake_ipi_curve is set and gives every wake's IPI cost")));
        }
    }
    let t = &m.tlb;
    if t.tagging != Tagging::Cr3 {
        if let Some((key, v)) = set("machine.tlb.tmt_entries") {
            return Err(Error::config(key, format!("{v} cannot matter: the Tag Manager Table exists only with machine.tlb.tagging = \"cr3\"")));
        }
    }
    if t.partition_controller != PartitionController::Utility {
        for key in [
            "machine.tlb.partition_goal",
            "machine.tlb.partition_goal_domain",
            "machine.tlb.partition_goal_mptti",
            "machine.tlb.partition_epoch_instructions",
            "machine.tlb.partition_at_flush",
        ] {
            if let Some((key, v)) = set(key) {
                return Err(Error::config(key, format!("{v} cannot matter: only machine.tlb.partition_controller = \"utility\" re-partitions the TLB")));
            }
        }
    } else if t.partition_goal != PartitionGoal::MpttiCeiling {
        for key in ["machine.tlb.partition_goal_domain", "machine.tlb.partition_goal_mptti"] {
            if let Some((key, v)) = set(key) {
                return Err(Error::config(key, format!("{v} cannot matter: it is the goal of machine.tlb.partition_goal = \"mptti-ceiling\"")));
            }
        }
    }
    if !cfg.os.thp {
        if let Some((key, v)) = set("os.thp_failure_rate") {
            return Err(Error::config(key, format!("{v} cannot matter: only 2 MiB allocations fail, and they are made with os.thp = true")));
        }
    }
    Ok(())
}

/// The first leaf under dotted `key` whose value in `user` differs from `base`: its full
/// key and value. Numbers compare by value (`1` and `1.0` are the same setting).
fn changed(user: &Value, base: &Value, key: &str) -> Option<(String, Value)> {
    let mut u = Some(user);
    let mut b = Some(base);
    for part in key.split('.') {
        u = u.and_then(|n| n.get(part));
        b = b.and_then(|n| n.get(part));
    }
    first_difference(u?, b, key)
}

fn first_difference(u: &Value, b: Option<&Value>, key: &str) -> Option<(String, Value)> {
    match u {
        Value::Object(m) => m.iter().find_map(|(k, v)| first_difference(v, b.and_then(|b| b.get(k)), &format!("{key}.{k}"))),
        _ if b.is_some_and(|b| same(u, b)) => None,
        _ => Some((key.to_owned(), u.clone())),
    }
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Value::Object(x), Value::Object(y)) => x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w))),
        _ => a == b,
    }
}
