"""Hooks of the ``invlpgb`` paper of ``tlbsim reproduce``: two tables beyond the claims.

``cost.json``: linux-invlpgb's tlb_flush2_threads throughput at 16 threads as its assumed
INVLPGB latency grows, against linux's at 16 threads (the threads sweep): where broadcast
stops paying.

``comparison.json``: every seed technique and every invalidation mechanism on the papers'
headline workloads (issue 48 item 8), each run's makespan relative to ``linux`` and to
each broadcast mechanism of today's hardware, with and without FPR.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

BASELINES = ["linux", "linux-invlpgb", "rar", "arm-tlbi"]
TECHNIQUES = ["abis", "didi", "latr", "oracle"]
POLICIES = BASELINES + TECHNIQUES


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ops_per_second(stats: Mapping[str, Any]) -> float:
    return float(stats["per_class"]["task"]["ops_per_second"])


def cost_rows(runs: Mapping[str, Any]) -> dict[str, Any]:
    linux = _mean(
        [
            _ops_per_second(r.stats)
            for r in runs.get("threads", [])
            if r.params.get("os.coherence") == "linux" and r.params.get("workload.threads") == 16
        ]
    )
    by_latency: dict[int, list[float]] = {}
    for r in runs.get("cost", []):
        by_latency.setdefault(int(r.params["coherence.linux-invlpgb.invlpgb_latency_cycles"]), []).append(
            _ops_per_second(r.stats)
        )
    rows = []
    for latency in sorted(by_latency):
        ops = _mean(by_latency[latency])
        rows.append(
            {
                "invlpgb_latency_cycles": latency,
                "ops_per_second": ops,
                "over_linux": ops / linux if ops is not None and linux else None,
            }
        )
    return {"threads": 16, "linux_ops_per_second": linux, "rows": rows}


def comparison_rows(runs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per workload, policy and FPR setting: makespan and shootdown counts, and the
    makespan relative to each baseline (with the same FPR setting)."""
    cells: dict[tuple[str, str, bool], list[Mapping[str, Any]]] = {}
    for sweep in ("comparison", "comparison_stm"):
        for r in runs.get(sweep, []):
            workload = str(r.params.get("workload.kind", "stm-mprotect")) if sweep == "comparison" else "stm-mprotect"
            key = (workload, str(r.params["os.coherence"]), r.params.get("os.recycling") == "fpr")
            cells.setdefault(key, []).append(r.stats)
    makespan = {k: _mean([float(s["run"]["makespan_cycles"]) for s in v]) for k, v in cells.items()}
    rows = []
    for (workload, policy, fpr), stats in sorted(
        cells.items(), key=lambda kv: (kv[0][0], kv[0][2], POLICIES.index(kv[0][1]) if kv[0][1] in POLICIES else 99)
    ):
        ms = makespan[(workload, policy, fpr)]
        row: dict[str, Any] = {
            "workload": workload,
            "policy": policy,
            "fpr": fpr,
            "makespan_cycles": ms,
            "shootdown_ipis_received": _mean([float(s["totals"]["shootdown_ipis_received"]) for s in stats]),
            "initiator_wait_cycles": _mean([float(s["totals"]["shootdown_cycles_initiator_wait"]) for s in stats]),
            "violations": sum(
                int(s["totals"]["violations_security"]) + int(s["totals"]["violations_consistency"]) for s in stats
            ),
        }
        for base in BASELINES:
            ref = makespan.get((workload, base, False))
            row[f"makespan_over_{base}"] = ms / ref if ms is not None and ref else None
        rows.append(row)
    return rows


def _fmt(v: float | None) -> str:
    return f"{v:6.2f}" if v is not None else f"{'n/a':>6}"


