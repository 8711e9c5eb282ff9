"""tlbsim.store: ``tlbsim collect`` and ``tlbsim.load``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import tlbsim
from tlbsim.cli import main
from tlbsim.store import collect

SPEC: dict[str, Any] = {
    "base": {"machine": {"cores_per_socket": 2}, "workload": {"accesses": 20000}},
    "seeds": [1, 2],
    "grid": {"os.thp": [False, True]},
    "zip": {"machine.cores_per_socket": [1, 2], "workload.threads": [1, 2]},
}


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("store")
    tlbsim.sweep(SPEC, out, jobs=2)
    return out


def test_collect_writes_one_row_per_run(sweep_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collect", str(sweep_dir)]) == 0
    assert "results.parquet" in capsys.readouterr().out
    df = pd.read_parquet(sweep_dir / "results.parquet")
    assert len(df) == 8
    assert list(df["run_id"]) == sorted(p.name for p in (sweep_dir / "runs").iterdir())
    for col in (
        "param.os.thp",
        "param.machine.cores_per_socket",
        "param.workload.threads",
        "param.seed",
        "config.machine.tlb.l1d.entries",
        "config.machine.memory.latency_matrix",
        "config.workload.pattern",
        "stats.accesses",
        "stats.walks",
        "run.makespan_cycles",
    ):
        assert col in df.columns, col
    assert not any(c.startswith("stats.per_structure") for c in df.columns)
    assert (df["param.seed"] == df["config.seed"]).all()
    assert (df["param.os.thp"] == df["config.os.thp"]).all()
    # A list-valued config key is kept, as JSON (the synthetic kind's table has no list; the
    # machine's latency matrix is empty by default).
    assert json.loads(df["config.machine.memory.latency_matrix"][0]) == []
    stats = json.loads((sweep_dir / "runs" / df["run_id"][0] / "stats.json").read_text())
    assert df["stats.walks"][0] == stats["totals"]["walks"]


def test_per_core_rows_are_runs_times_cores(sweep_dir: Path) -> None:
    collect(sweep_dir)
    df = pd.read_parquet(sweep_dir / "results_per_core.parquet")
    runs = pd.read_parquet(sweep_dir / "results.parquet")
    assert len(df) == int(runs["config.machine.cores_per_socket"].sum())  # 4 runs x 1 + 4 x 2
    assert list(zip(df["run_id"], df["core"])) == sorted(zip(df["run_id"], df["core"]))
    assert {"run_id", "core", "param.seed", "stats.accesses", "run.makespan_cycles"} <= set(df.columns)
    summed = df.groupby("run_id")["stats.accesses"].sum()
    assert (summed.values == runs.set_index("run_id")["stats.accesses"].loc[summed.index]).all()


def test_load_collects_when_stale_and_reads_when_fresh(sweep_dir: Path) -> None:
    for name in ("results.parquet", "results_per_core.parquet", "results_per_thread.parquet"):
        (sweep_dir / name).unlink(missing_ok=True)
    df = tlbsim.load(sweep_dir)
    assert len(df) == 8 and (sweep_dir / "results.parquet").is_file()
    assert len(tlbsim.load(sweep_dir, per_core=True)) == 12
    mtime = (sweep_dir / "results.parquet").stat().st_mtime_ns
    tlbsim.load(sweep_dir)  # fresh: read as is
    assert (sweep_dir / "results.parquet").stat().st_mtime_ns == mtime
    # a newer stats.json makes it stale
    stats = next((sweep_dir / "runs").glob("*/stats.json"))
    os.utime(stats, ns=(mtime + 10**9, mtime + 10**9))
    assert len(tlbsim.load(sweep_dir)) == 8
    assert (sweep_dir / "results.parquet").stat().st_mtime_ns != mtime


def test_unfinished_runs_are_not_rows(tmp_path: Path) -> None:
    tlbsim.sweep({"base": SPEC["base"], "seeds": [1, 2]}, tmp_path, jobs=1)
    unfinished = tmp_path / "runs" / "0000000000000000"
    unfinished.mkdir()
    (unfinished / "config.json").write_text("{}")
    assert len(tlbsim.load(tmp_path)) == 2


def test_collect_outside_a_sweep_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collect", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("tlbsim: error: ")


# ------------------------------------------------------------------ OS-mode runs: threads

OS_SPEC: dict[str, Any] = {
    "base": {
        "machine": {"cores_per_socket": 4},
        "workload": {"kind": "fpr-munmap", "case": 2, "ops": 40},
    },
    "seeds": [1],
    "grid": {"os.coherence": ["linux", "oracle"], "workload.threads": [2, 3]},
}


@pytest.fixture(scope="module")
def os_sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("store-os")
    tlbsim.sweep(OS_SPEC, out, jobs=2)
    return out


def _stats_of(directory: Path, run_id: str) -> dict[str, Any]:
    stats: dict[str, Any] = json.loads((directory / "runs" / run_id / "stats.json").read_text())
    return stats


def test_per_thread_table(os_sweep_dir: Path) -> None:
    paths = collect(os_sweep_dir)
    assert [p.name for p in paths] == [
        "results.parquet",
        "results_per_core.parquet",
        "results_per_thread.parquet",
    ]
    df = tlbsim.load(os_sweep_dir, table="thread")
    assert df.equals(pd.read_parquet(os_sweep_dir / "results_per_thread.parquet"))
    # fpr-munmap case 2: 1 I/O thread + N compute threads
    runs = tlbsim.load(os_sweep_dir)
    assert len(df) == int((1 + runs["config.workload.threads"]).sum()) == 2 * (3 + 4)
    assert list(zip(df["run_id"], df["thread"])) == sorted(zip(df["run_id"], df["thread"]))
    for col in (
        "thread.name",
        "thread.class",
        "thread.process",
        "thread.core",
        "thread.daemon",
        "thread.ops_completed",
        "thread.ops_per_second",
        "thread.accesses",
        "thread.start_cycle",
        "thread.end_cycle",
        "param.os.coherence",
        "param.workload.threads",
        "config.os.coherence",
        "config.workload.kind",
        "run.makespan_cycles",
        "run.coherence",
    ):
        assert col in df.columns, col
    assert set(df["thread.class"]) == {"io", "compute"}
    assert df.loc[df["thread.class"] == "compute", "thread.daemon"].all()
    assert (df["param.os.coherence"] == df["run.coherence"]).all()
    # the per-class throughput of stats.json is the sum over the class's rows
    for run_id, rows in df.groupby("run_id"):
        per_class = _stats_of(os_sweep_dir, str(run_id))["per_class"]
        sums = rows.groupby("thread.class")["thread.ops_per_second"].sum()
        assert set(sums.index) == set(per_class)
        for cls, value in sums.items():
            assert value == pytest.approx(per_class[cls]["ops_per_second"])
        assert rows.groupby("thread.class").size().to_dict() == {c: v["threads"] for c, v in per_class.items()}


def test_os_counters_in_run_and_core_tables(os_sweep_dir: Path) -> None:
    runs = tlbsim.load(os_sweep_dir)
    cores = tlbsim.load(os_sweep_dir, table="core")
    assert cores.equals(tlbsim.load(os_sweep_dir, per_core=True))
    for col in (
        "stats.shootdowns_sent",
        "stats.shootdown_ipis_sent",
        "stats.shootdown_ipis_received",
        "stats.false_positive_targets",
        "stats.violations_security",
        "stats.violations_consistency",
        "stats.targets_per_shootdown",
        "stats.full_flushes_by_cause.shootdown",
        "stats.full_flushes_by_cause.context_switch",
    ):
        assert col in runs.columns, col
        assert col in cores.columns, col
    assert not any(c.startswith("stats.per_structure") for c in cores.columns)
    for _, row in runs.iterrows():
        totals = _stats_of(os_sweep_dir, row["run_id"])["totals"]
        assert json.loads(row["stats.targets_per_shootdown"]) == totals["targets_per_shootdown"]
        for cause, n in totals["full_flushes_by_cause"].items():
            assert row[f"stats.full_flushes_by_cause.{cause}"] == n
    linux = runs[runs["param.os.coherence"] == "linux"]
    oracle = runs[runs["param.os.coherence"] == "oracle"]
    assert (linux["stats.shootdown_ipis_received"] > 0).all()
    assert (oracle["stats.shootdown_ipis_received"] == 0).all()
    hist = linux["stats.targets_per_shootdown"].map(json.loads)
    assert (hist.map(sum) == linux["stats.shootdowns_sent"]).all()


def test_trace_mode_sweep_has_an_empty_thread_table(sweep_dir: Path) -> None:
    df = tlbsim.load(sweep_dir, table="thread")
    assert len(df) == 0 and "run_id" in df.columns


def test_load_rejects_an_unknown_table(sweep_dir: Path) -> None:
    with pytest.raises(ValueError, match="thread"):
        tlbsim.load(sweep_dir, table="threads")
