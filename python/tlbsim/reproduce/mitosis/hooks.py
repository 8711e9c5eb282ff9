"""Hooks of the ``mitosis`` paper of ``tlbsim reproduce``: its metrics.

``main_phase_cycles``: the workers' main phase, from a worker's first run (after the
working set was populated by the first thread's core) to the last worker's exit, so that
initialization is left out as the paper's pre-initialized runs do (and per operation, of
all workers: ``main_phase_cycles_per_op``); ``footprint_pages``:
data pages plus page-table pages (every copy) at their peaks, Table 4's memory;
``<call>_cycles_per_call``: the kernel cycles of one mmap / mprotect / munmap (Table 5);
``max_remote_leaf_fraction``: Fig. 4's worst socket, the share of leaf PTEs a walker there
reads from another socket's memory (``page_table_dump``); ``page_table_pages_off_node0``:
page-table pages on sockets other than 0, where the initializing thread put them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def main_phase_cycles(stats: Mapping[str, Any]) -> float | None:
    workers = [t for t in stats["per_thread"] if not t["daemon"] and t.get("first_run_cycle") is not None]
    if not workers:
        return None
    start = min(t["first_run_cycle"] for t in workers)
    end = max(t["end_cycle"] or stats["run"]["makespan_cycles"] for t in workers)
    return float(end - start)


def main_phase_cycles_per_op(stats: Mapping[str, Any]) -> float | None:
    cycles = main_phase_cycles(stats)
    ops = sum(t["ops_completed"] for t in stats["per_thread"] if not t["daemon"])
    return cycles / ops if cycles is not None and ops else None


def footprint_pages(stats: Mapping[str, Any]) -> float:
    t = stats["totals"]
    return float(t["data_pages_peak"] + t["page_table_pages_peak"])


def _per_call(call: str):
    def metric(stats: Mapping[str, Any]) -> float | None:
        c = stats["totals"]["syscalls_by_call"].get(call)
        return c["cycles"] / c["calls"] if c and c["calls"] else None

    metric.__name__ = f"{call}_cycles_per_call"
    return metric


def page_table_pages_off_node0(stats: Mapping[str, Any]) -> float:
    return float(sum(n["page_table_pages"] for n in stats["totals"]["memory_per_node"][1:]))


def max_remote_leaf_fraction(stats: Mapping[str, Any]) -> float:
    return max(s["leaf_ptes_remote_fraction"] for s in stats["page_table_dump"]["sockets"])


METRICS = {
    "main_phase_cycles": main_phase_cycles,
    "main_phase_cycles_per_op": main_phase_cycles_per_op,
    "footprint_pages": footprint_pages,
    "mmap_cycles_per_call": _per_call("mmap"),
    "mprotect_cycles_per_call": _per_call("mprotect"),
    "munmap_cycles_per_call": _per_call("munmap"),
    "max_remote_leaf_fraction": max_remote_leaf_fraction,
    "page_table_pages_off_node0": page_table_pages_off_node0,
}