def _plot_comparison(rows: list[dict[str, Any]], path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = sorted({r["workload"] for r in rows})
    if not workloads:
        return False
    with matplotlib.rc_context(matplotlib.rcParamsDefault):
        matplotlib.rcParams.update({"svg.hashsalt": "tlbsim", "font.size": 9})
        fig, axes = plt.subplots(1, len(workloads), figsize=(4.2 * len(workloads), 4), sharey=True, squeeze=False)
        for ax, workload in zip(axes[0], workloads):
            width = 0.4
            for j, (fpr, colour, label) in enumerate(
                [(False, "tab:blue", "without FPR"), (True, "tab:orange", "FPR on")]
            ):
                ys = []
                for p in POLICIES:
                    match = [r for r in rows if r["workload"] == workload and r["policy"] == p and r["fpr"] == fpr]
                    ys.append(match[0]["makespan_over_linux"] if match and match[0]["makespan_over_linux"] else 0.0)
                ax.bar([i + (j - 0.5) * width for i in range(len(POLICIES))], ys, width, color=colour, label=label)
            ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
            ax.axvline(len(BASELINES) - 0.5, color="grey", linewidth=0.8)
            ax.set_xticks(range(len(POLICIES)))
            ax.set_xticklabels(POLICIES, rotation=45, ha="right")
            ax.set_title(workload)
            ax.grid(axis="y", linestyle=":", linewidth=0.5)
        axes[0][0].set_ylabel("makespan / linux (lower is better)")
        axes[0][0].legend(fontsize="small")
        fig.suptitle(
            "Mechanisms of today's hardware (left of the line) and the papers' techniques, 16 threads, milan-72"
        )
        fig.tight_layout()
        fig.savefig(path, dpi=100, metadata={"Software": None})
        plt.close(fig)
    return True


def _plot_cost(cost: Mapping[str, Any], path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in cost["rows"] if r["over_linux"] is not None]
    if not rows:
        return False
    with matplotlib.rc_context(matplotlib.rcParamsDefault):
        matplotlib.rcParams.update({"svg.hashsalt": "tlbsim", "font.size": 10})
        fig, ax = plt.subplots(figsize=(6, 3.6))
        ax.plot(
            [r["invlpgb_latency_cycles"] for r in rows],
            [r["over_linux"] for r in rows],
            marker="o",
            label="linux-invlpgb",
        )
        ax.axhline(1.0, color="grey", linestyle=":", label="linux (IPIs)")
        ax.set_xscale("log")
        ax.set_xlabel("INVLPGB latency, issue to applied everywhere (cycles; default 1,500 assumed)")
        ax.set_ylabel("loops/s / linux")
        ax.grid(linestyle=":", linewidth=0.5)
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(path, dpi=100, metadata={"Software": None})
        plt.close(fig)
    return True


def outputs(runs: Mapping[str, Any], out: Any, quick: bool) -> list[dict[str, Any]]:
    """Write DIR/cost.json and DIR/comparison.json with their figures, print both tables,
    and return the figures for index.html."""
    import json

    figures = []
    cost = cost_rows(runs)
    Path(out, "cost.json").write_text(json.dumps(cost, indent=2) + "\n")
    print(f"Where broadcast stops paying: tlb_flush2_threads at {cost['threads']} threads, linux-invlpgb / linux")
    for r in cost["rows"]:
        print(f"  INVLPGB latency {r['invlpgb_latency_cycles']:>7} cycles: {_fmt(r['over_linux'])}")
    if _plot_cost(cost, Path(out, "cost.png")):
        figures.append(
            {
                "path": Path(out, "cost.png"),
                "title": "Where broadcast stops paying (beyond the series)",
                "caption": "tlb_flush2_threads at 16 threads on milan-72: linux-invlpgb's loops/s over linux's as "
                "the INVLPGB latency (a parameter with no public measurement) grows.",
            }
        )

    rows = comparison_rows(runs)
    Path(out, "comparison.json").write_text(json.dumps(rows, indent=2) + "\n")
    print("The techniques beside today's hardware: makespan relative to each baseline (16 threads, milan-72)")
    print(
        f"  {'workload':<13} {'policy':<14} {'fpr':<4} "
        + " ".join(f"{'/' + b:>14}" for b in BASELINES)
        + f" {'IPIs recv':>10} {'viol':>5}"
    )
    for r in rows:
        print(
            f"  {r['workload']:<13} {r['policy']:<14} {'on' if r['fpr'] else '':<4} "
            + " ".join(f"{_fmt(r['makespan_over_' + b]):>14}" for b in BASELINES)
            + f" {r['shootdown_ipis_received']:10.0f} {r['violations']:5d}"
        )
    if _plot_comparison(rows, Path(out, "comparison.png")):
        figures.append(
            {
                "path": Path(out, "comparison.png"),
                "title": "The techniques beside today's hardware (issue 48, beyond the papers)",
                "caption": "Makespan relative to linux (IPI shootdowns) on the papers' headline workloads, 16 "
                "threads on milan-72. Left of the line: linux and the three broadcast mechanisms "
                "(AMD INVLPGB with Linux 6.15's global ASIDs, Intel RAR, Arm TLBI); right: the papers' "
                "techniques (all of which keep IPIs or messages). Orange: with FPR's page recycling. "
                "DIR/comparison.json has each row against every baseline.",
            }
        )
    return figures
