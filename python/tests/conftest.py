"""Shared fixtures: a fake stats dict shaped like the core's stats.json, and the scripts of
record/ loaded as modules."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

COUNTERS = (
    "instructions",
    "accesses",
    "l1_tlb_hits",
    "l1_tlb_misses",
    "l2_tlb_hits",
    "l2_tlb_misses",
    "walks",
    "walk_cycles",
    "pwc_hits",
    "pt_accesses_local",
    "pt_accesses_remote",
    "full_flushes",
    "cycles",
)


def _counters(scale: int) -> dict[str, int]:
    return {name: scale * (i + 1) for i, name in enumerate(COUNTERS)}


@pytest.fixture
def fake_stats() -> dict[str, Any]:
    per_core = [_counters(1), _counters(2)]
    per_core[0]["by_level"] = {"l1": 1}  # not a scalar: must not become a column
    totals = {name: per_core[0][name] + per_core[1][name] for name in COUNTERS}
    return {
        "totals": totals,
        "per_core": per_core,
        "per_structure": {"core0.l1d_4k": {"hits": 1, "misses": 2, "evictions": 0, "invalidations": 0}},
        "version": "0.1.0",
    }


def _record_script(name: str):
    """record/NAME.py, imported as module NAME (it is a script, not part of the package)."""
    path = Path(__file__).resolve().parents[2] / "record" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def recordings():
    """record/recordings.py (`make recordings`)."""
    return _record_script("recordings")


@pytest.fixture(scope="module")
def generators():
    """record/generators.py (`make generators`)."""
    return _record_script("generators")
