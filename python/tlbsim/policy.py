"""TLB-coherence policies written in Python: subclass :class:`Policy`.

A policy decides *who is flushed, how and when* after a page-table change. The decisions
are taken once per flush request, per target, per context switch (and, if you ask, per
timer tick or frame allocation), never per memory access, so a policy written here runs
at close to the built-in policies' speed::

    import tlbsim

    class EveryCore(tlbsim.Policy):
        '''Flush every other core of the machine, always (safe, wasteful).'''
        def plan(self, view, request):
            return [c for c in range(len(view.cores)) if c != request.initiator]

    tlbsim.run(config, policy=EveryCore())
    tlbsim.fuzz(policy=EveryCore, scenarios=500)   # is it ever stale?

The base class *is* Linux's protocol, written in Python (arch/x86/mm/tlb.c,
docs/LINUX_BASELINE.md): override what you change (a decision you do not override is taken
by the simulator's own copy of the same code, without a call into Python, so it costs
nothing). Hooks and what they receive:

- ``plan(view, request)``: targets, as a list of cores, or a :class:`Plan` (per-target
  page subsets, and a delivery path: ``"ipi"``, ``"message"`` (a hardware invalidation with
  ``latency``, ``initiator_cycles``, ``target_cycles``), ``"deferred"`` (applied at the
  target's next tick or context switch; the initiator does not wait; what the request
  frees is released once every target applied it), or ``"free"``; ``Plan.delivery_of``
  gives targets paths of their own);
- ``on_deliver(core, me, request)``: what a reached core does: ``"nothing"``, ``"pages"``,
  ``"full"``, ``"leave_mask"``, ``"drop_lazy_mm"``;
- ``on_switch(core, slot_gen, mm_gen)``: whether loading an address space whose tag kept
  entries (last caught up at ``slot_gen``, None if the tag held another) must flush them;
- optional: ``on_tick(core, now)`` (every ``tick_interval`` cycles), ``on_cr3_load(core,
  from_mm, to_mm, tag, kept_entries)``, ``on_full_flush(core, mm, cause)``,
  ``on_frame_alloc(core, pfn, word, mm, file)`` and ``on_frame_free(core, pfn, word)`` (return
  a new 64-bit ``technique_word`` for the frame, or None), ``stats()`` (a dict written to
  stats.json ``totals.coherence``);
- optional: ``on_range_unmapped(core, mm, start, end)``: return True to hold an unmapped
  virtual range back (mmap will not hand it out again) until a hook calls
  ``self.release_range(mm, start, end)`` — what LATR does until every core has swept
  (``examples/policies/lazy_munmap.py``).

Per-access hooks (TLB inserts and evictions, the walker's A-bit sets) exist only for
policies written in Rust (``crates/tlbsim-core/src/coherence/``, docs/NEW_POLICY.md): a
Python class that defines ``on_tlb_insert``, ``on_tlb_evict`` or ``on_accessed_set`` is
refused with an error naming them. An exception raised in a hook stops the run and is
raised from ``tlbsim.run`` with its traceback; so does a return value of the wrong type or
out of range (a target core the machine does not have, a ``pages_of`` page not among the
request's), named by its hook, and a hook that runs longer than the class's
``hook_time_limit`` (60 s by default) is stopped with a ``TimeoutError`` naming it. A run
stopped so gives no stats (a sweep does not count it as finished).
"""

from __future__ import annotations

import json
import operator
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NamedTuple

DeliveryName = Literal["ipi", "message", "deferred", "free"]
LocalFlushName = Literal["nothing", "pages", "full", "leave_mask", "drop_lazy_mm"]

#: Hooks that would run on every memory access: Rust only.
PER_ACCESS_HOOKS = ("on_tlb_insert", "on_tlb_evict", "on_accessed_set")


