"""Shared fixtures: a fake stats dict shaped like the core's stats.json."""

from __future__ import annotations

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
