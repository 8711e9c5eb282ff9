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
    rows = [summary_row(str(core.get("core", i)), core) for i, core in enumerate(stats.get("per_core", []))]
    rows.append(summary_row("total", stats.get("totals", {})))
    text = _table(HEADERS, rows)
    if "shootdowns_sent" in stats.get("totals", {}):
        text += "\n\n" + os_table(stats)
    return text


def _table(headers: tuple[str, ...], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str] | tuple[str, ...]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])


OS_HEADERS = (
    "core",
    "shootdowns",
    "IPIs sent",
    "IPIs recv",
    "false pos",
    "pages flushed",
    "full flushes",
    "target cyc",
    "violations sec/cons",
)


def _os_row(label: str, row: Mapping[str, Any]) -> list[str]:
    by_cause = row.get("full_flushes_by_cause", {})
    # context_switch_intra_vm and context_switch_inter_vm split context_switch: not added again.
    full = (
        sum(v for k, v in by_cause.items() if isinstance(v, (int, float)) and not k.endswith("_vm"))
        if isinstance(by_cause, Mapping)
        else None
    )
    sec, cons = _num(row, "violations_security"), _num(row, "violations_consistency")
    return [
        label,
        _int(_num(row, "shootdowns_sent")),
        _int(_num(row, "shootdown_ipis_sent")),
        _int(_num(row, "shootdown_ipis_received")),
        _int(_num(row, "false_positive_targets")),
        _int(_num(row, "pages_flushed")),
        _int(full),
        _int(_num(row, "shootdown_cycles_target")),
        f"{_int(sec)}/{_int(cons)}",
    ]


def os_table(stats: Mapping[str, Any]) -> str:
    """OS-mode runs: per core and total, the shootdown counters and the checker's
    violations; then throughput per thread class."""
    rows = [_os_row(str(core.get("core", i)), core) for i, core in enumerate(stats.get("per_core", []))]
    rows.append(_os_row("total", stats.get("totals", {})))
    text = _table(OS_HEADERS, rows)
    classes = stats.get("per_class", {})
    if classes:
        lines = ["", "thread class  threads  ops completed  ops/s (simulated)"]
        for name, c in sorted(classes.items()):
            lines.append(
                f"{name:<12}  {c.get('threads', 0):>7}  {c.get('ops_completed', 0):>13,}  {c.get('ops_per_second', 0.0):>17,.0f}"
            )
        text += "\n" + "\n".join(lines)
    return text
