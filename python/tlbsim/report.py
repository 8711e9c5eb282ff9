"""Figures and one self-contained HTML page from a sweep's results.

``report(DIR)`` loads a sweep directory with :func:`tlbsim.store.load` and calls
:func:`build_report`, which takes the results table (one row per run: ``run_id``,
``param.*``, ``config.*``, ``stats.*``, ``run.*`` columns) and writes into ``out``:

- ``<figure>.png`` and ``<figure>.pdf`` for each figure the results can support;
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["FigureInfo", "ReportSummary", "build_report", "report"]

FIG_SIZE = (7.0, 4.2)  # inches
DPI = 120
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
LINESTYLES = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1))]
HATCHES = ["", "//", "..", "xx", "\\\\", "++", "oo", "--", "**", "||"]
# Greys and a few colours dark enough to print as distinct greys.
COLORS = ["#222222", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#7f7f7f"]
SEED_KEYS = ("param.seed", "config.seed")
MAX_TABLE_ROWS = 200
# Columns of the runs table, when present (beside run_id and the varied parameters).
TABLE_METRICS = [
    ("run.makespan_cycles", "makespan (cycles)"),
    ("run.l1_tlb_misses_per_10k_instructions", "L1 TLB misses / 10k instr"),
    ("run.l2_tlb_misses_per_10k_instructions", "L2 TLB misses / 10k instr"),
    ("run.walks_per_10k_instructions", "walks / 10k instr"),
    ("stats.shootdowns_sent", "shootdowns sent"),
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
    if len(cols) == 1:
        return frame[cols[0]].map(_fmt)
    return frame[cols].apply(
        lambda row: ", ".join(f"{_short(c).rsplit('.', 1)[-1]}={_fmt(row[c])}" for c in cols),
        axis=1,
    )


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


def _policies(values: pd.Series) -> list[str]:
    """The distinct values in order of appearance, ``linux`` (the baseline) first."""
    seen = [str(v) for v in pd.unique(values.astype(str))]
    return sorted(seen, key=lambda p: p != "linux")


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
        ys = [
            table.at[g, s] if g in table.index and s in table.columns else math.nan for g in groups
        ]
        kwargs: dict[str, Any] = {}
        if lo is not None and hi is not None:
            err_lo = [
                max(y - lo.at[g, s], 0.0) if not math.isnan(y) else 0.0 for g, y in zip(groups, ys)
            ]
            err_hi = [
                max(hi.at[g, s] - y, 0.0) if not math.isnan(y) else 0.0 for g, y in zip(groups, ys)
            ]
            if any(err_lo) or any(err_hi):
                kwargs = {"yerr": [err_lo, err_hi], "capsize": 3, "ecolor": "black"}
        ax.bar(xs, ys, width, label=_fmt(s), **_bar_style(i), **kwargs)
    ax.set_xticks(range(len(groups)), [_fmt(g) for g in groups])
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
    fig.savefig(
        pdf, metadata={"CreationDate": None, "ModDate": None, "Creator": None, "Producer": None}
    )
    return png, pdf


def _agg(frame: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """Mean, min and max of ``value`` over the rows of each ``keys`` combination (the
    seeds)."""
    return (
        frame.groupby(keys, dropna=False, sort=False)[value]
        .agg(["mean", "min", "max"])
        .reset_index()
    )


def _numeric(frame: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(frame[col], errors="coerce")


# --------------------------------------------------------------------------- figures

FigureFn = Callable[[pd.DataFrame, "pd.DataFrame | None"], tuple["Figure", str, str]]


def _fig_coherence(frame: pd.DataFrame, per_core: pd.DataFrame | None) -> tuple[Figure, str, str]:
    pol = "config.os.coherence"
    if not _has(frame, pol):
        raise _Skip("no coherence policy column (config.os.coherence)")
    if _nunique(frame, pol) < 2:
        raise _Skip("only one coherence policy in the results")
    if not _has(frame, "run.makespan_cycles"):
        raise _Skip("no run.makespan_cycles column")
    df = frame.copy()
    workload_cols = _varied(df, exclude=[pol])
    workload_cols = [c for c in workload_cols if "workload" in c] or workload_cols
    df["_workload"] = _label(df, workload_cols)
    df["_policy"] = df[pol].astype(str)
    policies = _policies(df["_policy"])
    base = policies[0]
    workloads = _ordered(df["_workload"])
    df["_makespan"] = _numeric(df, "run.makespan_cycles")
    base_mean = df[df["_policy"] == base].groupby("_workload")["_makespan"].mean()
    df["_norm"] = df["_makespan"] / df["_workload"].map(base_mean)
    shoot = _has(df, "stats.shootdowns_sent")
    fig = _new_figure(height=FIG_SIZE[1] * (1.6 if shoot else 1))
    axes = fig.subplots(2 if shoot else 1, 1, squeeze=False)[:, 0]
    panels = [("_norm", f"runtime normalized to {base}")]
    if shoot:
        df["_shoot"] = _numeric(df, "stats.shootdowns_sent")
        panels.append(("_shoot", "shootdowns sent (count)"))
    for k, (ax, (col, ylabel)) in enumerate(zip(axes, panels)):
        g = df.groupby(["_workload", "_policy"])[col]
        mean, lo, hi = (g.agg(f).unstack("_policy") for f in ("mean", "min", "max"))
        _grouped_bars(ax, mean, workloads, policies, lo, hi, "coherence policy", legend=k == 0)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", linestyle=":", linewidth=0.5)
        ax.set_axisbelow(True)
    axes[0].axhline(1.0, color="black", linewidth=0.8)
    axes[-1].set_xlabel(", ".join(_short(c) for c in workload_cols) or "workload")
    caption = (
        f"Per workload and coherence policy: makespan (run.makespan_cycles) divided by the "
        f"mean makespan of the {base!r} policy on the same workload"
        + (", and shootdowns sent (stats.shootdowns_sent)" if shoot else "")
        + "; bars are means over seeds, error bars min–max."
    )
    return fig, "Runtime and shootdowns per coherence policy", caption


def _fig_throughput(frame: pd.DataFrame, per_core: pd.DataFrame | None) -> tuple[Figure, str, str]:
    threads = "config.workload.threads"
    if not _has(frame, threads) or _nunique(frame, threads) < 2:
        raise _Skip("config.workload.threads does not vary")
    if per_core is None or "run_id" not in per_core.columns:
        raise _Skip("no per-thread results")
    ops_col = next((c for c in ("ops", "stats.ops", "operations") if c in per_core.columns), None)
    if ops_col is None:
        raise _Skip("no per-thread operation counts (ops) in the per-core results")
    if not _has(frame, "run.seconds"):
        raise _Skip("no run.seconds column")
    cls_col = next(
        (c for c in ("thread_class", "class", "stats.thread_class") if c in per_core.columns), None
    )
    pc = per_core[per_core["run_id"].isin(frame["run_id"])].copy()
    if "core" in pc.columns:
        pc = pc[pc["core"].astype(str) != "total"]
    pc["_ops"] = pd.to_numeric(pc[ops_col], errors="coerce")
    pc["_class"] = pc[cls_col].astype(str) if cls_col else "all threads"
    per_run = pc.groupby(["run_id", "_class"])["_ops"].sum().reset_index()
    meta = frame[["run_id", threads, "run.seconds"]].copy()
    df = per_run.merge(meta, on="run_id")
    df["_tput"] = df["_ops"] / pd.to_numeric(df["run.seconds"], errors="coerce")
    df["_threads"] = pd.to_numeric(df[threads], errors="coerce")
    others = _independent_of(frame, _varied(frame, exclude=[threads]), threads)
    if others:
        df = df.merge(frame[["run_id", *others]], on="run_id")
        df["_series"] = df["_class"] + " · " + _label(df, others)
    else:
        df["_series"] = df["_class"]
    agg = _agg(df, ["_series", "_threads"], "_tput")
    fig = _new_figure()
    ax = fig.subplots()
    for i, s in enumerate(_ordered(agg["_series"])):
        a = agg[agg["_series"] == s].sort_values("_threads")
        ax.errorbar(
            a["_threads"],
            a["mean"],
            yerr=[a["mean"] - a["min"], a["max"] - a["mean"]],
            label=s,
            capsize=3,
            **_style(i),
        )
    ax.set_xlabel("threads (config.workload.threads)")
    ax.set_ylabel("throughput (operations/s)")
    _headroom(ax, float(agg["max"].max()))
    ax.grid(linestyle=":", linewidth=0.5)
    _legend(ax, "thread class")
    caption = (
        "Throughput of each thread class against the number of threads: operations "
        f"completed by the class's threads ({ops_col}) divided by the run's simulated time "
        "(run.seconds); mean over seeds, error bars min–max."
    )
    return fig, "Throughput against threads", caption


def _histogram(value: Any) -> list[float] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value):
        return [float(v) for v in value]
    return None


def _fig_targets(frame: pd.DataFrame, per_core: pd.DataFrame | None) -> tuple[Figure, str, str]:
    hist_col, fp_col = "stats.targets_per_shootdown", "stats.false_positive_targets"
    pol = "config.os.coherence"
    df = frame.copy()
    series_cols = [pol] if _has(df, pol) and _nunique(df, pol) > 1 else _varied(df)
    df["_series"] = _label(df, series_cols).astype(str)
    series = _policies(df["_series"])
    if _has(df, hist_col):
        hists = df[hist_col].map(_histogram)
        if hists.notna().any():
            fig = _new_figure()
            ax = fig.subplots()
            width = max(len(h) for h in hists.dropna())
            n = len(series)
            for i, s in enumerate(series):
                total = [0.0] * width
                for h in hists[df["_series"] == s].dropna():
                    for k, v in enumerate(h):
                        total[k] += v
                count = sum(total)
                frac = [v / count if count else 0.0 for v in total]
                xs = [k + (i - (n - 1) / 2) * (0.8 / n) for k in range(width)]
                ax.bar(xs, frac, 0.8 / n, label=s, **_bar_style(i))
            ax.set_xlabel("target cores per shootdown (count)")
            ax.set_ylabel("fraction of shootdowns")
            ax.set_xticks(range(width))
            ax.grid(axis="y", linestyle=":", linewidth=0.5)
            ax.set_axisbelow(True)
            if n > 1:
                _legend(ax, ", ".join(_short(c) for c in series_cols))
            caption = (
                "Distribution of the number of target cores per shootdown "
                f"({hist_col}, a histogram indexed by target count), summed over the runs "
                "of each series and normalized to a fraction of all shootdowns."
            )
            return fig, "Targets per shootdown", caption
    if not _has(df, fp_col):
        raise _Skip(f"neither {hist_col} (histogram) nor {fp_col} in the results")
    df["_fp"] = _numeric(df, fp_col)
    per_sd = _has(df, "stats.shootdowns_sent")
    if per_sd:
        sent = _numeric(df, "stats.shootdowns_sent")
        df["_fp"] = df["_fp"] / sent.where(sent > 0)
    fig = _new_figure()
    ax = fig.subplots()
    g = df.groupby("_series")["_fp"]
    mean, lo, hi = (g.agg(f).to_frame("v") for f in ("mean", "min", "max"))
    order = series
    for i, s in enumerate(order):
        m = mean.at[s, "v"]
        err = (
            [[max(m - lo.at[s, "v"], 0)], [max(hi.at[s, "v"] - m, 0)]]
            if not math.isnan(m)
            else None
        )
        ax.bar([i], [m], 0.6, yerr=err, capsize=3, **_bar_style(i))
    ax.set_xticks(range(len(order)), order)
    _headroom(ax, float(hi["v"].max()))
    ax.set_xlabel(", ".join(_short(c) for c in series_cols) or "runs")
    ax.set_ylabel(
        "false-positive targets per shootdown" if per_sd else "false-positive targets (count)"
    )
    ax.grid(axis="y", linestyle=":", linewidth=0.5)
    ax.set_axisbelow(True)
    caption = (
        f"False-positive targets (cores interrupted that held no stale entry, {fp_col})"
        + (" divided by shootdowns sent (stats.shootdowns_sent)" if per_sd else "")
        + "; mean over seeds, error bars min–max."
    )
    return fig, "False-positive targets per shootdown", caption


def _fig_mpki(frame: pd.DataFrame, per_core: pd.DataFrame | None) -> tuple[Figure, str, str]:
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
                yerr=[a["mean"] - a["min"], a["max"] - a["mean"]],
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


def _fig_walk_cycles(frame: pd.DataFrame, per_core: pd.DataFrame | None) -> tuple[Figure, str, str]:
    if len(frame) < 2:
        raise _Skip("fewer than 2 runs")
    if not (_has(frame, "stats.walk_cycles") and _has(frame, "stats.walks")):
        raise _Skip("no stats.walk_cycles / stats.walks columns")
    df = frame.copy()
    walks = _numeric(df, "stats.walks")
    df["_y"] = _numeric(df, "stats.walk_cycles") / walks.where(walks > 0)
    if df["_y"].isna().all():
        raise _Skip("no run made a page walk")
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


FIGURES: list[tuple[str, FigureFn]] = [
    ("coherence_runtime", _fig_coherence),
    ("throughput_threads", _fig_throughput),
    ("targets_per_shootdown", _fig_targets),
    ("tlb_mpki_vs_size", _fig_mpki),
    ("walk_cycles_per_walk", _fig_walk_cycles),
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


def _table_html(frame: pd.DataFrame) -> str:
    cols: list[tuple[str, str]] = []
    if "run_id" in frame.columns:
        cols.append(("run_id", "run"))
    seed = _seed_col(frame)
    for c in _varied(frame) + ([seed] if seed and _nunique(frame, seed) > 1 else []):
        cols.append((c, _short(c)))
    cols += [(c, label) for c, label in TABLE_METRICS if c in frame.columns]
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


def _write_html(summary: ReportSummary, frame: pd.DataFrame, title: str) -> None:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="note">{len(frame)} run(s); {len(summary.figures)} figure(s). '
        "Each figure is also in this folder as PNG and PDF.</p>",
    ]
    for f in summary.figures:
        data = base64.b64encode(f.png.read_bytes()).decode("ascii")
        parts += [
            f'<h2 id="{f.name}">{html.escape(f.title)}</h2>',
            "<figure>",
            f'<img alt="{html.escape(f.title)}" src="data:image/png;base64,{data}">',
            f"<figcaption>{html.escape(f.caption)} "
            f"(<code>{html.escape(f.png.name)}</code>, <code>{html.escape(f.pdf.name)}</code>)"
            "</figcaption>",
            "</figure>",
        ]
    if summary.skipped:
        parts.append("<h2>Figures not made</h2><ul>")
        parts += [
            f"<li>{html.escape(n)}: {html.escape(r)}</li>" for n, r in summary.skipped.items()
        ]
        parts.append("</ul>")
    parts += ["<h2>Runs</h2>", _table_html(frame), "</body></html>", ""]
    summary.index.write_text("\n".join(parts), encoding="utf-8")


# --------------------------------------------------------------------------- API


def build_report(
    frame: pd.DataFrame,
    out: str | os.PathLike[str],
    per_core: pd.DataFrame | None = None,
    *,
    title: str = "tlbsim report",
) -> ReportSummary:
    """Write the figures the results support, and ``out/index.html``, into ``out``.

    ``frame``: one row per run (``run_id``, ``param.*``, ``config.*``, ``stats.*``,
    ``run.*``), as ``tlbsim.load(DIR)`` returns; ``per_core``: optionally one row per run
    and core (``run_id``, ``core``, per-core statistics), as ``load(DIR, per_core=True)``.
    Returns which figures were made and which were skipped, with the reason.
    """
    import matplotlib

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = ReportSummary(out=out, index=out / "index.html")
    if frame.empty:
        for name, _ in FIGURES:
            summary.skipped[name] = "no runs"
    else:
        frame = frame.reset_index(drop=True)
        with matplotlib.rc_context(matplotlib.rcParamsDefault):
            matplotlib.rcParams.update({"svg.hashsalt": "tlbsim", "font.size": 10})
            for name, fn in FIGURES:
                try:
                    fig, fig_title, caption = fn(frame, per_core)
                except _Skip as skip:
                    summary.skipped[name] = str(skip)
                    continue
                fig.suptitle(fig_title)
                png, pdf = _save(fig, out, name)
                summary.figures.append(FigureInfo(name, fig_title, caption, png, pdf))
    _write_html(summary, frame, title)
    return summary


def report(
    directory: str | os.PathLike[str] | pd.DataFrame,
    out: str | os.PathLike[str] | None = None,
) -> ReportSummary:
    """The report of a sweep directory (default output: ``DIR/report``) or of a results
    table already loaded (``out`` is then required)."""
    if isinstance(directory, pd.DataFrame):
        if out is None:
            raise ValueError("out is required when the results are given as a DataFrame")
        return build_report(directory, out)
    from tlbsim.store import load  # written alongside the sweeps; imported only here

    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(2, "No such directory", str(root))
    frame = load(root)
    try:
        per_core = load(root, per_core=True)
    except (TypeError, ValueError, KeyError):
        per_core = None
    return build_report(
        frame,
        Path(out) if out is not None else root / "report",
        per_core,
        title=f"tlbsim report: {root.resolve().name}",
    )
