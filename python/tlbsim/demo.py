"""``tlbsim demo``: the default sweep, its summary table, and the report.

Every coherence policy the simulator has (``tlbsim.coherence_policies()``: ``os.coherence``),
each without and with FPR's page recycling (``os.fpr.enabled``, shown as ``+fpr``; the
fpr-munmap I/O mmaps pass MAP_FPR, the other workloads' mmaps do not, so there it changes
nothing but the address cursor), × three built-in OS-mode workloads × 2, 4, 6 and 8 threads, two seeds, on the ``host``
preset with one socket of 8 cores (the TLB geometry CPUID reports; where a hypervisor
hides it, as on this workplace's guests, the built-in measured defaults):

- ``apache``: web-server workers that mmap, read and munmap a file per request (ABIS
  §5.2, FPR §V-A3);
- ``fpr-munmap`` case 1: N I/O threads looping mmap → access → munmap on a shared file
  (FPR §V-A1, Fig. 7);
- ``stm-mprotect``: software transactional memory protecting pages with mprotect
  (DiDi §II, §IV).

Each thread performs ``OPS`` operations (requests, I/O steps, transactions). The sweep
resumes: a second ``tlbsim demo`` reuses the finished runs. The terminal table shows, per
workload, thread count and policy (means over the seeds): makespan, shootdowns sent,
shootdown IPIs received, false-positive targets, violations the stale-translation checker
found, and throughput (operations per simulated second, summed over the threads).
"""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path
from typing import Any

WORKLOADS = ["apache", "fpr-munmap", "stm-mprotect"]
THREADS = [2, 4, 6, 8]
SEEDS = [1, 2]
OPS = 1000


def demo_spec() -> dict[str, Any]:
    """The demo's sweep spec; the policies are the simulator's own list."""
    import tlbsim

    return {
        "base": {
            "machine": {"preset": "host", "sockets": 1, "cores_per_socket": 8},
            # case: fpr-munmap's case 1 (N I/O threads); the other kinds ignore it
            "workload": {"ops": OPS, "case": 1},
        },
        "seeds": SEEDS,
        "grid": {
            "workload.kind": WORKLOADS,
            "workload.threads": THREADS,
            "os.coherence": tlbsim.coherence_policies(),
            "os.fpr.enabled": [False, True],
        },
    }


COLUMNS = (
    ("workload", "config.workload.kind", "{}"),
    ("threads", "config.workload.threads", "{}"),
    ("policy", "policy", "{}"),
    ("Mcycles", "mcycles", "{:,.2f}"),
    ("shootdowns", "stats.shootdowns_sent", "{:,.0f}"),
    ("IPIs recv", "stats.shootdown_ipis_received", "{:,.0f}"),
    ("false pos", "stats.false_positive_targets", "{:,.0f}"),
    ("violations", "violations", "{:,.0f}"),
    ("kops/s", "kops", "{:,.1f}"),
)
KEYS = 3  # the first three columns identify a row


def summary(frame: Any, threads: Any = None) -> str:
    """One line per workload, thread count and policy (mean over seeds). ``threads``: the
    per-thread table (``load(DIR, table="thread")``), for the throughput column."""
    import pandas as pd

    import tlbsim

    df = frame.copy()
    df["policy"] = df["config.os.coherence"]
    if "config.os.fpr.enabled" in df:
        df.loc[df["config.os.fpr.enabled"].fillna(False).astype(bool), "policy"] += "+fpr"
    df["mcycles"] = df["run.makespan_cycles"] / 1e6
    df["violations"] = df["stats.violations_security"] + df["stats.violations_consistency"]
    if threads is not None and len(threads):
        tput = threads.groupby("run_id")["thread.ops_per_second"].sum() / 1e3
        df["kops"] = df["run_id"].map(tput)
    else:
        df["kops"] = float("nan")
    keys = [c for _, c, _ in COLUMNS[:KEYS]]
    values = [c for _, c, _ in COLUMNS[KEYS:]]
    table = df.groupby(keys, sort=False)[values].mean().reset_index()
    # workloads in the demo's order, then threads, then the policies in the core's order
    kind_rank = {k: i for i, k in enumerate(WORKLOADS)}
    policy_rank = {p: i for i, p in enumerate(tlbsim.coherence_policies())}
    table["_k"] = table[keys[0]].map(kind_rank).fillna(len(kind_rank))
    base = table[keys[2]].str.replace("+fpr", "", regex=False)
    table["_p"] = base.map(policy_rank).fillna(len(policy_rank)) * 2 + table[keys[2]].str.endswith("+fpr")
    table = table.sort_values(["_k", keys[0], keys[1], "_p"], kind="stable")
    rows = [[name for name, _, _ in COLUMNS]]
    for _, r in table.iterrows():
        rows.append(["-" if pd.isna(r[col]) else fmt.format(r[col]) for _, col, fmt in COLUMNS])
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = []
    for n, row in enumerate(rows):
        if n > 1 and row[0] != rows[n - 1][0]:
            lines.append("")  # a blank line between workloads
        cells = [
            c.ljust(w) if i < KEYS else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def main(out: str | Path = "out/demo", jobs: int | None = None) -> int:
    import tlbsim
    from tlbsim.report import report
    from tlbsim.store import load

    start = time.monotonic()
    out = Path(out)
    spec = demo_spec()
    policies = spec["grid"]["os.coherence"]
    print(
        f"tlbsim demo: coherence policies ({', '.join(policies)}), each without and with FPR, x workloads "
        f"({', '.join(WORKLOADS)}; fpr-munmap case 1) x {THREADS[0]}-{THREADS[-1]} threads, "
        f"{OPS:,} operations per thread, {len(SEEDS)} seeds, on the host preset (8 cores)\n"
    )
    s = tlbsim.sweep(spec, out, jobs=jobs, progress=sys.stderr.isatty())
    print(f"{s.total} runs ({s.skipped} reused from an earlier demo, {s.ran} run now)\n")
    frame = load(out)
    print(summary(frame, load(out, table="thread")))
    legend = (
        "Mcycles: makespan in millions of cycles; shootdowns: flush requests sent to other "
        "cores; IPIs recv: shootdown interrupts taken; false pos: targets that held no stale "
        "entry; violations: stale translations used (security + consistency); kops/s: "
        "thousands of operations per simulated second, all threads. Means over the seeds."
    )
    print("\n" + textwrap.fill(legend, width=92))
    rep = report(out)
    print(f"\nreport: {rep.index.resolve()}")
    print(f"  figures: {', '.join(rep.made) or 'none'}")
    print(
        f"results: {out / 'runs'} (tlbsim.load({str(out)!r}), or table='core' / "
        "table='thread', gives them as a DataFrame)"
    )
    print(f"took {time.monotonic() - start:.1f} s")
    return 0
