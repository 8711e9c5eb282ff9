"""tlbsim.policy: coherence policies written in Python."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import tlbsim
from tlbsim.policy import Plan, Policy, Request, View

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "policies"))

from flush_every_core import FlushEveryCore
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

    cases: list[tuple[Policy, str]] = [
        (NoPlan(), "NoPlan.plan returned None: it must return a list of target cores (integers) or a tlbsim.Plan"),
        (FloatTargets(), "FloatTargets.plan returned [1.5]: it must return a list of target cores"),
        (NoDeliver(), 'NoDeliver.on_deliver returned None: it must return one of the strings "nothing", "pages"'),
        (NoSwitch(), "NoSwitch.on_switch returned None: it must return True (flush the kept entries) or False"),
        (BadWord(), "BadWord.on_frame_alloc returned 'word': it must return the frame's new technique word"),
    ]
    for policy, says in cases:
        with pytest.raises(TypeError) as err:
            # 8 threads on 4 cores: time slices switch threads, so on_switch is called
            # whether or not the mmap_lock's waiters sleep.
            tlbsim.run(_config({"kind": "stm-mprotect", "threads": 8, "ops": 50}, tagging="pcid"), policy=policy)
        assert says in str(err.value), str(err.value)


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
