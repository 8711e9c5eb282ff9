"""`tlbsim reproduce didi --quick`: its claims, DIR/projection.json (DiDi §V-E) and
DIR/fig11.json (Fig. 11)."""

import json

import tlbsim


def test_reproduce_didi_quick_writes_claims_and_the_projection(tmp_path):
    r = tlbsim.reproduce("didi", tmp_path, quick=True, jobs=1)
    ids = {c["id"] for c in r.claims}
    for program in ("genome", "vacation", "labyrinth"):
        assert {f"fig10-{program}-linux-targets", f"fig10-{program}-didi-targets"} <= ids
    assert {
        "vi-a-apache-didi-false-positives",
        "fig4-wordcount16-linux-targets",
        "fig9-wordcount16-cost",
        "fig11-genome16-speedup",
    } <= ids
    assert all(c["ours"] is not None for c in r.claims if c["id"].endswith("linux-targets"))
    proj = json.loads((tmp_path / "projection.json").read_text())
    assert {16, 64, 128} <= set(proj["cores"])
    for key in ("linux_cycles_lost_fraction", "didi_cycles_lost_fraction"):
        assert len(proj[key]) == len(proj["cores"])
        assert all(v is not None and 0.0 <= v <= 1.0 for v in proj[key])
    # DiDi's directory and PTLBI lose fewer cycles than Linux's IPIs at every core count.
    assert all(d < lx for d, lx in zip(proj["didi_cycles_lost_fraction"], proj["linux_cycles_lost_fraction"]))
    # The fits are over the simulated 2-16 cores (a core count whose runs sent no shootdown
    # has no point).
    points = [p for p, _ in proj["fits"]["linux"]["S"]["points"]]
    assert set(points) <= {2.0, 4.0, 8.0, 16.0} and len(points) >= 3

    # Fig. 11: every Table III benchmark at 8, 16, 32 and 64 cores.
    rows = json.loads((tmp_path / "fig11.json").read_text())
    benchmarks = {"apache", "wordcount", "genome", "vacation", "labyrinth", "mactest", "cowsingle", "cowmultiple"}
    assert {(r["workload"], r["cores"]) for r in rows} == {(b, c) for b in benchmarks for c in (8, 16, 32, 64)}
    for r in rows:
        assert r["didi_shootdown_cycles"] <= r["linux_shootdown_cycles"], r
    # A single-threaded process's copy-on-write flushes are local: nothing for DiDi to save.
    for r in rows:
        if r["workload"] == "cowsingle":
            assert r["linux_shootdown_cycles"] == 0 and abs(r["speedup"] - 1.0) < 0.01, r
