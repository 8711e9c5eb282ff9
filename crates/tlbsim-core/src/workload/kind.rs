//! Workload kinds and their own parameters (docs/ARCHITECTURE.md "Axes"): every kind that
//! `workload.kind` selects — the trace-mode `trace` and `synthetic`, the OS-mode
//! `scenario` and `recorded`, and each built-in generator (`super::generators`) — declares
//! its parameter table with `params!`: its keys, types, defaults and documentation.
//!
//! The keys stay flat in `[workload]` (`workload.threads`, not `workload.apache.threads`):
//! one kind is selected at a time, and the shipped configs, sweeps and papers' specs name
//! them so. What is per kind is their meaning and default, and which keys exist: set-up
//! ([`resolve`]) parses the selected kind's table, refuses a key it does not take with an
//! error naming the kinds that do, and writes the table back with every default filled in
//! (config.json then holds exactly the keys the run used). The generic keys (`kind`,
//! `fetches`, `corunner`) are `config::WorkloadConfig`'s own.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::registry::{Entry, Params, Plugin};
use crate::types::TraceFormat;
use std::path::{Path, PathBuf};

/// A kind the trace or OS engine reads itself (the generators have their own registry,
/// `super::generators`): its parameters and their checks, run once at set-up.
pub trait EngineKind: Plugin {
    /// Check the table and resolve what depends on where the config is (relative paths
    /// against `base_dir`) or on its normal form (the scenario).
    fn check(p: &mut Self::Params, cfg: &Config, base_dir: &Path) -> Result<()>;
}

/// The engine kinds' registry.
pub mod engine {
    use super::*;

    /// `trace`: recorded traces replayed without the OS model.
    pub struct Trace;
    impl Plugin for Trace {
        type Params = TraceParams;
    }
    impl EngineKind for Trace {
        fn check(p: &mut TraceParams, cfg: &Config, base_dir: &Path) -> Result<()> {
            resolve_paths(&mut p.paths, base_dir);
            p.check(cfg)
        }
    }

    /// `synthetic`: a generated stream per thread (`crate::workload::synthetic`).
    pub struct Synthetic;
    impl Plugin for Synthetic {
        type Params = crate::workload::synthetic::SyntheticParams;
    }
    impl EngineKind for Synthetic {
        fn check(p: &mut Self::Params, cfg: &Config, _: &Path) -> Result<()> {
            p.check(cfg)
        }
    }

    /// `scenario`: the scenario language (`crate::workload::scenario`).
    pub struct Scenario;
    impl Plugin for Scenario {
        type Params = ScenarioParams;
    }
    impl EngineKind for Scenario {
        fn check(p: &mut Self::Params, _: &Config, _: &Path) -> Result<()> {
            p.normalize()
        }
    }

    /// `recorded`: a `tlbsim record` recording (`crate::workload::recorded`).
    pub struct Recorded;
    impl Plugin for Recorded {
        type Params = RecordedParams;
    }
    impl EngineKind for Recorded {
        fn check(p: &mut Self::Params, _: &Config, base_dir: &Path) -> Result<()> {
            resolve_paths(&mut p.paths, base_dir);
            p.check()
        }
    }

    crate::registry! {
        what: "a workload kind", select: "workload.kind", table: "workload", bound: EngineKind;
        "trace" => Trace, "traces replayed without the OS model, one per thread (valgrind lackey, ChampSim or tlbsim's native format)";
        "synthetic" => Synthetic, "a generated access stream per thread (random, sequential or strided), without the OS model";
        "scenario" => Scenario, "the OS-mode scenario language of [workload.scenario]: groups, files, processes, threads and their programs";
        "recorded" => Recorded, "a `tlbsim record` recording of a real program, replayed through the OS model";
    }
}

crate::params! {
    /// `workload.kind = "trace"`.
    pub struct TraceParams {
        /// Format of every path: `lackey` (valgrind --tool=lackey), `champsim` or `native`.
        pub format: TraceFormat = TraceFormat::Lackey,
        /// One path per simulated thread; thread i is pinned to core i. Relative paths are
        /// relative to the config file.
        pub paths: Vec<PathBuf> = Vec::new(),
    }
}

crate::params! {
    /// `workload.kind = "recorded"`.
    pub struct RecordedParams {
        /// The one recording (`tlbsim record --out FILE`); relative to the config file.
        pub paths: Vec<std::path::PathBuf> = Vec::new(),
        /// Cycles per recorded instruction, as a multiple of the machine's CPI (the
        /// recording has no timing: this scales the time between its events).
        pub time_scale: f64 = 1.0,
    }
}

impl RecordedParams {
    /// A recording is read (and checked) when the run builds it: only its path here.
    pub(crate) fn check(&self) -> Result<()> {
        if self.paths.len() != 1 {
            return Err(Error::config(
                "workload.paths",
                format!("a recorded workload replays one recording (`tlbsim record --out FILE`), got {} paths", self.paths.len()),
            ));
        }
        if !self.paths[0].is_file() {
            return Err(Error::config("workload.paths", format!("{}: no such recording", self.paths[0].display())));
        }
        if !(self.time_scale > 0.0 && self.time_scale <= 1e6) {
            return Err(Error::config("workload.time_scale", format!("{}: must be above 0 (1 = the machine's CPI per recorded instruction)", self.time_scale)));
        }
        Ok(())
    }
}

crate::params! {
    /// `workload.kind = "scenario"`.
    pub struct ScenarioParams {
        /// The whole scenario (`[workload.scenario]`: groups, files, processes, threads and
        /// their programs; this module's `ScenarioSpec`). Set-up writes it back with every
        /// default filled in.
        pub scenario: Option<serde_json::Value> = None,
    }
}

