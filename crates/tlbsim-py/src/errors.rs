//! The exception types of `tlbsim` and the mapping from the core's errors to them.
//!
//! Hierarchy (Python):
//!
//! ```text
//! TlbsimError(Exception)
//! ├── ConfigError(TlbsimError, ValueError)      .key = dotted config key
//! ├── TraceError(TlbsimError, ValueError)
//! ├── SimulationError(TlbsimError, RuntimeError) internal errors and Rust panics
//! └── IoError(TlbsimError, OSError)              .errno when the OS gave one
//! ```
//!
//! `create_exception!` takes a single base, so the types are made with `type(...)` at module
//! initialisation and kept in process-wide cells.

use pyo3::exceptions::{PyException, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

static TLBSIM_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CONFIG_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static TRACE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static SIMULATION_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static IO_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// Which exception to raise.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Base,
    Config,
    Trace,
    Simulation,
    Io,
}

impl Kind {
    fn cell(self) -> &'static PyOnceLock<Py<PyType>> {
        match self {
            Kind::Base => &TLBSIM_ERROR,
            Kind::Config => &CONFIG_ERROR,
            Kind::Trace => &TRACE_ERROR,
            Kind::Simulation => &SIMULATION_ERROR,
            Kind::Io => &IO_ERROR,
        }
    }
}

fn make_type<'py>(py: Python<'py>, name: &str, bases: Vec<Bound<'py, PyAny>>, doc: &str) -> PyResult<Bound<'py, PyType>> {
    let ns = PyDict::new(py);
    ns.set_item("__module__", "tlbsim")?;
    ns.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, bases)?;
    let ty = py.get_type::<PyType>().call1((name, bases, ns))?;
    Ok(ty.cast_into::<PyType>()?)
}

/// Create the exception types (once per process) and add them to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let base = TLBSIM_ERROR
        .get_or_try_init(py, || {
            make_type(py, "TlbsimError", vec![py.get_type::<PyException>().into_any()], "Base class of every error tlbsim raises.").map(Bound::unbind)
        })?
        .bind(py)
        .clone();
    let subs: [(Kind, &str, Bound<'_, PyType>, &str); 4] = [
        (Kind::Config, "ConfigError", py.get_type::<PyValueError>(), "A config value is wrong; `key` is its dotted path (machine.tlb.l1d.ways)."),
        (Kind::Trace, "TraceError", py.get_type::<PyValueError>(), "A trace file is malformed or cannot be read; the message names file and position."),
        (Kind::Simulation, "SimulationError", py.get_type::<PyRuntimeError>(), "The simulation failed internally (a bug in tlbsim), including Rust panics."),
        (Kind::Io, "IoError", py.get_type::<PyOSError>(), "A file could not be read or written."),
    ];
    m.add("TlbsimError", &base)?;
    for (kind, name, std_base, doc) in subs {
        let ty = kind.cell().get_or_try_init(py, || make_type(py, name, vec![base.clone().into_any(), std_base.into_any()], doc).map(Bound::unbind))?;
        m.add(name, ty.bind(py))?;
    }
    Ok(())
}

/// A new exception of `kind` with message `msg` and extra attributes.
pub fn new_err(py: Python<'_>, kind: Kind, msg: String, attrs: &[(&str, Py<PyAny>)]) -> PyErr {
    let Some(ty) = kind.cell().get(py) else {
        return PyRuntimeError::new_err(msg);
    };
    let build = || -> PyResult<PyErr> {
        let inst = ty.bind(py).call1((msg.clone(),))?;
        for (name, value) in attrs {
            inst.setattr(*name, value.bind(py))?;
        }
        Ok(PyErr::from_value(inst))
    };
    build().unwrap_or_else(|e| e)
}

/// Map a core error to its exception. The message is the error's Display (already clean).
pub fn from_core(py: Python<'_>, e: tlbsim_core::Error) -> PyErr {
    use tlbsim_core::Error;
    let msg = e.to_string();
    #[allow(unreachable_patterns)]
    match e {
        Error::Config { key, .. } => {
            let key = key.into_pyobject(py).map(|k| k.into_any().unbind());
            match key {
                Ok(k) => new_err(py, Kind::Config, msg, &[("key", k)]),
                Err(_) => new_err(py, Kind::Config, msg, &[]),
            }
        }
        Error::Trace(_) => new_err(py, Kind::Trace, msg, &[]),
        Error::Io { source, .. } => io_err(py, msg, &source),
        Error::Sim(_) => new_err(py, Kind::Simulation, msg, &[]),
        // Variants added to the core later still raise a tlbsim exception.
        _ => new_err(py, Kind::Base, msg, &[]),
    }
}

/// Map a trace error (from the trace converter).
pub fn from_trace(py: Python<'_>, e: tlbsim_core::trace::TraceError) -> PyErr {
    new_err(py, Kind::Trace, e.to_string(), &[])
}

fn io_err(py: Python<'_>, msg: String, source: &std::io::Error) -> PyErr {
    match source.raw_os_error().map(|c| c.into_pyobject(py)) {
        Some(Ok(code)) => new_err(py, Kind::Io, msg, &[("errno", code.into_any().unbind())]),
        _ => new_err(py, Kind::Io, msg, &[]),
    }
}
