"""Hooks of the ``tagtlb`` paper of ``tlbsim reproduce``: its metrics.

The tag paper counts, per CPU, full TLB flushes by cause (its "flush profile": intra-VM and
inter-VM context switches, forced and capacity flushes) and MPTTI, TLB misses per 10,000
instructions retired, of each CPU's DTLB and ITLB and their average (Figs. 7-8), and per
domain (Figs. 9-10; stats.json's ``per_vm``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

# context_switch_intra_vm and context_switch_inter_vm split context_switch.
_SPLIT = ("context_switch_intra_vm", "context_switch_inter_vm")


def _flushes(core: Mapping[str, Any]) -> float:
    by_cause = core.get("full_flushes_by_cause", {})
    return float(sum(v for k, v in by_cause.items() if k not in _SPLIT))


def cpu0_flushes(stats: Mapping[str, Any]) -> float:
    return _flushes(stats["per_core"][0])


def flushes(stats: Mapping[str, Any]) -> float:
    return _flushes(stats["totals"])


def intra_vm_share(stats: Mapping[str, Any]) -> float | None:
    """Intra-VM context-switch flushes, of all full flushes (both CPUs)."""
    total = flushes(stats)
    return float(stats["totals"]["full_flushes_by_cause"]["context_switch_intra_vm"]) / total if total else None


def _mptti(core: Mapping[str, Any], structure: str) -> float | None:
    instructions = float(core.get("instructions", 0))
    misses = core.get("per_structure", {}).get(structure, {}).get("misses")
    return float(misses) * 1e4 / instructions if instructions and misses is not None else None


def _average(stats: Mapping[str, Any], structure: str) -> float | None:
    measured = [v for c in stats["per_core"] if (v := _mptti(c, structure)) is not None]
    return sum(measured) / len(measured) if measured else None


def dtlb_mptti(stats: Mapping[str, Any]) -> float | None:
    """The average of the CPUs' DTLB MPTTI (Fig. 7's "average")."""
    return _average(stats, "l1d")


def itlb_mptti(stats: Mapping[str, Any]) -> float | None:
    """The average of the CPUs' ITLB MPTTI (Fig. 8's "average")."""
    return _average(stats, "l1i")


def cpu1_dtlb_mptti(stats: Mapping[str, Any]) -> float | None:
    """CPU 1's DTLB MPTTI (Fig. 9's "average" of dom1 and dom2 on CPU 1 in 0012)."""
    return _mptti(stats["per_core"][1], "l1d")


def guests_dtlb_mptti(stats: Mapping[str, Any]) -> float | None:
    """The mean of the guests' (dom1, dom2, ...) DTLB MPTTI: the utility controller's
    ``min-mean-mptti`` goal (tag paper §6.5: "minimum average miss rate")."""
    values = [float(v["dtlb_mptti"]) for v in stats.get("per_vm", [])[1:] if v.get("instructions")]
    return sum(values) / len(values) if values else None


def phase_flips(stats: Mapping[str, Any]) -> float | None:
    """Fig. 11: how often, between consecutive intervals of CPU 1, the guest that misses
    more (dom1 or dom2, by DTLB MPTTI) changes; None without two intervals of both."""
    order = []
    for i in stats.get("intervals", []):
        if i["cpu"] != 1:
            continue
        mptti = {v["vm"]: v["dtlb_mptti"] for v in i["per_vm"] if v["instructions"]}
        if 1 in mptti and 2 in mptti and mptti[1] != mptti[2]:
            order.append(mptti[1] > mptti[2])
    if len(order) < 2:
        return None
    return float(sum(a != b for a, b in itertools.pairwise(order)))


METRICS = {
    "cpu0_flushes": cpu0_flushes,
    "flushes": flushes,
    "intra_vm_share": intra_vm_share,
    "dtlb_mptti": dtlb_mptti,
    "itlb_mptti": itlb_mptti,
    "cpu1_dtlb_mptti": cpu1_dtlb_mptti,
    "guests_dtlb_mptti": guests_dtlb_mptti,
    "phase_flips": phase_flips,
}


def _label(params: Mapping[str, Any]) -> str:
    controller = params.get("machine.tlb.partition_controller", "static")
    if controller == "utility":
        return f"utility, epoch {int(params['machine.tlb.partition_epoch_instructions']):,}"
    if controller == "none":
        return "unpartitioned"
    fractions = params.get("machine.tlb.sl_quota_fraction", [])
    return "static " + "/".join(f"{f:.0%}" for f in fractions[1:])


def _cpu1_series(stats: Mapping[str, Any]) -> tuple[list[int], list[float]]:
    """CPU 1's intervals: instructions retired at each end, and the guests' mean MPTTI."""
    xs, ys, done = [], [], 0
    for i in stats.get("intervals", []):
        if i["cpu"] != 1:
            continue
        done += int(i["instructions"])
        vms = [v for v in i["per_vm"] if v["vm"] > 0]
        xs.append(done)
        ys.append(sum(v["dtlb_mptti"] for v in vms) / len(vms) if vms else 0.0)
    return xs, ys


def controller_rows(runs: Mapping[str, Any]) -> dict[str, Any]:
    """controller.json: every run of the controller sweeps with its guests' mean MPTTI, the
    best static split, and the controller on vm-mix beside the sl sweep's best split."""
    phases = []
    for r in runs.get("controller", []):
        per_vm = r.stats.get("per_vm", [])
        phases.append(
            {
                "run": _label(r.params),
                "controller": r.params.get("machine.tlb.partition_controller"),
                "guests_dtlb_mptti": guests_dtlb_mptti(r.stats),
                "dom_dtlb_mptti": [v["dtlb_mptti"] for v in per_vm[1:]],
            }
        )
    static = [p for p in phases if p["controller"] == "static" and p["guests_dtlb_mptti"] is not None]
    best = min(static, key=lambda p: p["guests_dtlb_mptti"]) if static else None
    vmmix = []
    for r in runs.get("controller-vmmix", []):
        test, entries = r.params.get("workload.test"), r.params.get("machine.tlb.l1d.entries")
        splits = [
            (s.params.get("machine.tlb.sl_quota_fraction"), guests_dtlb_mptti(s.stats))
            for s in runs.get("sl", [])
            if s.params.get("workload.test") == test and s.params.get("machine.tlb.l1d.entries") == entries
        ]
        measured = [(fraction, mptti) for fraction, mptti in splits if mptti is not None]
        top = min(measured, key=lambda x: x[1]) if measured else (None, None)
        vmmix.append(
            {
                "test": test,
                "entries": entries,
                "utility_guests_dtlb_mptti": guests_dtlb_mptti(r.stats),
                "best_static": top[0],
                "best_static_guests_dtlb_mptti": top[1],
            }
        )
    return {"phases": phases, "best_static": best["run"] if best else None, "vm_mix": vmmix}


