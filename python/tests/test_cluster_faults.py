"""Issue 51 item 4: a sweep on a Dask cluster loses nothing when a worker dies, or when the
scheduler dies and the sweep is submitted again. Real processes: a ``LocalCluster`` of two
worker processes (SIGKILL one mid-sweep), and a ``dask scheduler`` / ``dask worker`` pair of
subprocesses (SIGKILL the scheduler mid-sweep, start new ones, resume)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import tlbsim
from tlbsim import sweep as sweep_module

pytest.importorskip("dask.distributed")

# About 0.1-0.3 s of CPU a run on this workplace's shared 2-vCPU guests: long enough to kill
# something while runs are in flight, short enough for the whole file to take under a minute.
BASE: dict[str, Any] = {
    "machine": {"cores_per_socket": 2, "tlb": {"l1d": {"entries": 64, "ways": 4}}},
    "workload": {"accesses": 150000},
}
SPEC: dict[str, Any] = {"base": BASE, "seeds": [1, 2, 3], "grid": {"machine.tlb.l1d.entries": [16, 32, 64, 128]}}
RUNS = 12


def _recording_writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every run the sweep writes as finished, in order (to check each is written once)."""
    written: list[str] = []
    real = sweep_module._write_run

    def record(run_dir: Path, config_json: str, stats_json: str, params: dict[str, Any]) -> None:
        real(run_dir, config_json, stats_json, params)
        written.append(run_dir.name)

    monkeypatch.setattr(sweep_module, "_write_run", record)
    return written


def _check_complete(out: Path) -> None:
    """Every run of the spec finished exactly once: config, params and a parseable stats,
    no temporary file left, and no directory that is not one of the spec's runs."""
    ids = {r.id for r in sweep_module.expand(SPEC).runs}
    dirs = {p.name for p in (out / "runs").iterdir()}
    assert dirs == ids
    for rid in ids:
        names = sorted(p.name for p in (out / "runs" / rid).iterdir())
        assert names == ["config.json", "params.json", "stats.json"], (rid, names)
        assert json.loads((out / "runs" / rid / "stats.json").read_text())["totals"]


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _finished(out: Path) -> int:
    return len(list((out / "runs").glob("*/stats.json"))) if (out / "runs").is_dir() else 0


def test_a_worker_killed_mid_sweep_loses_no_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dask.distributed import Client, LocalCluster

    written = _recording_writes(monkeypatch)
    out = tmp_path / "out"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster.scheduler_address) as client:
            pids = client.run(os.getpid)
        result: dict[str, Any] = {}

        def go() -> None:
            try:
                result["summary"] = tlbsim.sweep(SPEC, out, cluster=cluster.scheduler_address)
            except BaseException as err:  # noqa: BLE001 - re-raised by the test thread below
                result["error"] = err

        t = threading.Thread(target=go)
        t.start()
        _wait_for(lambda: _finished(out) >= 1 or not t.is_alive(), 40, "the first finished run")
        assert _finished(out) < RUNS, "the sweep finished before a worker could be killed: make runs longer"
        os.kill(min(pids.values()), signal.SIGKILL)
        t.join(60)
        assert not t.is_alive()
    assert "error" not in result, result.get("error")
    assert (result["summary"].total, result["summary"].ran) == (RUNS, RUNS)
    assert sorted(written) == sorted(set(written)) and len(written) == RUNS
    _check_complete(out)


def _start_scheduler(tmp_path: Path, name: str) -> tuple[subprocess.Popen[bytes], str]:
    file = tmp_path / f"{name}.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distributed.cli.dask_scheduler",
            "--port",
            "0",
            "--no-dashboard",
            "--scheduler-file",
            str(file),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_for(lambda: file.is_file() and file.stat().st_size > 0, 30, "the scheduler file")
    return proc, json.loads(file.read_text())["address"]


def _start_workers(address: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distributed.cli.dask_worker",
            address,
            "--nworkers",
            "2",
            "--nthreads",
            "1",
            "--no-dashboard",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_a_scheduler_killed_mid_sweep_then_resubmitted_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written = _recording_writes(monkeypatch)
    out = tmp_path / "out"
    scheduler, address = _start_scheduler(tmp_path, "first")
    workers = _start_workers(address)
    try:
        result: dict[str, Any] = {}

        def go() -> None:
            try:
                result["summary"] = tlbsim.sweep(SPEC, out, cluster=address)
            except BaseException as err:  # noqa: BLE001 - the scheduler's death ends the sweep
                result["error"] = err

        t = threading.Thread(target=go)
        t.start()
        _wait_for(lambda: _finished(out) >= 1 or not t.is_alive(), 40, "the first finished run")
        before = _finished(out)
        assert before < RUNS, "the sweep finished before the scheduler could be killed: make runs longer"
        _stop(scheduler)
        t.join(60)
        assert not t.is_alive(), "the sweep hangs after its scheduler died"
        assert "error" in result, "the sweep claims to have finished without its scheduler"
    finally:
        _stop(workers)
        _stop(scheduler)
    first = list(written)
    done_first = _finished(out)
    assert done_first < RUNS
    # A half-written run (killed between its config and its stats) must run again.
    half = next(r.id for r in sweep_module.expand(SPEC).runs if not (out / "runs" / r.id / "stats.json").exists())
    (out / "runs" / half).mkdir(parents=True, exist_ok=True)
    (out / "runs" / half / "config.json").write_text("{}")
    (out / "runs" / half / ".stats.json.tmp-1").write_text("{")

    scheduler, address = _start_scheduler(tmp_path, "second")
    workers = _start_workers(address)
    try:
        summary = tlbsim.sweep(SPEC, out, cluster=address)
    finally:
        _stop(workers)
        _stop(scheduler)
    assert (summary.total, summary.skipped, summary.ran) == (RUNS, done_first, RUNS - done_first)
    assert half in written[len(first) :]
    assert sorted(written) == sorted(set(written)) and len(written) == RUNS
    _check_complete(out)
