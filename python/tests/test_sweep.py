"""tlbsim.sweep and ``tlbsim sweep``: expansion, validation, IDs, resume, Dask."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tlbsim
from tlbsim import sweep as sweep_module
from tlbsim.cli import main
from tlbsim.sweep import SpecError, expand

FAST_BASE: dict[str, Any] = {
    "machine": {"cores_per_socket": 2, "tlb": {"l1d": {"entries": 64, "ways": 4}}},
    "workload": {"accesses": 20000},
}

EXAMPLE_SPEC = """\
base = "base.toml"
seeds = [1, 2]
[grid]
"machine.tlb.l1d.entries" = [16, 32, 64, 128]
"os.pt_placement" = ["first-touch", "interleave"]
[zip]
"machine.cores_per_socket" = [2, 4]
"workload.threads" = [2, 4]
"""

BASE_TOML = """\
[machine]
cores_per_socket = 2
[machine.tlb.l1d]
entries = 64
ways = 4
[workload]
accesses = 20000
"""


def _write_example(tmp_path: Path) -> Path:
    (tmp_path / "base.toml").write_text(BASE_TOML)
    spec = tmp_path / "example.toml"
    spec.write_text(EXAMPLE_SPEC)
    return spec


def _stats_files(out: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in (out / "runs").glob("*/stats.json")}


# ------------------------------------------------------------------ expansion, IDs


def test_example_spec_expands_grid_times_zip_times_seeds(tmp_path: Path) -> None:
    sw = expand(_write_example(tmp_path))
    assert len(sw.runs) == 4 * 2 * 2 * 2
    first = sw.runs[0].params
    assert first == {
        "machine.tlb.l1d.entries": 16,
        "os.pt_placement": "first-touch",
        "machine.cores_per_socket": 2,
        "workload.threads": 2,
        "seed": 1,
    }
    combos = {tuple(sorted(r.params.items())) for r in sw.runs}
    assert len(combos) == 32
    # zip keys vary together, never crossed
    pairs = {(r.params["machine.cores_per_socket"], r.params["workload.threads"]) for r in sw.runs}
    assert pairs == {(2, 2), (4, 4)}
    assert {r.params["machine.tlb.l1d.entries"] for r in sw.runs} == {16, 32, 64, 128}
    assert {r.params["seed"] for r in sw.runs} == {1, 2}
    assert len({r.id for r in sw.runs}) == 32
    assert all(len(r.id) == 16 and int(r.id, 16) >= 0 for r in sw.runs)


def test_a_zip_list_may_repeat_a_value_but_not_a_row() -> None:
    spec = {"base": FAST_BASE, "zip": {"machine.tlb.l1d.entries": [16, 16, 32], "machine.tlb.l1d.ways": [4, 16, 4]}}
    rows = [(r.params["machine.tlb.l1d.entries"], r.params["machine.tlb.l1d.ways"]) for r in expand(spec).runs]
    assert rows == [(16, 4), (16, 16), (32, 4)]
    spec["zip"]["machine.tlb.l1d.ways"] = [4, 4, 4]
    with pytest.raises(SpecError, match="duplicate run"):
        expand(spec)
    with pytest.raises(SpecError, match="duplicate value"):
        expand({"base": FAST_BASE, "grid": {"machine.tlb.l1d.entries": [16, 16]}})


def test_ids_are_stable_and_depend_on_the_config(tmp_path: Path) -> None:
    spec = {"base": FAST_BASE, "grid": {"machine.tlb.l1d.entries": [16, 32]}}
    ids1 = [r.id for r in expand(spec).runs]
    ids2 = [r.id for r in expand(json.loads(json.dumps(spec))).runs]
    assert ids1 == ids2
    assert ids1[0] != ids1[1]
    other = {"base": FAST_BASE | {"seed": 7}, "grid": {"machine.tlb.l1d.entries": [16, 32]}}
    assert not set(ids1) & {r.id for r in expand(other).runs}
    # the same config reached through the base or through the grid has the same ID
    via_base = {"base": {**FAST_BASE, "seed": 3}, "grid": {"os.thp": [False]}}
    via_grid = {"base": FAST_BASE, "grid": {"os.thp": [False], "seed": [3]}}
    assert expand(via_base).runs[0].id == expand(via_grid).runs[0].id


def test_id_depends_on_trace_contents(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    trace.write_text(" L 1000,8\n")
    spec = {"base": {"workload": {"kind": "trace", "paths": [str(trace)]}}}
    first = expand(spec, validate=False).runs[0].id
    assert expand(spec, validate=False).runs[0].id == first
    trace.write_text(" L 2000,8\n")
    assert expand(spec, validate=False).runs[0].id != first


def test_no_seeds_means_one_run_per_combination() -> None:
    sw = expand({"base": FAST_BASE, "grid": {"os.thp": [False, True]}})
    assert [r.params for r in sw.runs] == [{"os.thp": False}, {"os.thp": True}]


# --------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"base": FAST_BASE, "grids": {}}, "grids"),
        ({"base": FAST_BASE, "grid": {"machine.sockets": []}}, 'grid."machine.sockets"'),
        (
            {"base": FAST_BASE, "zip": {"machine.sockets": [1, 2], "os.thp": [True]}},
            'zip."',
        ),
        ({"base": FAST_BASE, "grid": {"machine.sockets": 2}}, 'grid."machine.sockets"'),
        ({"base": FAST_BASE, "seeds": 3}, "seeds"),
        (
            {"base": FAST_BASE, "grid": {"machine.tlb.l1d.entires": [16]}},
            'grid."machine.tlb.l1d.entires"',
        ),
        ({"base": FAST_BASE, "grid": {"machine.sockets": [0]}}, 'grid."machine.sockets"'),
        ({"base": FAST_BASE, "grid": {"machine.sockets": ["two"]}}, 'grid."machine.sockets"'),
        (
            {
                "base": FAST_BASE,
                "zip": {"machine.cores_per_socket": [2, 1], "workload.threads": [2, 2]},
            },
            'zip."workload.threads"',
        ),
        ({"base": {"machine": {"socket": 1}}}, "base"),
        ({"base": FAST_BASE, "grid": {"os.thp": [True, True]}}, 'grid."os.thp"'),
        ({"base": FAST_BASE, "seeds": [1, 2, 1]}, "seeds"),
        ({"base": FAST_BASE, "grid": {"seed": [1]}, "seeds": [2]}, "seeds"),
        ({"base": 3}, "base"),
    ],
)
def test_bad_spec_fails_before_any_run_naming_the_key(spec: dict[str, Any], named: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        tlbsim.sweep(spec, tmp_path / "out")
    assert str(info.value).startswith(named), str(info.value)
    assert not (tmp_path / "out").exists()


def test_bad_spec_on_the_command_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text('[base.workload]\naccesses = 1000\n[grid]\n"machine.tlb.l1d.entires" = [16]\n')
    code = main(["sweep", str(spec), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith('tlbsim: error: grid."machine.tlb.l1d.entires"')
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_sweep_help_is_clear(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = capsys.readouterr().out
    for word in ("--jobs", "--cluster", "--out", "--progress", "resume"):
        assert word in out


# ------------------------------------------------------------------- run, resume


def test_example_spec_runs_and_writes_every_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = tlbsim.sweep(_write_example(tmp_path), out, jobs=2)
    assert (summary.total, summary.skipped, summary.ran) == (32, 0, 32)
    assert (out / "spec.toml").read_text() == EXAMPLE_SPEC
    ids = {r.id for r in expand(tmp_path / "example.toml").runs}
    assert {p.name for p in (out / "runs").iterdir()} == ids
    for run_dir in (out / "runs").iterdir():
        params = json.loads((run_dir / "params.json").read_text())
        config = json.loads((run_dir / "config.json").read_text())
        assert config["machine"]["tlb"]["l1d"]["entries"] == params["machine.tlb.l1d.entries"]
        assert config["seed"] == params["seed"]
        assert json.loads((run_dir / "stats.json").read_text())["totals"]["accesses"] > 0
    again = tlbsim.sweep(tmp_path / "example.toml", out, jobs=2)
    assert (again.total, again.skipped, again.ran) == (32, 32, 0)


def test_a_sweep_resumed_after_the_model_changed_runs_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run IDs include the digest of the core's sources: a finished run of the model before
    is not reused (session 38 found reproduce reading an earlier session's runs)."""
    import tlbsim.sweep as sweep_module

    spec = tmp_path / "small.toml"
    spec.write_text('[base.workload]\naccesses = 20000\n[grid]\n"os.thp" = [false, true]\n')
    out = tmp_path / "out"
    first = tlbsim.sweep(spec, out, jobs=1)
    assert (first.total, first.skipped, first.ran) == (2, 0, 2)
    old_ids = {r.id for r in expand(spec).runs}
    real = sweep_module._tlbsim.source_hash()
    monkeypatch.setattr(sweep_module._tlbsim, "source_hash", lambda: real[::-1])
    second = tlbsim.sweep(spec, out, jobs=1)
    assert (second.total, second.skipped, second.ran) == (2, 0, 2)
    assert not old_ids & {r.id for r in expand(spec).runs}


