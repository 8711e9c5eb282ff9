//! tlbsim-core: a simulator of address translation on multicore, multi-socket machines.
//!
//! No Python here; `tlbsim-py` is the thin binding. Entry points: [`run`] (one run from a
//! config tree), [`bench::run_bench`] (the speed benchmark), [`trace`] (readers and the
//! native writer).

pub mod access;
pub mod bench;
pub mod coherence;
pub mod config;
pub mod control;
pub mod error;
pub mod fasthash;
pub mod fuzz;
pub mod hostmem;
pub mod hypervisor;
pub mod machine;
pub mod memory;
pub mod memsys;
pub mod os;
pub mod page_table;
pub mod placement;
pub mod prefetch;
pub mod recycling;
pub mod registry;
pub mod rng;
pub mod setup;
pub mod sim;
pub mod stats;
pub mod tlb;
pub mod trace;
pub mod tree;
pub mod types;
pub mod walk;
pub mod workload;

pub use error::{Error, Result};

/// Version string recorded in every run's output (and in sweep run IDs).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A digest of this crate's source files (build.rs): it changes with any change to the
/// model. Sweep run IDs include it, so a sweep resumed in the same folder after the model
/// changed runs again rather than reusing the stats of the model before.
pub const SOURCE_HASH: &str = env!("TLBSIM_SOURCE_HASH");

/// What one run produces.
pub struct RunOutput {
    /// The effective config: every key, after preset, file and overrides, so the run can
    /// be repeated anywhere from this alone.
    pub effective_config: serde_json::Value,
    /// stats.json content.
    pub stats: serde_json::Value,
}

/// Run one simulation. `config` is the user's config tree (parsed TOML or a Python dict
/// as JSON); `overrides` are `dotted.key=value` strings (value parsed as a TOML literal,
/// or taken as a bare string when it does not parse); relative trace paths are resolved
/// against `base_dir`.
pub fn run(config: serde_json::Value, overrides: &[String], base_dir: &std::path::Path) -> Result<RunOutput> {
    let setup::Prepared { config: cfg, workload } = setup::prepare(config, overrides, base_dir)?;
    // Before anything large is allocated: a run that cannot fit is refused here.
    hostmem::check(&cfg, workload.as_ref())?;
    let effective_config = cfg.to_json();
    // The one choice between the two engines: OS mode runs the workload set-up built
    // through the kernel model, trace mode streams its events through the trace engine.
    let stats = match workload {
        Some(workload) => os::run(&cfg, workload)?,
        None => sim::run(&cfg)?,
    };
    Ok(RunOutput { effective_config, stats })
}

/// Run an already resolved config (tests and tools that hold a [`config::Config`]): builds
/// an OS-mode workload again, so [`run`] is the path that builds it once.
pub fn run_resolved(cfg: &config::Config) -> Result<serde_json::Value> {
    if config::is_os_mode(&cfg.workload.kind) {
        os::run(cfg, workload::build(cfg)?)
    } else {
        sim::run(cfg)
    }
}

/// Run one OS-mode simulation with a coherence policy that is not registered (built by
/// `make` from the resolved config; e.g. one written in Python). `label` names it in
/// `run.coherence`.
pub fn run_with_policy<P: coherence::Coherence>(
    config: serde_json::Value,
    overrides: &[String],
    base_dir: &std::path::Path,
    label: &str,
    make: impl FnOnce(&config::Config) -> P,
) -> Result<RunOutput> {
    let setup::Prepared { config: mut cfg, workload } = setup::prepare(config, overrides, base_dir)?;
    let Some(workload) = workload else {
        return Err(Error::config("workload.kind", format!("{:?} runs without the OS model: a coherence policy needs an OS-mode workload", cfg.workload.kind)));
    };
    hostmem::check(&cfg, Some(&workload))?;
    let policy = make(&cfg);
    cfg.os.coherence = label.to_owned();
    let mut effective_config = cfg.to_json();
    effective_config["os"]["coherence"] = serde_json::json!(label);
    let stats = os::run_with_policy(&cfg, workload, policy)?;
    Ok(RunOutput { effective_config, stats })
}

/// Resolve a config without running it: the effective config (every key), or the error a
/// run would raise. Sweeps use it to validate every expanded config before any run starts.
pub fn resolve_config(config: serde_json::Value, overrides: &[String], base_dir: &std::path::Path) -> Result<serde_json::Value> {
    Ok(config::Config::resolve_checked(config, overrides, base_dir)?.to_json())
}

/// Parse a TOML config file into a config tree.
pub fn load_config_file(path: &std::path::Path) -> Result<serde_json::Value> {
    config::load_toml_file(path)
}