class CoreView(NamedTuple):
    """A core's kernel state."""

    loaded_mm: int | None
    """Address space whose page table is loaded (None: the kernel's own)."""
    lazy: bool
    """Idle (or a kernel thread) with ``loaded_mm`` borrowed: Linux's lazy TLB mode."""
    caught_up_gen: int
    """``tlb_gen`` of ``loaded_mm`` this core's TLB has caught up with."""
    socket: int


class View(NamedTuple):
    """What a policy may read when planning."""

    cores: list[CoreView]
    cpumask: list[bool]
    """The request's address space's ``mm_cpumask``."""
    holders: list[bool]
    """Per core, whether its TLB holds a translation the request makes stale (only a
    simulator knows; filled only when the class sets ``wants_holders = True``)."""
    flush_ceiling: int
    now: int


class Request(NamedTuple):
    """One flush request: a batch of page-table changes to one address space."""

    initiator: int
    mm: int
    global_: bool
    """Every address space (every core reached flushes everything)."""
    pages: list[int]
    """4 KiB virtual page numbers whose translations changed."""
    old_ptes: list[int]
    """Per page, its PTE before the change (A and D bits as read with the change)."""
    frames: list[int]
    """Frames the change frees once the protocol is over."""
    reason: str
    freed_tables: bool
    full: bool
    new_gen: int
    page_cache_pages: int
    """Of the pages whose old PTE was present, how many mapped a page-cache page (file
    data that lives on after the unmap; the rest are anonymous)."""


@dataclass
class Plan:
    """Targets and delivery of a request."""

    targets: list[int] = field(default_factory=list)
    pages_of: dict[int, list[int]] = field(default_factory=dict)
    """Per target, the subset of the request's pages it flushes (default: all)."""
    delivery: DeliveryName = "ipi"
    latency: int = 0
    initiator_cycles: int = 0
    target_cycles: int = 0
    delivery_of: dict[int, DeliveryName] = field(default_factory=dict)
    """Per target, a path of its own instead of ``delivery`` (e.g. IPIs to the cores that
    run the address space, ``"deferred"`` to the rest). At most one synchronous path
    (``"ipi"`` or ``"message"``) per request; the initiator waits for those targets only,
    and what the request frees is released once every target applied it."""


_make_request = Request._make
_make_core = CoreView._make


