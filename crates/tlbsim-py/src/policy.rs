//! Coherence policies written in Python (`tlbsim.Policy` subclasses): a `Coherence`
//! implementation that calls the object's per-request and per-switch hooks with the GIL
//! held, while the rest of the run proceeds without it.
//!
//! The Python side (`python/tlbsim/policy.py`) gives the base class: its `_plan`,
//! `_on_deliver`, `_on_switch`, ... wrappers turn the plain tuples passed here into views
//! and normalize what the user's methods return. Hooks run once per flush request, per
//! target, per context switch, per tick, per frame: never per memory access (per-access
//! hooks stay in Rust). A decision the class does not override is the base class's,
//! Linux's, taken here in Rust without a call (the Python base class has the same code, for
//! reading and for `super()` calls). An exception in a hook is kept and stops the run at the
//! engine's next step (`Coherence::failed`); the binding then raises it with its traceback.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tlbsim_core::coherence::{Coherence, CoreView, Cr3Load, Delivery, Effect, Effects, FlushPlan, FlushRequest, FrameUse, FullFlushCause, LocalFlush, OsView};
use tlbsim_core::types::{CoreId, Pfn, Vpn};

/// The first exception a hook raised, shared with the caller of the run.
pub type ErrorSlot = Arc<Mutex<Option<PyErr>>>;

pub struct PyPolicy {
    obj: Py<PyAny>,
    /// The class's name, for errors that name the hook (`MyPolicy.on_frame_alloc`).
    class: Arc<str>,
    wants_holders: bool,
    tick: Option<u64>,
    /// Which optional hooks the class overrides (the others are not called at all).
    has: Hooks,
    error: ErrorSlot,
    failed: bool,
    /// The Python tuple of the request last passed (address, generation, mm → tuple): every
    /// target's `on_deliver` gets the same object, built once.
    last_request: Option<(usize, u64, u32, Py<PyTuple>)>,
    /// The hooks' time limit (`Policy.hook_time_limit`): a watchdog thread that stops a
    /// hook running longer with a `TimeoutError` raised inside it. None: no limit.
    watch: Option<Arc<Watch>>,
}

/// Shared between a policy's hook calls and its watchdog thread.
struct Watch {
    limit: Duration,
    epoch: Instant,
    /// When the hook call in flight started (ns since `epoch`, plus one), 0 when none. Set
    /// and cleared with the GIL held, so the watchdog, holding the GIL, sees a call that is
    /// really in flight.
    started: AtomicU64,
    /// The Python thread that runs the hooks (the run's thread).
    thread: i64,
    fired: AtomicBool,
    stop: AtomicBool,
}

