"""tlbsim reproduce all (one index over the papers, resuming) and reproduce --cluster (the
sweeps on a Dask LocalCluster, as tlbsim sweep's test), on the quick linux paper and on a
two-run paper folder written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tlbsim
from tlbsim import cli
from tlbsim import reproduce as rp

SPEC = """seeds = [1]
[base]
machine = { preset = "host", sockets = 1, cores_per_socket = 2 }
workload = { kind = "shootdown-patterns", pattern = "munmap-4k", ops = 50 }
[grid]
"workload.pattern" = ["munmap-4k", "munmap-4k-alone"]
"""
PAPER = """title = "two runs"
[sweep.main]
spec = "spec.toml"
quick = { set = { "workload.ops" = 20 } }

[[claim]]
id = "ipis"
section = "Fig. 1"
claim = "20 IPIs over 20 munmaps"
paper_value = 20.0
unit = "IPIs"
tolerance = { rel = 0.05 }
ours = { metric = "totals.shootdown_ipis_received", where = { "workload.pattern" = "munmap-4k" } }

[[claim]]
id = "alone"
section = "Fig. 1"
claim = "as many IPIs without the sibling"
paper_value = 20.0
unit = "IPIs"
tolerance = { rel = 0.05 }
ours = { metric = "totals.shootdown_ipis_received", where = { "workload.pattern" = "munmap-4k-alone" } }
"""


def _paper(root: Path) -> Path:
    folder = root / "tworuns"
    folder.mkdir(parents=True)
    (folder / "paper.toml").write_text(PAPER)
    (folder / "spec.toml").write_text(SPEC)
    return folder


def test_reproduce_all_writes_one_index_with_each_papers_counts(tmp_path: Path) -> None:
    folder = _paper(tmp_path / "papers")
    broken = tmp_path / "papers" / "broken"
    broken.mkdir()
    (broken / "paper.toml").write_text("title = [\n")
    out = tmp_path / "all"
    result = rp.reproduce_all(out, quick=True, jobs=2, names=["linux", str(folder), str(broken)])
    index = json.loads((out / "index.json").read_text())
    assert index["mode"] == "quick" and [p["paper"] for p in index["papers"]] == ["linux", str(folder), str(broken)]
    for entry in index["papers"][:2]:
        # Each paper's counts are its own reproduce.json's, and its page is linked.
        own = json.loads((out / entry["paper"] / "reproduce.json").read_text())
        assert entry["counts"] == own["counts"] and entry["error"] is None
        assert sum(entry["counts"].values()) == len(json.loads((out / entry["paper"] / "claims.json").read_text()))
    assert index["papers"][1]["counts"]["agree"] + index["papers"][1]["counts"]["disagree"] == 2
    # A broken paper is reported in the index; the others still ran.
    assert "invalid TOML" in index["papers"][2]["error"] and result.failed == [str(broken)]
    page = (out / "index.html").read_text()
    assert 'href="linux/index.html"' in page and "invalid TOML" in page
    # Resumes: a second call runs no simulation again.
    ran: list[int] = []
    rp.reproduce_all(
        out, quick=True, jobs=2, names=["linux"], on_sweep=lambda p, s, t, skipped: ran.append(t - skipped)
    )
    assert ran and not any(ran)


def test_reproduce_all_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(rp, "papers", lambda: ["linux"])  # every paper would take an hour
    out = tmp_path / "all"
    assert cli.main(["reproduce", "all", "--quick", "--jobs", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    counts = json.loads((out / "index.json").read_text())["papers"][0]["counts"]
    assert f"linux        {counts['agree']} agree, {counts['disagree']} disagree" in printed
    assert (out / "linux" / "index.html").is_file() and (out / "index.html").is_file()


def test_cluster_runs_a_papers_sweeps_with_the_same_claims(tmp_path: Path) -> None:
    from dask.distributed import LocalCluster  # in the test extra, as test_sweep's Dask test

    folder = _paper(tmp_path)
    local = tlbsim.reproduce(folder, tmp_path / "local", quick=True, jobs=1)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = tlbsim.reproduce(folder, tmp_path / "dask", quick=True, cluster=cluster.scheduler_address)
        assert remote.ran == 2
    assert remote.claims == local.claims
    assert (tmp_path / "dask" / "sweeps" / "main-quick" / "runs").is_dir()
