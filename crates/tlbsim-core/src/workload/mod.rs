//! Workloads. Trace-mode generators (`synthetic`) produce the same event stream a trace
//! reader does; OS-mode workloads (scenarios and the papers' benchmarks) compile to a
//! [`program::Workload`] that the OS model (`crate::os`) interprets.

pub mod program;
pub mod synthetic;

use crate::config::Config;
use crate::error::{Error, Result};

/// Whether `workload.kind` names an OS-mode workload (anything but `trace`/`synthetic`).
pub fn is_os_mode(kind: &str) -> bool {
    !matches!(kind, "trace" | "synthetic")
}

/// Build the OS-mode workload `cfg.workload.kind` names.
pub fn build(cfg: &Config) -> Result<program::Workload> {
    Err(Error::config("workload.kind", format!("{:?}: OS-mode workloads are not built yet", cfg.workload.kind)))
}
