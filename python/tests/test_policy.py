"""tlbsim.policy: coherence policies written in Python."""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tlbsim
from tlbsim.policy import Plan, Policy, Request, View

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "policies"))

from flush_every_core import FlushEveryCore
from lazy_munmap import LazyMunmap, LazyMunmapEarlyReuse, MixedLazyMunmap
from skip_idle_cores import SkipIdleCores
from skip_lazy_on_table_free import SkipLazyOnTableFree

WORKLOADS: list[dict[str, Any]] = [
    {"kind": "apache", "threads": 4, "ops": 150},
    {"kind": "fpr-munmap", "threads": 3, "ops": 200, "case": 5},
    {"kind": "stm-mprotect", "threads": 4, "ops": 150},
    {"kind": "vmscale", "test": "cow-seq", "threads": 3},
]


def _config(workload: dict[str, Any], tagging: str = "pcid") -> dict[str, Any]:
    return {
        "machine": {"preset": "host", "sockets": 2, "cores_per_socket": 2, "tlb": {"tagging": tagging}},
        "workload": workload,
    }


class PyLinux(Policy):
    """Linux's protocol, every decision taken in Python (the base class's code)."""

    def plan(self, view: View, request: Request) -> Plan | list[int]:
        return super().plan(view, request)

    def on_deliver(self, core: int, me: Any, request: Request) -> str:
        return super().on_deliver(core, me, request)

    def on_switch(self, core: int, slot_gen: int | None, mm_gen: int) -> bool:
        return super().on_switch(core, slot_gen, mm_gen)


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w["kind"])
@pytest.mark.parametrize("tagging", ["pcid", "none"])
def test_linux_in_python_gives_the_built_in_linux_stats(workload: dict[str, Any], tagging: str) -> None:
    cfg = _config(workload, tagging)
    builtin = tlbsim.run(cfg).stats
    python = tlbsim.run(cfg, policy=PyLinux()).stats
    assert python["run"].pop("coherence").endswith(":PyLinux")
    builtin["run"].pop("coherence")
    assert python == builtin


def test_the_examples_what_fuzz_says() -> None:
    assert tlbsim.fuzz(FlushEveryCore, scenarios=150, seed=4).clean
    wrong = tlbsim.fuzz(SkipIdleCores, scenarios=150, seed=4)
    assert not wrong.clean
    assert wrong.first_failure is not None
    assert "skip_idle_cores:SkipIdleCores" in wrong.first_failure["command"]
    # Linux without its freed-tables rule: only the speculative-walk rule sees it.
    lazy = tlbsim.fuzz(SkipLazyOnTableFree, scenarios=150, seed=4)
    assert not lazy.clean and lazy.violations_consistency == 0
    assert lazy.first_failure is not None
    assert any(v.get("freed_table") for v in lazy.first_failure["violations"])


def test_plans_with_pages_and_delivery_paths_and_optional_hooks() -> None:
    class Recorder(Policy):
        tick_interval = 100_000

        def __init__(self) -> None:
            self.requests: list[Request] = []
            self.ticks = 0
            self.switches = 0
            self.allocs = 0

        def plan(self, view: View, request: Request) -> Plan:
            self.requests.append(request)
            base = super().plan(view, request)
            assert isinstance(base, Plan)
            # Reach each target for the request's first page only, by hardware message.
            return Plan(
                targets=base.targets,
                pages_of={t: request.pages[:1] for t in base.targets},
                delivery="message",
                latency=120,
                initiator_cycles=30,
                target_cycles=40,
            )

        def on_deliver(self, core: int, me: Any, request: Request) -> str:
            return "full"

        def on_tick(self, core: int, now: int) -> None:
            self.ticks += 1

        def on_cr3_load(self, core: int, from_mm: int | None, to_mm: int, tag: int, kept: bool) -> None:
            self.switches += 1

        def on_frame_alloc(self, core: int, pfn: int, word: int, mm: int, file: bool) -> int | None:
            self.allocs += 1
            return 7

        def stats(self) -> dict[str, Any]:
            return {"requests": len(self.requests), "ticks": self.ticks}

    p = Recorder()
    s = tlbsim.run(_config(WORKLOADS[0]), policy=p).stats
    t = s["totals"]
    assert t["shootdown_ipis_received"] == 0 and t["shootdown_messages_received"] > 0
    assert t["violations_security"] == 0 and t["violations_consistency"] == 0
    assert p.ticks > 0 and p.switches > 0 and p.allocs > 0
    assert t["coherence"] == {"requests": len(p.requests), "ticks": p.ticks}
    req = p.requests[0]
    assert req.pages and len(req.old_ptes) == len(req.pages) and req.reason in {"Munmap", "CopyOnWrite", "Fork"}


