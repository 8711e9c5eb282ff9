"""A paper folder of ``tlbsim reproduce``: loading, checking, and computing its claims.

Follows the layout of docs/REPRODUCE.md. A folder holds ``paper.toml`` (the paper's
metadata, its sweeps and the table of its stated claims), the sweep specs it names (the
format of ``tlbsim sweep``, :mod:`tlbsim.sweep`) and, optionally, ``hooks.py`` (named
metrics over a run's stats.json, and a ``reference`` function for paper values that are
measured rather than printed in the paper). Everything is checked when the folder is
loaded, before any run: an error names the file and the key.

Simplifications: a claim's "ours" is one number, the mean of a metric over the runs its
``where`` selects (the seeds, usually), optionally divided by the same mean over a second
selection (``relative_to``); its verdict is a tolerance test against the paper's number,
with no statistics beyond that.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from tlbsim import _tlbsim
from tlbsim import sweep as sweep_module
from tlbsim.json_values import json_default
from tlbsim.sweep import SpecError

PAPER_FILE = "paper.toml"
HOOKS_FILE = "hooks.py"
PAPER_KEYS = (
    "title",
    "citation",
    "description",
    "paper_values",
    "paper_label",
    "full_run",
    "sweep",
    "figure",
    "defaults",
    "claim",
)
FULL_RUN_KEYS = ("minutes", "measured")
SWEEP_KEYS = ("spec", "quick")
QUICK_KEYS = ("seeds", "set")
FIGURE_KEYS = ("title", "ylabel", "caption", "log")
CLAIM_KEYS = ("id", "section", "claim", "label", "paper_value", "unit", "tolerance", "ours", "figure", "note")
CLAIM_REQUIRED = ("id", "section", "claim", "paper_value", "unit", "tolerance", "ours")
OURS_KEYS = ("sweep", "metric", "where", "relative_to")
RELATIVE_KEYS = ("sweep", "where", "best")
TOLERANCE_KEYS = ("abs", "rel", "factor", "bound", "complement")

AGREE, DISAGREE, NA = "agree", "disagree", "n/a"


class PaperError(SpecError):
    """A paper folder is wrong; the message names the file and the key."""


Metric = Callable[[Mapping[str, Any]], float | None]


@dataclass(frozen=True)
class Selection:
    """Runs of one sweep whose swept values (params.json) include ``where``."""

    sweep: str
    where: dict[str, Any]
    # "min" / "max": of the points ``where`` selects (runs grouped by their swept values
    # other than the seed), the one whose mean is lowest / highest ("the best static split
    # chosen in hindsight"); None: the mean over every selected run.
    best: str | None = None

    def matches(self, params: Mapping[str, Any]) -> bool:
        return all(k in params and _same(params[k], v) for k, v in self.where.items())


@dataclass(frozen=True)
class Tolerance:
    """``abs``/``rel``: agree when |ours - paper| <= max(abs, rel x |paper|); ``factor``:
    agree when ours / paper lies within [1/factor, factor]; ``bound``: the paper states a
    bound ("over 2.5": ``"lower"``, ours >= paper; "under": ``"upper"``, ours <= paper).
    ``complement``: abs/rel/factor apply to 1 - x instead of x, so that a share near 1
    ("eliminates 98%") gets a relative tolerance that can fail (issue 49)."""

    abs: float = 0.0
    rel: float = 0.0
    factor: float | None = None
    bound: str | None = None
    complement: bool = False

    def contains_zero(self, paper: float) -> bool:
        """Whether ours = 0 would agree with a nonzero paper value: such a tolerance cannot
        tell a mechanism that does nothing from one that matches the paper (issue 49: 0.10
        +- 0.1 "agreed" with 0.000). A stated bound is the paper's own claim, so it is exempt."""
        if paper == 0 or self.bound is not None:
            return False
        return self.agrees(paper, 0.0)

    def agrees(self, paper: float, ours: float) -> bool:
        if self.complement:
            return Tolerance(self.abs, self.rel, self.factor).agrees(1 - paper, 1 - ours)
        if self.bound == "lower":
            return ours >= paper
        if self.bound == "upper":
            return ours <= paper
        if self.factor is not None:
            if paper == 0 or ours == 0:
                return paper == ours
            ratio = ours / paper
            return ratio > 0 and 1 / self.factor <= ratio <= self.factor
        return abs(ours - paper) <= max(self.abs, self.rel * abs(paper))

    def describe(self) -> str:
        if self.bound == "lower":
            return "ours >= paper (the paper states a lower bound)"
        if self.bound == "upper":
            return "ours <= paper (the paper states an upper bound)"
        if self.factor is not None:
            if self.complement:
                return f"(1 - ours) / (1 - paper) within a factor of {self.factor:g}"
            return f"ours / paper within a factor of {self.factor:g}"
        parts = [f"{self.abs:g}"] if self.abs else []
        if self.rel:
            parts.append(f"{self.rel:g} x |paper|")
        bound = parts[0] if len(parts) == 1 else f"max({', '.join(parts)})" if parts else "0"
        if self.complement:
            return f"|(1 - ours) - (1 - paper)| <= {bound.replace('|paper|', '|1 - paper|')}"
        return f"|ours - paper| <= {bound}"


