//! Progress and interruption of a running simulation, for front ends (a progress line on a
//! terminal, Ctrl-C). A caller that wants them runs the simulation inside
//! [`with_control`]; the engine then publishes how far it is (accesses in trace mode,
//! counted operations in OS mode, out of a total when the workload fixes one) and stops at
//! its next check once [`RunControl::stop`] was called, returning the stats so far with
//! `run.partial = true`. Checks happen once per trace batch and every 1,024 engine steps,
//! never per access. Without a control, nothing is published and nothing is checked.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// What [`RunControl::progress`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressUnit {
    /// Memory accesses (trace mode).
    Accesses,
    /// Counted operations of the non-daemon threads (OS mode).
    Operations,
}

/// Shared between the thread that runs a simulation and the one that watches it.
#[derive(Debug, Default)]
pub struct RunControl {
    done: AtomicU64,
    /// 0: not known.
    total: AtomicU64,
    unit: AtomicU8,
    stop: AtomicBool,
}

impl RunControl {
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask the run to stop at its next check (it returns the stats so far, marked partial).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// (done, total or 0 when unknown, unit).
    pub fn progress(&self) -> (u64, u64, ProgressUnit) {
        let unit = if self.unit.load(Ordering::Relaxed) == 1 { ProgressUnit::Operations } else { ProgressUnit::Accesses };
        (self.done.load(Ordering::Relaxed), self.total.load(Ordering::Relaxed), unit)
    }

    pub(crate) fn start(&self, unit: ProgressUnit, total: u64) {
        self.unit.store(matches!(unit, ProgressUnit::Operations) as u8, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
    }

    pub(crate) fn set_done(&self, done: u64) {
        self.done.store(done, Ordering::Relaxed);
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<RunControl>>> = const { RefCell::new(None) };
}

/// Run `f` (a simulation on this thread) under `control`.
pub fn with_control<T>(control: Arc<RunControl>, f: impl FnOnce() -> T) -> T {
    struct Reset(Option<Arc<RunControl>>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = previous);
        }
    }
    let previous = CURRENT.with(|c| c.borrow_mut().replace(control));
    let _reset = Reset(previous);
    f()
}

/// The control of the simulation running on this thread, if any.
pub(crate) fn current() -> Option<Arc<RunControl>> {
    CURRENT.with(|c| c.borrow().clone())
}
