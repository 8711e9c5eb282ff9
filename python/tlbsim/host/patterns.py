"""The shootdown patterns of ``bench/shootdown.c`` as the simulator runs them: the overrides
that select one (``workload.kind = "shootdown-patterns"`` on 1 socket x 2 cores, Linux's
coherence), and a run's stats reduced to what the real kernel measures. Shared by
calibrate's closed-loop fit of the shootdown costs, validate's rows and reproduce linux's
claims, so that the three cannot drift apart.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import tlbsim


def pattern_overrides(name: str, ops: int) -> dict[str, object]:
    return {
        "workload.kind": "shootdown-patterns",
        "workload.pattern": name,
        "workload.ops": ops,
        "os.coherence": "linux",
        "machine.sockets": 1,
        "machine.cores_per_socket": 2,
    }


def pattern_result(stats: Mapping[str, Any]) -> dict[str, Any]:
    """A simulated shootdown pattern's stats.json reduced to what the real kernel measures:
    the measuring thread's (``per_thread[0]``) ``ops_completed`` and ``ops_per_second``,
    ``totals.shootdown_ipis_received`` and ``ipis_per_op`` (None when no operation
    completed). Raises KeyError, IndexError or TypeError when the stats lack them."""
    thread = stats["per_thread"][0]
    done = thread["ops_completed"]
    ipis = stats["totals"]["shootdown_ipis_received"]
    return {
        "ops_completed": done,
        "ops_per_second": float(thread["ops_per_second"]),
        "shootdown_ipis_received": ipis,
        "ipis_per_op": ipis / done if done else None,
    }


def simulate_pattern(preset: str | os.PathLike[str] | Mapping[str, Any], name: str, ops: int) -> dict[str, Any]:
    """IPIs per operation and the measuring thread's operations per second, or
    ``{"error": "simulation failed: ..."}``."""
    try:
        result = tlbsim.run(preset, overrides=pattern_overrides(name, ops))
        return pattern_result(result.stats)
    except (tlbsim.TlbsimError, OSError) as err:
        return {"error": f"simulation failed: {err}"}
    except (KeyError, IndexError, TypeError) as err:
        return {
            "error": f"simulation failed: its stats have no {err} (per_thread, ops_completed, "
            "ops_per_second, totals.shootdown_ipis_received expected)"
        }
