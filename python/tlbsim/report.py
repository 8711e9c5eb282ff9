"""Figures and one self-contained HTML page from a sweep's results.

``report(DIR)`` loads a sweep directory with :func:`tlbsim.store.load` and calls
:func:`build_report`, which takes the results table (one row per run: ``run_id``,
``param.*``, ``config.*``, ``stats.*``, ``run.*`` columns) and writes into ``out``:

- ``<figure>.png`` and ``<figure>.pdf`` for each figure the results can support:
  ``coherence_runtime`` (per policy, normalized runtime and shootdowns sent, as ABIS
  Fig. 5: ``config.os.coherence``, ``run.makespan_cycles``, ``stats.shootdowns_sent``),
  ``throughput_threads`` (throughput against threads per thread class, as FPR Figs.
  7–11: ``config.workload.threads`` and the per-thread table's ``thread.class``,
  ``thread.ops_per_second``), ``targets_per_shootdown`` (as DiDi Fig. 10:
  ``stats.targets_per_shootdown``), ``false_positives`` (``stats.false_positive_targets``
  per shootdown), ``tlb_mpki_vs_size`` (as the tag paper's Fig. 7:
  ``config.machine.tlb.l1d.entries``, ``run.l1_tlb_misses_per_10k_instructions``) and
  ``walk_cycles_per_walk``, and ``mptti_intervals`` (the tag paper's Fig. 11: per domain,
  DTLB MPTTI over time, from the ``intervals`` of runs with ``sim.interval_instructions``),
  and ``partition_quotas`` (the ``utility`` partition controller's L1 DTLB quota per domain
  over time, from ``per_core[].partition.history``).
  Per-policy figures draw one panel per workload
  (``workload.*`` keys other than the thread count) when something else varies too;
- ``index.html``: one page with every figure embedded as a base64 PNG (no external
  URL), a caption saying what is plotted and how, and a table of the runs.

A figure is made only when its columns exist and vary; otherwise it is listed in
:attr:`ReportSummary.skipped` with the reason. Output is deterministic: fixed figure
size and DPI, matplotlib's default style whatever the user's matplotlibrc, no dates in
the PDF or PNG metadata. Figures are drawn with the object-oriented API on the Agg
canvas (``matplotlib.figure.Figure``), so the caller's pyplot backend is left alone.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["FigureInfo", "ReportSummary", "Tables", "build_report", "report"]

FIG_SIZE = (7.0, 4.2)  # inches
DPI = 120
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
LINESTYLES = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1))]
HATCHES = ["", "//", "..", "xx", "\\\\", "++", "oo", "--", "**", "||"]
# Twelve distinct colours (near-black, then matplotlib's tab10 and navy), so that every
# coherence policy of one panel has its own; hatches and markers tell them apart in grey.
COLORS = [
    "#222222",
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#7f7f7f",
    "#ff7f0e",
    "#e377c2",
    "#bcbd22",
    "#17becf",
    "#000080",
]
SEED_KEYS = ("param.seed", "config.seed")
MAX_TABLE_ROWS = 200
# Columns of the runs table, when present (beside run_id and the varied parameters).
TABLE_METRICS = [
    ("run.makespan_cycles", "makespan (cycles)"),
    ("run.l1_tlb_misses_per_10k_instructions", "L1 TLB misses / 10k instr"),
    ("run.l2_tlb_misses_per_10k_instructions", "L2 TLB misses / 10k instr"),
    ("run.walks_per_10k_instructions", "walks / 10k instr"),
    ("stats.shootdowns_sent", "shootdowns sent"),
    ("stats.shootdown_ipis_received", "shootdown IPIs received"),
    ("stats.false_positive_targets", "false-positive targets"),
    ("stats.violations_security", "security violations"),
    ("stats.violations_consistency", "consistency violations"),
]


@dataclass
class FigureInfo:
    """One figure written: its file stem, heading, one-line caption and files."""

    name: str
    title: str
    caption: str
    png: Path
    pdf: Path


@dataclass
class ReportSummary:
    """What :func:`build_report` wrote: the output folder, the HTML page, the figures
    made and the figures skipped (name → reason)."""

    out: Path
    index: Path
    figures: list[FigureInfo] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def made(self) -> list[str]:
        return [f.name for f in self.figures]

    def __str__(self) -> str:
        lines = [f"report: {self.index}"]
        for f in self.figures:
            lines.append(f"  made     {f.name}: {f.title}")
        for name, reason in self.skipped.items():
            lines.append(f"  skipped  {name}: {reason}")
        return "\n".join(lines)


class _Skip(Exception):
    """A figure cannot be drawn from these results; the message says why."""


# --------------------------------------------------------------------------- helpers


def _has(frame: pd.DataFrame, col: str) -> bool:
    return col in frame.columns and bool(frame[col].notna().any())


def _nunique(frame: pd.DataFrame, col: str) -> int:
    return int(frame[col].dropna().astype(str).nunique()) if col in frame.columns else 0


def _short(col: str) -> str:
    """``config.machine.tlb.l1d.entries`` → ``machine.tlb.l1d.entries``."""
    for prefix in ("param.", "config.", "stats.", "run."):
        if col.startswith(prefix):
            return col[len(prefix) :]
    return col


def _seed_col(frame: pd.DataFrame) -> str | None:
    return next((c for c in SEED_KEYS if c in frame.columns), None)


def _varied(frame: pd.DataFrame, exclude: Sequence[str] = ()) -> list[str]:
    """The varied parameters, seed excluded: the ``param.*`` columns whose value differs
    between runs (or, for a table without ``param.*``, the varied ``config.*`` columns).
    Columns that repeat the same sweep key under another prefix, and those in
    ``exclude`` (by their short name), are left out."""
    params = [c for c in frame.columns if c.startswith("param.")]
    pool = params or [c for c in frame.columns if c.startswith("config.")]
    excluded = {_short(c) for c in exclude} | {_short(c) for c in SEED_KEYS}
    return [c for c in pool if _short(c) not in excluded and _nunique(frame, c) > 1]


def _independent_of(frame: pd.DataFrame, cols: list[str], x: str) -> list[str]:
    """``cols`` without those that are a function of ``x`` (e.g. the ways swept together
    with the entries): they would only repeat the x axis as series."""
    out = []
    for c in cols:
        per_x = frame[[x, c]].dropna().astype(str).groupby(x)[c].nunique()
        if (per_x > 1).any():
            out.append(c)
    return out


def _label(frame: pd.DataFrame, cols: list[str]) -> pd.Series:
    """A text label per row from the values of ``cols`` (``a=1, b=x``); "all" if none."""
    if not cols:
        return pd.Series("all", index=frame.index)
    if len(cols) == 1 and not _is_switch(frame, cols[0]):
        return frame[cols[0]].map(_fmt)
    return frame[cols].apply(lambda row: ", ".join(_setting(c, row[c]) for c in cols), axis=1)


# Switches named in words ("FPR on"), not as ``recycling=fpr`` or ``enabled=False``: the
# column's value that means "on", and the name shown (the FPR paper's own).
SWITCHES = {"os.recycling": ("fpr", "FPR")}


def _is_switch(frame: pd.DataFrame, col: str) -> bool:
    return _short(col) in SWITCHES or pd.api.types.is_bool_dtype(frame[col])


def _setting(col: str, value: Any) -> str:
    """One column's value in a label: ``FPR on`` for a switch, ``name=value`` otherwise."""
    short = _short(col)
    name = short.rsplit(".", 1)[-1]
    if short in SWITCHES:
        on, word = SWITCHES[short]
        return f"{word} {'on' if value == on else 'off'}"
    if isinstance(value, bool):
        return f"{name} {'on' if value else 'off'}"
    return f"{name}={_fmt(value)}"


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _sort_key(value: Any) -> tuple[int, Any]:
    try:
        return (0, float(value))
    except (TypeError, ValueError):
        return (1, str(value))


