//! Running core work without the GIL and without letting a Rust panic reach Python.
//!
//! A panic inside [`detached`] is caught with `catch_unwind` and becomes a
//! `SimulationError` whose message has the panic message and its source location. While a
//! guarded call runs, our panic hook records the location instead of printing the default
//! "thread panicked at" report (set `RUST_BACKTRACE=1` to get that report too). Panics
//! outside a guarded call (e.g. in another Rust extension) go to the previous hook unchanged.
//! This needs the crate built with `panic = "unwind"` (Rust's default).

use crate::errors::{new_err, Kind};
use pyo3::prelude::*;
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static IN_GUARD: Cell<bool> = const { Cell::new(false) };
    static LAST_LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Install the panic hook (once per process).
pub fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_GUARD.with(Cell::get) {
                previous(info);
                return;
            }
            let loc = info.location().map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
            LAST_LOCATION.with(|cell| *cell.borrow_mut() = loc);
            if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
                previous(info);
            }
        }));
    });
}

fn payload_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

/// Run `f` with the GIL released; a panic in `f` becomes `SimulationError`.
pub fn detached<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let outcome: Result<T, String> = py.detach(|| {
        let was_guarded = IN_GUARD.with(|g| g.replace(true));
        LAST_LOCATION.with(|cell| cell.borrow_mut().take());
        let result = catch_unwind(AssertUnwindSafe(f));
        IN_GUARD.with(|g| g.set(was_guarded));
        result.map_err(|payload| {
            let message = payload_message(payload.as_ref());
            let location = LAST_LOCATION.with(|cell| cell.borrow_mut().take());
            match location {
                Some(loc) => format!("internal error: Rust panic at {loc}: {message} (this is a bug in tlbsim)"),
                None => format!("internal error: Rust panic: {message} (this is a bug in tlbsim)"),
            }
        })
    });
    outcome.map_err(|msg| new_err(py, Kind::Simulation, msg, &[]))
}
