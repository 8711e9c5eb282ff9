//! `tlbsim._tlbsim`: the thin PyO3 binding of `tlbsim-core`.
//!
//! Everything crosses the boundary as JSON text or plain strings; the Python package
//! (`python/tlbsim/`) builds the friendly API on top. Every call releases the GIL while the
//! core works, and no Rust panic reaches Python (see `guard.rs`).

mod errors;
mod guard;
mod policy;

use guard::detached;
use pyo3::prelude::*;
use std::path::PathBuf;
use tlbsim_core::trace::TraceFormat;

fn to_json_string(py: Python<'_>, value: &impl serde::Serialize) -> PyResult<String> {
    serde_json::to_string(value).map_err(|e| errors::new_err(py, errors::Kind::Simulation, format!("cannot serialise output: {e}"), &[]))
}

/// Progress and stop of a run (`tlbsim_core::control`): pass one to `run`, watch it from
/// another Python thread, `stop()` it (Ctrl-C) to get the stats so far, marked partial.
#[pyclass(name = "RunControl", module = "tlbsim._tlbsim", frozen)]
struct RunControlPy {
    inner: std::sync::Arc<tlbsim_core::control::RunControl>,
}

#[pymethods]
impl RunControlPy {
    #[new]
    fn new() -> Self {
        RunControlPy { inner: std::sync::Arc::new(tlbsim_core::control::RunControl::new()) }
    }

    /// Ask the run to stop at its next check.
    fn stop(&self) {
        self.inner.stop();
    }

    /// (done, total or 0 when not known, "accesses" | "operations").
    fn progress(&self) -> (u64, u64, &'static str) {
        let (done, total, unit) = self.inner.progress();
        let unit = match unit {
            tlbsim_core::control::ProgressUnit::Accesses => "accesses",
            tlbsim_core::control::ProgressUnit::Operations => "operations",
        };
        (done, total, unit)
    }
}

/// Run one simulation. Returns (effective config JSON, stats JSON).
#[pyfunction]
#[pyo3(signature = (config_json, overrides, base_dir, control = None))]
fn run(py: Python<'_>, config_json: String, overrides: Vec<String>, base_dir: PathBuf, control: Option<Py<RunControlPy>>) -> PyResult<(String, String)> {
    let config: serde_json::Value =
        serde_json::from_str(&config_json).map_err(|e| errors::new_err(py, errors::Kind::Config, format!("config: not valid JSON: {e}"), &[]))?;
    let control = control.map(|c| c.get().inner.clone());
    let out = detached(py, move || match control {
        Some(c) => tlbsim_core::control::with_control(c, || tlbsim_core::run(config, &overrides, &base_dir)),
        None => tlbsim_core::run(config, &overrides, &base_dir),
    })?
    .map_err(|e| errors::from_core(py, e))?;
    Ok((to_json_string(py, &out.effective_config)?, to_json_string(py, &out.stats)?))
}

/// Resolve a config without running it; returns the effective config as JSON.
#[pyfunction]
fn resolve(py: Python<'_>, config_json: String, overrides: Vec<String>, base_dir: PathBuf) -> PyResult<String> {
    let config: serde_json::Value =
        serde_json::from_str(&config_json).map_err(|e| errors::new_err(py, errors::Kind::Config, format!("config: not valid JSON: {e}"), &[]))?;
    let effective = detached(py, move || tlbsim_core::resolve_config(config, &overrides, &base_dir))?.map_err(|e| errors::from_core(py, e))?;
    to_json_string(py, &effective)
}

/// Parse a TOML config file; returns the config tree as JSON.
#[pyfunction]
fn load_config(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    let tree = detached(py, move || tlbsim_core::load_config_file(&path))?.map_err(|e| errors::from_core(py, e))?;
    to_json_string(py, &tree)
}

/// The speed benchmark; returns the report as JSON.
#[pyfunction(name = "bench")]
#[pyo3(signature = (accesses, memory_model = "flat".to_string(), replicas = 1, policy = "linux".to_string()))]
fn bench_py(py: Python<'_>, accesses: u64, memory_model: String, replicas: u32, policy: String) -> PyResult<String> {
    let opts = tlbsim_core::bench::BenchOptions { accesses, memory_model, replicas, policy };
    let report = detached(py, move || tlbsim_core::bench::run_bench(&opts))?.map_err(|e| errors::from_core(py, e))?;
    to_json_string(py, &report)
}

