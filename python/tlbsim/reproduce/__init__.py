"""``tlbsim reproduce PAPER``: run a paper's sweeps and set each of its stated claims beside
what the simulator gives.

A paper is a folder here (``python/tlbsim/reproduce/<name>/``, found by its
``paper.toml``; no registry) or any folder given by path; the format is in
docs/REPRODUCE.md and :mod:`tlbsim.reproduce.paper`. ``reproduce(paper, out)``:

1. loads and checks the folder (every sweep spec expanded and validated first);
2. runs each sweep with :func:`tlbsim.sweep.sweep` into ``out/sweeps/<sweep>/``
   (``<sweep>-quick/`` with ``quick=True``): parallel, resumable, finished runs skipped;
3. asks the paper's ``hooks.reference`` for the paper values that are measured rather
   than printed (the ``linux`` paper: this machine's kernel);
4. writes ``out/claims.json`` (a list of ``{id, paper, section, claim, paper_value, ours,
   unit, verdict, tolerance, note, runs}``), ``out/reproduce.json`` (the mode, the paper
   values' source, warnings, the sweeps), one PNG per figure and ``out/index.html``.

Simplifications: the sweeps run one after another (each in parallel inside), the paper
values are measured after them (so the simulations do not disturb the measurement), and
the claims are recomputed from every finished run on each call (cheap: a few JSON files).

The module is callable: ``tlbsim.reproduce(paper, out)`` is
``tlbsim.reproduce.reproduce(paper, out)``.
"""

from __future__ import annotations

import json
import os
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tlbsim import sweep as sweep_module
from tlbsim.reproduce.paper import (
    AGREE,
    DISAGREE,
    NA,
    Paper,
    PaperError,
    Reference,
    ReferenceContext,
    RunResult,
    evaluate,
    load,
)
from tlbsim.result import write_json_atomic
from tlbsim.sweep import SweepSummary

PAPERS_DIR = Path(__file__).resolve().parent
CLAIM_KEYS = ("id", "paper", "section", "claim", "paper_value", "ours", "unit")


@dataclass
class ReproduceResult:
    """What ``reproduce`` wrote: the claims (rows of claims.json) and the files."""

    paper: str
    title: str
    out: Path
    quick: bool
    claims: list[dict[str, Any]]
    claims_path: Path
    index_path: Path
    figures: list[Path]
    sweeps: dict[str, SweepSummary]
    reference_source: str
    full_run: str = "not measured"
    warnings: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = {AGREE: 0, DISAGREE: 0, NA: 0}
        for c in self.claims:
            out[c["verdict"]] += 1
        return out

    @property
    def ran(self) -> int:
        """Simulations run now (the others were finished before)."""
        return sum(s.ran for s in self.sweeps.values())


def papers() -> list[str]:
    """The papers shipped with tlbsim (folders here with a paper.toml), sorted."""
    return sorted(p.name for p in PAPERS_DIR.iterdir() if (p / "paper.toml").is_file())


def paper_folder(paper: str | os.PathLike[str]) -> Path:
    """A shipped paper's folder by name, or a folder given by path."""
    text = os.fspath(paper)
    if text in papers():
        return PAPERS_DIR / text
    path = Path(text)
    if path.is_dir():
        return path
    raise PaperError(f"unknown paper {text!r}; available: {', '.join(papers())} (or the path of a paper folder)")


def load_paper(paper: str | os.PathLike[str]) -> Paper:
    """Load and check a paper (name or folder); runs nothing but the specs' validation."""
    folder = paper_folder(paper)
    name = os.fspath(paper) if os.fspath(paper) in papers() else folder.resolve().name
    return load(folder, name)


def _load_runs(sweep_out: Path, spec: Mapping[str, Any]) -> list[RunResult]:
    runs = []
    for r in sweep_module.expand(spec, validate=False).runs:
        path = sweep_out / "runs" / r.id / "stats.json"
        if path.is_file():
            runs.append(RunResult(r.id, dict(r.params), json.loads(path.read_text())))
    return runs


