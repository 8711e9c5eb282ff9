//! Workloads. Trace-mode generators (`synthetic`) produce the same event stream a trace
//! reader does; OS-mode workloads (scenarios and the papers' benchmarks) compile to a
//! [`program::Workload`] that the OS model (`crate::os`) interprets.

pub mod builder;
pub mod generators;
pub mod kind;
pub mod parsec;
pub mod program;
pub mod ptmalloc;
pub mod recorded;
pub mod scenario;
pub mod synthetic;

use crate::config::Config;
use crate::error::{Error, Result};

pub use crate::config::is_os_mode;

/// Build the OS-mode workload `cfg.workload.kind` names: the scenario of
/// `[workload.scenario]`, or a built-in generator ([`generators::KINDS`]). Errors name the
/// config key; the result has passed [`program::Workload::check`].
pub fn build(cfg: &Config) -> Result<program::Workload> {
    let mut w = build_kind(cfg)?;
    if let Some(c) = &cfg.workload.corunner {
        add_corunner(cfg, c, &mut w)?;
    }
    Ok(w)
}

/// Mitosis §3.2's interference: a STREAM-like thread on the last core of `c.socket`,
/// sweeping an array on that socket's node line by line (one read-modify-write per 64-byte
/// line), forever, as a daemon.
fn add_corunner(cfg: &Config, c: &crate::config::CorunnerConfig, w: &mut program::Workload) -> Result<()> {
    use program::*;
    if c.kind != "stream" {
        return Err(Error::config("workload.corunner.kind", format!("{:?}: the co-runner kinds are \"stream\"", c.kind)));
    }
    if c.socket >= cfg.machine.sockets {
        return Err(Error::config("workload.corunner.socket", format!("socket {} does not exist (the machine has {})", c.socket, cfg.machine.sockets)));
    }
    if c.threads == 0 || c.threads > cfg.machine.cores_per_socket {
        return Err(Error::config("workload.corunner.threads", format!("{}: between 1 and the socket's {} cores", c.threads, cfg.machine.cores_per_socket)));
    }
    // STREAM's rule: the arrays together at least four times the last-level cache; split
    // among the threads.
    let total = if c.bytes > 0 { c.bytes } else { 4 * cfg.machine.memory.llc_bytes.max(1 << 20) };
    let bytes = (total / c.threads as u64).div_ceil(4096).max(1) * 4096;
    let lines = bytes / 64;
    let last = (c.socket + 1) * cfg.machine.cores_per_socket - 1;
    // Thread t sweeps region t.
    let sweep = |slot: usize| {
        vec![
            Op::Loop { count: 0, body: 1 },
            Op::Access { slot, pattern: Pattern::Sequential, mode: AccessMode::Mixed(0.5), count: lines, offset: 0, len: 0, stride: 64 },
        ]
    };
    let first_program = w.programs.len();
    for t in 0..c.threads as usize {
        w.programs.push(sweep(t));
    }
    // Its own memory group, without a limit (the workload's groups keep theirs).
    let group = if w.groups.is_empty() {
        0
    } else {
        w.groups.push(GroupSpec { name: "corunner".into(), limit_pages: 0 });
        w.groups.len() - 1
    };
    w.processes.push(ProcessSpec {
        name: "corunner".into(),
        group,
        // After set-up, its arrays are populated first, as STREAM initializes them before
        // it measures.
        regions: (0..c.threads).map(|_| builder::anon(bytes, true).with_populate(c.after_setup)).collect(),
        threads: (0..c.threads)
            .map(|t| ThreadSpec {
                name: if t == 0 { "stream".to_string() } else { format!("stream{t}") },
                class: "corunner".into(),
                core: Some(last - t),
                program: first_program + t as usize,
                daemon: true,
            })
            .collect(),
        page_tables: Default::default(),
    });
    w.slots = w.slots.max(c.threads as usize);
    if c.after_setup {
        w.start_after_setup.push(w.processes.len() - 1);
    }
    Ok(())
}

fn build_kind(cfg: &Config) -> Result<program::Workload> {
    match cfg.workload.kind.as_str() {
        "scenario" => {
            let p: kind::ScenarioParams = kind::params(cfg)?;
            let spec =
                p.scenario.as_ref().ok_or_else(|| Error::config("workload.scenario", "workload.kind = \"scenario\" needs a [workload.scenario] table"))?;
            scenario::compile(&scenario::parse(spec)?, cfg.cores(), cfg.machine.sockets)
        }
        "recorded" => recorded::build(cfg),
        k if generators::KINDS.contains(&k) => generators::build(cfg),
        k => Err(Error::config("workload.kind", format!("{k:?} is not an OS-mode workload"))),
    }
}
