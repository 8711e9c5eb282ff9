"""``tlbsim demo``: the default sweep, its summary table, and the report.

Every built-in workload pattern (random, sequential and strided synthetic streams) at 2, 4
and 8 threads on the built-in host-like machine (this workplace's measured TLB geometry,
8 cores), two seeds. When coherence policies exist, every available one joins the grid.
The sweep resumes: a second ``tlbsim demo`` reuses the finished runs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

DEMO_SPEC: dict[str, Any] = {
    "base": {
        "machine": {"preset": "none", "sockets": 1, "cores_per_socket": 8},
        "workload": {"kind": "synthetic", "accesses": 200_000, "region_bytes": 1 << 20},
    },
    "seeds": [1, 2],
    "grid": {
        "workload.pattern": ["random", "sequential", "strided"],
        "workload.threads": [2, 4, 8],
    },
    # The TLB-size axis of the tag paper's Fig. 7: fully associative L1 DTLBs.
    "zip": {"machine.tlb.l1d.entries": [32, 64, 96], "machine.tlb.l1d.ways": [32, 64, 96]},
}

COLUMNS = (
    ("pattern", "config.workload.pattern", "{}"),
    ("threads", "config.workload.threads", "{}"),
    ("L1D", "config.machine.tlb.l1d.entries", "{}"),
    ("L1 miss/10k", "run.l1_tlb_misses_per_10k_instructions", "{:,.1f}"),
    ("L2 miss/10k", "run.l2_tlb_misses_per_10k_instructions", "{:,.1f}"),
    ("cyc/walk", "cycles_per_walk", "{:,.1f}"),
    ("Mcycles", "mcycles", "{:,.2f}"),
)


def summary(frame: Any) -> str:
    """One line per configuration (mean over seeds)."""
    df = frame.copy()
    df["cycles_per_walk"] = df["stats.walk_cycles"] / df["stats.walks"].where(df["stats.walks"] > 0)
    df["mcycles"] = df["run.makespan_cycles"] / 1e6
    keys = [c for _, c, _ in COLUMNS[:3]]
    values = [c for _, c, _ in COLUMNS[3:]]
    table = df.groupby(keys, sort=True)[values].mean().reset_index()
    rows = [[name for name, _, _ in COLUMNS]]
    for _, r in table.iterrows():
        rows.append([fmt.format(r[col]) for _, col, fmt in COLUMNS])
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows)


def main(out: str | Path = "out/demo", jobs: int | None = None) -> int:
    import tlbsim
    from tlbsim.report import report
    from tlbsim.store import load

    start = time.monotonic()
    out = Path(out)
    print("tlbsim demo: synthetic patterns x threads x L1 DTLB size on the built-in machine\n")
    s = tlbsim.sweep(DEMO_SPEC, out, jobs=jobs, progress=sys.stderr.isatty())
    print(f"{s.total} runs ({s.skipped} reused from an earlier demo, {s.ran} run now)\n")
    frame = load(out)
    print(summary(frame))
    rep = report(out)
    print(f"\nreport: {rep.index}")
    print(f"results: {out / 'runs'} (tlbsim.load({str(out)!r}) gives them as a DataFrame)")
    print(f"took {time.monotonic() - start:.1f} s")
    return 0