def reproduce(
    paper: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    quick: bool = False,
    jobs: int | None = None,
    progress: bool | None = None,
    on_sweep: Callable[[str, int, int], None] | None = None,
    cluster: str | None = None,
) -> ReproduceResult:
    """Run the paper's sweeps (resuming) into ``out`` (default ``out/reproduce/<paper>``)
    and write claims.json, the figures and index.html there.

    ``quick``: the reduced sweeps (fewer seeds and operations) and a shorter measurement
    of measured paper values; ``jobs``: simulations in parallel (default: all CPUs);
    ``progress``: progress bars on stderr (default: when stderr is a terminal);
    ``on_sweep(name, total, skipped)``: called before each sweep runs; ``cluster``: a Dask
    scheduler address to run the sweeps on instead of this machine (as ``tlbsim sweep
    --cluster``; measured paper values are still measured here).
    Raises :class:`PaperError` (a ``SpecError``) naming the file and key when the paper
    folder is wrong, before any run.
    """
    from tlbsim.reproduce import page

    p = load_paper(paper)
    out = Path(out) if out is not None else Path("out") / "reproduce" / p.name
    progress = sys.stderr.isatty() if progress is None else progress
    out.mkdir(parents=True, exist_ok=True)

    summaries: dict[str, SweepSummary] = {}
    runs: dict[str, list[RunResult]] = {}
    for name, sdef in p.sweeps.items():
        spec = sdef.spec(quick)
        target = out / "sweeps" / sdef.folder(quick)

        def started(total: int, skipped: int, name: str = name) -> None:
            if on_sweep is not None:
                on_sweep(name, total, skipped)

        summaries[name] = sweep_module.sweep(
            spec, target, jobs=jobs, cluster=cluster, progress=progress, on_start=started
        )
        runs[name] = _load_runs(target, spec)

    reference = Reference({}, "stated in the paper")
    if p.reference is not None and any(c.reference is not None for c in p.claims):
        cache = out / "reference"
        cache.mkdir(exist_ok=True)
        got = p.reference(ReferenceContext(p, cache, quick, progress))
        if not isinstance(got, Reference):
            raise PaperError(
                f"{p.folder / 'hooks.py'}: reference(ctx) returned {type(got).__name__}, "
                "expected tlbsim.reproduce.paper.Reference"
            )
        reference = got
    rows = [evaluate(p, c, runs, reference.values, reference.notes) for c in p.claims]

    claims_path = out / "claims.json"
    write_json_atomic(claims_path, rows)
    # A paper's hooks.py may write further outputs from its runs: outputs(runs, out, quick).
    outputs = getattr(p.hooks, "outputs", None) if p.hooks is not None else None
    extra: list[dict[str, Any]] = []
    if callable(outputs):
        extra = list(outputs(runs, out, quick) or [])
    figures = page.figures(p, rows, out)
    meta = {
        "paper": p.name,
        "title": p.title,
        "citation": p.citation,
        "mode": "quick" if quick else "full",
        "full_run": p.full_run_text(),
        "paper_values": p.paper_values,
        "reference_source": reference.source,
        "reference": reference.details,
        "warnings": reference.warnings,
        # True when the measured paper values were taken on a busy machine (the hooks judge it;
        # the linux paper's thresholds are in its hooks.py); None when nothing was measured.
        "machine_loaded": reference.details.get("machine_loaded"),
        "sweeps": {
            n: {
                "folder": os.fspath(out / "sweeps" / p.sweeps[n].folder(quick)),
                "total": s.total,
                "skipped": s.skipped,
                "ran": s.ran,
            }
            for n, s in summaries.items()
        },
        "counts": {v: sum(r["verdict"] == v for r in rows) for v in (AGREE, DISAGREE, NA)},
    }
    write_json_atomic(out / "reproduce.json", meta)
    index = page.write_html(p, rows, meta, figures, out, extra)
    return ReproduceResult(
        paper=p.name,
        title=p.title,
        out=out,
        quick=quick,
        claims=rows,
        claims_path=claims_path,
        index_path=index,
        figures=figures,
        sweeps=summaries,
        reference_source=reference.source,
        full_run=p.full_run_text(),
        warnings=list(reference.warnings),
    )