def _plot(runs: Mapping[str, Any], best: str | None, path: Any) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = [
        r
        for r in runs.get("controller", [])
        if r.params.get("machine.tlb.partition_controller") in ("utility", "none") or _label(r.params) == best
    ]
    if not chosen:
        return False
    with matplotlib.rc_context(matplotlib.rcParamsDefault):
        matplotlib.rcParams.update({"svg.hashsalt": "tlbsim", "font.size": 10})
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
        for r in chosen:
            xs, ys = _cpu1_series(r.stats)
            label = _label(r.params) + (" (best static)" if _label(r.params) == best else "")
            top.plot(xs, ys, label=label, drawstyle="steps-pre")
        top.set_ylabel("guests' mean DTLB MPTTI")
        top.grid(linestyle=":", linewidth=0.5)
        top.legend(fontsize="small")
        for r in chosen:
            if r.params.get("machine.tlb.partition_controller") != "utility":
                continue
            history = (r.stats["per_core"][1].get("partition") or {}).get("history", [])
            xs = [e["instructions"] for e in history]
            ys = [e["l1d"][1] if len(e["l1d"]) > 1 else 0 for e in history]
            bottom.step(xs, ys, where="post", label=f"dom1's quota, {_label(r.params)}")
        bottom.set_ylabel("dom1's L1 DTLB entries")
        bottom.set_xlabel("instructions retired by CPU 1")
        bottom.grid(linestyle=":", linewidth=0.5)
        bottom.legend(fontsize="small")
        fig.suptitle("Re-partitioning with the phases (§6.5) against the best static split")
        fig.tight_layout()
        fig.savefig(path, dpi=100, metadata={"Software": None})
        plt.close(fig)
    return True


def outputs(runs: Mapping[str, Any], out: Any, quick: bool) -> list[dict[str, Any]]:
    """Write DIR/controller.json and DIR/controller_phases.png, print the table, and return
    the figure for index.html."""
    import json
    from pathlib import Path

    rows = controller_rows(runs)
    Path(out, "controller.json").write_text(json.dumps(rows, indent=2) + "\n")
    print("§6.5: the utility partition controller against static splits (guests' mean DTLB MPTTI, CPU 1)")
    for p in rows["phases"]:
        mark = "  <- best static" if p["run"] == rows["best_static"] else ""
        value = f"{p['guests_dtlb_mptti']:10.1f}" if p["guests_dtlb_mptti"] is not None else f"{'n/a':>10}"
        print(f"  {p['run']:<28} {value}   per guest {', '.join(f'{x:.1f}' for x in p['dom_dtlb_mptti'])}{mark}")
    for v in rows["vm_mix"]:
        u, b = v["utility_guests_dtlb_mptti"], v["best_static_guests_dtlb_mptti"]
        fmt = lambda x: f"{x:.1f}" if x is not None else "n/a"
        print(f"  {v['test']} at {v['entries']} entries: utility {fmt(u)}, best static {v['best_static']} {fmt(b)}")
    path = Path(out, "controller_phases.png")
    if not _plot(runs, rows["best_static"], path):
        return []
    return [
        {
            "path": path,
            "title": "The utility controller over time (§6.5, beyond the paper)",
            "caption": "Top: the guests' mean DTLB MPTTI on CPU 1 per interval of 500,000 instructions, for "
            "the controller (two epoch lengths), the best static split chosen in hindsight and "
            "the unpartitioned TLB, on the two-phase workload of controller.toml. Bottom: dom1's "
            "quota after each epoch (it needs 16 entries, then 48, then 16, then 48).",
        }
    ]