class Policy:
    """A TLB-coherence policy; this base class is Linux's protocol in Python."""

    #: Fill ``View.holders`` (costs a probe of every TLB per request).
    wants_holders: ClassVar[bool] = False
    #: Cycles between timer ticks (``on_tick``); None: no ticks.
    tick_interval: ClassVar[int | None] = None
    #: Seconds one hook call may take: a hook that runs longer is stopped with a
    #: ``TimeoutError`` naming it (raised inside the hook, at its next Python line, so a hook
    #: blocked in C code stops when that returns). None: no limit.
    hook_time_limit: ClassVar[float | None] = 60.0
    #: Cores of the machine, set by the simulator before the run starts.
    machine_cores: int = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._check_class()

    @classmethod
    def _check_class(cls) -> None:
        bad = [name for name in PER_ACCESS_HOOKS if hasattr(cls, name)]
        if bad:
            raise TypeError(
                f"{cls.__name__} defines {', '.join(bad)}: per-access hooks run on every memory "
                "access and exist only for policies written in Rust (docs/NEW_POLICY.md)"
            )

    def _check(self) -> None:
        type(self)._check_class()

    # ----- The decisions (Linux's, by default) -----

    def plan(self, view: View, request: Request) -> Plan | list[int]:
        """native_flush_tlb_multi + should_flush_tlb: the CPUs of the mask but the
        initiator, skipping lazy CPUs and CPUs running another mm unless page tables are
        freed; a global request reaches every other core. By IPI."""
        targets = []
        for core, c in enumerate(view.cores):
            if core == request.initiator:
                continue
            if request.global_ or (
                view.cpumask[core] and (request.freed_tables or (not c.lazy and c.loaded_mm == request.mm))
            ):
                targets.append(core)
        return Plan(targets=targets, delivery="ipi")

    def on_deliver(self, core: int, me: CoreView, request: Request) -> LocalFlushName:
        """flush_tlb_func: pages when this request is the next generation and small enough,
        else a full flush; nothing when already caught up."""
        if request.global_:
            return "full"
        if me.loaded_mm != request.mm:
            return "leave_mask"
        if me.lazy:
            return "drop_lazy_mm"
        if me.caught_up_gen >= request.new_gen:
            return "nothing"
        if not request.full and me.caught_up_gen + 1 == request.new_gen and len(request.pages) <= self.flush_ceiling:
            return "pages"
        return "full"

    def on_switch(self, core: int, slot_gen: int | None, mm_gen: int) -> bool:
        """switch_mm_irqs_off: reuse a tag without a flush only if it caught up."""
        return slot_gen != mm_gen

    # ----- Optional events (not called unless overridden) -----

    def on_tick(self, core: int, now: int) -> None:
        pass

    def on_cr3_load(self, core: int, from_mm: int | None, to_mm: int, tag: int, kept_entries: bool) -> None:
        pass

    def on_full_flush(self, core: int, mm: int | None, cause: str) -> None:
        pass

    def on_frame_alloc(self, core: int, pfn: int, word: int, mm: int, file: bool) -> int | None:
        return None

    def on_frame_free(self, core: int, pfn: int, word: int) -> int | None:
        return None

    def on_range_unmapped(self, core: int, mm: int, start: int, end: int) -> bool:
        """``[start, end)`` of ``mm`` was unmapped: True holds it back from mmap until
        :meth:`release_range`."""
        return False

    def release_range(self, mm: int, start: int, end: int) -> None:
        """Let mmap reuse ``[start, end)`` of ``mm``, held back by ``on_range_unmapped``
        (takes effect when the hook calling it returns)."""
        # Per instance (a subclass need not call __init__): created on first use.
        self.__dict__.setdefault("_releases", []).append((int(mm), int(start), int(end)))

    def _take_releases(self) -> list[tuple[int, int, int]]:
        out: list[tuple[int, int, int]] = self.__dict__.pop("_releases", [])
        return out

    def stats(self) -> dict[str, Any]:
        """Written to stats.json ``totals.coherence``."""
        return {}

    # ----- Called by the simulator (tuples in, normalized answers out) -----

    flush_ceiling: int = 33
    # The request last seen: on_deliver gets the same one for every target.
    _last_req_tuple: tuple[Any, ...] | None = None
    _last_req: Request | None = None

    def _request(self, req: tuple[Any, ...]) -> Request:
        if req is not self._last_req_tuple:
            self._last_req_tuple = req
            self._last_req = _make_request(req)
        return self._last_req  # type: ignore[return-value]

    def _plan(
        self,
        cores: list[tuple[Any, ...]],
        cpumask: list[bool],
        holders: list[bool],
        ceiling: int,
        now: int,
        req: tuple[Any, ...],
    ) -> tuple[Any, ...]:
        self.flush_ceiling = ceiling
        view = View(list(map(_make_core, cores)), cpumask, holders, ceiling, now)
        returned = out = self.plan(view, self._request(req))
        if not isinstance(out, Plan):
            if isinstance(out, (str, bytes, dict)) or not hasattr(out, "__iter__"):
                raise _wrong_return(self, "plan", out, "a list of target cores (integers) or a tlbsim.Plan")
            out = Plan(targets=list(out))
        try:
            targets = [_core_number(t) for t in out.targets]
        except (TypeError, ValueError):
            raise _wrong_return(
                self, "plan", returned, "a list of target cores (integers) or a tlbsim.Plan whose targets are integers"
            ) from None
        cores_n = len(cores)
        for t in targets:
            if not 0 <= t < cores_n:
                raise ValueError(
                    f"{type(self).__name__}.plan returned target core {t}: the machine's cores are 0 to {cores_n - 1}"
                )
        if not isinstance(out.pages_of, dict) or not isinstance(out.delivery_of, dict):
            raise _wrong_return(
                self, "plan", returned, "a Plan whose pages_of and delivery_of are dicts by target core"
            )
        request_pages = None
        pages_of: list[list[int] | None] = []
        for t in targets:
            subset = out.pages_of.get(t)
            if subset is not None:
                if request_pages is None:
                    request_pages = set(self._request(req).pages)
                try:
                    subset = [operator.index(p) for p in subset]
                except TypeError:
                    raise _wrong_return(
                        self,
                        "plan",
                        returned,
                        "a Plan whose pages_of maps a target to a list of page numbers (integers)",
                    ) from None
                bad = [p for p in subset if p not in request_pages]
                if bad:
                    raise ValueError(
                        f"{type(self).__name__}.plan: pages_of[{t}] has page {bad[0]:#x}, not one of the request's pages"
                    )
            pages_of.append(subset)
        delivery_of = [out.delivery_of.get(t) for t in targets]
        for name in ("latency", "initiator_cycles", "target_cycles"):
            value = getattr(out, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
                raise _wrong_return(
                    self, "plan", returned, f"a Plan whose {name} is a number of cycles (an integer >= 0)"
                )
        if out.delivery not in ("ipi", "message", "deferred", "free") or any(
            d is not None and d not in ("ipi", "message", "deferred", "free") for d in delivery_of
        ):
            raise ValueError(
                f"{type(self).__name__}.plan returned a delivery of {out.delivery!r} (or in delivery_of): "
                'use "ipi", "message", "deferred" or "free"'
            )
        return (targets, pages_of, out.delivery, out.latency, out.initiator_cycles, out.target_cycles, delivery_of)

    def _on_deliver(self, core: int, me: tuple[Any, ...], req: tuple[Any, ...], ceiling: int) -> str:
        self.flush_ceiling = ceiling
        out = self.on_deliver(core, _make_core(me), self._request(req))
        if not isinstance(out, str):
            raise _wrong_return(
                self, "on_deliver", out, 'one of the strings "nothing", "pages", "full", "leave_mask", "drop_lazy_mm"'
            )
        return out

    def _on_switch(self, core: int, slot_gen: int | None, mm_gen: int) -> bool:
        out = self.on_switch(core, slot_gen, mm_gen)
        # bool(None) would read a forgotten return as "keep the entries": refuse it instead.
        if not isinstance(out, bool):
            raise _wrong_return(self, "on_switch", out, "True (flush the kept entries) or False (keep them)")
        return out

    def _stats_json(self) -> str:
        out = self.stats()
        if not isinstance(out, dict):
            raise _wrong_return(self, "stats", out, "a dict (written to stats.json totals.coherence)")
        return json.dumps(out)


def _core_number(t: Any) -> int:
    # operator.index takes Python's and numpy's integers and refuses floats and None.
    return operator.index(t)


def _wrong_return(policy: Policy, hook: str, value: object, must: str) -> TypeError:
    """The error of a hook that returned the wrong thing: which hook, what it returned, and
    what it must return (a forgotten ``return`` gives None)."""
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return TypeError(f"{type(policy).__name__}.{hook} returned {shown}: it must return {must}")


def add_policy_folders(*folders: str | os.PathLike[str]) -> None:
    """Make policy modules in ``folders`` importable (the working directory and a spec's or
    config's folder, as ``tlbsim fuzz``, ``tlbsim run --policy`` and sweeps look for them):
    each is put at the front of ``sys.path`` unless already on it."""
    import sys

    for folder in reversed([os.path.abspath(os.fspath(f)) for f in folders]):
        if folder not in sys.path:
            sys.path.insert(0, folder)


def load_policy(spec: str) -> type[Policy]:
    """The class named ``"module:Class"`` (sweep specs' ``policy`` key)."""
    import importlib

    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"policy {spec!r}: expected 'module:Class'")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise TypeError(f"policy {spec!r} is not a tlbsim.Policy subclass")
    return cls
