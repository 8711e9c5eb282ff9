//! A run's host memory, estimated from its config before it starts (issue 51 item 3): a run
//! that cannot fit is refused with a config error naming the keys that drive the estimate,
//! instead of working for a minute and being killed by the allocator or the kernel.
//!
//! What grows with the config (the rest, the engine's code and small tables, is `BASE`):
//! - the simulated memory the workload can populate: per 4 KiB page its frame descriptor
//!   (10 bytes, `memory.rs`), its leaf PTE (8 bytes, dense tables in `page_table.rs`) and
//!   their share of the upper tables, the per-4 MiB-block words and owners: `PER_PAGE`. The
//!   pages are at most the machine's frames (`machine.sockets` × `machine.memory.node_mib`,
//!   each node capped at 1 TiB as `memory.rs` numbers frames) and, in OS mode, at most the
//!   bytes the workload ever maps (its regions, `mmap`s and files);
//! - per node, the buddy allocator's per-4 MiB-block tables (`PER_BLOCK`), made up front;
//! - per core, its TLB levels and walk caches; per socket the page-table-line cache; under
//!   `machine.memory.model = "cache"` the shared and private caches' lines;
//! - trace mode: `sim.batch` events per core in flight.
//!
//! The host gives `MemAvailable` (`/proc/meminfo`) and, if set, `RLIMIT_AS` less the
//! address space the process already uses (`VmSize`, `/proc/self/status`). Set
//! `TLBSIM_NO_MEMORY_CHECK=1` to run anyway. Estimate against measured peak RSS: see the
//! table in docs/DEVELOPING.md "A run that cannot fit".

use crate::config::{is_os_mode, Config, MemoryModel};
use crate::error::{Error, Result};
use crate::workload::program::{Op, Workload};

/// Engine, binary and small tables that do not grow with the config.
const BASE: u64 = 32 << 20;
/// Host bytes per populated simulated 4 KiB page in OS mode (descriptor, PTE, upper tables,
/// block words, the OS model's reverse maps and LRU): 124 measured (peak RSS of 2 and 8 GiB
/// populated), with a margin for vectors that double.
const PER_PAGE_OS: u64 = 160;
/// The same in trace mode (frames and page tables only, first-touch faults): 19 measured.
const PER_PAGE_TRACE: u64 = 40;
/// Host bytes per 4 MiB block of a node, made when the node is.
const PER_BLOCK: u64 = 96;
/// Host bytes per TLB or cache entry (key, value, recency and tag state, with a margin).
const PER_ENTRY: u64 = 48;
/// Frames one node can have (`memory::NODE_SHIFT`).
const NODE_FRAMES_MAX: u64 = 1 << crate::memory::NODE_SHIFT;

/// The estimate and what drives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub bytes: u64,
    /// Simulated 4 KiB pages the run can populate.
    pub pages: u64,
    /// The keys that drive the estimate, largest part first.
    pub keys: Vec<&'static str>,
}

/// Bytes the workload ever maps (an upper bound: every region, fixed region, `mmap` and file
/// once; a loop re-mapping a slot maps the same size again, which frees the old mapping).
fn workload_bytes(w: &Workload) -> u64 {
    let mut total: u64 = 0;
    for p in &w.processes {
        for r in &p.regions {
            total = total.saturating_add(r.bytes);
        }
    }
    for (_, _, r) in &w.fixed_regions {
        total = total.saturating_add(r.bytes);
    }
    for ops in &w.programs {
        for op in ops {
            if let Op::Mmap { spec, .. } = op {
                total = total.saturating_add(spec.bytes);
            }
        }
    }
    for f in &w.files {
        total = total.saturating_add(f.pages.saturating_mul(4096));
    }
    // A fork's child copies on write: up to the parent's pages again, per fork.
    let forks = w.programs.iter().flatten().filter(|op| matches!(op, Op::Fork { .. })).count() as u64;
    total.saturating_mul(1 + forks)
}

