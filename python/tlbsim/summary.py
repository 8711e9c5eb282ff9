"""A readable per-core summary table of a run's statistics (used by the CLI)."""

from __future__ import annotations

import textwrap
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


TOTAL = "total"

LEGEND = (
    "accesses: memory accesses; L1/L2 hit %: TLB hit rates; walks: page walks; cyc/walk: cycles "
    "per walk; PT local/remote: page-table reads from the walking core's node / another node; "
    "cycles: the core's cycles; miss/10k instr: last-level TLB misses per 10,000 instructions. "
    "The total row sums the counters over the cores (its cycles too: the run's length is the "
    "makespan above) and computes its rates from those sums."
)

OS_LEGEND = (
    "shootdowns: flush requests this core sent to others; IPIs sent/recv: shootdown interrupts "
    "sent / taken; false pos: targets reached (by interrupt or by message) that held no stale "
    "entry; pages flushed: single-page invalidations; full flushes: whole-TLB flushes, every "
    "cause; target cyc: cycles targets spent handling shootdowns; violations sec/cons: stale "
    "translations used, that exposed another frame (security) or an outdated mapping "
    "(consistency). The total row sums over the cores."
)


def makespan_line(stats: Mapping[str, Any]) -> str | None:
    """The run's length: its makespan (the last core's cycles), in cycles and simulated time."""
    run = stats.get("run", {})
    cycles = _num(run, "makespan_cycles")
    if cycles is None:
        return None
    seconds = _num(run, "seconds")
    time = "" if seconds is None else f" ({seconds * 1e3:,.3f} ms simulated)"
    return f"makespan: {round(cycles):,} cycles{time}: the run's length, from the start to the last core's end"


def no_shootdown_warning(stats: Mapping[str, Any]) -> str | None:
    """An OS-mode run that sent no shootdown says so, and why when its workload cannot:
    with every process on one core, no other core shares an address space."""
    totals = stats.get("totals", {})
    if "shootdowns_sent" not in totals or totals.get("shootdowns_sent"):
        return None
    cores_of: dict[Any, set[Any]] = {}
    for t in stats.get("per_thread", []):
        cores_of.setdefault(t.get("process"), set()).add(t.get("core"))
    text = "warning: no TLB shootdown was sent, so the coherence policy (os.coherence) cannot have changed this run"
    if cores_of and all(len(c) <= 1 for c in cores_of.values()):
        text += (
            f": each of its {len(cores_of)} process(es) ran on one core, so no other core shared an address "
            "space to shoot down (apache at workload.threads = 2, for one, runs 2 processes of 1 worker); "
            "more threads per process (workload.threads) make the policy matter"
        )
    return text


def summary_table(stats: Mapping[str, Any]) -> str:
    """The makespan; per core and in total: accesses, L1/L2 TLB hit rates, walks, walk cycles
    per walk, page-table reads local/remote, cycles, last-level TLB misses per 10,000
    instructions; OS-mode runs' shootdown table; a legend of the columns; a warning when an
    OS-mode run sent no shootdown."""
    rows = [summary_row(str(core.get("core", i)), core) for i, core in enumerate(stats.get("per_core", []))]
    rows.append(summary_row(TOTAL, stats.get("totals", {})))
    parts = [line for line in [makespan_line(stats)] if line]
    parts.append(_table(HEADERS, rows))
    legend = LEGEND
    if "shootdowns_sent" in stats.get("totals", {}):
        parts.append(os_table(stats))
        legend += " " + OS_LEGEND
    parts.append(textwrap.fill(legend, width=100))
    warning = no_shootdown_warning(stats)
    if warning:
        parts.append(textwrap.fill(warning, width=100, subsequent_indent="  "))
    return "\n\n".join(parts)


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
    rows.append(_os_row(TOTAL, stats.get("totals", {})))
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


def host_note(config: Mapping[str, Any]) -> str | None:
    """``machine.preset = "host"`` announced: the TLB geometry is this machine's (as CPUID
    reports it, or the built-in defaults where it reports none), so the numbers depend on
    the machine the run ran on. None for every other preset."""
    machine = config.get("machine", {})
    if machine.get("preset") != "host":
        return None
    import tlbsim

    tlb = machine.get("tlb", {})
    builtin = tlbsim.resolve({"machine": {"preset": "none"}})["machine"]["tlb"]
    levels = ("l1d", "l1d_2m", "l1d_1g", "l1i", "l2")
    from_cpuid = any(
        (tlb.get(k, {}).get("entries"), tlb.get(k, {}).get("ways"))
        != (builtin.get(k, {}).get("entries"), builtin.get(k, {}).get("ways"))
        for k in levels
    )
    source = (
        "this machine's TLBs as its CPUID reports them"
        if from_cpuid
        else "CPUID reported no TLBs here (a hypervisor may hide them), so the built-in defaults"
    )

    def level(name: str) -> str:
        lv = tlb.get(name, {})
        return f"{lv.get('entries', 0):,} entries, {lv.get('ways', 0)}-way"

    return (
        f'machine: preset "host": {source} (L1 dTLB {level("l1d")}; L2 {level("l2")}), '
        f"{machine.get('sockets')} socket(s) x {machine.get('cores_per_socket')} cores. The numbers "
        "depend on the machine that ran them; config.json records the geometry used, so the run "
        "repeats anywhere from it."
    )