def test_per_access_hooks_are_refused_by_name() -> None:
    with pytest.raises(TypeError, match="on_tlb_insert"):

        class Bad(Policy):
            def on_tlb_insert(self, *args: Any) -> None:
                pass


def test_an_exception_in_a_hook_stops_the_run_with_its_traceback() -> None:
    class Broken(Policy):
        def plan(self, view: View, request: Request) -> list[int]:
            raise KeyError("deliberately broken plan")

    with pytest.raises(KeyError, match="deliberately broken plan") as err:
        tlbsim.run(_config(WORKLOADS[0]), policy=Broken())
    assert any(frame.name == "plan" for frame in err.traceback)

    class BadAnswer(Policy):
        def on_deliver(self, core: int, me: Any, request: Request) -> str:
            return "flush everything please"

    with pytest.raises(ValueError, match="on_deliver returned"):
        tlbsim.run(_config(WORKLOADS[0]), policy=BadAnswer())
    with pytest.raises(tlbsim.ConfigError, match="workload.kind"):
        tlbsim.run({"workload": {"kind": "synthetic"}}, policy=PyLinux())


def test_a_hook_returning_the_wrong_thing_names_the_hook_and_what_it_must_return() -> None:
    """Issue 49 item 7: a forgotten `return` (None) or a wrong type is an error naming the
    hook and what it must return, not pyo3's or Python's generic TypeError."""

    class NoPlan(Policy):
        def plan(self, view: View, request: Request) -> Plan | list[int]:
            return None  # type: ignore[return-value]

    class FloatTargets(Policy):
        def plan(self, view: View, request: Request) -> Plan | list[int]:
            return [1.5]  # type: ignore[list-item]

    class NoDeliver(Policy):
        def on_deliver(self, core: int, me: Any, request: Request) -> Any:
            return None

    class NoSwitch(Policy):
        def on_switch(self, core: int, slot_gen: int | None, mm_gen: int) -> Any:
            return None

    class BadWord(Policy):
        def on_frame_alloc(self, core: int, pfn: int, word: int, mm: int, file: bool) -> Any:
            return "word"

    class ListStats(Policy):
        def stats(self) -> Any:
            return [1, 2]

    class HoldMaybe(Policy):
        def on_range_unmapped(self, core: int, mm: int, start: int, end: int) -> Any:
            return None

    cases: list[tuple[Policy, str]] = [
        (NoPlan(), "NoPlan.plan returned None: it must return a list of target cores (integers) or a tlbsim.Plan"),
        (FloatTargets(), "FloatTargets.plan returned [1.5]: it must return a list of target cores"),
        (NoDeliver(), 'NoDeliver.on_deliver returned None: it must return one of the strings "nothing", "pages"'),
        (NoSwitch(), "NoSwitch.on_switch returned None: it must return True (flush the kept entries) or False"),
        (BadWord(), "BadWord.on_frame_alloc returned 'word': it must return the frame's new technique word"),
        (ListStats(), "ListStats.stats returned [1, 2]: it must return a dict"),
    ]
    for policy, says in cases:
        with pytest.raises(TypeError) as err:
            # 8 threads on 4 cores: time slices switch threads, so on_switch is called
            # whether or not the mmap_lock's waiters sleep.
            tlbsim.run(_config({"kind": "stm-mprotect", "threads": 8, "ops": 50}, tagging="pcid"), policy=policy)
        assert says in str(err.value), str(err.value)
    with pytest.raises(TypeError, match="HoldMaybe.on_range_unmapped returned None: it must return True"):
        tlbsim.run(_config({"kind": "apache", "threads": 4, "ops": 20}), policy=HoldMaybe())