/// Convert a trace to tlbsim's native format; returns the conversion report as JSON.
#[pyfunction]
fn convert(py: Python<'_>, input: PathBuf, input_format: String, output: PathBuf) -> PyResult<String> {
    let format: TraceFormat = serde_json::from_value(serde_json::Value::String(input_format.clone()))
        .map_err(|_| errors::new_err(py, errors::Kind::Trace, format!("unknown trace format {input_format:?}: expected lackey, champsim or native"), &[]))?;
    let report = detached(py, move || tlbsim_core::trace::native::convert(&input, format, &output))?.map_err(|e| errors::from_trace(py, e))?;
    to_json_string(py, &report)
}

/// `tlbsim fuzz`: random OS scenarios under a policy; returns the report as JSON.
#[pyfunction]
#[pyo3(signature = (policy, tagging, overrides, scenarios, seed))]
fn fuzz(py: Python<'_>, policy: String, tagging: Option<String>, overrides: Vec<String>, scenarios: u64, seed: u64) -> PyResult<String> {
    let opts = tlbsim_core::fuzz::FuzzOptions { policy, tagging, overrides, scenarios, seed };
    let report = detached(py, move || tlbsim_core::fuzz::fuzz(&opts))?.map_err(|e| errors::from_core(py, e))?;
    to_json_string(py, &report)
}

/// Run one OS-mode simulation with a coherence policy written in Python (a
/// `tlbsim.Policy` instance). Returns (effective config JSON, stats JSON); an exception a
/// hook raised is re-raised with its traceback.
#[pyfunction]
fn run_policy(py: Python<'_>, config_json: String, overrides: Vec<String>, base_dir: PathBuf, policy: Py<PyAny>, label: String) -> PyResult<(String, String)> {
    let config: serde_json::Value =
        serde_json::from_str(&config_json).map_err(|e| errors::new_err(py, errors::Kind::Config, format!("config: not valid JSON: {e}"), &[]))?;
    let slot: policy::ErrorSlot = Default::default();
    let p = policy::PyPolicy::new(py, policy, slot.clone())?;
    let out = detached(py, move || {
        tlbsim_core::run_with_policy(config, &overrides, &base_dir, &label, move |cfg| {
            let mut p = p;
            p.start(cfg.cores());
            p
        })
    })?;
    if let Some(e) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e);
    }
    let out = out.map_err(|e| errors::from_core(py, e))?;
    Ok((to_json_string(py, &out.effective_config)?, to_json_string(py, &out.stats)?))
}

/// `tlbsim fuzz` with a policy written in Python: `factory()` builds one per scenario.
#[pyfunction]
#[pyo3(signature = (factory, label, tagging, overrides, scenarios, seed))]
fn fuzz_policy(
    py: Python<'_>,
    factory: Py<PyAny>,
    label: String,
    tagging: Option<String>,
    overrides: Vec<String>,
    scenarios: u64,
    seed: u64,
) -> PyResult<String> {
    // Scenarios are resolved with a registered policy's name; the report carries `label`.
    let opts = tlbsim_core::fuzz::FuzzOptions { policy: "linux".into(), tagging, overrides, scenarios, seed };
    let slot: policy::ErrorSlot = Default::default();
    let s = slot.clone();
    let make = move |cfg: &tlbsim_core::config::Config| {
        Python::attach(|py| {
            let built = factory.bind(py).call0().and_then(|obj| policy::PyPolicy::new(py, obj.unbind(), s.clone())).map(|mut p| {
                p.start(cfg.cores());
                p
            });
            built.unwrap_or_else(|e| {
                let mut g = s.lock().unwrap_or_else(|p| p.into_inner());
                if g.is_none() {
                    *g = Some(e);
                }
                policy::PyPolicy::broken(py, s.clone())
            })
        })
    };
    let report = detached(py, move || tlbsim_core::fuzz::fuzz_with(&opts, make))?;
    if let Some(e) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e);
    }
    let mut report = report.map_err(|e| errors::from_core(py, e))?;
    report.policy = label.clone();
    if let Some(f) = report.first_failure.as_mut() {
        f.command = f.command.replacen("--policy linux", &format!("--policy {label}"), 1);
    }
    to_json_string(py, &report)
}

