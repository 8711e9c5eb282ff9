"""A readable per-core summary table of a run's statistics (used by the CLI)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_DASH = "-"

HEADERS = (
    "core",
    "accesses",
    "L1 hit %",
    "L2 hit %",
    "walks",
    "cyc/walk",
    "PT local",
    "PT remote",
    "cycles",
    "miss/10k instr",
)


def _num(row: Mapping[str, Any], key: str) -> float | None:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _ratio(num: float | None, den: float | None, scale: float = 1.0) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return scale * num / den


def _int(value: float | None) -> str:
    return _DASH if value is None else f"{round(value):,}"


def _fixed(value: float | None, digits: int) -> str:
    return _DASH if value is None else f"{value:,.{digits}f}"


def tlb_misses(row: Mapping[str, Any]) -> float | None:
    """Misses of the last TLB level: L2 (STLB) misses, or L1 misses when L2 saw no lookup."""
    l2_hits, l2_misses = _num(row, "l2_tlb_hits"), _num(row, "l2_tlb_misses")
    if l2_hits or l2_misses:
        return l2_misses
    return _num(row, "l1_tlb_misses")


def summary_row(label: str, row: Mapping[str, Any]) -> list[str]:
    def hit_rate(level: str) -> float | None:
        hits, misses = _num(row, f"{level}_tlb_hits"), _num(row, f"{level}_tlb_misses")
        total = None if hits is None or misses is None else hits + misses
        return _ratio(hits, total, 100.0)

    return [
        label,
        _int(_num(row, "accesses")),
        _fixed(hit_rate("l1"), 2),
        _fixed(hit_rate("l2"), 2),
        _int(_num(row, "walks")),
        _fixed(_ratio(_num(row, "walk_cycles"), _num(row, "walks")), 1),
        _int(_num(row, "pt_accesses_local")),
        _int(_num(row, "pt_accesses_remote")),
        _int(_num(row, "cycles")),
        _fixed(_ratio(tlb_misses(row), _num(row, "instructions"), 10_000.0), 2),
    ]


def summary_table(stats: Mapping[str, Any]) -> str:
    """Per core and total: accesses, L1/L2 TLB hit rates, walks, walk cycles per walk,
    page-table reads local/remote, cycles, last-level TLB misses per 10,000 instructions."""
    rows = [
        summary_row(str(core.get("core", i)), core)
        for i, core in enumerate(stats.get("per_core", []))
    ]
    rows.append(summary_row("total", stats.get("totals", {})))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]

    def line(cells: list[str] | tuple[str, ...]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    return "\n".join([line(HEADERS), *(line(r) for r in rows)])