def test_a_sweep_with_a_python_policy(tmp_path: Path) -> None:
    spec = {
        "base": _config({"kind": "apache", "ops": 50}),
        "policy": "flush_every_core:FlushEveryCore",
        "grid": {"workload.threads": [2, 4]},
    }
    summary = tlbsim.sweep(spec, tmp_path / "out", jobs=2)
    assert summary.total == 2 and summary.ran == 2
    for run in (tmp_path / "out" / "runs").iterdir():
        stats = json.loads((run / "stats.json").read_text())
        assert stats["run"]["coherence"] == "flush_every_core:FlushEveryCore"
    # A different policy is a different run.
    spec["policy"] = "skip_idle_cores:SkipIdleCores"
    assert tlbsim.sweep(spec, tmp_path / "out", jobs=2).ran == 2
    with pytest.raises(tlbsim.SpecError, match="policy"):
        tlbsim.sweep({"policy": "no_such_module:X"}, tmp_path / "bad")


class LatrFastTick(LazyMunmap):
    tick_interval = 100_000


@pytest.mark.parametrize("workload", WORKLOADS[:3], ids=lambda w: w["kind"])
def test_latr_written_in_python_gives_the_built_in_latr_stats(workload: dict[str, Any]) -> None:
    """examples/policies/lazy_munmap.py decides in Python what coherence/latr.rs decides in
    Rust: deferred munmaps, unmapped ranges held back until every core swept twice. With a
    tick short enough that ranges are released during the run, every statistic but the
    policy's own is the same."""
    cfg = _config(workload | {"ops": 300})
    builtin = tlbsim.run(cfg | {"os": {"coherence": "latr"}, "coherence": {"latr": {"tick_interval": 100_000}}}).stats
    p = LatrFastTick()
    python = tlbsim.run(cfg, policy=p).stats
    assert p.machine_cores == 4
    theirs, ours = builtin["totals"].pop("coherence"), python["totals"].pop("coherence")
    builtin["run"].pop("coherence"), python["run"].pop("coherence")
    assert python == builtin
    assert ours == {k: theirs[k] for k in ours}
    if workload["kind"] != "stm-mprotect":  # mprotect is never lazy
        assert theirs["lazy_requests"] > 0 and theirs["ranges_released"] > 0


def test_python_latr_passes_fuzz_and_its_early_reuse_is_caught() -> None:
    assert tlbsim.fuzz(LazyMunmap, scenarios=150, seed=4).clean
    assert tlbsim.fuzz(MixedLazyMunmap, scenarios=150, seed=4).clean
    early = tlbsim.fuzz(LazyMunmapEarlyReuse, scenarios=150, seed=4)
    assert not early.clean and early.violations_security + early.violations_consistency > 0


def test_a_plan_mixes_delivery_paths_per_target() -> None:
    """IPIs to the cores running the address space, deferred to the rest: the initiator
    waits for the IPIs only, and the freed memory waits for every target."""
    cfg = _config({"kind": "fpr-munmap", "threads": 3, "ops": 200, "case": 1})
    mixed = tlbsim.run(cfg, policy=MixedLazyMunmap()).stats["totals"]
    lazy = tlbsim.run(cfg, policy=LazyMunmap()).stats["totals"]
    assert mixed["shootdown_ipis_received"] > 0 and mixed["shootdowns_deferred_received"] > 0
    assert lazy["shootdown_ipis_received"] == 0
    assert mixed["shootdown_cycles_initiator_wait"] > lazy["shootdown_cycles_initiator_wait"] == 0
    assert mixed["violations_security"] == mixed["violations_consistency"] == 0

    class IpiAndMessage(Policy):
        def plan(self, view: View, request: Request) -> Plan:
            targets = [c for c in range(len(view.cores)) if c != request.initiator]
            return Plan(targets=targets, delivery="ipi", delivery_of={targets[0]: "message"})

    with pytest.raises(ValueError, match='mixes "ipi" and "message"'):
        tlbsim.run(cfg, policy=IpiAndMessage())