@dataclass(frozen=True)
class Claim:
    id: str
    section: str
    claim: str
    label: str
    paper_value: float | None  # a number stated in the paper, or None with reference set
    reference: str | None  # key of the hooks' reference values (measured paper values)
    unit: str
    tolerance: Tolerance
    metric: str
    select: Selection
    relative_to: Selection | None
    figure: str | None
    note: str


@dataclass(frozen=True)
class SweepDef:
    """One sweep of a paper: its spec file and what ``--quick`` changes."""

    name: str
    spec_path: Path
    quick_seeds: list[Any] | None
    quick_set: dict[str, Any]

    def spec(self, quick: bool) -> dict[str, Any]:
        """The spec as a dict (base made absolute; in quick mode seeds and base keys
        replaced), ready for :func:`tlbsim.sweep.sweep`."""
        data, root, _ = sweep_module._read_spec(self.spec_path)
        base = data.get("base", {})
        if isinstance(base, (str, os.PathLike)):
            base = str((root / os.fspath(base)).resolve())
        if quick and self.quick_set:
            if isinstance(base, str):
                tree = json.loads(_tlbsim.load_config(base))
                _absolute_trace_paths(tree, Path(base).parent)
            else:
                tree = json.loads(json.dumps(base, default=json_default))
                _absolute_trace_paths(tree, root)
            for key, value in self.quick_set.items():
                sweep_module._set_dotted(tree, key, value)
            base = tree
        elif isinstance(base, Mapping):
            base = json.loads(json.dumps(base, default=json_default))
            _absolute_trace_paths(base, root)
        data["base"] = base
        if quick and self.quick_seeds is not None:
            data["seeds"] = list(self.quick_seeds)
        return data

    def folder(self, quick: bool) -> str:
        return f"{self.name}-quick" if quick else self.name


@dataclass(frozen=True)
class FigureDef:
    name: str
    title: str
    ylabel: str
    caption: str
    log: bool


@dataclass
class Paper:
    name: str
    folder: Path
    title: str
    citation: str
    description: str
    paper_values: str  # where the paper's numbers come from, in words
    paper_label: str  # what the paper's side is called in figures and the page ("paper")
    sweeps: dict[str, SweepDef]
    figures: dict[str, FigureDef]
    claims: list[Claim]
    metrics: dict[str, Metric] = field(default_factory=dict)
    hooks: ModuleType | None = None
    # How long the full (not --quick) run took, and where it was measured; None: not measured.
    full_run_minutes: float | None = None
    full_run_measured: str = ""

    def full_run_text(self) -> str:
        """The full run's duration as the page and reproduce.json state it (issue 49)."""
        if self.full_run_minutes is None:
            return "not measured"
        return f"about {self.full_run_minutes:g} minutes ({self.full_run_measured})"

    @property
    def reference(self) -> Callable[..., Any] | None:
        fn = getattr(self.hooks, "reference", None) if self.hooks is not None else None
        return fn if callable(fn) else None


# --------------------------------------------------------------------------- loading


def _same(a: Any, b: Any) -> bool:
    return sweep_module.canonical_json(a) == sweep_module.canonical_json(b)


def _absolute_trace_paths(tree: dict[str, Any], root: Path) -> None:
    workload = tree.get("workload")
    paths = workload.get("paths") if isinstance(workload, dict) else None
    if isinstance(workload, dict) and isinstance(paths, list):
        workload["paths"] = [str((root / os.fspath(p)).resolve()) if isinstance(p, str) else p for p in paths]


