"""`tlbsim reproduce didi --quick`: its claims and DIR/projection.json (DiDi §V-E)."""

import json

import tlbsim


def test_reproduce_didi_quick_writes_claims_and_the_projection(tmp_path):
    r = tlbsim.reproduce("didi", tmp_path, quick=True, jobs=1)
    ids = {c["id"] for c in r.claims}
    assert {"fig10-stm-linux-targets", "fig10-stm-didi-targets", "vi-a-apache-didi-false-positives"} <= ids
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