/// Estimate a run's host memory from its config and (OS mode) its built workload.
pub fn estimate(cfg: &Config, workload: Option<&Workload>) -> Estimate {
    let m = &cfg.machine;
    let nodes = u64::from(m.sockets.max(1));
    let node_frames = m.memory.node_mib.saturating_mul(256).clamp(1024, NODE_FRAMES_MAX);
    let phys_pages = nodes * node_frames;
    let (pages, by_workload) = match workload {
        Some(w) => {
            let virt = workload_bytes(w).div_ceil(4096);
            (virt.min(phys_pages), virt < phys_pages)
        }
        None if cfg.workload.kind == "synthetic" => {
            let p = &cfg.workload.params;
            let num = |k: &str, d: u64| p.get(k).and_then(|v| v.as_u64()).unwrap_or(d);
            let threads = match num("threads", 0) {
                0 => u64::from(cfg.cores()),
                t => t,
            };
            let regions = if p.get("shared_region").and_then(|v| v.as_bool()).unwrap_or(true) { 1 } else { threads };
            let region_pages = num("region_bytes", 64 << 20).div_ceil(4096).saturating_mul(regions);
            let touched = region_pages.min(threads.saturating_mul(num("accesses", 2_000_000))).saturating_add(4 * threads);
            (touched.min(phys_pages), touched < phys_pages)
        }
        None => (phys_pages, false),
    };
    let per_page = if workload.is_some() { PER_PAGE_OS } else { PER_PAGE_TRACE };
    let cores = u64::from(cfg.cores().max(1));
    let tlb_entries: u64 = m.tlb.levels().iter().map(|(_, l)| u64::from(l.entries)).sum::<u64>() + 64;
    let mut per_core = tlb_entries * PER_ENTRY;
    let mut per_socket = u64::from(m.pt_cache.entries) * PER_ENTRY;
    if m.memory.model == MemoryModel::Cache {
        per_core += m.memory.private_bytes / 64 * 16;
        per_socket += m.memory.llc_bytes / 64 * 16;
    }
    if !is_os_mode(&cfg.workload.kind) {
        per_core += u64::from(cfg.sim.batch) * 32;
    }
    let parts = [
        (pages.saturating_mul(per_page), "pages"),
        (nodes * (node_frames / 1024).max(1) * PER_BLOCK, "nodes"),
        (cores * per_core + nodes * per_socket, "cores"),
    ];
    let bytes = parts.iter().fold(BASE, |a, (b, _)| a.saturating_add(*b));
    let mut sorted = parts.to_vec();
    sorted.sort_by_key(|b| std::cmp::Reverse(b.0));
    let mut keys = Vec::new();
    // The parts that matter: at least a tenth of the largest.
    let largest = sorted[0].0;
    for (_, part) in sorted.into_iter().filter(|(b, _)| *b >= largest / 10) {
        let k: &[&'static str] = match part {
            "pages" if by_workload && workload.is_none() => &["workload.region_bytes", "workload.accesses", "workload.threads"],
            "pages" if by_workload => &["workload (its regions' and mmaps' bytes)", "machine.memory.node_mib", "machine.sockets"],
            "pages" if workload.is_some() => &["machine.memory.node_mib", "machine.sockets", "workload (its regions' and mmaps' bytes)"],
            "pages" => &["machine.memory.node_mib", "machine.sockets"],
            "nodes" => &["machine.memory.node_mib", "machine.sockets"],
            _ if m.memory.model == MemoryModel::Cache => {
                &["machine.cores_per_socket", "machine.sockets", "machine.memory.llc_bytes", "machine.memory.private_bytes"]
            }
            _ => &["machine.cores_per_socket", "machine.sockets", "machine.tlb.*.entries"],
        };
        for key in k {
            if !keys.contains(key) {
                keys.push(*key);
            }
        }
    }
    Estimate { bytes, pages, keys }
}

/// What the host can give this process now: `MemAvailable`, and `RLIMIT_AS` less `VmSize`
/// if a limit is set. None where neither can be read (not Linux).
pub fn host_available() -> Option<(u64, &'static str)> {
    let mut best: Option<(u64, &'static str)> = None;
    if let Ok(info) = std::fs::read_to_string("/proc/meminfo") {
        if let Some(kib) = field_kib(&info, "MemAvailable:") {
            best = Some((kib * 1024, "MemAvailable in /proc/meminfo"));
        }
    }
    if let Some(limit) = address_space_limit() {
        let used = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| field_kib(&s, "VmSize:")).unwrap_or(0) * 1024;
        let left = limit.saturating_sub(used);
        if best.is_none_or(|(b, _)| left < b) {
            best = Some((left, "the address-space limit (ulimit -v) less what the process already maps"));
        }
    }
    best
}

fn field_kib(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(name)).and_then(|rest| rest.split_whitespace().next()).and_then(|v| v.parse().ok())
}

