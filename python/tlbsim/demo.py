"""``tlbsim demo``: the default sweep, its summary table, and the report.

Every coherence policy the simulator has (``tlbsim.coherence_policies()``: ``os.coherence``),
each without and with FPR's page recycling (``os.recycling = "fpr"``, shown as ``+fpr``; the
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

Then the tagged-TLB axis under virtual machines (``OUT/vms``): the tag paper's ``vm-mix``
(dom0 and two TPC-C-like guests on the ``tagtlb-p4`` preset's two CPUs, pinned ``0012`` or
not) with untagged, domain-tagged and CR3-tagged TLBs: full flushes by cause (intra-VM and
inter-VM switches, forced, TMT capacity) and the DTLB and ITLB misses per 10,000
instructions. Last, who sets the service-level quotas of a CR3-tagged TLB two guests share
(``OUT/partition``): none, a static 50/50 split, or the ``utility`` controller, on the
two-phase workload of ``tlbsim reproduce tagtlb``'s controller sweep.
"""

from __future__ import annotations

import json
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
            # fpr-munmap runs its default case 1 (N I/O threads); every kind takes `ops`
            "workload": {"ops": OPS},
        },
        "seeds": SEEDS,
        "grid": {
            "workload.kind": WORKLOADS,
            "workload.threads": THREADS,
            "os.coherence": tlbsim.coherence_policies(),
            "os.recycling": ["none", "fpr"],
        },
    }


VM_TAGGINGS = ["none", "domain", "cr3"]
VM_PINNINGS = ["none", "0012"]


def vm_spec() -> dict[str, Any]:
    """The demo's VM sweep: vm-mix TPCC-TPCC under each tagging mode, pinned or not."""
    return {
        "base": {
            "machine": {"preset": "tagtlb-p4"},
            "workload": {"kind": "vm-mix", "test": "tpcc-tpcc", "ops": 3},
        },
        "grid": {"machine.tlb.tagging": VM_TAGGINGS, "workload.pinning": VM_PINNINGS},
    }