impl Watch {
    fn start(limit: f64, thread: i64) -> Arc<Watch> {
        let w = Arc::new(Watch {
            limit: Duration::from_secs_f64(limit),
            epoch: Instant::now(),
            started: AtomicU64::new(0),
            thread,
            fired: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let watched = Arc::clone(&w);
        let tick = (watched.limit / 4).clamp(Duration::from_millis(5), Duration::from_millis(100));
        std::thread::spawn(move || {
            while !watched.stop.load(Ordering::Relaxed) {
                std::thread::sleep(tick);
                let s = watched.started.load(Ordering::Acquire);
                if s == 0 || watched.fired.load(Ordering::Relaxed) {
                    continue;
                }
                let since = Duration::from_nanos((watched.epoch.elapsed().as_nanos() as u64).saturating_sub(s - 1));
                if since < watched.limit {
                    continue;
                }
                Python::attach(|_py| {
                    // Still the same call (the hook thread is inside it while we hold the GIL).
                    if watched.started.load(Ordering::Acquire) == s && !watched.stop.load(Ordering::Relaxed) {
                        watched.fired.store(true, Ordering::Relaxed);
                        // SAFETY: the GIL is held; the exception type is a static of the interpreter.
                        unsafe {
                            pyo3::ffi::PyThreadState_SetAsyncExc(watched.thread as _, pyo3::ffi::PyExc_TimeoutError);
                        }
                    }
                });
            }
        });
        w
    }
}

impl Drop for PyPolicy {
    fn drop(&mut self) {
        if let Some(w) = &self.watch {
            w.stop.store(true, Ordering::Relaxed);
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Hooks {
    /// The decisions: when not overridden, Linux's (the base class's) run here in Rust.
    plan: bool,
    on_deliver: bool,
    on_switch: bool,
    tick: bool,
    cr3: bool,
    full_flush: bool,
    frame_alloc: bool,
    frame_free: bool,
    range_unmapped: bool,
}

fn overrides(py: Python<'_>, obj: &Bound<'_, PyAny>, name: &str) -> PyResult<bool> {
    let base = py.import("tlbsim.policy")?.getattr("Policy")?.getattr(name)?;
    let mine = obj.get_type().getattr(name)?;
    Ok(!mine.is(&base))
}

impl PyPolicy {
    /// Wrap `obj` (a `tlbsim.Policy` instance); errors name what is wrong with it.
    pub fn new(py: Python<'_>, obj: Py<PyAny>, error: ErrorSlot) -> PyResult<PyPolicy> {
        let b = obj.bind(py);
        let base = py.import("tlbsim.policy")?.getattr("Policy")?;
        if !b.is_instance(&base)? {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!("policy must be a tlbsim.Policy instance, got {}", b.get_type().name()?)));
        }
        // The class checks its own per-access hooks when defined; check again here.
        b.call_method0("_check")?;
        let wants_holders: bool = b.getattr("wants_holders")?.extract()?;
        let tick: Option<u64> = b.getattr("tick_interval")?.extract()?;
        let limit = b.getattr("hook_time_limit")?;
        let limit: Option<f64> = limit.extract().ok().flatten().filter(|l: &f64| l.is_finite() && *l > 0.0);
        if limit.is_none() && !b.getattr("hook_time_limit")?.is_none() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "{}.hook_time_limit is {}: it must be a positive number of seconds, or None for no limit",
                b.get_type().name()?,
                b.getattr("hook_time_limit")?.repr()?
            )));
        }
        let thread: i64 = py.import("threading")?.getattr("get_ident")?.call0()?.extract::<u64>()? as i64;
        let watch = limit.map(|l| Watch::start(l, thread));
        let has = Hooks {
            plan: overrides(py, b, "plan")?,
            on_deliver: overrides(py, b, "on_deliver")?,
            on_switch: overrides(py, b, "on_switch")?,
            tick: overrides(py, b, "on_tick")?,
            cr3: overrides(py, b, "on_cr3_load")?,
            full_flush: overrides(py, b, "on_full_flush")?,
            frame_alloc: overrides(py, b, "on_frame_alloc")?,
            frame_free: overrides(py, b, "on_frame_free")?,
            range_unmapped: overrides(py, b, "on_range_unmapped")?,
        };
        let class: Arc<str> = b.get_type().name()?.to_string().into();
        Ok(PyPolicy { obj, class, wants_holders, tick, has, error, failed: false, last_request: None, watch })
    }

    /// Call `name(*args)` on the object with the GIL; keep the first exception.
    fn call<T>(
        &mut self,
        name: &str,
        args: impl FnOnce(Python<'_>) -> PyResult<Bound<'_, PyTuple>>,
        parse: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>,
    ) -> Option<T> {
        self.call_fx(name, args, parse, None)
    }

    /// `call`, then, for a class that holds unmapped ranges back, the ranges its hook
    /// released (`Policy.release_range`) as effects.
    fn call_fx<T>(
        &mut self,
        name: &str,
        args: impl FnOnce(Python<'_>) -> PyResult<Bound<'_, PyTuple>>,
        parse: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>,
        fx: Option<&mut Effects>,
    ) -> Option<T> {
        if self.failed {
            return None;
        }
        let obj = &self.obj;
        let collect = self.has.range_unmapped;
        let watch = self.watch.as_deref();
        let r = Python::attach(|py| -> PyResult<T> {
            let a = args(py)?;
            if let Some(w) = watch {
                w.started.store(w.epoch.elapsed().as_nanos() as u64 + 1, Ordering::Release);
            }
            let out = obj.bind(py).call_method1(name, a);
            if let Some(w) = watch {
                w.started.store(0, Ordering::Release);
            }
            let out = out?;
            let parsed = parse(&out)?;
            if let (true, Some(fx)) = (collect, fx) {
                let released: Vec<(u32, u64, u64)> = obj.bind(py).call_method0("_take_releases")?.extract()?;
                fx.extend(released.into_iter().map(|(mm, start, end)| Effect::ReleaseRange { mm, start, end }));
            }
            Ok(parsed)
        });
        match r {
            Ok(v) => Some(v),
            Err(mut e) => {
                self.failed = true;
                if let Some(w) = self.watch.as_deref().filter(|w| w.fired.load(Ordering::Relaxed)) {
                    let hook = name.trim_start_matches('_');
                    let cause = e;
                    e = Python::attach(|py| {
                        let err = pyo3::exceptions::PyTimeoutError::new_err(format!(
                            "{}.{hook} ran longer than its time limit ({} s, the class's hook_time_limit): the run is stopped, and no stats are kept",
                            self.class,
                            w.limit.as_secs_f64()
                        ));
                        err.set_cause(py, Some(cause));
                        err
                    });
                }
                let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
                if slot.is_none() {
                    *slot = Some(e);
                }
                None
            }
        }
    }
}

/// What a frame hook returned: the frame's new technique word, or None to keep it. Anything
/// else is an error naming the hook and what it must return (not pyo3's conversion error).
fn frame_word(out: &Bound<'_, PyAny>, class: &str, hook: &str) -> PyResult<Option<u64>> {
    out.extract::<Option<u64>>().map_err(|_| {
        let shown = out.repr().map(|r| r.to_string()).unwrap_or_else(|_| "a value".to_owned());
        pyo3::exceptions::PyTypeError::new_err(format!(
            "{class}.{hook} returned {shown}: it must return the frame's new technique word (an integer from 0 to 2**64 - 1) or None to keep it"
        ))
    })
}

/// The request as a Python tuple, reusing the one built for the same request.
fn cached_request<'py>(py: Python<'py>, cache: &mut Option<(usize, u64, u32, Py<PyTuple>)>, req: &FlushRequest) -> PyResult<Bound<'py, PyTuple>> {
    let key = (req as *const FlushRequest as usize, req.new_gen, req.mm);
    if let Some((a, g, m, t)) = cache.as_ref() {
        if (*a, *g, *m) == key {
            return Ok(t.bind(py).clone());
        }
    }
    let t = request(py, req)?;
    *cache = Some((key.0, key.1, key.2, t.clone().unbind()));
    Ok(t)
}

