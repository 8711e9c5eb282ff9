"""tlbsim.fuzz and ``tlbsim fuzz``: random OS scenarios under a coherence policy."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tlbsim
from tlbsim.cli import main

REPORT_KEYS = {"scenarios", "scenarios_with_violations", "violations_security", "violations_consistency"}


def test_linux_is_clean_and_none_is_caught() -> None:
    clean = tlbsim.fuzz("linux", scenarios=120, seed=5)
    assert clean.clean and clean.scenarios == 120 and clean.shootdowns_sent > 100
    caught = tlbsim.fuzz("none", scenarios=120, seed=5)
    assert not caught.clean
    assert caught.violations_security + caught.violations_consistency > 0
    failure = caught.first_failure
    assert failure is not None and failure["command"].startswith("tlbsim fuzz --policy none")


def test_chunks_compose_into_the_same_report_as_one_run() -> None:
    # Scenario i uses seed S+i, so chunking (for the progress bar) changes nothing.
    calls: list[tuple[int, int]] = []
    chunked = tlbsim.fuzz("none", scenarios=130, seed=9, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(50, 130), (100, 130), (130, 130)]
    from tlbsim import _tlbsim

    whole = json.loads(_tlbsim.fuzz("none", None, [], 130, 9))
    for key in REPORT_KEYS | {"shootdowns_sent"}:
        assert getattr(chunked, key) == whole[key], key
    assert chunked.first_failure == whole["first_failure"]


def test_the_replay_seed_reproduces_the_failure() -> None:
    report = tlbsim.fuzz("none", scenarios=80, seed=3, tagging="cr3")
    failure = report.first_failure
    assert failure is not None and failure["tagging"] == "cr3"
    again = tlbsim.fuzz("none", scenarios=1, seed=failure["seed"], tagging="cr3")
    assert (again.violations_security, again.violations_consistency) == (
        failure["violations_security"],
        failure["violations_consistency"],
    )


def test_overrides_and_errors() -> None:
    # Every scenario without the checker: nothing to count.
    assert tlbsim.fuzz("none", scenarios=30, overrides={"os.checker": False}).clean
    with pytest.raises(tlbsim.ConfigError) as err:
        tlbsim.fuzz("nosuch", scenarios=1)
    assert err.value.key == "os.coherence"
    with pytest.raises(tlbsim.ConfigError):
        tlbsim.fuzz("linux", scenarios=1, overrides=["machine.tlb.l1d.ways=0"])
    assert tlbsim.tagging_modes() == ["none", "pcid", "domain", "cr3"]


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["fuzz", "--policy", "oracle", "--scenarios", "40", "--seed", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert REPORT_KEYS <= out.keys()
    assert out["scenarios"] == 40 and out["scenarios_with_violations"] == 0
    assert out["first_failing_seed"] is None and out["replay"] is None


def test_cli_reports_a_failure_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["fuzz", "--policy", "none", "--scenarios", "60", "--tagging", "pcid", "--set", "os.thp=true"])
    out = capsys.readouterr().out
    assert code == 1
    assert "scenarios with violations" in out and "replay: tlbsim fuzz --policy none" in out
    assert "--set os.thp=true" in out and "--tagging pcid" in out


def test_cli_bad_policy_is_a_clean_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tlbsim.cli", "fuzz", "--policy", "nosuch", "--scenarios", "1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("tlbsim: error: ") and "os.coherence" in proc.stderr
    assert "Traceback" not in proc.stderr