/// RLIMIT_AS's soft limit, from `/proc/self/limits` ("Max address space"), None if unlimited.
fn address_space_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max address space"))?;
    line["Max address space".len()..].split_whitespace().next()?.parse().ok()
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// Refuse a run whose estimate exceeds what the host can give; the error names the keys.
pub fn check(cfg: &Config, workload: Option<&Workload>) -> Result<()> {
    if std::env::var_os("TLBSIM_NO_MEMORY_CHECK").is_some_and(|v| v != "0" && !v.is_empty()) {
        return Ok(());
    }
    let Some((available, what)) = host_available() else { return Ok(()) };
    check_against(cfg, workload, available, what)
}

/// [`check`] against a given amount of host memory (tests).
pub fn check_against(cfg: &Config, workload: Option<&Workload>, available: u64, what: &str) -> Result<()> {
    let e = estimate(cfg, workload);
    if e.bytes <= available {
        return Ok(());
    }
    let key = e.keys.iter().copied().find(|k| !k.contains(' ')).unwrap_or("machine.memory.node_mib");
    Err(Error::config(
        key,
        format!(
            "this run needs about {} of host memory ({} simulated pages the workload can populate on {} node(s) of {} MiB, {} core(s)), more than the host can give ({} by {what}); what drives it: {}. Lower them, or set TLBSIM_NO_MEMORY_CHECK=1 to run anyway",
            human(e.bytes),
            e.pages,
            cfg.machine.sockets,
            cfg.machine.memory.node_mib,
            cfg.cores(),
            human(available),
            e.keys.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn prepared(tree: serde_json::Value) -> crate::setup::Prepared {
        crate::setup::prepare(tree, &[], std::path::Path::new(".")).unwrap()
    }

    /// Issue 51's case: a scenario populating 64 TiB with node_mib raised to allow it, under
    /// a 6 GB address space, is refused before it starts, naming the keys.
    #[test]
    fn a_64_tib_populate_is_refused_naming_the_keys() {
        let p = prepared(json!({
            "machine": {"sockets": 1, "cores_per_socket": 1, "memory": {"node_mib": 64u64 << 20}},
            "workload": {"kind": "scenario", "scenario": {"process": [{"name": "p",
                "region": [{"name": "heap", "bytes": 64u64 << 40, "populate": true}],
                "thread": [{"name": "t", "core": 0, "program": [{"op": "access", "region": "heap", "pattern": "random", "count": 10}, {"op": "exit"}]}]}]}}
        }));
        let e = estimate(&p.config, p.workload.as_ref());
        assert_eq!(e.pages, 1 << 28, "a node has at most 1 TiB of frames");
        let err = check_against(&p.config, p.workload.as_ref(), 6_000_000 * 1024, "ulimit -v").unwrap_err().to_string();
        assert!(err.contains("machine.memory.node_mib") && err.contains("machine.sockets") && err.contains("workload"), "{err}");
        assert!(err.contains("TLBSIM_NO_MEMORY_CHECK"), "{err}");
    }

    /// What the repository's configs and tests run fits in 2 GiB.
    #[test]
    fn ordinary_runs_fit_in_2_gib() {
        for tree in [
            json!({}),
            json!({"workload": {"kind": "apache", "threads": 4, "ops": 100}}),
            json!({"machine": {"sockets": 2, "cores_per_socket": 32}, "workload": {"kind": "stm-mprotect", "threads": 64, "ops": 10}}),
            json!({"machine": {"memory": {"model": "cache"}}, "workload": {"kind": "synthetic", "region_bytes": 1u64 << 34}}),
        ] {
            let p = prepared(tree.clone());
            let e = estimate(&p.config, p.workload.as_ref());
            assert!(e.bytes < 2 << 30, "{tree}: {e:?}");
            check_against(&p.config, p.workload.as_ref(), 2 << 30, "test").unwrap();
        }
    }

    #[test]
    fn a_synthetic_footprint_names_its_keys() {
        let p = prepared(
            json!({"machine": {"memory": {"node_mib": 1u64 << 20}}, "workload": {"kind": "synthetic", "region_bytes": 1u64 << 40, "accesses": 1u64 << 36, "threads": 1}}),
        );
        let err = check_against(&p.config, None, 1 << 30, "test").unwrap_err();
        assert!(matches!(&err, Error::Config { key, .. } if key == "workload.region_bytes" || key == "machine.memory.node_mib"), "{err}");
    }

    #[test]
    fn host_limits_are_read() {
        assert!(field_kib("MemTotal: 10 kB\nMemAvailable:   123 kB\n", "MemAvailable:") == Some(123));
        if std::path::Path::new("/proc/meminfo").exists() {
            assert!(host_available().is_some());
        }
    }
}