fn request<'py>(py: Python<'py>, req: &FlushRequest) -> PyResult<Bound<'py, PyTuple>> {
    let pages: Vec<u64> = req.pages.iter().map(|v| v.0).collect();
    let frames: Vec<u64> = req.frames.iter().map(|f| f.0).collect();
    PyTuple::new(
        py,
        [
            req.initiator.0.into_pyobject(py)?.into_any(),
            req.mm.into_pyobject(py)?.into_any(),
            req.global.into_pyobject(py)?.to_owned().into_any(),
            PyList::new(py, pages)?.into_any(),
            PyList::new(py, req.old_ptes.clone())?.into_any(),
            PyList::new(py, frames)?.into_any(),
            format!("{:?}", req.reason).into_pyobject(py)?.into_any(),
            req.freed_tables.into_pyobject(py)?.to_owned().into_any(),
            req.full.into_pyobject(py)?.to_owned().into_any(),
            req.new_gen.into_pyobject(py)?.into_any(),
            req.page_cache_pages.into_pyobject(py)?.into_any(),
        ],
    )
}

fn core_view<'py>(py: Python<'py>, c: &CoreView) -> PyResult<Bound<'py, PyTuple>> {
    (c.loaded_mm, c.lazy, c.caught_up_gen, c.socket).into_pyobject(py)
}

impl Coherence for PyPolicy {
    fn wants_holders(&self) -> bool {
        self.wants_holders
    }

    fn tick_interval(&self) -> Option<u64> {
        self.tick
    }

    fn failed(&self) -> bool {
        self.failed
    }

