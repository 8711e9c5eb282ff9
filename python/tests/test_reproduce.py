"""tlbsim reproduce: the paper registry, the linux paper end to end (quick: a few seconds
of simulation plus, on Linux, a few seconds of bench/shootdown), resuming, the page, the
committed-values fallback, and clean errors for broken paper folders."""

from __future__ import annotations

import json
import math
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest

import tlbsim
from tlbsim import cli
from tlbsim import reproduce as rp
from tlbsim.host import patterns, validate
from tlbsim.reproduce.paper import AGREE, DISAGREE, NA, PaperError, Tolerance

REPO = Path(__file__).resolve().parents[2]
PATTERNS = [p["name"] for p in tomllib.loads((REPO / "bench/patterns.toml").read_text())["pattern"]]
LINUX = rp.PAPERS_DIR / "linux"
COMMITTED = json.loads((LINUX / "measured.json").read_text())


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One `tlbsim reproduce linux --quick` run through the command line."""
    out = tmp_path_factory.mktemp("reproduce") / "linux"
    assert cli.main(["reproduce", "linux", "--quick", "--jobs", "2", "--out", str(out)]) == 0
    return out


def _claims(out: Path) -> list[dict[str, Any]]:
    return json.loads((out / "claims.json").read_text())


def test_list_names_linux(capsys: pytest.CaptureFixture[str]) -> None:
    assert "linux" in tlbsim.reproduce_papers()
    assert cli.main(["reproduce", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[0] == "linux" and "25 claims" in line for line in lines)


def test_claims_json_has_the_keys_and_a_number_for_each_claim(quick: Path) -> None:
    claims = _claims(quick)
    assert isinstance(claims, list) and len(claims) >= 13
    for c in claims:
        assert set(rp.CLAIM_KEYS) <= set(c), c
        assert c["paper"] == "linux"
        assert isinstance(c["ours"], (int, float)) and math.isfinite(c["ours"]), c
        assert c["verdict"] in (AGREE, DISAGREE, NA)
    ipis = {c["id"].split("/")[0] for c in claims if c["id"].endswith("/ipis_per_op")}
    assert ipis == set(PATTERNS)


def test_ours_is_validates_simulated_value_of_the_run(quick: Path) -> None:
    """`ours` of an IPI claim is patterns.pattern_result of that pattern's run, and a
    relative-throughput claim the ratio of two runs' throughputs."""
    by_pattern = {}
    for run in (quick / "sweeps" / "patterns-quick" / "runs").iterdir():
        params = json.loads((run / "params.json").read_text())
        by_pattern[params["workload.pattern"]] = patterns.pattern_result(json.loads((run / "stats.json").read_text()))
    assert set(by_pattern) == set(PATTERNS)
    claims = {c["id"]: c for c in _claims(quick)}
    for name in PATTERNS:
        assert claims[f"{name}/ipis_per_op"]["ours"] == pytest.approx(by_pattern[name]["ipis_per_op"])
    ratio = by_pattern["mprotect-toggle"]["ops_per_second"] / by_pattern["munmap-4k-alone"]["ops_per_second"]
    assert claims["mprotect-toggle/relative_throughput"]["ours"] == pytest.approx(ratio)
    # The quick spec: 2,000 operations per pattern.
    assert all(r["ops_completed"] == 2000 for r in by_pattern.values())


def test_verdicts_follow_the_tolerance(quick: Path) -> None:
    for c in _claims(quick):
        if c["paper_value"] is None:
            assert c["verdict"] == NA
            continue
        p, o = c["paper_value"], c["ours"]
        if c["id"].endswith("/ipis_per_op"):
            ok = abs(o - p) <= validate.IPI_TOLERANCE * max(p, 1.0)
        else:
            ok = p > 0 and 1 / validate.THROUGHPUT_FACTOR <= o / p <= validate.THROUGHPUT_FACTOR
        assert c["verdict"] == (AGREE if ok else DISAGREE), c