class _Reader:
    """Typed access to a TOML table; errors name the file and the dotted key."""

    def __init__(self, file: Path, where: str, table: Any, allowed: Sequence[str]) -> None:
        self.file, self.where = file, where
        if not isinstance(table, Mapping):
            raise self.error("", f"expected a table, got {table!r}")
        self.table = table
        for key in table:
            if key not in allowed:
                raise self.error(key, f"unknown key; allowed: {', '.join(allowed)}")

    def name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where and key else self.where or key

    def error(self, key: str, message: str) -> PaperError:
        return PaperError(f"{self.file}: {self.name(key)}: {message}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None, required: bool = False) -> Any:
        if key not in self.table:
            if required:
                raise self.error(key, "missing")
            return default
        value = self.table[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise self.error(
                key, f"expected {names.replace('str', 'a string').replace('float', 'a number')}, got {value!r}"
            )
        return value


def _load_hooks(folder: Path, name: str) -> ModuleType | None:
    path = folder / HOOKS_FILE
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location(f"tlbsim.reproduce._papers.{name}", path)
    if spec is None or spec.loader is None:
        raise PaperError(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import would (dataclasses in hooks.py need it)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # a broken hooks file is the paper's error, said plainly
        del sys.modules[spec.name]
        raise PaperError(f"{path}: {type(err).__name__}: {err}") from err
    return module


def _swept_values(spec: Mapping[str, Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for section in ("grid", "zip"):
        table = spec.get(section, {})
        if isinstance(table, Mapping):
            out.update({str(k): list(v) for k, v in table.items() if isinstance(v, list)})
    if isinstance(spec.get("seeds"), list):
        out["seed"] = list(spec["seeds"])
    return out


def _selection(
    r: _Reader,
    key: str,
    table: Any,
    default_sweep: str | None,
    sweeps: Mapping[str, SweepDef],
    swept: Mapping[str, dict[str, list[Any]]],
) -> Selection:
    sub = _Reader(
        r.file, r.name(key), table, ("sweep", "where", "metric", "relative_to") if key == "ours" else RELATIVE_KEYS
    )
    name = sub.get("sweep", str, default_sweep)
    if name is None:
        if len(sweeps) != 1:
            raise sub.error("sweep", f"missing (the paper has {len(sweeps)} sweeps: {', '.join(sweeps) or 'none'})")
        name = next(iter(sweeps))
    if name not in sweeps:
        raise sub.error("sweep", f"unknown sweep {name!r}; the paper's sweeps: {', '.join(sweeps) or 'none'}")
    where = sub.get("where", dict, {})
    values = swept[name]
    for k, v in where.items():
        if k not in values:
            raise sub.error(
                f'where."{k}"',
                f"not a swept key of sweep {name!r} ({sweeps[name].spec_path.name}); "
                f"swept: {', '.join(values) or 'nothing'}",
            )
        if not any(_same(v, x) for x in values[k]):
            raise sub.error(f'where."{k}"', f"{v!r} is not among the swept values {values[k]!r}")
    best = sub.get("best", str, None) if key != "ours" else None
    if best is not None and best not in ("min", "max"):
        raise sub.error("best", f'{best!r}: "min" or "max"')
    return Selection(name, dict(where), best)


def load(folder: Path, name: str | None = None) -> Paper:
    """Load and check a paper folder (its sweep specs expanded and validated in the core,
    in full and quick form). Raises :class:`PaperError` naming the file and the key."""
    folder = Path(folder)
    name = name or folder.name
    path = folder / PAPER_FILE
    if not path.is_file():
        raise PaperError(f"{path}: not found (a paper folder holds {PAPER_FILE}; see docs/REPRODUCE.md)")
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise PaperError(f"{path}: invalid TOML: {err}") from None
    except UnicodeDecodeError as err:  # TOML is UTF-8
        raise PaperError(f"{path}: invalid TOML: not UTF-8 text (byte offset {err.start})") from None
    top = _Reader(path, "", data, PAPER_KEYS)
    title = top.get("title", str, required=True)
    full_run_minutes, full_run_measured = None, ""
    full_table = top.get("full_run", dict)
    if full_table is not None:
        full = _Reader(path, "full_run", full_table, FULL_RUN_KEYS)
        full_run_minutes = full.get("minutes", float, required=True)
        if not full_run_minutes > 0:
            raise full.error("minutes", f"must be > 0, got {full_run_minutes}")
        # A duration without where it was measured cannot be weighed: both are required.
        full_run_measured = full.get("measured", str, required=True)
    hooks = _load_hooks(folder, name)
    metrics: dict[str, Metric] = {}
    if hooks is not None:
        found = getattr(hooks, "METRICS", {})
        if not isinstance(found, Mapping) or not all(callable(f) for f in found.values()):
            raise PaperError(f"{folder / HOOKS_FILE}: METRICS: expected a dict of names to functions(stats)")
        metrics = dict(found)

    sweeps: dict[str, SweepDef] = {}
    swept: dict[str, dict[str, list[Any]]] = {}
    sweep_tables = top.get("sweep", dict, required=True)
    for sname, table in sweep_tables.items():
        r = _Reader(path, f"sweep.{sname}", table, SWEEP_KEYS)
        spec_path = folder / r.get("spec", str, required=True)
        if not spec_path.is_file():
            raise r.error("spec", f"file not found: {spec_path}")
        quick = _Reader(path, f"sweep.{sname}.quick", r.get("quick", dict, {}), QUICK_KEYS)
        seeds = quick.get("seeds", list)
        if seeds is not None and not seeds:
            raise quick.error("seeds", "empty list")
        sdef = SweepDef(sname, spec_path, seeds, dict(quick.get("set", dict, {})))
        for quick_mode in (False, True):
            try:
                sweep_module.expand(sdef.spec(quick_mode))
            except (SpecError, _tlbsim.TlbsimError) as err:
                if quick_mode:
                    bad = [k for k in sdef.quick_set if k in str(err)]
                    key = f'set."{bad[0]}"' if bad else "seeds" if "seeds" in str(err) else "set"
                    raise PaperError(f"{path}: sweep.{sname}.quick.{key}: {err} (sweep spec {spec_path})") from None
                raise PaperError(f"{spec_path}: {err}") from None
        spec_dict = sweep_module._read_spec(spec_path)[0]
        swept[sname] = _swept_values(spec_dict)
        sweeps[sname] = sdef

    figures: dict[str, FigureDef] = {}
    for fname, table in top.get("figure", dict, {}).items():
        r = _Reader(path, f"figure.{fname}", table, FIGURE_KEYS)
        figures[fname] = FigureDef(
            fname,
            r.get("title", str, fname),
            r.get("ylabel", str, ""),
            r.get("caption", str, ""),
            r.get("log", bool, False),
        )

    defaults = top.get("defaults", dict, {})
    _Reader(path, "defaults", defaults, [k for k in CLAIM_KEYS if k not in ("id", "claim", "label")])
    claims: list[Claim] = []
    seen: set[str] = set()
    for i, row in enumerate(top.get("claim", list, required=True)):
        if not isinstance(row, Mapping):
            raise PaperError(f"{path}: claim[{i}]: expected a table ([[claim]])")
        merged = dict(defaults) | dict(row)
        ours_default = defaults.get("ours", {}) if isinstance(defaults.get("ours"), Mapping) else {}
        if isinstance(row.get("ours"), Mapping):
            merged["ours"] = dict(ours_default) | dict(row["ours"])
        label = f'claim[{i}] (id "{row["id"]}")' if isinstance(row.get("id"), str) else f"claim[{i}]"
        r = _Reader(path, label, merged, CLAIM_KEYS)
        for key in CLAIM_REQUIRED:
            r.get(key, object, required=True)
        cid = r.get("id", str)
        if cid in seen:
            raise r.error("id", f"duplicate claim id {cid!r}")
        seen.add(cid)
        paper_value, reference = _paper_value(r, hooks)
        tol = _tolerance(r)
        if paper_value is not None and tol.contains_zero(paper_value):
            raise r.error(
                "tolerance",
                f"{tol.describe()} around {paper_value:g} includes 0, so a mechanism that does "
                "nothing would agree; use rel or factor (or complement = true near 1)",
            )
        ours = _Reader(path, r.name("ours"), r.get("ours", dict), OURS_KEYS)
        metric = ours.get("metric", str, required=True)
        if metric not in metrics and not _is_stats_path(metric):
            raise ours.error(
                "metric",
                f"{metric!r} is neither a metric of {HOOKS_FILE} "
                f"({', '.join(metrics) or 'none'}) nor a dotted stats.json path",
            )
        select = _selection(r, "ours", ours.table, None, sweeps, swept)
        rel_table = ours.get("relative_to", dict)
        relative = None
        if rel_table is not None:
            relative = _selection(ours, "relative_to", rel_table, select.sweep, sweeps, swept)
        figure = r.get("figure", str)
        unit = r.get("unit", str)
        if figure is not None:
            # Ratios and counts on one axis hide the ratios (issue 49): one kind of unit per figure.
            kind = axis_kind(unit)
            other = next((c for c in claims if c.figure == figure and axis_kind(c.unit) != kind), None)
            if other is not None:
                raise r.error(
                    "figure",
                    f"figure {figure!r} already holds claim {other.id!r} in {other.unit!r}, this claim "
                    f"is in {unit!r}: ratios and counts never share a figure's axis; split the figure",
                )
        if figure is not None and figure not in figures:
            figures[figure] = FigureDef(figure, figure, r.get("unit", str), "", False)
        claims.append(
            Claim(
                id=cid,
                section=r.get("section", str),
                claim=r.get("claim", str),
                label=r.get("label", str, cid),
                paper_value=paper_value,
                reference=reference,
                unit=r.get("unit", str),
                tolerance=tol,
                metric=metric,
                select=select,
                relative_to=relative,
                figure=figure,
                note=r.get("note", str, ""),
            )
        )
    if not claims:
        raise PaperError(f"{path}: claim: no claims ([[claim]] rows)")
    return Paper(
        name=name,
        folder=folder,
        title=title,
        citation=top.get("citation", str, ""),
        description=top.get("description", str, ""),
        paper_values=top.get("paper_values", str, ""),
        paper_label=top.get("paper_label", str, "paper"),
        sweeps=sweeps,
        figures=figures,
        claims=claims,
        metrics=metrics,
        hooks=hooks,
        full_run_minutes=full_run_minutes,
        full_run_measured=full_run_measured,
    )


def axis_kind(unit: str) -> str:
    """What a figure's y axis measures: every ratio ("x", "x linux", "share of flushes")
    is dimensionless and plots on one axis; any other unit is a count or rate of its own."""
    if unit == "x" or unit.startswith(("x ", "share")):
        return "ratio"
    return unit


def _paper_value(r: _Reader, hooks: ModuleType | None) -> tuple[float | None, str | None]:
    value = r.table["paper_value"]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value), None
    if isinstance(value, Mapping):
        sub = _Reader(r.file, r.name("paper_value"), value, ("reference",))
        key = sub.get("reference", str, required=True)
        if hooks is None or not callable(getattr(hooks, "reference", None)):
            raise sub.error("reference", f"needs a reference(ctx) function in {HOOKS_FILE} beside {PAPER_FILE}")
        return None, key
    raise r.error("paper_value", f'expected a number or {{reference = "key"}}, got {value!r}')


def _tolerance(r: _Reader) -> Tolerance:
    t = _Reader(r.file, r.name("tolerance"), r.get("tolerance", dict), TOLERANCE_KEYS)
    a, rel, factor = t.get("abs", float, 0.0), t.get("rel", float, 0.0), t.get("factor", float)
    bound = t.get("bound", str)
    if bound is not None:
        if bound not in ("lower", "upper"):
            raise t.error("bound", f'expected "lower" or "upper", got {bound!r}')
        if factor is not None or "abs" in t.table or "rel" in t.table:
            raise t.error("bound", "a bound takes no abs, rel or factor")
        return Tolerance(bound=bound)
    if factor is not None and (a or rel):
        raise t.error("factor", "give either factor or abs/rel, not both")
    if factor is None and not (a or rel) and "abs" not in t.table:
        raise t.error("", "expected abs, rel or factor")
    for key, v in (("abs", a), ("rel", rel)):
        if v < 0 or math.isnan(v):
            raise t.error(key, f"must be >= 0, got {v}")
    if factor is not None and not factor >= 1:
        raise t.error("factor", f"must be >= 1, got {factor}")
    complement = t.get("complement", bool, False)
    return Tolerance(a, rel, factor, complement=complement)


def _is_stats_path(metric: str) -> bool:
    parts = metric.split(".")
    return len(parts) >= 2 and all(parts)


# --------------------------------------------------------------------------- computing


@dataclass
class RunResult:
    id: str
    params: dict[str, Any]
    stats: dict[str, Any]


def metric_value(paper: Paper, claim: Claim, run: RunResult) -> float | None:
    fn = paper.metrics.get(claim.metric)
    if fn is not None:
        try:
            value = fn(run.stats)
        except (KeyError, IndexError) as err:
            raise PaperError(
                f"{paper.folder / HOOKS_FILE}: metric {claim.metric!r} (claim {claim.id!r}): "
                f"the stats of run {run.id} have no {err}"
            ) from None
        except (TypeError, ValueError, ArithmeticError, AttributeError) as err:
            raise PaperError(
                f"{paper.folder / HOOKS_FILE}: metric {claim.metric!r} (claim {claim.id!r}) "
                f"failed on run {run.id}: {type(err).__name__}: {err}"
            ) from None
        return None if value is None else float(value)
    node: Any = run.stats
    for part in claim.metric.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            raise PaperError(
                f"{paper.folder / PAPER_FILE}: claim {claim.id!r}: ours.metric {claim.metric!r}: "
                f"not in the stats.json of run {run.id} (no {part!r})"
            )
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise PaperError(
            f"{paper.folder / PAPER_FILE}: claim {claim.id!r}: ours.metric {claim.metric!r}: "
            f"not a number in run {run.id}: {node!r}"
        )
    return float(node)


def _mean_over(
    paper: Paper, claim: Claim, sel: Selection, runs: Mapping[str, Sequence[RunResult]]
) -> tuple[float | None, int]:
    chosen = [r for r in runs.get(sel.sweep, []) if sel.matches(r.params)]
    if sel.best is not None:
        groups: dict[str, list[float]] = {}
        for r in chosen:
            v = metric_value(paper, claim, r)
            if v is not None and not math.isnan(v):
                point = json.dumps({k: x for k, x in r.params.items() if k != "seed"}, sort_keys=True)
                groups.setdefault(point, []).append(v)
        means = [sum(vs) / len(vs) for vs in groups.values()]
        if not means:
            return None, len(chosen)
        return (min(means) if sel.best == "min" else max(means)), len(chosen)
    values = [v for v in (metric_value(paper, claim, r) for r in chosen) if v is not None and not math.isnan(v)]
    if not values:
        return None, len(chosen)
    return sum(values) / len(values), len(chosen)


def evaluate(
    paper: Paper,
    claim: Claim,
    runs: Mapping[str, Sequence[RunResult]],
    reference: Mapping[str, float | None],
    reference_notes: Mapping[str, str],
) -> dict[str, Any]:
    """One row of claims.json."""
    notes = [claim.note] if claim.note else []
    if claim.reference is not None:
        paper_value = reference.get(claim.reference)
        if reference_notes.get(claim.reference):
            notes.append(reference_notes[claim.reference])
        elif claim.reference not in reference:
            notes.append(f"no reference value {claim.reference!r}")
    else:
        paper_value = claim.paper_value
    ours, n = _mean_over(paper, claim, claim.select, runs)
    if claim.relative_to is not None and ours is not None:
        denominator, _ = _mean_over(paper, claim, claim.relative_to, runs)
        ours = ours / denominator if denominator else None
        if denominator == 0:
            notes.append("the simulated value it is relative to is 0")
    if n == 0:
        notes.append("no finished run matches ours.where")
    if paper_value is None or ours is None:
        verdict = NA
    else:
        verdict = AGREE if claim.tolerance.agrees(paper_value, ours) else DISAGREE
    return {
        "id": claim.id,
        "paper": paper.name,
        "section": claim.section,
        "claim": claim.claim,
        "paper_value": paper_value,
        "ours": ours,
        "unit": claim.unit,
        "verdict": verdict,
        "tolerance": claim.tolerance.describe(),
        "note": "; ".join(notes),
        "runs": n,
    }


# --------------------------------------------------------------------------- reference values


@dataclass
class ReferenceContext:
    """What a paper's ``hooks.reference(ctx)`` gets: ``cache`` is a folder of its own in the
    output folder (for measurements to keep across runs), ``quick`` the mode."""

    paper: Paper
    cache: Path
    quick: bool
    progress: bool


@dataclass
class Reference:
    """What ``hooks.reference(ctx)`` returns: ``values`` by key (None when not measurable,
    with the reason in ``notes``), ``source`` in words (shown beside the claims),
    ``warnings`` for the page, ``details`` kept in reproduce.json."""

    values: dict[str, float | None]
    source: str
    notes: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