    fn plan(&mut self, view: &OsView<'_>, req: &FlushRequest, plan: &mut FlushPlan) {
        if !self.has.plan {
            // The base class's plan is Linux's: the same decision without a Python call.
            tlbsim_core::coherence::linux_targets(view, req, plan);
            plan.delivery = Some(Delivery::Ipi);
            return;
        }
        let mut cache = self.last_request.take();
        let parsed = self.call(
            "_plan",
            |py| {
                let cores: Vec<Bound<'_, PyTuple>> = view.cores.iter().map(|c| core_view(py, c)).collect::<PyResult<_>>()?;
                PyTuple::new(
                    py,
                    [
                        PyList::new(py, cores)?.into_any(),
                        PyList::new(py, view.cpumask.to_vec())?.into_any(),
                        PyList::new(py, view.holders.to_vec())?.into_any(),
                        view.flush_ceiling.into_pyobject(py)?.into_any(),
                        view.now.into_pyobject(py)?.into_any(),
                        cached_request(py, &mut cache, req)?.into_any(),
                    ],
                )
            },
            |out| {
                // (targets, pages_of, delivery kind, latency, initiator_cycles, target_cycles,
                // per-target delivery kinds)
                let (targets, pages_of, kind, latency, initiator_cycles, target_cycles, kinds_of): PlanTuple = out.extract()?;
                let path = |kind: &str| match kind {
                    "ipi" => Ok(Delivery::Ipi),
                    "free" => Ok(Delivery::Free),
                    "deferred" => Ok(Delivery::Deferred),
                    "message" => Ok(Delivery::Message { latency, initiator_cycles, target_cycles }),
                    other => Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "plan: delivery {other:?}: use \"ipi\", \"message\", \"deferred\" or \"free\""
                    ))),
                };
                let delivery = path(&kind)?;
                let delivery_of: Vec<Option<Delivery>> =
                    kinds_of.iter().map(|k| k.as_deref().map(path).transpose()).collect::<PyResult<_>>()?;
                let effective = |i: usize| kinds_of.get(i).cloned().flatten().unwrap_or_else(|| kind.clone());
                let paths: Vec<String> = (0..targets.len()).map(effective).collect();
                if paths.iter().any(|k| k == "ipi") && paths.iter().any(|k| k == "message") {
                    return Err(pyo3::exceptions::PyValueError::new_err(
                        "plan: delivery_of mixes \"ipi\" and \"message\": a request reaches its targets by at most one synchronous path (mix either with \"deferred\" and \"free\")",
                    ));
                }
                Ok((targets, pages_of, delivery, delivery_of))
            },
        );
        self.last_request = cache;
        match parsed {
            Some((targets, pages_of, delivery, delivery_of)) => {
                let cores = view.cores.len() as u32;
                for (i, t) in targets.into_iter().enumerate() {
                    if t >= cores {
                        self.fail(format!("plan: target core {t} does not exist (the machine has {cores})"));
                        return;
                    }
                    match pages_of.get(i).cloned().flatten() {
                        Some(p) => plan.push_pages(CoreId(t), p.into_iter().map(Vpn).collect()),
                        None => plan.push(CoreId(t)),
                    }
                    if let Some(d) = delivery_of.get(i).copied().flatten() {
                        plan.set_last_delivery(d);
                    }
                }
                plan.delivery = Some(delivery);
            }
            None => plan.delivery = Some(Delivery::Free),
        }
    }

    fn on_deliver(&mut self, core: CoreId, me: &CoreView, req: &FlushRequest, flush_ceiling: u32) -> LocalFlush {
        if !self.has.on_deliver {
            return tlbsim_core::coherence::linux_on_deliver(me, req, flush_ceiling);
        }
        let mut cache = self.last_request.take();
        let r = self.call(
            "_on_deliver",
            |py| {
                PyTuple::new(
                    py,
                    [
                        core.0.into_pyobject(py)?.into_any(),
                        core_view(py, me)?.into_any(),
                        cached_request(py, &mut cache, req)?.into_any(),
                        flush_ceiling.into_pyobject(py)?.into_any(),
                    ],
                )
            },
            |out| {
                let s: String = out.extract()?;
                Ok(match s.as_str() {
                    "nothing" => LocalFlush::Nothing,
                    "pages" => LocalFlush::Pages,
                    "full" => LocalFlush::Full,
                    "leave_mask" => LocalFlush::LeaveMask,
                    "drop_lazy_mm" => LocalFlush::DropLazyMm,
                    other => {
                        return Err(pyo3::exceptions::PyValueError::new_err(format!(
                            "on_deliver returned {other:?}: use \"nothing\", \"pages\", \"full\", \"leave_mask\" or \"drop_lazy_mm\""
                        )))
                    }
                })
            },
        );
        self.last_request = cache;
        r.unwrap_or(LocalFlush::Full)
    }

    fn on_switch(&mut self, core: CoreId, slot_gen: Option<u64>, mm_gen: u64) -> bool {
        if !self.has.on_switch {
            return slot_gen != Some(mm_gen);
        }
        self.call("_on_switch", |py| (core.0, slot_gen, mm_gen).into_pyobject(py), |out| out.extract::<bool>()).unwrap_or(true)
    }

    fn on_tick(&mut self, core: CoreId, now: u64, fx: &mut Effects) {
        if self.has.tick {
            self.call_fx("on_tick", |py| (core.0, now).into_pyobject(py), |_| Ok(()), Some(fx));
        }
    }

    fn on_cr3_load(&mut self, core: CoreId, load: &Cr3Load, fx: &mut Effects) {
        if self.has.cr3 {
            self.call_fx("on_cr3_load", |py| (core.0, load.from, load.to, load.tag, load.kept_entries).into_pyobject(py), |_| Ok(()), Some(fx));
        }
    }

    fn on_full_flush(&mut self, core: CoreId, mm: Option<u32>, cause: FullFlushCause, fx: &mut Effects) {
        if self.has.full_flush {
            let cause = format!("{cause:?}");
            self.call_fx("on_full_flush", |py| (core.0, mm, cause).into_pyobject(py), |_| Ok(()), Some(fx));
        }
    }

    fn on_range_unmapped(&mut self, core: CoreId, mm: u32, start: u64, end: u64, fx: &mut Effects) -> bool {
        if !self.has.range_unmapped {
            return false;
        }
        let class = self.class.clone();
        self.call_fx(
            "on_range_unmapped",
            |py| (core.0, mm, start, end).into_pyobject(py),
            |out| {
                out.extract::<bool>().map_err(|_| {
                    let shown = out.repr().map(|r| r.to_string()).unwrap_or_else(|_| "a value".to_owned());
                    pyo3::exceptions::PyTypeError::new_err(format!(
                        "{class}.on_range_unmapped returned {shown}: it must return True (hold the range back until release_range) or False"
                    ))
                })
            },
            Some(fx),
        )
        .unwrap_or(false)
    }

    fn on_frame_alloc(&mut self, core: CoreId, pfn: Pfn, technique_word: &mut u64, usage: FrameUse, fx: &mut Effects) {
        if self.has.frame_alloc {
            let (word, class) = (*technique_word, self.class.clone());
            if let Some(Some(w)) = self.call_fx(
                "on_frame_alloc",
                |py| (core.0, pfn.0, word, usage.mm, usage.file).into_pyobject(py),
                |out| frame_word(out, &class, "on_frame_alloc"),
                Some(fx),
            ) {
                *technique_word = w;
            }
        }
    }

    fn on_frame_free(&mut self, core: CoreId, pfn: Pfn, technique_word: &mut u64, fx: &mut Effects) {
        if self.has.frame_free {
            let (word, class) = (*technique_word, self.class.clone());
            if let Some(Some(w)) =
                self.call_fx("on_frame_free", |py| (core.0, pfn.0, word).into_pyobject(py), |out| frame_word(out, &class, "on_frame_free"), Some(fx))
            {
                *technique_word = w;
            }
        }
    }

    fn stats_json(&self) -> serde_json::Value {
        if self.failed {
            return serde_json::json!({});
        }
        let obj = &self.obj;
        Python::attach(|py| -> PyResult<serde_json::Value> {
            let s = obj.bind(py).call_method0("_stats_json")?;
            let text: String = s.extract()?;
            serde_json::from_str(&text).map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("{}.stats: not JSON: {e}", self.class)))
        })
        .unwrap_or_else(|e| {
            // Not swallowed: the binding raises it once the run returns (no stats are written).
            let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some(e);
            }
            serde_json::json!({})
        })
    }
}

impl PyPolicy {
    /// A stand-in for a policy whose construction raised (the run stops at once).
    pub fn broken(py: Python<'_>, error: ErrorSlot) -> PyPolicy {
        PyPolicy {
            obj: py.None(),
            class: "".into(),
            wants_holders: false,
            tick: None,
            has: Hooks::default(),
            error,
            failed: true,
            last_request: None,
            watch: None,
        }
    }

    /// The run is about to start on a machine of `cores` cores: `Policy.machine_cores`.
    pub fn start(&mut self, cores: u32) {
        if self.failed {
            return;
        }
        let obj = &self.obj;
        if let Err(e) = Python::attach(|py| obj.bind(py).setattr("machine_cores", cores)) {
            self.failed = true;
            let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some(e);
            }
        }
    }

    fn fail(&mut self, message: String) {
        self.failed = true;
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(pyo3::exceptions::PyValueError::new_err(message));
        }
    }
}

/// What a Python policy's `plan` hook returns: (targets, pages per target, delivery kind,
/// latency, initiator cycles, target cycles).
type PlanTuple = (Vec<u32>, Vec<Option<Vec<u64>>>, String, u64, u64, u64, Vec<Option<String>>);
