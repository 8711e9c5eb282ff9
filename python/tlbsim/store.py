"""A sweep's results as tables: ``collect`` writes Parquet, ``load`` reads it.

Three tables, each a Parquet file in the sweep folder:

``results.parquet`` (``load(DIR)`` or ``load(DIR, table="run")``): one row per finished
run, sorted by ``run_id``, with the columns

- ``run_id``;
- ``param.<dotted key>``: the run's swept values (params.json);
- ``config.<dotted key>``: every scalar of the effective config (config.json); lists and
  tables that are not expanded (lists, empty tables) are JSON strings;
- ``stats.<name>``: every counter of ``stats["totals"]``. A table of scalars is flattened
  one level (``full_flushes_by_cause`` → ``stats.full_flushes_by_cause.shootdown``,
  ``stats.full_flushes_by_cause.context_switch``, ...); a list of scalars is a JSON
  string (``stats.targets_per_shootdown``: the histogram, index = target cores of one
  shootdown, e.g. ``"[0, 2, 0, 7999]"``); deeper structures are left out;
- ``run.<name>``: every scalar of ``stats["run"]`` (``run.makespan_cycles``,
  ``run.seconds``, ``run.coherence`` ...).

``results_per_core.parquet`` (``load(DIR, table="core")``, or ``per_core=True``): one row
per run and core, sorted by ``run_id`` then ``core``: ``run_id``, ``core``, the same
``param.*``/``config.*``/``run.*`` columns and, as ``stats.<name>``, that core's counters
(flattened as above; the per-core ``per_structure`` is left out).

``results_per_thread.parquet`` (``load(DIR, table="thread")``): one row per run and
simulated thread of an OS-mode run (``stats["per_thread"]``; trace and synthetic runs have
none), sorted by ``run_id`` then ``thread``: ``run_id``, ``thread`` (the thread's index),
``thread.<field>`` for each other field of its ``per_thread`` entry (``thread.name``,
``thread.class``, ``thread.process``, ``thread.core``, ``thread.daemon``,
``thread.ops_completed``, ``thread.ops_per_second``, ``thread.accesses``,
``thread.start_cycle``, ``thread.end_cycle``), and the same ``param.*``/``config.*``/
``run.*`` columns. A thread class's throughput in a run (``stats["per_class"]``) is the sum
of ``thread.ops_per_second`` over its rows.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

RESULTS = "results.parquet"
RESULTS_PER_CORE = "results_per_core.parquet"
RESULTS_PER_THREAD = "results_per_thread.parquet"
TABLES = {"run": RESULTS, "core": RESULTS_PER_CORE, "thread": RESULTS_PER_THREAD}
_SCALARS = (int, float, str, bool)


def _flatten(tree: Mapping[str, Any], prefix: str, out: dict[str, Any]) -> None:
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            _flatten(value, f"{name}.", out)
        elif isinstance(value, (Mapping, list, tuple)):
            out[name] = json.dumps(value, sort_keys=True)
        else:
            out[name] = value


def _scalars(tree: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    return {f"{prefix}{k}": v for k, v in tree.items() if v is None or isinstance(v, _SCALARS)}


def _stats(tree: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Counters as columns: scalars as they are, a table of scalars one level flattened
    (``prefix + key + "." + sub``), a list of scalars as a JSON string; anything deeper
    is left out."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if value is None or isinstance(value, _SCALARS):
            out[f"{prefix}{key}"] = value
        elif isinstance(value, Mapping):
            if all(v is None or isinstance(v, _SCALARS) for v in value.values()):
                for sub, v in value.items():
                    out[f"{prefix}{key}.{sub}"] = v
        elif isinstance(value, (list, tuple)) and all(v is None or isinstance(v, _SCALARS) for v in value):
            out[f"{prefix}{key}"] = json.dumps(list(value))
    return out


def _finished_runs(directory: Path) -> list[Path]:
    runs = directory / "runs"
    if not runs.is_dir():
        raise FileNotFoundError(2, "no runs folder (is this a sweep output folder?)", str(runs))
    return sorted(p for p in runs.iterdir() if (p / "stats.json").is_file())


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _rows(
    directory: Path,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    rows: list[dict[str, Any]] = []
    core_rows: list[dict[str, Any]] = []
    thread_rows: list[dict[str, Any]] = []
    for run_dir in _finished_runs(directory):
        stats = _read_json(run_dir / "stats.json")
        params_path = run_dir / "params.json"
        params = _read_json(params_path) if params_path.is_file() else {}
        config_path = run_dir / "config.json"
        config = _read_json(config_path) if config_path.is_file() else {}
        common: dict[str, Any] = {"run_id": run_dir.name}
        for key, value in params.items():
            common[f"param.{key}"] = json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value
        _flatten(config, "config.", common)
        run_cols = _scalars(stats.get("run", {}), "run.")
        rows.append(common | _stats(stats.get("totals", {}), "stats.") | run_cols)
        for i, per_core in enumerate(stats.get("per_core", [])):
            core = per_core.get("core", i)
            own = {k: v for k, v in per_core.items() if k != "core"}
            core_rows.append(common | {"core": core} | _stats(own, "stats.") | run_cols)
        for i, per_thread in enumerate(stats.get("per_thread", [])):
            thread = per_thread.get("thread", i)
            own = {k: v for k, v in per_thread.items() if k != "thread"}
            thread_rows.append(common | {"thread": thread} | _stats(own, "thread.") | run_cols)
    return rows, core_rows, thread_rows


def _frame(rows: list[dict[str, Any]], sort: list[str]) -> pd.DataFrame:
    import pandas as pd

    columns = list(dict.fromkeys(k for r in rows for k in r)) or ["run_id"]
    df = pd.DataFrame(rows, columns=columns)
    for col in df.columns:  # mixed types (e.g. 16 and "auto") cannot go to Parquet
        kinds = {type(v) for v in df[col] if v is not None and not _is_nan(v)}
        if len(kinds) > 1 and not kinds <= {int, float}:
            df[col] = [None if v is None or _is_nan(v) else json.dumps(v) for v in df[col]]
    if len(df):
        df = df.sort_values(sort, kind="stable").reset_index(drop=True)
    return df


def _is_nan(v: object) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _write_parquet(df: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        df.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def collect(directory: str | os.PathLike[str]) -> tuple[Path, Path, Path]:
    """Write ``results.parquet``, ``results_per_core.parquet`` and
    ``results_per_thread.parquet`` into a sweep folder; returns their paths."""
    d = Path(directory)
    rows, core_rows, thread_rows = _rows(d)
    paths = (d / RESULTS, d / RESULTS_PER_CORE, d / RESULTS_PER_THREAD)
    _write_parquet(_frame(rows, ["run_id"]), paths[0])
    _write_parquet(_frame(core_rows, ["run_id", "core"]), paths[1])
    _write_parquet(_frame(thread_rows, ["run_id", "thread"]), paths[2])
    return paths


def load(directory: str | os.PathLike[str], per_core: bool = False, *, table: str = "run") -> pd.DataFrame:
    """A sweep's results as a DataFrame: ``table="run"`` (default) one row per run,
    ``"core"`` one per run and core (also ``per_core=True``), ``"thread"`` one per run and
    simulated thread (OS-mode runs). The module docstring lists the columns.

    Reads the Parquet file when it is newer than every run's stats.json; otherwise
    collects first."""
    import pandas as pd

    if per_core:
        table = "core"
    if table not in TABLES:
        raise ValueError(f"table: {table!r} is not a results table: use one of {', '.join(TABLES)}")
    d = Path(directory)
    path = d / TABLES[table]
    newest = max((os.stat(p / "stats.json").st_mtime_ns for p in _finished_runs(d)), default=0)
    if not path.is_file() or os.stat(path).st_mtime_ns <= newest:
        collect(d)
    return pd.read_parquet(path)