def test_running_again_resumes(quick: Path) -> None:
    runs = sorted((quick / "sweeps" / "patterns-quick" / "runs").glob("*/stats.json"))
    before = {p: p.stat().st_mtime_ns for p in runs}
    cache = list((quick / "reference").glob("*.json"))
    cached = {p: p.stat().st_mtime_ns for p in cache}
    seen: list[tuple[str, int, int]] = []
    result = tlbsim.reproduce("linux", quick, quick=True, jobs=2, on_sweep=lambda *a: seen.append(a))
    assert seen == [("patterns", 13, 13)]
    assert result.ran == 0
    assert {p: p.stat().st_mtime_ns for p in runs} == before
    assert {p: p.stat().st_mtime_ns for p in cache} == cached  # nothing measured again
    assert result.claims == _claims(quick)


def test_the_page_shows_every_claim_and_references_the_figures(quick: Path) -> None:
    page = (quick / "index.html").read_text()
    figures = sorted(quick.glob("*.png"))
    assert {f.name for f in figures} == {"ipis_per_op.png", "relative_throughput.png"}
    for f in figures:
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f.name in page
    assert page.count("data:image/png;base64,") == len(figures)
    for c in _claims(quick):
        assert c["id"] in page
    meta = json.loads((quick / "reproduce.json").read_text())
    assert meta["mode"] == "quick" and meta["reference_source"] in page.replace("&#x27;", "'")


