//! The one set-up step between a config document and a run (docs/ARCHITECTURE.md
//! "Layers"): `config` parses the document and checks what it knows the meaning of; here
//! the plug-in registries fill in their tables' defaults and check them, the TLB
//! structures' shapes are checked, and an OS-mode workload is built, once. A run uses what
//! set-up built; `tlbsim config` and sweeps' up-front validation run the same step, so
//! they refuse exactly what a run would refuse.

use crate::config::{is_os_mode, merge, Config};
use crate::error::{Error, Result};
use crate::workload::program::Workload;
use std::path::Path;

/// What set-up produced: the effective config and, in OS mode, the built workload.
pub struct Prepared {
    pub config: Config,
    /// `None` in trace mode (`trace`, `synthetic`), whose events are read as the run goes.
    pub workload: Option<Workload>,
}

/// Every plug-in table with its registry's defaults: `[coherence.<name>]`,
/// `[recycling.<name>]`, `[placement.<name>]`, `[hypervisor.<name>]`.
pub fn plugin_defaults() -> serde_json::Value {
    serde_json::json!({
        "coherence": crate::coherence::default_params(),
        "recycling": crate::recycling::default_params(),
        "placement": crate::placement::default_params(),
        "hypervisor": crate::hypervisor::default_params(),
    })
}

/// Every registry's entries, by axis, as `tlbsim list` prints them: name, one-line summary,
/// and each parameter with its kind, default and documentation.
pub fn catalogue() -> serde_json::Value {
    fn axis(entries: Vec<crate::registry::Entry>, select: &str) -> serde_json::Value {
        let entries: Vec<serde_json::Value> = entries
            .iter()
            .map(|e| {
                let defaults = (e.defaults)();
                let params: Vec<serde_json::Value> = (e.params)()
                    .iter()
                    .map(|d| serde_json::json!({"key": d.key, "kind": d.kind, "default": defaults.get(d.key), "doc": d.doc.trim_end()}))
                    .collect();
                serde_json::json!({"name": e.name, "summary": e.summary, "params": params})
            })
            .collect();
        serde_json::json!({"select": select, "entries": entries})
    }
    serde_json::json!({
        "policies": axis(crate::coherence::entries(), "os.coherence"),
        "workloads": axis(crate::workload::kind::entries(), "workload.kind"),
        "presets": axis(crate::config::presets::entries(), "machine.preset"),
        "recycling": axis(crate::recycling::entries(), "os.recycling"),
        "placements": axis(crate::placement::entries(), "os.pt_placement"),
        "hypervisors": axis(crate::hypervisor::entries(), "os.hypervisor"),
    })
}

/// The defaults under every config: [`Config::default`] and [`plugin_defaults`].
pub fn defaults() -> serde_json::Value {
    let mut tree = Config::default().to_json();
    merge(&mut tree, plugin_defaults());
    tree
}

/// Parse, check and build: the config document, overrides and base folder (relative trace
/// paths) to a config every part of which has been checked, and the workload.
pub fn prepare(tree: serde_json::Value, overrides: &[String], base_dir: &Path) -> Result<Prepared> {
    prepare_judged(tree, overrides, base_dir, true)
}

/// [`prepare`]; `judge` false leaves out the check of settings that cannot matter, for
/// callers that run the config with a workload of their own ([`Config::resolve`]).
fn prepare_judged(tree: serde_json::Value, overrides: &[String], base_dir: &Path, judge: bool) -> Result<Prepared> {
    let mut parsed = Config::parse_parts(tree, overrides, defaults())?;
    crate::workload::kind::resolve(&mut parsed.config, base_dir)?;
    check_plugins(&parsed.config)?;
    // Last: a misspelt policy or kind is reported as such before any key is judged by it.
    if judge {
        parsed.refuse_silent_settings()?;
    }
    let config = parsed.config;
    // The kind and its table were checked by `resolve`; an OS-mode kind is built here, once.
    let workload = if is_os_mode(&config.workload.kind) { Some(crate::workload::build(&config)?) } else { None };
    Ok(Prepared { config, workload })
}

impl Config {
    /// The effective config, every part checked as a run checks it (what [`prepare`]
    /// checks, without keeping the workload it built): `tlbsim.resolve`, `tlbsim config`
    /// and sweeps' validation.
    pub fn resolve_checked(tree: serde_json::Value, overrides: &[String], base_dir: &Path) -> Result<Config> {
        Ok(prepare(tree, overrides, base_dir)?.config)
    }

    /// The effective config for a caller that runs it with a workload of its own (the
    /// fuzzer, tests building a `Workload`): as [`Config::resolve_checked`] but without
    /// the check of settings that cannot matter, which judges OS keys by
    /// `workload.kind` — a kind such a config does not name.
    pub fn resolve(tree: serde_json::Value, overrides: &[String], base_dir: &Path) -> Result<Config> {
        Ok(prepare_judged(tree, overrides, base_dir, false)?.config)
    }
}

/// The TLB structures' shapes, then each plug-in axis' selection and tables.
fn check_plugins(cfg: &Config) -> Result<()> {
    for (name, l) in cfg.machine.tlb.levels() {
        check_shape(&format!("machine.tlb.{name}"), l.entries, l.ways, l.replacement)?;
    }
    let pt = &cfg.machine.pt_cache;
    check_shape("machine.pt_cache", pt.entries, pt.ways, pt.replacement)?;
    let mem = &cfg.machine.memory;
    if mem.model == crate::config::MemoryModel::Cache {
        for (key, bytes, ways) in [("machine.memory.llc", mem.llc_bytes, mem.llc_ways), ("machine.memory.private", mem.private_bytes, mem.private_ways)] {
            check_shape(key, (bytes / 64) as u32, ways, crate::types::Replacement::Lru).map_err(|e| match e {
                Error::Config { message, .. } => Error::config(format!("{key}_ways"), message),
                e => e,
            })?;
        }
    }
    crate::placement::check(cfg)?;
    crate::coherence::check(cfg)?;
    crate::recycling::check(cfg)?;
    crate::hypervisor::check(cfg)
}

/// A structure's shape rules, by building it (sets a power of two, PLRU ways a power of
/// two); errors name `<key>.ways`.
fn check_shape(key: &str, entries: u32, ways: u32, replacement: crate::types::Replacement) -> Result<()> {
    if entries == 0 {
        return Ok(());
    }
    crate::tlb::Tlb::new(&crate::tlb::TlbGeometry { entries, ways, replacement }, 0).map(|_| ()).map_err(|m| Error::config(format!("{key}.ways"), m))
}
