"""`tlbsim reproduce abis --quick`: every claim measured, and the orderings that hold at any
scale (Figs. 5–7)."""

import json

import tlbsim


def test_reproduce_abis_quick_measures_every_claim(tmp_path):
    r = tlbsim.reproduce("abis", tmp_path, quick=True, jobs=2)
    claims = {c["id"]: c for c in r.claims}
    assert {"fig5-cow-seq-shootdowns", "fig6-apache-shootdowns", "fig7-pbzip2-speedup",
            "fig7-linux-shootdowns-constant", "s53-linux-targets", "s53-abis-targets"} <= set(claims)
    assert all(c["ours"] is not None for c in r.claims), [c["id"] for c in r.claims if c["ours"] is None]
    # Private copy-on-write breaks need no remote flush under ABIS.
    assert claims["fig5-cow-seq-shootdowns"]["ours"] < 0.2
    # PBZIP2: the shootdowns come from freeing blocks and from reclaim, which the thread
    # count does not multiply; a shootdown of ABIS reaches no more cores than Linux's.
    assert 0.5 < claims["fig7-linux-shootdowns-constant"]["ours"] < 2.0
    assert claims["s53-abis-targets"]["ours"] <= claims["s53-linux-targets"]["ours"]
    assert json.loads(r.claims_path.read_text())[0]["paper"] == "abis"
