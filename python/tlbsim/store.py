"""A sweep's results as tables: ``collect`` writes Parquet, ``load`` reads it.

Columns (one row per finished run, sorted by ``run_id``):

- ``run_id``;
- ``param.<dotted key>``: the run's swept values (params.json);
- ``config.<dotted key>``: every scalar of the effective config (config.json); lists and
  tables that are not expanded (lists, empty tables) are JSON strings;
- ``stats.<name>``: every scalar of ``stats["totals"]``;
- ``run.<name>``: every scalar of ``stats["run"]``.

The per-core table (``results_per_core.parquet``) has ``run_id``, ``core``, the same
``param.*``/``config.*``/``run.*`` columns and, as ``stats.<name>``, that core's scalars;
rows sorted by ``run_id`` then ``core``.
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


def _finished_runs(directory: Path) -> list[Path]:
    runs = directory / "runs"
    if not runs.is_dir():
        raise FileNotFoundError(2, "no runs folder (is this a sweep output folder?)", str(runs))
    return sorted(p for p in runs.iterdir() if (p / "stats.json").is_file())


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _rows(directory: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows: list[dict[str, Any]] = []
    core_rows: list[dict[str, Any]] = []
    for run_dir in _finished_runs(directory):
        stats = _read_json(run_dir / "stats.json")
        params_path = run_dir / "params.json"
        params = _read_json(params_path) if params_path.is_file() else {}
        config_path = run_dir / "config.json"
        config = _read_json(config_path) if config_path.is_file() else {}
        common: dict[str, Any] = {"run_id": run_dir.name}
        for key, value in params.items():
            common[f"param.{key}"] = (
                json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value
            )
        _flatten(config, "config.", common)
        run_cols = _scalars(stats.get("run", {}), "run.")
        rows.append(common | _scalars(stats.get("totals", {}), "stats.") | run_cols)
        for i, per_core in enumerate(stats.get("per_core", [])):
            core = per_core.get("core", i)
            own = {k: v for k, v in per_core.items() if k != "core"}
            core_rows.append(common | {"core": core} | _scalars(own, "stats.") | run_cols)
    return rows, core_rows


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


def collect(directory: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``results.parquet`` and ``results_per_core.parquet`` into a sweep folder."""
    d = Path(directory)
    rows, core_rows = _rows(d)
    paths = (d / RESULTS, d / RESULTS_PER_CORE)
    _write_parquet(_frame(rows, ["run_id"]), paths[0])
    _write_parquet(_frame(core_rows, ["run_id", "core"]), paths[1])
    return paths


def load(directory: str | os.PathLike[str], per_core: bool = False) -> pd.DataFrame:
    """A sweep's results (one row per run, or per run and core with ``per_core=True``).

    Reads the Parquet file when it is newer than every run's stats.json; otherwise
    collects first."""
    import pandas as pd

    d = Path(directory)
    path = d / (RESULTS_PER_CORE if per_core else RESULTS)
    newest = max((os.stat(p / "stats.json").st_mtime_ns for p in _finished_runs(d)), default=0)
    if not path.is_file() or os.stat(path).st_mtime_ns <= newest:
        collect(d)
    return pd.read_parquet(path)