def vm_summary(out: Path) -> str:
    """One line per tagging mode and pinning: flushes by cause, MPTTI, violations."""
    rows = [
        ["tagging", "pinning", "intra-VM", "inter-VM", "forced", "capacity", "DTLB MPTTI", "ITLB MPTTI", "violations"]
    ]
    runs = []
    for run in sorted((out / "runs").iterdir()):
        if not (run / "stats.json").is_file():
            continue
        params = json.loads((run / "params.json").read_text())
        stats = json.loads((run / "stats.json").read_text())
        runs.append((params, stats))
    order = {(t, p): i for i, (t, p) in enumerate((t, p) for t in VM_TAGGINGS for p in VM_PINNINGS)}
    runs.sort(key=lambda r: order.get((r[0]["machine.tlb.tagging"], r[0]["workload.pinning"]), len(order)))
    for params, stats in runs:
        t = stats["totals"]
        by = t["full_flushes_by_cause"]

        def mptti(structure: str) -> float:
            cores = stats["per_core"]  # noqa: B023 - called only within this iteration
            vals = [
                c["per_structure"][structure]["misses"] * 1e4 / c["instructions"] for c in cores if c["instructions"]
            ]
            return sum(vals) / len(vals) if vals else 0.0

        rows.append(
            [
                params["machine.tlb.tagging"],
                params["workload.pinning"],
                f"{by['context_switch_intra_vm']:,}",
                f"{by['context_switch_inter_vm']:,}",
                f"{by['tag_forced']:,}",
                f"{by['tag_capacity']:,}",
                f"{mptti('l1d'):,.1f}",
                f"{mptti('l1i'):,.1f}",
                f"{t['violations_security'] + t['violations_consistency']:,}",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows
    )


# (label, partition_controller, sl_quota_fraction, partition_epoch_instructions)
PARTITIONS = [
    ("unpartitioned", "none", [], 1_000_000),
    ("static 50/50", "static", [1.0, 0.5, 0.5], 1_000_000),
    ("utility", "utility", [1.0, 0.5, 0.5], 200_000),
]


def partition_spec() -> dict[str, Any]:
    """The demo's partition sweep: the reproduce controller sweep's two-phase workload (two
    guests on CPU 1 whose TLB demands swap between phases) under each quota setter."""
    import tomllib

    base = tomllib.loads((Path(__file__).parent / "reproduce" / "tagtlb" / "controller.toml").read_text())["base"]
    return {
        "base": base,
        "zip": {
            "machine.tlb.partition_controller": [p[1] for p in PARTITIONS],
            "machine.tlb.sl_quota_fraction": [p[2] for p in PARTITIONS],
            "machine.tlb.partition_epoch_instructions": [p[3] for p in PARTITIONS],
        },
    }


def partition_summary(out: Path) -> str:
    """One line per quota setter: the guests' DTLB MPTTI and their mean, re-partitions."""
    rows = [["quotas", "dom1 MPTTI", "dom2 MPTTI", "mean", "epochs"]]
    found = {}
    for run in sorted((out / "runs").iterdir()):
        if (run / "stats.json").is_file():
            params = json.loads((run / "params.json").read_text())
            found[params["machine.tlb.partition_controller"]] = json.loads((run / "stats.json").read_text())
    for label, controller, _, _ in PARTITIONS:
        stats = found.get(controller)
        if stats is None:
            continue
        guests = [v["dtlb_mptti"] for v in stats["per_vm"][1:]]
        epochs = (stats["per_core"][1].get("partition") or {}).get("epochs", 0)
        rows.append([label, *(f"{g:,.1f}" for g in guests), f"{sum(guests) / len(guests):,.1f}", f"{epochs:,}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
        for r in rows
    )


def _section(folder: Path, title: str, spec: dict[str, Any], table: Any, legend: str, jobs: int | None) -> None:
    """One further section of the demo: its sweep into ``folder``, its table, its legend."""
    import tlbsim

    print("\n" + title)
    s = tlbsim.sweep.sweep(spec, folder, jobs=jobs, progress=sys.stderr.isatty())
    print(f"{s.total} runs ({s.skipped} reused, {s.ran} run now)\n")
    print(table(folder))
    print("\n" + textwrap.fill(legend, width=92))


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
    if "config.os.recycling" in df:
        df.loc[df["config.os.recycling"].fillna("none") == "fpr", "policy"] += "+fpr"
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
        cells = [c.ljust(w) if i < KEYS else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def main(out: str | Path = "out/demo", jobs: int | None = None) -> int:
    import tlbsim
    from tlbsim.report import report
    from tlbsim.store import load
    from tlbsim.summary import host_note

    start = time.monotonic()
    out = Path(out)
    spec = demo_spec()
    policies = spec["grid"]["os.coherence"]
    print(
        f"tlbsim demo: coherence policies ({', '.join(policies)}), each without and with FPR, x workloads "
        f"({', '.join(WORKLOADS)}; fpr-munmap case 1) x {THREADS[0]}-{THREADS[-1]} threads, "
        f"{OPS:,} operations per thread, {len(SEEDS)} seeds, on the host preset (8 cores)"
    )
    # Which machine the numbers come from: the host preset reads this one's TLBs.
    note = host_note(tlbsim.resolve({"machine": spec["base"]["machine"]}))
    print(textwrap.fill(note, width=92) + "\n" if note else "")
    s = tlbsim.sweep.sweep(spec, out, jobs=jobs, progress=sys.stderr.isatty())
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
    _section(
        out / "vms",
        "Tagged TLBs under VMs: vm-mix TPCC-TPCC (dom0 + two TPC-C guests, credit scheduler) on the "
        "tagtlb-p4 preset, untagged / domain / CR3 tags, VCPUs pinned 0012 or not",
        vm_spec(),
        vm_summary,
        "Full TLB flushes (both CPUs) by cause: a CR3 write switching address space within a VM "
        "(intra-VM) or to another VM's (inter-VM), a guest's full flush done by rewriting CR3 "
        "(forced), a fifth address space on the 4-entry TMT (capacity). MPTTI: first-level TLB "
        "misses per 10,000 instructions, averaged over the CPUs.",
        jobs,
    )
    _section(
        out / "partition",
        "Who sets the TLB's service-level quotas: two guests share CPU 1's 64-entry CR3-tagged TLB, "
        "their demands swapping between phases (dom1 16 pages then 48, dom2 96 then 16)",
        partition_spec(),
        partition_summary,
        "DTLB misses per 10,000 instructions of each guest. utility: the controller re-partitions "
        "every 200,000 instructions from shadow-tag miss curves (tag paper §6.5's proposal, built "
        "as utility-based cache partitioning); epochs: how often it did. Unpartitioned, a guest's "
        "whole-TLB bursts beat any quota here; the controller beats the fixed split.",
        jobs,
    )
    rep = report(out)
    print(f"\nreport: {rep.index.resolve()}")
    print(f"  figures: {', '.join(rep.made) or 'none'}")
    print(
        f"results: {out / 'runs'} (tlbsim.load({str(out)!r}), or table='core' / "
        "table='thread', gives them as a DataFrame)"
    )
    print(f"took {time.monotonic() - start:.1f} s")
    return 0