def test_the_policy_is_a_swept_key_of_built_in_and_python_policies(tmp_path: Path) -> None:
    spec: dict[str, Any] = {
        "base": _config({"kind": "fpr-munmap", "threads": 3, "ops": 100, "case": 1}),
        "grid": {"policy": ["linux", "latr", "lazy_munmap:LazyMunmap"]},
    }
    summary = tlbsim.sweep(spec, tmp_path / "out", jobs=2)
    assert summary.total == 3 and summary.ran == 3
    by_policy = {}
    for run in (tmp_path / "out" / "runs").iterdir():
        params = json.loads((run / "params.json").read_text())
        by_policy[params["policy"]] = json.loads((run / "stats.json").read_text())
    assert {p: s["run"]["coherence"] for p, s in by_policy.items()} == {
        "linux": "linux",
        "latr": "latr",
        "lazy_munmap:LazyMunmap": "lazy_munmap:LazyMunmap",
    }
    ipis = {p: s["totals"]["shootdown_ipis_received"] for p, s in by_policy.items()}
    assert ipis["linux"] > 0 and ipis["latr"] == ipis["lazy_munmap:LazyMunmap"] == 0
    assert tlbsim.sweep(spec, tmp_path / "out", jobs=2).ran == 0  # resumes
    for bad, says in [
        (spec | {"policy": "flush_every_core:FlushEveryCore"}, "top-level policy"),
        ({**spec, "grid": {"policy": ["linux"], "os.coherence": ["oracle"]}}, 'swept here and as "os.coherence"'),
        ({**spec, "grid": {"policy": ["linux", "no_such_module:X"]}}, 'grid."policy"'),
        ({**spec, "grid": {"policy": ["linux", "no-such-policy"]}}, 'grid."policy"'),
    ]:
        with pytest.raises(tlbsim.SpecError, match=says):
            tlbsim.sweep(bad, tmp_path / "bad")


# ------------------------------------------------- issue 51 item 5: a policy cannot break it

HOOKS: dict[str, int] = {
    # hook name → its number of arguments after self
    "plan": 2,
    "on_deliver": 3,
    "on_switch": 3,
    "on_tick": 2,
    "on_cr3_load": 5,
    "on_full_flush": 3,
    "on_frame_alloc": 5,
    "on_frame_free": 3,
    "on_range_unmapped": 4,
    "stats": 0,
}


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    """Anything a buggy hook might return: right and wrong types, in and out of range."""
    pick = rng.randrange(16 if depth == 0 else 12)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice([True, False])
    if pick == 2:
        return rng.choice([0, 1, 2, 3, -1, -(2**63), 2**32, 2**64 - 1, 2**64, 2**200])
    if pick == 3:
        return rng.choice([0.0, 1.5, float("nan"), float("inf"), -2.0])
    if pick == 4:
        return rng.choice(["nothing", "pages", "full", "leave_mask", "drop_lazy_mm", "ipi", "", "x" * 200, "\x00"])
    if pick == 5:
        return [rng.choice([0, 1, 2, 3, 4, -1, 1000, 2**40]) for _ in range(rng.randrange(6))]
    if pick == 6:
        return {rng.choice(["a", 0, 1]): rng.choice([1, "b", None])}
    if pick == 7:
        return (1, 2)
    if pick == 8:
        return object()
    if pick == 9:
        return b"pages"
    if pick == 10:
        return [None, "1", 1.0][: rng.randrange(4)]
    if pick == 11:
        return {rng.randrange(4)}
    # A Plan with random fields (some valid, some not)
    targets = [rng.choice([0, 1, 2, 3, 4, -1, 7, 2**33]) for _ in range(rng.randrange(4))]
    return Plan(
        targets=targets,
        pages_of={t: [rng.choice([0, 1, 2**36, -5])] for t in targets if rng.random() < 0.3},
        delivery=rng.choice(["ipi", "message", "deferred", "free", "carrier pigeon"]),  # type: ignore[arg-type]
        latency=rng.choice([0, 100, -1, 2**64]),
        initiator_cycles=rng.choice([0, 10]),
        target_cycles=rng.choice([0, 10, 1.5]),  # type: ignore[arg-type]
        delivery_of={t: rng.choice(["ipi", "free", "deferred", "bogus"]) for t in targets if rng.random() < 0.3},  # type: ignore[misc]
    )


def _policy_returning(hook: str, values: list[Any]) -> Policy:
    """A policy whose ``hook`` returns ``values`` in turn (then the last one forever)."""
    it = iter(values)
    last: list[Any] = [values[-1]]

    def method(self: Policy, *args: Any) -> Any:
        last[0] = next(it, last[0])
        return last[0]

    attrs: dict[str, Any] = {hook: method}
    if hook == "on_tick":
        attrs["tick_interval"] = 20000
    cls = type(f"Random_{hook}", (Policy,), attrs)
    return cls()  # type: ignore[no-any-return]


