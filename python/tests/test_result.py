"""tlbsim.result: Result.to_frame() and Result.save()."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import COUNTERS

from tlbsim import Result


def test_to_frame_one_row_per_core_and_total(fake_stats: dict[str, Any]) -> None:
    frame = Result(config={"seed": 1}, stats=fake_stats).to_frame()
    assert list(frame["core"]) == [0, 1, "total"]
    assert frame.columns[0] == "core"
    assert set(COUNTERS) <= set(frame.columns)
    assert "by_level" not in frame.columns
    assert frame["accesses"].tolist() == [2, 4, 6]
    assert frame.loc[frame["core"] == "total", "walks"].item() == 7 + 14


def test_to_frame_without_cores_has_total_row() -> None:
    frame = Result(stats={"totals": {"accesses": 5}}).to_frame()
    assert list(frame["core"]) == ["total"]
    assert frame["accesses"].tolist() == [5]


def test_save_writes_both_files(tmp_path: Path, fake_stats: dict[str, Any]) -> None:
    config = {"seed": 1, "machine": {"sockets": 1}}
    out = Result(config=config, stats=fake_stats).save(tmp_path / "a" / "b")
    assert out == tmp_path / "a" / "b"
    assert json.loads((out / "config.json").read_text()) == config
    assert json.loads((out / "stats.json").read_text()) == fake_stats
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "stats.json"]  # no temp files


def test_save_replaces_existing_files(tmp_path: Path, fake_stats: dict[str, Any]) -> None:
    Result(config={"seed": 1}, stats={}).save(tmp_path)
    Result(config={"seed": 2}, stats=fake_stats).save(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text()) == {"seed": 2}
