"""record/generators.py (`make generators`): its generator runs and per-operation figures,
without the recordings (those are `make recordings`', minutes long and needing root)."""

from __future__ import annotations

import dataclasses
import math

import pytest


def test_every_generator_side_runs_and_counts_its_operations(generators) -> None:
    """Each pairing's generator, shortened (a few operations per thread), runs on the
    comparison's machine; the classes it names complete operations, and the figures are
    per operation."""
    for pairing in generators.pairings():
        for side in pairing.generators:
            workload = dict(side.workload)
            if "ops" in workload:
                workload["ops"] = min(workload["ops"], 12)
            short = dataclasses.replace(side, workload=workload)
            m = generators.generator_side(short, 2)
            assert m["ops"] > 0, side.label
            totals = m["totals"]
            assert m["instructions_per_op"] == pytest.approx(totals["instructions"] / m["ops"]), side.label
            assert m["ipis_per_op"] * m["ops"] == pytest.approx(totals["shootdown_ipis_sent"]), side.label
            assert math.isfinite(m["l1_misses_pki"]) and math.isfinite(m["stlb_misses_pki"]), side.label
            share = m["false_positive_share"]
            assert share is None or 0.0 <= share <= 1.0, side.label


def test_the_table_has_a_row_per_side_and_marks_a_missing_recording(generators, tmp_path) -> None:
    missing = generators.recording_side("apache2-X-k", tmp_path, {}, 2)
    assert "error" in missing and "make recordings" in missing["error"]
    side = generators.Side(
        "mitosis", {"kind": "mitosis-bench", "test": "memcached", "threads": 2, "ops": 10}, ["memcached"]
    )
    ran = generators.generator_side(side, 2)
    text = generators.table([{"name": "p", "unit": "get/set", "sides": [missing, ran]}], 2)
    rows = [line for line in text.splitlines() if line.startswith("| p |")]
    assert len(rows) == 2
    assert "generator mitosis" in rows[1] and "20 × get/set" in rows[1]