@pytest.mark.parametrize("seed", range(int(os.environ.get("TLBSIM_POLICY_CASES", "24"))))
def test_random_hook_returns_never_break_the_engine(seed: int) -> None:
    """Whatever a hook returns, the run either finishes or stops with a Python exception
    naming the hook: no panic, no SimulationError, no crash, no stats from a failed run."""
    rng = random.Random(seed)
    hook = list(HOOKS)[seed % len(HOOKS)]
    values = [_random_value(rng) for _ in range(rng.randrange(1, 4))]
    policy = _policy_returning(hook, values)
    workload = (
        {"kind": "stm-mprotect", "threads": 6, "ops": 30} if seed % 2 else {"kind": "apache", "threads": 4, "ops": 20}
    )
    try:
        stats = tlbsim.run(_config(workload), policy=policy)
    except (TypeError, ValueError, OverflowError) as err:
        assert hook in str(err), f"{hook} returned {values!r}: {type(err).__name__}: {err}"
        return
    except BaseException as err:  # noqa: BLE001 - a PanicException is a BaseException
        pytest.fail(f"{hook} returned {values!r}: {type(err).__module__}.{type(err).__name__}: {err}")
    assert stats.stats["run"].get("partial") is not True


def test_a_hook_that_takes_too_long_is_stopped_naming_it() -> None:
    class Slow(Policy):
        hook_time_limit = 0.3

        def plan(self, view: View, request: Request) -> Plan | list[int]:
            end = time.monotonic() + 30
            while time.monotonic() < end:
                pass
            return []

    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"Slow\.plan ran longer than its time limit \(0\.3 s"):
        tlbsim.run(_config(WORKLOADS[0]), policy=Slow())
    assert time.monotonic() - started < 20
    # The limit does not outlive the run: the next Python code on this thread runs normally.
    time.sleep(0.5)
    assert sum(range(10**6)) > 0

    class Bad(Policy):
        hook_time_limit = -1  # type: ignore[assignment]

    with pytest.raises(ValueError, match=r"Bad\.hook_time_limit is -1"):
        tlbsim.run(_config(WORKLOADS[0]), policy=Bad())


def test_out_of_range_targets_and_pages_name_the_hook() -> None:
    class NegativeCore(Policy):
        def plan(self, view: View, request: Request) -> Plan | list[int]:
            return [-1]

    class NoSuchCore(Policy):
        def plan(self, view: View, request: Request) -> Plan | list[int]:
            return [len(view.cores)]

    class ForeignPage(Policy):
        def plan(self, view: View, request: Request) -> Plan | list[int]:
            t = [c for c in range(len(view.cores)) if c != request.initiator]
            return Plan(targets=t, pages_of={c: [2**40 + 7] for c in t})

    for policy, says in [
        (NegativeCore(), "NegativeCore.plan returned target core -1: the machine's cores are 0 to 3"),
        (NoSuchCore(), "NoSuchCore.plan returned target core 4"),
        (ForeignPage(), "ForeignPage.plan: pages_of[0] has page 0x10000000007, not one of the request's pages"),
    ]:
        with pytest.raises(ValueError) as err:
            tlbsim.run(_config(WORKLOADS[0]), policy=policy)
        assert says in str(err.value), str(err.value)


def test_a_failing_policy_run_in_a_sweep_leaves_no_stats(tmp_path: Path) -> None:
    """A run whose hook fails is not counted as finished: no stats.json for it, and a
    resumed sweep runs it again."""
    (tmp_path / "broken_policy.py").write_text(
        "import tlbsim\n"
        "class Broken(tlbsim.Policy):\n"
        "    def plan(self, view, request):\n"
        "        raise RuntimeError('deliberately broken')\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        spec = {"base": _config(WORKLOADS[0]), "grid": {"policy": ["linux", "broken_policy:Broken"]}}
        with pytest.raises(RuntimeError, match="deliberately broken"):
            tlbsim.sweep(spec, tmp_path / "out", jobs=1)
        finished = list((tmp_path / "out" / "runs").glob("*/stats.json"))
        assert len(finished) <= 1
        for f in finished:
            assert json.loads((f.parent / "params.json").read_text())["policy"] == "linux"
        with pytest.raises(RuntimeError, match="deliberately broken"):
            tlbsim.sweep(spec, tmp_path / "out", jobs=1)  # not skipped: it runs (and fails) again
    finally:
        sys.path.remove(str(tmp_path))