def _ordered(values: Any) -> list[Any]:
    return sorted(pd.unique(pd.Series(values).dropna()), key=_sort_key)


def _known_policies() -> list[str]:
    """The simulator's coherence policies in its order (``linux``, the baseline, first)."""
    try:
        from tlbsim._tlbsim import coherence_policies

        return list(coherence_policies())
    except (ImportError, AttributeError):
        return ["linux"]


def _policies(values: pd.Series) -> list[str]:
    """The distinct values: the simulator's policies in its order (``linux``, the
    baseline, first), then any others in order of appearance."""
    seen = [str(v) for v in pd.unique(values.astype(str))]
    known = _known_policies()
    return sorted(seen, key=lambda p: known.index(p) if p in known else len(known))


# At most this many series in one panel: more and the colours and hatches no longer tell
# them apart at a glance.
MAX_SERIES = 8
# The baselines a policy figure separates from the techniques (Linux's IPI shootdown, the
# broadcast invalidation of today's hardware, and the oracle bound); the unsafe-on-purpose policies are those the catalogue calls so.
BASELINES = ("linux", "linux-invlpgb", "rar", "arm-tlbi", "oracle")


def _unsafe_policies() -> set[str]:
    try:
        from tlbsim.catalogue import section

        entries = section("policies")["entries"]
    except (ImportError, AttributeError, KeyError, TypeError):
        return set()
    return {e["name"] for e in entries if "unsafe on purpose" in str(e.get("summary", ""))}


def _policy_families(policies: list[str], policy_of: Mapping[str, str] | None = None) -> list[tuple[str, list[str]]]:
    """``policies`` (or series, each running the policy ``policy_of`` names) in one family
    ("") when they fit a panel (MAX_SERIES); otherwise split into baselines, techniques and
    unsafe variants, in balanced rows of at most MAX_SERIES, each with the first one (the
    normalisation's reference) repeated so that every row shows it."""
    if len(policies) <= MAX_SERIES:
        return [("", policies)]
    unsafe = _unsafe_policies()
    ref = policies[0]

    def family(s: str) -> str:
        p = (policy_of or {}).get(s, s)
        return "baselines" if p in BASELINES else "unsafe on purpose" if p in unsafe else "techniques"

    families = []
    for title in ("baselines", "techniques", "unsafe on purpose"):
        members = [s for s in policies if s != ref and family(s) == title]
        families += [(title, [ref, *chunk]) for chunk in _balanced_chunks(members, MAX_SERIES - 1)]
    return families or [("", policies)]


def _series_policy(df: pd.DataFrame) -> dict[str, str]:
    """The coherence policy each series (``df["_series"]``) runs: from the effective
    config's column, or the swept parameter's (a sweep's per-thread table has only that)."""
    for col in (POLICY, "param.os.coherence"):
        if _has(df, col):
            return df.groupby(df["_series"].astype(str))[col].first().astype(str).to_dict()
    return {}


def _series_families(df: pd.DataFrame, series: list[str]) -> list[tuple[str, list[str]]]:
    """:func:`_policy_families` of ``series`` (values of ``df["_series"]``), each going
    with the policy it runs (a policy with and without FPR stays in one family)."""
    return _policy_families(series, _series_policy(df))