impl ScenarioParams {
    /// Parse and check the scenario, and keep its normal form (every default filled in).
    pub(crate) fn normalize(&mut self) -> Result<()> {
        let table =
            self.scenario.as_ref().ok_or_else(|| Error::config("workload.scenario", "workload.kind = \"scenario\" needs a [workload.scenario] table"))?;
        self.scenario = Some(crate::workload::scenario::normalize(table)?);
        Ok(())
    }
}

impl crate::registry::ParamKind for TraceFormat {
    const KIND: &'static str = "\"lackey\" | \"champsim\" | \"native\"";
}

/// Every workload kind with its summary and parameters, engine kinds first.
pub fn entries() -> Vec<Entry> {
    let mut v = engine::entries();
    v.extend(super::generators::entries());
    v
}

/// Every kind's name, as `workload.kind` accepts it.
pub fn names() -> Vec<&'static str> {
    entries().iter().map(|e| e.name).collect()
}

/// Parse the selected kind's keys (`given`, flat in `[workload]`) into its parameters: its
/// defaults overlaid with what the user gave; a key the kind does not take is refused with
/// the kinds that take it; errors name `workload.<key>`.
pub fn parse_params<P: Params>(kind: &str, given: &serde_json::Map<String, serde_json::Value>) -> Result<P> {
    let docs = P::docs();
    for key in given.keys() {
        if !docs.iter().any(|d| d.key == key) {
            return Err(foreign_key(kind, key, docs));
        }
    }
    let mut tree = serde_json::to_value(P::default()).expect("params serialize");
    crate::tree::merge(&mut tree, serde_json::Value::Object(given.clone()));
    crate::tree::from_tree_at("workload", tree)
}

/// A key kind `kind` does not take: which kinds take it, or which keys `kind` takes.
fn foreign_key(kind: &str, key: &str, docs: &[crate::registry::ParamDoc]) -> Error {
    let takers: Vec<&str> = entries().into_iter().filter(|e| (e.params)().iter().any(|d| d.key == key)).map(|e| e.name).collect();
    let own: Vec<&str> = docs.iter().map(|d| d.key).collect();
    let own = if own.is_empty() { "none".to_owned() } else { own.join(", ") };
    let message = if takers.is_empty() {
        format!("unknown key: workload kind {kind:?} takes {own} (and every kind: kind, fetches, corunner)")
    } else {
        format!("not a key of workload kind {kind:?} (it takes {own}); the kinds that take it: {}", crate::registry::quoted(&takers))
    };
    Error::config(format!("workload.{key}"), message)
}

/// The selected kind's parameters from a config (its table is complete after [`resolve`];
/// before, the defaults fill what is missing).
pub fn params<P: Params>(cfg: &Config) -> Result<P> {
    parse_params(&cfg.workload.kind, &cfg.workload.params)
}

/// Set-up's step for the workload table: the kind exists, its keys are its own and parse,
/// its own checks pass (trace paths, synthetic ranges, the scenario normalised), relative
/// paths resolved against `base_dir`; the table is written back complete.
pub fn resolve(cfg: &mut Config, base_dir: &Path) -> Result<()> {
    struct Resolve<'a>(&'a mut Config, &'a Path);
    impl engine::Visit for Resolve<'_> {
        type Output = Result<()>;
        fn visit<T: EngineKind>(self, name: &'static str) -> Result<()> {
            let mut p: T::Params = parse_params(name, &self.0.workload.params)?;
            T::check(&mut p, self.0, self.1)?;
            write_back(self.0, &p);
            Ok(())
        }
    }
    struct ResolveGenerator<'a>(&'a mut Config);
    impl super::generators::Visit for ResolveGenerator<'_> {
        type Output = Result<()>;
        fn visit<T: super::generators::Generator>(self, name: &'static str) -> Result<()> {
            let p: T::Params = parse_params(name, &self.0.workload.params)?;
            write_back(self.0, &p);
            Ok(())
        }
    }
    let kind = cfg.workload.kind.clone();
    if engine::NAMES.contains(&kind.as_str()) {
        engine::visit(&kind, Resolve(cfg, base_dir))?
    } else if super::generators::NAMES.contains(&kind.as_str()) {
        super::generators::visit(&kind, ResolveGenerator(cfg))?
    } else {
        Err(Error::config("workload.kind", format!("{kind:?} is not a workload kind: use one of {}", crate::registry::quoted(&names()))))
    }
}

fn write_back<P: Params>(cfg: &mut Config, p: &P) {
    match serde_json::to_value(p).expect("params serialize") {
        serde_json::Value::Object(m) => cfg.workload.params = m,
        _ => unreachable!("a params! struct serializes to a table"),
    }
}

fn resolve_paths(paths: &mut [PathBuf], base_dir: &Path) {
    for p in paths.iter_mut() {
        if p.is_relative() {
            *p = base_dir.join(&*p);
        }
    }
}

impl TraceParams {
    fn check(&self, cfg: &Config) -> Result<()> {
        if self.paths.is_empty() {
            return Err(Error::config("workload.paths", "a trace workload needs at least one path"));
        }
        if self.paths.len() as u32 > cfg.cores() {
            return Err(Error::config(
                "workload.paths",
                format!("{} traces but only {} cores: one trace per thread, one thread per core", self.paths.len(), cfg.cores()),
            ));
        }
        Ok(())
    }
}

/// Cycles per recorded instruction as a multiple of the machine's CPI: `time_scale` of a
/// recorded workload, 1 for every other kind (their programs carry their own timing).
pub fn recorded_time_scale(cfg: &Config) -> Result<f64> {
    if cfg.workload.kind == "recorded" {
        Ok(params::<RecordedParams>(cfg)?.time_scale)
    } else {
        Ok(1.0)
    }
}
