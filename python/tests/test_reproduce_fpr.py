"""`tlbsim reproduce fpr --quick`: FPR's munmap micro-benchmark claims, beside the paper's."""

import tlbsim


def test_reproduce_fpr_quick_puts_every_claim_beside_ours(tmp_path):
    r = tlbsim.reproduce("fpr", tmp_path, quick=True, jobs=1)
    claims = {c["id"]: c for c in r.claims}
    assert {"fig7-case1-shootdowns", "fig8-case2-shootdowns", "fig8-case2-ideal", "fig9-case3-io", "fig11-case5-mixed"} <= set(claims)
    assert all(c["ours"] is not None for c in claims.values())
    # FPR skips the munmap shootdowns of case 2 (short runs: the VA cursor has not yet left
    # the first page table, so no page table is freed either).
    assert claims["fig8-case2-shootdowns"]["ours"] < 0.1
    # and the compute threads then run close to their ideal.
    assert claims["fig8-case2-ideal"]["ours"] > 0.9