RESUME_SPEC = """\
seeds = [1, 2, 3, 4, 5, 6]
[base.machine]
cores_per_socket = 2
[base.workload]
accesses = 500000
[grid]
"os.thp" = [false, true]
"""


def _finished(out: Path) -> int:
    return len(list((out / "runs").glob("*/stats.json"))) if (out / "runs").is_dir() else 0


def test_resume_after_sigkill_loses_and_redoes_nothing(tmp_path: Path) -> None:
    spec = tmp_path / "resume.toml"
    spec.write_text(RESUME_SPEC)
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "tlbsim.cli", "sweep", str(spec), "--jobs", "1", "--out"]
    proc = subprocess.Popen([*cmd, str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while _finished(out) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = _finished(out)
    assert 2 <= done_before < 12, "the sweep was not killed part-way"
    mtimes = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/stats.json")}

    second = subprocess.run([*cmd, str(out)], capture_output=True, text=True, check=True)
    assert f"12 runs: {done_before} already finished, {12 - done_before} to run" in second.stdout
    assert f"skipped {done_before}, ran {12 - done_before}" in second.stdout
    for path, mtime in mtimes.items():  # finished runs were not redone
        assert path.stat().st_mtime_ns == mtime

    ids = {r.id for r in expand(spec).runs}
    assert {p.name for p in (out / "runs").iterdir()} == ids
    for run_dir in (out / "runs").iterdir():
        assert sorted(p.name for p in run_dir.iterdir()) == [
            "config.json",
            "params.json",
            "stats.json",
        ]

    reference = tmp_path / "whole"
    tlbsim.sweep(spec, reference, jobs=2)
    assert _stats_files(out) == _stats_files(reference)


def test_leftover_temp_files_are_cleaned(tmp_path: Path) -> None:
    spec = {"base": FAST_BASE, "grid": {"os.thp": [False, True]}}
    first = expand(spec).runs[0].id
    run_dir = tmp_path / "runs" / first
    run_dir.mkdir(parents=True)
    (run_dir / ".stats.json.tmp-999").write_text("{trunc")
    (run_dir / "config.json").write_text("{}")
    summary = tlbsim.sweep(spec, tmp_path)
    assert summary.ran == 2
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.json", "params.json", "stats.json"]
    assert json.loads((run_dir / "config.json").read_text())["os"]["thp"] is False


def test_module_is_callable_and_exports() -> None:
    assert callable(sweep_module)
    assert tlbsim.sweep.SpecError is tlbsim.SpecError
    assert issubclass(SpecError, ValueError)


# --------------------------------------------------------------------------- Dask


def test_dask_cluster_gives_identical_stats(tmp_path: Path) -> None:
    from dask.distributed import LocalCluster  # in the test extra: CI runs this path

    spec = {
        "base": FAST_BASE,
        "seeds": [1, 2],
        "grid": {"machine.tlb.l1d.entries": [16, 32, 64]},
        "zip": {"machine.cores_per_socket": [1, 2], "workload.threads": [1, 2]},
    }
    local = tmp_path / "local"
    tlbsim.sweep(spec, local, jobs=2)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        summary = tlbsim.sweep(spec, tmp_path / "dask", cluster=cluster.scheduler_address)
        assert (summary.total, summary.ran) == (12, 12)
        again = tlbsim.sweep(spec, tmp_path / "dask", cluster=cluster.scheduler_address)
        assert (again.skipped, again.ran) == (12, 0)
    assert _stats_files(tmp_path / "dask") == _stats_files(local)
    assert len(_stats_files(local)) == 12
    for run_id in _stats_files(local):
        for name in ("config.json", "params.json"):
            a = (local / "runs" / run_id / name).read_bytes()
            assert a == (tmp_path / "dask" / "runs" / run_id / name).read_bytes()


def test_missing_dask_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    with pytest.raises(ImportError, match=r"tlbsim\[cluster\]"):
        tlbsim.sweep({"base": FAST_BASE}, tmp_path, cluster="tcp://127.0.0.1:1")


# ------------------------------------------------------------------------- README

# The walkthrough's OS-mode config, the base of its sweep: one text, test_cli.py's.
from test_cli import README_EXAMPLE as README_CONFIG

README_SPEC = """\
base = "cfg.toml"           # relative to the spec; or an inline [base] table
seeds = [1, 2]              # every combination once per seed
[grid]                      # Cartesian product
"os.coherence" = ["linux", "oracle", "abis", "didi", "latr"]
[zip]                       # varied together (equal lengths), crossed with the grid
"machine.cores_per_socket" = [2, 4]
"workload.threads" = [2, 4]
"""


def test_readme_sweep_example_works_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert README_CONFIG in readme
    assert README_SPEC in readme
    assert "tlbsim sweep sweep.toml --out out/sweep   # 5 x 2 x 2 = 20 runs" in readme
    (tmp_path / "cfg.toml").write_text(README_CONFIG)
    (tmp_path / "sweep.toml").write_text(README_SPEC)
    out = tmp_path / "out" / "sweep"
    assert main(["sweep", str(tmp_path / "sweep.toml"), "--jobs", "2", "--out", str(out)]) == 0
    assert "total 20, skipped 0, ran 20" in capsys.readouterr().out
    assert main(["collect", str(out)]) == 0
    df = tlbsim.load(out)
    assert len(df) == 20
    assert sorted(set(df["param.os.coherence"])) == ["abis", "didi", "latr", "linux", "oracle"]
    assert (df[df["param.os.coherence"] == "linux"]["stats.shootdowns_sent"] > 0).all()
    assert (df["stats.violations_security"] == 0).all()


# The user guide's spec (docs/GUIDE.md, "Sweeps"), over a trace-mode base.
GUIDE_SPEC = """\
base = "base.toml"          # relative to the spec; or an inline [base] table
seeds = [1, 2]              # optional: every combination once per seed
[grid]                      # Cartesian product
"machine.tlb.l1d.entries" = [16, 32, 64]
"os.pt_placement" = ["first-touch", "interleave"]
[zip]                       # varied together (equal lengths), crossed with the grid
"machine.cores_per_socket" = [1, 2]
"workload.threads" = [1, 2]
"""


def test_guide_sweep_example_works_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    guide = (Path(__file__).parents[2] / "docs" / "GUIDE.md").read_text()
    assert GUIDE_SPEC in guide
    (tmp_path / "base.toml").write_text(BASE_TOML)
    (tmp_path / "sweep.toml").write_text(GUIDE_SPEC)
    out = tmp_path / "out" / "sweep"
    assert main(["sweep", str(tmp_path / "sweep.toml"), "--jobs", "2", "--out", str(out)]) == 0
    assert "total 24, skipped 0, ran 24" in capsys.readouterr().out
    assert main(["collect", str(out)]) == 0
    assert len(tlbsim.load(out)) == 24


# ------------------------------------------------------------ the contract spec

REPO = Path(__file__).parents[2]
CONTRACT_SPEC = """\
base = "configs/example.toml"   # or an inline [base] table holding a run config
seeds = [1, 2]
[grid]
"machine.tlb.l1d.entries" = [16, 32, 64, 128]
"os.coherence" = ["linux", "oracle"]
[zip]   # optional: lists of equal length varied together
"machine.cores_per_socket" = [2, 4]
"workload.threads" = [2, 4]
"""


def test_contract_spec_runs_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The sweep spec of the experiments issue, word for word, on the repository's
    configs/example.toml (an OS-mode workload, so the policies differ)."""
    (tmp_path / "configs").mkdir()
    example = (REPO / "configs" / "example.toml").read_bytes()
    (tmp_path / "configs" / "example.toml").write_bytes(example)
    spec = tmp_path / "sweep.toml"
    spec.write_text(CONTRACT_SPEC)
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--jobs", "2", "--out", str(out)]) == 0
    assert "total 32, skipped 0, ran 32" in capsys.readouterr().out
    runs = tlbsim.load(out)
    assert len(runs) == 32
    assert (runs["param.os.coherence"] == runs["run.coherence"]).all()
    assert (runs["config.machine.cores_per_socket"] == runs["config.workload.threads"]).all()
    assert set(runs["config.machine.tlb.l1d.entries"]) == {16, 32, 64, 128}
    # every combination once per policy, and the policies give different results
    keys = ["param.machine.tlb.l1d.entries", "param.workload.threads", "param.seed"]
    pairs = runs.pivot_table(
        index=keys,
        columns="param.os.coherence",
        values=["stats.shootdown_ipis_received", "run.makespan_cycles"],
    )
    assert len(pairs) == 16 and not pairs.isna().any().any()
    assert (pairs["stats.shootdown_ipis_received"]["linux"] > 0).all()
    assert (pairs["stats.shootdown_ipis_received"]["oracle"] == 0).all()
    assert (pairs["run.makespan_cycles"]["linux"] > pairs["run.makespan_cycles"]["oracle"]).all()
    assert (runs["stats.violations_security"] + runs["stats.violations_consistency"] == 0).all()
    threads = tlbsim.load(out, table="thread")
    assert len(threads) == int(runs["config.workload.threads"].sum())
    assert set(threads["thread.class"]) == {"worker"}
    # resumes: nothing to redo
    again = tlbsim.sweep(spec, out, jobs=2)
    assert (again.total, again.skipped, again.ran) == (32, 32, 0)


def test_coherence_is_refused_for_a_synthetic_base(tmp_path: Path) -> None:
    """os.coherence has no effect on a trace-engine (synthetic) workload: a spec that varies
    it is refused before anything runs, naming the key (issue 49: no silent settings)."""
    spec = {
        "base": FAST_BASE,
        "grid": {"os.coherence": tlbsim.coherence_policies()},
    }
    with pytest.raises(SpecError, match="os.coherence.*cannot matter.*trace mode"):
        tlbsim.sweep(spec, tmp_path, jobs=2)
