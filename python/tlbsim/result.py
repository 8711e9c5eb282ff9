"""The result of one run: effective config and statistics."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

_SCALARS = (int, float, str, bool)


def write_json_atomic(path: Path, data: object) -> None:
    """Write ``data`` as JSON to a temporary name beside ``path``, then rename it."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _scalars(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if isinstance(v, _SCALARS) or v is None}


@dataclass
class Result:
    """``config``: the effective config (every key, so the run can be repeated from it);
    ``stats``: the statistics (the content of stats.json)."""

    config: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        """One row per core (``core`` column, then every scalar per-core statistic) and a
        last row ``core="total"`` from ``stats["totals"]``."""
        import pandas as pd

        rows: list[dict[str, Any]] = []
        for i, per_core in enumerate(self.stats.get("per_core", [])):
            row = _scalars(per_core)
            row["core"] = row.get("core", i)
            rows.append(row)
        totals = _scalars(self.stats.get("totals", {}))
        totals["core"] = "total"
        rows.append(totals)
        columns = ["core"] + [c for c in dict.fromkeys(k for r in rows for k in r) if c != "core"]
        return pd.DataFrame(rows, columns=columns)

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``config.json`` and ``stats.json`` into ``directory`` (created if needed);
        each file appears whole or not at all. Returns the directory."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / "config.json", self.config)
        write_json_atomic(out / "stats.json", self.stats)
        return out
