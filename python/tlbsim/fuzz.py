"""``tlbsim fuzz``: prove a TLB-coherence policy safe, or find the scenario that breaks it.

Runs random OS scenarios (threads and processes sharing and unsharing memory; mmap,
munmap, mprotect, madvise, msync, fork with copy-on-write, page and thread migration,
reclaim, THP; every tagging mode) under the named policy with the stale-translation
checker on (crates/tlbsim-core/src/fuzz.rs says what the generator covers). Scenario ``i``
of a run with seed ``S`` is generated from seed ``S + i`` alone, so a failing scenario
replays with ``--seed S+i --scenarios 1``; long runs go in chunks so that a progress bar can
follow them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tlbsim import _tlbsim
from tlbsim.api import override_strings

CHUNK = 50


@dataclass
class FuzzReport:
    """What ``tlbsim fuzz`` found (``to_dict()`` is the ``--json`` object)."""

    policy: str
    scenarios: int = 0
    scenarios_with_violations: int = 0
    violations_security: int = 0
    violations_consistency: int = 0
    shootdowns_sent: int = 0
    seed: int = 1
    first_failure: dict[str, Any] | None = None
    tagging: str | None = None
    overrides: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return self.scenarios_with_violations == 0

    def to_dict(self) -> dict[str, Any]:
        failure = self.first_failure
        return {
            "policy": self.policy,
            "tagging": self.tagging or "every mode",
            "scenarios": self.scenarios,
            "scenarios_with_violations": self.scenarios_with_violations,
            "violations_security": self.violations_security,
            "violations_consistency": self.violations_consistency,
            "shootdowns_sent": self.shootdowns_sent,
            "seed": self.seed,
            "first_failure": failure,
            "first_failing_seed": failure["seed"] if failure else None,
            "replay": failure["command"] if failure else None,
        }


def tagging_modes() -> list[str]:
    """The tagging modes a scenario may use (``--tagging``)."""
    return list(_tlbsim.tagging_modes())


def fuzz(
    policy: Any = "linux",
    *,
    scenarios: int = 1000,
    seed: int = 1,
    tagging: str | None = None,
    overrides: Mapping[str, object] | Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FuzzReport:
    """Run ``scenarios`` random OS scenarios under ``policy``: a name ``os.coherence``
    accepts, or a policy written in Python (a ``tlbsim.Policy`` subclass, built once per
    scenario, or ``"module:Class"``), with ``tagging`` for all of them (None: each draws
    one) and ``overrides`` (``{"os.thp": True}`` or ``["os.thp=true"]``) applied to each.
    ``progress(done, total)`` is called after each chunk."""
    if scenarios < 0:
        raise ValueError("scenarios must be >= 0")
    sets = override_strings(overrides)
    factory = None
    if isinstance(policy, str) and ":" in policy:
        from tlbsim.policy import load_policy

        factory = load_policy(policy)
    elif not isinstance(policy, str):
        factory = policy
    if factory is None or isinstance(policy, str):
        label = policy
    else:
        label = f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', type(factory).__name__)}"
    report = FuzzReport(policy=label, seed=seed, tagging=tagging, overrides=sets)
    done = 0
    while done < scenarios:
        n = min(CHUNK, scenarios - done)
        if factory is None:
            part = json.loads(_tlbsim.fuzz(policy, tagging, sets, n, seed + done))
        else:
            part = json.loads(_tlbsim.fuzz_policy(factory, label, tagging, sets, n, seed + done))
        report.scenarios += part["scenarios"]
        report.scenarios_with_violations += part["scenarios_with_violations"]
        report.violations_security += part["violations_security"]
        report.violations_consistency += part["violations_consistency"]
        report.shootdowns_sent += part["shootdowns_sent"]
        if report.first_failure is None and part["first_failure"] is not None:
            failure = part["first_failure"]
            failure["scenario"] += done
            report.first_failure = failure
        done += n
        if progress is not None:
            progress(done, scenarios)
    return report