/// Finish a raw recording of the `tlbsim record` plugin into a native trace; returns its
/// summary as JSON.
#[pyfunction]
fn record_finish(py: Python<'_>, raw: PathBuf, output: PathBuf) -> PyResult<String> {
    let s = detached(py, move || tlbsim_core::trace::recorded::finish(&raw, &output))?.map_err(|e| errors::from_trace(py, e))?;
    to_json_string(py, &s)
}

/// Summary of a recording (threads, events by kind, instructions) as JSON; `syscalls`
/// also lists every recorded system call.
#[pyfunction]
#[pyo3(signature = (path, syscalls=false))]
fn record_info(py: Python<'_>, path: PathBuf, syscalls: bool) -> PyResult<String> {
    let s = detached(py, move || tlbsim_core::trace::recorded::summarise(&path, syscalls))?.map_err(|e| errors::from_trace(py, e))?;
    to_json_string(py, &s)
}

/// The core's version.
#[pyfunction]
fn version() -> &'static str {
    tlbsim_core::VERSION
}

/// A digest of the core's source files (`tlbsim_core::SOURCE_HASH`), in sweep run IDs.
#[pyfunction]
fn source_hash() -> &'static str {
    tlbsim_core::SOURCE_HASH
}

/// The coherence policies `os.coherence` accepts (`tlbsim_core::coherence::NAMES`).
#[pyfunction]
fn coherence_policies() -> Vec<&'static str> {
    tlbsim_core::coherence::NAMES.to_vec()
}

/// A config (JSON) as TOML text that loads back to the same config (null values left out).
#[pyfunction]
fn config_toml(py: Python<'_>, config_json: String) -> PyResult<String> {
    let tree: serde_json::Value =
        serde_json::from_str(&config_json).map_err(|e| errors::new_err(py, errors::Kind::Config, format!("config: not valid JSON: {e}"), &[]))?;
    tlbsim_core::config::to_toml(&tree).map_err(|e| errors::new_err(py, errors::Kind::Config, format!("config: cannot write TOML: {e}"), &[]))
}

/// Every registry's entries by axis, as JSON (`tlbsim_core::setup::catalogue`).
#[pyfunction]
fn catalogue() -> String {
    tlbsim_core::setup::catalogue().to_string()
}

/// The tagging modes `tlbsim fuzz --tagging` accepts.
#[pyfunction]
fn tagging_modes() -> Vec<&'static str> {
    tlbsim_core::fuzz::TAGGINGS.to_vec()
}

/// Test hook: panics inside a guarded call, to check that panics become SimulationError.
#[pyfunction]
fn _panic_for_test(py: Python<'_>) -> PyResult<()> {
    detached(py, || -> () { panic!("deliberate panic for testing") })
}

/// Test hook: sleeps `seconds` with the GIL released, to check that calls release it.
#[pyfunction]
fn _sleep_for_test(py: Python<'_>, seconds: f64) -> PyResult<()> {
    let d = std::time::Duration::try_from_secs_f64(seconds).unwrap_or_default();
    detached(py, move || std::thread::sleep(d))
}

#[pymodule]
fn _tlbsim(m: &Bound<'_, PyModule>) -> PyResult<()> {
    guard::install_panic_hook();
    errors::register(m)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(catalogue, m)?)?;
    m.add_function(wrap_pyfunction!(config_toml, m)?)?;
    m.add_class::<RunControlPy>()?;
    m.add_function(wrap_pyfunction!(load_config, m)?)?;
    m.add_function(wrap_pyfunction!(resolve, m)?)?;
    m.add_function(wrap_pyfunction!(bench_py, m)?)?;
    m.add_function(wrap_pyfunction!(convert, m)?)?;
    m.add_function(wrap_pyfunction!(record_finish, m)?)?;
    m.add_function(wrap_pyfunction!(record_info, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(source_hash, m)?)?;
    m.add_function(wrap_pyfunction!(coherence_policies, m)?)?;
    m.add_function(wrap_pyfunction!(fuzz, m)?)?;
    m.add_function(wrap_pyfunction!(run_policy, m)?)?;
    m.add_function(wrap_pyfunction!(fuzz_policy, m)?)?;
    m.add_function(wrap_pyfunction!(tagging_modes, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    m.add_function(wrap_pyfunction!(_sleep_for_test, m)?)?;
    m.add("__version__", tlbsim_core::VERSION)?;
    Ok(())
}
