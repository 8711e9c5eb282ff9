//! Workloads. Trace-mode generators (`synthetic`) produce the same event stream a trace
//! reader does; OS-mode workloads (scenarios and the papers' benchmarks) compile to a
//! [`program::Workload`] that the OS model (`crate::os`) interprets.

pub mod generators;
pub mod program;
pub mod scenario;
pub mod synthetic;

use crate::config::Config;
use crate::error::{Error, Result};

/// Whether `workload.kind` names an OS-mode workload (anything but `trace`/`synthetic`).
pub fn is_os_mode(kind: &str) -> bool {
    !matches!(kind, "trace" | "synthetic")
}

/// Build the OS-mode workload `cfg.workload.kind` names: the scenario of
/// `[workload.scenario]`, or a built-in generator ([`generators::KINDS`]). Errors name the
/// config key; the result has passed [`program::Workload::check`].
pub fn build(cfg: &Config) -> Result<program::Workload> {
    match cfg.workload.kind.as_str() {
        "scenario" => {
            let spec = cfg.workload.scenario.as_ref().ok_or_else(|| {
                Error::config("workload.scenario", "workload.kind = \"scenario\" needs a [workload.scenario] table")
            })?;
            scenario::compile(spec, cfg.cores(), cfg.machine.sockets)
        }
        k if generators::KINDS.contains(&k) => generators::build(cfg),
        k => Err(Error::config("workload.kind", format!("{k:?} is not an OS-mode workload"))),
    }
}