def test_committed_values_when_the_benchmark_cannot_run(
    quick: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "linux"
    shutil.copytree(quick / "sweeps", out / "sweeps")  # the runs, not the measurement
    monkeypatch.setenv("TLBSIM_REPRODUCE_NATIVE", "0")
    result = tlbsim.reproduce("linux", out, quick=True, jobs=1)
    assert result.ran == 0
    assert result.reference_source.startswith("committed values")
    assert COMMITTED["host"]["model"] in result.reference_source and COMMITTED["measured"] in result.reference_source
    claims = {c["id"]: c for c in result.claims}
    for name in PATTERNS:
        real = COMMITTED["shootdown_patterns"][name]["shootdown_ipis_received_per_op"]
        assert claims[f"{name}/ipis_per_op"]["paper_value"] == real
    assert not (out / "reference" / "linux-native.json").exists()


def test_a_failing_benchmark_falls_back_to_the_committed_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tlbsim.host import measure as native
    from tlbsim.reproduce.paper import ReferenceContext

    hooks = rp.load_paper("linux").hooks
    assert hooks is not None

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise native.CalibrateError("no C compiler (gcc) to build the benchmarks")

    monkeypatch.setattr(native, "build_benchmarks", broken)
    monkeypatch.setattr(hooks, "native_unavailable", lambda: None)
    ref = hooks.reference(ReferenceContext(rp.load_paper("linux"), tmp_path, True, False))
    assert "committed values" in ref.source and "no C compiler" in ref.source
    assert (
        ref.values["munmap-4k/ipis_per_op"]
        == COMMITTED["shootdown_patterns"]["munmap-4k"]["shootdown_ipis_received_per_op"]
    )
    monkeypatch.setattr(hooks.platform, "system", lambda: "Darwin")
    monkeypatch.delenv("TLBSIM_REPRODUCE_NATIVE", raising=False)
    assert "not Linux" in (rp.load_paper("linux").hooks.native_unavailable() or "")


def test_a_loaded_machine_is_warned_about_on_the_page_and_in_reproduce_json(
    quick: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tlbsim.host import measure as native

    hooks = rp.load_paper("linux").hooks
    assert hooks is not None
    # The quick run's own measurement: its load reading decides the flag either way.
    meta = json.loads((quick / "reproduce.json").read_text())
    if meta["reference_source"].startswith(("measured now", "measured on this machine")):
        assert meta["machine_loaded"] == (native.load_warning(meta["reference"]["load"]) is not None)
    # A measurement kept without a warning but whose load reading shows a busy machine
    # (injected: other work took 60% of the CPUs) is warned about all the same.
    out = tmp_path / "linux"
    shutil.copytree(quick / "sweeps", out / "sweeps")
    kept = json.loads(json.dumps(COMMITTED))
    kept["ops"] = hooks.QUICK_OPS
    kept["load"] = {"loadavg_at_start": 0.1, "cpus": 2, "other_work_fraction": 0.6, "steal_fraction": 0.0}
    kept["warnings"] = []
    (out / "reference").mkdir()
    (out / "reference" / hooks.CACHE_NAME).write_text(json.dumps(kept))
    monkeypatch.setattr(hooks, "native_unavailable", lambda: None)
    result = tlbsim.reproduce("linux", out, quick=True, jobs=1)
    assert result.ran == 0 and result.reference_source.startswith("measured on this machine")
    assert any("other work used 60% of the CPUs" in w for w in result.warnings), result.warnings
    meta = json.loads((out / "reproduce.json").read_text())
    assert meta["machine_loaded"] is True and any("60%" in w for w in meta["warnings"])
    assert 'class="warning">Warning: the host was busy' in (out / "index.html").read_text()
    # The same reading on a quiet machine: no warning, flag False.
    kept["load"]["other_work_fraction"] = 0.01
    (out / "reference" / hooks.CACHE_NAME).write_text(json.dumps(kept))
    quiet = tlbsim.reproduce("linux", out, quick=True, jobs=1)
    assert not any("busy" in w for w in quiet.warnings)
    assert json.loads((out / "reproduce.json").read_text())["machine_loaded"] is False


def test_the_page_states_quick_and_how_long_the_full_run_takes(quick: Path, tmp_path: Path) -> None:
    meta = json.loads((quick / "reproduce.json").read_text())
    assert meta["mode"] == "quick" and meta["full_run"] == rp.load_paper("linux").full_run_text()
    assert f"the full run takes {meta['full_run']}" in (quick / "index.html").read_text()
    # A stated duration must say where it was measured; without one the page says "not measured".
    folder = _paper(
        tmp_path, GOOD_PAPER.replace('title = "test paper"\n', 'title = "test paper"\nfull_run = { minutes = 12 }\n')
    )
    with pytest.raises(PaperError, match=r"paper.toml: full_run.measured: missing"):
        rp.load_paper(folder)
    (folder / "paper.toml").write_text(
        GOOD_PAPER.replace(
            'title = "test paper"\n', 'title = "test paper"\nfull_run = { minutes = 12, measured = "2 CPUs" }\n'
        )
    )
    assert rp.load_paper(folder).full_run_text() == "about 12 minutes (2 CPUs)"
    (tmp_path / "b").mkdir()
    assert rp.load_paper(_paper(tmp_path / "b")).full_run_text() == "not measured"


def test_committed_measurement_says_where_it_was_measured() -> None:
    assert COMMITTED["measured"][:4].isdigit() and COMMITTED["host"]["model"] and COMMITTED["host"]["kernel"]
    assert set(COMMITTED["shootdown_patterns"]) == set(PATTERNS)


def test_the_linux_spec_is_validates_setup_of_every_pattern() -> None:
    paper = rp.load_paper("linux")
    for quick_mode, ops in ((False, 10_000), (True, 2_000)):
        spec = paper.sweeps["patterns"].spec(quick_mode)
        sweep = tlbsim.sweep.expand(spec)
        assert [r.params["workload.pattern"] for r in sweep.runs] == PATTERNS
        for r in sweep.runs:
            cfg = tlbsim.resolve(json.loads(sweep.base_json), overrides=r.overrides)
            want = tlbsim.resolve(
                {"machine": {"preset": "host"}}, overrides=patterns.pattern_overrides(r.params["workload.pattern"], ops)
            )
            cfg.pop("seed"), want.pop("seed")
            assert cfg == want
    ipi = [c for c in paper.claims if c.id.endswith("/ipis_per_op")]
    assert {c.tolerance for c in ipi} == {Tolerance(abs=validate.IPI_TOLERANCE, rel=validate.IPI_TOLERANCE)}
    rel = [c for c in paper.claims if c.id.endswith("/relative_throughput")]
    assert len(rel) == 12 and {c.tolerance.factor for c in rel} == {validate.THROUGHPUT_FACTOR}


def test_tolerance() -> None:
    t = Tolerance(abs=0.05, rel=0.05)
    assert t.agrees(0.0, 0.05) and not t.agrees(0.0, 0.051)
    assert t.agrees(2.0, 2.09) and t.agrees(2.0, 1.91) and not t.agrees(2.0, 2.11)
    f = Tolerance(factor=1.5)
    assert f.agrees(1.0, 1.5) and f.agrees(1.0, 1 / 1.5) and not f.agrees(1.0, 1.51) and not f.agrees(1.0, -1.0)
    assert f.agrees(0.0, 0.0) and not f.agrees(0.0, 0.1)
    lower, upper = Tolerance(bound="lower"), Tolerance(bound="upper")
    assert lower.agrees(2.5, 2.5) and lower.agrees(2.5, 9.0) and not lower.agrees(2.5, 2.49)
    assert upper.agrees(2.5, 2.5) and upper.agrees(2.5, -1.0) and not upper.agrees(2.5, 2.51)
    assert "lower bound" in lower.describe()
    # On the complement: a share near 1 with a relative tolerance on 1 - x.
    c = Tolerance(rel=0.5, complement=True)
    assert c.agrees(0.98, 0.985) and c.agrees(0.98, 0.97) and not c.agrees(0.98, 0.95) and not c.agrees(0.98, 1.0)
    assert "1 - ours" in c.describe()


def test_a_tolerance_that_lets_zero_agree_with_a_nonzero_paper_value_is_found() -> None:
    assert Tolerance(abs=0.1).contains_zero(0.1) and Tolerance(abs=0.1).contains_zero(0.08)
    assert not Tolerance(abs=0.1).contains_zero(0.2) and not Tolerance(rel=0.5).contains_zero(0.08)
    assert not Tolerance(abs=0.1).contains_zero(0.0) and not Tolerance(bound="upper").contains_zero(0.1)
    assert Tolerance(rel=1.0).contains_zero(3.0) and not Tolerance(factor=10).contains_zero(0.01)


# ------------------------------------------------------------------ broken paper folders

GOOD_SPEC = """seeds = [1]
[base]
machine = { preset = "host", sockets = 1, cores_per_socket = 2 }
workload = { kind = "shootdown-patterns", pattern = "munmap-4k", ops = 50 }
[grid]
"workload.pattern" = ["munmap-4k", "munmap-4k-alone"]
"""
GOOD_CLAIM = """
[[claim]]
id = "ipis"
section = "Fig. 1"
claim = "one IPI per munmap"
paper_value = 1.0
unit = "IPIs/op"
tolerance = { abs = 0.05 }
ours = { metric = "totals.shootdown_ipis_received", where = { "workload.pattern" = "munmap-4k" } }
"""
GOOD_PAPER = (
    'title = "test paper"\n[sweep.main]\nspec = "spec.toml"\nquick = { set = { "workload.ops" = 20 } }\n' + GOOD_CLAIM
)


def _paper(tmp_path: Path, paper: str = GOOD_PAPER, spec: str = GOOD_SPEC) -> Path:
    folder = tmp_path / "mypaper"
    folder.mkdir()
    (folder / "paper.toml").write_text(paper)
    (folder / "spec.toml").write_text(spec)
    return folder


RELATIVE_CLAIM = """
[[claim]]
id = "ops"
section = "Table 2"
claim = "the measuring thread completes as many operations either way"
paper_value = 1.0
ours = { metric = "per_thread.0.ops_completed", where = { "workload.pattern" = "munmap-4k" }, relative_to = { where = { "workload.pattern" = "munmap-4k-alone" } } }
"""


BEST_CLAIM = """
[[claim]]
id = "ipis-vs-most"
section = "Fig. 1"
claim = "munmap sends as many IPIs as the pattern that sends the most"
paper_value = 1.0
ours = { metric = "totals.shootdown_ipis_received", where = { "workload.pattern" = "munmap-4k" }, relative_to = { best = "max" } }
"""


def test_a_paper_folder_given_by_path_runs(tmp_path: Path) -> None:
    paper = GOOD_PAPER + '[defaults]\nunit = "ratio"\ntolerance = { rel = 0.01 }\n' + RELATIVE_CLAIM + BEST_CLAIM
    folder = _paper(tmp_path, paper)
    result = tlbsim.reproduce(folder, tmp_path / "out", quick=True, jobs=1)
    ipis, ops, most = result.claims
    # relative_to's best = "max": the highest of the two patterns' means (munmap-4k's own).
    assert most["ours"] == 1.0 and most["runs"] == 1
    assert ipis["paper"] == "mypaper" and ipis["ours"] == 20.0  # 20 operations, an IPI each
    assert ipis["verdict"] == DISAGREE  # 20 IPIs is not 1 +- 0.05: the stats path is a total
    assert ipis["unit"] == "IPIs/op" and ipis["tolerance"] == "|ours - paper| <= 0.05"  # its own, not the defaults
    assert ops["ours"] == 1.0 and ops["verdict"] == AGREE and ops["unit"] == "ratio" and ops["runs"] == 1
    assert (tmp_path / "out" / "sweeps" / "main-quick" / "spec.json").is_file()


HOOKS = """
from dataclasses import dataclass
from tlbsim.reproduce.paper import Reference

@dataclass
class Seen:
    quick: bool

def ipis_per_op(stats):
    return stats["totals"]["shootdown_ipis_received"] / stats["per_thread"][0]["ops_completed"]

METRICS = {"ipis_per_op": ipis_per_op}

def reference(ctx):
    (ctx.cache / "seen").write_text(repr(Seen(ctx.quick)))
    return Reference({"one": 1.0}, "a test reference", {"one": "from the hook"}, ["a test warning"])
"""


def test_hooks_give_metrics_and_measured_paper_values(tmp_path: Path) -> None:
    paper = GOOD_PAPER.replace("paper_value = 1.0", 'paper_value = { reference = "one" }').replace(
        'metric = "totals.shootdown_ipis_received"', 'metric = "ipis_per_op"'
    )
    folder = _paper(tmp_path, paper)
    (folder / "hooks.py").write_text(HOOKS)
    result = tlbsim.reproduce(folder, tmp_path / "out", quick=True, jobs=1)
    (claim,) = result.claims
    assert claim["paper_value"] == 1.0 and claim["ours"] == 1.0 and claim["verdict"] == AGREE
    assert "from the hook" in claim["note"]
    assert (tmp_path / "out" / "reference" / "seen").read_text() == "Seen(quick=True)"
    meta = json.loads((tmp_path / "out" / "reproduce.json").read_text())
    assert meta["reference_source"] == "a test reference" and meta["warnings"] == ["a test warning"]
    assert "a test warning" in (tmp_path / "out" / "index.html").read_text()


def test_a_broken_hooks_file_is_a_clean_error(tmp_path: Path) -> None:
    folder = _paper(tmp_path)
    (folder / "hooks.py").write_text("METRICS = {}\n1 / 0\n")
    with pytest.raises(PaperError, match=r"hooks.py: ZeroDivisionError"):
        rp.load_paper(folder)


@pytest.mark.parametrize(
    ("paper", "spec", "expected"),
    [
        (
            GOOD_PAPER,
            GOOD_SPEC.replace('"workload.pattern" = [', '"workload.patern" = ['),
            ["spec.toml", "workload.patern"],
        ),
        (GOOD_PAPER, GOOD_SPEC.replace("ops = 50", "ops = -1"), ["spec.toml", "workload.ops"]),
        (
            GOOD_PAPER.replace('"workload.ops" = 20', '"workload.opz" = 20'),
            GOOD_SPEC,
            ["paper.toml", 'sweep.main.quick.set."workload.opz"', "spec.toml"],
        ),
        (
            GOOD_PAPER.replace('spec = "spec.toml"', 'spec = "nope.toml"'),
            GOOD_SPEC,
            ["paper.toml", "sweep.main.spec", "nope.toml"],
        ),
        (
            GOOD_PAPER.replace('where = { "workload.pattern"', 'where = { "workload.threads"'),
            GOOD_SPEC,
            ["paper.toml", 'claim[0] (id "ipis").ours.where."workload.threads"', "not a swept key"],
        ),
        (
            GOOD_PAPER.replace('"workload.pattern" = "munmap-4k" }', '"workload.pattern" = "cow" }'),
            GOOD_SPEC,
            ["paper.toml", "ours.where", "not among the swept values"],
        ),
        (
            GOOD_PAPER.replace('section = "Fig. 1"', 'sektion = "Fig. 1"'),
            GOOD_SPEC,
            ["paper.toml", "claim[0]", "sektion", "unknown key"],
        ),
        (GOOD_PAPER.replace("paper_value = 1.0", 'paper_value = "one"'), GOOD_SPEC, ["paper.toml", "paper_value"]),
        (
            GOOD_PAPER.replace("paper_value = 1.0", 'paper_value = { reference = "x" }'),
            GOOD_SPEC,
            ["paper.toml", "paper_value.reference", "hooks.py"],
        ),
        (
            GOOD_PAPER.replace('metric = "totals.shootdown_ipis_received"', 'metric = "ipis"'),
            GOOD_SPEC,
            ["paper.toml", "ours.metric", "'ipis'"],
        ),
        (GOOD_PAPER.replace("{ abs = 0.05 }", "{ factor = 0.5 }"), GOOD_SPEC, ["paper.toml", "tolerance.factor"]),
        (
            GOOD_PAPER.replace("{ abs = 0.05 }", '{ bound = "over" }'),
            GOOD_SPEC,
            ["paper.toml", "tolerance.bound", "lower"],
        ),
        (
            GOOD_PAPER.replace("{ abs = 0.05 }", '{ bound = "lower", abs = 1 }'),
            GOOD_SPEC,
            ["paper.toml", "tolerance.bound"],
        ),
        (GOOD_PAPER + GOOD_CLAIM, GOOD_SPEC, ["paper.toml", "claim[1]", "duplicate claim id"]),
        (
            GOOD_PAPER.replace("{ abs = 0.05 }", "{ abs = 1.0 }"),
            GOOD_SPEC,
            ["paper.toml", 'claim[0] (id "ipis").tolerance', "includes 0"],
        ),
        (
            GOOD_PAPER.replace("tolerance = {", 'figure = "f"\ntolerance = {')
            + GOOD_CLAIM.replace('"ipis"', '"ratio"')
            .replace('"IPIs/op"', '"x alone"')
            .replace("tolerance = {", 'figure = "f"\ntolerance = {'),
            GOOD_SPEC,
            ["paper.toml", 'claim[1] (id "ratio").figure', "'ipis'", "never share"],
        ),
        (
            GOOD_PAPER
            + BEST_CLAIM.replace('"max"', '"top"').replace(
                "paper_value = 1.0", 'paper_value = 1.0\nunit = "x"\ntolerance = { abs = 0.1 }'
            ),
            GOOD_SPEC,
            ["paper.toml", "relative_to.best", '"min" or "max"'],
        ),
        ("title = 'x'\n[sweep.main]\nspec = 'spec.toml'\n", GOOD_SPEC, ["paper.toml", "claim", "missing"]),
        ("title = [\n", GOOD_SPEC, ["paper.toml", "invalid TOML"]),
    ],
)
def test_a_bad_paper_folder_is_a_clean_error_naming_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], paper: str, spec: str, expected: list[str]
) -> None:
    folder = _paper(tmp_path, paper, spec)
    with pytest.raises(PaperError) as err:
        rp.load_paper(folder)
    for text in expected:
        assert text in str(err.value), str(err.value)
    # The command says so in one line, exit status 2, and runs nothing.
    out = tmp_path / "out"
    assert cli.main(["reproduce", str(folder), "--out", str(out)]) == 2
    stderr = capsys.readouterr().err
    assert stderr.startswith("tlbsim: error: ") and expected[-1] in stderr and "Traceback" not in stderr
    assert not (out / "sweeps").exists()


def test_a_stats_path_missing_from_the_runs_names_the_claim(tmp_path: Path) -> None:
    folder = _paper(tmp_path, GOOD_PAPER.replace("totals.shootdown_ipis_received", "totals.no_such_counter"))
    with pytest.raises(PaperError, match=r"claim .ipis.: ours.metric .totals.no_such_counter.: not in the stats"):
        tlbsim.reproduce(folder, tmp_path / "out", quick=True, jobs=1)


def test_an_unknown_paper_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["reproduce", "no-such-paper"]) == 2
    assert "unknown paper 'no-such-paper'" in capsys.readouterr().err