@dataclass
class IndexResult:
    """What ``reproduce_all`` wrote: one entry per paper (its counts, or the error that
    stopped it) and the index files."""

    out: Path
    quick: bool
    papers: list[dict[str, Any]]
    index_path: Path
    json_path: Path

    @property
    def failed(self) -> list[str]:
        return [p["paper"] for p in self.papers if p.get("error")]


def reproduce_all(
    out: str | os.PathLike[str] | None = None,
    *,
    quick: bool = False,
    jobs: int | None = None,
    progress: bool | None = None,
    on_sweep: Callable[[str, str, int, int], None] | None = None,
    cluster: str | None = None,
    names: list[str] | None = None,
) -> IndexResult:
    """Reproduce every shipped paper (or ``names``) into ``out/<paper>/`` (default
    ``out/reproduce``), resuming each as :func:`reproduce` does, and write ``out/index.json``
    and ``out/index.html``: each paper's agree/disagree/n/a counts and a link to its page.

    A paper that fails is recorded with its error in the index and the others still run
    (a long unattended run should not lose the rest to one paper); ``on_sweep(paper, sweep,
    total, skipped)`` is called before each sweep runs."""
    from tlbsim.reproduce import page

    out = Path(out) if out is not None else Path("out") / "reproduce"
    out.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = []
    for name in names if names is not None else papers():

        def started(sweep: str, total: int, skipped: int, name: str = name) -> None:
            if on_sweep is not None:
                on_sweep(name, sweep, total, skipped)

        entry: dict[str, Any] = {"paper": name, "page": f"{name}/index.html"}
        try:
            r = reproduce(
                name, out / name, quick=quick, jobs=jobs, progress=progress, on_sweep=started, cluster=cluster
            )
        except Exception as err:  # noqa: BLE001 - recorded in the index; the other papers still run
            entry |= {"title": "", "error": f"{type(err).__name__}: {err}", "counts": None}
        else:
            entry |= {
                "title": r.title,
                "counts": r.counts(),
                "full_run": r.full_run,
                "warnings": r.warnings,
                "error": None,
            }
        entries.append(entry)
    meta = {"mode": "quick" if quick else "full", "papers": entries}
    json_path = out / "index.json"
    write_json_atomic(json_path, meta)
    index = page.write_index(meta, out)
    return IndexResult(out=out, quick=quick, papers=entries, index_path=index, json_path=json_path)


def format_table(result: ReproduceResult) -> str:
    """The claims as a text table: id, paper, ours, unit, verdict."""
    from tlbsim.reproduce.page import fmt

    rows = result.claims
    width = max([len(r["id"]) for r in rows] + [10])
    unit = max([len(r["unit"]) for r in rows] + [4])
    lines = [
        f"{result.paper}: {result.title}",
        f"paper values: {result.reference_source}",
        f"mode: {'quick (the full run takes ' + result.full_run + ')' if result.quick else 'full'}",
        "",
        f"  {'claim':<{width}}  {'paper':>10}  {'ours':>10}  {'unit':<{unit}}  verdict",
    ]
    for r in rows:
        lines.append(
            f"  {r['id']:<{width}}  {fmt(r['paper_value']):>10}  {fmt(r['ours']):>10}  "
            f"{r['unit']:<{unit}}  {r['verdict']}"
        )
    c = result.counts()
    lines += ["", f"{c[AGREE]} agree, {c[DISAGREE]} disagree, {c[NA]} n/a"]
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> ReproduceResult:
        return reproduce(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = [
    "CLAIM_KEYS",
    "IndexResult",
    "PaperError",
    "ReproduceResult",
    "format_table",
    "load_paper",
    "paper_folder",
    "papers",
    "reproduce",
    "reproduce_all",
]