def _balanced_chunks(items: list[str], most: int) -> list[list[str]]:
    """``items`` in as few chunks of at most ``most`` as possible, of near-equal sizes
    (10 in chunks of at most 7: 5 and 5, not 7 and 3)."""
    if not items:
        return []
    count = -(-len(items) // most)
    size = -(-len(items) // count)
    return [items[i : i + size] for i in range(0, len(items), size)]


def _new_figure(height: float | None = None) -> Figure:
    from matplotlib.figure import Figure

    size = (FIG_SIZE[0], height if height is not None else FIG_SIZE[1])
    return Figure(figsize=size, dpi=DPI, layout="constrained")


def _style(i: int) -> dict[str, Any]:
    return {
        "color": COLORS[i % len(COLORS)],
        "marker": MARKERS[i % len(MARKERS)],
        "linestyle": LINESTYLES[i % len(LINESTYLES)],
    }


def _bar_style(i: int) -> dict[str, Any]:
    return {
        "color": "white" if i % 2 == 0 else "#bbbbbb",
        "edgecolor": COLORS[i % len(COLORS)] if i else "black",
        "hatch": HATCHES[i % len(HATCHES)],
        "linewidth": 1.0,
    }


def _grouped_bars(
    ax: Axes,
    table: pd.DataFrame,
    groups: list[Any],
    series: list[Any],
    lo: pd.DataFrame | None = None,
    hi: pd.DataFrame | None = None,
    legend_title: str | None = None,
    legend: bool = True,
) -> None:
    """Bars of ``table`` (index: groups, columns: series), side by side in each group,
    with optional min/max error bars."""
    n = max(len(series), 1)
    width = 0.8 / n
    for i, s in enumerate(series):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        ys = [table.at[g, s] if g in table.index and s in table.columns else math.nan for g in groups]
        kwargs: dict[str, Any] = {}
        if lo is not None and hi is not None:
            err_lo = [max(y - lo.at[g, s], 0.0) if not math.isnan(y) else 0.0 for g, y in zip(groups, ys)]
            err_hi = [max(hi.at[g, s] - y, 0.0) if not math.isnan(y) else 0.0 for g, y in zip(groups, ys)]
            if any(err_lo) or any(err_hi):
                kwargs = {"yerr": [err_lo, err_hi], "capsize": 3, "ecolor": "black"}
        ax.bar(xs, ys, width, label=_fmt(s), **_bar_style(i), **kwargs)
    ax.set_xticks(range(len(groups)), [_fmt(g) for g in groups])
    ax.set_xlim(-0.5, len(groups) - 0.5)
    top = (hi if hi is not None else table).max(numeric_only=True).max()
    _headroom(ax, float(top) if pd.notna(top) else math.nan)
    if legend and len(series) > 1:
        _legend(ax, legend_title)


def _legend(ax: Axes, title: str | None = None) -> None:
    """The legend to the right of the axes, where it hides no data."""
    ax.legend(
        fontsize="small",
        title=title or None,
        title_fontsize="small",
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
    )


def _headroom(ax: Axes, top: float) -> None:
    """y from 0 to 10 % above the highest point (error bars included)."""
    if math.isfinite(top) and top > 0:
        ax.set_ylim(0, top * 1.1)
    else:
        ax.set_ylim(bottom=0)


def _save(fig: Figure, out: Path, name: str) -> tuple[Path, Path]:
    png, pdf = out / f"{name}.png", out / f"{name}.pdf"
    fig.savefig(png, dpi=DPI, metadata={"Software": None})
    fig.savefig(pdf, metadata={"CreationDate": None, "ModDate": None, "Creator": None, "Producer": None})
    return png, pdf


def _agg(frame: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """Mean, min and max of ``value`` over the rows of each ``keys`` combination (the
    seeds)."""
    return frame.groupby(keys, dropna=False, sort=False)[value].agg(["mean", "min", "max"]).reset_index()


def _numeric(frame: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(frame[col], errors="coerce")


# --------------------------------------------------------------------------- figures


@dataclass
class Tables:
    """The optional finer tables a figure may read besides the one row per run:
    ``per_core`` (``load(DIR, table="core")``) and ``per_thread``
    (``load(DIR, table="thread")``: ``run_id``, ``thread``, ``thread.class``,
    ``thread.ops_per_second`` ...)."""

    per_core: pd.DataFrame | None = None
    per_thread: pd.DataFrame | None = None
    # run_id → stats.json's ``intervals`` (runs with ``sim.interval_instructions``).
    intervals: dict[str, list[Any]] | None = None
    # run_id → each core's ``per_core[].partition`` (runs of the ``utility`` controller).
    partitions: dict[str, list[Any]] | None = None


FigureFn = Callable[[pd.DataFrame, Tables], tuple["Figure", str, str]]

POLICY = "config.os.coherence"
THREADS = "config.workload.threads"
MAX_PANELS = 4


def _distinct(frame: pd.DataFrame, cols: list[str]) -> list[str]:
    """``cols`` without those that only repeat an earlier one (one value of each for one
    value of the other, as keys varied together in a ``[zip]`` are)."""
    kept: list[str] = []
    for c in cols:
        same = False
        for k in kept:
            pair = frame[[k, c]].dropna().astype(str)
            if (pair.groupby(k)[c].nunique() <= 1).all() and (pair.groupby(c)[k].nunique() <= 1).all():
                same = True
                break
        if not same:
            kept.append(c)
    return kept


def _workload_first(cols: list[str]) -> list[str]:
    """``workload.*`` keys first (``workload.threads`` first of them), then the rest."""
    return sorted(
        cols,
        key=lambda c: (
            "workload." not in c,
            _short(c) != "workload.threads",
        ),
    )


def _combinations(frame: pd.DataFrame, cols: list[str]) -> int:
    """How many distinct combinations of ``cols`` the rows hold (1 for no column)."""
    if not cols:
        return 1
    return int(frame[cols].astype(str).drop_duplicates().shape[0])


def _panels_and_groups(frame: pd.DataFrame, exclude: Sequence[str]) -> tuple[list[str], list[str]]:
    """How a per-policy figure lays the other varied parameters out: (panel columns,
    x-group columns). Panels are the workloads (``workload.*`` keys other than the thread
    count) when something else varies too (e.g. the threads); otherwise the workloads are
    the x groups of one panel, as in ABIS Fig. 5."""
    # A column that only repeats an excluded one (a swept `policy` beside the policy column
    # it sets) is not laid out again.
    present = [e for e in exclude if e in frame.columns]
    cols = [c for c in _distinct(frame, present + _workload_first(_varied(frame, exclude=exclude))) if c not in present]
    workload = [c for c in cols if "workload." in c and _short(c) != "workload.threads"]
    rest = [c for c in cols if c not in workload]
    if not workload or not rest:
        return [], cols
    if _combinations(frame, workload) > MAX_PANELS:
        return [], cols
    return workload, rest


def _panel_figure(n_panels: int, n_rows: int) -> tuple[Figure, Any]:
    width = FIG_SIZE[0] if n_panels == 1 else min(3.3 * n_panels + 1.6, 15.0)
    height = FIG_SIZE[1] * (1.0 if n_rows == 1 else 0.8 * n_rows)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    return fig, fig.subplots(n_rows, n_panels, squeeze=False)


def _panel_values(df: pd.DataFrame, panel_cols: list[str]) -> list[Any]:
    df["_panel"] = _label(df, panel_cols).astype(str) if panel_cols else "all"
    return _ordered(df["_panel"])


def _panel_bars(
    df: pd.DataFrame,
    ycol: str,
    ylabel: str,
    series: list[str],
    series_title: str,
    panel_cols: list[str],
    group_cols: list[str],
) -> Figure:
    """Bars of ``df[ycol]`` (mean over the rows, error bars min–max): one panel per value
    of ``panel_cols``, one x group per value of ``group_cols``, one bar per ``series``
    (``df["_series"]``); more series than a panel holds go in rows (:func:`_series_families`)."""
    panels = _panel_values(df, panel_cols)
    df["_group"] = _label(df, group_cols).astype(str)
    families = _series_families(df, series)
    fig, axes = _panel_figure(len(panels), len(families))
    for j, panel in enumerate(panels):
        sub = df[df["_panel"] == panel]
        groups = _ordered(sub["_group"])
        g = sub.groupby(["_group", "_series"])[ycol]
        mean, lo, hi = (g.agg(f).unstack("_series") for f in ("mean", "min", "max"))
        for k, (title, family) in enumerate(families):
            ax = axes[k, j]
            legend_title = f"{series_title}: {title}" if title else series_title
            _grouped_bars(ax, mean, groups, family, lo, hi, legend_title, legend=j == len(panels) - 1)
            if j == 0:
                ax.set_ylabel(ylabel)
            if panel_cols or title:
                ax.set_title(": ".join(x for x in (panel if panel_cols else "", title) if x), fontsize="medium")
            ax.grid(axis="y", linestyle=":", linewidth=0.5)
            ax.set_axisbelow(True)
            if len(groups) * len(family) > 12 or max(len(str(g)) for g in groups) > 12:
                ax.tick_params(axis="x", labelrotation=30, labelsize="small")
        axes[-1, j].set_xlabel(", ".join(_short(c) for c in group_cols) or "runs")
    return fig


def _fig_coherence(frame: pd.DataFrame, tables: Tables) -> tuple[Figure, str, str]:
    pol = POLICY
    if not _has(frame, pol):
        raise _Skip("no coherence policy column (config.os.coherence)")
    if _nunique(frame, pol) < 2:
        raise _Skip("only one coherence policy in the results")
    if not _has(frame, "run.makespan_cycles"):
        raise _Skip("no run.makespan_cycles column")
    df = frame.copy()
    panel_cols, group_cols = _panels_and_groups(df, exclude=[pol])
    panels = _panel_values(df, panel_cols)
    df["_group"] = _label(df, group_cols).astype(str)
    df["_policy"] = df[pol].astype(str)
    policies = _policies(df["_policy"])
    base = policies[0]
    df["_makespan"] = _numeric(df, "run.makespan_cycles")
    base_mean = df[df["_policy"] == base].groupby(["_panel", "_group"])["_makespan"].mean()
    keys = pd.MultiIndex.from_frame(df[["_panel", "_group"]])
    df["_norm"] = df["_makespan"].to_numpy() / base_mean.reindex(keys).to_numpy()
    metrics = [("_norm", f"runtime normalized to {base}")]
    if _has(df, "stats.shootdowns_sent"):
        df["_shoot"] = _numeric(df, "stats.shootdowns_sent")
        metrics.append(("_shoot", "shootdowns sent (count)"))
    families = _policy_families(policies)
    rows = [(family, m) for family in families for m in metrics]
    fig, axes = _panel_figure(len(panels), len(rows))
    for j, panel in enumerate(panels):
        sub = df[df["_panel"] == panel]
        groups = _ordered(sub["_group"])
        for k, ((title, family), (col, ylabel)) in enumerate(rows):
            ax = axes[k, j]
            g = sub.groupby(["_group", "_policy"])[col]
            mean, lo, hi = (g.agg(f).unstack("_policy") for f in ("mean", "min", "max"))
            last = j == len(panels) - 1
            first_of_family = col == metrics[0][0]
            legend_title = f"coherence policy: {title}" if title else "coherence policy"
            _grouped_bars(ax, mean, groups, family, lo, hi, legend_title, legend=first_of_family and last)
            if j == 0:
                ax.set_ylabel(ylabel)
            if first_of_family:
                ax.axhline(1.0, color="black", linewidth=0.8)
                if panel_cols:
                    ax.set_title(f"{panel}: {title}" if title else panel, fontsize="medium")
            ax.grid(axis="y", linestyle=":", linewidth=0.5)
            ax.set_axisbelow(True)
            if len(groups) * len(family) > 12 or max(len(str(g)) for g in groups) > 12:
                ax.tick_params(axis="x", labelrotation=30, labelsize="small")
        axes[-1, j].set_xlabel(", ".join(_short(c) for c in group_cols) or "workload")
    caption = (
        f"Per coherence policy: makespan (run.makespan_cycles) divided by the mean makespan "
        f"of the {base!r} policy on the same workload and parameters"
        + (", and shootdowns sent (stats.shootdowns_sent)" if len(metrics) > 1 else "")
        + (f"; one column per {', '.join(_short(c) for c in panel_cols)}" if panel_cols else "")
        + "; bars are means over seeds, error bars min–max."
    )
    return fig, "Runtime and shootdowns per coherence policy", caption


def _fig_throughput(frame: pd.DataFrame, tables: Tables) -> tuple[Figure, str, str]:
    threads = THREADS
    if not _has(frame, threads) or _nunique(frame, threads) < 2:
        raise _Skip("config.workload.threads does not vary")
    pt = tables.per_thread
    need = ("run_id", "thread.class", "thread.ops_per_second")
    if pt is None or pt.empty or not all(c in pt.columns for c in need):
        raise _Skip(
            "no per-thread results (results_per_thread.parquet with thread.class and "
            "thread.ops_per_second: OS-mode workloads only)"
        )
    pt = pt[pt["run_id"].isin(frame["run_id"])].copy()
    if pt.empty:
        raise _Skip("no per-thread results for these runs")
    pt["_tput"] = pd.to_numeric(pt["thread.ops_per_second"], errors="coerce")
    pt["_class"] = pt["thread.class"].astype(str)
    # A class's throughput in a run: the sum over its threads (stats.json's per_class).
    per_run = pt.groupby(["run_id", "_class"])["_tput"].sum().reset_index()
    others = _independent_of(frame, _varied(frame, exclude=[threads]), threads)
    others = _distinct(frame, _workload_first(others))
    panel_cols = [c for c in others if "workload." in c]
    if _combinations(frame, panel_cols) > MAX_PANELS:
        panel_cols = []
    series_cols = [c for c in others if c not in panel_cols]
    df = per_run.merge(frame[["run_id", threads, *others]], on="run_id")
    df["_threads"] = pd.to_numeric(df[threads], errors="coerce")
    panels = _panel_values(df, panel_cols)
    # One class per panel (each workload has its own): the class goes in the panel title
    # and the series are the other parameters (the policies); otherwise class · others.
    one_class = bool(panel_cols) and bool((df.groupby("_panel")["_class"].nunique() == 1).all())
    others_label = _label(df, series_cols).astype(str) if series_cols else None
    if one_class and others_label is not None:
        df["_series"] = others_label
    elif others_label is not None:
        df["_series"] = df["_class"] + " · " + others_label
    else:
        df["_series"] = df["_class"]
    known = _known_policies()

    policy_of = _series_policy(df)

    def series_key(s: str) -> tuple[Any, ...]:
        parts = [policy_of[s]] if s in policy_of else s.split(" · ")
        rank = [known.index(p) if p in known else len(known) for p in parts]
        return (*rank, _sort_key(s))

    # The same style for a series in every panel, policies in the simulator's order.
    all_series = sorted(_ordered(df["_series"]), key=series_key)
    # More series than a panel holds: one row per family (baselines, techniques, unsafe).
    families = _series_families(df, all_series) if one_class else [("", all_series)]
    fig, axes = _panel_figure(len(panels), len(families))
    for j, panel in enumerate(panels):
        sub = df[df["_panel"] == panel]
        agg = _agg(sub, ["_series", "_threads"], "_tput")
        xs = _ordered(sub["_threads"])
        for k, (family_title, family) in enumerate(families):
            ax = axes[k, j]
            for i, s in enumerate(family):
                a = agg[agg["_series"] == s].sort_values("_threads")
                if a.empty:
                    continue
                ax.errorbar(
                    a["_threads"],
                    a["mean"],
                    # clipped at 0: the mean of equal values may differ from them by rounding
                    yerr=[(a["mean"] - a["min"]).clip(lower=0), (a["max"] - a["mean"]).clip(lower=0)],
                    label=s,
                    capsize=3,
                    # later series smaller, so that equal curves all stay visible
                    markersize=max(8.0 - 1.5 * i, 3.0),
                    **_style(i),
                )
            ax.set_xticks(xs, [_fmt(v) for v in xs])
            if j == 0:
                ax.set_ylabel("throughput (operations/s)")
            if panel_cols:
                classes = ", ".join(sorted(sub["_class"].unique()))
                name = f"{panel} ({classes} threads)" if one_class else panel
                ax.set_title(f"{name}: {family_title}" if family_title else name, fontsize="medium")
            _headroom(ax, float(agg["max"].max()))
            ax.grid(linestyle=":", linewidth=0.5)
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
        axes[-1, j].set_xlabel("threads (config.workload.threads)")
    title = (
        ", ".join(_short(c) for c in series_cols)
        if one_class
        else "thread class" + (" · " + ", ".join(_short(c) for c in series_cols) if series_cols else "")
    )
    for k, (family_title, family) in enumerate(families):
        handles: dict[str, Any] = {}
        for ax in axes[k]:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(lab, h)
        if len(handles) > 1:
            axes[k, -1].legend(
                [handles[s] for s in family if s in handles],
                [s for s in family if s in handles],
                fontsize="small",
                title=f"{title}: {family_title}" if family_title else title,
                title_fontsize="small",
                loc="upper left",
                bbox_to_anchor=(1.01, 1.0),
                borderaxespad=0.0,
            )
    caption = (
        "Throughput of each thread class against the number of threads: the sum of the "
        "class's per-thread operations per simulated second (thread.ops_per_second of "
        "results_per_thread.parquet, as stats.json's per_class)"
        + (f"; one panel per {', '.join(_short(c) for c in panel_cols)}" if panel_cols else "")
        + "; mean over seeds, error bars min–max."
    )
    return fig, "Throughput against threads per thread class", caption


def _histogram(value: Any) -> list[float] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value):
        return [float(v) for v in value]
    return None


def _series_of_policies(df: pd.DataFrame) -> list[str]:
    """Series of a per-policy figure: the policies when they vary, else the varied
    parameters; sets ``df["_series"]``; returns the series columns."""
    cols = [POLICY] if _has(df, POLICY) and _nunique(df, POLICY) > 1 else _varied(df)
    df["_series"] = _label(df, cols).astype(str)
    return cols


def _fig_targets(frame: pd.DataFrame, tables: Tables) -> tuple[Figure, str, str]:
    hist_col = "stats.targets_per_shootdown"
    if not _has(frame, hist_col):
        raise _Skip(f"no {hist_col} (histogram) in the results: OS-mode workloads only")
    df = frame.copy()
    df["_hist"] = df[hist_col].map(_histogram)
    df = df[df["_hist"].notna()]
    if df.empty or not any(sum(h) > 0 for h in df["_hist"]):
        raise _Skip("no run sent a shootdown")
    series_cols = _series_of_policies(df)
    series = _policies(df["_series"])
    panel_cols = [c for c in _distinct(df, _workload_first(_varied(df, exclude=[POLICY, THREADS]))) if "workload." in c]
    if _combinations(df, panel_cols) > MAX_PANELS:
        panel_cols = []
    panels = _panel_values(df, panel_cols)
    width = max(len(h) for h in df["_hist"])
    families = _series_families(df, series)
    fig, axes = _panel_figure(len(panels), len(families))
    for j, panel in enumerate(panels):
        sub = df[df["_panel"] == panel]
        for k, (family_title, family) in enumerate(families):
            ax = axes[k, j]
            n = len(family)
            for i, s in enumerate(family):
                total = [0.0] * width
                for h in sub.loc[sub["_series"] == s, "_hist"]:
                    for m, v in enumerate(h):
                        total[m] += v
                count = sum(total)
                label = s if count else f"{s} (no shootdowns)"
                frac = [v / count if count else 0.0 for v in total]
                xs = [m + (i - (n - 1) / 2) * (0.8 / n) for m in range(width)]
                ax.bar(xs, frac, 0.8 / n, label=label, **_bar_style(i))
            if j == 0:
                ax.set_ylabel("fraction of shootdowns")
            if panel_cols or family_title:
                name = panel if panel_cols else ""
                ax.set_title(": ".join(x for x in (name, family_title) if x), fontsize="medium")
            ax.set_xticks(range(width))
            ax.set_ylim(0, 1.05)
            ax.grid(axis="y", linestyle=":", linewidth=0.5)
            ax.set_axisbelow(True)
            if n > 1 and j == len(panels) - 1:
                _legend(ax, ", ".join(_short(c) for c in series_cols))
        axes[-1, j].set_xlabel("target cores per shootdown (count)")
    caption = (
        "Distribution of the number of target cores per shootdown "
        f"({hist_col}, a histogram indexed by target count; the last bucket counts that "
        "many or more), summed over the runs of each series"
        + (f" and {', '.join(_short(c) for c in panel_cols)}" if panel_cols else "")
        + " (all thread counts and seeds) and normalized to a fraction of all shootdowns."
    )
    return fig, "Targets per shootdown", caption


def _fig_false_positives(frame: pd.DataFrame, tables: Tables) -> tuple[Figure, str, str]:
    fp_col, sent_col = "stats.false_positive_targets", "stats.shootdowns_sent"
    if not _has(frame, fp_col):
        raise _Skip(f"no {fp_col} in the results: OS-mode workloads only")
    df = frame.copy()
    df["_fp"] = _numeric(df, fp_col)
    per_sd = _has(df, sent_col)
    if per_sd:
        sent = _numeric(df, sent_col)
        df["_fp"] = df["_fp"] / sent.where(sent > 0)
        if df["_fp"].isna().all():
            raise _Skip("no run sent a shootdown")
    series_cols = _series_of_policies(df)
    series = _policies(df["_series"])
    exclude = [POLICY] if series_cols == [POLICY] else series_cols
    panel_cols, group_cols = _panels_and_groups(df, exclude=exclude)
    fig = _panel_bars(
        df,
        "_fp",
        "false-positive targets per shootdown" if per_sd else "false-positive targets (count)",
        series,
        ", ".join(_short(c) for c in series_cols),
        panel_cols,
        group_cols,
    )
    caption = (
        f"False-positive targets (cores interrupted that held no stale entry, {fp_col})"
        + (f" divided by shootdowns sent ({sent_col}; no bar where a policy sent none)" if per_sd else "")
        + "; mean over seeds, error bars min–max."
    )
    return fig, "False-positive targets per shootdown", caption


def _fig_mpki(frame: pd.DataFrame, tables: Tables) -> tuple[Figure, str, str]:
    x = "config.machine.tlb.l1d.entries"
    y1 = "run.l1_tlb_misses_per_10k_instructions"
    y2 = "run.l2_tlb_misses_per_10k_instructions"
    if not _has(frame, x):
        raise _Skip(f"no {x} column")
    if _nunique(frame, x) < 2:
        raise _Skip("the L1 data TLB size does not vary")
    if not _has(frame, y1):
        raise _Skip(f"no {y1} column")
    df = frame.copy()
    df["_x"] = _numeric(df, x)
    l2_lookups = 0.0
    for c in ("stats.l2_tlb_hits", "stats.l2_tlb_misses"):
        if _has(df, c):
            l2_lookups += float(_numeric(df, c).fillna(0).sum())
    panels = [(y1, "L1 data TLB misses / 10k instructions")]
    if _has(df, y2) and l2_lookups > 0:
        panels.append((y2, "L2 TLB misses / 10k instructions"))
    series_cols = _independent_of(df, _varied(df, exclude=[x]), x)
    df["_series"] = _label(df, series_cols)
    series = _ordered(df["_series"])
    fig = _new_figure(height=FIG_SIZE[1] * (1.6 if len(panels) > 1 else 1))
    axes = fig.subplots(len(panels), 1, squeeze=False, sharex=True)[:, 0]
    for ax, (col, ylabel) in zip(axes, panels):
        df["_y"] = _numeric(df, col)
        agg = _agg(df, ["_series", "_x"], "_y")
        for i, s in enumerate(series):
            a = agg[agg["_series"] == s].sort_values("_x")
            ax.errorbar(
                a["_x"],
                a["mean"],
                yerr=[(a["mean"] - a["min"]).clip(lower=0), (a["max"] - a["mean"]).clip(lower=0)],
                label=_fmt(s),
                capsize=3,
                **_style(i),
            )
        ax.set_xscale("log", base=2)
        xs = _ordered(df["_x"])
        ax.set_xticks(xs, [_fmt(v) for v in xs])
        ax.minorticks_off()
        ax.set_ylabel(ylabel)
        _headroom(ax, float(agg["max"].max()))
        ax.grid(linestyle=":", linewidth=0.5)
    if len(series) > 1:
        _legend(axes[0], ", ".join(_short(c) for c in series_cols))
    axes[-1].set_xlabel("L1 data TLB entries (config.machine.tlb.l1d.entries, log2 scale)")
    caption = (
        "TLB misses per 10,000 instructions (run.l1_tlb_misses_per_10k_instructions"
        + (", run.l2_tlb_misses_per_10k_instructions" if len(panels) > 1 else "")
        + ") against the L1 data TLB size; one line per value of the other varied "
        "parameters; points are means over seeds, error bars min–max."
    )
    return fig, "TLB misses against TLB size", caption


def _fig_walk_cycles(frame: pd.DataFrame, tables: Tables) -> tuple[Figure, str, str]:
    if len(frame) < 2:
        raise _Skip("fewer than 2 runs")
    if not (_has(frame, "stats.walk_cycles") and _has(frame, "stats.walks")):
        raise _Skip("no stats.walk_cycles / stats.walks columns")
    df = frame.copy()
    walks = _numeric(df, "stats.walks")
    df["_y"] = _numeric(df, "stats.walk_cycles") / walks.where(walks > 0)
    if df["_y"].isna().all():
        raise _Skip("no run made a page walk")
    if _has(df, POLICY) and _nunique(df, POLICY) > 1:
        # Per policy, laid out as the other per-policy figures.
        df["_series"] = df[POLICY].astype(str)
        panel_cols, group_cols = _panels_and_groups(df, exclude=[POLICY])
        fig = _panel_bars(
            df,
            "_y",
            "page-walk cycles per walk (cycles)",
            _policies(df["_series"]),
            "os.coherence",
            panel_cols,
            group_cols,
        )
        caption = (
            "Mean page-walk latency: stats.walk_cycles divided by stats.walks, per coherence "
            "policy"
            + (f" and {', '.join(_short(c) for c in group_cols)}" if group_cols else "")
            + (f"; one panel per {', '.join(_short(c) for c in panel_cols)}" if panel_cols else "")
            + "; bars are means over seeds, error bars min–max."
        )
        return fig, "Walk cycles per walk", caption
    cols = _varied(df)
    seed = _seed_col(df)
    if not cols:
        cols = [seed] if seed and _nunique(df, seed) > 1 else ["run_id"]
    # The first varied parameter is the x axis; any others make series.
    xcol, others = cols[0], cols[1:]
    df["_x"] = df[xcol].map(_fmt)
    df["_series"] = _label(df, others)
    groups = _ordered(df["_x"])
    series = _ordered(df["_series"])
    g = df.groupby(["_x", "_series"])["_y"]
    mean, lo, hi = (g.agg(f).unstack("_series") for f in ("mean", "min", "max"))
    fig = _new_figure()
    ax = fig.subplots()
    _grouped_bars(ax, mean, groups, series, lo, hi, ", ".join(_short(c) for c in others))
    ax.set_xlabel(_short(xcol))
    ax.set_ylabel("page-walk cycles per walk (cycles)")
    ax.grid(axis="y", linestyle=":", linewidth=0.5)
    ax.set_axisbelow(True)
    if len(groups) > 8:
        ax.tick_params(axis="x", labelrotation=45)
    caption = (
        "Mean page-walk latency: stats.walk_cycles divided by stats.walks, per value of "
        f"{_short(xcol)}"
        + (f" and {', '.join(_short(c) for c in others)}" if others else "")
        + "; bars are means over seeds, error bars min–max."
    )
    return fig, "Walk cycles per walk", caption


def _per_run_panels(frame: pd.DataFrame, runs: dict[str, Any], ylabel: str) -> Iterator[tuple[Any, str, Any]]:
    """One panel per run of ``runs`` (at most MAX_PANELS), titled by what varies, the
    first with ``ylabel``: yields (axes, run_id, the run's data); the figure is
    ``ax.figure``."""
    ids = sorted(runs)[:MAX_PANELS]
    varied = _varied(frame) if _has(frame, "run_id") else []
    names = dict(zip(frame["run_id"].astype(str), _label(frame, varied).astype(str))) if varied else {}
    _, axes = _panel_figure(len(ids), 1)
    for j, run_id in enumerate(ids):
        ax = axes[0, j]
        ax.set_title(names.get(run_id, run_id), fontsize="medium")
        ax.grid(linestyle=":", linewidth=0.5)
        if j == 0:
            ax.set_ylabel(ylabel)
        yield ax, run_id, runs[run_id]
    _legend(axes[0, -1], "domain")


def _fig_intervals(frame: pd.DataFrame, tables: Tables) -> tuple[Figure, str, str]:
    runs = {k: v for k, v in (tables.intervals or {}).items() if v}
    if not runs:
        raise _Skip("no run has intervals (sim.interval_instructions with VMs)")
    for ax, _, intervals in _per_run_panels(frame, runs, "DTLB misses per 10k instructions"):
        # The CPU most VMs ran on (CPU 1 in the tag paper's 0012 runs).
        cpus = sorted({i["cpu"] for i in intervals})
        cpu = max(cpus, key=lambda c: (len({v["vm"] for i in intervals if i["cpu"] == c for v in i["per_vm"]}), -c))
        mine = [i for i in intervals if i["cpu"] == cpu]
        vms = sorted({v["vm"] for i in mine for v in i["per_vm"]})
        for k, vm in enumerate(vms):
            xs = [i["end_cycle"] for i in mine for v in i["per_vm"] if v["vm"] == vm]
            ys = [v["dtlb_mptti"] for i in mine for v in i["per_vm"] if v["vm"] == vm]
            ax.plot(xs, ys, label=f"dom{vm}", **_style(k))
        total = [
            sum(v["dtlb_mptti"] * v["instructions"] for v in i["per_vm"]) / max(1, i["instructions"]) for i in mine
        ]
        ax.plot([i["end_cycle"] for i in mine], total, label="CPU average", color="#7f7f7f", linestyle=":")
        ax.set_xlabel(f"cycle (CPU {cpu})")
    caption = (
        "DTLB MPTTI per domain over time, as the tag paper's Fig. 11: stats.json's intervals "
        "(each CPU's run cut every sim.interval_instructions instructions it retires), on the CPU "
        "the most domains ran on; the dotted line is that CPU's MPTTI over all domains. One panel "
        f"per run (at most {MAX_PANELS})."
    )
    return ax.figure, "MPTTI over time per domain", caption


def _fig_partitions(frame: pd.DataFrame, tables: Tables) -> tuple[Figure, str, str]:
    runs = {k: v for k, v in (tables.partitions or {}).items() if any(v)}
    if not runs:
        raise _Skip("no run of the utility partition controller (machine.tlb.partition_controller)")
    for ax, _, cores in _per_run_panels(frame, runs, "L1 DTLB entries allotted"):
        # The core whose history names the most domains (CPU 1 in the tag paper's 0012).
        def levels(p: Any) -> int:
            return max((sum(1 for q in e.get("l1d", []) if q) for e in p["history"]), default=0) if p else -1

        cpu = max(range(len(cores)), key=lambda c: (levels(cores[c]), -c))
        history = cores[cpu]["history"] if cores[cpu] else []
        width = max((len(e.get("l1d", [])) for e in history), default=0)
        xs = [e["instructions"] for e in history]
        for vm in range(width):
            ys = [e["l1d"][vm] if vm < len(e.get("l1d", [])) else 0 for e in history]
            if any(ys):
                ax.step(xs, ys, where="post", label=f"dom{vm}", **_style(vm))
        ax.set_xlabel(f"instructions retired (CPU {cpu})")
    caption = (
        "The utility partition controller's quotas over time: the L1 DTLB entries each domain "
        "(service level) is allotted after each epoch (per_core[].partition.history), on the core "
        f"whose quotas name the most domains. One panel per run (at most {MAX_PANELS})."
    )
    return ax.figure, "TLB partition quotas over time", caption


FIGURES: list[tuple[str, FigureFn]] = [
    ("coherence_runtime", _fig_coherence),
    ("throughput_threads", _fig_throughput),
    ("targets_per_shootdown", _fig_targets),
    ("false_positives", _fig_false_positives),
    ("tlb_mpki_vs_size", _fig_mpki),
    ("walk_cycles_per_walk", _fig_walk_cycles),
    ("mptti_intervals", _fig_intervals),
    ("partition_quotas", _fig_partitions),
]


# --------------------------------------------------------------------------- HTML

_CSS = """
body { font-family: sans-serif; max-width: 60em; margin: 1em auto; padding: 0 1em; color: #111; }
figure { margin: 1.5em 0; }
img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption, .note { font-size: 0.9em; color: #333; }
table { border-collapse: collapse; font-size: 0.8em; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.5em; text-align: right; }
th { background: #eee; }
td:first-child { text-align: left; font-family: monospace; }
"""


TABLE_ORDER = ("config.workload.kind", "config.workload.threads", "config.os.coherence", "config.os.recycling")


def _table_html(frame: pd.DataFrame) -> str:
    cols: list[tuple[str, str]] = []
    if "run_id" in frame.columns:
        cols.append(("run_id", "run"))
    seed = _seed_col(frame)
    for c in _varied(frame) + ([seed] if seed and _nunique(frame, seed) > 1 else []):
        cols.append((c, _short(c)))
    cols += [(c, label) for c, label in TABLE_METRICS if c in frame.columns]
    # Sorted by workload, threads, policy (then the rest of the key), not by run hash, so
    # that the rows of one comparison stand together.
    order = [c for c in TABLE_ORDER if c in frame.columns]
    order += [c for c, _ in cols if c not in order and c != "run_id"]
    if order:
        frame = frame.sort_values(order, kind="stable", key=lambda col: col.map(_sort_key))
    rows = frame.head(MAX_TABLE_ROWS)
    out = ["<table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for _, h in cols) + "</tr>"]
    for _, row in rows.iterrows():
        cells = []
        for c, _ in cols:
            v = row[c]
            if isinstance(v, float):
                text = "" if math.isnan(v) else (f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}")
            elif isinstance(v, int) and not isinstance(v, bool):
                text = f"{v:,}"
            else:
                text = str(v)
            cells.append(f"<td>{html.escape(text)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    if len(frame) > MAX_TABLE_ROWS:
        out.append(f'<p class="note">First {MAX_TABLE_ROWS} of {len(frame)} runs.</p>')
    return "\n".join(out)


def _write_html(
    summary: ReportSummary, frame: pd.DataFrame, title: str, sections: Sequence[tuple[str, str]] = ()
) -> None:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        (
            f'<p class="note">{len(frame)} run(s); {len(summary.figures)} figure(s). '
            "Each figure is also in this folder as PNG and PDF.</p>"
        ),
    ]
    # Text sections (a caller's tables, e.g. the demo's terminal output), verbatim.
    for heading, text in sections:
        parts += [f"<h2>{html.escape(heading)}</h2>", f"<pre>{html.escape(text)}</pre>"]
    for f in summary.figures:
        data = base64.b64encode(f.png.read_bytes()).decode("ascii")
        parts += [
            f'<h2 id="{f.name}">{html.escape(f.title)}</h2>',
            "<figure>",
            f'<img alt="{html.escape(f.title)}" src="data:image/png;base64,{data}">',
            (
                f"<figcaption>{html.escape(f.caption)} "
                f"(<code>{html.escape(f.png.name)}</code>, <code>{html.escape(f.pdf.name)}</code>)"
                "</figcaption>"
            ),
            "</figure>",
        ]
    if summary.skipped:
        parts.append("<h2>Figures not made</h2><ul>")
        parts += [f"<li>{html.escape(n)}: {html.escape(r)}</li>" for n, r in summary.skipped.items()]
        parts.append("</ul>")
    parts += ["<h2>Runs</h2>", _table_html(frame), "</body></html>", ""]
    summary.index.write_text("\n".join(parts), encoding="utf-8")


# --------------------------------------------------------------------------- API


def build_report(
    frame: pd.DataFrame,
    out: str | os.PathLike[str],
    per_core: pd.DataFrame | None = None,
    per_thread: pd.DataFrame | None = None,
    *,
    title: str = "tlbsim report",
    intervals: dict[str, list[Any]] | None = None,
    partitions: dict[str, list[Any]] | None = None,
    sections: Sequence[tuple[str, str]] = (),
    elsewhere: Mapping[str, str] | None = None,
) -> ReportSummary:
    """Write the figures the results support, and ``out/index.html``, into ``out``.

    ``frame``: one row per run (``run_id``, ``param.*``, ``config.*``, ``stats.*``,
    ``run.*``), as ``tlbsim.load(DIR)`` returns; ``per_core``: optionally one row per run
    and core, as ``load(DIR, table="core")``; ``per_thread``: optionally one row per run
    and simulated thread (``run_id``, ``thread.class``, ``thread.ops_per_second`` ...), as
    ``load(DIR, table="thread")`` (the throughput figure needs it). Returns which figures
    were made and which were skipped, with the reason. ``sections``: (heading, text) pairs
    shown as preformatted text before the figures. ``elsewhere``: figure name -> where a
    figure these runs cannot make is made instead (another sweep's report), said in place
    of the reason it was not made here.
    """
    import matplotlib

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = ReportSummary(out=out, index=out / "index.html")
    tables = Tables(per_core=per_core, per_thread=per_thread, intervals=intervals, partitions=partitions)
    if frame.empty:
        for name, _ in FIGURES:
            summary.skipped[name] = "no runs"
    else:
        frame = frame.reset_index(drop=True)
        with matplotlib.rc_context(matplotlib.rcParamsDefault):
            matplotlib.rcParams.update({"svg.hashsalt": "tlbsim", "font.size": 10})
            for name, fn in FIGURES:
                try:
                    fig, fig_title, caption = fn(frame, tables)
                except _Skip as skip:
                    summary.skipped[name] = str(skip)
                    continue
                fig.suptitle(fig_title)
                png, pdf = _save(fig, out, name)
                summary.figures.append(FigureInfo(name, fig_title, caption, png, pdf))
    for name, where in (elsewhere or {}).items():
        if name in summary.skipped:
            summary.skipped[name] = f"made from other runs: {where}"
    _write_html(summary, frame, title, sections)
    return summary


def report(
    directory: str | os.PathLike[str] | pd.DataFrame,
    out: str | os.PathLike[str] | None = None,
    sections: Sequence[tuple[str, str]] = (),
    elsewhere: Mapping[str, str] | None = None,
) -> ReportSummary:
    """The report of a sweep directory (default output: ``DIR/report``; it reads the
    run, core and thread tables of :func:`tlbsim.load`) or of a results table already
    loaded (``out`` is then required). ``sections``: (heading, text) pairs the page shows
    before the figures; ``elsewhere``: as :func:`build_report`'s."""
    if isinstance(directory, pd.DataFrame):
        if out is None:
            raise ValueError("out is required when the results are given as a DataFrame")
        return build_report(directory, out, sections=sections, elsewhere=elsewhere)
    from tlbsim.store import load  # written alongside the sweeps; imported only here

    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(2, "No such directory", str(root))
    frame = load(root)
    finer: dict[str, pd.DataFrame | None] = {}
    for table in ("core", "thread"):
        try:
            finer[table] = load(root, table=table)
        except (TypeError, ValueError, KeyError):
            finer[table] = None
    return build_report(
        frame,
        Path(out) if out is not None else root / "report",
        finer["core"],
        finer["thread"],
        title=f"tlbsim report: {root.resolve().name}",
        intervals=_intervals(root, frame),
        partitions=_partitions(root, frame),
        sections=sections,
        elsewhere=elsewhere,
    )


def _from_stats(root: Path, run_ids: Iterable[Any], part: Callable[[dict[str, Any]], Any]) -> dict[str, Any] | None:
    """``part(stats.json)`` of each run of ``run_ids`` (read only for those)."""
    out: dict[str, Any] = {}
    for run_id in run_ids:
        path = root / "runs" / str(run_id) / "stats.json"
        try:
            out[str(run_id)] = part(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out or None


def _intervals(root: Path, frame: pd.DataFrame) -> dict[str, list[Any]] | None:
    """stats.json's ``intervals`` of the runs that counted them."""
    col = "config.sim.interval_instructions"
    if not _has(frame, col):
        return None
    chosen = frame.loc[pd.to_numeric(frame[col], errors="coerce").fillna(0) > 0, "run_id"]
    return _from_stats(root, chosen, lambda s: s.get("intervals") or [])


def _partitions(root: Path, frame: pd.DataFrame) -> dict[str, list[Any]] | None:
    """Each core's ``partition`` of the runs of the utility controller."""
    col = "config.machine.tlb.partition_controller"
    if not _has(frame, col):
        return None
    chosen = frame.loc[frame[col].astype(str) == "utility", "run_id"]
    return _from_stats(root, chosen, lambda s: [c.get("partition") for c in s.get("per_core", [])])
