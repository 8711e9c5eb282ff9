"""tlbsim validate: the table logic with tlbsim.run mocked (the simulator's
shootdown-patterns workload is built elsewhere), the graceful rows, and the real thing
once that workload exists."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tlbsim
from tlbsim.host import fit, measure, patterns
from tlbsim.host import validate as val
from tlbsim.result import Result

PATTERNS = ["munmap-4k", "munmap-4k-sleep", "munmap-4k-alone", "mprotect-toggle", "two-processes"]
REAL_IPIS = {
    "munmap-4k": 1.0,
    "munmap-4k-sleep": 0.0,
    "munmap-4k-alone": 0.0,
    "mprotect-toggle": 1.999,
    "two-processes": 0.0001,
}
REAL_OPS = {
    "munmap-4k": 120e3,
    "munmap-4k-sleep": 170e3,
    "munmap-4k-alone": 166e3,
    "mprotect-toggle": 130e3,
    "two-processes": 240e3,
}


def real_record(name: str) -> dict[str, Any]:
    ops = 20000
    return {
        "pattern": name,
        "ops": ops,
        "ops_per_second": REAL_OPS[name],
        "per_thread": [{"thread": 0, "ops_completed": ops, "ops_per_second": REAL_OPS[name]}],
        "shootdown_ipis_received_per_op": REAL_IPIS[name],
        "totals": {"shootdown_ipis_received": round(REAL_IPIS[name] * ops)},
    }


def fake_stats(ipis_per_op: float, ops_per_second: float, ops: int = 2000) -> dict[str, Any]:
    return {
        "totals": {"shootdown_ipis_received": round(ipis_per_op * ops)},
        "per_thread": [
            {"thread": 0, "ops_completed": ops, "ops_per_second": ops_per_second},
            {"thread": 1, "ops_completed": 0, "ops_per_second": 0.0},
        ],
    }


def miss_stats(pages: int, accesses: int, l1: int = 96, l2: int = 1536) -> dict[str, Any]:
    return {
        "totals": {
            "accesses": accesses,
            "l1_tlb_misses": pages + round(accesses * float(fit.miss_rate([pages], l1)[0])),
            "l2_tlb_misses": pages + round(accesses * float(fit.miss_rate([pages], l2)[0])),
        }
    }


class FakeRun:
    """Stands for tlbsim.run: shootdown patterns from a table (or an error), the synthetic
    reach workload from exact miss rates."""

    def __init__(self, table: dict[str, tuple[float, float]] | None, error: Exception | None = None) -> None:
        self.table, self.error, self.calls = table, error, []

    def __call__(self, config: Any, *, overrides: dict[str, Any]) -> Result:
        self.calls.append(overrides)
        if overrides["workload.kind"] == "synthetic":
            pages = overrides["workload.region_bytes"] // 4096
            return Result(config={}, stats=miss_stats(pages, overrides["workload.accesses"]))
        assert overrides["os.coherence"] == "linux" and overrides["machine.cores_per_socket"] == 2
        if self.error:
            raise self.error
        assert self.table is not None
        ipo, rate = self.table[overrides["workload.pattern"]]
        return Result(config={}, stats=fake_stats(ipo, rate))


def test_ipi_rows_tolerance() -> None:
    real = {n: real_record(n) for n in PATTERNS}
    sim = {
        "munmap-4k": {"ipis_per_op": 1.04},
        "munmap-4k-sleep": {"ipis_per_op": 0.049},
        "munmap-4k-alone": {"ipis_per_op": 0.06},
        "mprotect-toggle": {"ipis_per_op": 2.09},
        "two-processes": {"error": "simulation failed: boom"},
    }
    rows = {r.name: r for r in val.ipi_rows(real, sim)}
    assert rows["munmap-4k"].status == "pass"  # |1.04 - 1| <= 0.05
    assert rows["munmap-4k-sleep"].status == "pass"  # 0.049 <= 0.05 absolute below one IPI
    assert rows["munmap-4k-alone"].status == "FAIL"
    assert rows["mprotect-toggle"].status == "pass"  # 0.091 <= 5% of 2
    assert rows["two-processes"].status == "error" and rows["two-processes"].note == "simulation failed: boom"


def test_ipi_rows_compare_the_operations_the_sibling_was_there_for() -> None:
    """The bench's record from a run whose sibling's CPU was taken 11% of the operations:
    the simulated sibling never leaves, so the row compares the IPIs per operation the real
    one was there for, and says how many operations found it away."""
    from tlbsim.host.measure import shootdown_record

    raw = {
        "pattern": "dontneed",
        "sibling": "spin",
        "ops": 20000,
        "reps": 3,
        "ops_per_second_median": 52000.0,
        "ipis_per_op": [0.8184, 0.8902, 0.8884],
        "ipis_per_op_median": 0.8884,
        "sibling_away_fraction": [0.184, 0.1124, 0.1143],
        "ipis_per_op_sibling_present": [1.0029, 1.0029, 1.003],
        "ipis_per_op_sibling_present_median": 1.0029,
    }
    rec = shootdown_record(raw, expected=1.0)
    assert rec["shootdown_ipis_received_per_op"] == 0.8884  # over all operations, as the throughput
    assert rec["sibling_away_fraction"] == 0.1143 and "note" not in rec
    (row,) = val.ipi_rows({"dontneed": rec}, {"dontneed": {"ipis_per_op": 1.0}})
    assert (row.real, row.status) == (1.0029, "pass")
    assert "off its CPU for 11% of the operations" in row.note and "0.888" in row.note
    # A bench from before the count (or a pattern without a spinning sibling): the plain ratio.
    old = shootdown_record({k: v for k, v in raw.items() if "away" not in k and "present" not in k}, expected=1.0)
    (row,) = val.ipi_rows({"dontneed": old}, {"dontneed": {"ipis_per_op": 1.0}})
    assert (row.real, row.status) == (0.8884, "FAIL") and "preempted" in row.note


def test_throughput_rows_are_relative_to_munmap_4k_alone() -> None:
    real = {n: real_record(n) for n in PATTERNS}
    sim = {n: {"ops_per_second": REAL_OPS[n] * 7.0} for n in PATTERNS}  # a uniformly faster simulator
    sim["mprotect-toggle"] = {"ops_per_second": REAL_OPS["mprotect-toggle"] * 7.0 * 1.6}
    rows = {r.name.split(" / ")[0]: r for r in val.throughput_rows(real, sim)}
    assert "munmap-4k-alone" not in rows
    assert rows["munmap-4k"].status == "pass" and rows["munmap-4k"].sim == pytest.approx(120 / 166)
    assert rows["mprotect-toggle"].status == "FAIL"  # 1.6x off


def test_rows_for_what_the_host_could_not_measure_are_na() -> None:
    real = {
        "munmap-4k": {"pattern": "munmap-4k", "not_measurable": "one CPU: no second CPU for the sibling"},
        "munmap-4k-alone": {
            "pattern": "munmap-4k-alone",
            "ops_per_second": 1e5,
            "ipis_not_measurable": "no TLB row in /proc/interrupts",
        },
    }
    sim = {
        "munmap-4k": {"ipis_per_op": 1.0, "ops_per_second": 1.0},
        "munmap-4k-alone": {"ipis_per_op": 0.0, "ops_per_second": 2.0},
    }
    rows = val.ipi_rows(real, sim) + val.throughput_rows(real, sim)
    assert [r.status for r in rows] == ["n/a", "n/a", "n/a"]
    assert "one CPU" in rows[0].note and "no TLB row" in rows[1].note
    report = val.Report(rows, "p", "m")
    assert report.passed  # not measurable is neither pass nor fail


def test_knee_rows() -> None:
    real = [{"level": "l1", "entries": 91.0}, {"level": "l2", "entries": 1500.0}]
    rows = val.knee_rows(real, {}, {"l1": 96.0, "l2": 1800.0}, "", {"l1": 96, "l2": 1536})
    assert [r.status for r in rows] == ["pass", "FAIL"]  # 5% vs 20% off
    rows = val.knee_rows([], {"tlb_knees_ns": "not measurable here: no transparent huge pages"}, {}, "", {})
    assert [r.status for r in rows] == ["n/a", "n/a"] and "huge pages" in rows[0].note
    rows = val.knee_rows(real, {}, {}, "simulation failed: x", {})
    assert [r.status for r in rows] == ["error", "error"]


def test_simulated_knees_from_miss_curves() -> None:
    pts = [
        {
            "pages": p,
            "l1_miss_per_access": float(fit.miss_rate([p], 96)[0]),
            "l2_miss_per_access": float(fit.miss_rate([p], 2048)[0]),
        }
        for p in fit.geometric_sizes(16, 32768, 4)
    ]
    knees, err = val.sim_knees(pts)
    assert err == "" and knees["l1"] == pytest.approx(96, rel=0.01) and knees["l2"] == pytest.approx(2048, rel=0.01)
    knees, err = val.sim_knees([{"pages": 1, "error": "simulation failed: no"}])
    assert knees == {} and err == "simulation failed: no"


def measurements(tmp_path: Path) -> tuple[Path, Path]:
    preset = tmp_path / "host-calibrated.toml"
    preset.write_text('[machine]\npreset = "none"\ncores_per_socket = 2\n[machine.tlb.l2]\nentries = 1536\nways = 12\n')
    pages = fit.geometric_sizes(16, 16384, 4)
    points = [
        {"page_size": "4k", "pages": p, "ns_per_access": 2 + 2.7 * float(fit.miss_rate([p], 96)[0])} for p in pages
    ]
    data = {
        "shootdown_patterns": {n: real_record(n) for n in PATTERNS},
        "tlb_reach": {
            "points": points,
            "analysis": {
                "knees": [{"level": "l1", "entries": 93.0}, {"level": "l2", "entries": 1500.0}],
                "not_measurable": {},
            },
        },
        "warnings": [],
    }
    preset.with_suffix(".json").write_text(json.dumps(data))
    return preset, preset.with_suffix(".json")


def test_validate_with_a_mocked_simulator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    preset, _ = measurements(tmp_path)
    fake = FakeRun({n: (REAL_IPIS[n], REAL_OPS[n] * 3) for n in PATTERNS})
    monkeypatch.setattr(tlbsim, "run", fake)
    report = val.validate(preset, quick=True, out=tmp_path / "v", progress=False)
    assert report.passed, val.format_table(report)
    # the knee rows: no documented geometry for this host, so against the fitted knees (shown, not judged)
    assert report.counts()["pass"] == len(PATTERNS) + (len(PATTERNS) - 1)
    assert report.counts("fit")["pass"] == 2
    assert fake.calls[0] == patterns.pattern_overrides("munmap-4k", 2000)
    data = json.loads(report.json_path.read_text())
    assert data["passed"] and data["tolerances"]["ipis_per_op"].startswith("|sim - real|")
    assert report.png_path.stat().st_size > 10_000
    table = val.format_table(report)
    assert "IPIs received per operation" in table and "munmap-4k-alone" in table


def test_validate_degrades_to_simulation_failed_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    preset, _ = measurements(tmp_path)
    err = tlbsim.ConfigError('workload.kind: "shootdown-patterns" is not a workload kind')
    monkeypatch.setattr(tlbsim, "run", FakeRun(None, err))
    report = val.validate(preset, quick=True, out=tmp_path / "v", progress=False)
    assert not report.passed
    failed = [r for r in report.rows if r.section not in ("tlb_knee", "mmap_lock")]
    assert failed and all(r.status == "error" for r in failed)
    # these measurements have no fpr_munmap or munmap_lock runs: the lock rows say so
    assert [r.status for r in report.rows if r.section == "mmap_lock"] == ["n/a", "n/a", "n/a"]
    assert "mmap_lock: threads of one process" in val.format_table(report)
    assert failed[0].note.startswith("simulation failed: ") and "shootdown-patterns" in failed[0].note
    assert [r.status for r in report.rows if r.section == "tlb_knee"] == ["pass", "pass"]
    assert "simulation failed" in val.format_table(report)


def test_validate_stats_without_the_expected_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    preset, _ = measurements(tmp_path)

    def run(config: Any, *, overrides: dict[str, Any]) -> Result:
        if overrides["workload.kind"] == "synthetic":
            return FakeRun({})(config, overrides=overrides)
        return Result(config={}, stats={"totals": {}})

    monkeypatch.setattr(tlbsim, "run", run)
    r = patterns.simulate_pattern(preset, "munmap-4k", 10)
    assert r["error"].startswith("simulation failed: its stats have no")


def test_cli_validate_exit_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tlbsim.cli import main

    preset, _ = measurements(tmp_path)
    monkeypatch.setattr(tlbsim, "run", FakeRun(None, tlbsim.ConfigError("no such workload")))
    assert main(["validate", "--preset", str(preset), "--quick", "--out", str(tmp_path / "v")]) == 1
    out = capsys.readouterr().out
    assert "simulation failed: no such workload" in out and "validate.json" in out
    assert main(["validate", "--preset", str(tmp_path / "missing.toml")]) == 2
    # Without a preset in a fresh folder: say what to run.
    (tmp_path / "fresh").mkdir()
    monkeypatch.chdir(tmp_path / "fresh")
    capsys.readouterr()
    assert main(["validate"]) == 2
    err = capsys.readouterr().err
    assert "host-calibrated.toml" in err and "tlbsim calibrate" in err, err


# ---------------------------------------------------------------------------------------
# the real thing, once the simulator has the shootdown-patterns workload


def _engine_has_shootdown_patterns() -> bool:
    try:
        tlbsim.run({"machine": {"cores_per_socket": 2}}, overrides=patterns.pattern_overrides("munmap-4k-alone", 10))
    except tlbsim.ConfigError:
        return False
    return True


def _wait_for_a_quiet_machine(limit_s: float = 120.0, load: float = 0.7) -> None:
    """make test compiles just before: give the load average time to fall, so the real
    measurements are of a quiet machine (a busy one preempts the sibling: fewer IPIs)."""
    deadline = time.monotonic() + limit_s
    while os.getloadavg()[0] > load and time.monotonic() < deadline:
        time.sleep(5)


def test_validate_end_to_end(tmp_path: Path) -> None:
    _wait_for_a_quiet_machine()
    preset = tmp_path / "host-calibrated.toml"
    cal = subprocess.run(
        [sys.executable, "-m", "tlbsim.cli", "calibrate", "--quick", "--out", str(preset)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # calibrate's own message says which measurement or key failed on this machine
    assert cal.returncode == 0, f"calibrate exited {cal.returncode}:\n{cal.stderr[-4000:]}"
    cal_json = json.loads(preset.with_suffix(".json").read_text())
    warnings = cal_json["warnings"]
    loop = cal_json["fit"].get("closed_loop")
    if loop is not None:
        # the preset's note says whether the closed loop's costs replaced the formulas'
        stood = "the formulas' values stand" in preset.read_text()
        assert stood == isinstance(loop.get("error"), str), loop
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tlbsim.cli",
            "validate",
            "--preset",
            str(preset),
            "--quick",
            "--out",
            str(tmp_path / "v"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    data = json.loads((tmp_path / "v" / "validate.json").read_text())
    rows = [row for row in data["rows"] if row["section"] == "ipis_per_op"]
    # The simulated side is deterministic: every pattern simulated, at the kernel's value.
    from tlbsim.host.measure import expected_ipis

    expected = expected_ipis()
    assert len(expected) == 13
    assert {row["name"] for row in rows} >= set(expected), r.stdout
    for row in rows:
        assert row["sim"] is not None and abs(row["sim"] - expected[row["name"]]) <= 0.05 * max(
            expected[row["name"]], 1.0
        ), row
    if warnings:  # a shared machine: the sibling was preempted, the real IPI counts are low
        pytest.skip("simulated side checked; real side not trusted: " + warnings[0])
    bad = [row for row in rows if row["status"] not in ("pass", "n/a")]
    # The real rows count the operations the spinning sibling was on its CPU for (the bench
    # sets aside those that found it away: issue 18's cause, measured in session 38), so they
    # should pass on a shared machine too. The slack below stays for what that count cannot
    # see (a sibling away for part of an operation).
    # Up to two patterns may read up to 10% low: on this workplace's 2-vCPU guests, background
    # kernel threads (kdamond) now and then take the sibling's CPU for a moment, and the
    # kernel then skips the IPI (a lazy or switched-away CPU; or the host flushes a preempted
    # vCPU without one, PV TLB flush). Seen here twice in a row: mprotect-toggle at 1.89-1.90
    # IPIs per operation against the kernel's 2; and once two rows at once on an otherwise
    # idle machine (mprotect-toggle 1.878, dontneed 0.944 against 2 and 1). The steal and
    # load checks above do not see this; issue 18 is about making these rows robust. A row
    # that reads high, or low by more than 10%, still fails.
    slight = [
        row
        for row in bad
        if row["real"] is not None
        and row["sim"] is not None
        and row["real"] < row["sim"]
        and abs(row["sim"] - row["real"]) <= 0.1 * max(row["real"], 1.0)
    ]
    assert len(bad) <= 2 and bad == slight, r.stdout


# ---------------------------------------------------------------------------------------
# mmap_lock rows (fixed inputs)


def test_lock_rows_compare_the_two_thread_slowdown() -> None:
    real = {1: 170_000.0, 2: 30_000.0}  # 0.176
    ok = val.lock_rows(real, {1: {"ops_per_second_per_thread": 1e6}, 2: {"ops_per_second_per_thread": 2e5}})
    assert [r.status for r in ok] == [val.PASS] and ok[0].sim == pytest.approx(0.2)
    # a simulator without the lock scales linearly: 1.0 vs 0.18 fails
    bad = val.lock_rows(real, {1: {"ops_per_second_per_thread": 1e6}, 2: {"ops_per_second_per_thread": 1e6}})
    assert bad[0].status == val.FAIL and bad[0].real == pytest.approx(30 / 170)
    err = val.lock_rows(real, {1: {"error": "simulation failed: x"}, 2: {}})
    assert err[0].status == val.ERROR and "x" in err[0].note
    na = val.lock_rows({1: 1.0}, {})
    assert na[0].status == val.NA and "not measurable here" in na[0].note


def test_real_fpr_rates_read_case_1_io_threads() -> None:
    recs = [
        measure.fpr_record(
            {"case": 1, "io_threads": n, "seconds": 1.0, "io_ops_per_second_per_thread": [100.0 / n] * n}
        )
        for n in (1, 2)
    ]
    recs.append(measure.fpr_record({"case": 2, "io_threads": 1, "seconds": 1.0, "io_ops_per_second_per_thread": [7.0]}))
    assert val.real_fpr_rates(recs) == {1: 100.0, 2: 50.0}


# ---------------------------------------------------------------------------------------
# munmap_lock rows: threads of one process vs processes


def test_munmap_lock_rows_separate_the_lock_from_the_machine() -> None:
    real = {("threads", 1): 500_000.0, ("threads", 2): 90_000.0, ("procs", 1): 500_000.0, ("procs", 2): 495_000.0}
    sim = {
        ("threads", 1): {"ops_per_second_per_worker": 1e6},
        ("threads", 2): {"ops_per_second_per_worker": 2e5},
        ("procs", 1): {"ops_per_second_per_worker": 1e6},
        ("procs", 2): {"ops_per_second_per_worker": 1e6},
    }
    rows = val.munmap_lock_rows(real, sim)
    assert [r.status for r in rows] == [val.PASS, val.PASS]
    assert rows[0].real == pytest.approx(0.18) and rows[1].sim == pytest.approx(1.0)
    # a simulator whose processes also serialized (a global lock) fails the processes row
    sim[("procs", 2)] = {"ops_per_second_per_worker": 2e5}
    assert [r.status for r in val.munmap_lock_rows(real, sim)] == [val.PASS, val.FAIL]
    assert [r.status for r in val.munmap_lock_rows({}, {})] == [val.NA, val.NA]
    err = val.munmap_lock_rows(real, {("threads", 1): {"error": "simulation failed: x"}})
    assert err[0].status == val.ERROR and "x" in err[0].note


def test_real_munmap_lock_rates_read_the_benchmark_lines() -> None:
    recs = [
        {
            "mode": "threads",
            "workers": 2,
            "cpus": 2,
            "seconds": 1.0,
            "ops_per_second_per_worker": [1.0, 3.0],
            "ops_per_second": 4.0,
            "ops_per_second_per_thread": 2.0,
        },
        {"mode": "procs", "workers": 1, "ops_per_second_per_thread": 5.0},
        {"mode": "bogus", "workers": 1},
    ]
    assert val.real_munmap_lock_rates(recs) == {("threads", 2): 2.0, ("procs", 1): 5.0}


def test_simulated_munmap_lock_threads_share_the_lock_and_processes_do_not() -> None:
    rate = {
        (m, n): val.simulate_munmap_lock({}, m, n, 300)["ops_per_second_per_worker"]
        for m in ("threads", "procs")
        for n in (1, 2)
    }
    assert rate[("threads", 1)] == pytest.approx(rate[("procs", 1)])
    assert rate[("threads", 2)] / rate[("threads", 1)] < 0.6  # one mmap_lock, shootdowns under it
    assert rate[("procs", 2)] / rate[("procs", 1)] > 0.95  # one lock each, no shootdowns
